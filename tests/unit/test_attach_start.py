"""Where an attached run starts (`app.attach.run_start`): its first batch and its startup plan,
from the checkpoint as the run found it."""

from __future__ import annotations

import pytest

from app.attach import run_start
from app.contracts.vocabulary import RESTORE_CHECKPOINT, RESTORE_SPECIFIC

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
