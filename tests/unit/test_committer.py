"""The commit-on-checkpoint committer: Flink's semantics, and the ledger events each path records.

Racy states (a commit in flight while newer checkpoints complete) are reached deterministically:
either with ``autostart=False`` and ``run_once()`` (the commit function itself completes newer
checkpoints while it is "in flight"), or with the real worker thread blocked on a threading.Event.
No test sleeps to wait for the worker.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from app.contracts.offsets import (
    EARLIEST_OFFSET,
    GROUP_OFFSET,
    LATEST_OFFSET,
    OFFSET_NOT_SET,
    TIMESTAMP,
    LedgerEvent,
    TopicPartitionKey,
)
from app.contracts.vocabulary import (
    ENGINE_FLINK_KAFKASOURCE,
    ENGINE_FLINK_LEGACY,
    ENGINE_SPARK,
    ERROR_NOT_SENT,
    ERROR_OUTCOME_UNKNOWN,
    EVENT_CHECKPOINT_COMPLETED,
    EVENT_CHECKPOINT_SNAPSHOT,
    EVENT_COMMIT_FAILED,
    EVENT_COMMIT_REQUESTED,
    EVENT_COMMIT_SKIPPED,
    EVENT_COMMIT_SUCCEEDED,
)
from app.errors import CommitterStateError, ConfigError, UnknownEngineError
from app.kafka.commit import CommitAnswers, make_commit_fn
from app.kafka.commit_outcome import CommitError, CommitFailedError, CommitResult, commit_error_from_kafka
from app.stream.committer import MAX_NUM_PENDING_CHECKPOINTS, SUPERSEDED_WARNING, OffsetCommitter

pytestmark = pytest.mark.unit

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
WAIT = 10.0  # upper bound for Event waits; a passing test never comes near it

Offsets = Mapping[TopicPartitionKey, int]


class FakeClock:
    """One second later on every call, so event order is visible in event_time."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def __call__(self) -> datetime:
        return T0 + timedelta(seconds=next(self._ticks))


class RecordingCommit:
    """A commit_fn that records what it was asked and acknowledges everything unless told otherwise."""

    def __init__(self, result: CommitResult | None = None) -> None:
        self.calls: list[dict[TopicPartitionKey, int]] = []
        self.result = result

    def __call__(self, offsets: Offsets) -> CommitResult:
        self.calls.append(dict(offsets))
        return self.result if self.result is not None else CommitResult.ok(offsets)


def make_committer(commit_fn: object = None, **kwargs: object) -> OffsetCommitter:
    options: dict[str, object] = {
        "job_name": "orders",
        "run_id": "run-1",
        "engine": ENGINE_SPARK,
        "group_id": "orders-audit",
        "commit_fn": commit_fn if commit_fn is not None else RecordingCommit(),
        "clock": FakeClock(),
        "autostart": False,
    }
    options.update(kwargs)
    return OffsetCommitter(**options)  # type: ignore[arg-type]


def of_type(events: list[LedgerEvent], event_type: str) -> list[LedgerEvent]:
    return [e for e in events if e.event_type == event_type]


def rows(events: list[LedgerEvent]) -> list[tuple[object, ...]]:
    """The columns most assertions care about, in recording order."""
    return [(e.event_type, e.checkpoint_id, e.topic, e.partition, e.raw_offset, e.offset) for e in events]


# --- snapshot and the pending bound ----------------------------------------------------------------


def test_snapshot_records_one_event_per_partition_and_keeps_offsets_pending() -> None:
    committer = make_committer()
    committer.snapshot(1, {("t", 1): 20, ("t", 0): 10})
    assert rows(committer.drain()) == [
        (EVENT_CHECKPOINT_SNAPSHOT, 1, "t", 0, 10, 10),
        (EVENT_CHECKPOINT_SNAPSHOT, 1, "t", 1, 20, 20),
    ]
    assert committer.pending_checkpoint_ids == (1,)
    assert committer.drain() == []


