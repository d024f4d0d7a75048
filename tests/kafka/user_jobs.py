"""A user's own streaming jobs, written as a data team writes them, shared by the tests that attach
the audit to them: Kafka JSON payments parsed, refunds filtered out, two columns kept."""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app.attach import Attachment
from app.contracts.offsets import TopicPartitionKey
from app.kafka.clients import plain_conf
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


def payments_query(raw: DataFrame, checkpoint: Path, sink: Path) -> StreamingQuery:
    """The user's job: its payments into Delta through Spark's own Delta sink."""
    return (
        payments(raw)
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
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
