"""confluent-kafka side of the streaming job: partition discovery, start offsets and the group commit.

The committing consumer only ever calls commit() with explicit offsets: it never subscribes, so it
never joins the group as a member (like Flink's and Spark's own committers).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from app.committer import CommitError, CommitFn, CommitResult, commit_error_from_kafka
from app.errors import KafkaUnavailableError
from app.offsets import TopicPartitionKey

log = logging.getLogger(__name__)


def committing_consumer(conf: Mapping[str, Any], group_id: str) -> Consumer:
    return Consumer(
        {
            **conf,
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # Fail a commit in bounded time when the coordinator is gone, instead of waiting forever.
            "socket.timeout.ms": int(conf.get("socket.timeout.ms", 10000)),
        }
    )


def make_commit_fn(consumer: Consumer) -> CommitFn:
    def commit(offsets: Mapping[TopicPartitionKey, int]) -> CommitResult:
        request = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        try:
            answered = consumer.commit(offsets=request, asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None:
                return CommitResult.failed(CommitError(type(exc).__name__, False, str(exc)))
            return CommitResult.failed(commit_error_from_kafka(error))
        acknowledged: dict[TopicPartitionKey, int] = {}
        errors: dict[TopicPartitionKey, CommitError] = {}
        for tp in answered or []:
            if tp.error is not None:
                errors[(tp.topic, tp.partition)] = commit_error_from_kafka(tp.error)
            else:
                acknowledged[(tp.topic, tp.partition)] = tp.offset
        return CommitResult(acknowledged=acknowledged, errors=errors)

    return commit


def topic_partitions(consumer: Consumer, topics: Sequence[str], timeout_s: float) -> list[TopicPartitionKey]:
    try:
        md = consumer.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaUnavailableError(f"could not read topic metadata within {timeout_s:.0f}s: {exc}") from exc
    out: list[TopicPartitionKey] = []
    for topic in topics:
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None:
            raise KafkaUnavailableError(f"topic '{topic}' does not exist or is not readable")
        out += [(topic, p) for p in sorted(meta.partitions)]
    return out


def watermarks(
    consumer: Consumer, partitions: Sequence[TopicPartitionKey], timeout_s: float
) -> dict[TopicPartitionKey, tuple[int, int]]:
    out = {}
    for topic, partition in partitions:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailableError(f"could not read offsets of {topic}-{partition}: {exc}") from exc
        out[(topic, partition)] = (int(low), int(high))
    return out


def committed_offsets(
    consumer: Consumer, partitions: Sequence[TopicPartitionKey], timeout_s: float
) -> dict[TopicPartitionKey, int]:
    """The group's committed next-offsets; partitions without a commit are absent."""
    try:
        answered = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaUnavailableError(f"could not read the group's committed offsets: {exc}") from exc
    return {(tp.topic, tp.partition): int(tp.offset) for tp in answered if tp.offset >= 0}


def offsets_for_timestamp(
    consumer: Consumer, partitions: Sequence[TopicPartitionKey], timestamp_ms: int, timeout_s: float
) -> dict[TopicPartitionKey, int]:
    """First offset at or after the timestamp; partitions with no such record are absent."""
    query = [TopicPartition(t, p, timestamp_ms) for t, p in partitions]
    try:
        answered = consumer.offsets_for_times(query, timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaUnavailableError(f"could not look up offsets by timestamp: {exc}") from exc
    return {(tp.topic, tp.partition): int(tp.offset) for tp in answered if tp.offset >= 0}