def test_pending_bound_evicts_the_oldest_with_pending_evicted() -> None:
    commit = RecordingCommit()
    committer = make_committer(commit, max_pending=3)
    for checkpoint_id in range(1, 6):
        committer.snapshot(checkpoint_id, {("t", 0): checkpoint_id * 10})
    assert committer.pending_checkpoint_ids == (3, 4, 5)
    skipped = of_type(committer.drain(), EVENT_COMMIT_SKIPPED)
    assert [(e.checkpoint_id, e.offset, dict(e.detail)) for e in skipped] == [
        (1, 10, {"reason": "pending_evicted", "evicted_by": 4}),
        (2, 20, {"reason": "pending_evicted", "evicted_by": 5}),
    ]
    assert not committer.notify_checkpoint_complete(1)  # evicted ids are unknown afterwards
    assert commit.calls == []


def test_default_pending_bound_is_flinks_100() -> None:
    committer = make_committer()
    assert MAX_NUM_PENDING_CHECKPOINTS == 100
    for checkpoint_id in range(101):
        committer.snapshot(checkpoint_id, {("t", 0): checkpoint_id})
    assert len(committer.pending_checkpoint_ids) == 100
    assert committer.pending_checkpoint_ids[0] == 1
    assert [e.checkpoint_id for e in of_type(committer.drain(), EVENT_COMMIT_SKIPPED)] == [0]


def test_snapshot_rejects_corrupt_offsets_before_recording_anything() -> None:
    committer = make_committer()
    with pytest.raises(ValueError, match="neither valid nor a sentinel"):
        committer.snapshot(1, {("t", 0): 5, ("t", 1): -7})
    assert committer.drain() == []
    assert committer.pending_checkpoint_ids == ()


# --- notify_checkpoint_complete --------------------------------------------------------------------


def test_completing_a_checkpoint_discards_older_pending_ones_without_commit_or_skip_rows() -> None:
    commit = RecordingCommit()
    committer = make_committer(commit)
    for checkpoint_id in (1, 2, 3, 4):
        committer.snapshot(checkpoint_id, {("t", 0): checkpoint_id * 10})
    committer.drain()

    assert committer.notify_checkpoint_complete(3)
    assert committer.pending_checkpoint_ids == (4,)
    events = committer.drain()
    assert of_type(events, EVENT_COMMIT_SKIPPED) == []
    (completed,) = of_type(events, EVENT_CHECKPOINT_COMPLETED)
    assert (completed.checkpoint_id, completed.offset) == (3, 30)
    assert dict(completed.detail) == {"discarded_pending": [1, 2]}

    assert committer.run_once() == 3
    assert commit.calls == [{("t", 0): 30}]
    # A discarded checkpoint whose completion arrives late is then reported as unknown.
    assert not committer.notify_checkpoint_complete(2)
    assert [dict(e.detail) for e in of_type(committer.drain(), EVENT_COMMIT_SKIPPED)] == [
        {"reason": "unknown_checkpoint"}
    ]


def test_unknown_checkpoint_is_recorded_completed_and_skipped_without_commit() -> None:
    commit = RecordingCommit()
    committer = make_committer(commit)
    assert not committer.notify_checkpoint_complete(9)
    assert committer.run_once() is None
    assert commit.calls == []
    events = committer.drain()
    assert rows(events) == [
        (EVENT_CHECKPOINT_COMPLETED, 9, None, None, None, None),
        (EVENT_COMMIT_SKIPPED, 9, None, None, None, None),
    ]
    assert events[1].detail_json == '{"reason":"unknown_checkpoint"}'


def test_checkpoint_without_partitions_is_skipped_as_empty_offsets() -> None:
    commit = RecordingCommit()
    committer = make_committer(commit)
    committer.snapshot(1, {})
    assert not committer.notify_checkpoint_complete(1)
    assert committer.run_once() is None
    assert commit.calls == []
    events = committer.drain()
    # One checkpoint-level row each, so the snapshot is not mistaken for missing.
    assert [e.event_type for e in events] == [
        EVENT_CHECKPOINT_SNAPSHOT,
        EVENT_CHECKPOINT_COMPLETED,
        EVENT_COMMIT_SKIPPED,
    ]
    assert dict(events[-1].detail) == {"reason": "empty_offsets", "filtered_partitions": []}


SENTINEL_CASES = [
    (ENGINE_SPARK, [-1, -2]),
    (ENGINE_FLINK_KAFKASOURCE, [-1, -2, -3]),
    (ENGINE_FLINK_LEGACY, [OFFSET_NOT_SET, EARLIEST_OFFSET, LATEST_OFFSET, GROUP_OFFSET, TIMESTAMP]),
]


