"""The faults of issue 26's test list on users' own jobs not covered by test_sink_modes.py (real
broker, Spark, Delta; the jobs are tests/kafka/user_jobs.py's, the audit attached in one line).

Each job runs once, with its driver killed and restarted; its other faults then come together,
each over offsets of its own, so one reconciliation of the window names them all and the driver's
start and the audit's passes are paid once per job:

(c) a 1:1 copy whose coordinate columns have the team's own names, over `subscribePattern` with a
    topic created while the job runs, in `coordinates` mode: killed with SIGKILL and restarted,
    nothing at warn or above; then its checkpoint deleted and restarted from `latest` (RESTART_SKIP
    over exactly the records in between, and GAP over them: the sink lacks them), the sink restored
    to before the new query's last batch (GAP over exactly that batch's offsets) and the old
    query's last batch appended a second time (DUPLICATE over exactly its offsets);
(b) a foreachBatch MERGE with txn ids, in `delta_batches` mode: killed and restarted, nothing at
    warn or above; then its checkpoint deleted and restarted from `latest` under the same txnAppId
    (RESTART_SKIP over the skipped ranges, and BATCH_NOT_IN_SINK over every batch of the new query:
    Delta skipped its writes as the old query's batches of the same ids).
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.attach import attach
from app.contracts import vocabulary as vocab
from app.contracts.offsets import TopicPartitionKey
from app.incidents.io import read_incidents
from app.storage.handles import AuditTables
from tests.kafka.user_jobs import (
    COPY_COLUMNS,
    JOB,
    MERGE_APP_ID,
    PARTITIONS,
    PER_TRIGGER,
    at_least_warn,
    audit_config,
    checkpoint_batches,
    copy_settings,
    kafka,
    produce_payments,
    reconcile,
    run_then_kill,
    run_to_end,
    sink_version_of,
    start_job,
)
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka

Ranges = dict[TopicPartitionKey, tuple[int, int]]


def committed(checkpoint: Path) -> dict[int, dict[TopicPartitionKey, int]]:
    """The checkpoint's committed batches, none before the query created its commit log."""
    return checkpoint_batches(checkpoint) if (checkpoint / "commits").is_dir() else {}


def batch_ranges(batches: dict[int, dict[TopicPartitionKey, int]], batch: int) -> Ranges:
    """[start, end) of every partition ``batch`` read records of; a partition new in the batch
    starts at 0 (Spark reads a partition that appears mid-run from its earliest offset)."""
    before = batches.get(batch - 1, {})
    spans = {tp: (before.get(tp, 0), end) for tp, end in batches[batch].items()}
    return {tp: (start, end) for tp, (start, end) in spans.items() if end > start}


def found_ranges(found: list[Any], finding_type: str) -> Ranges:
    named = [f for f in found if f.finding_type == finding_type]
    ranges = {(f.topic, f.partition): (f.offset_start, f.offset_end) for f in named}
    assert len(ranges) == len(named), f"more than one {finding_type} for a partition: {named}"
    return ranges


def run_attached(
    spark: SparkSession,
    bootstrap: str,
    kind: str,
    source: tuple[str, str],
    root: Path,
    starting: str = "earliest",
) -> str:
    """Job ``kind`` run in this process to the end of what ``source`` (Spark's subscription option
    and its value) holds, attached; its query id. Its checkpoint, sink and ledger are under ``root``."""
    how, what = source
    raw = kafka(spark, bootstrap, how, what, starting)
    query = start_job(kind, raw, root / "cp", root / "sink")
    audit = attach(query, job_name=JOB, ledger=str(root / "ledger"))
    run_to_end(query, audit)
    return str(query.id)


def driver_args(bootstrap: str, subscription: str, root: Path, kind: str) -> list[str]:
    cp, sink, ledger = root / "cp", root / "sink", root / "ledger"
    return [bootstrap, subscription, str(cp), str(sink), str(ledger), JOB, str(root / "driver"), kind]


