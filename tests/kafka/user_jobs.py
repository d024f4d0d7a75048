"""A user's own streaming query, written as a data team writes one, and what the tests that audit
it read: Kafka JSON payments parsed, filtered and projected into a Delta table through Spark's own
Delta sink, with no coordinate columns (tests/kafka/test_attach*.py, test_ledger_import.py,
test_sink_modes.py). The job itself is the demo's (app/demo/user_job.py): what the demo shows is
what these tests run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app.attach import Attachment
from app.contracts.offsets import TopicPartitionKey
from app.demo.user_job import (
    PARTITIONS,
    PAYMENT_SCHEMA,
    PER_TRIGGER,
    QUERY_TIMEOUT_S,
    kafka,
    payments,
    payments_query,
    produce_payments,
)
from app.stream.ledger import event_key_column
from app.stream.startup import parse_offset_log

__all__ = [
    "PARTITIONS",
    "PAYMENT_SCHEMA",
    "PER_TRIGGER",
    "QUERY_TIMEOUT_S",
    "checkpoint_batches",
    "duplicate_keys",
    "events_by_batch",
    "kafka",
    "payments",
    "payments_query",
    "produce_payments",
    "run_events",
    "run_to_end",
]


def run_to_end(query: StreamingQuery, audit: Attachment) -> None:
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not read everything in time"
    assert query.exception() is None
    assert audit.close(QUERY_TIMEOUT_S), "the ledger writer did not finish"


def checkpoint_batches(checkpoint: Path) -> dict[int, dict[TopicPartitionKey, int]]:
    """The end offsets of every committed batch, read from the checkpoint's own files."""
    committed = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    return {b: parse_offset_log((checkpoint / "offsets" / str(b)).read_text()) for b in committed}


def events_by_batch(ledger: DataFrame, event_type: str) -> dict[int, dict[TopicPartitionKey, int]]:
    out: dict[int, dict[TopicPartitionKey, int]] = {}
    for r in ledger.where(F.col("event_type") == event_type).collect():
        out.setdefault(r.checkpoint_id, {})[(r.topic, r.partition)] = r.offset
    return out


def duplicate_keys(ledger: DataFrame) -> int:
    return ledger.groupBy(event_key_column().alias("k")).count().where("count > 1").count()


def run_events(ledger: DataFrame, event_type: str) -> list[Any]:
    return ledger.where(F.col("event_type") == event_type).collect()