@pytest.mark.parametrize(("engine", "sentinels"), SENTINEL_CASES)
def test_sentinel_offsets_are_filtered_out_of_the_commit(engine: str, sentinels: list[int]) -> None:
    commit = RecordingCommit()
    committer = make_committer(commit, engine=engine)
    offsets = {("s", i): raw for i, raw in enumerate(sentinels)} | {("t", 0): 100}
    committer.snapshot(1, offsets)
    assert committer.notify_checkpoint_complete(1)
    assert committer.run_once() == 1
    expected = 101 if engine == ENGINE_FLINK_LEGACY else 100
    assert commit.calls == [{("t", 0): expected}]
    events = committer.drain()
    snapshot = of_type(events, EVENT_CHECKPOINT_SNAPSHOT)
    assert [e.raw_offset for e in snapshot if e.topic == "s"] == sentinels
    assert {e.offset for e in snapshot if e.topic == "s"} == {None}
    assert [(e.topic, e.partition) for e in of_type(events, EVENT_COMMIT_REQUESTED)] == [("t", 0)]


@pytest.mark.parametrize(("engine", "sentinels"), SENTINEL_CASES)
def test_only_sentinel_offsets_are_skipped_as_empty_offsets(engine: str, sentinels: list[int]) -> None:
    commit = RecordingCommit()
    committer = make_committer(commit, engine=engine)
    committer.snapshot(1, {("s", i): raw for i, raw in enumerate(sentinels)})
    assert not committer.notify_checkpoint_complete(1)
    assert commit.calls == []
    (skipped,) = of_type(committer.drain(), EVENT_COMMIT_SKIPPED)
    assert skipped.detail["reason"] == "empty_offsets"
    assert skipped.detail["filtered_partitions"] == [["s", i] for i in range(len(sentinels))]


def test_legacy_minus_one_is_normalized_but_not_committed_as_flink_filters_negatives() -> None:
    commit = RecordingCommit()
    committer = make_committer(commit, engine=ENGINE_FLINK_LEGACY)
    committer.snapshot(1, {("t", 0): -1, ("t", 1): 5})
    committer.notify_checkpoint_complete(1)
    committer.run_once()
    assert commit.calls == [{("t", 1): 6}]
    snapshot = of_type(committer.drain(), EVENT_CHECKPOINT_SNAPSHOT)
    assert [(e.raw_offset, e.offset) for e in snapshot] == [(-1, 0), (5, 6)]


def test_commit_disabled_records_the_skip_per_partition_and_never_commits() -> None:
    commit = RecordingCommit()
    committer = make_committer(commit, commit_enabled=False)
    committer.snapshot(1, {("t", 0): 10, ("t", 1): 20})
    assert not committer.notify_checkpoint_complete(1)
    assert committer.run_once() is None
    assert commit.calls == []
    skipped = of_type(committer.drain(), EVENT_COMMIT_SKIPPED)
    assert [(e.partition, e.offset, e.detail["reason"]) for e in skipped] == [
        (0, 10, "commit_disabled"),
        (1, 20, "commit_disabled"),
    ]


# --- the slot: superseded in flight ----------------------------------------------------------------


def test_newer_completion_supersedes_a_request_still_waiting_in_the_slot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    commit = RecordingCommit()
    committer = make_committer(commit)
    committer.snapshot(1, {("t", 0): 10, ("t", 1): 11})
    committer.snapshot(2, {("t", 0): 20, ("t", 1): 21})
    committer.notify_checkpoint_complete(1)
    with caplog.at_level(logging.WARNING, logger="app.stream.committer"):
        committer.notify_checkpoint_complete(2)

    assert committer.run_once() == 2
    assert committer.run_once() is None
    assert commit.calls == [{("t", 0): 20, ("t", 1): 21}]
    skipped = of_type(committer.drain(), EVENT_COMMIT_SKIPPED)
    assert [(e.checkpoint_id, e.partition, e.offset, dict(e.detail)) for e in skipped] == [
        (1, 0, 10, {"reason": "superseded_in_flight", "attempt": 1, "superseded_by": 2}),
        (1, 1, 11, {"reason": "superseded_in_flight", "attempt": 1, "superseded_by": 2}),
    ]
    assert SUPERSEDED_WARNING.startswith(
        "Committing offsets to Kafka takes longer than the checkpoint interval. "
        "Skipping commit of previous offsets"
    )
    assert any(SUPERSEDED_WARNING in record.getMessage() for record in caplog.records)


