"""confluent-kafka side of the streaming job: partition discovery, start offsets and the group commit.

The committing consumer only ever calls commit() with explicit offsets: it never subscribes, so it
never joins the group as a member (like Flink's and Spark's own committers).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from app.contracts import vocabulary as vocab
from app.contracts.offsets import TopicPartitionKey
from app.errors import KafkaUnavailableError
from app.kafka.clients import is_retriable, raise_partition_errors, retry_kafka
from app.kafka.commit_outcome import CommitError, CommitFn, CommitResult, commit_error_from_kafka

log = logging.getLogger(__name__)


def committing_consumer(
    conf: Mapping[str, Any], group_id: str, on_commit: Callable[[Any, Any], None] | None = None
) -> Consumer:
    extra = {} if on_commit is None else {"on_commit": on_commit}
    return Consumer(
        {
            **conf,
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # Fail a commit in bounded time when the coordinator is gone, instead of waiting forever.
            "socket.timeout.ms": int(conf.get("socket.timeout.ms", 10000)),
            **extra,
        }
    )


_RequestKey = tuple[tuple[str, int, int], ...]


def _request_key(partitions: Sequence[TopicPartition] | None) -> _RequestKey:
    return tuple(sorted((tp.topic, tp.partition, tp.offset) for tp in partitions or []))


@dataclass
class CommitAnswers:
    """Pairs librdkafka's asynchronous commit answers with the requests that asked for them.

    librdkafka cannot withdraw a commit it has queued: a request given up at its deadline may
    still be answered (or even stored) once the coordinator is back, and that late answer must
    not be taken for the answer to a newer request. Answers are matched by their offsets, in the
    order the requests were sent; one whose offsets match nothing pending goes to the oldest.
    """

    _pending: list[tuple[int, _RequestKey]] = field(default_factory=list)
    _answers: dict[int, tuple[KafkaError | None, list[TopicPartition]]] = field(default_factory=dict)
    _given_up: set[int] = field(default_factory=set)
    _next: int = 0

    def sent(self, request: Sequence[TopicPartition]) -> int:
        self._next += 1
        self._pending.append((self._next, _request_key(request)))
        return self._next

    def withdraw(self, token: int) -> None:
        """The request never left the client (commit() raised)."""
        self._pending = [(t, k) for t, k in self._pending if t != token]

    def give_up(self, token: int) -> None:
        self._given_up.add(token)
        self._answers.pop(token, None)

    def take(self, token: int) -> tuple[KafkaError | None, list[TopicPartition]] | None:
        return self._answers.pop(token, None)

    def on_commit(self, error: KafkaError | None, partitions: list[TopicPartition] | None) -> None:
        """librdkafka's offset-commit callback, served by poll() on the committing thread."""
        if not self._pending:
            log.warning("an offset commit answer arrived for no request: %s", error)
            return
        key = _request_key(partitions)
        index = next((i for i, (_, k) in enumerate(self._pending) if k == key), 0)
        token, _ = self._pending.pop(index)
        if token in self._given_up:
            self._given_up.discard(token)
            outcome = "failed: " + error.name() if error is not None else "stored"
            log.warning("an offset commit given up at its deadline was answered late (%s)", outcome)
            return
        self._answers[token] = (error, list(partitions or []))


def make_commit_fn(consumer: Consumer, answers: CommitAnswers, answer_timeout_s: float) -> CommitFn:
    """A commit that returns within about ``answer_timeout_s``, answered or not.

    A synchronous commit waits for the coordinator without limit, and during a broker outage it
    can wait until the broker is back. Unanswered at the deadline, the commit's outcome is
    unknown (Kafka may still store it), which is what the result then says.
    """

    def commit(offsets: Mapping[TopicPartitionKey, int]) -> CommitResult:
        try:
            result = _commit(consumer, answers, offsets, answer_timeout_s)
            # The consumer is never polled otherwise, and librdkafka hands its log lines (failed
            # connects during an outage) to Python logging only when it is.
            consumer.poll(0)
            return result
        except RuntimeError:  # confluent-kafka's "Consumer closed": shutdown gave up waiting
            message = "the consumer was closed before Kafka answered"
            return CommitResult.failed(CommitError(vocab.ERROR_OUTCOME_UNKNOWN, True, message))

    return commit


def open_commit_client(
    conf: Mapping[str, Any], group_id: str, answer_timeout_s: float
) -> tuple[Consumer, CommitFn]:
    """The committing consumer and its bounded commit function."""
    answers = CommitAnswers()
    consumer = committing_consumer(conf, group_id, on_commit=answers.on_commit)
    return consumer, make_commit_fn(consumer, answers, answer_timeout_s)


# poll() serves the commit callback but then waits out its whole timeout: short slices keep the
# answer's latency low while the deadline stays the only limit.
_POLL_SLICE_S = 0.05


def _commit(
    consumer: Consumer, answers: CommitAnswers, offsets: Mapping[TopicPartitionKey, int], timeout_s: float
) -> CommitResult:
    request = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    token = answers.sent(request)
    try:
        consumer.commit(offsets=request, asynchronous=True)
    except KafkaException as exc:
        answers.withdraw(token)
        return CommitResult.failed(_request_error(exc))
    deadline = time.monotonic() + timeout_s
    while (answer := answers.take(token)) is None:
        left = deadline - time.monotonic()
        if left <= 0:
            answers.give_up(token)
            return CommitResult.failed(_unanswered(timeout_s))
        consumer.poll(min(left, _POLL_SLICE_S))
    error, answered = answer
    if error is not None and not any(tp.error is not None for tp in answered):
        return CommitResult.failed(commit_error_from_kafka(error, is_retriable(error)))
    acknowledged: dict[TopicPartitionKey, int] = {}
    errors: dict[TopicPartitionKey, CommitError] = {}
    for tp in answered:
        if tp.error is not None:
            errors[(tp.topic, tp.partition)] = commit_error_from_kafka(tp.error, is_retriable(tp.error))
        else:
            acknowledged[(tp.topic, tp.partition)] = tp.offset
    return CommitResult(acknowledged=acknowledged, errors=errors)


def _unanswered(timeout_s: float) -> CommitError:
    # librdkafka's own name for a request that timed out: a commit failure (warn), since the
    # coordinator did not answer. Kafka may still store it once the coordinator is back; the
    # skipped-commit check judges that against __consumer_offsets.
    message = f"no answer from the group coordinator within {timeout_s:g}s; Kafka may still store it"
    return CommitError(KafkaError(KafkaError._TIMED_OUT).name(), True, message)


def _request_error(exc: KafkaException) -> CommitError:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if error is None:
        return CommitError(type(exc).__name__, False, str(exc))
    return commit_error_from_kafka(error, is_retriable(error))


def close_within(consumer: Consumer, timeout_s: float, what: str = "the committing consumer") -> bool:
    """consumer.close(), given up after ``timeout_s``.

    librdkafka's close waits for the commits still queued, and a commit given up during a broker
    outage stays queued until the broker is back; the job must still stop.
    """
    closer = threading.Thread(target=consumer.close, name="kafka-consumer-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    if closer.is_alive():
        log.warning("%s did not close within %.0fs; left to the process exit", what, timeout_s)
        return False
    return True


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
