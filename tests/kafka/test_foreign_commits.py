"""Commits the job never made, on the real broker. Two jobs of the reference job, each with its own
topic and group, write one ledger; the group offsets of both are ingested once and reconciled once:

1. `resets` -- moments after the job's last checkpoint and commit, an operator resets its group to
   earliest on one partition and to latest on another (skipping records that arrived since), and
   another client commits a lower offset with the job's group id on the third. Each lands inside
   `reconcile.commit_match_window_s` of the job's own commit; none carries an offset the job
   requested, so `reconcile` calls each a FOREIGN_COMMIT and none a COMMIT_MISMATCH (which would
   blame the job).
2. `restart` -- the common case of a reset: the group reset to latest while the job was down, the
   job restarted from the group's offsets and committing those very offsets moments later: the
   reset is still foreign, the job's own commits are its own.

By time alone each foreign commit could pass for the job's own: the clock-skew allowance
(`CLOCK_SKEW_S`) covers the moments between a job's stop and the commits, and the restart's first
commits. The verdict must come from the offsets. Each job's findings and incident are its own.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from app.config import AppConfig
from app.contracts import vocabulary as vocab
from app.contracts.instants import instant
from app.kafka.clients import plain_conf, retry_kafka
from app.kafka.commit import watermarks
from app.offsets_topic.run import ingest_offsets
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.storage.tables import tables_from_config
from app.stream.job import StreamJob
from tests.support.kafka_admin import alter_group
from tests.support.streaming import (
    KAFKA_TIMEOUT_S,
    create_topic,
    group_offsets,
    job_config,
    produce,
    until_all_read,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 3
PER_PARTITION = 30
ARRIVED_AFTER = 20  # per partition, after the job's last checkpoint: what a reset to latest skips
OTHER_CLIENT_OFFSET = 3  # a client far behind the job
CLOCK_SKEW_S = 120
NEW_ON_FIRST = 10  # records on partition 0 only after the restart's reset: its first batch


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


@dataclass(frozen=True)
class Job:
    topic: str
    group: str
    name: str


@dataclass(frozen=True)
class Audit:
    cfg: AppConfig
    resets: Job
    foreign: dict[int, int]  # 1. partition -> the offset each foreign commit carried
    group_after_run: dict[int, int]  # 1. the group's offsets after the job's run
    restart: Job
    latest: dict[int, int]  # 2. partition -> the log's end the group was reset to
    group_after_reset: dict[int, int]  # 2. the group's offsets after the reset
    tables: dict[str, list[dict[str, Any]]]  # the audit's tables once reconciled, by name


@pytest.fixture(scope="module")
def audit(spark: SparkSession, bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Audit:
    unique = uuid.uuid4().hex[:10]
    data_dir = tmp_path_factory.mktemp("foreign")
    resets = Job(f"foreign-{unique}", f"foreign-{unique}", "foreign-job")
    restart = Job(f"reset-{unique}", f"reset-{unique}", "reset-job")
    admin = AdminClient(plain_conf(bootstrap))
    skew = f"reconcile.clock_skew_s={CLOCK_SKEW_S}"

    def config(job: Job) -> AppConfig:
        return job_config(data_dir, bootstrap, job.topic, job.group, job.name, skew)

    for job in (resets, restart):
        create_topic(bootstrap, job.topic, PARTITIONS)
        produce(bootstrap, job.topic, PARTITIONS * PER_PARTITION, PARTITIONS)

    # 1. The job reads everything; records arrive; its group is reset and committed to by others.
    until = until_all_read(bootstrap, resets.topic, PARTITIONS)
    StreamJob(spark, config(resets), bootstrap, run_id="run-1").run(until)
    group_after_run = group_offsets(bootstrap, resets.group, resets.topic, PARTITIONS)
    produce(bootstrap, resets.topic, PARTITIONS * ARRIVED_AFTER, PARTITIONS, start=PARTITIONS * PER_PARTITION)
    bounds = log_bounds(bootstrap, resets.topic)
    foreign = {0: bounds[0][0], 1: bounds[1][1], 2: OTHER_CLIENT_OFFSET}
    alter_group(admin, resets.group, resets.topic, 0, foreign[0])  # reset to earliest: read everything again
    alter_group(admin, resets.group, resets.topic, 1, foreign[1])  # reset to latest: skip what arrived
    commit_as_another_client(bootstrap, resets.group, resets.topic, 2, foreign[2])

    # 2. The job stopped and its checkpoint was deleted; records arrived, and an operator reset the
    # group to latest (what `kafka-consumer-groups --reset-offsets --to-latest --execute` does).
    # The job restarted from the group's offsets; new records arrived on partition 0 only.
    first = StreamJob(spark, config(restart), bootstrap, run_id="run-first")
    first.run(until_all_read(bootstrap, restart.topic, PARTITIONS))
    shutil.rmtree(first.checkpoint_dir)
    produce(
        bootstrap, restart.topic, PARTITIONS * ARRIVED_AFTER, PARTITIONS, start=PARTITIONS * PER_PARTITION
    )
    latest = {p: high for p, (_, high) in log_bounds(bootstrap, restart.topic).items()}
    for partition, offset in latest.items():
        alter_group(admin, restart.group, restart.topic, partition, offset)
    group_after_reset = group_offsets(bootstrap, restart.group, restart.topic, PARTITIONS)
    produce(bootstrap, restart.topic, NEW_ON_FIRST, 1, start=PARTITIONS * (PER_PARTITION + ARRIVED_AFTER))
    StreamJob(spark, config(restart), bootstrap, run_id="run-restarted").run(
        until_all_read(bootstrap, restart.topic, PARTITIONS)
    )

    cfg = config(resets)  # the audit's settings: the same for both jobs
    ingest_offsets(spark, cfg, bootstrap, [resets.group, restart.group], run_id="ingest-1")
    run_reconcile(spark, cfg, AuditRun(run_id="rec-1", now=datetime.now(UTC)))
    # Read once with delta-rs: the claims need rows, not a Spark job each.
    located = tables_from_config(cfg)
    tables = {
        name: DeltaTable(located.named(name)).to_pyarrow_table().to_pylist()
        for name in ("ledger", "group_commits", "findings", "incidents")
    }
    return Audit(cfg, resets, foreign, group_after_run, restart, latest, group_after_reset, tables)


def ledger_of(audit: Audit, job: Job, event_type: str) -> list[dict[str, Any]]:
    return [r for r in audit.tables["ledger"] if (r["job_name"], r["event_type"]) == (job.name, event_type)]


def commits_of(audit: Audit, job: Job) -> list[dict[str, Any]]:
    return [r for r in audit.tables["group_commits"] if r["group_id"] == job.group]


def findings_of(audit: Audit, job: Job, finding_type: str) -> list[dict[str, Any]]:
    found = audit.tables["findings"]
    return [f for f in found if (f["job_name"], f["finding_type"]) == (job.name, finding_type)]


def external_change_of(audit: Audit, job: Job) -> dict[str, Any]:
    (incident,) = [
        i
        for i in audit.tables["incidents"]
        if (i["kind"], i["group_id"]) == (vocab.INCIDENT_EXTERNAL_OFFSET_CHANGE, job.group)
    ]
    return incident


# --- 1. resets and another client's commit -------------------------------------------------------


def test_the_job_committed_where_it_stopped_and_the_foreign_offsets_are_what_was_asked(audit: Audit) -> None:
    assert audit.group_after_run == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    assert audit.foreign == {0: 0, 1: PER_PARTITION + ARRIVED_AFTER, 2: OTHER_CLIENT_OFFSET}


def requested_by_the_job(audit: Audit) -> set[tuple[int, int]]:
    return {
        (r["partition"], r["offset"]) for r in ledger_of(audit, audit.resets, vocab.EVENT_COMMIT_REQUESTED)
    }


def test_the_job_never_asked_for_the_foreign_offsets(audit: Audit) -> None:
    """Else the test would prove nothing."""
    claimed = requested_by_the_job(audit)
    assert claimed
    assert not claimed & set(audit.foreign.items())


def test_each_foreign_commit_landed_inside_the_match_window_of_one_of_the_jobs_own(audit: Audit) -> None:
    """And within the clock-skew allowance of the job's stop: time alone cannot tell them apart."""
    claimed = requested_by_the_job(audit)
    commits = [
        (r["partition"], r["committed_offset"], r["commit_time"]) for r in commits_of(audit, audit.resets)
    ]
    own_times = [t for p, o, t in commits if (p, o) in claimed]
    window = audit.cfg.reconcile.commit_match_window_s
    (stopped,) = ledger_of(audit, audit.resets, vocab.EVENT_RUN_STOPPED)
    for partition, offset in audit.foreign.items():
        (made,) = [t for p, o, t in commits if (p, o) == (partition, offset)]
        assert any(0 <= (made - t).total_seconds() <= window for t in own_times), (partition, offset)
        assert (made - stopped["event_time"]).total_seconds() <= CLOCK_SKEW_S, (partition, offset)