def test_checkpoints_completing_during_a_commit_in_flight_keep_only_the_newest() -> None:
    # The commit function completes checkpoints 2 and 3 while checkpoint 1's commit is in flight:
    # exactly Flink's "commit takes longer than the checkpoint interval", without threads.
    committer: OffsetCommitter
    seen_in_flight: list[int | None] = []
    calls: list[dict[TopicPartitionKey, int]] = []

    def commit_fn(offsets: Offsets) -> CommitResult:
        calls.append(dict(offsets))
        if len(calls) == 1:
            seen_in_flight.append(committer.in_flight())
            committer.notify_checkpoint_complete(2)
            committer.notify_checkpoint_complete(3)
            assert committer.run_once() is None  # at most one commit in flight
        return CommitResult.ok(offsets)

    committer = make_committer(commit_fn)
    for checkpoint_id in (1, 2, 3):
        committer.snapshot(checkpoint_id, {("t", 0): checkpoint_id * 10})
    committer.notify_checkpoint_complete(1)

    assert committer.run_once() == 1
    assert committer.run_once() == 3
    assert seen_in_flight == [1]
    assert calls == [{("t", 0): 10}, {("t", 0): 30}]
    events = committer.drain()
    assert [(e.checkpoint_id, e.detail["reason"]) for e in of_type(events, EVENT_COMMIT_SKIPPED)] == [
        (2, "superseded_in_flight")
    ]
    assert [e.checkpoint_id for e in of_type(events, EVENT_COMMIT_SUCCEEDED)] == [1, 3]
    assert committer.successful_commits == 2


def test_worker_thread_supersedes_while_a_commit_blocks_then_commits_the_newest() -> None:
    entered = threading.Event()
    release = threading.Event()
    calls: list[dict[TopicPartitionKey, int]] = []

    def commit_fn(offsets: Offsets) -> CommitResult:
        calls.append(dict(offsets))
        entered.set()
        assert release.wait(WAIT)
        return CommitResult.ok(offsets)

    committer = make_committer(commit_fn, autostart=True)
    try:
        for checkpoint_id in (1, 2, 3):
            committer.snapshot(checkpoint_id, {("t", 0): checkpoint_id * 10})
        committer.notify_checkpoint_complete(1)
        assert entered.wait(WAIT)
        assert committer.in_flight() == 1
        committer.notify_checkpoint_complete(2)
        committer.notify_checkpoint_complete(3)
        with pytest.raises(CommitterStateError):
            committer.run_once()
    finally:
        release.set()
    assert committer.close(timeout=WAIT)

    assert calls == [{("t", 0): 10}, {("t", 0): 30}]
    events = committer.drain()
    assert [(e.checkpoint_id, e.detail["superseded_by"]) for e in of_type(events, EVENT_COMMIT_SKIPPED)] == [
        (2, 3)
    ]
    assert [e.checkpoint_id for e in of_type(events, EVENT_COMMIT_SUCCEEDED)] == [1, 3]
    assert committer.in_flight() is None


# --- outcomes --------------------------------------------------------------------------------------


def test_success_is_recorded_per_acknowledged_partition_with_the_acknowledged_offset() -> None:
    acknowledged = {("t", 0): 10, ("t", 1): 25}  # the broker stored 25 where 21 was asked
    committer = make_committer(RecordingCommit(CommitResult.ok(acknowledged)))
    committer.snapshot(1, {("t", 0): 10, ("t", 1): 21})
    committer.notify_checkpoint_complete(1)
    committer.run_once()
    succeeded = of_type(committer.drain(), EVENT_COMMIT_SUCCEEDED)
    assert [(e.partition, e.raw_offset, e.offset, dict(e.detail)) for e in succeeded] == [
        (0, 10, 10, {"attempt": 1}),
        (1, 21, 25, {"attempt": 1, "requested_offset": 21}),
    ]


