"""Sink modes on a user's own jobs (real broker, Spark, Delta): the audit judges a sink without
coordinate columns by its transaction log (`delta_batches`), or not at all (`none`).

Each job is attached in one line and run once to the end; its sink is then damaged as people
damage sinks, and `reconcile` must name the batch with its Delta version and offsets:
(a) Spark's own Delta sink, a RESTORE to before a batch; (b) a foreachBatch MERGE keyed by the
payment id with txn ids, the same RESTORE; and a foreachBatch appending through delta-rs with
txn ids, which (unlike Spark's writer) does not skip a transaction id the table already holds, so
one batch appended twice lands twice. Before the damage, a clean run has nothing at warn or above.
Last, (a) with its checkpoint deleted and restarted past the log's end: the ledger's restart rule
names the skipped ranges, in this mode as in any; and (a) killed and restarted. Job (c) (a copy
with coordinate columns) and (b)'s restarts are in test_user_job_faults.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import CommitProperties, Transaction, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.attach import attach
from app.contracts import vocabulary as vocab
from app.errors import ConfigError, UsageError
from app.incidents import repair
from app.incidents.io import read_incidents
from app.incidents.remedy import ReplayStep
from app.kafka.gaps import kafka_gap_confirmer
from app.kafka.times import KafkaTimes
from app.reconcile.forensics.run import run_forensics
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.storage.handles import AuditTables
from app.storage.tables import tables_from_config
from tests.kafka.user_jobs import (
    JOB,
    MERGE_APP_ID,
    PARTITIONS,
    PER_TRIGGER,
    at_least_warn,
    audit_config,
    batch_ranges,
    checkpoint_batches,
    kafka,
    merge_payments,
    payments,
    payments_query,
    produce_payments,
    reconcile,
    run_then_kill,
    run_to_end,
    sink_version_of,
)
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka

RECORDS = 3 * PER_TRIGGER  # three batches
APP_ID_SETTING = f"reconcile.sink_app_id_by_job.{JOB}={MERGE_APP_ID}"


def restore(spark: SparkSession, sink: Path, version: int) -> None:
    spark.sql(f"RESTORE TABLE delta.`{sink}` TO VERSION AS OF {version}")


def lost_batches(found: list[Any]) -> dict[tuple[int, int], tuple[int, int, int]]:
    """(batch, partition) -> (offset_start, offset_end, Delta version) of every BATCH_NOT_IN_SINK."""
    return {
        (f.checkpoint_id, f.partition): (
            f.offset_start,
            f.offset_end,
            json.loads(f.evidence)["sink_versions"][0],
        )
        for f in found
        if f.finding_type == vocab.BATCH_NOT_IN_SINK
    }


def run_attached(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    ledger: Path,
    start: Callable[[DataFrame], Any],
    starting: str = "earliest",
) -> str:
    """The user's job run to the end with the audit attached; the query's id."""
    query = start(kafka(spark, bootstrap, "subscribe", topic, starting))
    audit = attach(query, job_name=JOB, ledger=str(ledger))
    run_to_end(query, audit)
    return str(query.id)


def test_spark_delta_sink_clean_then_a_restore_names_the_lost_batch(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = f"sink-a-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, RECORDS)
    checkpoint, sink, ledger = tmp_path / "cp", tmp_path / "payments", tmp_path / "ledger"
    since = datetime.now(UTC) - timedelta(minutes=1)
    query_id = run_attached(
        spark, bootstrap, topic, checkpoint, ledger, lambda raw: payments_query(raw, checkpoint, sink)
    )
    assert sorted(checkpoint_batches(checkpoint)) == [0, 1, 2]
    cfg = audit_config(tmp_path, bootstrap, sink, ledger)

    assert at_least_warn(reconcile(spark, cfg, "rec-clean", since)) == []
    summary = spark.read.format("delta").load(tables_from_config(cfg).partition_summary)
    counts = [r.sink_count for r in summary.where(F.col("reconcile_run_id") == "rec-clean").collect()]
    assert counts == [None] * PARTITIONS  # rows are not counted in this mode: unknown, not zero

    # `none` reads no sink at all: a sink that is not even there changes nothing.
    nowhere = audit_config(tmp_path, bootstrap, tmp_path / "absent", ledger)
    with pytest.raises(ConfigError, match=f"tables.sink_by_job.{JOB}"):
        reconcile(spark, nowhere, "rec-absent", since)
    only_ledger = f"reconcile.sink_mode_by_job.{JOB}=none"
    blind = audit_config(tmp_path, bootstrap, tmp_path / "absent", ledger, only_ledger)
    assert at_least_warn(reconcile(spark, blind, "rec-none", since)) == []

    lost = sink_version_of(sink, 1, query_id)
    restore(spark, sink, lost - 1)  # the sink as it was before batch 1
    found = reconcile(spark, cfg, "rec-restored", since)

    expected = {
        (b, p): (*batch_ranges(checkpoint, topic, b)[p], sink_version_of(sink, b, query_id))
        for b in (1, 2)
        for p in range(PARTITIONS)
    }
    assert lost_batches(found) == expected
    assert at_least_warn(found) == [(vocab.BATCH_NOT_IN_SINK, vocab.CRITICAL)] * len(expected)
    [incident] = [
        i
        for i in read_incidents(AuditTables.from_config(cfg, spark).incidents)
        if i.kind == vocab.INCIDENT_LOST_BATCH
    ]
    assert incident.severity == vocab.CRITICAL
    assert incident.impact.records_lost == sum(end - start for start, end, _ in expected.values())
    [replay] = [s for s in incident.remedy.steps if isinstance(s, ReplayStep)]
    assert {(r.partition, r.start, r.end) for r in replay.ranges} == {
        (p, start, end) for (_, p), (start, end, _) in expected.items()
    }
    assert json.loads(replay.spark_options()[0]["startingOffsets"]) == {topic: {"0": expected[(1, 0)][0]}}
    # The plan is for the user's job to carry out: repair writes coordinates sinks only (exit 2).
    with pytest.raises(UsageError, match=f"coordinates sinks only.*reconcile.sink_mode_by_job.{JOB}"):
        repair.execute(
            spark, cfg, incident, AuditTables.from_config(cfg, spark).sink.at(str(sink)), lambda: bootstrap
        )


def test_foreach_batch_merge_clean_then_a_restore_names_the_lost_batch(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = f"sink-b-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, RECORDS)
    checkpoint, sink, ledger = tmp_path / "cp", tmp_path / "payments", tmp_path / "ledger"
    spark.createDataFrame([], "id LONG, amount DOUBLE").write.format("delta").save(str(sink))
    since = datetime.now(UTC) - timedelta(minutes=1)

    def start(raw: DataFrame) -> Any:
        writer = payments(raw).writeStream.foreachBatch(merge_payments(sink, MERGE_APP_ID))
        return writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()

    run_attached(spark, bootstrap, topic, checkpoint, ledger, start)
    cfg = audit_config(tmp_path, bootstrap, sink, ledger, APP_ID_SETTING)
    assert at_least_warn(reconcile(spark, cfg, "rec-clean", since)) == []

    lost = sink_version_of(sink, 2, MERGE_APP_ID)
    restore(spark, sink, lost - 1)
    found = reconcile(spark, cfg, "rec-restored", since)

    ranges = batch_ranges(checkpoint, topic, 2)
    assert lost_batches(found) == {(2, p): (*ranges[p], lost) for p in range(PARTITIONS)}
    assert at_least_warn(found) == [(vocab.BATCH_NOT_IN_SINK, vocab.CRITICAL)] * PARTITIONS


def test_foreach_batch_appending_one_batch_twice_is_named(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = f"sink-c-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, RECORDS)
    checkpoint, sink, ledger = tmp_path / "cp", tmp_path / "payments", tmp_path / "ledger"
    since = datetime.now(UTC) - timedelta(minutes=1)
    twice = 1

    def append(batch: DataFrame, batch_id: int) -> None:
        """Appends through delta-rs with txn ids but never checks them, and (a retry gone wrong)
        writes batch ``twice`` two times."""
        rows = batch.toArrow()
        for _ in range(2 if batch_id == twice else 1):
            write_deltalake(
                str(sink),
                rows,
                mode="append",
                commit_properties=CommitProperties(app_transactions=[Transaction(MERGE_APP_ID, batch_id)]),
            )

    def start(raw: DataFrame) -> Any:
        writer = payments(raw).writeStream.foreachBatch(append)
        return writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()

    run_attached(spark, bootstrap, topic, checkpoint, ledger, start)
    cfg = audit_config(tmp_path, bootstrap, sink, ledger, APP_ID_SETTING)
    found = reconcile(spark, cfg, "rec-twice", since)

    assert at_least_warn(found) == [(vocab.BATCH_WRITTEN_TWICE, vocab.ERROR)] * PARTITIONS
    ranges = batch_ranges(checkpoint, topic, twice)
    named = [f for f in found if f.finding_type == vocab.BATCH_WRITTEN_TWICE]
    assert {(f.checkpoint_id, f.partition, f.offset_start, f.offset_end) for f in named} == {
        (twice, p, *ranges[p]) for p in range(PARTITIONS)
    }
    evidence = json.loads(named[0].evidence)
    assert len(evidence["sink_versions"]) == 2
    assert "offsets re-processed" in evidence["meaning"]


def test_checkpoint_deleted_and_restarted_past_the_end_names_the_skipped_ranges_only(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """The restart rules of the ledger hold in delta_batches mode, and the new checkpoint's query
    (a new id, batch ids from 0 again) is told apart from the old one: nothing else is found."""
    topic = f"sink-d-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, 2 * PER_TRIGGER)
    checkpoint, sink, ledger = tmp_path / "cp", tmp_path / "payments", tmp_path / "ledger"
    since = datetime.now(UTC) - timedelta(minutes=1)

    def start(raw: DataFrame) -> Any:
        return payments_query(raw, checkpoint, sink)

    first = run_attached(spark, bootstrap, topic, checkpoint, ledger, start)
    reached = checkpoint_batches(checkpoint)[max(checkpoint_batches(checkpoint))]
    skipped = PER_TRIGGER  # produced while the job was down, then passed over
    produce_payments(bootstrap, topic, skipped, start=2 * PER_TRIGGER)
    shutil.rmtree(checkpoint)
    # Restarted "from latest": the log's end when it restarts, which is what latest resolves to.
    latest = {p: reached[(topic, p)] + skipped // PARTITIONS for p in range(PARTITIONS)}
    produce_payments(bootstrap, topic, PER_TRIGGER, start=3 * PER_TRIGGER)
    second = run_attached(
        spark,
        bootstrap,
        topic,
        checkpoint,
        ledger,
        start,
        json.dumps({topic: {str(p): o for p, o in latest.items()}}),
    )
    assert first != second  # a new checkpoint is a new query

    cfg = audit_config(tmp_path, bootstrap, sink, ledger)
    found = reconcile(spark, cfg, "rec-restart", since)
    assert at_least_warn(found) == [(vocab.RESTART_SKIP, vocab.CRITICAL)] * PARTITIONS
    assert {
        (f.partition, f.offset_start, f.offset_end) for f in found if f.finding_type == vocab.RESTART_SKIP
    } == {(p, reached[(topic, p)], latest[p]) for p in range(PARTITIONS)}
    # Forensics classifies the same restart without reading rows the sink does not have.
    restarts = run_forensics(spark, cfg, AuditRun(run_id="fx-restart", now=datetime.now(UTC), since=since))
    assert {(r["partition"], r["classification"]) for r in restarts.restarts} == {
        (p, vocab.RESTART_SKIPPED) for p in range(PARTITIONS)
    }

    # No batch read the skipped offsets: read back from the source as a gap is, their data records
    # are lost whatever the sink, in the incident and in the completeness windows.
    judged = run_reconcile(
        spark,
        cfg,
        AuditRun(run_id="rec-read-back", now=datetime.now(UTC), since=since),
        confirmer=kafka_gap_confirmer(cfg.kafka, bootstrap, max_records=10_000, timeout_s=60),
        times=KafkaTimes(cfg.kafka, bootstrap, 60),
    )
    (restart,) = [i for i in judged.incidents if i.kind == vocab.INCIDENT_RESTART]
    effect = restart.impact
    assert (restart.severity, effect.records_lost, effect.records_unverifiable) == (
        vocab.CRITICAL,
        skipped,
        0,
    )
    assert f"skipped {skipped} offsets on {PARTITIONS} partition(s): {skipped} records lost" in restart.cause
    windows = (
        spark.read.format("delta")
        .load(tables_from_config(cfg).completeness)
        .where(F.col("reconcile_run_id") == "rec-read-back")
        .collect()
    )
    assert windows
    totals = (
        sum(w.lost for w in windows),
        sum(w.unverifiable for w in windows),
        sum(w.pending for w in windows),
        sum(w.offsets_in_sink_batches for w in windows),
    )
    assert totals == (skipped, 0, 0, 3 * PER_TRIGGER)  # every offset read by a batch, none skipped


def test_a_driver_killed_mid_run_and_restarted_leaves_nothing_at_warn(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """(a) killed with SIGKILL while it runs (its next batch may be in the sink and not in its
    checkpoint's commits), then started again on its checkpoint: Spark's Delta sink skips the batch
    it holds already, so every batch is in the sink once and nothing is at warn or above."""
    topic = f"sink-k-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, 6 * PER_TRIGGER)
    checkpoint, sink, ledger = tmp_path / "cp", tmp_path / "payments", tmp_path / "ledger"
    since = datetime.now(UTC) - timedelta(minutes=1)
    args = [bootstrap, topic, str(checkpoint), str(sink), str(ledger), JOB, str(tmp_path / "driver")]

    def committed() -> int | None:
        done = [p for p in (checkpoint / "commits").glob("*") if p.name.isdigit()]
        return len(done) if len(done) >= 2 else None

    run_then_kill(args, committed, "two batches of the driver to complete")
    assert len(checkpoint_batches(checkpoint)) < 6  # killed before it read everything

    run_attached(
        spark, bootstrap, topic, checkpoint, ledger, lambda raw: payments_query(raw, checkpoint, sink)
    )

    found = reconcile(spark, audit_config(tmp_path, bootstrap, sink, ledger), "rec-killed", since)
    assert at_least_warn(found) == []
    assert vocab.UNCLEAN_STOP in {f.finding_type for f in found}  # the kill was seen, and judged harmless