def starting_offsets(offsets: dict[TopicPartitionKey, int]) -> str:
    """Spark's startingOffsets JSON for exactly ``offsets``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(out)


def append_again(spark: SparkSession, sink: Path, ranges: Ranges) -> None:
    """A non-idempotent writer's retry: the rows of ``ranges`` appended to the sink once more."""
    topic, partition, offset = (F.col(c) for c in COPY_COLUMNS.values())
    wanted = F.lit(False)
    for (t, p), (start, end) in ranges.items():
        wanted = wanted | ((topic == t) & (partition == p) & (offset >= start) & (offset < end))
    table = spark.read.format("delta").load(str(sink))
    rows = table.where(wanted).collect()
    assert len(rows) == sum(end - start for start, end in ranges.values())
    spark.createDataFrame(rows, table.schema).write.format("delta").mode("append").save(str(sink))


def test_copy_job_over_a_growing_pattern_killed_doubled_restored_and_restarted_from_latest(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    first, late = f"copy-{unique}-a", f"copy-{unique}-b"
    pattern = f"copy-{unique}-.*"
    create_topic(bootstrap, first, PARTITIONS)
    produced = {first: 8 * PER_TRIGGER, late: 2 * PER_TRIGGER}
    produce_payments(bootstrap, first, produced[first])
    checkpoint, sink = tmp_path / "cp", tmp_path / "sink"
    since = datetime.now(UTC) - timedelta(minutes=1)

    created: list[str] = []

    def late_topic_read() -> bool | None:
        """Once the driver completed a batch, the late topic is created; then until a completed
        batch read it: the partition set grew while the job ran."""
        batches = committed(checkpoint)
        if not batches:
            return None
        if not created:
            create_topic(bootstrap, late, PARTITIONS)
            produce_payments(bootstrap, late, produced[late])
            created.append(late)
        return True if any((late, 0) in ends for ends in batches.values()) else None

    late_topic_read.created = False  # type: ignore[attr-defined]
    run_then_kill(
        driver_args(bootstrap, pattern, tmp_path, "c"), late_topic_read, "the late topic in a batch"
    )
    ends_at_kill = committed(checkpoint)[max(committed(checkpoint))]
    assert ends_at_kill[(first, 0)] < produced[first] // PARTITIONS  # killed before it read everything

    query_id = run_attached(spark, bootstrap, "c", ("subscribePattern", pattern), tmp_path)
    batches = checkpoint_batches(checkpoint)
    last = max(batches)
    log_ends = {(t, p): n // PARTITIONS for t, n in produced.items() for p in range(PARTITIONS)}
    assert batches[last] == log_ends
    cfg = audit_config(tmp_path, bootstrap, sink, tmp_path / "ledger", *copy_settings(), mode="coordinates")

    clean = reconcile(spark, cfg, "rec-clean", since)
    assert at_least_warn(clean) == []
    assert vocab.UNCLEAN_STOP in {f.finding_type for f in clean}  # the kill was seen, and judged harmless

    # Three faults, each over offsets of its own, then one reconciliation names each: the
    # checkpoint deleted while records arrive and the job restarted from `latest` (RESTART_SKIP
    # over the records in between, and in this mode the sink's GAP over them), the sink restored
    # to before the new query's last batch (GAP over exactly its offsets), and the old query's
    # last batch appended a second time by a writer that does not check txn ids (DUPLICATE).
    shutil.rmtree(checkpoint)
    skipped = PER_TRIGGER  # per topic, produced while the job was down
    for topic in (first, late):
        produce_payments(bootstrap, topic, skipped, start=produced[topic])
    latest = {tp: end + skipped // PARTITIONS for tp, end in log_ends.items()}
    produce_payments(bootstrap, first, 2 * PER_TRIGGER, start=produced[first] + skipped)  # two batches
    second = run_attached(
        spark, bootstrap, "c", ("subscribePattern", pattern), tmp_path, starting_offsets(latest)
    )
    assert second != query_id  # a new checkpoint is a new query
    new_batches = checkpoint_batches(checkpoint)
    assert len(new_batches) == 2
    lost = batch_ranges(new_batches, 1)
    spark.sql(f"RESTORE TABLE delta.`{sink}` TO VERSION AS OF {sink_version_of(sink, 1, second) - 1}")
    doubled = batch_ranges(batches, last)
    append_again(spark, sink, doubled)

    found = reconcile(spark, cfg, "rec-faults", since)
    skips = {tp: (log_ends[tp], latest[tp]) for tp in latest}
    assert found_ranges(found, vocab.RESTART_SKIP) == skips
    named = [f for f in found if f.finding_type == vocab.GAP]
    gaps = [(f.topic, f.partition, f.offset_start, f.offset_end) for f in named]
    assert sorted(gaps) == sorted((*tp, start, end) for r in (skips, lost) for tp, (start, end) in r.items())
    assert found_ranges(found, vocab.DUPLICATE) == doubled
    assert sorted(at_least_warn(found)) == sorted(
        [(vocab.GAP, vocab.CRITICAL)] * len(gaps)
        + [(vocab.DUPLICATE, vocab.ERROR)] * len(doubled)
        + [(vocab.RESTART_SKIP, vocab.CRITICAL)] * len(skips)
    )


def test_merge_job_killed_and_restarted_then_restarted_from_latest(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = f"merge-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produced = 6 * PER_TRIGGER
    produce_payments(bootstrap, topic, produced)
    checkpoint, sink = tmp_path / "cp", tmp_path / "sink"
    spark.createDataFrame([], "id LONG, amount DOUBLE").write.format("delta").save(str(sink))
    since = datetime.now(UTC) - timedelta(minutes=1)

    def two_batches() -> int | None:
        return len(committed(checkpoint)) if len(committed(checkpoint)) >= 2 else None

    run_then_kill(driver_args(bootstrap, topic, tmp_path, "b"), two_batches, "two batches of the driver")
    assert len(committed(checkpoint)) < 6  # killed before it read everything

    first = run_attached(spark, bootstrap, "b", ("subscribe", topic), tmp_path)
    batches = checkpoint_batches(checkpoint)
    reached = batches[max(batches)]
    assert reached == {(topic, p): produced // PARTITIONS for p in range(PARTITIONS)}
    app_id = f"reconcile.sink_app_id_by_job.{JOB}={MERGE_APP_ID}"
    cfg = audit_config(tmp_path, bootstrap, sink, tmp_path / "ledger", app_id)

    killed = reconcile(spark, cfg, "rec-killed", since)
    assert at_least_warn(killed) == []
    assert vocab.UNCLEAN_STOP in {f.finding_type for f in killed}

    shutil.rmtree(checkpoint)
    skipped = PER_TRIGGER
    produce_payments(bootstrap, topic, skipped, start=produced)
    latest = {tp: end + skipped // PARTITIONS for tp, end in reached.items()}
    produce_payments(bootstrap, topic, PER_TRIGGER, start=produced + skipped)
    second = run_attached(spark, bootstrap, "b", ("subscribe", topic), tmp_path, starting_offsets(latest))
    assert second != first

    after = reconcile(spark, cfg, "rec-latest", since)
    assert found_ranges(after, vocab.RESTART_SKIP) == {tp: (reached[tp], latest[tp]) for tp in latest}
    # The second query's batch ids start at 0 again under the same txnAppId: Delta skipped its
    # MERGEs as already applied (the first query's batches of those ids), so its output is lost.
    renewed = checkpoint_batches(checkpoint)
    assert max(renewed) <= max(batches)  # every batch id of the new query is one the old one wrote
    lost = {
        (b, tp): (renewed[b - 1][tp] if b - 1 in renewed else latest[tp], end)
        for b in renewed
        for tp, end in renewed[b].items()
    }
    lost = {key: span for key, span in lost.items() if span[1] > span[0]}
    assert sum(end - start for start, end in lost.values()) == PER_TRIGGER
    named = [f for f in after if f.finding_type == vocab.BATCH_NOT_IN_SINK]
    assert {(f.checkpoint_id, (f.topic, f.partition)): (f.offset_start, f.offset_end) for f in named} == lost
    assert {(f.severity, f.status) for f in named} == {(vocab.CRITICAL, vocab.CONFIRMED)}
    assert vocab.BATCH_WRITTEN_TWICE not in {f.finding_type for f in after}
    incidents = [
        i
        for i in read_incidents(AuditTables.from_config(cfg, spark).incidents)
        if i.kind == vocab.INCIDENT_LOST_BATCH
    ]
    assert sum(i.impact.records_lost or 0 for i in incidents) == PER_TRIGGER
    assert {i.severity for i in incidents} == {vocab.CRITICAL}
