"""A maintenance killed with SIGKILL midway leaves every table readable, and the next maintenance
and the next night complete: `offset-audit maintain` as a scheduler runs it, killed once it has
started deleting, then once it has started rewriting (each moment read from its progress lines),
then run to its end, then `offset-audit nightly` over the same tables and a real broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from app.runtime.jvm import REPO_ROOT
from app.storage.tables import TABLE_NAMES
from tests.support.audit_tables import write_audit_tables
from tests.support.config import set_options
from tests.support.maintenance import FILES_PER_DAY, NOW, files_per_day, write_days

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(1500)]

COMMAND_TIMEOUT_S = 900  # a deadline for a hung process (the nightly starts Spark), not a speed check
# Past retention on NOW (30 days, and before the open incident's evidence less its lookback).
EXPIRED = [date(2026, 1, d) for d in range(10, 20)]
CLOSED = [date(2026, 3, d) for d in range(5, 15)]  # closed, kept, FILES_PER_DAY files each


def cli(data_dir: Path, *argv: str, bootstrap: str = "127.0.0.1:1") -> list[str]:
    settings = set_options(
        f"kafka.bootstrap_servers={bootstrap}", "reconcile.confirm_gaps=false", data_dir=data_dir
    )
    return [sys.executable, "-m", "app.cli", *argv, *settings]


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}


def kill_at(data_dir: Path, progress: str) -> int:
    """Start `maintain --now NOW` and SIGKILL it as soon as it logs a line containing ``progress``;
    its return code (-9 when it was still running)."""
    child = subprocess.Popen(
        cli(data_dir, "maintain", "--now", NOW.isoformat()),
        cwd=REPO_ROOT,
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    seen = []
    for line in child.stderr:
        seen.append(line)
        if progress in line:
            child.send_signal(signal.SIGKILL)
            break
    code = child.wait(COMMAND_TIMEOUT_S)
    assert any(progress in line for line in seen), "".join(seen[-20:])
    return code


def readable(data_dir: Path) -> dict[str, int]:
    """Every table's rows, read at its current version (a torn table raises here)."""
    counts = {}
    for name in TABLE_NAMES:
        path = data_dir / "tables" / name
        if (path / "_delta_log").is_dir():
            table: pa.Table = DeltaTable(str(path)).to_pyarrow_table()
            counts[name] = table.num_rows
    return counts


def test_a_killed_maintenance_leaves_tables_readable_and_the_next_one_and_the_next_night_complete(
    bootstrap: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    write_audit_tables(data)
    ledger = str(data / "tables" / "ledger")
    write_days(ledger, EXPIRED + CLOSED, run="run-history")
    before = readable(data)

    # Killed once it is deleting the expired days (delta.appendOnly lifted for the deletion), then
    # once it is rewriting the closed days.
    assert kill_at(data, "delta.appendOnly lifted for the deletion") == -signal.SIGKILL
    readable(data)
    assert kill_at(data, "maintain ledger: compacting") == -signal.SIGKILL
    after_kills = readable(data)
    assert {k: v for k, v in after_kills.items() if k != "ledger"} == {
        k: v for k, v in before.items() if k != "ledger"
    }

    done = subprocess.run(
        cli(data, "--json", "maintain", "--now", NOW.isoformat()),
        cwd=REPO_ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    files = files_per_day(ledger)
    assert {d.isoformat(): files.get(d.isoformat()) for d in CLOSED} == {d.isoformat(): 1 for d in CLOSED}
    assert not any(d.isoformat() in files for d in EXPIRED)
    assert DeltaTable(ledger).metadata().configuration["delta.appendOnly"] == "true"
    expired_rows = len(EXPIRED) * FILES_PER_DAY * 8  # 4 events x 2 partitions per batch
    assert readable(data)["ledger"] == before["ledger"] - expired_rows

    night = subprocess.run(
        cli(
            data, "--json", "nightly", "--now", NOW.isoformat(), "--fail-on", "critical", bootstrap=bootstrap
        ),
        cwd=REPO_ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    summary = json.loads(night.stdout.strip().splitlines()[-1])
    assert [(s["step"], s["status"]) for s in summary["steps"]] == [
        (step, "done") for step in ("ingest-offsets", "reconcile", "forensics", "check", "report", "maintain")
    ], night.stderr[-3000:]
    assert night.returncode in (0, 1), night.stderr[-3000:]  # 1: the story's open critical incident