def test_per_partition_failures_are_typed_and_the_rest_succeeds() -> None:
    not_coordinator = CommitError("NOT_COORDINATOR", retriable=True, message="coordinator moved")
    result = CommitResult(acknowledged={("t", 0): 10}, errors={("t", 1): not_coordinator})
    committer = make_committer(RecordingCommit(result))
    committer.snapshot(1, {("t", 0): 10, ("t", 1): 20})
    committer.notify_checkpoint_complete(1)
    committer.run_once()
    events = committer.drain()
    assert [e.partition for e in of_type(events, EVENT_COMMIT_SUCCEEDED)] == [0]
    (failed,) = of_type(events, EVENT_COMMIT_FAILED)
    assert (failed.partition, failed.offset, failed.raw_offset) == (1, 20, 20)
    assert dict(failed.detail) == {
        "attempt": 1,
        "error": "NOT_COORDINATOR",
        "retriable": True,
        "message": "coordinator moved",
    }
    assert (committer.successful_commits, committer.failed_commits) == (0, 1)


def test_a_raised_commit_failure_fails_every_partition_with_its_non_retriable_error() -> None:
    fenced = CommitError("ILLEGAL_GENERATION", retriable=False, message="generation fenced")

    def commit_fn(offsets: Offsets) -> CommitResult:
        raise CommitFailedError(fenced)

    committer = make_committer(commit_fn)
    committer.snapshot(1, {("t", 0): 10, ("t", 1): 20})
    committer.notify_checkpoint_complete(1)
    committer.run_once()
    failed = of_type(committer.drain(), EVENT_COMMIT_FAILED)
    assert [(e.partition, e.detail["error"], e.detail["retriable"]) for e in failed] == [
        (0, "ILLEGAL_GENERATION", False),
        (1, "ILLEGAL_GENERATION", False),
    ]


def test_a_returned_request_error_applies_to_partitions_without_their_own_outcome() -> None:
    down = CommitError("_TRANSPORT", retriable=True, message="broker down")
    committer = make_committer(RecordingCommit(CommitResult.failed(down)))
    committer.snapshot(1, {("t", 0): 10})
    committer.notify_checkpoint_complete(1)
    committer.run_once()
    (failed,) = of_type(committer.drain(), EVENT_COMMIT_FAILED)
    assert (failed.detail["error"], failed.detail["retriable"]) == ("_TRANSPORT", True)


def test_a_partition_missing_from_the_acknowledgement_is_outcome_unknown() -> None:
    committer = make_committer(RecordingCommit(CommitResult.ok({("t", 0): 10})))
    committer.snapshot(1, {("t", 0): 10, ("t", 1): 20})
    committer.notify_checkpoint_complete(1)
    committer.run_once()
    (failed,) = of_type(committer.drain(), EVENT_COMMIT_FAILED)
    assert (failed.partition, failed.detail["error"], failed.detail["retriable"]) == (
        1,
        ERROR_OUTCOME_UNKNOWN,
        True,
    )


def test_an_unexpected_exception_is_a_failed_commit_and_the_worker_survives() -> None:
    outcomes = iter([RuntimeError("boom"), None])
    first_outcome = threading.Event()

    def commit_fn(offsets: Offsets) -> CommitResult:
        exc = next(outcomes)
        if exc is not None:
            raise exc
        return CommitResult.ok(offsets)

    def listener(event: LedgerEvent) -> None:
        if event.event_type == EVENT_COMMIT_FAILED:
            first_outcome.set()

    committer = make_committer(commit_fn, autostart=True, listener=listener)
    committer.snapshot(1, {("t", 0): 10})
    committer.notify_checkpoint_complete(1)
    assert first_outcome.wait(WAIT)
    committer.snapshot(2, {("t", 0): 20})
    committer.notify_checkpoint_complete(2)
    assert committer.close(timeout=WAIT)

    events = committer.drain()
    (failed,) = of_type(events, EVENT_COMMIT_FAILED)
    assert dict(failed.detail) == {
        "attempt": 1,
        "error": "RuntimeError",
        "retriable": False,
        "message": "boom",
    }
    assert [e.checkpoint_id for e in of_type(events, EVENT_COMMIT_SUCCEEDED)] == [2]
    assert (committer.successful_commits, committer.failed_commits) == (1, 1)


def test_commit_error_from_kafka_reads_name_retriable_and_message() -> None:
    # confluent-kafka is a runtime dependency: a missing one must fail here, not skip.
    kafka_error = KafkaError(KafkaError.NOT_COORDINATOR, "coordinator moved", retriable=True)
    assert commit_error_from_kafka(kafka_error) == CommitError(
        "NOT_COORDINATOR", retriable=True, message="coordinator moved"
    )


