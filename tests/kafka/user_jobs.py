"""A user's own streaming query, written as a data team writes one, and what the tests that audit
it read: Kafka JSON payments parsed, filtered and projected into a Delta table through Spark's own
Delta sink, with no coordinate columns (tests/kafka/test_attach*.py, test_ledger_import.py,
test_sink_modes.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app.attach import Attachment
from app.contracts.offsets import TopicPartitionKey
from app.kafka.clients import plain_conf
from app.stream.ledger import event_key_column
from app.stream.startup import parse_offset_log

PARTITIONS = 2
PER_TRIGGER = 40  # records per batch and source (Spark's maxOffsetsPerTrigger is per source)
QUERY_TIMEOUT_S = 300
PAYMENT_SCHEMA = "id LONG, amount DOUBLE, kind STRING"


def produce_payments(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    producer = Producer(plain_conf(bootstrap, **{"linger.ms": 5}))
    for i in range(start, start + count):
        record = {"id": i, "amount": i * 1.5, "kind": "refund" if i % 4 == 0 else "payment"}
        producer.produce(topic, value=json.dumps(record).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def kafka(spark: SparkSession, bootstrap: str, how: str, what: str, starting: str = "earliest") -> DataFrame:
    """A Kafka source as a user opens one; ``starting``: its startingOffsets (used on a new checkpoint)."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option(how, what)
        .option("startingOffsets", starting)
        .option("maxOffsetsPerTrigger", PER_TRIGGER)
        .load()
    )


def payments(raw: DataFrame) -> DataFrame:
    """The user's transformation: JSON payments, refunds filtered out, two columns kept."""
    return (
        raw.select(F.from_json(F.col("value").cast("string"), PAYMENT_SCHEMA).alias("p"))
        .select("p.*")
        .where(F.col("kind") == "payment")
        .select("id", "amount")
    )


def payments_query(
    raw: DataFrame,
    checkpoint: Path,
    sink: Path,
    trigger: dict[str, Any] | None = None,
    name: str | None = None,
) -> StreamingQuery:
    """The user's job: its payments into Delta through Spark's own Delta sink; ``trigger`` is
    Spark's `trigger(...)` keywords (default: availableNow, read what is there), ``name`` its
    queryName."""
    writer = payments(raw).writeStream
    if name is not None:
        writer = writer.queryName(name)
    return (
        writer.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"availableNow": True}))
        .start(str(sink))
    )


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
