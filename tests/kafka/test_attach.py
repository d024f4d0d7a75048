"""A user's own streaming query, audited by `app.attach.attach` in one line (real broker, Spark, Delta).

The query is written as a data team writes one: Kafka JSON parsed, filtered and projected into a
Delta table through Spark's own Delta sink (that is the user's code, so it may use the Delta sink
directly), with no coordinate columns. The ledger must then hold exactly the checkpoint's batches.
`offset-audit reconcile` is not run here: it needs a sink with coordinate columns, which this query
does not write (sink modes for such jobs are later work), so the ledger content is what is asserted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

import app.stream.attach as attach_module
from app import audit
from app.audit import attach
from app.contracts import vocabulary as vocab
from app.contracts.offsets import LedgerEvent
from app.stream.ledger import LedgerWriter
from tests.kafka.user_jobs import (
    PARTITIONS,
    PER_TRIGGER,
    QUERY_TIMEOUT_S,
    checkpoint_batches,
    duplicate_keys,
    events_by_batch,
    failing_query,
    kafka,
    payments_query,
    produce_payments,
    run_events,
    run_to_end,
)
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka


def test_attached_query_writes_exactly_its_checkpoints_batches(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """Two Kafka sources in one query (subscribe and assign): every committed batch has its
    snapshot and completion with the checkpoint's end offsets, once, between run start and stop."""
    orders, refunds = f"pay-a-{unique}", f"pay-b-{unique}"
    for topic in (orders, refunds):
        create_topic(bootstrap, topic, PARTITIONS)
        produce_payments(bootstrap, topic, 100)
    checkpoint, sink, ledger_path = tmp_path / "cp", tmp_path / "payments", str(tmp_path / "ledger")
    assign = json.dumps({refunds: list(range(PARTITIONS))})
    raw = kafka(spark, bootstrap, "subscribe", orders).union(kafka(spark, bootstrap, "assign", assign))

    query = payments_query(raw, checkpoint, sink)
    audit = attach(query, job_name="payments", ledger=ledger_path)
    run_to_end(query, audit)

    batches = checkpoint_batches(checkpoint)
    assert len(batches) == 3  # 100 records a source, at most 40 a batch
    assert spark.read.format("delta").load(str(sink)).count() == 150  # the user's job did its work
    ledger = spark.read.format("delta").load(ledger_path)
    assert events_by_batch(ledger, "CHECKPOINT_SNAPSHOT") == batches
    assert events_by_batch(ledger, "CHECKPOINT_COMPLETED") == batches
    every_partition = {(t, p) for t in (orders, refunds) for p in range(PARTITIONS)}
    assert set(batches[max(batches)]) == every_partition
    assert {r.run_id for r in ledger.collect()} == {str(query.runId)}
    [started] = run_events(ledger, "RUN_STARTED")
    assert json.loads(started.detail)["query_id"] == str(query.id)
    restored = {(r.topic, r.partition): r.offset for r in run_events(ledger, "OFFSETS_RESTORED")}
    assert restored == dict.fromkeys(every_partition, 0)
    [stopped] = run_events(ledger, "RUN_STOPPED")
    assert json.loads(stopped.detail)["ledger_write_failures"] == 0
    assert json.loads(stopped.detail)["batches"] == len(batches)
    assert duplicate_keys(ledger) == 0
    assert audit.ledger_write_failures == 0


class DroppingWriter(LedgerWriter):
    """The ledger writer of a run that died before it flushed batch DROPPED's events."""

    DROPPED = 2

    def write(self, events: Sequence[LedgerEvent], batch_id: int) -> bool:
        if batch_id == self.DROPPED:
            return False
        return super().write(events, batch_id)


