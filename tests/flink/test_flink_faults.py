"""Faults of a real Flink job (a MiniCluster JVM, `KafkaSource`) on the real broker, each found and
named by the audit of what `flink-watch` wrote while following the job: `ingest-offsets` of the
group, then `reconcile` with the job's sink mode `none` (its output is discarded)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from app.contracts import vocabulary as vocab
from app.flink.metadata import read_checkpoint
from app.kafka.clients import plain_conf, retry_kafka
from app.reconcile.forensics.run import run_forensics
from app.reconcile.outputs import AuditRun
from app.storage.tables import tables_from_config
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec, wait_for
from tests.flink.watching import (
    LEDGER_WAIT_S,
    Processes,
    audit_config,
    completions,
    flink_import,
    processes,  # noqa: F401 (a fixture)
    reconcile_findings,
    restart_on_same_port,
    start_sidecar,
    stop_sidecar,
    wait_group,
    wait_recorded,
    wait_recorded_since,
)
from tests.support.kafka_admin import alter_group
from tests.support.streaming import KAFKA_TIMEOUT_S, create_topic, produce

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.spark]

JOB = "flink-orders"
PARTITIONS = 2


def test_a_flink_job_restored_from_an_older_savepoint_is_a_restart_replay_of_the_exact_ranges(
    spark: SparkSession,
    bootstrap: str,
    unique: str,
    tmp_path: Path,
    flink_stacks: Callable[[str], FlinkStack],
    processes: Processes,  # noqa: F811
) -> None:
    jobs, sidecars = processes
    topic, group = f"flink-faults-{unique}", f"flink-faults-{unique}-group"
    ledger, log = tmp_path / "ledger", tmp_path / "flink-watch.log"
    since = datetime.now(UTC) - timedelta(minutes=1)
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 200, PARTITIONS)
    job = FlinkJob(
        flink_stacks("1.20"), JobSpec(bootstrap, topic, group), tmp_path / "flink", on_start=jobs.append
    )
    sidecars.append(start_sidecar(job, JOB, group, ledger, log))
    job.start()

    # A savepoint once the job read the first 200 records: 100 per partition.
    job.wait_records_read(200)
    savepoint = job.savepoint()
    saved = {s.partition: s.raw_offset for s in read_checkpoint(str(savepoint)).offsets}
    assert saved == {0: 100, 1: 100}
    # 100 more read and checkpointed: the job's position is 150 per partition when it is killed.
    produce(bootstrap, topic, 100, PARTITIONS, start=200)
    job.wait_records_read(300)
    reached = job.checkpoint_after_now()
    wait_recorded(ledger, job.job_id, {int(reached["id"])})
    assert completions(ledger)[str(job.checkpoint_path(reached))] == {0: 150, 1: 150}
    job.kill9()

    # Restored from the older savepoint: it reads offsets 100..149 of each partition again.
    second = restart_on_same_port(job, savepoint)
    second.wait_records_read(100)
    after = second.checkpoint_after_now()
    wait_recorded(ledger, second.job_id, {int(after["id"])})
    second.cancel()
    stop_sidecar(sidecars[0], log)
    # The checkpoints (and commits) of both processes after the sidecar's last poll of each.
    assert flink_import(job.checkpoint_dir, ledger, JOB, group)["unreadable"] == []

    cfg = audit_config(tmp_path, bootstrap, ledger, JOB)
    found = reconcile_findings(spark, cfg, bootstrap, group, since, datetime.now(UTC), "rec-replay")
    replays = sorted(
        (f.partition, f.offset_start, f.offset_end, f.record_count, f.severity)
        for f in found
        if f.finding_type == vocab.RESTART_REPLAY
    )
    assert replays == [(0, 100, 150, 50, vocab.WARN), (1, 100, 150, 50, vocab.WARN)]
    assert all(
        f.topic == topic and f.job_name == JOB for f in found if f.finding_type == vocab.RESTART_REPLAY
    )
    # Re-reading loses nothing: no finding above warn, no skip.
    assert [
        (f.finding_type, f.severity) for f in found if vocab.severity_at_least(f.severity, vocab.ERROR)
    ] == []
    assert vocab.RESTART_SKIP not in {f.finding_type for f in found}


def test_flink_restarts_without_state_are_judged_from_where_the_sources_started(
    spark: SparkSession,
    bootstrap: str,
    unique: str,
    tmp_path: Path,
    flink_stacks: Callable[[str], FlinkStack],
    processes: Processes,  # noqa: F811
) -> None:
    """Three restarts without state, each judged against the checkpoint the job had reached:

    - while the job is down, an operator resets its group through the Admin API (as
      `kafka-consumer-groups --reset-offsets --execute` does): partition 0 back to offset 50 (read
      again), partition 1 to the end, 150 (what arrived since is never read); the job restarts from
      the group's offsets. The reset is the operator's: a FOREIGN_COMMIT per partition at the reset
      offset, named in an external offset change; the restart a RESTART_REPLAY of 50..99 on
      partition 0 and a RESTART_SKIP of 100..149 on partition 1;
    - 50 records a partition arrive while the job is down, and it restarts from `latest`: a
      RESTART_SKIP of exactly 150..199 on each partition;
    - the log's records are all read, then deleted (retention moved the log start to the end), and
      the job restarts from `earliest`: it starts where it had got, an exact restart with nothing at
      warn or above."""
    jobs, sidecars = processes
    topic, group = f"flink-reset-{unique}", f"flink-reset-{unique}-group"
    ledger, log = tmp_path / "ledger", tmp_path / "flink-watch.log"
    since = datetime.now(UTC) - timedelta(minutes=1)
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 200, PARTITIONS)
    spec = JobSpec(bootstrap, topic, group)
    job = FlinkJob(flink_stacks("1.20"), spec, tmp_path / "flink", on_start=jobs.append)
    sidecars.append(start_sidecar(job, JOB, group, ledger, log, bootstrap))
    job.start()
    job.wait_records_read(200)
    reached = job.checkpoint_after_now()
    wait_recorded_since(ledger, job.job_id, int(reached["id"]))
    # The job's own commit of what it read lands before the operator's reset.
    wait_group(bootstrap, group, topic, {0: 100, 1: 100})
    job.cancel()

    produce(bootstrap, topic, 100, PARTITIONS, start=200)
    reset = {0: 50, 1: 150}
    admin = AdminClient(plain_conf(bootstrap))
    for partition, offset in reset.items():
        alter_group(admin, group, topic, partition, offset)

    second = restart_on_same_port(job, None, replace(spec, start="committed"))
    second.wait_records_read(100)  # offsets 50..149 of partition 0, none of partition 1
    after = second.checkpoint_after_now()
    wait_recorded_since(ledger, second.job_id, int(after["id"]))
    wait_group(bootstrap, group, topic, {0: 150, 1: 150})
    second.cancel()

    # Down again while 50 records a partition arrive; restarted from the end of the log.
    produce(bootstrap, topic, 100, PARTITIONS, start=300)
    third = restart_on_same_port(job, None, replace(spec, start="latest"))
    wait_positioned(ledger, third.job_id)
    third.cancel()

    # Everything read so far leaves the log; restarted from its start, which is where the job got.
    delete_records(admin, topic, {p: 200 for p in range(PARTITIONS)})
    fourth = restart_on_same_port(job, None, replace(spec, start="earliest"))
    wait_positioned(ledger, fourth.job_id)
    fourth.cancel()
    stop_sidecar(sidecars[0], log)
    # The checkpoints (and commits) between the sidecar's last poll and each process's end.
    assert flink_import(job.checkpoint_dir, ledger, JOB, group)["unreadable"] == []

    cfg = audit_config(tmp_path, bootstrap, ledger, JOB)
    found = reconcile_findings(spark, cfg, bootstrap, group, since, datetime.now(UTC), "rec-reset")
    assert sorted(
        (f.topic, f.partition, f.offset_start, f.job_name, f.severity)
        for f in found
        if f.finding_type == vocab.FOREIGN_COMMIT
    ) == [(topic, p, o, JOB, vocab.ERROR) for p, o in sorted(reset.items())]
    # The job's own commits, before and after the reset, are its own.
    assert vocab.COMMIT_MISMATCH not in {f.finding_type for f in found}
    incidents = spark.read.format("delta").load(tables_from_config(cfg).incidents)
    kinds = {i.kind for i in incidents.collect()}
    assert vocab.INCIDENT_EXTERNAL_OFFSET_CHANGE in kinds

    restarts = sorted(
        (f.run_id, f.finding_type, f.partition, f.offset_start, f.offset_end, f.record_count, f.severity)
        for f in found
        if f.finding_type in (vocab.RESTART_REPLAY, vocab.RESTART_SKIP)
    )
    skipped = [(third.job_id, vocab.RESTART_SKIP, p, 150, 200, 50, vocab.CRITICAL) for p in range(PARTITIONS)]
    assert restarts == sorted(
        [
            (second.job_id, vocab.RESTART_REPLAY, 0, 50, 100, 50, vocab.WARN),
            (second.job_id, vocab.RESTART_SKIP, 1, 100, 150, 50, vocab.CRITICAL),
            *skipped,
        ]
    )
    assert all(
        f.topic == topic and f.job_name == JOB
        for f in found
        if f.finding_type in (vocab.RESTART_REPLAY, vocab.RESTART_SKIP)
    )
    # From the start of a log whose read records are gone: nothing at warn or above.
    assert [
        (f.finding_type, f.severity)
        for f in found
        if f.run_id == fourth.job_id and vocab.severity_at_least(f.severity, vocab.WARN)
    ] == [], sorted((f.run_id, f.finding_type, f.severity, f.partition) for f in found)
    run_forensics(spark, cfg, AuditRun(run_id="for-reset", now=datetime.now(UTC), since=since))
    judged = spark.read.format("delta").load(tables_from_config(cfg).restarts).collect()
    by_run = {
        (r.run_id, r.partition): (r.classification, r.resume_source, r.resumed_offset)
        for r in judged
        if r.job_name == JOB
    }
    assert {p: by_run[(fourth.job_id, p)] for p in range(PARTITIONS)} == {
        p: (vocab.RESTART_EXACT, vocab.RESTORE_EARLIEST, 200) for p in range(PARTITIONS)
    }
    assert {p: by_run[(third.job_id, p)][1:] for p in range(PARTITIONS)} == {
        p: (vocab.RESTORE_LATEST, 200) for p in range(PARTITIONS)
    }
    assert {p: by_run[(second.job_id, p)][1:] for p in range(PARTITIONS)} == {
        0: (vocab.RESTORE_GROUP, 50),
        1: (vocab.RESTORE_GROUP, 150),
    }


def wait_positioned(ledger: Path, job_id: str) -> None:
    """Until the ledger holds a checkpoint of the Flink job ``job_id`` with every partition's
    position: its Kafka source has its splits (a job that reads nothing gives no other sign)."""

    def probe() -> bool | None:
        held = [o for path, o in completions(ledger).items() if Path(path).parent.name == job_id]
        return True if any(len(o) == PARTITIONS for o in held) else None

    wait_for(probe, LEDGER_WAIT_S, f"a checkpoint of {job_id} with its partitions in the ledger", 1.0)


def delete_records(admin: AdminClient, topic: str, before: dict[int, int]) -> None:
    """Move each partition's log start to ``before`` (what retention does to records read long ago)."""
    request = [TopicPartition(topic, p, o) for p, o in before.items()]
    retry_kafka(
        lambda left: [f.result(left) for f in admin.delete_records(request, request_timeout=left).values()],
        f"deleting the records of {topic}",
        KAFKA_TIMEOUT_S,
    )
