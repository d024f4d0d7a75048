"""The broker down across several checkpoints of a real Flink job (Flink 1.20, `KafkaSource`, its own
broker, killed for real and started again on the same ports and storage): checkpoints complete
while the source's commits fail. The audit names the job's COMMIT_FAILURE (from the source's
commitsFailed counter, which `flink-watch` samples) and the checkpoints whose commits never reached
the group as SKIPPED_COMMITs that the commit after the outage covered, all at info; nothing is lost
and nothing is at warn or above.

The checkpoints taken during the outage hold offsets that move: the job works through a backlog it
fetched before the broker went (a slow operator chained to the source, 20 ms a record), so each
checkpoint has offsets of its own that only a later commit can cover. The outage lasts until the
sidecar recorded a failed commit and three more checkpoints completed (events, not a duration)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from app.contracts import vocabulary as vocab
from app.demo.local_kafka import LocalKafka
from app.runtime import jvm
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec, now_ms, wait_for
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
)
from tests.support.streaming import create_topic, produce

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.spark]

JOB = "flink-outage"
PARTITIONS = 2
RECORDS = 2000  # 1,000 a partition: 20 s of work for each subtask at 20 ms a record


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    broker = LocalKafka(
        tmp_path / "kafka", jvm.resolve_classpath("kafka"), offsets_partitions=1, die_with_parent=True
    )
    broker.start()
    yield broker
    broker.stop()


def failed_commits(ledger: Path) -> int:
    """The COMMIT_FAILED rows the sidecar wrote (the source's commitsFailed rose)."""
    if not (ledger / "_delta_log").is_dir():
        return 0
    rows = DeltaTable(str(ledger)).to_pyarrow_table().to_pylist()
    return sum(1 for r in rows if r["event_type"] == vocab.EVENT_COMMIT_FAILED)


def test_a_broker_outage_across_checkpoints_is_a_commit_failure_and_covered_skips_of_the_job(
    spark: SparkSession,
    own_broker: LocalKafka,
    unique: str,
    tmp_path: Path,
    flink_stacks: Callable[[str], FlinkStack],
    processes: Processes,  # noqa: F811
) -> None:
    jobs, sidecars = processes
    bootstrap = own_broker.start().bootstrap_servers
    topic, group = f"flink-outage-{unique}", f"flink-outage-{unique}-group"
    ledger, log = tmp_path / "ledger", tmp_path / "flink-watch.log"
    since = datetime.now(UTC) - timedelta(minutes=1)
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, RECORDS, PARTITIONS)
    spec = JobSpec(bootstrap, topic, group, record_delay_ms=20)
    job = FlinkJob(flink_stacks("1.20"), spec, tmp_path / "flink", on_start=jobs.append)
    sidecars.append(start_sidecar(job, JOB, group, ledger, log))
    job.start()
    # The source fetched its backlog (a first batch at least) and works through it: the broker goes.
    wait_for(lambda: True if (job.records_read() or 0) > 50 else None, LEDGER_WAIT_S, "records read")
    own_broker.kill()
    down_from = now_ms()
    wait_for(lambda: True if failed_commits(ledger) else None, LEDGER_WAIT_S, "a failed commit recorded")
    # three checkpoints of the outage: triggered after the broker went
    job.wait_triggered_after(down_from, 3)
    own_broker.start()

    job.wait_records_read(RECORDS)
    wait_group(bootstrap, group, topic, {p: RECORDS // PARTITIONS for p in range(PARTITIONS)})
    job.cancel()
    summary = json.loads(stop_sidecar(sidecars[0], log))
    assert summary["missed"] == []
    assert summary["failed_commits"] > 0
    assert flink_import(job.checkpoint_dir, ledger, JOB, group)["unreadable"] == []

    cfg = audit_config(tmp_path, bootstrap, ledger, JOB)
    found = reconcile_findings(spark, cfg, bootstrap, group, since, datetime.now(UTC), "rec-outage")
    # Nothing lost, nothing anybody else committed: nothing at warn or above.
    assert serious(found) == [], evidence(found)
    assert vocab.FOREIGN_COMMIT not in {f.finding_type for f in found}
    failures = [f for f in found if f.finding_type == vocab.COMMIT_FAILURE]
    assert failures, evidence(found, vocab.INFO)
    assert {(f.job_name, f.group_id, f.severity) for f in failures} == {(JOB, group, vocab.INFO)}
    # The checkpoints of the outage: their commits never reached the group, the one after it
    # covered them.
    skipped = [f for f in found if f.finding_type == vocab.SKIPPED_COMMIT]
    covered = [f for f in skipped if json.loads(f.evidence)["covered_by_offset"] is not None]
    assert len({f.checkpoint_id for f in covered}) >= 2, evidence(found, vocab.INFO)
    assert all((f.severity, f.status, f.job_name) == (vocab.INFO, vocab.BENIGN, JOB) for f in skipped)
    reasons = {json.loads(f.evidence)["reason"] for f in covered}
    assert reasons <= {vocab.SKIPPED_FAILED, vocab.SKIPPED_SUPERSEDED}, reasons
