"""Commits the job never made, on the real broker: moments after the reference job's last
checkpoint and commit, an operator resets its group to earliest on one partition and to latest on
another (skipping records that arrived since), and another client commits a lower offset with the
job's group id on the third. Each lands inside `reconcile.commit_match_window_s` of the job's own
commit; none carries an offset the job requested, so `reconcile` calls each a FOREIGN_COMMIT and
none a COMMIT_MISMATCH (which would blame the job). And the common case of a reset: the group reset
to latest while the job was down, the job restarted from the group's offsets and committing those
very offsets moments later: the reset is still foreign, the job's own commits are its own."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.contracts import vocabulary as vocab
from app.contracts.instants import instant
from app.kafka.clients import plain_conf, retry_kafka
from app.kafka.commit import watermarks
from app.offsets_topic.run import ingest_offsets
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.stream.job import StreamJob
from tests.support.kafka_admin import alter_group
from tests.support.streaming import (
    KAFKA_TIMEOUT_S,
    create_topic,
    group_offsets,
    job_config,
    produce,
    read,
    until_all_read,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 3
PER_PARTITION = 30
ARRIVED_AFTER = 20  # per partition, after the job's last checkpoint: what a reset to latest skips
OTHER_CLIENT_OFFSET = 3  # a client far behind the job
# By time alone each foreign commit could pass for the job's own: the clock-skew allowance covers
# the moments between the job's stop and the commits. The verdict must come from the offsets.
CLOCK_SKEW_S = 120


def log_bounds(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Each partition's (earliest, latest) offsets: what a reset to earliest or latest commits."""
    consumer = Consumer(plain_conf(bootstrap, **{"group.id": f"{topic}-reset-tool"}))
    try:
        bounds = watermarks(consumer, [(topic, p) for p in range(PARTITIONS)], KAFKA_TIMEOUT_S)
    finally:
        consumer.close()
    return {p: bounds[(topic, p)] for p in range(PARTITIONS)}


