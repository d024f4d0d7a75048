"""The dashboard's completeness windows read from a real Delta table (delta-rs, no JVM): only the
recent windows (``report.window_hours``), and a note instead of an error when there is no table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.contracts.tables import COMPLETENESS_SCHEMA
from app.report import gather
from app.storage import delta_rows
from app.storage.handles import AuditTables
from app.storage.tables import tables_from_config
from tests.support.config import build_config

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


def completeness_row(start: datetime, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict(
        job_name="job-a", topic="orders", partition=0, window_start=start,
        window_end=start + timedelta(minutes=10), offset_start=0, offset_end=99, sink_mode="coordinates",
        expected=100, landed=100, lost=0, unverifiable=0, duplicated=0, pending=0,
        offsets_in_sink_batches=100, completeness=1.0, latency_p50_ms=500, latency_p95_ms=900,
        final=True, computed_at=NOW, reconcile_run_id="rec-1",
    )  # fmt: skip
    row.update(over)
    return row


def test_the_report_reads_only_the_windows_of_the_last_window_hours(tmp_path: Path) -> None:
    cfg = build_config("report.window_hours=2", data_dir=tmp_path)
    path = tables_from_config(cfg).completeness
    old = [completeness_row(NOW - timedelta(hours=h)) for h in (30, 3)]
    recent = [
        completeness_row(NOW - timedelta(hours=1), landed=90, lost=10, completeness=0.9),
        completeness_row(NOW - timedelta(minutes=20), final=False, landed=None, completeness=None),
    ]
    delta_rows.append_rows(None, path, COMPLETENESS_SCHEMA, old)
    delta_rows.append_rows(None, path, COMPLETENESS_SCHEMA, recent)

    data = gather.gather(
        AuditTables.from_config(cfg, None), cfg, "report-1", tmp_path / "index.html", now=NOW
    )

    assert [(w["window_start"], w["lost"], w["completeness"], w["final"]) for w in data.windows] == [
        ("2026-03-02 05:00", 10, 0.9, True),
        ("2026-03-02 05:40", 0, None, False),
    ]
    assert data.windows[0]["window_end"] == "2026-03-02 05:10"
    assert [p["p95_ms"] for line in data.latency for p in line["points"]] == [900, 900]
    assert data.window_hours == 2
    assert not any("completeness" in n for n in data.notes)


def test_without_a_completeness_table_the_sections_are_empty_and_a_note_says_why(tmp_path: Path) -> None:
    cfg = build_config(data_dir=tmp_path)

    data = gather.gather(
        AuditTables.from_config(cfg, None), cfg, "report-1", tmp_path / "index.html", now=NOW
    )

    assert (data.windows, data.latency) == ([], [])
    assert "table completeness does not exist yet: its section is empty" in data.notes
