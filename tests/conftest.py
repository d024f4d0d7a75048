"""Session-scoped real components: one Spark session with Delta, one real KRaft broker.

Both are started lazily by the tests that ask for them, so `pytest -m unit` never starts a JVM.
Neither fixture skips: a missing jar or JVM fails the session with the reason.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.config import AppConfig, SparkConfig
from app.demo.local_kafka import LocalKafka
from app.kafka.local_broker import BrokerState
from app.runtime import jvm
from app.runtime.spark import build_spark_session
from tests.support.config import build_config

# Every test states its instants in UTC and some render local times (the timeline, the dashboard):
# pin the process's zone so a developer's TZ cannot change an expected string.
os.environ["TZ"] = "UTC"
time.tzset()


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`-n N` (xdist's default `--dist load`) hands out whole units (tests/support/scheduling.py); an
    explicit `--dist` keeps xdist's own scheduler."""
    if config.getvalue("dist") != "load":
        return None
    from tests.support.scheduling import ByUnit  # imports xdist: only when xdist asks for a scheduler

    return ByUnit(config, log)


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("offset-audit")


@pytest.fixture(scope="session")
def app_config(session_dir: Path) -> AppConfig:
    return build_config("spark.driver_memory=2g", "spark.shuffle_partitions=2", data_dir=session_dir / "data")


@pytest.fixture(scope="session")
def spark(app_config: AppConfig, session_dir: Path) -> Iterator[SparkSession]:
    cfg = SparkConfig(**{**app_config.spark.__dict__, "mode": "local", "master": "local[2]"})
    session = build_spark_session(
        cfg, jvm.spark_extra_jars(app_config.paths.cache_dir), str(session_dir / "warehouse"), environ={}
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_broker(app_config: AppConfig, session_dir: Path) -> Iterator[BrokerState]:
    broker = LocalKafka(
        session_dir / "kafka",
        jvm.resolve_classpath("kafka", app_config.paths.cache_dir),
        offsets_partitions=app_config.local_kafka.offsets_partitions,
        die_with_parent=True,
    )
    state = broker.start()
    yield state
    broker.stop()


@pytest.fixture(scope="session")
def bootstrap(kafka_broker: BrokerState) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture
def unique() -> str:
    """A short unique suffix for topics, groups and tables, so tests sharing a broker never collide."""
    return uuid.uuid4().hex[:10]