class _RefusingConsumer:
    """Answers every commit with one Kafka error, as a consumer whose coordinator moved would."""

    def __init__(self, error: KafkaError) -> None:
        self.error = error
        self.polls = 0

    def commit(self, offsets: object, asynchronous: bool) -> None:
        raise KafkaException(self.error)

    def poll(self, timeout: float) -> None:
        self.polls += 1


@pytest.mark.parametrize(
    ("code", "retriable"),
    [(KafkaError.NOT_COORDINATOR, True), (KafkaError.GROUP_AUTHORIZATION_FAILED, False)],
)
def test_commit_failures_carry_kafkas_retriable_classification(code: int, retriable: bool) -> None:
    # confluent-kafka's own flag is off for NOT_COORDINATOR; the ledger must still say retriable.
    consumer = _RefusingConsumer(KafkaError(code))
    result = make_commit_fn(consumer, CommitAnswers(), 5.0)({("t", 0): 5})  # type: ignore[arg-type]
    assert result.error is not None
    assert (result.error.error, result.error.retriable) == (KafkaError(code).name(), retriable)
    assert consumer.polls == 1  # librdkafka's queued log lines are served after every commit


class _AsyncConsumer:
    """Answers asynchronous commits through the on_commit callback when polled, as librdkafka does;
    `held` commits stay unanswered until `release()` (a coordinator that is gone, then back)."""

    def __init__(self, answers: CommitAnswers) -> None:
        self.answers = answers
        self.hold = False
        self.held: list[list[TopicPartition]] = []
        self.ready: list[list[TopicPartition]] = []

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous, "a synchronous commit waits for the coordinator without limit"
        (self.held if self.hold else self.ready).append(offsets)

    def release(self) -> None:
        self.ready, self.held = self.held + self.ready, []

    def poll(self, timeout: float) -> None:
        while self.ready:
            self.answers.on_commit(None, self.ready.pop(0))


def test_an_answered_asynchronous_commit_is_acknowledged_per_partition() -> None:
    answers = CommitAnswers()
    commit = make_commit_fn(_AsyncConsumer(answers), answers, 30.0)  # type: ignore[arg-type]
    result = commit({("t", 1): 7, ("t", 0): 5})
    assert (result.acknowledged, result.errors, result.error) == ({("t", 0): 5, ("t", 1): 7}, {}, None)


def test_an_unanswered_commit_ends_at_its_deadline_as_a_retriable_timeout() -> None:
    answers = CommitAnswers()
    consumer = _AsyncConsumer(answers)
    consumer.hold = True
    result = make_commit_fn(consumer, answers, 0.2)({("t", 0): 5})  # type: ignore[arg-type]
    assert result.error is not None
    assert (result.error.error, result.error.retriable) == ("_TIMED_OUT", True)
    assert "within 0.2s" in result.error.message


@pytest.mark.parametrize("next_offset", [5, 9], ids=["same offsets again", "newer offsets"])
def test_a_late_answer_to_a_given_up_commit_is_never_taken_for_the_next_ones(next_offset: int) -> None:
    answers = CommitAnswers()
    consumer = _AsyncConsumer(answers)
    commit = make_commit_fn(consumer, answers, 0.2)  # type: ignore[arg-type]
    consumer.hold = True
    assert commit({("t", 0): 5}).error is not None
    consumer.hold = False
    consumer.release()  # the coordinator is back: the old answer comes first, then the new one
    result = commit({("t", 0): next_offset})
    assert result.acknowledged == {("t", 0): next_offset}
    assert answers.take(1) is None
    assert answers.take(2) is None


def test_commit_answers_pair_by_offsets_before_order() -> None:
    answers = CommitAnswers()
    first = answers.sent([TopicPartition("t", 0, 5)])
    second = answers.sent([TopicPartition("t", 0, 9)])
    answers.on_commit(None, [TopicPartition("t", 0, 9)])
    answers.on_commit(None, [TopicPartition("t", 0, 5)])
    taken_second, taken_first = answers.take(second), answers.take(first)
    assert taken_second is not None
    assert taken_second[1][0].offset == 9
    assert taken_first is not None
    assert taken_first[1][0].offset == 5


# --- semantics: +1 for Flink legacy, unchanged for next-offset engines -----------------------------


