"""The `completeness` table, written by every reconcile (the `reconcile` command, nightly, each watch
cycle): per audited job, topic, partition and event-time window, what the source holds and what
reached the sink (README "Completeness"; the pure rules are `app.reconcile.completeness.windows`).

Per job and partition, the windows not yet final are computed: from the earliest provisional
window stored (else the first after the last final one; a partition's first run from the window
holding ``now - completeness.lookback_hours``) up to the window holding the job's latest completed
offset. Their bounds become offsets by the broker's offsets-for-times lookup; where retention has
deleted the start of the log, by the sink's own timestamps. The sink is read for those offsets only
(a `coordinates` sink; its statistics per window by `app.reconcile.completeness.stats`); the offsets it
lacks below the last completed checkpoint are read back from the source by the GAP confirmation
(`app.kafka.gaps`), which tells lost data records from markers, aborted and compacted offsets (not
expected) and from what retention deleted (unverifiable). Rows are MERGEd by (job, topic,
partition, window_start); final windows are never computed again, so re-running yields the same
rows.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce
from typing import Any, Final

import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig
from app.contracts.findings import StoredFinding
from app.contracts.instants import instant
from app.contracts.vocabulary import (
    BATCH_NOT_IN_SINK,
    BATCH_SINK_MODES,
    RESTART_SKIP,
    SINK_COORDINATES,
    UNVERIFIABLE,
)
from app.errors import ConfigError
from app.kafka.gaps import GapConfirmer, PartitionKey, SuspectedGap
from app.kafka.times import SourceTimes
from app.reconcile.completeness import windows as cw
from app.reconcile.completeness.stats import StatsPlan, window_stats, window_stats_by_spark
from app.reconcile.ledger import audit as la
from app.reconcile.sink.coordinates import SinkColumns, sink_columns
from app.routes import DRIVER, examine_route, examine_tasks
from app.storage.handles import FORMAT_NAMES, AuditTables

log = logging.getLogger(__name__)

# Below this many partitions the sink filter names each one; above, a box per topic (as SinkReader).
EXACT_FILTER_MAX_PARTITIONS: Final = 16

Cell = tuple[PartitionKey, datetime]  # (topic, partition), window start


@dataclass(frozen=True)
class CompletenessPass:
    """What the computation works with: the reconcile pass's ledger, confirmer and clock."""

    spark: SparkSession
    cfg: AppConfig
    tables: AuditTables
    audit: la.LedgerAudit
    run_id: str
    now: datetime
    confirmer: GapConfirmer | None
    times: SourceTimes
    findings: Sequence[StoredFinding] = ()  # this run's, not stored yet: they win over stored ones


@dataclass
class _Job:
    """One job's windows, facts and what its sink mode knows, gathered before any verdict."""

    name: str
    mode: str
    facts: dict[Cell, cw.WindowFacts] = field(default_factory=dict)
    sink: dict[Cell, cw.SinkWindow] = field(default_factory=dict)
    to_confirm: dict[Cell, list[cw.Range]] = field(default_factory=dict)
    lost_batches: dict[PartitionKey, list[cw.Range]] = field(default_factory=dict)
    unverifiable_batches: dict[PartitionKey, list[cw.Range]] = field(default_factory=dict)
    skipped: dict[PartitionKey, list[cw.Range]] = field(default_factory=dict)  # no run read them


def completeness_rows(p: CompletenessPass) -> list[dict[str, Any]]:
    """The rows of the windows not yet final of every job the ledger read holds, computed before
    reconcile writes anything (`store_completeness` writes them after its findings)."""
    started = time.monotonic()
    checkpoints = _checkpoints(p.audit)
    if not checkpoints:
        return []
    stored = _stored(p, sorted({job for job, _ in checkpoints}))
    late = cw.lateness(p.cfg.completeness, p.cfg.stream.trigger_interval)
    restored: dict[tuple[str, PartitionKey], int] = {}
    for (job, _run, topic, partition), offset in p.audit.restored_offsets().items():
        key = (job, (topic, partition))
        restored[key] = min(offset, restored.get(key, offset))
    jobs: list[_Job] = []
    by_job: dict[str, dict[PartitionKey, list[tuple[int, datetime]]]] = defaultdict(dict)
    for (job, tp), cks in checkpoints.items():
        by_job[job][tp] = cks
    for job, parts in sorted(by_job.items()):
        plan = _windows(p, job, parts, stored, restored, late)
        if plan.facts:
            jobs.append(plan)
    rows = _rows(p, jobs)
    log.info(
        "completeness: %d window(s) of %d job(s) computed (%d final) in %.1fs",
        len(rows),
        len(jobs),
        sum(1 for r in rows if r["final"]),
        time.monotonic() - started,
    )
    return rows


