"""Where a Flink job's Kafka source starts without state, asked of the broker (`flink-watch`).

A KafkaSource or FlinkKafkaConsumer started without state resolves its startup mode inside the job
(the log's start, its end, the group's committed offset) and Flink shows the result nowhere: the
sidecar asks the broker the same question (CONTRACTS.md section 7). One consumer, created on first
use and reused, that never subscribes, joins or commits: it only asks for watermarks and for the
group's committed offsets. The broker unreachable is logged and answered with nothing: the sidecar
never stops for it, and the ledger then claims no start offset.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaException

from app.config import KafkaConfig
from app.contracts import vocabulary as vocab
from app.contracts.offsets import TopicPartitionKey
from app.errors import InfrastructureError
from app.kafka.clients import librdkafka_conf
from app.kafka.commit import committed_offsets, watermarks

log = logging.getLogger(__name__)

# librdkafka wants a group id even to ask watermarks; asking them never joins or writes a group.
_PROBE_GROUP = "offset-audit-flink-watch"


class Positions(Protocol):
    """The broker's position of each partition for a startup mode (next offsets); partitions it
    has none for (no committed offset, no answer) are absent."""

    def at(
        self, mode: str, partitions: Sequence[TopicPartitionKey], group_id: str | None
    ) -> dict[TopicPartitionKey, int]: ...

    def close(self) -> None: ...


class BrokerPositions:
    """`Positions` from the cluster at ``bootstrap``, with the client settings of ``cfg``."""

    def __init__(self, cfg: KafkaConfig, bootstrap: str) -> None:
        self.cfg = cfg
        self.bootstrap = bootstrap
        self._consumers: dict[str, Consumer] = {}

    def _consumer(self, group_id: str) -> Consumer:
        if group_id not in self._consumers:
            extra: dict[str, Any] = {"group.id": group_id, "enable.auto.commit": False}
            conf = librdkafka_conf(self.cfg, self.bootstrap, None, **extra)
            self._consumers[group_id] = Consumer(conf)
        return self._consumers[group_id]

    def at(
        self, mode: str, partitions: Sequence[TopicPartitionKey], group_id: str | None
    ) -> dict[TopicPartitionKey, int]:
        if not partitions:
            return {}
        timeout = self.cfg.request_timeout_s
        try:
            if mode == vocab.RESTORE_GROUP:
                if group_id is None:
                    return {}
                return committed_offsets(self._consumer(group_id), partitions, timeout)
            marks = watermarks(self._consumer(_PROBE_GROUP), partitions, timeout)
        except (KafkaException, InfrastructureError) as exc:
            log.warning("flink-watch: the broker at %s gave no %s offsets: %s", self.bootstrap, mode, exc)
            return {}
        if mode == vocab.RESTORE_EARLIEST:
            return {tp: low for tp, (low, _) in marks.items()}
        if mode == vocab.RESTORE_LATEST:
            return {tp: high for tp, (_, high) in marks.items()}
        return {}

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
