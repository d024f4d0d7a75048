"""Faults of a real Flink job (a MiniCluster JVM, `KafkaSource`) on the real broker, each found and
named by the audit of what `flink-watch` wrote while following the job: `ingest-offsets` of the
group, then `reconcile` with the job's sink mode `none` (its output is discarded)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.contracts import vocabulary as vocab
from app.flink.metadata import read_checkpoint
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec
from tests.flink.watching import (
    Processes,
    audit_config,
    completions,
    processes,  # noqa: F401 (a fixture)
    reconcile_findings,
    restart_on_same_port,
    start_sidecar,
    stop_sidecar,
    wait_recorded,
)
from tests.kafka.streaming import create_topic, produce

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
