"""The micro-batch ledger append (delta-rs, into the table Spark created): one Delta commit per
batch, idempotent per batch id, and readable by Spark exactly as the contract says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.contracts.offsets import EventSource, LedgerEvent
from app.contracts.tables import LEDGER_SCHEMA
from app.contracts.vocabulary import ENGINE_SPARK, EVENT_CHECKPOINT_SNAPSHOT
from app.errors import InfrastructureError
from app.stream.ledger import append_batch_events, ensure_ledger, events_frame

pytestmark = pytest.mark.spark

T0 = datetime(2026, 3, 1, 23, 59, 59, 123456, tzinfo=UTC)


def _snapshot(checkpoint_id: int, offsets: dict[tuple[str, int], int], when: datetime) -> list[LedgerEvent]:
    writer = EventSource("orders-job", "run-1", ENGINE_SPARK, "orders-group")
    return writer.partition_events(EVENT_CHECKPOINT_SNAPSHOT, when, checkpoint_id, offsets, {"attempt": 1})


def _history(spark: SparkSession, path: str) -> list[str]:
    return [r.operation for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()]


def test_batch_append_round_trips_through_spark_and_a_retry_writes_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "ledger")
    ensure_ledger(spark, path)
    first = _snapshot(0, {("orders", 0): 10, ("orders", 1): 7}, T0)
    second = _snapshot(1, {("orders", 0): 20, ("orders", 1): 9}, T0 + timedelta(seconds=1))

    append_batch_events(spark, path, first, "app-ledger", 0)
    append_batch_events(spark, path, second, "app-ledger", 1)
    append_batch_events(spark, path, first, "app-ledger", 0)  # a retried (older) batch
    append_batch_events(spark, path, second, "app-ledger", 1)  # the same batch again

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
    ensure_ledger(spark, path)
    events = _snapshot(4, {("orders", 0): 40}, T0)
    append_batch_events(spark, path, events, "app-ledger", 4)

    # A Spark idempotent write with the same app id and an older version is skipped by Delta.
    events_frame(spark, events).write.format("delta").mode("append").option("txnAppId", "app-ledger").option(
        "txnVersion", 3
    ).save(path)
    assert spark.read.format("delta").load(path).count() == 1


def test_ledger_is_append_only_after_batch_appends(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "ledger")
    ensure_ledger(spark, path)
    append_batch_events(spark, path, _snapshot(0, {("orders", 0): 1}, T0), "app-ledger", 0)
    props = spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
    assert {r.key: r.value for r in props}.get("delta.appendOnly") == "true"
    with pytest.raises(Exception, match=r"(?i)append.?only"):
        spark.sql(f"DELETE FROM delta.`{path}`")


def test_a_batch_append_without_a_ledger_table_is_an_infrastructure_error(
    spark: SparkSession, tmp_path: Path
) -> None:
    # The streaming job creates the ledger before its first batch: a missing one is lost storage.
    with pytest.raises(InfrastructureError, match="no ledger table"):
        append_batch_events(spark, str(tmp_path / "ledger"), _snapshot(0, {("orders", 0): 1}, T0), "app", 0)
