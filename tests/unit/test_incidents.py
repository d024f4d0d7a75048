"""Incidents: one test per grouping rule and per remedy action. Every finding is built as reconcile
builds it: the ledger and commit rules over a small ledger (app.reconcile.ledger.audit), the restart
rule (forensics.find_restart_anomalies), the sink rules (findings.gap_finding, duplicate_finding,
beyond_finding), then stored by ``finalize_findings``. So a rule that changes what its evidence says
changes what these tests see. Last, the typed rows: a stored finding, an incident and its remedy
plan read back equal, in the exact JSON the tables hold."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pytest

from app.contracts import vocabulary as vocab
from app.contracts.findings import StoredFinding
from app.contracts.instants import instant
from app.contracts.offsets import LedgerEvent
from app.contracts.tables import FINDINGS_SCHEMA, INCIDENTS_SCHEMA
from app.errors import SchemaMismatchError
from app.incidents import grouping as inc
from app.incidents.incident import IncidentSummary, StoredIncident
from app.incidents.io import after_repair
from app.incidents.remedy import (
    NOTHING_TO_REPAIR,
    DeleteDuplicatesStep,
    OffsetRange,
    PartitionOffset,
    RemedyPlan,
    RepairOutcome,
    Replayed,
    ReplayStep,
    ResetOffsetsStep,
)
from app.reconcile import findings as rc
from app.reconcile.findings import PartitionRange
from app.reconcile.forensics import restarts as fx
from app.reconcile.ledger import audit as la
from tests.support.ledger_data import GROUP, JOB, TOPIC, at, checkpoint, commits_table, ev, gc, ledger_table

pytestmark = pytest.mark.unit

WINDOW = rc.AuditWindow(until=at(10_000))
RULES = rc.MatchRules(commit_match_window_s=60, clock_skew_s=1)
RECONCILE = "rec-1"


def ledger_findings(
    *events: Iterable[LedgerEvent], commits: Iterable[tuple[object, ...]] = ()
) -> list[rc.Finding]:
    """What reconcile's driver-side audit finds in this ledger and these group commits: the ledger
    and commit rules, and the restart rule over the restarts it classifies."""
    audit = la.LedgerAudit(
        ledger_table(*events), commits_table(*commits), WINDOW, RULES, ingested_at=at(9_000)
    )
    try:
        return [*audit.all_findings(), *fx.find_restart_anomalies(audit.restarts(), {})]
    finally:
        audit.close()


def sink_range(partition: int = 0, hi: int = 150, *, beyond_from: int | None = None) -> PartitionRange:
    """What partition ``partition`` must hold in the sink: [0, hi), vouched for by checkpoint 2 of
    run-2, completed at 111 s."""
    return PartitionRange(
        job_name=JOB,
        group_id=GROUP,
        topic=TOPIC,
        partition=partition,
        lo=0,
        hi=hi,
        lo_source="earliest",
        hi_checkpoint_id=2,
        hi_run_id="run-2",
        beyond_from=beyond_from,
        last_checkpoint_id=2,
        last_checkpoint_offset=hi,
        last_completed_at=at(111),
    )


def gap(partition: int, start: int, end: int, status: str = vocab.CONFIRMED) -> rc.Finding:
    """A GAP as the sink rule states it, after the source topic's verdict."""
    return rc.gap_finding(sink_range(partition), start, end, {"status": status, "data_records": end - start})


def stored(found: Iterable[rc.Finding], reconcile: str = RECONCILE) -> list[StoredFinding]:
    return rc.finalize_findings(found, reconcile, at(10_000))


def incidents_of(
    found: Iterable[rc.Finding], completed: dict[tuple[str, str, int], int] | None = None
) -> list[StoredIncident]:
    """The incidents reconcile stores for these findings."""
    return inc.to_incidents(inc.group_findings(stored(found)), RECONCILE, completed or {})


def ids(found: Iterable[rc.Finding]) -> tuple[str, ...]:
    return tuple(sorted(f.finding_id for f in found))


