"""A night reads the group commits of its window, not the whole history: the files committed
before the window (by their min/max statistics) are never opened."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from app.contracts.tables import GROUP_COMMITS_SCHEMA
from app.reconcile import findings as rc
from app.reconcile.inputs import read_group_commit_rows
from app.storage.handles import open_handle

pytestmark = pytest.mark.unit

DAY1 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def commit_row(offset: int, commit_time: datetime | None, log_time: datetime | None) -> dict[str, object]:
    row: dict[str, object] = {f.name: None for f in GROUP_COMMITS_SCHEMA.fields}
    row.update(group_id="grp", topic="orders", partition=0, committed_offset=offset, record_kind="commit",
               commit_time=commit_time, log_partition=0, log_offset=offset, log_time=log_time,
               ingest_run_id="i")  # fmt: skip
    return row


def test_the_commits_of_the_window_are_read_without_opening_older_files(tmp_path: Path) -> None:
    path = str(tmp_path / "group_commits")
    commits = open_handle("group_commits", path, None)
    for day in range(10):  # one ingest run a night: one file a day
        at = DAY1 + timedelta(days=day)
        commits.append([commit_row(day, at, at)])
    # A record without a commit time is judged by its log time; one with neither is always read.
    commits.append([commit_row(100, None, DAY1 + timedelta(days=9))])
    commits.append([commit_row(101, None, None)])
    # The first day's file is gone from the disk: a read that opens it fails.
    files = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    (first_file,) = [f["path"] for f in files if f["min.commit_time"] == DAY1]
    (Path(path) / first_file).unlink()

    window = rc.AuditWindow(until=DAY1 + timedelta(days=10), since=DAY1 + timedelta(days=8))
    rows = read_group_commit_rows(commits, window, ["grp"], lookback_days=1)

    assert sorted(rows.column("committed_offset").to_pylist()) == [7, 8, 9, 100, 101]
