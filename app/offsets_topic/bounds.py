"""The bounds of `__consumer_offsets` from Kafka's Admin API: its partition count, and each
partition's log start and last stable offset, which a run's ranges are planned within."""

from __future__ import annotations

import functools
import time
import typing
from collections.abc import Callable, Sequence

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from app.kafka.clients import retry_kafka


def offsets_topic_partition_count(admin: AdminClient, bootstrap: str, topic: str, timeout_s: float) -> int:
    """Partitions of the offsets topic as the cluster reports them; 0 if it does not exist yet."""
    md = retry_kafka(
        lambda left: admin.list_topics(topic=topic, timeout=left),
        f"metadata request to {bootstrap}",
        timeout_s,
    )
    info = md.topics.get(topic)
    if info is None or info.error is not None:
        # The broker creates __consumer_offsets on the first group request; no topic means no commits yet.
        return 0
    return len(info.partitions)


def log_bounds(
    admin: AdminClient, bootstrap: str, topic: str, partitions: Sequence[int], timeout_s: float
) -> tuple[dict[int, int], dict[int, int]]:
    """(log start, last stable offset) per partition. The LSO bounds a read_committed read."""

    def ask(spec: OffsetSpec, left: float) -> dict[int, int]:
        request = {TopicPartition(topic, p): spec for p in partitions}
        futures = admin.list_offsets(
            request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=left
        )
        return {tp.partition: f.result(left).offset for tp, f in futures.items()}

    # confluent-kafka's OffsetSpec factories carry no annotations; the casts only name what they return.
    earliest = typing.cast(Callable[[], OffsetSpec], OffsetSpec.earliest)()
    latest = typing.cast(Callable[[], OffsetSpec], OffsetSpec.latest)()
    deadline = time.monotonic() + timeout_s  # one budget for both requests
    start = retry_kafka(functools.partial(ask, earliest), f"list_offsets(earliest) at {bootstrap}", timeout_s)
    end = retry_kafka(
        functools.partial(ask, latest),
        f"list_offsets(latest, read_committed) at {bootstrap}",
        max(deadline - time.monotonic(), 0.001),
    )
    return start, end