def of_type(found: Iterable[rc.Finding], *types: str) -> list[rc.Finding]:
    return [f for f in found if f.finding_type in types]


# --- stories: a ledger (and a sink) that yield one rule's findings --------------------------------


def restart_from_latest() -> list[rc.Finding]:
    """run-1 reads orders/0 to 100 and stops cleanly; run-2 starts from 'latest' at 130 and the
    sink lacks [100, 130). Another gap, on orders/1, has nothing to do with the restart."""
    skipped = ledger_findings(
        ev("RUN_STARTED", 0),
        ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
        checkpoint(1, 10, {0: 100}),
        ev("RUN_STOPPED", 30),
        ev("RUN_STARTED", 100, run="run-2"),
        ev("OFFSETS_RESTORED", 100, run="run-2", offsets={0: 130}, detail={"source": "latest"}),
        checkpoint(2, 110, {0: 150}, run="run-2"),
        ev("RUN_STOPPED", 120, run="run-2"),
        commits=[gc(12, 0, 100), gc(112, 0, 150)],
    )
    return [*skipped, gap(0, 100, 130), gap(1, 10, 20)]


def skip_read_back(verdict: dict[str, object] | None) -> list[rc.Finding]:
    """The restart of ``restart_from_latest`` in a sink that cannot show missing records
    (`delta_batches`, `none`): no GAP, the skipped [100, 130) read back from the source instead."""
    audit = la.LedgerAudit(
        ledger_table(
            ev("RUN_STARTED", 0),
            ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
            checkpoint(1, 10, {0: 100}),
            ev("RUN_STOPPED", 30),
            ev("RUN_STARTED", 100, run="run-2"),
            ev("OFFSETS_RESTORED", 100, run="run-2", offsets={0: 130}, detail={"source": "latest"}),
            checkpoint(2, 110, {0: 150}, run="run-2"),
            ev("RUN_STOPPED", 120, run="run-2"),
        ),
        commits_table(gc(12, 0, 100), gc(112, 0, 150)),
        WINDOW,
        RULES,
        ingested_at=at(9_000),
    )
    try:
        restarts = audit.restarts()
        read_back = {
            fx.restart_key(r): verdict for r in restarts if r["classification"] == vocab.RESTART_SKIPPED
        }
        return [*audit.all_findings(), *fx.find_restart_anomalies(restarts, {}, read_back)]
    finally:
        audit.close()


def read_back(data: int, below_log_start: int = 0) -> dict[str, object]:
    """What the GAP confirmation says of [100, 130) (app.kafka.gaps.verdict)."""
    status = vocab.CONFIRMED if data else vocab.UNVERIFIABLE if below_log_start else vocab.BENIGN
    return {
        "status": status,
        "data_records": data,
        "data_records_capped": False,
        "offsets_below_log_start": below_log_start,
        "offsets_beyond_high_watermark": 0,
    }


def second_writer() -> list[rc.Finding]:
    """run-1 completes checkpoint 1 (orders/0 to 50) and stops; a second writer appends copies of
    [10, 20) under its own run label: the sink's duplicate, dated from the ledger."""
    events = [
        ev("RUN_STARTED", 0),
        ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
        checkpoint(1, 10, {0: 50}),
        ev("RUN_STOPPED", 30),
    ]
    duplicate = rc.duplicate_finding(
        sink_range(0, 50),
        {
            "offset_start": 10,
            "offset_end": 20,
            "offsets": 10,
            "extra_copies": 10,
            "max_copies": 2,
            "writers": json.dumps([{"run": "run-1", "cp": 1}, {"run": "second-writer", "cp": 1}]),
        },
    )
    audit = la.LedgerAudit(ledger_table(*events), commits_table(gc(12, 0, 50)), WINDOW, RULES)
    try:
        (dates,) = audit.copy_dates([duplicate])
        return [*audit.all_findings(), rc.dated_duplicate(duplicate, dates)]
    finally:
        audit.close()


