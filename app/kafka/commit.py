"""confluent-kafka side of the streaming job: partition discovery, start offsets and the group commit.

The committing consumer only ever calls commit() with explicit offsets: it never subscribes, so it
never joins the group as a member (like Flink's and Spark's own committers).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from app.contracts.offsets import TopicPartitionKey
from app.errors import KafkaUnavailableError
from app.kafka.clients import is_retriable, raise_partition_errors, retry_kafka
from app.stream.commit_outcome import CommitError, CommitFn, CommitResult, commit_error_from_kafka

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
        try:
            return _commit(consumer, offsets)
        finally:
            # The consumer is never polled otherwise, and librdkafka hands its log lines (failed
            # connects during an outage) to Python logging only when it is.
            consumer.poll(0)

    return commit


def _commit(consumer: Consumer, offsets: Mapping[TopicPartitionKey, int]) -> CommitResult:
    request = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    try:
        answered = consumer.commit(offsets=request, asynchronous=False)
    except KafkaException as exc:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is None:
            return CommitResult.failed(CommitError(type(exc).__name__, False, str(exc)))
        return CommitResult.failed(commit_error_from_kafka(error, is_retriable(error)))
    acknowledged: dict[TopicPartitionKey, int] = {}
    errors: dict[TopicPartitionKey, CommitError] = {}
    for tp in answered or []:
        if tp.error is not None:
            errors[(tp.topic, tp.partition)] = commit_error_from_kafka(tp.error, is_retriable(tp.error))
        else:
            acknowledged[(tp.topic, tp.partition)] = tp.offset
    return CommitResult(acknowledged=acknowledged, errors=errors)


def topic_partitions(consumer: Consumer, topics: Sequence[str], timeout_s: float) -> list[TopicPartitionKey]:
    def ask(left: float) -> Any:
        md = consumer.list_topics(timeout=left)
        # A topic whose leader is being elected answers with a retriable error: ask again. The
        # others (no such topic, no access) are final and reported below.
        errors = [md.topics[t].error for t in topics if t in md.topics and md.topics[t].error is not None]
        raise_partition_errors([e for e in errors if is_retriable(e)])
        return md

    md = retry_kafka(ask, "reading topic metadata", timeout_s)
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
    deadline = time.monotonic() + timeout_s  # one budget for all partitions
    out = {}
    for topic, partition in partitions:
        tp = TopicPartition(topic, partition)
        low, high = retry_kafka(
            functools.partial(_watermark_offsets, consumer, tp),
            f"reading the offsets of {topic}-{partition}",
            max(deadline - time.monotonic(), 0.001),
        )
        out[(topic, partition)] = (int(low), int(high))
    return out


def _watermark_offsets(consumer: Consumer, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    answer = consumer.get_watermark_offsets(tp, timeout=timeout_s)
    if answer is None:  # confluent-kafka's way of saying it timed out
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
    low, high = answer
    return int(low), int(high)


def committed_offsets(
    consumer: Consumer, partitions: Sequence[TopicPartitionKey], timeout_s: float
) -> dict[TopicPartitionKey, int]:
    """The group's committed next-offsets; partitions without a commit are absent.

    A partition answered with an error is never taken for one without a commit: the call is
    retried (NOT_COORDINATOR while the coordinator loads) or fails.
    """

    def ask(left: float) -> list[TopicPartition]:
        answered = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=left)
        raise_partition_errors([tp.error for tp in answered])
        return list(answered)

    answered = retry_kafka(ask, "reading the group's committed offsets", timeout_s)
    return {(tp.topic, tp.partition): int(tp.offset) for tp in answered if tp.offset >= 0}


def offsets_for_timestamp(
    consumer: Consumer, partitions: Sequence[TopicPartitionKey], timestamp_ms: int, timeout_s: float
) -> dict[TopicPartitionKey, int]:
    """First offset at or after the timestamp; partitions with no such record are absent."""

    def ask(left: float) -> list[TopicPartition]:
        query = [TopicPartition(t, p, timestamp_ms) for t, p in partitions]
        answered = consumer.offsets_for_times(query, timeout=left)
        raise_partition_errors([tp.error for tp in answered])
        return list(answered)

    answered = retry_kafka(ask, "looking up offsets by timestamp", timeout_s)
    return {(tp.topic, tp.partition): int(tp.offset) for tp in answered if tp.offset >= 0}
