"""The group commits of checkpoints a Flink sidecar missed (named in `missed_checkpoints`, no offsets
in the ledger): the job's own (MISSED_CHECKPOINT_COMMIT, info) where the span of the missed
checkpoints holds them, in offsets and in time; FOREIGN_COMMIT (error) otherwise. Ledgers built by
hand as flink-watch writes them, audited by the driver-side rules (DuckDB over Arrow, no JVM)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from app.contracts import vocabulary as vocab
from app.contracts.offsets import LedgerEvent
from app.reconcile import findings as rc
from app.reconcile.ledger import audit as la
from tests.support.ledger_data import at, commits_table, ev, gc, ledger_table

pytestmark = pytest.mark.unit

ENGINE = vocab.ENGINE_FLINK_KAFKASOURCE
RULES = rc.MatchRules(commit_match_window_s=60, clock_skew_s=1)
WINDOW = rc.AuditWindow(until=at(10_000), since=None)


def completed(cp: int, t: float, offsets: Mapping[int, int], missed: Sequence[int] = ()) -> list[LedgerEvent]:
    """A checkpoint as flink-watch records it: snapshot at t, completion at t+1 naming the
    checkpoints missed before it, and the commit Flink sends on completion (inferred)."""
    named = {
        vocab.DETAIL_MISSED_CHECKPOINTS: [
            {"id": i, vocab.DETAIL_REASON: vocab.MISSED_FILES_GONE} for i in missed
        ]
    }
    return [
        *ev(vocab.EVENT_CHECKPOINT_SNAPSHOT, t, cp=cp, offsets=offsets, engine=ENGINE),
        *ev(vocab.EVENT_CHECKPOINT_COMPLETED, t + 1, cp=cp, offsets=offsets, engine=ENGINE,
            detail=named if missed else None),
        *ev(vocab.EVENT_COMMIT_REQUESTED, t + 1, cp=cp, offsets=offsets, engine=ENGINE,
            detail={vocab.DETAIL_INFERRED: True}),
    ]  # fmt: skip


def judged(events: list[LedgerEvent], *commits: tuple[Any, ...]) -> tuple[list[rc.Finding], list[rc.Finding]]:
    """(FOREIGN_COMMITs, MISSED_CHECKPOINT_COMMITs) of the commits against the ledger, by offset."""
    audit = la.LedgerAudit(ledger_table(events), commits_table(*commits), WINDOW, RULES)
    found = audit.all_findings()
    return of_type(found, vocab.FOREIGN_COMMIT), of_type(found, vocab.MISSED_CHECKPOINT_COMMIT)


def of_type(found: list[rc.Finding], finding_type: str) -> list[rc.Finding]:
    """The findings of one type, by partition and offset."""
    return sorted(
        (f for f in found if f.finding_type == finding_type), key=lambda f: (f.partition, f.offset_start)
    )


def behind_sidecar() -> list[LedgerEvent]:
    """Checkpoint 1 recorded (orders-0 at 10, orders-1 at 50), 2 and 3 missed (completed about 11 s
    and 21 s), checkpoint 4 recorded at 31 s naming them (orders-0 at 40: it advanced across them;
    orders-1 still at 50)."""
    return [
        *ev(vocab.EVENT_RUN_STARTED, 0, engine=ENGINE),
        *completed(1, 0, {0: 10, 1: 50}),
        *completed(4, 30, {0: 40, 1: 50}, missed=(2, 3)),
    ]


def test_the_commits_of_checkpoints_a_sidecar_behind_missed_are_the_jobs_at_info() -> None:
    foreign, missed = judged(
        behind_sidecar(),
        gc(1.2, 0, 10), gc(1.2, 1, 50),  # checkpoint 1's, requested
        gc(11.2, 0, 20), gc(11.2, 1, 50),  # checkpoint 2's: missed
        gc(21.2, 0, 30), gc(21.2, 1, 50),  # checkpoint 3's: missed
        gc(31.2, 0, 40), gc(31.2, 1, 50),  # checkpoint 4's, requested
    )  # fmt: skip

    assert foreign == []
    assert [(f.partition, f.offset_start, f.severity, f.status, f.run_id) for f in missed] == [
        (0, 20, vocab.INFO, vocab.BENIGN, "run-1"),
        (0, 30, vocab.INFO, vocab.BENIGN, "run-1"),
        (1, 50, vocab.INFO, vocab.BENIGN, "run-1"),
        (1, 50, vocab.INFO, vocab.BENIGN, "run-1"),
    ]
    assert {
        (
            tuple(f.evidence[vocab.DETAIL_MISSED_CHECKPOINTS]),
            f.evidence["from_checkpoint"],
            f.evidence["to_checkpoint"],
        )
        for f in missed
    } == {((2, 3), 1, 4)}
    assert [(f.evidence["from_offset"], f.evidence["to_offset"]) for f in missed if f.partition == 0] == [
        (10, 40),
        (10, 40),
    ]
    assert missed[0].evidence["commit_time"] == at(11.2)


def test_a_reset_backwards_into_the_missed_span_stays_foreign() -> None:
    """The job committed 30 (checkpoint 3's, missed); then an operator set the group back to 20,
    inside the span's offsets [10, 40] and within the match window after it: the job's commits of
    successive checkpoints only move forward, so the step back is a reset, not the job's."""
    foreign, missed = judged(
        behind_sidecar(),
        gc(1.2, 0, 10), gc(1.2, 1, 50),
        gc(21.2, 0, 30),  # checkpoint 3's: missed
        gc(31.2, 0, 40), gc(31.2, 1, 50),  # checkpoint 4's, requested
        gc(45, 0, 20),  # the operator's reset, after the job was cancelled
    )  # fmt: skip

    assert [(f.partition, f.offset_start, f.severity) for f in foreign] == [(0, 20, vocab.ERROR)]
    assert [(f.partition, f.offset_start) for f in missed] == [(0, 30)]


def test_an_operators_reset_inside_the_missed_span_to_an_offset_outside_it_stays_foreign() -> None:
    """Resets made while the sidecar was behind, to earliest (0) and to latest (900): inside the
    span's time, outside its offsets [10, 40]. The job's own commit of 30 beside them is not."""
    foreign, missed = judged(
        behind_sidecar(),
        gc(1.2, 0, 10), gc(1.2, 1, 50),
        gc(15, 0, 0), gc(16, 1, 900),  # the operator's resets
        gc(21.2, 0, 30),  # checkpoint 3's: missed
        gc(31.2, 0, 40), gc(31.2, 1, 50),
    )  # fmt: skip

    assert [(f.partition, f.offset_start, f.severity, f.job_name) for f in foreign] == [
        (0, 0, vocab.ERROR, "job-a"),
        (1, 900, vocab.ERROR, "job-a"),
    ]
    assert [(f.partition, f.offset_start) for f in missed] == [(0, 30)]


def test_a_commit_of_an_offset_inside_the_span_made_long_after_it_stays_foreign() -> None:
    """An offset the missed checkpoints may have held (30), committed long after the naming
    completion (31 s) plus the match window (60 s), and one made before the span began (before
    checkpoint 1 completed, less the clock skew): neither is the job's commit of a missed checkpoint."""
    foreign, missed = judged(
        behind_sidecar(),
        gc(-5, 0, 20),  # before the span: checkpoint 1 completed at 1 s
        gc(1.2, 0, 10), gc(1.2, 1, 50),
        gc(31.2, 1, 50),  # checkpoint 4's of partition 1 (partition 0's never landed)
        gc(90.5, 0, 30),  # inside the window after the naming completion (31 s): in flight then
        gc(500, 0, 30),  # long after
    )  # fmt: skip

    assert [(f.partition, f.offset_start, f.evidence["commit_time"]) for f in foreign] == [
        (0, 20, at(-5)),
        (0, 30, at(500)),
    ]
    assert [(f.partition, f.offset_start, f.evidence["commit_time"]) for f in missed] == [(0, 30, at(90.5))]


@pytest.mark.parametrize("start_known", [True, False])
def test_at_a_first_look_the_span_starts_at_the_runs_start_offsets_else_there_is_none(
    start_known: bool,
) -> None:
    """A sidecar started after the job completed (and Flink deleted) checkpoints 1-3: its first
    recorded completion (4, orders-0 at 140) names them. The lower bound is where the run started
    (OFFSETS_RESTORED, 100); without it, nothing bounds the span and their commits stay foreign."""
    events = [
        *ev(vocab.EVENT_RUN_STARTED, 0, engine=ENGINE),
        *(ev(vocab.EVENT_OFFSETS_RESTORED, 0, offsets={0: 100}, engine=ENGINE,
             detail={"source": vocab.RESTORE_EARLIEST}) if start_known else []),
        *completed(4, 40, {0: 140}, missed=(1, 2, 3)),
    ]  # fmt: skip
    commits = (gc(11, 0, 110), gc(21, 0, 120), gc(31, 0, 130), gc(41.2, 0, 140), gc(35, 0, 90))

    foreign, missed = judged(events, *commits)

    if start_known:
        assert [
            (f.offset_start, f.evidence["from_offset"], f.evidence["from_checkpoint"]) for f in missed
        ] == [
            (110, 100, None),
            (120, 100, None),
            (130, 100, None),
        ]
        assert {tuple(f.evidence[vocab.DETAIL_MISSED_CHECKPOINTS]) for f in missed} == {(1, 2, 3)}
        assert [f.offset_start for f in foreign] == [90]  # below where the run started
    else:
        assert missed == []
        assert [f.offset_start for f in foreign] == [90, 110, 120, 130]


def test_an_admin_api_reading_of_a_missed_checkpoints_commit_is_the_jobs_too() -> None:
    """`ingest.mode: snapshot` reads the group's offset (30, checkpoint 3's commit) at 25 s, while
    the sidecar was behind, and again after the job stopped: a reading of the job's commit, no
    commit of anybody else's. A reading of an offset outside the span (5) stays foreign."""
    foreign, missed = judged(
        [*behind_sidecar(), *ev(vocab.EVENT_RUN_STOPPED, 40, engine=ENGINE)],
        gc(25, 0, 30, kind=vocab.RECORD_SNAPSHOT),
        gc(300, 0, 30, kind=vocab.RECORD_SNAPSHOT),
        gc(26, 1, 5, kind=vocab.RECORD_SNAPSHOT),
    )

    assert sorted((f.partition, f.offset_start, f.evidence["commit_time"]) for f in missed) == [
        (0, 30, at(25)),
        (0, 30, at(300)),
    ]
    assert [(f.partition, f.offset_start) for f in foreign] == [(1, 5)]