def reset_tool() -> list[rc.Finding]:
    """The job commits 50 on both partitions and stops; a reset tool sets orders/0 back to 20 at
    10 min, and orders/1 to 0 at 50 min: two changes, far apart."""
    return ledger_findings(
        ev("RUN_STARTED", 0),
        checkpoint(1, 0, {0: 50, 1: 50}),
        ev("RUN_STOPPED", 10),
        commits=[gc(2, 0, 50), gc(2, 1, 50), gc(600, 0, 20), gc(3000, 1, 0)],
    )


def broker_outage() -> list[rc.Finding]:
    """Checkpoint 2's commit fails with NOT_COORDINATOR on both partitions; the job then stops."""
    failure = {"attempt": 2, "error": "NOT_COORDINATOR", "retriable": True}
    return ledger_findings(
        ev("RUN_STARTED", 0),
        checkpoint(1, 0, {0: 10, 1: 10}),
        checkpoint(2, 10, {0: 20, 1: 20}, commit=False),
        ev("COMMIT_REQUESTED", 11, cp=2, offsets={0: 20, 1: 20}, detail={"attempt": 2}),
        ev("COMMIT_FAILED", 12, cp=2, offsets={0: 20, 1: 20}, detail=failure),
        ev("RUN_STOPPED", 30),
        commits=[gc(2, 0, 10), gc(2, 1, 10)],
    )


# --- one test per grouping rule -------------------------------------------------------------------


def test_rule_restart_a_restart_and_the_gap_it_skipped_are_one_incident() -> None:
    found = restart_from_latest()
    restart, unrelated = incidents_of(found)

    assert (restart.kind, restart.severity, restart.partitions, restart.run_ids) == (
        "restart",
        "critical",
        1,
        ("run-2",),
    )
    skip = of_type(found, vocab.RESTART_SKIP)
    assert restart.finding_ids == ids([*skip, found[-2]])  # the RESTART_SKIP and the gap inside it
    assert (restart.impact.records_lost, restart.impact.records_duplicated) == (30, 0)
    assert restart.cause == (
        "Run run-2 of job-a restarted from 'latest' after a clean stop and skipped 30 offsets on "
        "1 partition(s): 30 records lost, 0 duplicated."
    )
    # Dated by its evidence: the restart, and the completion by which the sink should have held it.
    assert (restart.first_evidence_at, restart.last_evidence_at) == (at(100), at(111))
    # The gap on orders/1 lies outside the skipped range: an incident of its own.
    assert (unrelated.kind, unrelated.finding_ids) == ("gap", ids(found[-1:]))


def test_rule_restart_a_skip_no_sink_shows_counts_the_records_read_back_from_the_source() -> None:
    # 28 data records and 2 transaction markers never read: lost, as on a coordinates sink.
    (restart,) = incidents_of(skip_read_back(read_back(28)))
    (skip,) = (f for f in stored(skip_read_back(read_back(28))) if f.finding_type == vocab.RESTART_SKIP)
    assert (skip.status, skip.severity, skip.record_count) == (vocab.CONFIRMED, vocab.CRITICAL, 30)
    assert (restart.severity, restart.impact.records_lost, restart.impact.records_unverifiable) == (
        vocab.CRITICAL,
        28,
        0,
    )
    assert restart.cause == (
        "Run run-2 of job-a restarted from 'latest' after a clean stop and skipped 30 offsets on "
        "1 partition(s): 28 records lost, 0 duplicated."
    )
    # Retention deleted them: unverifiable (error); markers only: nothing lost (warn).
    (gone,) = incidents_of(skip_read_back(read_back(0, below_log_start=30)))
    assert (gone.severity, gone.impact.records_lost, gone.impact.records_unverifiable) == (vocab.ERROR, 0, 30)
    (markers,) = incidents_of(skip_read_back(read_back(0)))
    assert (markers.severity, markers.impact.harm) == (vocab.WARN, 0)
    # Not read back (confirmation off): every skipped offset is unverifiable, never "0 lost".
    (unread,) = incidents_of(skip_read_back(None))
    assert (unread.severity, unread.impact.records_unverifiable) == (vocab.ERROR, 30)