def test_resets_and_another_clients_commit_are_foreign_not_the_jobs_mismatch(audit: Audit) -> None:
    job = audit.resets
    assert findings_of(audit, job, vocab.COMMIT_MISMATCH) == []
    assert sorted(
        (f["partition"], f["offset_start"], f["job_name"], f["severity"])
        for f in findings_of(audit, job, vocab.FOREIGN_COMMIT)
    ) == [(p, o, job.name, "error") for p, o in sorted(audit.foreign.items())]


def test_the_foreign_commits_are_an_external_offset_change(audit: Audit) -> None:
    assert f"changed outside {audit.resets.name}" in external_change_of(audit, audit.resets)["cause"]


# --- 2. a reset to latest before a restart from the group ----------------------------------------


def reset_times(audit: Audit) -> dict[int, datetime]:
    """The reset's commit time per partition: the first commit of the offset it set."""
    times: dict[tuple[int, int], list[datetime]] = {}
    for r in commits_of(audit, audit.restart):
        times.setdefault((r["partition"], r["committed_offset"]), []).append(r["commit_time"])
    return {p: min(times[(p, o)]) for p, o in audit.latest.items()}


def test_the_reset_moved_the_group_to_the_logs_end(audit: Audit) -> None:
    assert audit.group_after_reset == audit.latest


