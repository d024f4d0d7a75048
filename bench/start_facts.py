"""Benchmark: what a start reads of its ledger, every retained day against the checkpoint's days.

    .venv/bin/python -m bench.start_facts --days 30 --rows-per-day 200000 --repeat 5

Writes (delta-rs, no JVM) a job's ledger of ``--days`` days, one file a day, ``--rows-per-day``
rows each: micro-batches every two seconds over ``--partitions`` partitions, each a snapshot and a
completion per partition and a commit requested and answered. A stand-in for the checkpoint holds
the last 100 batches (Spark's `minBatchesToRetain`), stamped with their events' times. Each
repetition times `LedgerWriter.facts()` over every day (the baseline, what a start read before)
and `facts(since, oldest)` as a start calls it now, in alternating order; printed: the input size,
medians with min and max, the ratio, and whether both answers agree on the retained batches.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql.pandas.types import to_arrow_schema

from app.contracts import vocabulary as vocab
from app.contracts.tables import LEDGER_SCHEMA
from app.stream.checkpoint import CheckpointFiles, ledger_since
from app.stream.ledger import LedgerWriter

JOB = "bench-job"
RETAINED = 100  # Spark's default minBatchesToRetain
TRIGGER = timedelta(seconds=2)
DAY1 = datetime(2026, 3, 1, tzinfo=UTC)


def batch_time(batch: int) -> datetime:
    return DAY1 + batch * TRIGGER


def day_rows(first_batch: int, batches: int, partitions: int, run_id: str) -> pa.Table:
    """The ledger rows of ``batches`` micro-batches from ``first_batch`` on."""
    cols: dict[str, list[object]] = {f.name: [] for f in LEDGER_SCHEMA.fields}

    def add(batch: int, event_type: str, partition: int | None, detail: str) -> None:
        when = batch_time(batch)
        offset = None if partition is None else 100 * batch
        row = {
            "job_name": JOB, "run_id": run_id, "engine": vocab.ENGINE_SPARK, "checkpoint_id": batch,
            "event_type": event_type, "event_time": when, "group_id": "grp",
            "topic": None if partition is None else "orders", "partition": partition,
            "offset": offset, "raw_offset": offset,
            "offset_semantics": "next", "detail": detail, "event_date": when.date(),
        }  # fmt: skip
        for name, value in row.items():
            cols[name].append(value)

    for batch in range(first_batch, first_batch + batches):
        for partition in range(partitions):
            add(batch, vocab.EVENT_CHECKPOINT_SNAPSHOT, partition, "{}")
            add(batch, vocab.EVENT_CHECKPOINT_COMPLETED, partition, "{}")
        attempt = f'{{"attempt": {batch}}}'
        add(batch, vocab.EVENT_COMMIT_REQUESTED, None, attempt)
        add(batch, vocab.EVENT_COMMIT_SUCCEEDED, None, attempt)
    return pa.table(cols, schema=to_arrow_schema(LEDGER_SCHEMA))


def generate(path: Path, days: int, rows_per_day: int, partitions: int) -> tuple[int, list[int]]:
    """The ledger at ``path``; returns (rows, the checkpoint's retained batch ids)."""
    per_batch = 2 * partitions + 2
    per_day = 24 * 3600 // int(TRIGGER.total_seconds())
    batches = max(1, min(per_day, rows_per_day // per_batch))
    ledger = LedgerWriter(None, str(path), JOB, "run-1")
    ledger.ensure()
    total = 0
    ids: list[int] = []
    for day in range(days):
        first = day * per_day  # the day's batches start at its midnight
        rows = day_rows(first, batches, partitions, "run-1")
        if day == 0:
            start = {f.name: None for f in LEDGER_SCHEMA.fields} | {
                "job_name": JOB, "run_id": "run-1", "engine": vocab.ENGINE_SPARK,
                "event_type": vocab.EVENT_RUN_STARTED, "event_time": DAY1, "detail": "{}",
                "event_date": DAY1.date(),
            }  # fmt: skip
            rows = pa.concat_tables([rows, pa.Table.from_pylist([start], schema=rows.schema)])
        write_deltalake(str(path), rows, mode="append")
        total += rows.num_rows
        ids = (ids + list(range(first, first + batches)))[-RETAINED:]
    return total, ids


class Files:
    """The checkpoint's files: each batch's written when its events say."""

    def written_at(self, log_name: str, batch_id: int) -> datetime:
        return batch_time(batch_id)


def spread(label: str, values: list[float], unit: str = "s") -> str:
    return (
        f"  {label:28s} median {statistics.median(values):8.3f}{unit}  "
        f"(min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--rows-per-day", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=Path("data/bench/start_facts"))
    args = ap.parse_args()

    shutil.rmtree(args.dir, ignore_errors=True)
    rows, kept = generate(args.dir, args.days, args.rows_per_day, args.partitions)
    oldest, last = kept[0], kept[-1]
    since = ledger_since(cast(CheckpointFiles, Files()), oldest)
    print(
        f"ledger: {rows} rows over {args.days} days, {args.partitions} partitions; "
        f"the checkpoint holds batches {oldest}..{last}"
    )
    print(f"bounded read from event_date {since}")

    ledger = LedgerWriter(None, str(args.dir), JOB, "run-2")
    took: dict[str, list[float]] = {"every day": [], "checkpoint's days": []}
    answers = {}
    for i in range(args.repeat):
        order = ["every day", "checkpoint's days"] if i % 2 == 0 else ["checkpoint's days", "every day"]
        for label in order:
            began = time.perf_counter()
            facts = ledger.facts() if label == "every day" else ledger.facts(since, oldest)
            took[label].append(time.perf_counter() - began)
            answers[label] = facts
    for label, values in took.items():
        print(spread(label, values))
    ratios = [a / b for a, b in zip(took["every day"], took["checkpoint's days"], strict=True)]
    print(spread("ratio every day / bounded", ratios, "x"))
    retained = set(kept)
    whole, bounded = answers["every day"], answers["checkpoint's days"]
    same = (
        whole.snapshot_ids & retained == bounded.snapshot_ids & retained
        and whole.completed_ids & retained == bounded.completed_ids & retained
        and whole.open_commit_attempts == bounded.open_commit_attempts
        and whole.last_run_id == bounded.last_run_id
    )
    print(f"same retained batches, open commits and last run: {same}")


if __name__ == "__main__":
    main()