def test_rule_restart_a_coordinates_skip_is_counted_by_its_gaps_alone() -> None:
    # The sink's GAP inside the skip is the loss: the skip itself adds nothing (no double count),
    # and once a repair replayed the gap, the skip left in the ledger costs nothing.
    (restart, _) = incidents_of(restart_from_latest())
    assert restart.impact.records_lost == 30
    repaired = [f for f in restart_from_latest() if f.finding_type != vocab.GAP]
    (after,) = incidents_of(repaired)
    assert (after.kind, after.impact.harm) == (vocab.INCIDENT_RESTART, 0)


def test_a_resolved_incident_is_carried_over_as_written_and_its_findings_fail_no_run() -> None:
    missing = next(i for i in incidents_of(restart_from_latest()) if i.kind == vocab.INCIDENT_RESTART)
    undo = ("RESTORE TABLE delta.`/sink` TO VERSION AS OF 3",)
    repaired = after_repair(missing, RepairOutcome((Replayed(30, version_before=3, version_after=4),), undo))
    # A later reconcile: the RESTART_SKIP again, its gap replayed.
    found = stored([f for f in restart_from_latest() if f.finding_type != vocab.GAP], "rec-2")
    built = inc.to_incidents(inc.group_findings(found), "rec-2", {})
    (again,) = built
    assert again.incident_id == repaired.incident_id
    kept = inc.carry_resolution(built, {repaired.incident_id: repaired})
    assert kept == [repaired]  # impact, severity, cause, remedy with its execution: as written
    skip = next(f for f in found if f.finding_type == vocab.RESTART_SKIP)
    assert skip.finding_id in inc.settled_findings(built, kept)
    # The loss back (the replay undone): open again, as this run sees it, and failing.
    reopened = inc.to_incidents(inc.group_findings(stored(restart_from_latest(), "rec-3")), "rec-3", {})
    carried = inc.carry_resolution(reopened, {repaired.incident_id: repaired})
    back = next(i for i in carried if i.incident_id == repaired.incident_id)
    assert (back.status, back.impact.records_lost) == (vocab.INCIDENT_OPEN, 30)
    assert inc.settled_findings(reopened, carried) == set()


def test_rule_restart_a_crash_then_a_replay_and_its_duplicates_are_one_incident() -> None:
    found = ledger_findings(
        ev("RUN_STARTED", 0),
        ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
        checkpoint(1, 10, {0: 100}, commit=False),  # then killed, before committing
        ev("RUN_STARTED", 100, run="run-2"),
        ev("OFFSETS_RESTORED", 100, run="run-2", offsets={0: 90}, detail={"source": "group"}),
        checkpoint(2, 110, {0: 150}, run="run-2"),
        ev("RUN_STOPPED", 120, run="run-2"),
        commits=[gc(112, 0, 150)],
    )
    read_twice = {
        "offset_start": 90,
        "offset_end": 100,
        "offsets": 10,
        "extra_copies": 10,
        "max_copies": 2,
        "writers": json.dumps([{"run": "run-1", "cp": 1}, {"run": "run-2", "cp": 2}]),
    }
    found.append(rc.duplicate_finding(sink_range(0), read_twice))

    (restart,) = incidents_of(found)  # the covered skip of checkpoint 1 is information

    assert (restart.kind, restart.severity, restart.run_ids) == ("restart", "error", ("run-1", "run-2"))
    assert (restart.impact.records_replayed, restart.impact.records_duplicated) == (10, 10)
    claimed = of_type(found, vocab.UNCLEAN_STOP, vocab.RESTART_REPLAY, vocab.DUPLICATE)
    assert restart.finding_ids == ids(claimed)
    assert "restarted from 'group' after run run-1 died and re-read 10 offsets" in restart.cause


