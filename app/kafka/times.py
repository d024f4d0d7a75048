"""The source's offsets by time: where the records of an event-time window start, by the broker's
offsets-for-times lookup (ListOffsets by timestamp), and the log's bounds. `completeness` maps its
windows to offsets with it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from app.config import KafkaConfig
from app.errors import KafkaUnavailableError
from app.kafka.gaps import PartitionKey, log_bounds


class SourceTimes(Protocol):
    """What the completeness computation asks of the source (a protocol: tests pin it, the broker
    answers it in production)."""

    def bounds(self, partitions: Sequence[PartitionKey]) -> dict[PartitionKey, tuple[int, int]]:
        """(log start offset, high watermark) per partition."""
        ...

    def offsets_at(
        self, partitions: Sequence[PartitionKey], times: Sequence[datetime]
    ) -> dict[datetime, dict[PartitionKey, int]]:
        """Per time, per partition: the first offset whose record's timestamp is at or after it,
        -1 when there is none (the log end)."""
        ...


class KafkaTimes:
    """`SourceTimes` from the broker: one Admin call for the bounds, one consumer for every time
    (Consumer.offsets_for_times asks one time per partition, so one request per time), retried
    while the errors are retriable, each call within ``timeout_s``."""

    def __init__(self, kafka: KafkaConfig, bootstrap: str, timeout_s: float) -> None:
        self.kafka = kafka
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s

    def bounds(self, partitions: Sequence[PartitionKey]) -> dict[PartitionKey, tuple[int, int]]:
        from app.kafka.clients import admin_client

        if not partitions:
            return {}
        return log_bounds(admin_client(self.kafka, self.bootstrap), partitions, self.timeout_s)

    def offsets_at(
        self, partitions: Sequence[PartitionKey], times: Sequence[datetime]
    ) -> dict[datetime, dict[PartitionKey, int]]:
        from confluent_kafka import Consumer, TopicPartition

        from app.kafka.clients import raise_partition_errors, range_reader_conf, retry_kafka

        if not partitions or not times:
            return {}
        group = f"offset-audit-times-{uuid.uuid4().hex[:8]}"
        consumer = Consumer(range_reader_conf(self.kafka, self.bootstrap, group, "earliest"))
        out: dict[datetime, dict[PartitionKey, int]] = {}
        try:
            for t in times:
                ms = int(t.timestamp() * 1000)

                def ask(left: float, ms: int = ms) -> dict[PartitionKey, int]:
                    found = consumer.offsets_for_times(
                        [TopicPartition(topic, p, ms) for topic, p in partitions], timeout=left
                    )
                    raise_partition_errors(tp.error for tp in found)
                    return {(tp.topic, tp.partition): int(tp.offset) for tp in found}

                what = f"offsets for time {t.isoformat()} of {len(partitions)} partition(s)"
                out[t] = retry_kafka(ask, what, self.timeout_s)
        finally:
            consumer.close()
        return out


class UnavailableTimes:
    """`SourceTimes` for when the broker could not even be located (an embedded broker not
    running): fails only when a window has to be mapped, as `KafkaTimes` fails with a broker that
    does not answer, so the completeness computation treats both alike."""

    def __init__(self, reason: KafkaUnavailableError) -> None:
        self.reason = reason

    def bounds(self, partitions: Sequence[PartitionKey]) -> dict[PartitionKey, tuple[int, int]]:
        if not partitions:
            return {}
        raise KafkaUnavailableError(
            f"cannot read the bounds of {len(partitions)} partition(s): {self.reason}"
        )

    def offsets_at(
        self, partitions: Sequence[PartitionKey], times: Sequence[datetime]
    ) -> dict[datetime, dict[PartitionKey, int]]:
        if not partitions or not times:
            return {}
        raise KafkaUnavailableError(f"cannot map {len(times)} time(s) to offsets: {self.reason}")