def commit_as_another_client(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    """A second application configured with the job's group id, committing its own position."""
    consumer = Consumer(plain_conf(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        retry_kafka(
            lambda left: consumer.commit(
                offsets=[TopicPartition(topic, partition, offset)], asynchronous=False
            ),
            f"committing as another client of {group}",
            KAFKA_TIMEOUT_S,
        )
    finally:
        consumer.close()


def test_resets_and_another_clients_commit_are_foreign_not_the_jobs_mismatch(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic, group = f"foreign-{unique}", f"foreign-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, PARTITIONS * PER_PARTITION, PARTITIONS)
    cfg = job_config(
        tmp_path, bootstrap, topic, group, "foreign-job", f"reconcile.clock_skew_s={CLOCK_SKEW_S}"
    )
    StreamJob(spark, cfg, bootstrap, run_id="run-1").run(until_all_read(bootstrap, topic, PARTITIONS))
    assert group_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(
        range(PARTITIONS), PER_PARTITION
    )

    produce(bootstrap, topic, PARTITIONS * ARRIVED_AFTER, PARTITIONS, start=PARTITIONS * PER_PARTITION)
    admin = AdminClient(plain_conf(bootstrap))
    bounds = log_bounds(bootstrap, topic)
    foreign = {0: bounds[0][0], 1: bounds[1][1], 2: OTHER_CLIENT_OFFSET}
    alter_group(admin, group, topic, 0, foreign[0])  # reset to earliest: read everything again
    alter_group(admin, group, topic, 1, foreign[1])  # reset to latest: skip what arrived
    commit_as_another_client(bootstrap, group, topic, 2, foreign[2])
    assert foreign == {0: 0, 1: PER_PARTITION + ARRIVED_AFTER, 2: OTHER_CLIENT_OFFSET}

    ingest_offsets(spark, cfg, bootstrap, [group], run_id="ingest-1")
    run_reconcile(spark, cfg, AuditRun(run_id="rec-1", now=datetime.now(UTC)))

    # The job itself never asked for these offsets (else the test would prove nothing) ...
    ledger = read(spark, cfg, "ledger").where(F.col("event_type") == vocab.EVENT_COMMIT_REQUESTED)
    claimed = {(r.partition, r.offset) for r in ledger.collect()}
    assert claimed
    assert not claimed & set(foreign.items())
    # ... and each foreign commit landed inside the match window of one of the job's own.
    commits = read(spark, cfg, "group_commits").where(F.col("group_id") == group).collect()
    own_times = [r.commit_time for r in commits if (r.partition, r.committed_offset) in claimed]
    window = cfg.reconcile.commit_match_window_s
    stopped = read(spark, cfg, "ledger").where(F.col("event_type") == vocab.EVENT_RUN_STOPPED).first()
    assert stopped is not None
    for partition, offset in foreign.items():
        (made,) = [r.commit_time for r in commits if (r.partition, r.committed_offset) == (partition, offset)]
        assert any(0 <= (made - t).total_seconds() <= window for t in own_times), (partition, offset)
        assert (made - stopped.event_time).total_seconds() <= CLOCK_SKEW_S, (partition, offset)

    findings = read(spark, cfg, "findings").collect()
    assert [f for f in findings if f.finding_type == vocab.COMMIT_MISMATCH] == []
    assert sorted(
        (f.partition, f.offset_start, f.job_name, f.severity)
        for f in findings
        if f.finding_type == vocab.FOREIGN_COMMIT
    ) == [(p, o, "foreign-job", "error") for p, o in sorted(foreign.items())]
    incidents = read(spark, cfg, "incidents").where(F.col("kind") == vocab.INCIDENT_EXTERNAL_OFFSET_CHANGE)
    (incident,) = incidents.collect()
    assert "changed outside foreign-job" in incident.cause


NEW_ON_FIRST = 10  # records on partition 0 only after the reset: the restarted job's first batch


def test_a_reset_to_latest_before_a_restart_from_the_group_is_foreign_though_the_job_commits_it_next(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """The job stopped and its checkpoint was deleted; records arrived, and an operator reset the
    group to latest (what `kafka-consumer-groups --reset-offsets --to-latest --execute` does). The
    job restarted from the group's offsets; new records arrived on partition 0 only, so its first
    checkpoint committed on partitions 1 and 2 the very offsets the reset had committed, moments
    later and inside the match window of its acknowledgement. Each acknowledgement explains one
    commit, its own: the three reset commits are FOREIGN_COMMITs of one external_offset_change
    incident, and the job's commits are no finding."""
    topic, group, job = f"reset-{unique}", f"reset-{unique}", "reset-job"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, PARTITIONS * PER_PARTITION, PARTITIONS)
    cfg = job_config(tmp_path, bootstrap, topic, group, job)
    first = StreamJob(spark, cfg, bootstrap, run_id="run-1")
    first.run(until_all_read(bootstrap, topic, PARTITIONS))
    shutil.rmtree(first.checkpoint_dir)

    produce(bootstrap, topic, PARTITIONS * ARRIVED_AFTER, PARTITIONS, start=PARTITIONS * PER_PARTITION)
    admin = AdminClient(plain_conf(bootstrap))
    latest = {p: high for p, (_, high) in log_bounds(bootstrap, topic).items()}
    for partition, offset in latest.items():
        alter_group(admin, group, topic, partition, offset)
    assert group_offsets(bootstrap, group, topic, PARTITIONS) == latest
    produce(bootstrap, topic, NEW_ON_FIRST, 1, start=PARTITIONS * (PER_PARTITION + ARRIVED_AFTER))
    StreamJob(spark, cfg, bootstrap, run_id="run-2").run(until_all_read(bootstrap, topic, PARTITIONS))

    ingest_offsets(spark, cfg, bootstrap, [group], run_id="ingest-1")
    run_reconcile(spark, cfg, AuditRun(run_id="rec-1", now=datetime.now(UTC)))

    # The restarted job was acknowledged the reset's offsets on partitions 1 and 2 (else the test
    # would prove nothing), each inside the match window after the reset's commit of it ...
    ledger = read(spark, cfg, "ledger")
    acks = ledger.where((F.col("event_type") == vocab.EVENT_COMMIT_SUCCEEDED) & (F.col("run_id") == "run-2"))
    acked: dict[tuple[int, int], datetime] = {}
    for r in acks.collect():
        acked[(r.partition, r.offset)] = min(r.event_time, acked.get((r.partition, r.offset), r.event_time))
    assert {(1, latest[1]), (2, latest[2])} <= set(acked)
    commits = read(spark, cfg, "group_commits").where(F.col("group_id") == group).collect()
    times: dict[tuple[int, int], list[datetime]] = {}
    for r in commits:
        times.setdefault((r.partition, r.committed_offset), []).append(r.commit_time)
    resets = {p: min(times[(p, o)]) for p, o in latest.items()}
    window = cfg.reconcile.commit_match_window_s
    for partition in (1, 2):
        assert len(times[(partition, latest[partition])]) >= 2  # the reset's and the job's
        assert 0 < (acked[(partition, latest[partition])] - resets[partition]).total_seconds() <= window

    # ... yet the reset's commits are foreign, and the job's own commits are no finding.
    findings = read(spark, cfg, "findings").collect()
    assert [f for f in findings if f.finding_type == vocab.COMMIT_MISMATCH] == []
    foreign = [f for f in findings if f.finding_type == vocab.FOREIGN_COMMIT]
    assert sorted((f.partition, f.offset_start, f.job_name, f.severity) for f in foreign) == [
        (p, o, job, "error") for p, o in sorted(latest.items())
    ]
    for f in foreign:
        made = datetime.fromisoformat(json.loads(f.evidence)["commit_time"])
        assert instant(made) == instant(resets[f.partition])
    incidents = read(spark, cfg, "incidents").where(F.col("kind") == vocab.INCIDENT_EXTERNAL_OFFSET_CHANGE)
    (incident,) = incidents.collect()
    assert sorted(incident.finding_ids) == sorted(f.finding_id for f in foreign)
