"""The ledger writer: one Delta commit per micro-batch, idempotent per batch id, events outside
micro-batches written once by key, what a start asks of the job's earlier runs, and every table
readable by Spark exactly as the contract says."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from app.contracts.offsets import EventSource, LedgerEvent
from app.contracts.tables import LEDGER_SCHEMA
from app.contracts.vocabulary import (
    ENGINE_SPARK,
    ERROR_OUTCOME_UNKNOWN,
    EVENT_CHECKPOINT_COMPLETED,
    EVENT_CHECKPOINT_SNAPSHOT,
    EVENT_COMMIT_FAILED,
    EVENT_COMMIT_REQUESTED,
    EVENT_COMMIT_SUCCEEDED,
    EVENT_OFFSETS_RESTORED,
    EVENT_RUN_STARTED,
)
from app.errors import InfrastructureError
from app.stream.checkpoint import CheckpointFiles, ledger_since
from app.stream.ledger import LedgerWriter, event_key_column, ledger_app_id

pytestmark = pytest.mark.spark

T0 = datetime(2026, 3, 1, 23, 59, 59, 123456, tzinfo=UTC)


def _snapshot(checkpoint_id: int, offsets: dict[tuple[str, int], int], when: datetime) -> list[LedgerEvent]:
    writer = EventSource("orders-job", "run-1", ENGINE_SPARK, "orders-group")
    return writer.partition_events(EVENT_CHECKPOINT_SNAPSHOT, when, checkpoint_id, offsets, {"attempt": 1})


def events_frame(spark: SparkSession, events: list[LedgerEvent]) -> DataFrame:
    return spark.createDataFrame([tuple(e.to_row().values()) for e in events], LEDGER_SCHEMA)


def writer(spark: SparkSession, path: str, scope: str = "query-1") -> LedgerWriter:
    ledger = LedgerWriter(spark, path, "orders-job", "run-1", scope=scope)
    ledger.ensure()
    return ledger


def _history(spark: SparkSession, path: str) -> list[str]:
    return [r.operation for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()]


def test_batch_append_round_trips_through_spark_and_a_retry_writes_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "ledger")
    ledger = writer(spark, path)
    first = _snapshot(0, {("orders", 0): 10, ("orders", 1): 7}, T0)
    second = _snapshot(1, {("orders", 0): 20, ("orders", 1): 9}, T0 + timedelta(seconds=1))

    assert ledger.write(first, 0)
    assert ledger.write(second, 1)
    assert not ledger.write(first, 0)  # a retried (older) batch
    assert not ledger.write(second, 1)  # the same batch again

    back = spark.read.format("delta").load(path)
    assert [(f.name, f.dataType) for f in back.schema] == [(f.name, f.dataType) for f in LEDGER_SCHEMA]
    expected = spark.createDataFrame([tuple(e.to_row().values()) for e in [*first, *second]], LEDGER_SCHEMA)
    assert sorted(back.collect()) == sorted(expected.collect())
    # The second day's partition directory is named by event_date like Spark's own writes.
    days = sorted(p.name for p in Path(path).glob("event_date=*"))
    assert days == ["event_date=2026-03-01", "event_date=2026-03-02"]
    # One commit per batch: table creation plus two appends.
    assert len(_history(spark, path)) == 3


def test_spark_honours_the_transaction_version_the_batch_append_wrote(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "ledger")
    events = _snapshot(4, {("orders", 0): 40}, T0)
    writer(spark, path).write(events, 4)

    # A Spark idempotent write with the same app id and an older version is skipped by Delta.
    app_id = ledger_app_id("orders-job", "query-1")
    events_frame(spark, events).write.format("delta").mode("append").option("txnAppId", app_id).option(
        "txnVersion", 3
    ).save(path)
    assert spark.read.format("delta").load(path).count() == 1


def test_ledger_is_append_only_after_batch_appends(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "ledger")
    writer(spark, path).write(_snapshot(0, {("orders", 0): 1}, T0), 0)
    props = spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
    assert {r.key: r.value for r in props}.get("delta.appendOnly") == "true"
    with pytest.raises(Exception, match=r"(?i)append.?only"):
        spark.sql(f"DELETE FROM delta.`{path}`")


def test_a_batch_append_without_a_ledger_table_is_an_infrastructure_error(
    spark: SparkSession, tmp_path: Path
) -> None:
    # The streaming job creates the ledger before its first batch: a missing one is lost storage.
    ledger = LedgerWriter(spark, str(tmp_path / "ledger"), "orders-job", "run-1", scope="query-1")
    with pytest.raises(InfrastructureError, match="no Delta table at"):
        ledger.write(_snapshot(0, {("orders", 0): 1}, T0), 0)
    assert not (tmp_path / "ledger").exists()


def test_events_outside_batches_are_written_once_by_key_and_keyed_as_spark_keys_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "ledger")
    ledger = writer(spark, path)
    source = EventSource("orders-job", "run-1", ENGINE_SPARK, "orders-group")
    started = source.event(EVENT_RUN_STARTED, T0, None, {"startup_mode": "group"})
    failed = source.event(
        EVENT_COMMIT_FAILED, T0, 3, {"attempt": 2, "error": ERROR_OUTCOME_UNKNOWN, "retriable": True}
    )
    assert ledger.write_new([started, failed]) == 2
    # A retry at a later time (the key leaves the time out), with one new attempt of the same checkpoint.
    again = source.event(
        EVENT_COMMIT_FAILED, T0 + timedelta(seconds=5), 3, {"attempt": 2, "error": ERROR_OUTCOME_UNKNOWN}
    )
    other = source.event(EVENT_COMMIT_FAILED, T0, 3, {"attempt": 3, "error": ERROR_OUTCOME_UNKNOWN})
    assert ledger.write_new([again, other]) == 1
    stored = spark.read.format("delta").load(path)
    assert stored.count() == 3
    assert stored.groupBy(event_key_column()).count().where("count > 1").count() == 0


def test_a_start_reads_the_job_s_earlier_runs_from_the_ledger(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "ledger")
    ledger = writer(spark, path)
    first = EventSource("orders-job", "run-1", ENGINE_SPARK, "orders-group")
    second = EventSource("orders-job", "run-2", ENGINE_SPARK, "orders-group")
    stranger = EventSource("other-job", "run-9", ENGINE_SPARK, "orders-group")
    events = [
        first.event(EVENT_RUN_STARTED, T0, None, {}),
        *first.partition_events(EVENT_OFFSETS_RESTORED, T0, None, {("orders", 0): 5, ("orders", 1): 6}, {}),
        *first.partition_events(EVENT_CHECKPOINT_SNAPSHOT, T0, 0, {("orders", 0): 10}, {}),
        *first.partition_events(EVENT_CHECKPOINT_COMPLETED, T0, 0, {("orders", 0): 10}, {}),
        first.event(EVENT_COMMIT_REQUESTED, T0, 0, {"attempt": 1}),
        first.event(EVENT_COMMIT_SUCCEEDED, T0, 0, {"attempt": 1}),
        *first.partition_events(EVENT_CHECKPOINT_SNAPSHOT, T0, 1, {("orders", 0): 20}, {}),
        first.event(EVENT_COMMIT_REQUESTED, T0, 1, {"attempt": 2}),  # never answered
        second.event(EVENT_RUN_STARTED, T0 + timedelta(hours=1), None, {}),
        *second.partition_events(
            EVENT_OFFSETS_RESTORED, T0 + timedelta(hours=1), None, {("orders", 0): 20}, {}
        ),
        stranger.event(EVENT_RUN_STARTED, T0 + timedelta(hours=2), None, {}),
        *stranger.partition_events(
            EVENT_OFFSETS_RESTORED, T0 + timedelta(hours=2), None, {("orders", 0): 99}, {}
        ),
    ]
    assert ledger.write_new(events) == len(events)
    assert ledger.previous_run_starts() == {("orders", 0): 20}
    facts = ledger.facts()
    assert (facts.snapshot_ids, facts.completed_ids) == (frozenset({0, 1}), frozenset({0}))
    assert facts.open_commit_attempts == {("run-1", 2): 1}
    assert facts.last_run_id == "run-2"
    empty = LedgerWriter(spark, str(tmp_path / "none"), "orders-job", "run-3")
    assert (empty.previous_run_starts(), empty.facts().last_run_id) == ({}, None)


def test_a_start_s_ledger_read_begins_the_day_before_spark_wrote_the_oldest_retained_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The bound comes from the offsets file's modification time, read through Hadoop's file
    system as every checkpoint read (batch 29 was purged: no file, no time, no bound)."""
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    for batch, written in (
        (30, datetime(2026, 3, 4, 0, 30, tzinfo=UTC)),
        (31, datetime(2026, 3, 5, tzinfo=UTC)),
    ):
        path = offsets / str(batch)
        path.write_text('v1\n{"batchWatermarkMs":0}\n{"orders":{"0":10}}')
        os.utime(path, (written.timestamp(), written.timestamp()))
    files = CheckpointFiles(spark, str(tmp_path / "checkpoint"))

    assert ledger_since(files, min(files.offset_log())) == date(2026, 3, 3)
    assert ledger_since(files, 29) is None
