"""The driver-side rules of reconcile (DuckDB over Arrow) on small hand-built Arrow tables, without a
JVM: skipped, failed, foreign, mismatched, regressed and ahead commits; ledger inconsistencies and
unclean stops. The Spark-side reads that feed them are tested in tests/spark/test_reconcile.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest

from app.contracts import vocabulary as vocab
from app.kafka.commit_outcome import CommitResult
from app.reconcile import findings as rc
from app.reconcile.ledger import audit as la
from app.reconcile.ledger import commit_rules
from app.reconcile.ledger import rules as ledger_rules
from app.reconcile.ledger.sql import aware_rows
from app.stream.committer import OffsetCommitter
from tests.support.ledger_data import (
    COVERED_SKIPS_STOP,
    GROUP,
    JOB,
    TOPIC,
    at,
    checkpoint,
    commits_table,
    covered_skips_story,
    ev,
    gc,
    ledger_table,
)

pytestmark = pytest.mark.unit

WINDOW = rc.AuditWindow(until=at(10_000))
RULES = rc.MatchRules(commit_match_window_s=60, clock_skew_s=1)


def findings(found: Sequence[rc.Finding], finding_type: str) -> list[dict[str, Any]]:
    """Findings of one type as plain dicts, in partition, checkpoint and offset order."""
    rows = [dataclasses.asdict(f) for f in found if f.finding_type == finding_type]
    return sorted(rows, key=lambda r: (r["partition"] or 0, r["checkpoint_id"] or 0, r["offset_start"] or 0))


def audit(
    ledger: pa.Table, commits: pa.Table | None = None, window: rc.AuditWindow = WINDOW
) -> la.LedgerAudit:
    return la.LedgerAudit(ledger, commits if commits is not None else commits_table(), window, RULES)


# --- commits -------------------------------------------------------------------------------------


def test_skipped_commits_are_classified_superseded_failed_or_never_attempted() -> None:
    ledger = ledger_table(
        checkpoint(1, 0, {0: 10}),  # committed normally
        checkpoint(2, 10, {0: 20}, commit=False),
        ev("COMMIT_REQUESTED", 11, cp=2, offsets={0: 20}, detail={"attempt": 2}),
        ev(
            "COMMIT_SKIPPED",
            12,
            cp=2,
            offsets={0: 20},
            detail={"reason": "superseded_in_flight", "superseded_by": 3},
        ),
        checkpoint(3, 12, {0: 30}),  # covers checkpoint 2
        checkpoint(4, 20, {0: 40}, commit=False),
        ev("COMMIT_REQUESTED", 21, cp=4, offsets={0: 40}, detail={"attempt": 4}),
        ev(
            "COMMIT_FAILED",
            22,
            cp=4,
            offsets={0: 40},
            detail={"attempt": 4, "error": "NOT_COORDINATOR", "retriable": True},
        ),
        checkpoint(5, 30, {0: 50}, commit=False),  # the job died before committing
    )
    commits = commits_table(gc(2, 0, 10), gc(14, 0, 30))
    ledger_audit = audit(ledger, commits)
    got = [
        (f["checkpoint_id"], f["evidence"]["reason"], f["severity"], f["status"])
        for f in findings(commit_rules.skipped_commits(ledger_audit, horizon=at(5000)), vocab.SKIPPED_COMMIT)
    ]
    assert got == [
        (2, "superseded", "info", "benign"),
        (4, "failed", "warn", "open"),
        (5, "never_attempted", "warn", "open"),
    ]
    # Checkpoints completed after the ingest horizon are not judged yet.
    assert len(commit_rules.skipped_commits(ledger_audit, horizon=at(82))) == 2
    assert commit_rules.skipped_commits(ledger_audit, horizon=None) == []
    # Without an ingest time the horizon is the newest commit ingested (at 14 s: nothing judged) ...
    assert ledger_audit.horizon() == at(14)
    # ... with one, when the ingest read __consumer_offsets, minus the clock skew.
    ingested = la.LedgerAudit(ledger, commits, WINDOW, RULES, ingested_at=at(3000))
    assert ingested.horizon() == at(2999)


def test_a_skip_later_covered_by_a_commit_of_the_job_is_benign_whatever_its_reason() -> None:
    failure = {"attempt": 2, "error": "NOT_COORDINATOR", "retriable": True}
    ledger = ledger_table(
        ev("RUN_STARTED", 0, run="run-1"),
        checkpoint(1, 0, {0: 10}),
        checkpoint(2, 10, {0: 20}, commit=False),
        ev("COMMIT_REQUESTED", 11, cp=2, offsets={0: 20}, detail={"attempt": 2}),
        ev("COMMIT_FAILED", 12, cp=2, offsets={0: 20}, detail=failure),
        checkpoint(3, 20, {0: 30}, commit=False),  # completed just before the SIGKILL
        ev("RUN_STARTED", 100, run="run-2"),
        checkpoint(4, 200, {0: 40}, run="run-2"),  # its commit covers 2 and 3
        ev("RUN_STOPPED", 210, run="run-2"),
    )
    commits = commits_table(gc(2, 0, 10), gc(202, 0, 40))
    got = [
        (
            f["checkpoint_id"],
            f["evidence"]["reason"],
            f["severity"],
            f["status"],
            f["evidence"]["covered_by_offset"],
        )
        for f in findings(
            commit_rules.skipped_commits(audit(ledger, commits), horizon=at(5000)), vocab.SKIPPED_COMMIT
        )
    ]
    assert got == [(2, "failed", "info", "benign", 40), (3, "never_attempted", "info", "benign", 40)]
    # A commit that no request of the job explains (a reset tool) covers nothing.
    foreign = commits_table(gc(2, 0, 10), gc(202, 0, 40), gc(300, 0, 50))
    reset = ledger_table(checkpoint(1, 0, {0: 10}), checkpoint(2, 250, {0: 45}, commit=False))
    assert [
        (f["checkpoint_id"], f["severity"])
        for f in findings(
            commit_rules.skipped_commits(audit(reset, foreign), horizon=at(5000)), vocab.SKIPPED_COMMIT
        )
    ] == [(2, "warn")]


@pytest.mark.parametrize("engine", ["spark", "flink-legacy"])
def test_the_last_checkpoints_of_a_stopped_job_are_judged_once_commits_are_ingested(engine: str) -> None:
    def raw(offset: int) -> int:
        # Flink's legacy consumer records the last processed offset: one less than the next to read.
        return offset - 1 if engine == "flink-legacy" else offset

    ledger = ledger_table(
        ev("RUN_STARTED", 0, run="run-1", engine=engine),
        checkpoint(1, 0, {0: raw(10)}, engine=engine),
        checkpoint(2, 10, {0: raw(20)}, commit=False, engine=engine),
        ev(
            "COMMIT_SKIPPED",
            11,
            cp=2,
            offsets={0: raw(20)},
            detail={"reason": "superseded_in_flight"},
            engine=engine,
        ),
        checkpoint(3, 12, {0: raw(30)}, commit=False, engine=engine),  # the last one: never attempted
        ev("RUN_STOPPED", 14, engine=engine),
    )
    commits = commits_table(gc(2, 0, 10))
    # The group's newest commit is at 2 s: judged by it alone, nothing would ever be judged.
    stopped = la.LedgerAudit(ledger, commits, WINDOW, RULES, ingested_at=at(20))
    got = [
        (f["checkpoint_id"], f["evidence"]["reason"], f["severity"])
        for f in findings(stopped.all_findings(), vocab.SKIPPED_COMMIT)
    ]
    assert got == [(2, "superseded", "warn"), (3, "never_attempted", "warn")]
    # Ingested before the job stopped (plus clock skew): its commits may still be in flight.
    early = la.LedgerAudit(ledger, commits, WINDOW, RULES, ingested_at=at(14))
    assert findings(early.all_findings(), vocab.SKIPPED_COMMIT) == []
    # The next window judges what the previous one could not: it looks one match window back.
    later = la.LedgerAudit(
        ledger,
        commits,
        rc.AuditWindow(until=at(20_000), since=at(40)),
        RULES,
        ingested_at=at(20_000),
    )
    assert [f["checkpoint_id"] for f in findings(later.all_findings(), vocab.SKIPPED_COMMIT)] == [2, 3]


def test_commit_failures_are_grouped_by_error() -> None:
    fail = {"error": "REBALANCE_IN_PROGRESS", "retriable": True, "message": "rebalance"}
    ledger = ledger_table(
        ev("COMMIT_FAILED", 1, cp=1, offsets={0: 10}, detail={**fail, "attempt": 1}),
        ev("COMMIT_FAILED", 5, cp=2, offsets={0: 20}, detail={**fail, "attempt": 2}),
        ev("COMMIT_FAILED", 9, cp=3, offsets={0: 30}, detail={"error": "NOT_COORDINATOR", "attempt": 3}),
    )
    got = findings(commit_rules.commit_failures(audit(ledger)), vocab.COMMIT_FAILURE)
    assert sorted(
        (f["evidence"]["error"], f["record_count"], tuple(f["evidence"]["checkpoint_ids"])) for f in got
    ) == [
        ("NOT_COORDINATOR", 1, (3,)),
        ("REBALANCE_IN_PROGRESS", 2, (1, 2)),
    ]
    assert {f["severity"] for f in got} == {"warn"}


def test_foreign_commits_and_mismatches() -> None:
    # A Flink legacy job: raw 9 means last processed 9, normalized and committed as 10.
    ledger = ledger_table(
        checkpoint(1, 0, {0: 9, 1: 9}, engine="flink-legacy"),
    )
    commits = commits_table(
        gc(2, 0, 10),  # explained exactly
        gc(2, 1, 9),  # committed raw, +1 forgotten: a mismatch
        gc(500, 0, 0),  # a reset tool, long after any request: foreign
        gc(None, 1, 77, kind="snapshot"),  # an Admin API snapshot nobody requested: foreign
    )
    mismatch = findings(commit_rules.commit_mismatches(audit(ledger, commits)), vocab.COMMIT_MISMATCH)
    assert [
        (
            m["partition"],
            m["checkpoint_id"],
            m["evidence"]["committed_offset"],
            m["evidence"]["checkpoint_offset"],
        )
        for m in mismatch
    ] == [(1, 1, 9, 10)]
    foreign_window = rc.AuditWindow(until=at(10_000), since=None)
    foreign = findings(
        commit_rules.foreign_commits(audit(ledger, commits, foreign_window)),
        vocab.FOREIGN_COMMIT,
    )
    # The snapshot has no commit time, so the window cannot place it: only the timed commit counts.
    assert [(f["partition"], f["offset_start"], f["job_name"], f["severity"]) for f in foreign] == [
        (0, 0, JOB, "error")
    ]


@pytest.mark.parametrize("stopped", [False, True])
def test_commits_the_job_never_claimed_are_foreign_even_seconds_after_its_own(stopped: bool) -> None:
    """An operator's reset to earliest (0) and to latest (80), and another client committing a
    lower offset (37) with the job's group id, each moments after the job committed 50 and well
    inside the match window: none carries an offset the job requested or was acknowledged, so
    each is a FOREIGN_COMMIT, never a COMMIT_MISMATCH (the job did not commit them)."""
    ledger = ledger_table(
        ev("RUN_STARTED", 0),
        checkpoint(1, 0, {0: 50, 1: 50, 2: 50}),
        ev("RUN_STOPPED", 3) if stopped else [],
    )
    commits = commits_table(
        gc(2, 0, 50),
        gc(2, 1, 50),
        gc(2, 2, 50),
        gc(3, 0, 0),  # reset to earliest
        gc(3, 1, 80),  # reset to latest
        gc(4, 2, 37),  # another client on the job's group id
    )
    found = audit(ledger, commits, rc.AuditWindow(until=at(10_000), since=None)).all_findings()
    assert findings(found, vocab.COMMIT_MISMATCH) == []
    foreign = findings(found, vocab.FOREIGN_COMMIT)
    assert [(f["partition"], f["offset_start"], f["job_name"], f["severity"]) for f in foreign] == [
        (0, 0, JOB, "error"),
        (1, 80, JOB, "error"),
        (2, 37, JOB, "error"),
    ]


def test_the_jobs_own_commits_are_those_it_requested_was_acknowledged_or_recovered() -> None:
    """Each commit below carries an offset the job claims, so none is foreign: a request, an
    acknowledgement of another offset than requested (what Kafka holds is what was acknowledged),
    a completion recovered after a crash (the dead process may have sent it)."""
    ledger = ledger_table(
        ev("RUN_STARTED", 0),
        checkpoint(1, 0, {0: 10, 1: 10, 2: 10}),
        ev("CHECKPOINT_SNAPSHOT", 10, cp=2, offsets={0: 20, 1: 20}),
        ev("CHECKPOINT_COMPLETED", 11, cp=2, offsets={0: 20, 1: 20}),
        ev("COMMIT_REQUESTED", 11, cp=2, offsets={0: 20, 1: 20}, detail={"attempt": 2}),
        ev("COMMIT_SUCCEEDED", 12, cp=2, offsets={1: 21}, detail={"attempt": 2, "requested_offset": 20}),
        ev("RUN_STARTED", 30, run="run-2"),
        ev("CHECKPOINT_SNAPSHOT", 20, run="run-1", cp=3, offsets={2: 30}, detail={"recovered": True}),
        ev("CHECKPOINT_COMPLETED", 20, run="run-1", cp=3, offsets={2: 30}, detail={"recovered": True}),
    )
    commits = commits_table(
        gc(2, 0, 10), gc(2, 1, 10), gc(2, 2, 10), gc(12, 0, 20), gc(12, 1, 21), gc(21, 2, 30)
    )
    found = audit(ledger, commits, rc.AuditWindow(until=at(10_000), since=None)).all_findings()
    assert findings(found, vocab.FOREIGN_COMMIT) == []
    # Kafka holding 21 where checkpoint 2 says 20 is the job's own commit of a wrong offset.
    assert [
        (f["partition"], f["checkpoint_id"], f["evidence"]["match"], f["evidence"]["difference"])
        for f in findings(found, vocab.COMMIT_MISMATCH)
    ] == [(1, 2, "exact", 1)]


def own_commits(ledger_audit: la.LedgerAudit) -> list[tuple[int, int, float, int | None]]:
    """Every group commit as (partition, offset, seconds after T0, checkpoint of the claim that
    makes it the job's own or None), in time order."""
    ledger_audit.ensure_matched()
    rows = ledger_audit.rows(
        'SELECT "partition", committed_offset, commit_time, checkpoint_id FROM matched '
        "ORDER BY commit_time, log_offset"
    )
    return [
        (
            r["partition"],
            r["committed_offset"],
            (r["commit_time"] - at(0)).total_seconds(),
            r["checkpoint_id"],
        )
        for r in aware_rows(rows)
    ]


def test_a_reset_to_the_offset_the_restarted_job_commits_next_is_foreign() -> None:
    """The common case of an operator's reset: the job stopped at 20, the group was reset to latest
    (30) while it was down, and the job restarted from the group's offsets and committed 30 with its
    first checkpoint 50 s later, inside the match window of its acknowledgement. The reset was made
    before the run asked for 30 (and before the run started), so it is foreign; the job's request and
    acknowledgement of 30 explain its own commit only."""
    ledger = ledger_table(
        ev("RUN_STARTED", 0),
        checkpoint(1, 0, {0: 20}),
        ev("RUN_STOPPED", 10),
        ev("RUN_STARTED", 90, run="run-2"),
        ev("OFFSETS_RESTORED", 91, run="run-2", offsets={0: 30}, detail={"source": "group"}),
        checkpoint(2, 149, {0: 30}, run="run-2"),  # requested at 150, acknowledged at 151
    )
    commits = commits_table(gc(2, 0, 20), gc(100, 0, 30), gc(150.5, 0, 30))
    ledger_audit = audit(ledger, commits, rc.AuditWindow(until=at(10_000), since=None))

    found = ledger_audit.all_findings()

    foreign = findings(found, vocab.FOREIGN_COMMIT)
    assert [(f["partition"], f["offset_start"], f["evidence"]["commit_time"]) for f in foreign] == [
        (0, 30, at(100))
    ]
    assert findings(found, vocab.COMMIT_MISMATCH) == []
    assert own_commits(ledger_audit) == [(0, 20, 2.0, 1), (0, 30, 100.0, None), (0, 30, 150.5, 2)]


def test_one_request_explains_one_commit_of_its_offset() -> None:
    """The job requested 50 once (no acknowledgement recorded: the process died with the commit in
    flight) and the group holds two commits of 50 inside that request's match window: the job's,
    moments after the request, and a reset to the same offset 30 s later. One request explains one
    commit, the nearest after it; the other is foreign. A second request of 50 (a later checkpoint
    that read nothing new) explains a second commit."""
    ledger = ledger_table(
        ev("RUN_STARTED", 0),
        checkpoint(1, 0, {0: 50, 1: 50}, commit=False),
        ev("COMMIT_REQUESTED", 1, cp=1, offsets={0: 50, 1: 50}, detail={"attempt": 1}),
        checkpoint(2, 20, {1: 50}, commit=False),
        ev("COMMIT_REQUESTED", 21, cp=2, offsets={1: 50}, detail={"attempt": 2}),
    )
    commits = commits_table(gc(1.5, 0, 50), gc(1.5, 1, 50), gc(21.5, 1, 50), gc(31, 0, 50), gc(31, 1, 50))
    ledger_audit = audit(ledger, commits, rc.AuditWindow(until=at(10_000), since=None))

    foreign = findings(ledger_audit.all_findings(), vocab.FOREIGN_COMMIT)

    assert [(f["partition"], f["offset_start"], f["evidence"]["commit_time"]) for f in foreign] == [
        (0, 50, at(31)),
        (1, 50, at(31)),
    ]
    assert own_commits(ledger_audit) == [
        (0, 50, 1.5, 1),
        (1, 50, 1.5, 1),
        (1, 50, 21.5, 2),
        (0, 50, 31.0, None),
        (1, 50, 31.0, None),
    ]


@pytest.mark.parametrize("run_start", [True, False])
def test_an_acknowledgement_without_its_request_explains_one_commit_never_before_its_run(
    run_start: bool,
) -> None:
    """An acknowledgement whose request the ledger lacks explains a commit from the match window
    before it, never from before its run started, and one commit only: the one nearest to it. A
    reset of the same offset 10 s before the run started is foreign either way."""
    ledger = ledger_table(
        ev("RUN_STARTED", 100, run="run-2") if run_start else [],
        ev("COMMIT_SUCCEEDED", 130, run="run-2", cp=2, offsets={0: 30}, detail={"attempt": 1}),
    )
    commits = commits_table(gc(90, 0, 30), gc(129.5, 0, 30))
    ledger_audit = audit(ledger, commits, rc.AuditWindow(until=at(10_000), since=None))

    foreign = findings(commit_rules.foreign_commits(ledger_audit), vocab.FOREIGN_COMMIT)

    assert [(f["offset_start"], f["evidence"]["commit_time"]) for f in foreign] == [(30, at(90))]
    assert own_commits(ledger_audit) == [(0, 30, 90.0, None), (0, 30, 129.5, 2)]


def test_commit_regression_and_a_tombstone_resets_history() -> None:
    ledger = ledger_table(checkpoint(1, 0, {0: 10}))
    commits = commits_table(
        gc(1, 0, 50),
        gc(2, 0, 30),  # backwards: regression
        gc(3, 0, None, kind="tombstone"),
        gc(4, 0, 5),  # after a deletion: a fresh start, not a regression
    )
    got = findings(commit_rules.commit_regressions(audit(ledger, commits)), vocab.COMMIT_REGRESSION)
    assert [(g["offset_start"], g["offset_end"], g["record_count"], g["job_name"]) for g in got] == [
        (30, 50, 20, JOB)
    ]


def test_committed_ahead_of_the_latest_completed_checkpoint() -> None:
    ledger = ledger_table(checkpoint(1, 0, {0: 10, 1: 10}))
    commits = commits_table(gc(2, 0, 10), gc(2, 1, 10), gc(50, 1, 25))
    got = findings(
        commit_rules.committed_ahead(audit(ledger, commits, rc.AuditWindow(until=at(100)))),
        vocab.COMMITTED_AHEAD,
    )
    assert [
        (g["partition"], g["offset_start"], g["offset_end"], g["record_count"], g["severity"]) for g in got
    ] == [(1, 10, 25, 15, "critical")]


# --- ledger --------------------------------------------------------------------------------------


def test_ledger_inconsistencies() -> None:
    ledger = ledger_table(
        ev("RUN_STARTED", 0, run="run-1"),
        checkpoint(1, 1, {0: 10}),
        checkpoint(2, 3, {0: 8}),  # backwards inside run-1
        ev("CHECKPOINT_COMPLETED", 6, cp=3),  # completed, never snapshotted
        ev("RUN_STARTED", 9, run="run-2"),  # run-1 never stopped: an UNCLEAN_STOP, not this
    )
    got = findings(ledger_rules.ledger_inconsistencies(audit(ledger)), vocab.LEDGER_INCONSISTENT)
    assert sorted((g["evidence"]["kind"], g["run_id"], g["checkpoint_id"]) for g in got) == [
        ("completed_without_snapshot", "run-1", 3),
        ("offsets_backwards_in_run", "run-1", 2),
    ]


def test_a_batch_planned_by_a_killed_run_and_completed_by_its_successor_is_consistent() -> None:
    ledger = ledger_table(
        ev("RUN_STARTED", 0, run="run-1"),
        checkpoint(1, 1, {0: 10}, run="run-1"),
        ev("CHECKPOINT_SNAPSHOT", 3, run="run-1", cp=2, offsets={0: 20}),  # then SIGKILL
        ev("RUN_STARTED", 9, run="run-2"),
        # run-2 re-runs batch 2; its own snapshot was dropped by the idempotent ledger append.
        ev("CHECKPOINT_COMPLETED", 10, run="run-2", cp=2, offsets={0: 20}),
        ev("RUN_STOPPED", 11, run="run-2"),
    )
    assert ledger_rules.ledger_inconsistencies(audit(ledger)) == []


def test_unclean_stops_are_info_after_an_exact_resume_and_warn_otherwise() -> None:
    restored = {"source": "checkpoint"}
    ledger = ledger_table(
        ev("RUN_STARTED", 0, run="run-1"),
        ev("OFFSETS_RESTORED", 0, run="run-1", offsets={0: 0}, detail={"source": "earliest"}),
        checkpoint(1, 1, {0: 10}, run="run-1"),  # then killed
        ev("RUN_STARTED", 9, run="run-2"),
        ev("OFFSETS_RESTORED", 9, run="run-2", offsets={0: 10}, detail=restored),  # exact
        checkpoint(2, 10, {0: 20}, run="run-2"),  # then killed
        ev("RUN_STARTED", 20, run="run-3"),
        ev("OFFSETS_RESTORED", 20, run="run-3", offsets={0: 25}, detail={"source": "latest"}),  # skip
        checkpoint(3, 21, {0: 30}, run="run-3"),
        ev("RUN_STOPPED", 30, run="run-3"),  # a clean stop: no finding
        ev("RUN_STARTED", 40, run="run-4"),
        ev("OFFSETS_RESTORED", 40, run="run-4", offsets={0: 30}, detail=restored),
        checkpoint(4, 41, {0: 40}, run="run-4"),  # died, never came back
    )
    got = findings(ledger_rules.unclean_stops(audit(ledger)), vocab.UNCLEAN_STOP)
    assert [(g["run_id"], g["severity"], g["evidence"]["next_run_id"]) for g in got] == [
        ("run-1", "info", "run-2"),
        ("run-2", "warn", "run-3"),
        ("run-4", "warn", None),
    ]
    assert got[1]["evidence"]["next_run_resumed"] == ["skip"]
    assert got[2]["evidence"]["silent_for_s"] == 10_000 - 43
    # A last run silent for less than run_silence_s may be a live job with no new data.
    live = la.LedgerAudit(
        ledger,
        commits_table(),
        rc.AuditWindow(until=at(43 + 3599)),
        rc.MatchRules(commit_match_window_s=60, clock_skew_s=1, run_silence_s=3600),
    )
    assert [g.run_id for g in ledger_rules.unclean_stops(live)] == ["run-1", "run-2"]


def test_checkpoint_offsets_fall_back_to_the_snapshot_for_a_bare_completion() -> None:
    ledger = ledger_table(
        ev("CHECKPOINT_SNAPSHOT", 0, cp=4, offsets={0: 10, 1: 12}),
        ev("CHECKPOINT_COMPLETED", 1, cp=4),
        ev("COMMIT_SKIPPED", 1, cp=4, detail={"reason": "unknown_checkpoint"}),
    )
    assert {(r["checkpoint_id"], r["partition"], r["offset"]) for r in audit(ledger).checkpoints()} == {
        (4, 0, 10),
        (4, 1, 12),
    }


# --- the committer's own events -------------------------------------------------------------------


def test_the_committers_drained_events_audit_to_one_benign_skip() -> None:
    """Events as the streaming job's committer writes them, not a hand-made ledger: checkpoint 2
    completes while 3 is already complete, so Flink's rule drops its commit; the group's commit of
    3 covers it, so the audit reports one benign SKIPPED_COMMIT and nothing else."""
    ticks = iter(range(1, 100))
    sent: list[dict[tuple[str, int], int]] = []

    def commit_fn(offsets: Mapping[tuple[str, int], int]) -> CommitResult:
        sent.append(dict(offsets))
        return CommitResult.ok(offsets)

    committer = OffsetCommitter(
        job_name=JOB,
        run_id="run-1",
        engine="spark",
        group_id=GROUP,
        commit_fn=commit_fn,
        clock=lambda: at(next(ticks)),
        autostart=False,
    )
    for checkpoint_id, offset in ((1, 10), (2, 20), (3, 30)):
        committer.snapshot(checkpoint_id, {(TOPIC, 0): offset})
        committer.notify_checkpoint_complete(checkpoint_id)
        if checkpoint_id != 2:  # 2 waits in the slot until 3 replaces it
            committer.run_once()
    events = committer.drain()
    assert sent == [{(TOPIC, 0): 10}, {(TOPIC, 0): 30}]
    acked = [e.event_time for e in events if e.event_type == vocab.EVENT_COMMIT_SUCCEEDED]
    ledger = ledger_table(ev("RUN_STARTED", 0), events, ev("RUN_STOPPED", 90))
    # The group's log holds what the broker acknowledged, a moment after each acknowledgement.
    commits = commits_table(
        gc((acked[0] - at(0)).total_seconds(), 0, 10), gc((acked[1] - at(0)).total_seconds(), 0, 30)
    )

    found = la.LedgerAudit(ledger, commits, WINDOW, RULES, ingested_at=at(1000)).all_findings()

    assert [dataclasses.asdict(f) for f in found] == [
        {
            "finding_type": vocab.SKIPPED_COMMIT,
            "severity": vocab.INFO,
            "status": vocab.BENIGN,
            "evidence": {
                "reason": vocab.SKIPPED_SUPERSEDED,
                "skip_reason": vocab.SKIP_SUPERSEDED_IN_FLIGHT,
                "superseded_by": 3,
                "error": None,
                "requested": True,  # handed to the commit slot, never sent
                "acknowledged": False,
                "completed_at": at(5),
                "covered_by_offset": 30,
                "covered_by_checkpoint": 3,
                "covered_at": at(8),
            },
            "job_name": JOB,
            "group_id": GROUP,
            "topic": TOPIC,
            "partition": 0,
            "run_id": "run-1",
            "checkpoint_id": 2,
            "offset_start": 20,
            "offset_end": None,
            "record_count": None,
            "identity": "",
        }
    ]


@pytest.mark.parametrize("engine", ["spark", "flink-legacy"])
def test_covered_skips_are_judged_as_soon_as_their_covering_commit_is_ingested(engine: str) -> None:
    """The same story in both dialects (``covered_skips_story``): checkpoint 2's request is
    superseded in flight, checkpoint 4 evicted from the pending ones, the commits of 3 and 5 cover
    them. Group commits are ingested a moment after the job stopped, before its end is past the
    clock skew: the covering commits already settle both skips, so each is one benign
    SKIPPED_COMMIT naming the checkpoint that superseded or evicted it, and nothing else is found."""
    events, commit_rows = covered_skips_story(engine)
    ledger, commits = ledger_table(events), commits_table(*commit_rows)
    dialect = {e.offset - e.raw_offset for e in events if e.offset is not None and e.raw_offset is not None}
    assert dialect == ({1} if engine == "flink-legacy" else {0})

    found = la.LedgerAudit(
        ledger, commits, WINDOW, RULES, ingested_at=at(COVERED_SKIPS_STOP + 1)
    ).all_findings()

    assert sorted(
        (
            f.finding_type,
            f.checkpoint_id,
            f.offset_start,
            f.severity,
            f.status,
            f.evidence["skip_reason"],
            f.evidence["superseded_by"],
            f.evidence["covered_by_checkpoint"],
        )
        for f in found
    ) == [
        (vocab.SKIPPED_COMMIT, 2, 20, vocab.INFO, vocab.BENIGN, vocab.SKIP_SUPERSEDED_IN_FLIGHT, 3, 3),
        (vocab.SKIPPED_COMMIT, 4, 40, vocab.INFO, vocab.BENIGN, vocab.SKIP_PENDING_EVICTED, 5, 5),
    ]


def test_duplicates_are_dated_by_the_ledgers_completion_of_their_writers_checkpoints() -> None:
    """A DUPLICATE's copies are dated by the completion of the checkpoint that wrote each (run-1's
    batch 1 at 11 s, run-2's batch 2 at 31 s); a second writer's label is no run of the job and
    dates nothing. A sink that names no writer falls back on the completion of the job's first
    checkpoint covering the offsets (the batch that wrote the job's copy)."""
    ledger = ledger_table(
        ev("RUN_STARTED", 0, run="run-1"),
        checkpoint(1, 10, {0: 50}, run="run-1"),
        ev("RUN_STARTED", 20, run="run-2"),
        checkpoint(2, 30, {0: 80}, run="run-2"),
    )

    def duplicate(start: int, end: int, *writers: dict[str, Any]) -> rc.Finding:
        where = {"job_name": JOB, "group_id": GROUP, "topic": TOPIC, "partition": 0}
        return rc.Finding.of(
            vocab.DUPLICATE, vocab.ERROR, vocab.OPEN, where, {"writers": list(writers)},
            offset_start=start, offset_end=end, record_count=end - start,
        )  # fmt: skip

    replayed = duplicate(40, 50, {"run": "run-1", "cp": 1}, {"run": "run-2", "cp": 2})
    second = duplicate(10, 20, {"run": "run-1", "cp": 1}, {"run": "second-writer", "cp": 1})
    anonymous = duplicate(60, 70, {}, {})
    found = [
        rc.dated_duplicate(f, d)
        for f, d in zip(
            (replayed, second, anonymous),
            audit(ledger).copy_dates([replayed, second, anonymous]),
            strict=True,
        )
    ]

    keys = ("job_runs", "outside_writers", "first_copy_written_at", "last_copy_written_at", "processed_at")
    assert [{k: f.evidence.get(k) for k in keys} for f in found] == [
        {
            "job_runs": ["run-1", "run-2"],
            "outside_writers": [],
            "first_copy_written_at": at(11),
            "last_copy_written_at": at(31),
            "processed_at": None,
        },
        {
            "job_runs": ["run-1"],
            "outside_writers": ["second-writer"],
            "first_copy_written_at": at(11),
            "last_copy_written_at": at(11),
            "processed_at": None,
        },
        {
            "job_runs": [],
            "outside_writers": [""],
            "first_copy_written_at": None,
            "last_copy_written_at": None,
            "processed_at": at(31),
        },
    ]
    # The finding itself is unchanged: same id, same writers.
    assert [f.finding_id for f in found] == [f.finding_id for f in (replayed, second, anonymous)]
    assert audit(ledger).copy_dates([]) == []


def test_a_restart_is_judged_against_where_the_previous_run_started_when_it_never_checkpointed_since() -> (
    None
):
    """A Flink job's runs without state: run-2 started partition 1 at 150 (the group's offset after a
    reset) and never read it, so its checkpoints keep the startup marker there (no offset); run-3,
    from `latest` at 200, skipped 150..199 of partition 1, not 100..199. Partition 0, read by run-2 up
    to 160, is judged against run-2's checkpoint as before."""
    kafkasource = vocab.ENGINE_FLINK_KAFKASOURCE
    group = {"source": vocab.RESTORE_GROUP}
    ledger = ledger_table(
        ev("RUN_STARTED", 0, run="run-1", engine=kafkasource),
        checkpoint(1, 1, {0: 100, 1: 100}, run="run-1", engine=kafkasource),
        ev("RUN_STOPPED", 5, run="run-1", engine=kafkasource),
        ev("RUN_STARTED", 10, run="run-2", engine=kafkasource),
        ev("OFFSETS_RESTORED", 10, run="run-2", offsets={0: 50, 1: 150}, detail=group, engine=kafkasource),
        checkpoint(1, 12, {0: 160, 1: -3}, run="run-2", engine=kafkasource),
        ev("RUN_STOPPED", 15, run="run-2", engine=kafkasource),
        ev("RUN_STARTED", 20, run="run-3", engine=kafkasource),
        ev(
            "OFFSETS_RESTORED",
            20,
            run="run-3",
            offsets={0: 200, 1: 200},
            detail={"source": vocab.RESTORE_LATEST},
            engine=kafkasource,
        ),
        checkpoint(1, 22, {0: 200, 1: 200}, run="run-3", engine=kafkasource),
    )
    restarts = {(r["run_id"], r["partition"]): r for r in audit(ledger).restarts()}

    judged = {
        key: (r["classification"], r["previous_checkpoint_offset"], r["previous_checkpoint_run"])
        for key, r in restarts.items()
    }
    assert judged == {
        ("run-2", 0): (vocab.RESTART_REPLAYED, 100, "run-1"),
        ("run-2", 1): (vocab.RESTART_SKIPPED, 100, "run-1"),
        ("run-3", 0): (vocab.RESTART_SKIPPED, 160, "run-2"),
        ("run-3", 1): (vocab.RESTART_SKIPPED, 150, "run-2"),
    }
    assert restarts[("run-3", 1)]["records_skipped"] == 50


def test_a_first_run_is_not_a_restart() -> None:
    ledger = ledger_table(ev("RUN_STARTED", 0), ev("OFFSETS_RESTORED", 0, offsets={0: 0}))
    window = rc.AuditWindow(until=at(100))
    audit = la.LedgerAudit(ledger, commits_table(gc(1, 0, 0)), window, rc.MatchRules())
    assert audit.restarts() == []


def test_a_flink_jobs_inferred_commit_covered_by_a_later_one_is_a_superseded_skip_at_info() -> None:
    """The legacy FlinkKafkaConsumer's "Skipping commit of previous offsets": checkpoints 2 and 3
    completed while the commit of 1 was in flight, their commits were replaced by 4's; the sidecar
    wrote each checkpoint's request as `inferred`. Checkpoint 5's commit never came and nothing
    covers it: still a warning."""
    inferred = {vocab.DETAIL_INFERRED: True}
    events = [ev("RUN_STARTED", 0, engine=vocab.ENGINE_FLINK_LEGACY)]
    for cp, raw in [(1, 9), (2, 19), (3, 29), (4, 39), (5, 49)]:
        kw: dict[str, Any] = dict(cp=cp, offsets={0: raw}, engine=vocab.ENGINE_FLINK_LEGACY)
        events.append(ev("CHECKPOINT_SNAPSHOT", cp * 10, **kw))
        events.append(ev("CHECKPOINT_COMPLETED", cp * 10 + 1, **kw))
        events.append(ev("COMMIT_REQUESTED", cp * 10 + 1, detail=inferred, **kw))
    commits = commits_table(gc(12, 0, 10), gc(42, 0, 40))
    got = [
        (
            f["checkpoint_id"],
            f["evidence"]["reason"],
            f["evidence"]["superseded_by"],
            f["severity"],
            f["status"],
        )
        for f in findings(
            commit_rules.skipped_commits(audit(ledger_table(*events), commits), horizon=at(5000)),
            vocab.SKIPPED_COMMIT,
        )
    ]
    assert got == [
        (2, vocab.SKIPPED_SUPERSEDED, 4, vocab.INFO, vocab.BENIGN),
        (3, vocab.SKIPPED_SUPERSEDED, 4, vocab.INFO, vocab.BENIGN),
        (5, vocab.SKIPPED_NEVER_ATTEMPTED, None, vocab.WARN, vocab.OPEN),
    ]