@pytest.mark.parametrize(
    ("engine", "raw", "committed", "semantics"),
    [
        (ENGINE_FLINK_LEGACY, 41, 42, "last_processed"),
        (ENGINE_FLINK_KAFKASOURCE, 42, 42, "next"),
        (ENGINE_SPARK, 42, 42, "next"),
    ],
)
def test_rows_keep_raw_offset_and_normalized_offset_and_kafka_gets_the_next_offset(
    engine: str, raw: int, committed: int, semantics: str
) -> None:
    commit = RecordingCommit()
    committer = make_committer(commit, engine=engine)
    committer.snapshot(1, {("t", 0): raw})
    committer.notify_checkpoint_complete(1)
    committer.run_once()
    assert commit.calls == [{("t", 0): committed}]
    events = committer.drain()
    assert [(e.event_type, e.raw_offset, e.offset) for e in events] == [
        (EVENT_CHECKPOINT_SNAPSHOT, raw, committed),
        (EVENT_CHECKPOINT_COMPLETED, raw, committed),
        (EVENT_COMMIT_REQUESTED, raw, committed),
        (EVENT_COMMIT_SUCCEEDED, raw, committed),
    ]
    assert {e.offset_semantics for e in events} == {semantics}
    assert {e.engine for e in events} == {engine}


# --- counters, listener, idempotency keys ----------------------------------------------------------


def test_counters_count_commit_attempts_not_partitions() -> None:
    results = iter(
        [
            None,  # acknowledge
            CommitResult.failed(CommitError("REBALANCE_IN_PROGRESS", retriable=True)),
            None,
        ]
    )

    def commit_fn(offsets: Offsets) -> CommitResult:
        return next(results) or CommitResult.ok(offsets)

    committer = make_committer(commit_fn)
    for checkpoint_id in (1, 2, 3):
        committer.snapshot(checkpoint_id, {("t", 0): checkpoint_id, ("t", 1): checkpoint_id})
        committer.notify_checkpoint_complete(checkpoint_id)
        committer.run_once()
    assert (committer.successful_commits, committer.failed_commits) == (2, 1)


def test_listener_sees_every_event_in_recording_order_and_cannot_break_the_committer() -> None:
    heard: list[LedgerEvent] = []

    def listener(event: LedgerEvent) -> None:
        heard.append(event)
        if event.event_type == EVENT_COMMIT_REQUESTED:
            raise RuntimeError("metrics backend down")

    committer = make_committer(listener=listener)
    committer.snapshot(1, {("t", 0): 10})
    committer.notify_checkpoint_complete(1)
    committer.run_once()
    assert heard == committer.drain()
    assert [e.event_type for e in heard] == [
        EVENT_CHECKPOINT_SNAPSHOT,
        EVENT_CHECKPOINT_COMPLETED,
        EVENT_COMMIT_REQUESTED,
        EVENT_COMMIT_SUCCEEDED,
    ]


def test_event_times_come_from_the_injected_clock() -> None:
    committer = make_committer()
    committer.snapshot(1, {("t", 0): 10})
    committer.notify_checkpoint_complete(1)
    events = committer.drain()
    assert [e.event_time for e in events] == [T0, T0 + timedelta(seconds=1), T0 + timedelta(seconds=1)]


def test_every_event_of_a_busy_run_has_a_distinct_event_key() -> None:
    committer = make_committer(max_pending=2)
    for checkpoint_id in (1, 2, 3, 4):
        committer.snapshot(checkpoint_id, {("t", 0): checkpoint_id, ("t", 1): checkpoint_id})
    committer.notify_checkpoint_complete(3)
    committer.notify_checkpoint_complete(4)  # supersedes 3 in the slot
    committer.notify_checkpoint_complete(1)  # evicted earlier, now unknown
    committer.run_once()
    events = committer.drain()
    keys = [e.event_key for e in events]
    assert len(keys) == len(set(keys))


# --- lifecycle: close, abandon ----------------------------------------------------------------------


def test_close_flushes_the_slot_inline_without_a_worker_thread() -> None:
    commit = RecordingCommit()
    committer = make_committer(commit)
    committer.snapshot(1, {("t", 0): 10})
    committer.notify_checkpoint_complete(1)
    assert committer.close()
    assert commit.calls == [{("t", 0): 10}]
    assert of_type(committer.drain(), EVENT_COMMIT_SUCCEEDED)
    with pytest.raises(CommitterStateError):
        committer.snapshot(2, {("t", 0): 20})
    with pytest.raises(CommitterStateError):
        committer.notify_checkpoint_complete(1)