def test_reattach_recovers_unwritten_batch_and_writes_nothing_twice(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"pay-p-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, 3 * PER_TRIGGER)
    checkpoint, sink, ledger_path = tmp_path / "cp", tmp_path / "payments", str(tmp_path / "ledger")

    def run() -> tuple[StreamingQuery, attach_module.Attachment]:
        query = payments_query(
            kafka(spark, bootstrap, "subscribePattern", f"pay-p-{unique}.*"), checkpoint, sink
        )
        audit = attach(query, job_name="payments", ledger=ledger_path)
        run_to_end(query, audit)
        return query, audit

    with monkeypatch.context() as patch:
        patch.setattr(attach_module, "LedgerWriter", DroppingWriter)
        first, _ = run()
    first_batches = checkpoint_batches(checkpoint)
    assert sorted(first_batches) == [0, 1, 2]
    lost = (
        spark.read.format("delta").load(ledger_path).where(F.col("checkpoint_id") == DroppingWriter.DROPPED)
    )
    assert lost.where(F.col("event_type").startswith("CHECKPOINT_")).count() == 0

    produce_payments(bootstrap, topic, PER_TRIGGER, start=3 * PER_TRIGGER)
    late = f"pay-p-{unique}-late"  # a topic the pattern matches that did not exist in the first run
    create_topic(bootstrap, late, PARTITIONS)
    produce_payments(bootstrap, late, 10)
    second, audit = run()

    batches = checkpoint_batches(checkpoint)
    assert sorted(batches)[:4] == [0, 1, 2, 3]
    assert {(late, p) for p in range(PARTITIONS)} <= set(batches[max(batches)])
    ledger = spark.read.format("delta").load(ledger_path)
    assert events_by_batch(ledger, "CHECKPOINT_SNAPSHOT") == batches
    assert events_by_batch(ledger, "CHECKPOINT_COMPLETED") == batches
    checkpoints = ledger.where(F.col("event_type").startswith("CHECKPOINT_"))
    recovered = checkpoints.where(F.col("checkpoint_id") == DroppingWriter.DROPPED).collect()
    assert {r.run_id for r in recovered} == {str(first.runId)}  # it belongs to the run that lost it
    assert all(json.loads(r.detail)["recovered"] for r in recovered)
    assert audit.recovered_events == 2 * PARTITIONS
    assert {r.run_id for r in checkpoints.where(F.col("checkpoint_id") >= 3).collect()} == {str(second.runId)}
    restored = ledger.where(
        (F.col("event_type") == "OFFSETS_RESTORED") & (F.col("run_id") == str(second.runId))
    )
    assert {(r.topic, r.partition): r.offset for r in restored.collect()} == batches[2]
    assert len(run_events(ledger, "RUN_STARTED")) == len(run_events(ledger, "RUN_STOPPED")) == 2
    assert duplicate_keys(ledger) == 0


def test_unwritable_ledger_never_fails_the_query_and_is_counted(
    spark: SparkSession,
    bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = f"pay-u-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, 2 * PER_TRIGGER)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the ledger's parent directory should be")
    monkeypatch.setattr(attach_module, "RETRY_WAIT_S", 0.01)

    with caplog.at_level(logging.WARNING, logger="app.attach"):
        query = payments_query(
            kafka(spark, bootstrap, "subscribe", topic), tmp_path / "cp", tmp_path / "payments"
        )
        audit = attach(query, job_name="payments", ledger=str(blocker / "ledger"))
        run_to_end(query, audit)

    assert spark.read.format("delta").load(str(tmp_path / "payments")).count() == 60
    assert audit.ledger_write_failures >= 2  # the ledger's creation and every batch at least
    assert audit.batches_written == 0
    assert any("failed 3 times" in r.getMessage() for r in caplog.records)


def test_leaving_a_with_block_by_a_failed_query_writes_the_run_end(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """README's `with audit.attach(...)`: the query's second batch fails, awaitTermination raises
    out of the block, and the run still gets its RUN_STOPPED (naming the failure) after its one
    completed batch: its end is known, not judged an unclean stop."""
    topic = f"pay-w-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, 3 * PER_TRIGGER)
    ledger_path = str(tmp_path / "ledger")

    query = failing_query(kafka(spark, bootstrap, "subscribe", topic), tmp_path / "cp")
    with pytest.raises(StreamingQueryException), audit.attach(query, job_name="payments", ledger=ledger_path):
        query.awaitTermination(QUERY_TIMEOUT_S)

    ledger = spark.read.format("delta").load(ledger_path)
    [stopped] = run_events(ledger, "RUN_STOPPED")
    assert json.loads(stopped.detail)[vocab.DETAIL_REASON].startswith("query failed")
    assert sorted(events_by_batch(ledger, "CHECKPOINT_COMPLETED")) == [0]
