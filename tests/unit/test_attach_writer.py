"""The attached query's writer thread (`app.attach.Attachment`) with stand-ins for the query, the
session, the checkpoint files and the ledger writer: pure control flow, no JVM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException

import app.stream.attach as attach_module
from app.contracts.offsets import LedgerEvent
from app.kafka.commit_outcome import CommitFn, CommitResult
from app.stream.attach import Attachment, GroupCommits
from app.stream.checkpoint import CheckpointFiles
from app.stream.committer import OffsetCommitter
from app.stream.ledger import LedgerWriter
from app.stream.startup import ENGINE, LedgerFacts

pytestmark = pytest.mark.unit

TP = ("payments", 0)


@dataclass
class Progress:
    batchId: int  # noqa: N815 - Spark's name
    timestamp: str = "2026-03-04T00:00:00.000Z"  # when the batch's trigger started, as Spark writes it


@dataclass
class Query:
    id: str = "query-1"
    runId: str = "run-1"  # noqa: N815 - Spark's name
    isActive: bool = False  # noqa: N815
    # This run reported both batches before the attach: they are its own, not a dead run's.
    recentProgress: list[Any] = field(default_factory=lambda: [Progress(0), Progress(1)])  # noqa: N815

    def exception(self) -> None:
        return None


class Streams:
    def addListener(self, listener: object) -> None:  # noqa: N802
        pass

    def removeListener(self, listener: object) -> None:  # noqa: N802
        pass


class Spark:
    streams = Streams()


class Checkpoint:
    """Two committed batches; the first read of the offset log fails, as a flaky store would."""

    directory = "cp"

    def __init__(self, failures: int = 1) -> None:
        self.failures_left = failures

    def offset_log(self) -> dict[int, dict[tuple[str, int], int]]:
        if self.failures_left:
            self.failures_left -= 1
            raise OSError("checkpoint store unavailable")
        return {0: {TP: 10}, 1: {TP: 20}}

    def log_ids(self, log_name: str) -> list[int]:
        return [0, 1]

    def offsets_of(self, batch: int) -> dict[tuple[str, int], int]:
        return self.offset_log()[batch]

    def source_initial_offsets(self) -> dict[tuple[str, int], int]:
        return {TP: 0}

    def written_at(self, log_name: str, batch: int) -> datetime | None:
        return None


class DatedCheckpoint(Checkpoint):
    """Spark wrote batch n's files n seconds after midnight of 2026-03-04 (UTC)."""

    def written_at(self, log_name: str, batch: int) -> datetime | None:
        return datetime(2026, 3, 4, tzinfo=UTC) + timedelta(seconds=batch)


class Writer:
    """Keeps what it was given; skips a batch at or below the latest written one, as Delta's
    transaction ids do, and fails a batch's first ``failures`` writes."""

    job_name, run_id = "payments", "run-1"

    def __init__(self, failures: dict[int, int] | None = None) -> None:
        self.batches: dict[int, list[LedgerEvent]] = {}
        self.others: list[LedgerEvent] = []
        self.failures = failures or {}
        self.facts_reads: list[tuple[date | None, int | None]] = []

    def ensure(self) -> None:
        pass

    def facts(self, since: date | None = None, oldest_batch: int | None = None) -> LedgerFacts:
        self.facts_reads.append((since, oldest_batch))
        return LedgerFacts(frozenset(), frozenset(), {}, None)

    def previous_run_starts(self) -> dict[tuple[str, int], int]:
        return {}

    def write(self, events: Sequence[LedgerEvent], batch_id: int) -> bool:
        if self.failures.get(batch_id, 0) > 0:
            self.failures[batch_id] -= 1
            raise OSError("ledger store unavailable")
        if self.batches and batch_id <= max(self.batches):
            return False
        self.batches[batch_id] = list(events)
        return True

    def write_new(self, events: Sequence[LedgerEvent]) -> int:
        self.others += events
        return len(events)


def attachment(writer: Writer, checkpoint: Checkpoint) -> Attachment:
    return Attachment(
        cast(Any, Query()), cast(Any, Spark()), cast(LedgerWriter, writer), cast(CheckpointFiles, checkpoint)
    )


def test_a_failed_checkpoint_read_is_counted_and_the_run_still_written() -> None:
    writer, checkpoint = Writer(), Checkpoint()
    audit = attachment(writer, checkpoint).start()  # the query has ended: the thread runs to its end

    assert audit.close(timeout=30)
    assert audit.ledger_write_failures == 1
    assert sorted(writer.batches) == [0, 1]
    kinds = [e.event_type for e in writer.batches[1]]
    assert kinds == ["CHECKPOINT_SNAPSHOT", "CHECKPOINT_COMPLETED"]
    [stopped] = [e for e in writer.others if e.event_type == "RUN_STOPPED"]
    assert stopped.detail["ledger_write_failures"] == 1


def test_a_wake_up_never_blocks_the_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attach_module, "QUEUE_SIZE", 2)
    audit = attachment(Writer(), Checkpoint())  # not started: nobody drains the queue
    for _ in range(10):
        audit.wake()  # returns at once although the queue is full
    assert audit._queue.qsize() == 2


