"""Benchmark: attribution of an Iceberg sink's snapshots to a job's batches (`iceberg_snapshots`) on
the driver, against a bare read of the table's metadata file.

    .venv/bin/python -m bench.iceberg_attribution --snapshots 1000,10000 --repeat 5

Writes (no JVM) an Iceberg table's directory whose current metadata file holds ``--snapshots``
snapshots of one streaming query, one a minute (10,000 is a week of one-minute batches), each with
the summary Iceberg's Spark streaming sink writes (query id, epoch, the counts), and the query's
completed batches over ``--partitions`` partitions, as the ledger audit hands them over. Then, per
size, in alternating order:

- the baseline: ``json.loads`` of the metadata file (what any reader of the snapshots pays);
- a first run: the sink's log read through its handle (list ``metadata/``, read, parse) and every
  batch attributed (the window covers the whole history);
- an incremental run, as a reconcile after the previous one reads and judges: the same file read and
  parsed, the summaries kept only from the window's start less ``--lookback-hours``
  (`reconcile.baseline_lookback_days`, in hours here), and only the batches of the last
  ``--window-minutes`` judged against those snapshots.

Printed: the input size (snapshots, metadata bytes, batches), medians with min and max, the ratio
to the baseline, the findings (none: every batch is in its snapshot), and the growth from the
smallest size to the largest.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from app.reconcile.findings import AuditWindow
from app.reconcile.sink.batches import CompletedBatch, batches_of
from app.reconcile.sink.snapshots import snapshot_findings
from app.storage.handles import open_handle

QUERY = "6f1c2a4e-0000-4000-8000-000000000001"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
EVERY = timedelta(minutes=1)


def snapshot(i: int) -> dict[str, Any]:
    """Batch ``i``'s snapshot as Iceberg's streaming sink writes it."""
    summary = {
        "operation": "append",
        "spark.app.id": "local-1",
        "spark.sql.streaming.queryId": QUERY,
        "spark.sql.streaming.epochId": str(i),
        "added-data-files": "2",
        "added-records": "60",
        "added-files-size": "2400",
        "changed-partition-count": "1",
        "total-records": str(60 * (i + 1)),
        "total-files-size": str(2400 * (i + 1)),
        "total-data-files": str(2 * (i + 1)),
        "total-delete-files": "0",
        "total-position-deletes": "0",
        "total-equality-deletes": "0",
        "engine-version": "4.1.3",
        "engine-name": "spark",
        "iceberg-version": "Apache Iceberg 1.12.0",
    }
    return {
        "sequence-number": i + 1,
        "snapshot-id": 1_000_000 + i,
        "parent-snapshot-id": 1_000_000 + i - 1 if i else None,
        "timestamp-ms": int((T0 + i * EVERY + timedelta(seconds=20)).timestamp() * 1000),
        "summary": summary,
        "manifest-list": f"/wh/t/metadata/snap-{1_000_000 + i}.avro",
        "schema-id": 0,
    }


def write_table(directory: Path, snapshots: int) -> int:
    """A table directory whose current metadata file holds ``snapshots`` snapshots; its size."""
    (directory / "metadata").mkdir(parents=True)
    snaps = [snapshot(i) for i in range(snapshots)]
    doc = {
        "format-version": 2,
        "table-uuid": "00000000-0000-4000-8000-000000000000",
        "location": str(directory),
        "last-sequence-number": snapshots,
        "last-updated-ms": snaps[-1]["timestamp-ms"],
        "current-snapshot-id": snaps[-1]["snapshot-id"],
        "snapshots": snaps,
        "snapshot-log": [{"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]} for s in snaps],
        "metadata-log": [],
    }
    text = json.dumps(doc)
    (directory / "metadata" / f"v{snapshots}.metadata.json").write_text(text)
    (directory / "metadata" / "version-hint.text").write_text(str(snapshots))
    return len(text)


def completed_batches(snapshots: int, partitions: int) -> list[CompletedBatch]:
    """The query's completed batches, 30 records a partition each, as `batches_of` builds them."""
    rows = [
        {
            "job_name": "bench-job",
            "group_id": "grp",
            "run_id": "run-1",
            "checkpoint_id": i,
            "topic": "orders",
            "partition": p,
            "offset": 30 * (i + 1),
            "completed_at": T0 + i * EVERY + timedelta(seconds=30),
        }
        for i in range(snapshots)
        for p in range(partitions)
    ]
    return batches_of(rows, {"run-1": QUERY}, {("run-1", "orders", p): 0 for p in range(partitions)})


def spread(label: str, values: list[float], unit: str = "s") -> str:
    return (
        f"  {label:34s} median {statistics.median(values):8.3f}{unit}  "
        f"(min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"
    )


def measure(directory: Path, size: int, args: argparse.Namespace) -> dict[str, float]:
    metadata_bytes = write_table(directory, size)
    batches = completed_batches(size, args.partitions)
    end = T0 + size * EVERY
    window_all = AuditWindow(until=end + EVERY, since=None)
    window_new = AuditWindow(until=end + EVERY, since=end - timedelta(minutes=args.window_minutes))
    since = window_new.since - timedelta(hours=args.lookback_hours) if window_new.since else None
    recent = [b for b in batches if since is None or b.completed_at >= since]
    handle = open_handle("sink", str(directory), None)
    metadata_file = directory / "metadata" / f"v{size}.metadata.json"
    print(
        f"{size} snapshots ({metadata_bytes / 1e6:.1f} MB of metadata), {len(batches)} batches x "
        f"{args.partitions} partitions; incremental: {len(recent)} batches since {since:%Y-%m-%d %H:%M}"
    )

    def baseline() -> object:
        return json.loads(metadata_file.read_text())

    def first() -> object:
        log = handle.sink_log()
        assert log is not None
        return snapshot_findings(batches, log, window_all)

    def incremental() -> object:
        log = handle.sink_log(since)  # as reconcile reads it: the summaries from ``since`` on
        assert log is not None
        return snapshot_findings(recent, log, window_new, since)

    runs = {"bare read of the metadata": baseline, "first run": first, "incremental run": incremental}
    took: dict[str, list[float]] = {label: [] for label in runs}
    found: dict[str, object] = {}
    for i in range(args.repeat):
        order = list(runs) if i % 2 == 0 else list(reversed(runs))
        for label in order:
            began = time.perf_counter()
            found[label] = runs[label]()
            took[label].append(time.perf_counter() - began)
    for label, values in took.items():
        print(spread(label, values))
    base = took["bare read of the metadata"]
    for label in ("first run", "incremental run"):
        print(
            spread(f"ratio {label} / bare read", [a / b for a, b in zip(took[label], base, strict=True)], "x")
        )
    print(f"  findings: first run {len(found['first run'])}, incremental {len(found['incremental run'])}")  # type: ignore[arg-type]
    return {label: statistics.median(values) for label, values in took.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--snapshots", default="1000,10000", help="comma-separated table sizes")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--window-minutes", type=int, default=60)
    ap.add_argument("--lookback-hours", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=Path("data/bench/iceberg_attribution"))
    args = ap.parse_args()
    sizes = [int(s) for s in args.snapshots.split(",")]
    shutil.rmtree(args.dir, ignore_errors=True)
    medians = {size: measure(args.dir / str(size), size, args) for size in sizes}
    small, large = min(sizes), max(sizes)
    if small != large:
        print(f"growth from {small} to {large} snapshots ({large / small:.0f}x):")
        for label in medians[small]:
            print(f"  {label:34s} {medians[large][label] / medians[small][label]:6.1f}x")


if __name__ == "__main__":
    main()