def test_rule_unclean_stop_a_run_that_died_is_an_incident_of_its_own() -> None:
    found = ledger_findings(
        ev("RUN_STARTED", 0, run="run-1"),
        ev("OFFSETS_RESTORED", 0, run="run-1", offsets={0: 0}, detail={"source": "earliest"}),
        checkpoint(1, 1, {0: 10}, run="run-1"),  # then killed
        ev("RUN_STARTED", 9, run="run-2"),
        ev("OFFSETS_RESTORED", 9, run="run-2", offsets={0: 10}, detail={"source": "checkpoint"}),
        checkpoint(2, 10, {0: 20}, run="run-2"),  # then killed, and never followed
        commits=[gc(3, 0, 10), gc(12, 0, 20)],
    )

    got = incidents_of(found)

    assert [(i.kind, i.severity, i.run_ids, i.partitions) for i in got] == [
        ("unclean_stop", "warn", ("run-2",), 0),
        ("unclean_stop", "info", ("run-1", "run-2"), 0),
    ]
    followed_silent, resumed_exactly = got
    assert resumed_exactly.cause == (
        "Run run-1 of job-a was killed; run run-2 resumed exactly from its checkpoint, so nothing "
        "was lost or read twice."
    )
    assert followed_silent.cause == (
        "Run run-2 of job-a went silent without stopping cleanly, and no later run resumed it."
    )


def test_rule_commit_outage_a_runs_failed_commits_are_one_incident() -> None:
    found = broker_outage()

    (outage,) = incidents_of(found)

    assert (outage.kind, outage.severity, outage.partitions, outage.run_ids) == (
        "commit_outage",
        "warn",
        2,
        ("run-1",),
    )
    # Both partitions' COMMIT_FAILUREs and the SKIPPED_COMMITs whose commit failed.
    assert outage.finding_ids == ids(of_type(found, vocab.COMMIT_FAILURE, vocab.SKIPPED_COMMIT))
    assert len(outage.finding_ids) == 4
    assert outage.cause.startswith("Offset commits of job-a failed (NOT_COORDINATOR) on 2 partition(s)")


def test_rule_external_offset_change_changes_far_apart_are_separate_incidents() -> None:
    found = reset_tool()

    got = sorted(incidents_of(found), key=lambda i: str(i.last_evidence_at))

    assert [(i.kind, i.severity, i.partitions, i.impact.max_commit_lag) for i in got] == [
        ("external_offset_change", "error", 1, 30),
        ("external_offset_change", "error", 1, 50),
    ]
    assert sorted(f for i in got for f in i.finding_ids) == list(ids(found))
    assert {i.cause for i in got} == {
        "The offsets of group grp were changed outside job-a on 1 partition(s) "
        "(COMMIT_REGRESSION, FOREIGN_COMMIT): a reset tool or another consumer on the same group id."
    }
    assert [i.last_evidence_at for i in got] == [at(600), at(3000)]


def test_rule_external_offset_change_the_jobs_own_wrong_commits_are_told_apart() -> None:
    """A Flink legacy job commits its raw offsets (the last processed, 9) instead of the next to
    read (10): its own commits of a wrong offset, not an outsider's."""
    found = ledger_findings(
        ev("RUN_STARTED", 0, engine="flink-legacy"),
        checkpoint(1, 0, {0: 9, 1: 9}, engine="flink-legacy"),
        ev("RUN_STOPPED", 10, engine="flink-legacy"),
        commits=[gc(2, 0, 9), gc(2, 1, 9)],
    )

    mismatch = next(i for i in incidents_of(found) if i.kind == vocab.INCIDENT_EXTERNAL_OFFSET_CHANGE)

    assert (mismatch.severity, mismatch.partitions) == ("error", 2)
    assert mismatch.finding_ids == ids(of_type(found, vocab.COMMIT_MISMATCH))
    assert mismatch.cause.startswith("job-a committed offsets to group grp that differ from its checkpoints'")
    assert "outside" not in mismatch.cause


