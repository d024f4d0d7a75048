"""Incidents: the demo's five injected events, as findings, become five incidents with their
impact; information forms none; ids are stable across reconciliation runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from app.contracts import vocabulary as vocab
from app.incidents import grouping as inc
from app.reconcile import findings as rc

pytestmark = pytest.mark.unit

JOB, GROUP, TOPIC = "orders-audit", "grp", "orders"
DETECTED = datetime(2026, 3, 2, tzinfo=UTC)


def finding(
    finding_type: str,
    severity: str,
    partition: int | None,
    start: int | None = None,
    end: int | None = None,
    *,
    run: str | None = None,
    status: str = "open",
    count: int | None = None,
    checkpoint: int | None = None,
    **evidence: Any,
) -> rc.StoredFinding:
    core = {
        "finding_type": finding_type,
        "severity": severity,
        "status": status,
        "job_name": JOB,
        "group_id": GROUP,
        "topic": TOPIC if partition is not None else None,
        "partition": partition,
        "checkpoint_id": checkpoint,
        "run_id": run,
        "offset_start": start,
        "offset_end": end,
        "record_count": count if count is not None else (end - start if start is not None and end else None),
        "evidence": json.dumps(evidence, sort_keys=True),
        "identity": "",
    }
    row = {**core, "finding_id": rc.finding_id(core), "reconcile_run_id": "rec", "detected_at": DETECTED}
    return rc.StoredFinding.from_row(row)


def demo_findings() -> list[rc.StoredFinding]:
    t = "2026-03-01 12:00:{:02d}+00:00".format
    return [
        finding(vocab.UNCLEAN_STOP, "info", None, run="run-1", next_run_id="run-2", last_event_at=t(1)),
        *[
            finding(
                vocab.COMMIT_FAILURE,
                "warn",
                p,
                400,
                440,
                run="run-3",
                count=1,
                error="NOT_COORDINATOR",
                first_failure=t(10),
            )
            for p in range(3)
        ],
        finding(
            vocab.SKIPPED_COMMIT, "info", 0, 430, run="run-3", status="benign", checkpoint=7, reason="failed"
        ),
        finding(vocab.FOREIGN_COMMIT, "error", 0, 380, run=None, count=None, commit_time=t(20)),
        finding(vocab.COMMIT_REGRESSION, "error", 0, 380, 480, commit_time=t(21)),
        *[
            finding(
                vocab.RESTART_SKIP,
                "critical",
                p,
                520,
                570,
                run="run-5",
                resume_source="latest",
                started_at=t(40),
            )
            for p in range(3)
        ],
        *[
            finding(
                vocab.GAP,
                "critical",
                p,
                520,
                570,
                run=None,
                status="confirmed",
                checkpoint=2,
                checkpoint_completed_at=t(45),
            )
            for p in range(3)
        ],
        finding(  # as reconcile dates it: the ledger knows run-1's copy, not the second writer's
            vocab.DUPLICATE,
            "error",
            1,
            150,
            170,
            writers=[{"run": "run-1", "cp": 1}, {"run": "second-writer", "cp": 1}],
            job_runs=["run-1"],
            outside_writers=["second-writer"],
            first_copy_written_at=t(2),
            last_copy_written_at=t(2),
        ),
        finding(vocab.GAP, "info", 2, 600, 610, status="benign"),
    ]


def test_the_demos_events_are_five_incidents_with_their_impact() -> None:
    rows = inc.to_incidents(
        inc.group_findings(demo_findings()), "rec-1", {(JOB, TOPIC, p): 610 for p in range(3)}
    )
    got = {(r.kind, r.severity, r.partitions) for r in rows}
    assert got == {
        ("restart", "critical", 3),
        ("second_writer", "error", 1),
        ("external_offset_change", "error", 1),
        ("commit_outage", "warn", 3),
        ("unclean_stop", "info", 0),
    }
    assert [r.kind for r in rows][:1] == ["restart"]  # most severe first
    restart = next(r for r in rows if r.kind == "restart")
    assert (restart.impact.records_lost, restart.impact.records_duplicated, restart.run_ids) == (
        150,
        0,
        ("run-5",),
    )
    assert len(restart.finding_ids) == 6
    assert "skipped 150 offsets on 3 partition(s)" in restart.cause
    plan = json.loads(restart.remedy.to_json())
    replay = plan["steps"][0]
    assert replay["action"] == "replay"
    assert replay["spark_options"][0] == {
        "startingOffsets": json.dumps({TOPIC: {"0": 520}}),
        "endingOffsets": json.dumps({TOPIC: {"0": 570}}),
    }
    assert replay["reset_offsets_csv"] == "orders,0,520\norders,1,520\norders,2,520\n"
    assert plan["command"] == f"offset-audit repair --incident {restart.incident_id}"
    writer = next(r for r in rows if r.kind == "second_writer")
    assert (writer.impact.records_duplicated, writer.run_ids) == (20, ("run-1",))  # a real run id only
    assert writer.first_evidence_at == writer.last_evidence_at == datetime(2026, 3, 1, 12, 0, 2, tzinfo=UTC)
    assert "written by run run-1 and second-writer (no run of orders-audit)" in writer.cause
    # Every incident with an impact carries its evidence time: the impact chart places it by that.
    harmful = [r for r in rows if r.impact.harm]
    assert {r.kind for r in harmful} == {"restart", "second_writer"}
    assert all(r.last_evidence_at is not None for r in harmful)
    reset = next(r for r in rows if r.kind == "external_offset_change")
    assert json.loads(reset.remedy.to_json())["steps"][0]["reset_offsets_csv"] == "orders,0,610\n"
    crash = next(r for r in rows if r.kind == "unclean_stop")
    assert json.loads(crash.remedy.to_json())["steps"] == []
    # Every actionable finding belongs to exactly one incident; information to none.
    claimed = [f for r in rows for f in r.finding_ids]
    assert len(claimed) == len(set(claimed)) == len(demo_findings()) - 2


def test_incident_ids_do_not_depend_on_the_reconciliation_run() -> None:
    first = inc.to_incidents(inc.group_findings(demo_findings()), "rec-1", {})
    second = inc.to_incidents(inc.group_findings(list(reversed(demo_findings()))), "rec-2", {})
    assert sorted(r.incident_id for r in first) == sorted(r.incident_id for r in second)
    assert {r.reconcile_run_id for r in second} == {"rec-2"}


def test_a_crash_followed_by_a_restart_that_replayed_is_one_restart_incident() -> None:
    found = [
        finding(vocab.UNCLEAN_STOP, "warn", None, run="run-1", next_run_id="run-2"),
        finding(vocab.RESTART_REPLAY, "warn", 0, 90, 100, run="run-2", resume_source="group"),
        finding(vocab.DUPLICATE, "error", 0, 90, 100, writers=[{"run": "run-1"}, {"run": "run-2"}]),
    ]
    rows = inc.to_incidents(inc.group_findings(found), "rec", {})
    assert [(r.kind, r.severity, r.impact.records_replayed, r.impact.records_duplicated) for r in rows] == [
        ("restart", "error", 10, 10)
    ]
    assert "after run run-1 died" in rows[0].cause


def test_the_jobs_own_commits_of_a_wrong_offset_are_not_called_an_outside_change() -> None:
    mismatch = [
        finding(vocab.COMMIT_MISMATCH, "error", p, 9, 10, commit_time="2026-03-01 12:00:02+00:00")
        for p in (0, 1)
    ]
    (row,) = inc.to_incidents(inc.group_findings(mismatch), "rec", {})
    assert (row.kind, row.severity, row.partitions) == ("external_offset_change", "error", 2)
    assert row.cause.startswith(f"{JOB} committed offsets to group {GROUP} that differ from its checkpoints'")
    assert "outside" not in row.cause
    # With a foreign commit in the same change, the outside change leads the cause.
    foreign = finding(
        vocab.FOREIGN_COMMIT, "error", 2, 0, count=None, commit_time="2026-03-01 12:00:03+00:00"
    )
    (mixed,) = inc.to_incidents(inc.group_findings([*mismatch, foreign]), "rec", {})
    assert "changed outside" in mixed.cause
