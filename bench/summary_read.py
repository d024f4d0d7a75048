"""Benchmark: the dashboard's read of partition_summary, the shown run's rows against the whole table.

    .venv/bin/python -m bench.summary_read --days 30 --runs-per-day 1440 --partitions 10 --repeat 5

The table is written with delta-rs as a month of `watch` leaves it under the default retention:
``--days`` less one of reconcile runs (a watch's every minute, a nightly's once a day) compacted
into one file by the nightly maintenance and checkpointed, then today's runs appended one file and
one commit each, as reconcile appends them. Each repetition reads, in alternating order, the whole
table (what the report read before: every row and column) and the rows of the run the report
shows (``report.gather.run_summary``), for the newest watch run and for today's nightly run (whose
id falls inside the compacted file's range, so that file is read). Printed per read: rows
returned, files opened, the median seconds of ``--repeat`` with min and max, and the ratio to the
whole-table read of the same repetitions.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from app.contracts.tables import PARTITION_SUMMARY_SCHEMA
from app.report.gather import run_summary
from app.storage import delta_rows
from app.storage.handles import open_handle

TODAY = datetime(2026, 3, 2, tzinfo=UTC)


def run_ids(day: datetime, runs: int) -> list[str]:
    """A day's reconcile runs as the CLI names them: the nightly at 02:30, a watch run a minute."""
    nightly = f"nightly-{day + timedelta(hours=2, minutes=30):%Y%m%dT%H%M%S}-a1b2c3"
    watch = [f"watch-{day + timedelta(minutes=m):%Y%m%dT%H%M%S}-d4e5f6" for m in range(runs - 1)]
    return [nightly, *watch]


def summary_table(runs: list[str], partitions: int) -> pa.Table:
    n = len(runs) * partitions
    offsets = [1_000_000 + i for i in range(n)]
    columns: dict[str, Any] = {
        "reconcile_run_id": [r for r in runs for _ in range(partitions)],
        "job_name": ["orders-job"] * n,
        "group_id": ["orders-group"] * n,
        "topic": ["orders"] * n,
        "partition": [p for _ in runs for p in range(partitions)],
        "sink_count": offsets,
        "sink_distinct": offsets,
        "sink_min_offset": [0] * n,
        "sink_max_offset": offsets,
        "last_checkpoint_id": offsets,
        "last_checkpoint_offset": offsets,
        "last_committed_offset": offsets,
        "last_commit_time": [TODAY] * n,
        "commit_lag_offsets": [0] * n,
        "commit_lag_seconds": [0] * n,
        "findings_by_type": ['{"SKIPPED_COMMIT": 1}'] * n,
    }
    return pa.Table.from_pydict(columns, schema=to_arrow_schema(PARTITION_SUMMARY_SCHEMA))


def generate(path: str, days: int, per_day: int, partitions: int) -> tuple[int, list[str]]:
    """The table at ``path``; its row count and today's run ids."""
    from deltalake import DeltaTable, write_deltalake

    history = [r for d in range(days - 1, 0, -1) for r in run_ids(TODAY - timedelta(days=d), per_day)]
    delta_rows.ensure_table(None, path, PARTITION_SUMMARY_SCHEMA)
    if history:
        write_deltalake(path, summary_table(history, partitions), mode="append")
    DeltaTable(path).create_checkpoint()  # the nightly maintenance's, after its compaction
    today = run_ids(TODAY, per_day)
    table = DeltaTable(path)
    for run in today:  # one commit per run, as reconcile appends it
        write_deltalake(table, summary_table([run], partitions), mode="append")
    return (len(history) + len(today)) * partitions, today


def whole_table(path: str) -> pa.Table | None:
    """The report's read before it picked the run: every row and column."""
    data = delta_rows.dataset(None, path)
    return None if data is None else data.to_table()


def measure(read: Callable[[], pa.Table | None]) -> tuple[float, int]:
    started = time.perf_counter()
    table = read()
    return time.perf_counter() - started, 0 if table is None else table.num_rows


def files_opened(path: str, run: str | None) -> int:
    where = None if run is None else f"\"reconcile_run_id\" = '{run}'"
    data = delta_rows.dataset(None, path, where)
    return 0 if data is None else len(data.files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs-per-day", type=int, default=1440)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write the table (default: a temp dir)"
    )
    args = parser.parse_args(argv)

    base = args.dir or Path(tempfile.mkdtemp(prefix="bench-summary-"))
    path = str(base / "partition_summary")
    started = time.perf_counter()
    rows, today = generate(path, args.days, args.runs_per_day, args.partitions)
    print(
        f"partition_summary: {rows:,d} rows ({args.days} days x {args.runs_per_day} runs x "
        f"{args.partitions} partitions), {files_opened(path, None)} files; "
        f"written in {time.perf_counter() - started:.1f}s at {path}"
    )
    summaries = open_handle("partition_summary", path, None)
    reads: dict[str, tuple[str | None, Callable[[], pa.Table | None]]] = {
        "whole table (before)": (None, lambda: whole_table(path)),
        "newest watch run": (today[-1], lambda: run_summary(summaries, today[-1])),
        "today's nightly run": (today[0], lambda: run_summary(summaries, today[0])),
    }
    seconds: dict[str, list[float]] = {name: [] for name in reads}
    counts: dict[str, int] = {}
    for n in range(args.repeat):
        order = list(reads) if n % 2 == 0 else list(reversed(reads))
        for name in order:
            took, counts[name] = measure(reads[name][1])
            seconds[name].append(took)
    base_median = statistics.median(seconds["whole table (before)"])
    for name, (run, _) in reads.items():
        median = statistics.median(seconds[name])
        print(
            f"  {name:<22} rows {counts[name]:>9,d}  files {files_opened(path, run):>5,d}  "
            f"median {median:8.3f}s (min {min(seconds[name]):.3f}, max {max(seconds[name]):.3f})  "
            f"ratio to whole {median / base_median:.3f}"
        )
    if args.dir is None:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