def test_rule_second_writer_duplicates_no_restart_explains_are_one_incident() -> None:
    found = second_writer()

    (writer,) = incidents_of(found)

    assert (writer.kind, writer.severity, writer.partitions) == ("second_writer", "error", 1)
    assert (writer.impact.records_duplicated, writer.run_ids) == (10, ("run-1",))  # a real run id only
    assert writer.cause == (
        "10 extra copies in the sink of job-a on 1 partition(s) that no restart explains, written by "
        "run run-1 and second-writer (no run of job-a)."
    )
    # Dated by the ledger's completion of the checkpoint that wrote the job's copy.
    assert writer.first_evidence_at == writer.last_evidence_at == at(11)


def test_rule_gap_records_missing_that_no_restart_explains_are_one_incident_per_job() -> None:
    found = [gap(0, 40, 50), gap(1, 70, 75, status=vocab.UNVERIFIABLE)]

    (missing,) = incidents_of(found)

    assert (missing.kind, missing.severity, missing.partitions, missing.finding_ids) == (
        "gap",
        "critical",
        2,
        ids(found),
    )
    assert (missing.impact.records_lost, missing.impact.records_unverifiable) == (10, 5)
    assert missing.cause == (
        "10 records confirmed missing and 5 unverifiable in the sink of job-a on 2 partition(s), "
        "below its completed checkpoints."
    )


def test_rule_ledger_gap_output_the_ledger_does_not_account_for_is_one_incident() -> None:
    found = ledger_findings(
        ev("RUN_STARTED", 0),
        checkpoint(1, 1, {0: 50}),
        ev("CHECKPOINT_COMPLETED", 6, cp=2),  # completed, never snapshotted
        ev("RUN_STOPPED", 8),
        commits=[gc(3, 0, 50)],
    )
    found.append(rc.beyond_finding(sink_range(0, 50, beyond_from=50), {"rows": 10, "max_offset": 59}))

    (unaccounted,) = incidents_of(found)

    assert (unaccounted.kind, unaccounted.severity, unaccounted.finding_ids) == (
        "ledger_gap",
        "warn",
        ids(found),
    )
    assert unaccounted.cause == (
        "The sink of job-a holds output its ledger does not account for on 1 partition(s) "
        "(LEDGER_INCONSISTENT, SINK_BEYOND_CHECKPOINT)."
    )


def test_rule_skipped_commit_a_runs_commits_nothing_covered_are_one_incident() -> None:
    found = ledger_findings(
        ev("RUN_STARTED", 0),
        checkpoint(1, 0, {0: 10}),
        checkpoint(2, 10, {0: 20}, commit=False),
        ev("COMMIT_SKIPPED", 11, cp=2, offsets={0: 20}, detail={"reason": "superseded_in_flight"}),
        checkpoint(3, 12, {0: 30}, commit=False),  # the job stopped before committing it
        ev("RUN_STOPPED", 14),
        commits=[gc(2, 0, 10)],
    )

    (skipped,) = incidents_of(found)

    assert (skipped.kind, skipped.severity, skipped.run_ids) == ("skipped_commit", "warn", ("run-1",))
    assert skipped.finding_ids == ids(found)
    assert skipped.cause == (
        "Commits of 2 completed checkpoint(s) of job-a never reached the group and nothing later "
        "covered them, on 1 partition(s)."
    )


def test_information_nobody_has_to_act_on_forms_no_incident() -> None:
    covered = ledger_findings(
        ev("RUN_STARTED", 0),
        checkpoint(1, 0, {0: 10}),
        checkpoint(2, 10, {0: 20}, commit=False),
        ev("COMMIT_SKIPPED", 11, cp=2, offsets={0: 20}, detail={"reason": "superseded_in_flight"}),
        checkpoint(3, 12, {0: 30}),  # its commit covers checkpoint 2's offsets
        ev("RUN_STOPPED", 14),
        commits=[gc(2, 0, 10), gc(14, 0, 30)],
    )
    markers = {"status": vocab.BENIGN, "cause": "transaction_markers"}
    benign = rc.gap_findings([(sink_range(0), 20, 21, markers), (sink_range(0), 40, 41, markers)])
    found = [*covered, *benign]

    assert [(f.finding_type, f.severity) for f in found] == [("SKIPPED_COMMIT", "info"), ("GAP", "info")]
    assert inc.group_findings(stored(found)) == []


