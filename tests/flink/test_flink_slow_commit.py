"""A slow commit on the legacy `FlinkKafkaConsumer` (Flink 1.20, the real broker): checkpoints complete
while the consumer's commit of an earlier one is still pending, and the consumer replaces the
pending commit by the newest checkpoint's ("Committing offsets to Kafka takes longer than the
checkpoint interval. Skipping commit of previous offsets ..."). The audit names each skipped
checkpoint a SKIPPED_COMMIT, superseded by the checkpoint whose commit covered it, at info; nothing
at warn or above.

How the commit is made slow, with no timing trick on the broker: a slow operator chained to the
source (20 ms a record, as a job calling out per record would be). The consumer's thread hands each
polled batch to the source's thread and waits until it is taken; it learns that its commit was
acknowledged only in its next poll, so while the source's thread spends 10 s on one batch of 500
records, its first commit stays in progress and every later checkpoint's commit replaces the one
still pending. With checkpoints every second that is several skips, each observed in the job's log
before anything is judged."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.contracts import vocabulary as vocab
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec, wait_for
from tests.flink.watching import (
    LEDGER_WAIT_S,
    Processes,
    audit_config,
    evidence,
    flink_import,
    processes,  # noqa: F401 (a fixture)
    reconcile_findings,
    serious,
    start_sidecar,
    stop_sidecar,
    wait_group,
    wait_recorded,
)
from tests.support.streaming import create_topic, produce

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.spark]

JOB = "flink-slow-commit"
PARTITIONS = 2
RECORDS = 1000  # 500 a partition: one batch (max.poll.records) for each subtask's consumer
SKIPPING = b"Skipping commit of previous offsets"


def test_commits_the_legacy_consumer_skips_behind_a_slow_operator_are_superseded_skips_at_info(
    spark: SparkSession,
    bootstrap: str,
    unique: str,
    tmp_path: Path,
    flink_stacks: Callable[[str], FlinkStack],
    processes: Processes,  # noqa: F811
) -> None:
    jobs, sidecars = processes
    topic, group = f"flink-slow-{unique}", f"flink-slow-{unique}-group"
    ledger, log = tmp_path / "ledger", tmp_path / "flink-watch.log"
    since = datetime.now(UTC) - timedelta(minutes=1)
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, RECORDS, PARTITIONS)
    # Retained well beyond a starved sidecar's first look: this test is about commits, not capture.
    spec = JobSpec(bootstrap, topic, group, source="legacy", record_delay_ms=20, num_retained=10)
    job = FlinkJob(flink_stacks("1.20"), spec, tmp_path / "flink", on_start=jobs.append)
    sidecars.append(start_sidecar(job, JOB, group, ledger, log))
    job.start()

    # The consumer says it skipped (the seeds' warning), while the job still works through its batch.
    wait_for(
        lambda: True if SKIPPING in job.log_file.read_bytes() else None,
        LEDGER_WAIT_S,
        "the legacy consumer skipping a commit",
        1.0,
    )
    job.wait_records_read(RECORDS)
    reached = job.checkpoint_after_now()
    wait_recorded(ledger, job.job_id, {int(reached["id"])})
    wait_group(bootstrap, group, topic, {p: RECORDS // PARTITIONS for p in range(PARTITIONS)})
    job.cancel()
    summary = json.loads(stop_sidecar(sidecars[0], log))
    assert summary["missed"] == []
    assert flink_import(job.checkpoint_dir, ledger, JOB, group)["unreadable"] == []

    cfg = audit_config(tmp_path, bootstrap, ledger, JOB)
    found = reconcile_findings(spark, cfg, bootstrap, group, since, datetime.now(UTC), "rec-slow")
    assert serious(found) == [], evidence(found)
    skipped = [f for f in found if f.finding_type == vocab.SKIPPED_COMMIT]
    assert all((f.severity, f.status) == (vocab.INFO, vocab.BENIGN) for f in skipped)
    # The checkpoints whose commit the job requested (a checkpoint taken before the source emitted
    # anything has nothing to commit: -1, the legacy consumer's "none processed", is never sent).
    requested = [f for f in skipped if json.loads(f.evidence)["requested"]]
    assert len({f.checkpoint_id for f in requested}) >= 2, evidence(found, vocab.INFO)
    for f in requested:
        detail = json.loads(f.evidence)
        assert (f.job_name, f.topic) == (JOB, topic)
        assert detail["reason"] == vocab.SKIPPED_SUPERSEDED, detail
        # superseded by a later checkpoint of the job, whose commit covered its offset
        assert detail["superseded_by"] > f.checkpoint_id, detail
        assert detail["covered_by_offset"] > f.offset_start, detail
    assert vocab.FOREIGN_COMMIT not in {f.finding_type for f in found}