def store_completeness(tables: AuditTables, rows: Sequence[Mapping[str, Any]]) -> int:
    """MERGEs the rows by (job, topic, partition, window_start) in one Delta commit; returns how
    many. Only windows not yet final are ever computed, so a final row is never rewritten."""
    tables.completeness.merge(rows)
    return len(rows)


def _checkpoints(audit: la.LedgerAudit) -> dict[tuple[str, PartitionKey], list[tuple[int, datetime]]]:
    """(job, (topic, partition)) -> (offset, completed_at) of every completed checkpoint read."""
    out: dict[tuple[str, PartitionKey], list[tuple[int, datetime]]] = defaultdict(list)
    for c in audit.checkpoints():
        if c["offset"] is None or c["topic"] is None or c["partition"] is None or c["completed_at"] is None:
            continue
        out[(str(c["job_name"]), (str(c["topic"]), int(c["partition"])))].append(
            (int(c["offset"]), instant(c["completed_at"]))
        )
    return dict(out)


def _stored(p: CompletenessPass, jobs: Sequence[str]) -> dict[tuple[str, PartitionKey], dict[datetime, bool]]:
    """(job, partition) -> {window start: final} of the rows already in the table."""
    cols = ["job_name", "topic", "partition", "window_start", "final"]
    table = p.tables.completeness.rows(pc.field("job_name").isin(list(jobs)), columns=cols)
    out: dict[tuple[str, PartitionKey], dict[datetime, bool]] = defaultdict(dict)
    for r in [] if table is None else table.to_pylist():
        out[(r["job_name"], (r["topic"], r["partition"]))][instant(r["window_start"])] = bool(r["final"])
    return out


def _windows(
    p: CompletenessPass,
    job: str,
    parts: Mapping[PartitionKey, list[tuple[int, datetime]]],
    stored: Mapping[tuple[str, PartitionKey], Mapping[datetime, bool]],
    restored: Mapping[tuple[str, PartitionKey], int],
    late: timedelta,
) -> _Job:
    """The job's windows to compute, each with its offsets, and what its sink holds of them."""
    c = p.cfg.completeness
    plan = _Job(job, p.cfg.reconcile.sink_mode_for(job))
    first_run_from = p.now - timedelta(hours=c.lookback_hours)
    wanted = {
        tp: cw.windows_to_compute(stored.get((job, tp), {}), first_run_from, p.now, c.window_minutes)
        for tp in parts
    }
    tps = sorted(tp for tp, ws in wanted.items() if ws)
    if not tps:
        return plan
    times = sorted({t for tp in tps for w in wanted[tp] for t in (w.start, w.end)})
    bounds = p.times.bounds(tps)
    found = p.times.offsets_at(tps, times)
    sink_df = _sink(p, job) if plan.mode == SINK_COORDINATES else None
    first_start = min(w.start for tp in tps for w in wanted[tp])
    sink_starts = _sink_starts(p, sink_df, bounds, first_start) if sink_df is not None else {}
    for tp in tps:
        low, high = bounds[tp]
        checkpoint = max(offset for offset, _ in parts[tp])
        job_lo = restored.get((job, tp), min(offset for offset, _ in parts[tp]))

        def at(t: datetime, tp: PartitionKey = tp, low: int = low, high: int = high) -> int:
            broker = cw.resolved_offset(found[t][tp], high)
            return cw.bound_at(t, broker, low, sink_starts.get(tp, []))

        leading = not stored.get((job, tp))  # a first run: no window of the partition stored yet
        for w in wanted[tp]:
            lo, hi = max(at(w.start), job_lo), at(w.end)
            if hi <= job_lo or (leading and lo >= hi):
                continue  # before the job's first offset (or the source's first record): not the job's
            if lo >= checkpoint:
                continue  # after the window holding the job's latest completed offset: its turn comes
            leading = False
            facts = cw.WindowFacts(w, (lo, max(lo, hi)), checkpoint, cw.is_closed(w, late, p.now))
            plan.facts[(tp, w.start)] = facts
    if plan.mode == SINK_COORDINATES and sink_df is not None:
        plan.sink = _sink_windows(p, sink_df, plan.facts, parts)
    if plan.mode in BATCH_SINK_MODES:
        plan.lost_batches, plan.unverifiable_batches = _batches_not_in_sink(p, job)
    if plan.mode != SINK_COORDINATES:
        # A coordinates sink lacks the skipped offsets, which its missing ranges already hold.
        plan.skipped = _skipped(p, job)
    for cell, facts in plan.facts.items():
        tp = cell[0]
        if plan.mode == SINK_COORDINATES:
            sink = plan.sink.get(cell, cw.SinkWindow())
            missing = cw.missing_ranges(facts.offsets, sink.lowest, sink.highest, sink.holes)
            plan.to_confirm[cell] = cw.clip(missing, facts.judged)
        else:
            never_written = [*plan.lost_batches.get(tp, []), *plan.skipped.get(tp, [])]
            plan.to_confirm[cell] = cw.clip(never_written, facts.judged)
    return plan