# --- one test per remedy action ---------------------------------------------------------------------


def test_remedy_replay_reads_the_missing_ranges_again() -> None:
    missing = next(i for i in incidents_of(restart_from_latest()) if i.kind == vocab.INCIDENT_RESTART)

    assert missing.remedy.steps == (ReplayStep((OffsetRange(TOPIC, 0, 100, 130),)),)
    # The stored plan, as earlier versions wrote it: people and tools read its Spark options and CSV.
    assert missing.remedy.to_json() == (
        f'{{"command": "offset-audit repair --incident {missing.incident_id}", "steps": [{{"action": '
        '"replay", "ranges": [{"end": 130, "partition": 0, "start": 100, "topic": "orders"}], '
        '"reset_offsets_csv": "orders,0,100\\n", "spark_options": [{"endingOffsets": '
        '"{\\"orders\\": {\\"0\\": 130}}", "startingOffsets": "{\\"orders\\": {\\"0\\": 100}}"}]}]}'
    )
    summary = IncidentSummary.of(missing)
    assert summary.ranges == (OffsetRange(TOPIC, 0, 100, 130),)
    assert summary.repair == f"offset-audit repair --incident {missing.incident_id}"


def test_remedy_delete_duplicates_keeps_one_copy_of_each_offset() -> None:
    (writer,) = incidents_of(second_writer())

    assert writer.remedy.steps == (DeleteDuplicatesStep((OffsetRange(TOPIC, 0, 10, 20),)),)
    assert json.loads(writer.remedy.to_json())["steps"] == [
        {
            "action": "delete_duplicates",
            "keep": "the copy written first (ties: the lowest checkpoint, then run id)",
            "ranges": [{"topic": "orders", "partition": 0, "start": 10, "end": 20}],
        }
    ]


def test_remedy_reset_offsets_sets_the_group_back_to_the_latest_completed_checkpoint() -> None:
    # orders/1's completed offset is unknown: that partition gets no offset rather than a guess.
    got = incidents_of(reset_tool(), completed={(JOB, TOPIC, 0): 50})
    (back,) = (i for i in got if i.last_evidence_at == at(600))  # orders/0's change
    (unknown,) = (i for i in got if i.last_evidence_at == at(3000))

    assert back.remedy.steps == (ResetOffsetsStep(GROUP, (PartitionOffset(TOPIC, 0, 50),)),)
    assert json.loads(back.remedy.to_json())["steps"] == [
        {
            "action": "reset_offsets",
            "group_id": "grp",
            "why": "group offsets at the latest completed checkpoint make a restart from them exact",
            "offsets": [{"topic": "orders", "partition": 0, "offset": 50}],
            "reset_offsets_csv": "orders,0,50\n",
        }
    ]
    assert unknown.remedy.steps == ()
    # A commit outage is repaired the same way, every partition it hit.
    (outage,) = incidents_of(broker_outage(), completed={(JOB, TOPIC, 0): 20, (JOB, TOPIC, 1): 20})
    (reset,) = outage.remedy.steps
    assert isinstance(reset, ResetOffsetsStep)
    assert reset.reset_offsets_csv() == "orders,0,20\norders,1,20\n"


