"""A user's own streaming job, written as a data team writes one: Kafka JSON payments parsed,
refunds filtered out, two columns kept, into a Delta table through Spark's own Delta sink, with no
coordinate columns. The audit is attached in one line (`run_payments`).

The demo runs it beside the reference job; the tests of attach, ledger-import and sink modes run
the same job (tests/kafka/user_jobs.py), so what the demo shows is what they test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app import audit
from app.errors import InfrastructureError
from app.kafka.clients import plain_conf

PARTITIONS: Final = 2
PER_TRIGGER: Final = 40  # records per batch and source (Spark's maxOffsetsPerTrigger is per source)
QUERY_TIMEOUT_S: Final = 300
PAYMENT_SCHEMA: Final = "id LONG, amount DOUBLE, kind STRING"


def produce_payments(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    """Payments ``start`` .. ``start + count - 1``, every fourth a refund, spread over the partitions."""
    producer = Producer(plain_conf(bootstrap, **{"linger.ms": 5}))
    for i in range(start, start + count):
        record = {"id": i, "amount": i * 1.5, "kind": "refund" if i % 4 == 0 else "payment"}
        producer.produce(topic, value=json.dumps(record).encode(), partition=i % PARTITIONS)
    if producer.flush(30) != 0:
        raise InfrastructureError(f"could not deliver the payments to {topic}")


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


def run_payments(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    sink: Path,
    *,
    job_name: str,
    ledger: str,
    group_id: str,
) -> str:
    """The job run once over what the topic holds, audited, its batches committed to ``group_id``;
    returns the query's id (the transaction id of its sink commits)."""
    query = payments_query(kafka(spark, bootstrap, "subscribe", topic), checkpoint, sink)
    opts = {"bootstrap.servers": bootstrap}  # the group commits' client (librdkafka names)
    attachment = audit.attach(query, job_name=job_name, ledger=ledger, group_id=group_id, kafka_options=opts)
    finished = query.awaitTermination(QUERY_TIMEOUT_S)
    if not finished:
        query.stop()
    closed = attachment.close(QUERY_TIMEOUT_S)
    if not finished or query.exception() is not None:
        raise InfrastructureError(f"the payments job did not read {topic} to its end: {query.exception()}")
    if not closed:
        raise InfrastructureError("the payments job's ledger events were not all written in time")
    return str(query.id)
