"""Kafka client settings for both client stacks, from one KafkaConfig.

confluent-kafka (librdkafka) serves the committer, the Admin API and producers; Spark's Java client
serves the Kafka source. Pass-through properties are handed over untouched. Errors and logs mention
the bootstrap servers but never a property value.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from app.config import KafkaConfig
from app.errors import KafkaUnavailableError
from app.kafka_local import LocalKafka

log = logging.getLogger(__name__)


def resolve_bootstrap(cfg: KafkaConfig, kafka_dir: Path) -> str:
    """The real address: configured servers, or the embedded broker's when set to 'local'."""
    if not cfg.is_local:
        return cfg.bootstrap_servers
    state = LocalKafka(kafka_dir, classpath=[]).status()
    if state is None:
        raise KafkaUnavailableError(
            f"kafka.bootstrap_servers is 'local' but no embedded broker runs under {kafka_dir}; "
            "start one with 'offset-audit kafka-local start'"
        )
    return state.bootstrap_servers


def librdkafka_conf(cfg: KafkaConfig, bootstrap: str, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": int(cfg.request_timeout_s * 1000),
    }
    conf.update(cfg.client)
    conf.update(cfg.librdkafka)
    conf.update(extra)
    return conf


def spark_kafka_options(cfg: KafkaConfig, bootstrap: str) -> dict[str, str]:
    """Options for spark.read/readStream.format('kafka'): Java client properties get the 'kafka.' prefix."""
    props = {"bootstrap.servers": bootstrap, **cfg.client, **cfg.java}
    return {f"kafka.{k}": v for k, v in props.items()}


def admin_client(cfg: KafkaConfig, bootstrap: str) -> AdminClient:
    return AdminClient(librdkafka_conf(cfg, bootstrap))


def check_reachable(cfg: KafkaConfig, bootstrap: str, timeout_s: float | None = None) -> int:
    """Number of brokers answering, or KafkaUnavailableError (exit code 3 at the CLI)."""
    timeout = timeout_s if timeout_s is not None else cfg.request_timeout_s
    try:
        md = admin_client(cfg, bootstrap).list_topics(timeout=timeout)
    except KafkaException as exc:
        reason = exc.args[0].name() if exc.args else type(exc).__name__
        raise KafkaUnavailableError(
            f"Kafka at {bootstrap} did not answer within {timeout:.0f}s ({reason})"
        ) from exc
    return len(md.brokers)
