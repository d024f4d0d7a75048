"""`offset-audit ledger-import` over the checkpoint of a user's own query (real broker, Spark and
Delta): it rebuilds what attaching the query recorded, and never writes anything twice."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app import cli
from app.attach import attach
from app.contracts.offsets import TopicPartitionKey
from tests.kafka.streaming import create_topic
from tests.kafka.user_jobs import (
    PARTITIONS,
    QUERY_TIMEOUT_S,
    checkpoint_batches,
    duplicate_keys,
    events_by_batch,
    kafka,
    payments_query,
    produce_payments,
    run_events,
    run_to_end,
)

pytestmark = pytest.mark.kafka

SNAPSHOT, COMPLETED = "CHECKPOINT_SNAPSHOT", "CHECKPOINT_COMPLETED"


def import_checkpoint(checkpoint: Path, ledger: Path, tmp_path: Path) -> int:
    return cli.main(
        [
            "ledger-import",
            "--checkpoint",
            str(checkpoint),
            "--job",
            "payments",
            "--ledger",
            str(ledger),
            "--set",
            f"paths.data_dir={tmp_path / 'data'}",
        ]
    )


def read(spark: SparkSession, ledger: Path) -> DataFrame:
    return spark.read.format("delta").load(str(ledger))


def state(ledger: Path) -> tuple[int, int]:
    """The ledger's row count and Delta version."""
    table = DeltaTable(str(ledger))
    return table.to_pyarrow_table().num_rows, table.version()


def restored(ledger: DataFrame, run_id: str) -> dict[TopicPartitionKey, int]:
    rows = ledger.where((F.col("event_type") == "OFFSETS_RESTORED") & (F.col("run_id") == run_id))
    return {(r.topic, r.partition): r.offset for r in rows.collect()}


def process_to(query: StreamingQuery, checkpoint: Path, ends: dict[TopicPartitionKey, int]) -> None:
    """Until the query committed a batch ending at ``ends``. `processAllAvailable` can return after
    a trigger that looked just before the last records arrived, so the checkpoint is the judge."""
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    while not any(o == ends for o in checkpoint_batches(checkpoint).values()):
        assert time.monotonic() < deadline, f"the query did not reach {ends} in time"
        assert query.exception() is None
        query.processAllAvailable()


def test_import_rebuilds_the_attached_runs_batches_and_writes_nothing_twice(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = f"pay-i-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, 100)
    checkpoint, sink = tmp_path / "cp", tmp_path / "payments"
    attached_ledger, imported_ledger = tmp_path / "attached-ledger", tmp_path / "imported-ledger"

    query = payments_query(kafka(spark, bootstrap, "subscribe", topic), checkpoint, sink)
    audit = attach(query, job_name="payments", ledger=str(attached_ledger))
    run_to_end(query, audit)
    batches = checkpoint_batches(checkpoint)
    assert len(batches) == 3  # 50 records a partition, at most 40 a batch

    # Into an empty ledger: the attached run's snapshots and completions, as the imported run's.
    assert import_checkpoint(checkpoint, imported_ledger, tmp_path) == 0
    attached, imported = read(spark, attached_ledger), read(spark, imported_ledger)
    for event_type in (SNAPSHOT, COMPLETED):
        assert events_by_batch(imported, event_type) == events_by_batch(attached, event_type) == batches
    query_id = str(query.id)
    assert {r.run_id for r in imported.collect()} == {query_id}
    assert all(json.loads(r.detail)["imported"] for r in imported.collect())
    [started] = run_events(imported, "RUN_STARTED")
    assert json.loads(started.detail)["query_id"] == query_id
    assert (
        restored(imported, query_id) == restored(attached, str(query.runId)) == dict.fromkeys(batches[0], 0)
    )
    assert duplicate_keys(imported) == 0

    # Again: nothing new, not even an empty Delta commit.
    before = state(imported_ledger)
    assert import_checkpoint(checkpoint, imported_ledger, tmp_path) == 0
    assert state(imported_ledger) == before

    # Into the ledger the attached run wrote: it holds all of it already.
    before = state(attached_ledger)
    assert import_checkpoint(checkpoint, attached_ledger, tmp_path) == 0
    assert state(attached_ledger) == before

    # The checkpoint deleted and the job started again from latest: a new query, a new run.
    shutil.rmtree(checkpoint)
    raw = kafka(spark, bootstrap, "subscribe", topic, starting="latest")
    second = payments_query(raw, checkpoint, sink, trigger={"processingTime": "1 second"})
    try:
        second.processAllAvailable()  # its sources resolved `latest`: the end of the first 100
        produce_payments(bootstrap, topic, 20, start=100)
        ends = {(topic, p): 60 for p in range(PARTITIONS)}
        process_to(second, checkpoint, ends)
    finally:
        second.stop()

    assert import_checkpoint(checkpoint, imported_ledger, tmp_path) == 0
    ledger = read(spark, imported_ledger)
    run_id = str(second.id)
    assert run_id != query_id
    assert {r.run_id for r in run_events(ledger, "RUN_STARTED")} == {query_id, run_id}
    assert restored(ledger, run_id) == batches[max(batches)]  # where `latest` was: no gap, no replay
    new_batches = checkpoint_batches(checkpoint)
    completed = ledger.where((F.col("event_type") == COMPLETED) & (F.col("run_id") == run_id))
    assert events_by_batch(completed, COMPLETED) == new_batches
    assert ends in new_batches.values()
    assert duplicate_keys(ledger) == 0
