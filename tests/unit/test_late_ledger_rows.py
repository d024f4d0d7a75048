"""Ledger rows written after a run read the ledger, dated before that run's end: which rows the
ledger's versions say no run has seen (`delta_rows.unseen_rows`), and where the next default window
starts because of them (`outputs.reach_back`). CONTRACTS.md section 4, audit_runs."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from app.contracts.tables import AUDIT_RUNS_SCHEMA, LEDGER_SCHEMA
from app.errors import InfrastructureError
from app.reconcile.outputs import PreviousRun, last_run, reach_back
from app.storage import delta_rows
from app.storage.handles import AuditTables
from tests.support.config import build_config
from tests.support.ledger_data import JOB, at, checkpoint, ev, ledger_table

pytestmark = pytest.mark.unit


def append(path: str, *events: list) -> int:  # type: ignore[type-arg]
    """Append the events to the ledger at ``path``; the version written."""
    delta_rows.append_rows(None, path, LEDGER_SCHEMA, ledger_table(*events).to_pylist())
    return int(DeltaTable(path).version())


def times(rows: object) -> list[float]:
    assert rows is not None
    return sorted((t - at(0)).total_seconds() for t in rows.column("event_time").to_pylist())  # type: ignore[attr-defined]


def test_only_the_rows_written_after_the_seen_version_and_dated_before_the_end_are_unseen(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "ledger")
    seen = append(path, checkpoint(1, 10, {0: 50}, commit=False))
    # after the run read version `seen`: one row dated before its end (500 s), one after
    current = append(path, ev("CHECKPOINT_COMPLETED", 499, cp=2, offsets={0: 100}), ev("RUN_STOPPED", 600))
    assert times(delta_rows.unseen_rows(None, path, seen, current, "event_time", at(500))) == [499.0]
    # on time only: no row is read, and none is unseen
    on_time = append(path, ev("RUN_STOPPED", 700))
    assert times(delta_rows.unseen_rows(None, path, current, on_time, "event_time", at(650))) == []


def test_a_compaction_rewrites_no_row_into_an_unseen_one_and_a_second_copy_is_unseen(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger")
    append(path, checkpoint(1, 10, {0: 50}, commit=False))
    seen = append(path, checkpoint(2, 20, {0: 60}, commit=False))
    DeltaTable(path).optimize.compact()
    compacted = int(DeltaTable(path).version())
    assert times(delta_rows.unseen_rows(None, path, seen, compacted, "event_time", at(500))) == []
    # a writer that wrote checkpoint 2's completion again, late (a retried write): one more copy
    again = append(path, ev("CHECKPOINT_COMPLETED", 21, cp=2, offsets={0: 60}))
    assert times(delta_rows.unseen_rows(None, path, seen, again, "event_time", at(500))) == [21.0]


def test_a_seen_version_whose_log_is_gone_cannot_tell(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger")
    seen = append(path, checkpoint(1, 10, {0: 50}, commit=False))
    current = append(path, ev("CHECKPOINT_COMPLETED", 30, cp=2, offsets={0: 60}))
    DeltaTable(path).create_checkpoint()
    for version in range(current):  # what log cleanup leaves: the checkpoint and what follows it
        os.remove(Path(path) / "_delta_log" / f"{version:020d}.json")
    assert delta_rows.unseen_rows(None, path, seen, current, "event_time", at(500)) is None


def test_a_seen_version_whose_files_were_compacted_and_vacuumed_cannot_tell(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger")
    append(path, checkpoint(1, 10, {0: 50}, commit=False))
    seen = append(path, checkpoint(2, 20, {0: 60}, commit=False))
    DeltaTable(path).optimize.compact()
    DeltaTable(path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    current = int(DeltaTable(path).version())
    assert delta_rows.unseen_rows(None, path, seen, current, "event_time", at(500)) is None


def test_a_seen_versions_file_that_cannot_be_read_is_an_error_not_a_version_gone(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger")
    append(path, checkpoint(1, 10, {0: 50}, commit=False))
    seen = append(path, checkpoint(2, 20, {0: 60}, commit=False))
    replaced = [Path(u.removeprefix("file://")) for u in DeltaTable(path).file_uris()]
    DeltaTable(path).optimize.compact()  # the current version holds new files; these are only the seen one's
    current = int(DeltaTable(path).version())
    replaced[0].unlink()
    replaced[0].mkdir()  # there, but unreadable as a file: a storage failure, not a vacuumed file
    with pytest.raises(InfrastructureError, match="cannot read the table"):
        delta_rows.unseen_rows(None, path, seen, current, "event_time", at(500))


def test_the_next_window_starts_at_the_earliest_unseen_row_of_its_jobs(tmp_path: Path) -> None:
    cfg = build_config(data_dir=tmp_path)
    ledger = AuditTables.from_config(cfg, None).ledger
    path = ledger.location
    seen = append(path, checkpoint(1, 10, {0: 50}, commit=False))
    previous = PreviousRun(window_end=at(500), ledger_version=seen)
    other = append(path, ev("CHECKPOINT_COMPLETED", 450, cp=9, offsets={0: 5}, job="job-b"))
    # another job's late row moves only a window over every job, or over that job
    assert reach_back(ledger, previous, other, [JOB]) == at(500)
    assert reach_back(ledger, previous, other, []) == at(450)
    late = append(path, ev("CHECKPOINT_COMPLETED", 498, cp=2, offsets={0: 100}), ev("RUN_STOPPED", 700))
    assert reach_back(ledger, previous, late, [JOB]) == at(498)
    # nothing new since the run read, no version recorded, or no ledger: where the run ended
    assert reach_back(ledger, PreviousRun(at(500), late), late, [JOB]) == at(500)
    assert reach_back(ledger, PreviousRun(at(500), None), late, [JOB]) == at(500)
    assert reach_back(ledger, previous, None, [JOB]) == at(500)


def test_audit_runs_written_before_the_ledger_version_column_read_it_as_null_and_gain_it(
    tmp_path: Path,
) -> None:
    cfg = build_config(data_dir=tmp_path)
    runs = AuditTables.from_config(cfg, None).audit_runs
    old_schema = AUDIT_RUNS_SCHEMA.__class__(
        [f for f in AUDIT_RUNS_SCHEMA.fields if f.name != "ledger_version"]
    )
    row = dict(
        run_id="r1", command="reconcile", jobs="[]", window_start=None, window_end=at(100),
        started_at=at(100), finished_at=at(101), status="succeeded",
    )  # fmt: skip
    delta_rows.merge_rows(None, runs.location, old_schema, [row], ["run_id", "command"])
    assert last_run(runs, "reconcile", []) == PreviousRun(at(100), None)
    runs.merge([{**row, "run_id": "r2", "window_end": at(200), "ledger_version": 7}])
    assert last_run(runs, "reconcile", []) == PreviousRun(at(200), 7)
    assert "ledger_version" in DeltaTable(runs.location).schema().to_arrow().names
    assert pc.sum(pc.is_null(runs.dataset().to_table().column("ledger_version"))).as_py() == 1  # type: ignore[union-attr]
