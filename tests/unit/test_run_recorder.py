"""The run recorder (`app.stream.recorder`): the rows every writer of a run gets for a start, a
recovered dead run, a batch and a stop, and what `RunRecorder` hands its ledger writer. Pure: a
stand-in for the checkpoint files and for the writer, no JVM."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from app import __version__
from app.contracts import vocabulary as vocab
from app.contracts.offsets import EventSource, LedgerEvent
from app.stream.checkpoint import COMMITS, CheckpointFiles
from app.stream.ledger import LedgerWriter
from app.stream.recorder import (
    RunCounts,
    RunRecorder,
    RunStart,
    batch_events,
    plan_restored,
    recover_unrecorded,
    run_started,
    run_stopped,
)
from app.stream.startup import ENGINE, LedgerFacts, PartitionStart, StartupPlan

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SOURCE = EventSource("orders-job", "run-2", ENGINE, "orders-audit")
PLAN = StartupPlan(
    mode=vocab.RESTORE_CHECKPOINT,
    starts={
        ("orders", 1): PartitionStart(12, vocab.RESTORE_CHECKPOINT),
        ("orders", 0): PartitionStart(9, "x"),
    },
    restored_checkpoint_id=4,
    notes=("a note",),
)


class Files:
    """Spark wrote `offsets/<n>` at second 10n and `commits/<n>` at second 10n + 5; batch 9's
    files have no time (purged)."""

    directory = "/cp"

    def written_at(self, log_name: str, batch_id: int) -> datetime | None:
        if batch_id == 9:
            return None
        return T0 + timedelta(seconds=10 * batch_id + (5 if log_name == COMMITS else 0))


CHECKPOINT = cast(CheckpointFiles, Files())


def detail(event: LedgerEvent) -> dict[str, object]:
    return cast(dict[str, object], json.loads(event.detail_json))


def test_a_reference_jobs_start_says_its_plan_query_checkpoint_topics_and_partitions() -> None:
    start = RunStart(
        PLAN.mode,
        PLAN.restored_checkpoint_id,
        PLAN.notes,
        query_id="query-1",
        checkpoint="/cp",
        topics=("orders",),
        partitions=2,
    )

    started = run_started(SOURCE, T0, start)

    assert (started.event_type, started.event_time, started.checkpoint_id, started.run_id) == (
        vocab.EVENT_RUN_STARTED,
        T0,
        4,
        "run-2",
    )
    assert detail(started) == {
        "startup_mode": "checkpoint",
        "restored_checkpoint_id": 4,
        "app_version": __version__,
        "notes": ["a note"],
        "query_id": "query-1",
        "checkpoint": "/cp",
        "topics": ["orders"],
        "partitions": 2,
    }


def test_an_attached_an_imported_and_a_flink_start_each_add_their_own_marks_and_nothing_else() -> None:
    attached = RunStart("specific", None, (), query_id="q", checkpoint="/cp", attached=True)
    imported = RunStart(
        "specific", None, (), query_id="q", checkpoint="/cp", imported=True, extra={"sink": "/s"}
    )
    flink = RunStart(None, None, ("n",), flink_job_id="f" * 32)

    assert detail(run_started(SOURCE, T0, attached)) == {
        "startup_mode": "specific",
        "restored_checkpoint_id": None,
        "app_version": __version__,
        "notes": [],
        "query_id": "q",
        "checkpoint": "/cp",
        "attached": True,
    }
    assert detail(run_started(SOURCE, T0, imported)) == {
        "startup_mode": "specific",
        "restored_checkpoint_id": None,
        "app_version": __version__,
        "notes": [],
        "query_id": "q",
        "checkpoint": "/cp",
        "imported": True,
        "sink": "/s",
    }
    # A Flink attempt whose startup mode nothing named still says so (null), as it always did.
    assert detail(run_started(SOURCE, T0, flink)) == {
        "startup_mode": None,
        "restored_checkpoint_id": None,
        "app_version": __version__,
        "notes": ["n"],
        "flink_job_id": "f" * 32,
    }


def test_a_plans_offsets_restored_are_one_per_partition_grouped_by_where_each_starts() -> None:
    restored = plan_restored(SOURCE, PLAN, T0, {vocab.DETAIL_IMPORTED: True})

    assert [(e.event_type, e.topic, e.partition, e.offset, e.checkpoint_id, detail(e)) for e in restored] == [
        (
            vocab.EVENT_OFFSETS_RESTORED,
            "orders",
            1,
            12,
            4,
            {"source": "checkpoint", "mode": "checkpoint", "imported": True},
        ),
        (
            vocab.EVENT_OFFSETS_RESTORED,
            "orders",
            0,
            9,
            4,
            {"source": "x", "mode": "checkpoint", "imported": True},
        ),
    ]


def test_a_dead_runs_batches_and_open_commit_are_recovered_as_its_own_stamped_by_their_files() -> None:
    facts = LedgerFacts(
        snapshot_ids=frozenset({1}),
        completed_ids=frozenset(),
        open_commit_attempts={("run-1", 3): 1},
        last_run_id="run-1",
    )
    offset_log = {1: {("orders", 0): 5}, 2: {("orders", 0): 8}}

    events = recover_unrecorded(CHECKPOINT, facts, offset_log, [1], "orders-job", "orders-audit", "run-2", T0)

    mark = {"recovered": True, "recovered_by": "run-2"}
    assert [(e.event_type, e.run_id, e.checkpoint_id, e.offset, e.event_time, detail(e)) for e in events] == [
        (vocab.EVENT_CHECKPOINT_SNAPSHOT, "run-1", 2, 8, T0 + timedelta(seconds=20), mark),
        (vocab.EVENT_CHECKPOINT_COMPLETED, "run-1", 1, 5, T0 + timedelta(seconds=15), mark),
        (
            vocab.EVENT_COMMIT_FAILED,
            "run-1",
            1,
            None,
            T0,
            {
                **mark,
                "attempt": 3,
                "error": vocab.ERROR_OUTCOME_UNKNOWN,
                "retriable": True,
                "message": "the process stopped before the commit was acknowledged",
            },
        ),
    ]


def test_a_batch_is_its_snapshot_and_completion_at_its_files_times_else_now() -> None:
    events = batch_events(CHECKPOINT, SOURCE, 2, {("orders", 0): 8}, completed=True, now=T0)
    purged = batch_events(CHECKPOINT, SOURCE, 9, {}, completed=False, now=T0)

    assert [(e.event_type, e.checkpoint_id, e.offset, e.event_time) for e in events] == [
        (vocab.EVENT_CHECKPOINT_SNAPSHOT, 2, 8, T0 + timedelta(seconds=20)),
        (vocab.EVENT_CHECKPOINT_COMPLETED, 2, 8, T0 + timedelta(seconds=25)),
    ]
    # A batch of no partitions still happened: one checkpoint-level snapshot, at the clock's time.
    assert [(e.event_type, e.partition, e.event_time) for e in purged] == [
        (vocab.EVENT_CHECKPOINT_SNAPSHOT, None, T0)
    ]


def test_a_stop_says_why_and_only_the_counts_its_writer_keeps() -> None:
    job = run_stopped(
        SOURCE, T0, 7, "stop requested", RunCounts(batches=8, successful_commits=8, failed_commits=0)
    )
    flink = run_stopped(
        SOURCE,
        T0,
        None,
        "canceled",
        RunCounts(
            checkpoints_recorded=3, failed_checkpoints=1, missed_checkpoints=[{"id": 2, "reason": "x"}]
        ),
    )

    assert (job.event_type, job.checkpoint_id, detail(job)) == (
        vocab.EVENT_RUN_STOPPED,
        7,
        {"reason": "stop requested", "batches": 8, "successful_commits": 8, "failed_commits": 0},
    )
    assert detail(flink) == {
        "reason": "canceled",
        "checkpoints_recorded": 3,
        "failed_checkpoints": 1,
        "missed_checkpoints": [{"id": 2, "reason": "x"}],
    }


class Writer:
    """A stand-in ledger writer: what it was asked to write, keyed or as a batch."""

    def __init__(self) -> None:
        self.keyed: list[list[LedgerEvent]] = []
        self.batches: list[tuple[int, list[LedgerEvent]]] = []

    def write_new(self, events: Sequence[LedgerEvent]) -> int:
        self.keyed.append(list(events))
        return len(events)

    def write(self, events: Sequence[LedgerEvent], batch_id: int) -> bool:
        self.batches.append((batch_id, list(events)))
        return True


def test_the_recorder_writes_a_start_and_a_stop_keyed_and_a_batch_under_its_id() -> None:
    writer = Writer()
    recorder = RunRecorder(cast(LedgerWriter, writer), SOURCE)
    restored = plan_restored(SOURCE, PLAN, T0)
    snapshot = batch_events(CHECKPOINT, SOURCE, 5, {("orders", 0): 3}, completed=False, now=T0)

    assert recorder.start(T0, RunStart(PLAN.mode, 4, ()), restored) == 3
    assert recorder.batch(5, snapshot)
    assert recorder.record([]) == 0  # nothing to write asks nothing of the ledger
    recorder.stop(T0, 5, "query terminated", RunCounts(batches=1), pending=snapshot)

    assert [[e.event_type for e in write] for write in writer.keyed] == [
        [vocab.EVENT_RUN_STARTED, vocab.EVENT_OFFSETS_RESTORED, vocab.EVENT_OFFSETS_RESTORED],
        [vocab.EVENT_CHECKPOINT_SNAPSHOT, vocab.EVENT_RUN_STOPPED],
    ]
    assert writer.batches == [(5, snapshot)]
