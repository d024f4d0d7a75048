"""Where an attached run starts (`app.attach.run_start`): its first batch and its startup plan,
from the checkpoint as the run found it; and when (`run_started_at`), however late the attach."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.contracts.vocabulary import RESTORE_CHECKPOINT, RESTORE_SPECIFIC
from app.stream.attach import run_start, run_started_at, spark_instant

pytestmark = pytest.mark.unit

A0, A1 = ("a", 0), ("a", 1)
LOG = {0: {A0: 10, A1: 12}, 1: {A0: 20, A1: 22}, 2: {A0: 30, A1: 32}}


def test_resume_after_last_committed_batch() -> None:
    start = run_start(LOG, [0, 1], [], None, dict)
    assert start.first_batch == 2
    assert start.plan is not None
    assert start.plan.mode == RESTORE_CHECKPOINT
    assert start.plan.restored_checkpoint_id == 1
    assert {tp: s.offset for tp, s in start.plan.starts.items()} == {A0: 20, A1: 22}


def test_batches_the_run_already_reported_are_its_own() -> None:
    """An attach that comes after the run's first batches: they are not the start."""
    start = run_start(LOG, [0, 1, 2], [1, 2], None, dict)
    assert start.first_batch == 1
    assert start.plan is not None
    assert start.plan.restored_checkpoint_id == 0
    assert {tp: s.offset for tp, s in start.plan.starts.items()} == {A0: 10, A1: 12}


def test_new_checkpoint_starts_where_its_sources_started() -> None:
    start = run_start({}, [], [], {A0: 0, A1: 5}, dict)
    assert start.first_batch == 0
    assert start.plan is not None
    assert start.plan.mode == RESTORE_SPECIFIC
    assert {tp: (s.offset, s.source) for tp, s in start.plan.starts.items()} == {
        A0: (0, RESTORE_SPECIFIC),
        A1: (5, RESTORE_SPECIFIC),
    }


def test_start_unknown_until_the_sources_wrote_theirs() -> None:
    start = run_start({}, [], [], None, dict)
    assert (start.first_batch, start.plan) == (0, None)


def test_run_that_died_before_its_first_commit_restarts_from_the_initial_offsets() -> None:
    start = run_start({0: {A0: 10, A1: 12}}, [], [], {A0: 0, A1: 0}, lambda: {A0: 0, A1: 0})
    assert start.first_batch == 0
    assert start.plan is not None
    assert start.plan.mode == RESTORE_CHECKPOINT
    assert {tp: s.offset for tp, s in start.plan.starts.items()} == {A0: 0, A1: 0}


def test_a_start_after_a_committed_batch_never_reads_the_previous_runs_starts() -> None:
    """The previous run's OFFSETS_RESTORED are a read of the job's whole ledger: a restart that
    resumes after a committed batch (the usual one) plans from the checkpoint alone."""

    def unread() -> dict[tuple[str, int], int]:
        raise AssertionError("the previous run's starts were read")

    start = run_start(LOG, [0, 1], [], {A0: 0, A1: 0}, unread)
    assert start.first_batch == 2
    assert start.plan is not None
    assert start.plan.mode == RESTORE_CHECKPOINT


def test_a_run_that_died_before_its_first_commit_asks_for_the_previous_runs_starts() -> None:
    asked: list[bool] = []

    def previous() -> dict[tuple[str, int], int]:
        asked.append(True)
        return {A0: 7, A1: 9}

    start = run_start({}, [], [], {}, previous)
    assert asked == [True]
    assert start.plan is not None
    assert {tp: s.offset for tp, s in start.plan.starts.items()} == {A0: 7, A1: 9}


T0 = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)


def test_a_late_attach_dates_the_run_by_its_first_progress_report() -> None:
    """Attached after two batches: the run started no later than its first batch's trigger."""
    reported = [T0 + timedelta(seconds=5), T0 + timedelta(seconds=2)]
    assert run_started_at(T0 + timedelta(seconds=9), None, reported) == T0 + timedelta(seconds=2)


def test_the_query_start_event_dates_the_run_when_known() -> None:
    started = T0 - timedelta(seconds=3)
    assert run_started_at(T0 + timedelta(seconds=9), started, [T0, None]) == started


def test_an_attach_before_any_report_is_the_run_start() -> None:
    assert run_started_at(T0, None, []) == T0


def test_spark_instants_are_read_as_utc() -> None:
    assert spark_instant("2026-03-04T10:00:00.123Z") == T0 + timedelta(milliseconds=123)
    assert spark_instant("2026-03-04T10:00:00") == T0  # no zone: Spark's listener times are UTC
    assert spark_instant("not a time") is None
    assert spark_instant(None) is None
