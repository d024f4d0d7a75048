"""Helpers shared by the streaming-job tests: config for one isolated job, topic setup, table reads."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig, load_config


def job_config(data_dir: Path, bootstrap: str, topic: str, group: str, job: str, *extra: str) -> AppConfig:
    return load_config(
        "local",
        overrides=[
            f"paths.data_dir={data_dir}",
            f"kafka.bootstrap_servers={bootstrap}",
            f"stream.topics=[{topic}]",
            f"stream.group_id={group}",
            f"stream.job_name={job}",
            "stream.trigger_interval=1 second",
            *extra,
        ],
        environ={},
    )


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)


def produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=f"record-{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def read(spark: SparkSession, cfg: AppConfig, table: str) -> DataFrame:
    return spark.read.format("delta").load(cfg.paths.table(table))


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