def _sink(p: CompletenessPass, job: str) -> DataFrame:
    sink = p.tables.sink_for(job)
    df = sink.scan()
    if df is None:
        # Not an empty sink: the audit cannot see, so it claims nothing (CONTRACTS.md section 5).
        kind = FORMAT_NAMES[sink.table_format]
        where = f"no {kind} table at {sink.location} (the sink of job {job}); nothing was written"
        raise ConfigError(p.tables.sink_key_for(job), where)
    return df


def _box(cols: SinkColumns, ranges: Mapping[PartitionKey, cw.Range]) -> Column:
    """The sink filter on its own coordinate columns (Delta skips files by their statistics)."""

    def within(term: Column, lo: int, hi: int) -> Column:
        return term & (F.col(cols.offset) >= F.lit(lo)) & (F.col(cols.offset) < F.lit(hi))

    if len(ranges) <= EXACT_FILTER_MAX_PARTITIONS:
        terms = [
            within((F.col(cols.topic) == F.lit(t)) & (F.col(cols.partition) == F.lit(part)), lo, hi)
            for (t, part), (lo, hi) in ranges.items()
        ]
    else:
        by_topic: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for (t, part), (lo, hi) in ranges.items():
            by_topic[t].append((part, lo, hi))
        terms = [
            within(
                (F.col(cols.topic) == F.lit(t)) & F.col(cols.partition).isin(sorted({x for x, _, _ in v})),
                min(lo for _, lo, _ in v),
                max(hi for _, _, hi in v),
            )
            for t, v in by_topic.items()
        ]
    return reduce(lambda a, b: a | b, terms)


def _time_column(p: CompletenessPass, df: DataFrame) -> Column:
    name = p.cfg.reconcile.sink_timestamp_column
    return (F.col(name) if name in df.columns else F.lit(None)).cast("timestamp")


def _sink_starts(
    p: CompletenessPass, df: DataFrame, bounds: Mapping[PartitionKey, tuple[int, int]], first: datetime
) -> dict[PartitionKey, list[tuple[datetime, int]]]:
    """Where retention has deleted the start of a partition's log: per window from ``first`` on, the
    lowest offset the sink holds below the log start with a timestamp in it (the sink's timestamps
    bound what the source no longer can)."""
    gone = {tp: (0, low) for tp, (low, _) in bounds.items() if low > 0}
    name = p.cfg.reconcile.sink_timestamp_column
    if not gone or name not in df.columns:
        return {}
    cols = sink_columns(p.cfg)
    width_ms = p.cfg.completeness.window_minutes * 60_000
    ts = F.unix_millis(_time_column(p, df))
    rows = (
        df.filter(_box(cols, gone))
        .filter(ts >= F.lit(int(first.timestamp() * 1000)))
        .groupBy(
            F.col(cols.topic).cast("string").alias("_topic"),
            F.col(cols.partition).cast("int").alias("_partition"),
            F.floor(ts / F.lit(width_ms)).alias("_bucket"),
        )
        .agg(F.min(F.col(cols.offset).cast("long")).alias("_lowest"))
        .collect()
    )
    out: dict[PartitionKey, list[tuple[datetime, int]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["_topic"], r["_partition"], r["_bucket"])):
        start = cw.EPOCH + timedelta(milliseconds=int(r["_bucket"]) * width_ms)
        out[(r["_topic"], r["_partition"])].append((start, int(r["_lowest"])))
    return dict(out)