def test_remedy_nothing_to_repair_when_nothing_was_lost_or_duplicated() -> None:
    found = ledger_findings(
        ev("RUN_STARTED", 0, run="run-1"),
        ev("OFFSETS_RESTORED", 0, run="run-1", offsets={0: 0}, detail={"source": "earliest"}),
        checkpoint(1, 1, {0: 10}, run="run-1"),  # then killed
        ev("RUN_STARTED", 9, run="run-2"),
        ev("OFFSETS_RESTORED", 9, run="run-2", offsets={0: 10}, detail={"source": "checkpoint"}),
        checkpoint(2, 10, {0: 20}, run="run-2"),
        ev("RUN_STOPPED", 20, run="run-2"),
        commits=[gc(3, 0, 10), gc(12, 0, 20)],
    )

    (crash,) = incidents_of(found)

    assert (crash.kind, crash.severity) == ("unclean_stop", "info")
    assert crash.remedy == RemedyPlan(
        note=NOTHING_TO_REPAIR, command=f"offset-audit repair --incident {crash.incident_id}"
    )
    assert crash.remedy.to_json() == (
        f'{{"command": "offset-audit repair --incident {crash.incident_id}", '
        '"note": "nothing to repair: no records were lost or duplicated", "steps": []}'
    )
    assert IncidentSummary.of(crash).repair is None  # nothing to run


# --- the typed rows: what the tables hold, read back ---------------------------------------------------


def every_story() -> list[rc.Finding]:
    return [*restart_from_latest(), *second_writer(), *reset_tool(), *broker_outage()]


def test_incident_ids_do_not_depend_on_the_reconciliation_run_or_the_order_of_findings() -> None:
    found = every_story()
    first = inc.to_incidents(inc.group_findings(stored(found, "rec-1")), "rec-1", {})
    second = inc.to_incidents(inc.group_findings(stored(reversed(found), "rec-2")), "rec-2", {})

    assert sorted(i.incident_id for i in first) == sorted(i.incident_id for i in second)
    assert {i.reconcile_run_id for i in second} == {"rec-2"}
    # Every finding belongs to at most one incident.
    claimed = [f for i in first for f in i.finding_ids]
    assert len(claimed) == len(set(claimed))


def test_a_stored_finding_is_its_row_read_back() -> None:
    for finding in stored(every_story()):
        row = finding.to_row()
        assert list(row) == FINDINGS_SCHEMA.fieldNames()
        assert StoredFinding.from_row(row) == finding
    (skip,) = (f for f in stored(restart_from_latest()) if f.finding_type == vocab.RESTART_SKIP)
    # Evidence times are stored as text; the stored finding holds what the table gives back.
    assert skip.evidence["started_at"] == "2026-03-01 12:01:40+00:00"
    assert json.loads(skip.to_row()["evidence"]) == skip.evidence


def test_an_incident_and_its_executed_plan_are_their_row_read_back() -> None:
    for incident in incidents_of(every_story(), completed={(JOB, TOPIC, 0): 150}):
        row = incident.to_row()
        assert list(row) == INCIDENTS_SCHEMA.fieldNames()
        # As delta-rs reads it back: aware times, lists.
        assert StoredIncident.from_row({k: instant(v) for k, v in row.items()}) == incident

    missing = next(i for i in incidents_of(restart_from_latest()) if i.kind == vocab.INCIDENT_RESTART)
    undo = ("RESTORE TABLE delta.`/sink` TO VERSION AS OF 3",)
    repaired = after_repair(missing, RepairOutcome((Replayed(30, version_before=3, version_after=4),), undo))
    assert repaired.status == vocab.INCIDENT_RESOLVED
    assert StoredIncident.from_row(repaired.to_row()) == repaired
    assert json.loads(repaired.to_row()["remedy"])["executed"] == {
        "actions": [{"action": "replay", "records_appended": 30, "version_before": 3, "version_after": 4}],
        "undo": list(undo),
    }
    # A repeat that changed nothing leaves the resolved incident as it was.
    unchanged = RepairOutcome((Replayed(0, version_before=4, version_after=4),))
    assert after_repair(repaired, unchanged) is repaired


def test_a_stored_plan_with_an_unknown_action_names_it() -> None:
    with pytest.raises(SchemaMismatchError, match="'rewind' is not one of"):
        RemedyPlan.from_json('{"steps": [{"action": "rewind"}]}')