def test_close_waits_for_the_commit_in_flight_and_flushes_the_slot_before_stopping() -> None:
    entered = threading.Event()
    release = threading.Event()
    calls: list[dict[TopicPartitionKey, int]] = []

    def commit_fn(offsets: Offsets) -> CommitResult:
        calls.append(dict(offsets))
        entered.set()
        assert release.wait(WAIT)
        return CommitResult.ok(offsets)

    committer = make_committer(commit_fn, autostart=True)
    committer.snapshot(1, {("t", 0): 10})
    committer.snapshot(2, {("t", 0): 20})
    committer.notify_checkpoint_complete(1)
    assert entered.wait(WAIT)
    committer.notify_checkpoint_complete(2)
    results: list[bool] = []
    closer = threading.Thread(target=lambda: results.append(committer.close(timeout=WAIT)))
    closer.start()
    # close() cannot return while the commit is blocked on an Event nobody has set.
    closer.join(0.05)
    assert closer.is_alive()
    release.set()
    closer.join(WAIT)
    assert results == [True]
    assert calls == [{("t", 0): 10}, {("t", 0): 20}]
    assert [e.checkpoint_id for e in of_type(committer.drain(), EVENT_COMMIT_SUCCEEDED)] == [1, 2]
    assert committer.in_flight() is None


def test_abandon_in_flight_records_outcome_unknown_and_not_sent_when_close_times_out() -> None:
    entered = threading.Event()
    release = threading.Event()

    def commit_fn(offsets: Offsets) -> CommitResult:
        entered.set()
        assert release.wait(WAIT)
        return CommitResult.ok(offsets)

    committer = make_committer(commit_fn, autostart=True)
    committer.snapshot(1, {("t", 0): 10, ("t", 1): 11})
    committer.snapshot(2, {("t", 0): 20})
    committer.notify_checkpoint_complete(1)
    assert entered.wait(WAIT)
    committer.notify_checkpoint_complete(2)
    committer.drain()
    try:
        # The commit is blocked on an Event nobody sets yet, so close must give up.
        assert not committer.close(timeout=0.05)
        assert committer.in_flight() == 1
        assert committer.abandon_in_flight() == [1, 2]
        assert committer.abandon_in_flight() == []  # already closed out
    finally:
        release.set()

    abandoned = committer.drain()
    assert [
        (e.checkpoint_id, e.partition, e.offset, e.detail["error"], e.detail["retriable"]) for e in abandoned
    ] == [
        (1, 0, 10, ERROR_OUTCOME_UNKNOWN, True),
        (1, 1, 11, ERROR_OUTCOME_UNKNOWN, True),
        (2, 0, 20, ERROR_NOT_SENT, True),
    ]
    assert {e.event_type for e in abandoned} == {EVENT_COMMIT_FAILED}
    assert committer.failed_commits == 2

    # The late real answer for checkpoint 1 is still recorded, but not counted twice; the
    # withdrawn checkpoint 2 is never sent.
    assert committer.close(timeout=WAIT)
    late = committer.drain()
    assert [(e.event_type, e.checkpoint_id) for e in late] == [
        (EVENT_COMMIT_SUCCEEDED, 1),
        (EVENT_COMMIT_SUCCEEDED, 1),
    ]
    assert (committer.successful_commits, committer.failed_commits) == (0, 2)


def test_abandon_in_flight_with_nothing_outstanding_records_nothing() -> None:
    committer = make_committer()
    assert committer.in_flight() is None
    assert committer.abandon_in_flight() == []
    assert committer.drain() == []


# --- construction ----------------------------------------------------------------------------------


def test_invalid_construction_fails_fast() -> None:
    with pytest.raises(UnknownEngineError):
        make_committer(engine="storm")
    with pytest.raises(ConfigError, match="max_pending"):
        make_committer(max_pending=0)


def test_the_worker_can_only_be_started_once() -> None:
    committer = make_committer(autostart=True)
    with pytest.raises(CommitterStateError):
        committer.start()
    assert committer.close(timeout=WAIT)