def _sink_windows(
    p: CompletenessPass,
    df: DataFrame,
    facts: Mapping[Cell, cw.WindowFacts],
    parts: Mapping[PartitionKey, list[tuple[int, datetime]]],
) -> dict[Cell, cw.SinkWindow]:
    """The sink's rows of the windows' offsets, read once through its coordinate filters, and the
    statistics of each window (`app.reconcile.completeness.stats`) on the engine `routes.examine_route`
    names for that many offsets."""
    cells = [(cell, f) for cell, f in facts.items() if f.offsets[1] > f.offsets[0]]
    if not cells:
        return {}
    spark, cols = p.spark, sink_columns(p.cfg)
    win = spark.createDataFrame(
        [(i, t, part, f.offsets[0], f.offsets[1]) for i, (((t, part), _), f) in enumerate(cells)],
        "_w int, _w_topic string, _w_partition int, _w_lo long, _w_hi long",
    )
    spans: dict[PartitionKey, cw.Range] = {}
    for (tp, _), f in cells:
        lo, hi = spans.get(tp, f.offsets)
        spans[tp] = (min(lo, f.offsets[0]), max(hi, f.offsets[1]))
    sink = df.filter(_box(cols, spans)).select(
        F.col(cols.topic).cast("string").alias("_topic"),
        F.col(cols.partition).cast("int").alias("_partition"),
        F.col(cols.offset).cast("long").alias("_offset"),
        _time_column(p, df).alias("_ts"),
    )
    inside = (
        (F.col("_topic") == F.col("_w_topic"))
        & (F.col("_partition") == F.col("_w_partition"))
        & (F.col("_offset") >= F.col("_w_lo"))
        & (F.col("_offset") < F.col("_w_hi"))
    )
    rows = sink.join(F.broadcast(win), on=inside, how="inner").select(
        F.col("_w"), F.col("_offset"), F.unix_millis(F.col("_ts")).alias("_ts_ms")
    )
    passed = {
        tp: tuple((lo, hi, int(at.timestamp() * 1000)) for lo, hi, at in cw.checkpoint_intervals(cks))
        for tp, cks in parts.items()
    }
    plans = [StatsPlan(f.judged[1], passed[tp]) for (tp, _), f in cells]
    size = sum(f.offsets[1] - f.offsets[0] for _, f in cells)
    if examine_route(size) == DRIVER:
        stats = window_stats(rows.toArrow(), plans)
    else:
        tasks = examine_tasks(size, spark.sparkContext.defaultParallelism)
        stats = window_stats_by_spark(rows, plans, tasks).toArrow()
    out: dict[Cell, cw.SinkWindow] = {}
    for r in stats.to_pylist():
        out[cells[int(r["w"])][0]] = cw.SinkWindow(
            landed=int(r["landed"]),
            rows=int(r["rows"]),
            landed_pending=int(r["landed_pending"]),
            latency_p50_ms=r["p50"],
            latency_p95_ms=r["p95"],
            lowest=int(r["lowest"]),
            highest=int(r["highest"]),
            holes=tuple((int(h["s"]), int(h["e"])) for h in r["holes"]),
        )
    return out


def _batches_not_in_sink(
    p: CompletenessPass, job: str
) -> tuple[dict[PartitionKey, list[cw.Range]], dict[PartitionKey, list[cw.Range]]]:
    """The offsets of the job's batches that never reached its sink (the BATCH_NOT_IN_SINK findings
    stored, this run's included): confirmed, and beyond the sink's log retention (unverifiable)."""
    lost: dict[PartitionKey, list[cw.Range]] = defaultdict(list)
    gone: dict[PartitionKey, list[cw.Range]] = defaultdict(list)
    for r in _ranges_found(p, job, BATCH_NOT_IN_SINK):
        into = gone if r["status"] == UNVERIFIABLE else lost
        into[(r["topic"], r["partition"])].append((int(r["offset_start"]), int(r["offset_end"])))
    return dict(lost), dict(gone)