def test_a_batch_whose_write_failed_is_written_before_any_later_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch 0's write fails every try of one wake-up: batch 1 waits, and the next wake-up writes
    both in order (written the other way round, Delta would skip batch 0's transaction version)."""
    monkeypatch.setattr(attach_module, "RETRY_WAIT_S", 0.0)
    writer = Writer(failures={0: attach_module.RETRY_ATTEMPTS})
    audit = attachment(writer, Checkpoint(failures=0))  # driven step by step, no thread
    audit._begin()

    audit._sync()
    assert writer.batches == {}
    audit._sync()
    assert sorted(writer.batches) == [0, 1]
    assert audit.ledger_write_failures == 1


def test_a_start_reads_the_ledger_from_the_day_before_the_oldest_batch_it_recovers() -> None:
    """Batches 0 and 1 are a dead run's (this run reported none): the start reads the ledger days
    from the one before Spark wrote batch 0's offsets (see `startup.facts_since`)."""
    writer = Writer()
    audit = Attachment(
        cast(Any, Query(recentProgress=[])),
        cast(Any, Spark()),
        cast(LedgerWriter, writer),
        cast(CheckpointFiles, DatedCheckpoint(failures=0)),
    )
    audit._begin()
    assert writer.facts_reads == [(date(2026, 3, 3), 0)]


def test_a_start_with_no_batch_to_recover_reads_every_ledger_day() -> None:
    """Both batches are this run's own: nothing dates what an older run left, so nothing bounds the read."""
    writer = Writer()
    audit = attachment(writer, DatedCheckpoint(failures=0))
    audit._begin()
    assert writer.facts_reads == [(None, None)]


class Client:
    """The commit client's stand-in: only closed."""

    def close(self) -> None:
        pass


def with_commits(writer: Writer, commit_fn: CommitFn) -> Attachment:
    # Without a worker thread the committer sends at close(), inline: the steps are deterministic.
    committer = OffsetCommitter(
        job_name="payments",
        run_id="run-1",
        engine=ENGINE,
        group_id="g",
        commit_fn=commit_fn,
        autostart=False,
        records_checkpoints=False,  # as attach's own (group_commits): batches come from the checkpoint
    )
    commits = GroupCommits("g", committer, cast(Any, Client()))
    return Attachment(
        cast(Any, Query()),
        cast(Any, Spark()),
        cast(LedgerWriter, writer),
        cast(CheckpointFiles, Checkpoint(failures=0)),
        commits=commits,
    )


def event_types(events: Sequence[LedgerEvent]) -> list[tuple[str, int | None]]:
    return [(e.event_type, e.checkpoint_id) for e in events]


def test_a_commit_request_is_written_with_its_batch_and_kept_for_the_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batch 0's write fails every try: its COMMIT_REQUESTED is not lost but written with the
    batch's retry, the batch is handed to the committer once, and the outcome comes with RUN_STOPPED."""
    monkeypatch.setattr(attach_module, "RETRY_WAIT_S", 0.0)
    writer = Writer(failures={0: attach_module.RETRY_ATTEMPTS})
    audit = with_commits(writer, CommitResult.ok)
    audit._begin()

    audit._sync()
    audit._sync()
    assert event_types(writer.batches[0]) == [
        ("CHECKPOINT_SNAPSHOT", 0),
        ("CHECKPOINT_COMPLETED", 0),
        ("COMMIT_REQUESTED", 0),
    ]
    # Batch 1 completed before batch 0's commit was sent: Flink's skip of the superseded one.
    assert event_types(writer.batches[1]) == [
        ("CHECKPOINT_SNAPSHOT", 1),
        ("CHECKPOINT_COMPLETED", 1),
        ("COMMIT_REQUESTED", 1),
        ("COMMIT_SKIPPED", 0),
    ]
    assert all(e.group_id == "g" for e in [*writer.batches[0], *writer.batches[1]])
    audit._finish()
    succeeded = [e for e in writer.others if e.event_type == "COMMIT_SUCCEEDED"]
    assert [(e.checkpoint_id, e.offset) for e in succeeded] == [(1, 20)]
    [stopped] = [e for e in writer.others if e.event_type == "RUN_STOPPED"]
    assert (stopped.detail["successful_commits"], stopped.detail["failed_commits"]) == (1, 0)


def test_a_broker_that_is_down_fails_commits_not_the_run() -> None:
    def unreachable(offsets: Mapping[tuple[str, int], int]) -> CommitResult:
        raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN))

    writer = Writer()
    audit = with_commits(writer, unreachable)
    audit._begin()
    audit._sync()
    audit._finish()

    assert sorted(writer.batches) == [0, 1]
    failed = [e for e in writer.others if e.event_type == "COMMIT_FAILED"]
    assert [e.checkpoint_id for e in failed] == [1]
    [stopped] = [e for e in writer.others if e.event_type == "RUN_STOPPED"]
    assert (stopped.detail["successful_commits"], stopped.detail["failed_commits"]) == (0, 1)
    assert audit.ledger_write_failures == 0


def test_a_late_attach_dates_the_run_start_before_its_reported_batches() -> None:
    """Attached after the run reported batches 0 and 1 (DatedCheckpoint: written at 00:00:00 and
    00:00:01): RUN_STARTED and OFFSETS_RESTORED carry the first report's trigger time, not the
    attach's, so they sort before the run's own completions."""
    writer = Writer()
    first = "2026-03-03T23:59:59.500Z"
    query = Query(recentProgress=[Progress(0, first), Progress(1, "2026-03-04T00:00:00.600Z")])
    audit = Attachment(
        cast(Any, query),
        cast(Any, Spark()),
        cast(LedgerWriter, writer),
        cast(CheckpointFiles, DatedCheckpoint(failures=0)),
    )
    audit._begin()
    audit._sync()
    starts = [e for e in writer.others if e.event_type in ("RUN_STARTED", "OFFSETS_RESTORED")]
    assert {e.event_time for e in starts} == {datetime(2026, 3, 3, 23, 59, 59, 500000, tzinfo=UTC)}
    batches = [e for events in writer.batches.values() for e in events]
    completed = [e.event_time for e in batches if e.event_type == "CHECKPOINT_COMPLETED"]
    assert min(completed) > min(e.event_time for e in starts)
