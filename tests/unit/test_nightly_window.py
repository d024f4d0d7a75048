"""A night's check validates the ledger and group commits of that night's reconcile window, which
starts where the last night that succeeded ended: a failed night (its reconcile run left pending)
does not move it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from pyspark.sql import SparkSession

from app.contracts.tables import AUDIT_RUNS_SCHEMA
from app.nightly.run import Nightly
from app.pipeline.context import AuditContext
from app.storage import delta_rows
from app.storage.tables import tables_from_config
from tests.support.config import build_config
from tests.support.ledger_data import at

pytestmark = pytest.mark.unit


def run_row(run_id: str, start: Any, end: Any, status: str) -> dict[str, Any]:
    return dict(
        run_id=run_id, command="reconcile", jobs="[]", window_start=start, window_end=end,
        started_at=end, finished_at=end + timedelta(seconds=1), status=status,
    )  # fmt: skip


def test_the_check_window_is_the_nights_reconcile_window(tmp_path: Path) -> None:
    cfg = build_config(data_dir=tmp_path / "data")
    runs = [
        run_row("night-1", None, at(100), "succeeded"),  # the first night: everything
        run_row("night-2", at(100), at(200), "pending"),  # failed: its window stays open
        run_row("night-3", at(100), at(300), "pending"),  # so the next one starts at 100 again
    ]
    delta_rows.append_rows(
        cast(SparkSession, None), tables_from_config(cfg).audit_runs, AUDIT_RUNS_SCHEMA, runs
    )

    def window(run_id: str) -> Any:
        night = Nightly(AuditContext.create(cfg, None, bootstrap=str), run_id=run_id, now=at(1000))
        return night._window_start()

    assert window("night-1") is None
    assert window("night-3") == at(100)
    assert window("night-4") is None  # no reconcile of its own yet: nothing to narrow
