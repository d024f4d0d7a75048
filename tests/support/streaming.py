"""Helpers shared by the streaming-job tests: config for one isolated job, topic setup, table reads."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig
from app.kafka.clients import kafka_error, plain_conf, retry_kafka
from app.kafka.commit import watermarks
from app.kafka.group_offsets import group_offsets as read_group_offsets
from app.storage.tables import tables_from_config
from app.stream.job import StopWhen
from tests.support.config import build_config

# Helpers ride out what a broker started moments ago answers (NOT_COORDINATOR, a leader being
# elected) like the application does: retried within this budget.
KAFKA_TIMEOUT_S = 30.0
# A test goes on only once every record it produced is stored. How long that takes is the machine's
# business (a topic of 1,000 partitions created moments before, on a busy machine, took more than
# 30 s), so the wait ends only when librdkafka itself gives up on a record (message.timeout.ms,
# 300 s by default).
DELIVERY_TIMEOUT_S = 330.0


def job_config(data_dir: Path, bootstrap: str, topic: str, group: str, job: str, *extra: str) -> AppConfig:
    return build_config(
        f"kafka.bootstrap_servers={bootstrap}",
        f"stream.topics=[{topic}]",
        f"stream.group_id={group}",
        f"stream.job_name={job}",
        "stream.trigger_interval=1 second",
        *extra,
        data_dir=data_dir,
    )


def deliver(producer: Producer) -> None:
    """Waits until every record ``producer`` holds is stored; fails naming how many were not."""
    left = producer.flush(DELIVERY_TIMEOUT_S)
    assert left == 0, f"{left} records still undelivered after {DELIVERY_TIMEOUT_S:.0f} s"


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient(plain_conf(bootstrap))
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1)

    def create(left: float) -> None:
        try:
            admin.create_topics([new], request_timeout=left)[topic].result(left)
        except KafkaException as exc:
            error = kafka_error(exc)
            # A retry after a request that timed out but went through finds the topic there.
            if error is None or error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    retry_kafka(create, f"creating {topic}", KAFKA_TIMEOUT_S)


def produce(
    bootstrap: str, topic: str, count: int, partitions: int, start: int = 0, timestamp_ms: int = 0
) -> None:
    """``count`` records round-robin over ``partitions``, stamped ``timestamp_ms`` (0: the producer's now)."""
    producer = Producer(plain_conf(bootstrap, **{"linger.ms": 5}))
    for i in range(start, start + count):
        producer.produce(
            topic, value=f"record-{i}".encode(), partition=i % partitions, timestamp=timestamp_ms
        )
    deliver(producer)


def until_all_read(bootstrap: str, topic: str, partitions: int) -> StopWhen:
    """A run that stops once its completed batches have read every partition of ``topic`` to its
    end as it is now: bounded by offsets, not by a wait that a slow machine could outlast."""
    consumer = Consumer(plain_conf(bootstrap, **{"group.id": f"{topic}-end-offsets"}))
    try:
        marks = watermarks(consumer, [(topic, p) for p in range(partitions)], KAFKA_TIMEOUT_S)
    finally:
        consumer.close()
    return StopWhen(offsets={tp: high for tp, (_, high) in marks.items()})


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    held = read_group_offsets(
        plain_conf(bootstrap), group, KAFKA_TIMEOUT_S, [(topic, p) for p in range(partitions)]
    )
    return {p: h.offset for (_, p), h in held.items()}


def read(spark: SparkSession, cfg: AppConfig, table: str) -> DataFrame:
    return spark.read.format("delta").load(tables_from_config(cfg).named(table))


def duplicated_sink_coordinates(sink: DataFrame) -> list[tuple[str, int, int, int]]:
    dup = sink.groupBy("kafka_topic", "kafka_partition", "kafka_offset").count().where("count > 1")
    return [(r[0], r[1], r[2], r[3]) for r in dup.collect()]


def last_completed_offsets(ledger: DataFrame, run_id: str | None = None) -> tuple[int, dict[int, int]]:
    done = ledger.where(F.col("event_type") == "CHECKPOINT_COMPLETED")
    if run_id is not None:
        done = done.where(F.col("run_id") == run_id)
    last = done.agg(F.max("checkpoint_id")).first()
    assert last is not None
    assert last[0] is not None, "no completed checkpoint in the ledger"
    rows = done.where(F.col("checkpoint_id") == last[0]).select("partition", "offset").collect()
    return int(last[0]), {r.partition: r.offset for r in rows}


TRANSACTIONS = 20  # every other one aborted


def produce_transactions(bootstrap: str, topic: str, unique: str) -> list[int]:
    """20 transactions of 2 records each, every odd one aborted; returns the committed data offsets.

    Transaction j holds offsets 3j and 3j+1 and its marker 3j+2."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{unique}"})
    producer.init_transactions(30)
    committed = []
    for j in range(TRANSACTIONS):
        producer.begin_transaction()
        for i in range(2):
            producer.produce(topic, value=f"t{j}-{i}".encode(), partition=0)
        if j % 2 == 0:
            producer.commit_transaction(30)
            committed += [3 * j, 3 * j + 1]
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    return committed
