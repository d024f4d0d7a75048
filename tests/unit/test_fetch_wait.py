"""Every consumer the project creates reads bounded ranges and does not wait at a partition's end for
records it will not read: a short fetch wait by default, the user's setting wins."""

from __future__ import annotations

import pytest

from app.kafka.clients import range_reader_conf, spark_kafka_options
from app.stream.job import source_options
from tests.support.config import build_config

pytestmark = pytest.mark.unit

BOOTSTRAP = "h:9092"


def test_stream_source_waits_10_ms_at_a_partitions_end_by_default() -> None:
    cfg = build_config(f"kafka.bootstrap_servers={BOOTSTRAP}")

    options = source_options(cfg, BOOTSTRAP)

    assert options["kafka.fetch.max.wait.ms"] == "10"
    assert options["kafka.bootstrap.servers"] == BOOTSTRAP
    assert options["kafka.isolation.level"] == "read_committed"


@pytest.mark.parametrize("section", ["java", "client"])
def test_a_configured_fetch_wait_wins_over_the_default(section: str) -> None:
    cfg = build_config(f"kafka.bootstrap_servers={BOOTSTRAP}", f"kafka.{section}.fetch.max.wait.ms=250")

    assert source_options(cfg, BOOTSTRAP)["kafka.fetch.max.wait.ms"] == "250"
    # The repair's and ingest's batch reads take the same options.
    assert spark_kafka_options(cfg.kafka, BOOTSTRAP)["kafka.fetch.max.wait.ms"] == "250"


def test_the_user_setting_of_the_stream_wins_over_its_kafka_java_isolation_level() -> None:
    cfg = build_config(
        f"kafka.bootstrap_servers={BOOTSTRAP}",
        "kafka.java.isolation.level=read_uncommitted",
        "stream.isolation_level=read_committed",
        "stream.max_offsets_per_trigger=500",
    )

    options = source_options(cfg, BOOTSTRAP)

    assert options["kafka.isolation.level"] == "read_committed"
    assert options["maxOffsetsPerTrigger"] == "500"


def test_range_readers_wait_10_ms_at_a_partitions_end_unless_configured() -> None:
    cfg = build_config(f"kafka.bootstrap_servers={BOOTSTRAP}")
    assert range_reader_conf(cfg.kafka, BOOTSTRAP, "g", "earliest")["fetch.wait.max.ms"] == 10

    tuned = build_config(f"kafka.bootstrap_servers={BOOTSTRAP}", "kafka.librdkafka.fetch.wait.max.ms=100")
    conf = range_reader_conf(
        tuned.kafka, BOOTSTRAP, "g", "earliest", defaults={"fetch.wait.max.ms": 5, "fetch.max.bytes": 1}
    )
    assert conf["fetch.wait.max.ms"] == "100"
    assert conf["fetch.max.bytes"] == 1  # a caller's default where the user set nothing
    assert conf["enable.partition.eof"] is True  # what the reader's logic relies on is never a default
