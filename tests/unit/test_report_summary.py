"""The dashboard's partition summary read from a real Delta table (delta-rs, no JVM): the rows of
the reconcile run it shows, without opening the files of the other runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from app.contracts.tables import AUDIT_RUNS_SCHEMA, PARTITION_SUMMARY_SCHEMA
from app.report import gather
from app.storage import delta_rows
from app.storage.handles import AuditTables, open_handle
from app.storage.tables import tables_from_config
from tests.support.config import build_config

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


def summary_rows(run: str, checkpoint: int) -> list[dict[str, Any]]:
    return [
        {"reconcile_run_id": run, "job_name": "job-a", "group_id": "g", "topic": "orders", "partition": p,
         "last_checkpoint_id": checkpoint, "last_checkpoint_offset": 100 * checkpoint,
         "last_committed_offset": 90 * checkpoint, "commit_lag_offsets": 10 * checkpoint,
         "findings_by_type": "{}"}
        for p in (0, 1)
    ]  # fmt: skip


def reconcile_run(run: str, finished_at: datetime) -> dict[str, Any]:
    return {"run_id": run, "command": "reconcile", "window_end": finished_at, "started_at": finished_at,
            "finished_at": finished_at, "status": "succeeded"}  # fmt: skip


def test_the_report_reads_the_shown_runs_summary_without_opening_other_runs_files(tmp_path: Path) -> None:
    cfg = build_config(data_dir=tmp_path)
    tables = tables_from_config(cfg)
    path = tables.partition_summary
    # A watch's runs, one appended file each; the last one is still writing (not in audit_runs).
    runs = ["watch-20260302T0558", "watch-20260302T0559", "watch-20260302T0600"]
    for n, run in enumerate(runs):
        delta_rows.append_rows(None, path, PARTITION_SUMMARY_SCHEMA, summary_rows(run, n + 1))
    finished = [reconcile_run(run, NOW - timedelta(minutes=2 - n)) for n, run in enumerate(runs[:2])]
    delta_rows.append_rows(None, tables.audit_runs, AUDIT_RUNS_SCHEMA, finished)
    # The history's files are gone from under the table: a read that opened them would fail.
    files = DeltaTable(path).get_add_actions(flatten=True)
    paths, lows = (files.column(c).to_pylist() for c in ("path", "min.reconcile_run_id"))
    others = [file for file, low in zip(paths, lows, strict=True) if low != runs[1]]
    assert len(others) == 2
    for file in others:
        (Path(path) / file).unlink()

    audit_tables = AuditTables.from_config(cfg, None)
    data = gather.gather(audit_tables, cfg, "report-1", tmp_path / "index.html", now=NOW)

    assert data.reconcile_run_id == runs[1]
    assert [(g["group_id"], g["lag_offsets"]) for g in data.groups] == [("g", 20)]  # run 2's
    shown = gather.read_tables(audit_tables, cfg, NOW, runs[1]).partition_summary
    assert shown is not None
    assert sorted(shown.column("reconcile_run_id").to_pylist()) == [runs[1]] * 2
    assert "table partition_summary does not exist yet: its section is empty" not in data.notes


def test_a_run_id_with_a_quote_is_read_as_it_stands(tmp_path: Path) -> None:
    path = str(tmp_path / "partition_summary")
    for run in ("rec-it's", "rec-b"):
        delta_rows.append_rows(None, path, PARTITION_SUMMARY_SCHEMA, summary_rows(run, 1))

    summaries = open_handle("partition_summary", path, None)
    rows = summaries.rows_with("reconcile_run_id", "rec-it's")

    assert rows is not None
    assert rows.column("reconcile_run_id").to_pylist() == ["rec-it's"] * 2
    assert summaries.at(str(tmp_path / "none")).rows_with("reconcile_run_id", "rec-b") is None
