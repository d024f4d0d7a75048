"""A start reads the ledger days of the batches its checkpoint still holds, not the job's history:
the days before them are never opened (their files are deleted from the disk here, so a read that
opens one fails). Real delta-rs ledgers on a temporary disk, stand-ins for the checkpoint files'
times; no JVM."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import cast

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from app.contracts import vocabulary as vocab
from app.contracts.offsets import EventSource, LedgerEvent
from app.stream.checkpoint import OFFSETS, CheckpointFiles, ledger_since
from app.stream.ledger import LedgerWriter
from app.stream.recorder import recovery_events
from app.stream.startup import ENGINE, LedgerFacts, facts_since

pytestmark = pytest.mark.unit

JOB = "orders-job"
DAY1 = datetime(2026, 3, 1, 12, tzinfo=UTC)
TP = ("orders", 0)


def day(n: int) -> datetime:
    """Noon of day ``n`` (day 1 is 2026-03-01)."""
    return DAY1 + timedelta(days=n - 1)


class Files:
    """Spark wrote `offsets/<n>` (and `commits/<n>`) at ``first_written`` + n seconds."""

    def __init__(self, first_written: datetime | None) -> None:
        self.first_written = first_written

    def written_at(self, log_name: str, batch_id: int) -> datetime | None:
        return None if self.first_written is None else self.first_written + timedelta(seconds=batch_id)


def checkpoint_files(first_written: datetime | None) -> CheckpointFiles:
    return cast(CheckpointFiles, Files(first_written))


def batch(source: EventSource, n: int, when: datetime, *, completed: bool = True) -> list[LedgerEvent]:
    """Batch ``n`` as the job writes it: snapshot, completion, a commit requested and answered."""
    offsets = {TP: 10 * (n + 1)}
    events = source.checkpoint_events(vocab.EVENT_CHECKPOINT_SNAPSHOT, when, n, offsets, {})
    if completed:
        events += source.checkpoint_events(vocab.EVENT_CHECKPOINT_COMPLETED, when, n, offsets, {})
        events.append(source.event(vocab.EVENT_COMMIT_REQUESTED, when, n, {vocab.DETAIL_ATTEMPT: n}))
        events.append(source.event(vocab.EVENT_COMMIT_SUCCEEDED, when, n, {vocab.DETAIL_ATTEMPT: n}))
    return events


def started(source: EventSource, when: datetime) -> LedgerEvent:
    return source.event(vocab.EVENT_RUN_STARTED, when, None, {})


def ledger_of(tmp_path: Path, days: Iterable[list[LedgerEvent]]) -> LedgerWriter:
    ledger = LedgerWriter(None, str(tmp_path / "ledger"), JOB, "run-new")
    ledger.ensure()
    for events in days:  # one write a day, as a job's batches are written
        ledger.write_new(events)
    return ledger


def delete_days_before(ledger: LedgerWriter, first_kept: date) -> int:
    """Delete from the disk the data files of the days before ``first_kept``: a read that opens
    one of them fails. Returns how many were deleted."""
    actions = pa.table(DeltaTable(ledger.location).get_add_actions(flatten=True)).to_pylist()
    old = [a["path"] for a in actions if a["partition.event_date"] < first_kept]
    for relative in old:
        (Path(ledger.location) / relative).unlink()
    return len(old)


def retained(facts: LedgerFacts, batches: Iterable[int]) -> tuple[frozenset[int], frozenset[int]]:
    wanted = set(batches)
    return facts.snapshot_ids & wanted, facts.completed_ids & wanted


OFFSET_LOG = {n: {TP: 10 * (n + 1)} for n in (30, 31, 32)}


def recovered(facts: LedgerFacts, files: CheckpointFiles) -> list[LedgerEvent]:
    """What a start recovers of OFFSET_LOG (batch 32 planned, not committed) with ``facts``."""
    times = {(OFFSETS, n): cast(datetime, files.written_at(OFFSETS, n)) for n in OFFSET_LOG}
    return recovery_events(facts, OFFSET_LOG, [30, 31], JOB, "grp", "run-new", day(9), times)


def four_days(run_1: EventSource, run_2: EventSource) -> list[list[LedgerEvent]]:
    """run-1 starts on day 1 (batches 0-9 that day, 10-19 on day 2); run-2 starts on day 3
    (batches 20-29), and on day 4 writes 30 and 31, asks a commit of 31 no answer closes, and dies
    with 32 planned and unrecorded. Another job writes on day 4 too."""
    stranger = EventSource("other-job", "run-9", ENGINE, "grp")
    request_31 = run_2.event(vocab.EVENT_COMMIT_REQUESTED, day(4), 31, {vocab.DETAIL_ATTEMPT: 131})
    return [
        [started(run_1, day(1)), *[e for n in range(10) for e in batch(run_1, n, day(1))]],
        [e for n in range(10, 20) for e in batch(run_1, n, day(2))],
        [started(run_2, day(3)), *[e for n in range(20, 30) for e in batch(run_2, n, day(3))]],
        [*batch(run_2, 30, day(4)), *batch(run_2, 31, day(4)), request_31, started(stranger, day(4))],
    ]


# --- the rule: the checkpoint's oldest batch's time -> the first ledger day read ----------------


def test_the_first_day_read_is_the_day_the_oldest_batch_was_written_less_one() -> None:
    assert facts_since(datetime(2026, 3, 4, 0, 30, tzinfo=UTC)) == date(2026, 3, 3)
    assert facts_since(datetime(2026, 3, 4, 23, 59, tzinfo=UTC)) == date(2026, 3, 3)
    # The UTC day, whatever zone the time is in: 01:00 at +02:00 is 23:00 UTC the day before.
    assert facts_since(datetime(2026, 3, 4, 1, 0, tzinfo=timezone(timedelta(hours=2)))) == date(2026, 3, 2)


def test_an_unknown_time_or_no_batch_reads_every_day() -> None:
    assert facts_since(None) is None
    assert ledger_since(checkpoint_files(None), 30) is None  # no offsets file, or no time for it
    assert ledger_since(checkpoint_files(day(4)), None) is None  # no batch to recover
    assert ledger_since(checkpoint_files(day(4)), 30) == date(2026, 3, 3)


# --- the bounded read -----------------------------------------------------------------------------


def test_a_bounded_read_knows_what_the_whole_read_knows_of_the_retained_batches(tmp_path: Path) -> None:
    run_1 = EventSource(JOB, "run-1", ENGINE, "grp")
    run_2 = EventSource(JOB, "run-2", ENGINE, "grp")
    ledger = ledger_of(tmp_path, four_days(run_1, run_2))
    files = checkpoint_files(day(4))  # the checkpoint holds batches 30-32, written on day 4
    since = ledger_since(files, min(OFFSET_LOG))
    assert since == date(2026, 3, 3)
    whole = ledger.facts()

    assert delete_days_before(ledger, since) == 2  # days 1 and 2 are gone from the disk
    with pytest.raises(FileNotFoundError, match=r"event_date=2026-03-0[12]"):
        ledger.facts()  # the whole read opens them
    bounded = ledger.facts(since, min(OFFSET_LOG))

    assert (
        retained(bounded, OFFSET_LOG)
        == retained(whole, OFFSET_LOG)
        == (frozenset({30, 31}), frozenset({30, 31}))
    )
    assert bounded.open_commit_attempts == whole.open_commit_attempts == {("run-2", 131): 31}
    assert bounded.last_run_id == whole.last_run_id == "run-2"
    assert recovered(bounded, files) == recovered(whole, files)
    assert [(e.event_type, e.checkpoint_id) for e in recovered(bounded, files)] == [
        (vocab.EVENT_CHECKPOINT_SNAPSHOT, 32),
        (vocab.EVENT_COMMIT_FAILED, 31),
    ]


def test_a_last_run_started_before_the_bound_is_the_run_writing_the_latest_events(tmp_path: Path) -> None:
    """run-1 started on day 1 and ran ever since: its RUN_STARTED is on a day a bounded read skips."""
    run_0 = EventSource(JOB, "run-0", ENGINE, "grp")
    run_1 = EventSource(JOB, "run-1", ENGINE, "grp")
    stranger = EventSource("other-job", "run-9", ENGINE, "grp")
    ledger = ledger_of(
        tmp_path,
        [
            [started(run_0, day(1) - timedelta(hours=2)), *batch(run_0, 0, day(1) - timedelta(hours=2))],
            [started(run_1, day(1)), *batch(run_1, 1, day(1))],
            [e for n in range(2, 20) for e in batch(run_1, n, day(2))],
            [*[e for n in range(20, 33) for e in batch(run_1, n, day(4))], started(stranger, day(4))],
        ],
    )
    files = checkpoint_files(day(4) + timedelta(seconds=-30))
    since = ledger_since(files, 30)
    assert since == date(2026, 3, 3)
    whole = ledger.facts()
    assert delete_days_before(ledger, since) == 3  # day 1's two writes and day 2's

    bounded = ledger.facts(since, 30)

    assert whole.last_run_id == "run-1"
    assert bounded.last_run_id == "run-1"  # not None: recovered events keep the run that lost them


def test_a_bounded_read_without_the_job_s_events_reads_every_day(tmp_path: Path) -> None:
    """A checkpoint directory copied on day 10: its files' times say day 10, the ledger's events of
    its batches are of day 4."""
    run_1 = EventSource(JOB, "run-1", ENGINE, "grp")
    run_2 = EventSource(JOB, "run-2", ENGINE, "grp")
    ledger = ledger_of(tmp_path, four_days(run_1, run_2))
    files = checkpoint_files(day(10))
    since = ledger_since(files, min(OFFSET_LOG))
    assert since == date(2026, 3, 9)

    facts = ledger.facts(since, min(OFFSET_LOG))

    assert facts == ledger.facts()
    assert retained(facts, OFFSET_LOG) == (frozenset({30, 31}), frozenset({30, 31}))
    assert facts.last_run_id == "run-2"


def test_a_bounded_read_without_the_oldest_batch_s_snapshot_reads_every_day(tmp_path: Path) -> None:
    """The copied checkpoint ran on after the copy: the bounded read holds the new batch 33, not
    the retained batches 30-32 the ledger has from day 4."""
    run_1 = EventSource(JOB, "run-1", ENGINE, "grp")
    run_2 = EventSource(JOB, "run-2", ENGINE, "grp")
    run_3 = EventSource(JOB, "run-3", ENGINE, "grp")
    ledger = ledger_of(
        tmp_path, [*four_days(run_1, run_2), [started(run_3, day(10)), *batch(run_3, 33, day(10))]]
    )
    since = ledger_since(checkpoint_files(day(10)), min(OFFSET_LOG))

    facts = ledger.facts(since, min(OFFSET_LOG))

    assert retained(facts, [*OFFSET_LOG, 33]) == (frozenset({30, 31, 33}), frozenset({30, 31, 33}))
    assert facts == ledger.facts()


def test_runs_writing_at_the_same_latest_time_are_told_apart_by_run_id(tmp_path: Path) -> None:
    """As the latest RUN_STARTED is chosen: by time, then run id (the order is the whole read's)."""
    run_a = EventSource(JOB, "run-a", ENGINE, "grp")
    run_b = EventSource(JOB, "run-b", ENGINE, "grp")
    ledger = ledger_of(
        tmp_path,
        [
            [started(run_a, day(1)), started(run_b, day(1))],
            [*batch(run_b, 30, day(4)), *batch(run_a, 30, day(4)), *batch(run_a, 29, day(3))],
        ],
    )

    assert ledger.facts().last_run_id == "run-b"
    assert ledger.facts(date(2026, 3, 3), 29).last_run_id == "run-b"
