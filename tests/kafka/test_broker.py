"""The real broker: produce, read through Spark's connector, commit for a group, read back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.config import KafkaConfig
from app.demo.local_kafka import LocalKafka, free_port
from app.errors import KafkaUnavailableError
from app.kafka.clients import check_reachable, plain_conf, retry_kafka, spark_kafka_options
from app.runtime import jvm
from tests.support.config import set_options
from tests.support.streaming import KAFKA_TIMEOUT_S, create_topic, deliver, group_offsets

pytestmark = pytest.mark.kafka


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    producer = Producer(plain_conf(bootstrap, **{"enable.idempotence": True}))
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, key=f"k{i}".encode(), value=f"v{p}-{i}".encode(), partition=p)
    deliver(producer)


def test_spark_batch_reads_a_topic_through_the_connector(
    spark: SparkSession, bootstrap: str, unique: str
) -> None:
    topic = f"orders-{unique}"
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, per_partition=5, partitions=3)

    options = spark_kafka_options(KafkaConfig(bootstrap_servers=bootstrap), bootstrap)
    df = spark.read.format("kafka").options(**options).option("subscribe", topic).load()
    stats = df.groupBy("partition").agg(
        F.count("*").alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi")
    )
    assert {(r.partition, r.n, r.lo, r.hi) for r in stats.collect()} == {
        (0, 5, 0, 4),
        (1, 5, 0, 4),
        (2, 5, 0, 4),
    }
    values = sorted(r.value.decode() for r in df.where("partition = 1").select("value").collect())
    assert values == [f"v1-{i}" for i in range(5)]


def test_group_commit_reads_back_through_admin_api(bootstrap: str, unique: str) -> None:
    topic, group = f"pay-{unique}", f"audited-{unique}"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, per_partition=10, partitions=2)

    # An offset-only committer like Flink's: assign, never subscribe, so it never joins the group.
    consumer = Consumer(plain_conf(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    offsets = [TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 10)]
    try:
        # Explicit offsets: committing them again after a retriable error is harmless.
        retry_kafka(
            lambda left: consumer.commit(offsets=offsets, asynchronous=False), "committing", KAFKA_TIMEOUT_S
        )
    finally:
        consumer.close()

    assert group_offsets(bootstrap, group, topic, 2) == {0: 7, 1: 10}


def test_reachability_check_counts_brokers(bootstrap: str) -> None:
    assert check_reachable(KafkaConfig(bootstrap_servers=bootstrap), bootstrap) == 1


def test_unreachable_broker_is_a_clear_infrastructure_error() -> None:
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(KafkaUnavailableError, match=f"{dead}: Kafka did not answer within 2s"):
        check_reachable(KafkaConfig(bootstrap_servers=dead), dead, timeout_s=2)


def test_cli_manages_a_broker_and_leaves_no_jvm(tmp_path: Path) -> None:
    """`kafka-local start|status|stop` through the real CLI process, as a user would run it."""

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "app.cli", "kafka-local", *args, "--json"]
        cmd += set_options(data_dir=tmp_path)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)

    started = cli("start")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    assert json.loads(cli("status").stdout)["running"] is True
    assert cli("start").returncode == 0  # idempotent: reuses the running broker
    assert json.loads(cli("status").stdout)["pid"] == pid

    stopped = cli("stop")
    assert json.loads(stopped.stdout) == {"stopped": True}
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    status = cli("status")
    assert status.returncode == 3
    assert json.loads(status.stdout) == {"running": False}
    assert LocalKafka(tmp_path / "kafka", []).status() is None


# What `ingest-offsets --mode snapshot` asks, in a process of its own: a crash must show as its exit code.
FIRST_READS = """
import json, sys
from app.kafka.clients import plain_conf
from app.offsets_topic.snapshot import committed_offsets
print(json.dumps(committed_offsets(plain_conf(sys.argv[1]), [f"fresh-{i}" for i in range(5)], 120)))
"""


def test_the_first_offset_reads_of_a_broker_just_started_do_not_kill_the_process(tmp_path: Path) -> None:
    """librdkafka's Admin API OffsetFetch kills the process (SIGSEGV) when the group coordinator
    answers NOT_COORDINATOR, which a broker that has just started answers while it loads the offsets
    topic (app/kafka/group_offsets.py). Snapshot mode, repair and the demo read a group's offsets
    through a consumer of the group instead: asked at once of a new broker, they answer."""
    broker = LocalKafka(
        tmp_path / "kafka", jvm.resolve_classpath("kafka"), offsets_partitions=4, die_with_parent=True
    )
    bootstrap = broker.start().bootstrap_servers
    try:
        child = subprocess.run(
            [sys.executable, "-c", FIRST_READS, bootstrap], capture_output=True, text=True, timeout=300
        )
    finally:
        broker.stop()
    assert child.returncode == 0, child.stderr[-3000:]
    assert json.loads(child.stdout) == []