def test_the_restarted_job_committed_the_resets_offsets_moments_after_it(audit: Audit) -> None:
    """On partitions 1 and 2 (no new records there), inside the match window after the reset's
    commit of the same offset: else the test would prove nothing."""
    acked: dict[tuple[int, int], datetime] = {}
    for r in ledger_of(audit, audit.restart, vocab.EVENT_COMMIT_SUCCEEDED):
        if r["run_id"] == "run-restarted":
            key = (r["partition"], r["offset"])
            acked[key] = min(r["event_time"], acked.get(key, r["event_time"]))
    latest, resets = audit.latest, reset_times(audit)
    assert {(1, latest[1]), (2, latest[2])} <= set(acked)
    commits = commits_of(audit, audit.restart)
    window = audit.cfg.reconcile.commit_match_window_s
    for partition in (1, 2):
        offset = latest[partition]
        made = [r for r in commits if (r["partition"], r["committed_offset"]) == (partition, offset)]
        assert len(made) >= 2  # the reset's and the job's
        assert 0 < (acked[(partition, offset)] - resets[partition]).total_seconds() <= window


def test_a_reset_to_latest_before_a_restart_from_the_group_is_foreign_though_the_job_commits_it_next(
    audit: Audit,
) -> None:
    """Each acknowledgement explains one commit, its own: the three reset commits are
    FOREIGN_COMMITs, and the job's commits are no finding."""
    job = audit.restart
    assert findings_of(audit, job, vocab.COMMIT_MISMATCH) == []
    foreign = findings_of(audit, job, vocab.FOREIGN_COMMIT)
    assert sorted((f["partition"], f["offset_start"], f["job_name"], f["severity"]) for f in foreign) == [
        (p, o, job.name, "error") for p, o in sorted(audit.latest.items())
    ]
    resets = reset_times(audit)
    for f in foreign:
        made = datetime.fromisoformat(json.loads(f["evidence"])["commit_time"])
        assert instant(made) == instant(resets[f["partition"]])


def test_the_reset_commits_are_one_external_offset_change(audit: Audit) -> None:
    foreign = findings_of(audit, audit.restart, vocab.FOREIGN_COMMIT)
    incident = external_change_of(audit, audit.restart)
    assert sorted(incident["finding_ids"]) == sorted(f["finding_id"] for f in foreign)