def _skipped(p: CompletenessPass, job: str) -> dict[PartitionKey, list[cw.Range]]:
    """The offsets no run of the job ever read: the ranges of its RESTART_SKIP findings (stored,
    this run's included), which are read back from the source whatever the sink mode."""
    out: dict[PartitionKey, list[cw.Range]] = defaultdict(list)
    for r in _ranges_found(p, job, RESTART_SKIP):
        out[(r["topic"], r["partition"])].append((int(r["offset_start"]), int(r["offset_end"])))
    return dict(out)


def _ranges_found(p: CompletenessPass, job: str, finding_type: str) -> list[dict[str, Any]]:
    """The findings of ``finding_type`` of ``job`` with a partition and a range, stored or this
    run's (which win: they are not stored yet), one per finding id."""
    cols = [
        "finding_id",
        "job_name",
        "finding_type",
        "status",
        "topic",
        "partition",
        "offset_start",
        "offset_end",
    ]
    where = (pc.field("job_name") == job) & (pc.field("finding_type") == finding_type)
    table = p.tables.findings.rows(where, columns=cols)
    found = {r["finding_id"]: r for r in ([] if table is None else table.to_pylist())}
    for f in p.findings:
        if f.job_name == job and f.finding_type == finding_type:
            found[f.finding_id] = {c: getattr(f, c) for c in cols}
    return [
        r
        for r in found.values()
        if not (
            r["topic"] is None
            or r["partition"] is None
            or r["offset_start"] is None
            or r["offset_end"] is None
        )
    ]


def _verdicts(p: CompletenessPass, jobs: Sequence[_Job]) -> dict[tuple[str, Cell], cw.Verdicts]:
    """The missing offsets of every window, read back from the source at once (`app.kafka.gaps`)."""
    asked = [(job.name, cell, r) for job in jobs for cell, ranges in job.to_confirm.items() for r in ranges]
    answers: list[Mapping[str, Any] | None] = [None] * len(asked)
    if asked and p.confirmer is not None:
        gaps = [SuspectedGap(tp[0], tp[1], s, e) for _, (tp, _), (s, e) in asked]
        answers = list(p.confirmer(gaps))
    by_cell: dict[tuple[str, Cell], list[tuple[cw.Range, Mapping[str, Any] | None]]] = defaultdict(list)
    for (job, cell, r), answer in zip(asked, answers, strict=True):
        by_cell[(job, cell)].append((r, answer))
    return {
        key: cw.verdict_counts([r for r, _ in pairs], [a for _, a in pairs]) for key, pairs in by_cell.items()
    }


def _rows(p: CompletenessPass, jobs: Sequence[_Job]) -> list[dict[str, Any]]:
    verdicts = _verdicts(p, jobs)
    rows: list[dict[str, Any]] = []
    for job in jobs:
        for cell, facts in sorted(job.facts.items()):
            tp = cell[0]
            judged = verdicts.get((job.name, cell), cw.Verdicts())
            if job.mode == SINK_COORDINATES:
                counts = cw.coordinates_counts(facts, job.sink.get(cell, cw.SinkWindow()), judged)
            elif job.mode in BATCH_SINK_MODES:
                counts = cw.batches_counts(
                    facts,
                    [*job.lost_batches.get(tp, []), *job.skipped.get(tp, [])],
                    job.unverifiable_batches.get(tp, []),
                    judged,
                )
            else:
                counts = cw.offsets_counts(facts, judged)
            rows.append(_row(p, job, cell, facts, counts))
    return rows


def _row(
    p: CompletenessPass, job: _Job, cell: Cell, facts: cw.WindowFacts, counts: cw.Counts
) -> dict[str, Any]:
    (topic, partition), (lo, hi) = cell[0], facts.offsets
    return {
        "job_name": job.name,
        "topic": topic,
        "partition": partition,
        "window_start": facts.window.start,
        "window_end": facts.window.end,
        "offset_start": lo,
        "offset_end": hi,
        "sink_mode": job.mode,
        "expected": counts.expected,
        "landed": counts.landed,
        "lost": counts.lost,
        "unverifiable": counts.unverifiable,
        "duplicated": counts.duplicated,
        "pending": counts.pending,
        "offsets_in_sink_batches": counts.offsets_in_sink_batches,
        "completeness": counts.completeness,
        "latency_p50_ms": counts.latency_p50_ms,
        "latency_p95_ms": counts.latency_p95_ms,
        "final": counts.final,
        "computed_at": p.now,
        "reconcile_run_id": p.run_id,
    }
