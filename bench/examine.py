"""Benchmark: the sink examination of `reconcile` on each engine, against a bare scan of the sink.

    .venv/bin/python -m bench.examine --rows 10000000 --partitions 8 --repeat 3

The sink, ledger and group commits are ``bench.reconcile.generate``'s (shared with it under
--dir): partition 1 lacks 10 offsets and partition 2 holds 100 twice, so the fingerprints leave
those two partitions, 2 x rows / partitions rows, to be examined per bucket. Each repetition
measures a bare scan of the sink's coordinates (``bench.reconcile.baseline``), then
``examine_sink`` over the window's ranges with the examination on the driver and forced onto Spark
(``driver_max_rows`` 0), in alternating order. Printed per route: the whole sink examination (the
fingerprint scan included), the per-bucket step alone (from its log line), and the examination's
ratio to the scan of the same repetition; medians with min and max. Both routes must find the same
gaps, duplicates and statistics, which the bench checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.config import PathsConfig, ReconcileConfig, load_config
from app.reconcile import findings as rc
from app.reconcile.inputs import match_rules, open_ledger_audit
from app.reconcile.sink.coordinates import (
    SinkOutcome,
    SinkReader,
    _rows_to_ranges,
    examine_sink,
    sink_columns,
)
from app.runtime.session import spark_session
from app.storage import files
from app.storage.handles import AuditTables
from bench.reconcile import baseline, generate

ROUTES = {"driver": 1 << 62, "spark": 0}  # driver_max_rows that picks each route


class StepLog(logging.Handler):
    """The rows and seconds of the per-bucket step, from the line examine_sink logs for it
    (arguments: job, partitions, rows, route, seconds)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.rows = 0
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "examined per bucket" in str(record.msg) and isinstance(record.args, tuple):
            rows, seconds = record.args[2], record.args[-1]
            if isinstance(rows, int) and isinstance(seconds, float):
                self.rows = rows
                self.seconds.append(seconds)


def summary(outcome: SinkOutcome) -> tuple[Any, ...]:
    return (
        sorted((r.partition, s, e) for r, s, e in outcome.gaps),
        sorted(repr(dataclasses.asdict(f)) for f in outcome.rows),
        sorted(outcome.stats.items(), key=repr),
    )


def spread(label: str, values: list[float], unit: str = "s") -> str:
    return (
        f"  {label:34s} median {statistics.median(values):7.2f}{unit}  "
        f"min {min(values):7.2f}{unit}  max {max(values):7.2f}{unit}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--per-checkpoint", type=int, default=5_000, help="offsets per checkpoint and partition")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path("data/bench"))
    args = ap.parse_args(argv)

    root = args.dir / f"rows-{args.rows}-p{args.partitions}-c{args.per_checkpoint}"
    base = load_config("local", environ={})
    cfg = dataclasses.replace(
        base,
        paths=PathsConfig(data_dir=str(root), cache_dir=base.paths.cache_dir),
        reconcile=ReconcileConfig(confirm_gaps=False),
    )
    spark = spark_session(cfg)
    tables = AuditTables.from_config(cfg, spark)
    if not files.table_exists(spark, tables.sink.location):
        generate(spark, str(root), args.rows, args.partitions, args.per_checkpoint)
    window, rules = rc.AuditWindow(until=datetime.now(UTC)), match_rules(cfg.reconcile)
    audit = open_ledger_audit(tables, window, rules, [], [], cfg.reconcile.baseline_lookback_days)
    ranges = _rows_to_ranges(audit.coverage())
    audit.close()
    sink = SinkReader(spark.read.format("delta").load(tables.sink.location), sink_columns(cfg))
    steps = StepLog()
    logging.getLogger("app.reconcile.sink").addHandler(steps)
    logging.getLogger("app.reconcile.sink").setLevel(logging.INFO)

    baseline(spark, tables.sink.location)  # warm-up: JIT, Delta log, file listing cache
    for limit in ROUTES.values():
        examine_sink(spark, sink, ranges, None, limit)
    took: dict[str, list[float]] = {r: [] for r in ROUTES}
    step: dict[str, list[float]] = {r: [] for r in ROUTES}
    ratio: dict[str, list[float]] = {r: [] for r in ROUTES}
    found: dict[str, tuple[Any, ...]] = {}
    for i in range(args.repeat):
        scan = baseline(spark, tables.sink.location)
        order = list(ROUTES) if i % 2 == 0 else list(reversed(ROUTES))
        for route in order:
            steps.seconds.clear()
            started = time.monotonic()
            outcome = examine_sink(spark, sink, ranges, None, ROUTES[route])
            took[route].append(time.monotonic() - started)
            step[route].append(steps.seconds[-1] if steps.seconds else 0.0)
            ratio[route].append(took[route][-1] / scan)
            found[route] = summary(outcome)
        print(
            f"run {i + 1}: scan {scan:.1f}s, "
            + ", ".join(f"{r} {took[r][-1]:.1f}s (per bucket {step[r][-1]:.1f}s)" for r in order),
            flush=True,
        )
    print()
    print(
        f"input: {args.rows:,} sink rows in {args.partitions} partitions, "
        f"{steps.rows:,} of them examined per bucket; {args.repeat} runs"
    )
    for route in ROUTES:
        print(f"examination {route}")
        print(spread("sink examination", took[route]))
        print(spread("  of which per bucket", step[route]))
        print(spread("ratio to a bare scan", ratio[route], "x"))
    print(f"same gaps, duplicates and statistics on both routes: {found['driver'] == found['spark']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
