"""What a maintenance decides, from the config, the clock and the open incidents (no table touched)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.config import MaintenanceConfig, load_config
from app.errors import ConfigError
from app.maintenance import plan

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 20, 2, 30, tzinfo=UTC)


def test_a_closed_day_is_older_than_the_margin_and_holds_more_than_a_few_files() -> None:
    files = {"2026-03-17": 9, "2026-03-18": 9, "2026-03-19": 50, "2026-03-20": 50, "2026-03-10": 3}
    cfg = MaintenanceConfig(closed_after_days=1, compact_min_files=4)
    # 03-19 is yesterday: a batch stamped before midnight may still be committing to it.
    assert plan.closed_partitions(files, NOW, cfg) == ["2026-03-17", "2026-03-18"]


def test_vacuum_below_deltas_safe_minimum_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config("local", ["maintenance.vacuum_retention_hours=24"], environ={})
    assert raised.value.key == "maintenance.vacuum_retention_hours"
    assert load_config("local", [], environ={}).maintenance.vacuum_retention_hours == 168


def test_a_negative_retention_is_refused_naming_the_table() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config("local", ["maintenance.retention_days.findings=-1"], environ={})
    assert raised.value.key == "maintenance.retention_days.findings"


def test_without_open_incidents_retention_counts_whole_days_back_from_today() -> None:
    keep = plan.protected([], [], timedelta(days=7))
    assert plan.cutoff("ledger", 30, NOW, keep) == datetime(2026, 2, 18, tzinfo=UTC)
    assert plan.cutoff("findings", 0, NOW, keep) is None  # 0: forever
    # No time column: its rows age with their run, against the same cutoff.
    assert plan.cutoff("partition_summary", 30, NOW, keep) == datetime(2026, 2, 18, tzinfo=UTC)
    assert plan.cutoff("ingest_positions", 30, NOW, keep) is None  # no retention


def test_completeness_windows_age_out_by_their_end_after_400_days_by_default() -> None:
    keep = plan.protected([], [], timedelta(days=7))
    days = load_config("local", environ={}).maintenance.retention_days.completeness
    assert days == 400
    limit = plan.cutoff("completeness", days, NOW, keep)
    assert limit == datetime(2025, 2, 13, tzinfo=UTC)
    assert (
        plan.retention_predicate("completeness", limit, keep)
        == "\"window_end\" < '2025-02-13T00:00:00+00:00'"
    )


def test_an_open_incident_keeps_its_evidence_findings_runs_and_itself() -> None:
    incident = {
        "finding_ids": ["f-1", "f-2"],
        "run_ids": ["run-1"],
        "reconcile_run_id": "rec-1",
        "first_evidence_at": datetime(2026, 1, 10, 5, tzinfo=UTC),
    }
    keep = plan.protected([incident], ["rec-9"], timedelta(days=7))
    # The raw evidence from the incident's first evidence less the baseline lookback, a day boundary.
    assert plan.cutoff("ledger", 30, NOW, keep) == datetime(2026, 1, 3, tzinfo=UTC)
    assert plan.cutoff("group_commits", 30, NOW, keep) == datetime(2026, 1, 3, tzinfo=UTC)
    # The audit tables keep their own retention; the cited rows are exempted one by one.
    limit = plan.cutoff("findings", 30, NOW, keep)
    assert limit == datetime(2026, 2, 18, tzinfo=UTC)
    assert plan.retention_predicate("findings", limit, keep) == (
        "\"detected_at\" < '2026-02-18T00:00:00+00:00' AND \"finding_id\" NOT IN ('f-1', 'f-2') "
        "AND \"reconcile_run_id\" NOT IN ('rec-1', 'rec-9')"
    )
    assert plan.retention_predicate("incidents", limit, keep) == (
        "\"last_evidence_at\" < '2026-02-18T00:00:00+00:00' AND \"status\" <> 'open'"
    )
    assert plan.retention_predicate("restarts", limit, keep).endswith("\"run_id\" NOT IN ('run-1')")
    assert plan.retention_predicate("ledger", limit, keep) == "\"event_date\" < '2026-02-18'"


def test_small_tables_are_compacted_whole_and_the_ingest_tables_never() -> None:
    cfg = MaintenanceConfig(compact_min_files=4)
    assert plan.compaction_targets("findings", False, {"": 5}, NOW, cfg) == [""]
    assert plan.compaction_targets("findings", False, {"": 4}, NOW, cfg) == []
    # One file per ingest run in time order: the window's reads skip the old ones by statistics.
    assert plan.compaction_targets("group_commits", False, {"": 500}, NOW, cfg) == []
    assert plan.compaction_targets("ledger", True, {"2026-03-01": 9}, NOW, cfg) == ["2026-03-01"]


LIMIT = datetime(2026, 2, 18, tzinfo=UTC)


def run(run_id: str, finished_at: datetime, command: str = "reconcile") -> dict[str, object]:
    return {"run_id": run_id, "command": command, "finished_at": finished_at}


def test_summary_rows_go_with_runs_that_finished_before_the_cutoff_the_boundary_kept() -> None:
    runs = [
        run("rec-old", LIMIT - timedelta(microseconds=1)),
        run("rec-at", LIMIT),  # finished at the cutoff: not before it
        run("rec-new", LIMIT + timedelta(days=20)),
    ]
    present = ["rec-new", "rec-at", "rec-old", "rec-old"]
    assert plan.expired_runs(runs, present, LIMIT, plan.Protected()) == ["rec-old"]


def test_protected_runs_and_runs_audit_runs_does_not_know_keep_their_summary_rows() -> None:
    old = LIMIT - timedelta(days=5)
    runs = [run("rec-latest", old), run("rec-incident", old), run("rec-a", old), run("rec-b", old)]
    keep = plan.protected(
        [{"reconcile_run_id": "rec-incident", "first_evidence_at": old}], ["rec-latest"], timedelta(days=7)
    )
    # rec-running is still writing (or was killed: not retention's business).
    present = ["rec-latest", "rec-incident", "rec-a", "rec-b", "rec-running"]
    assert plan.expired_runs(runs, present, LIMIT, keep) == ["rec-a", "rec-b"]


def test_a_run_id_is_as_old_as_its_last_finished_command_and_only_held_runs_are_named() -> None:
    old = LIMIT - timedelta(days=5)
    # A nightly records its commands under one run id; forensics finished after the cutoff.
    runs = [
        run("night-1", old),
        run("night-1", LIMIT + timedelta(hours=1), "forensics"),
        run("rec-gone", old),
    ]
    assert plan.expired_runs(runs, ["night-1"], LIMIT, plan.Protected()) == []


def test_expired_runs_are_deleted_in_chunks_of_at_most_the_chunk_size() -> None:
    ids = [f"rec-{n:04d}" for n in range(1201)]
    parts = plan.chunks(ids)
    assert [len(p) for p in parts] == [500, 500, 201]
    assert [i for p in parts for i in p] == ids
    assert plan.chunks([]) == []
