"""`forensics` end to end: the restarts of a window classified and stored, and the incident timeline
around a moment."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from app.config import AppConfig
from app.contracts.findings import StoredFinding
from app.contracts.vocabulary import COMMAND_FORENSICS, SEVERITIES, SINK_COORDINATES
from app.incidents.io import read_incidents
from app.reconcile import findings as rc
from app.reconcile.forensics import restarts as fx
from app.reconcile.forensics.observed import observed_in_restart_ranges
from app.reconcile.inputs import match_rules, open_ledger_audit
from app.reconcile.outputs import AuditRun, merge_restarts, record_run, resolve_scope
from app.reconcile.sink.coordinates import SinkReader, sink_columns
from app.storage.handles import AuditTables, TableHandle


@dataclass
class ForensicsResult:
    run_id: str
    window: rc.AuditWindow
    jobs: list[str]
    restarts: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)


def run_forensics(
    spark: SparkSession, cfg: AppConfig, run: AuditRun, tables: AuditTables | None = None
) -> ForensicsResult:
    """Classify every run start in the window and MERGE them into ``restarts``.

    The RESTART_* findings of these restarts belong to ``reconcile`` alone (one owner per finding
    type), which judges the same restarts with the same functions."""
    r = cfg.reconcile
    scope = resolve_scope(spark, cfg, run, COMMAND_FORENSICS, tables)
    tables, job_list, window, now, run_id = scope.tables, scope.jobs, scope.window, run.now, run.run_id
    rules = match_rules(r)
    result = ForensicsResult(run_id=run_id, window=window, jobs=job_list)
    audit = open_ledger_audit(
        tables, window, rules, job_list, r.groups, r.baseline_lookback_days, scope.ledger_version
    )
    try:
        restart_rows = audit.restarts()
    finally:
        audit.close()
    cols = sink_columns(cfg)
    observed: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for job in sorted({row["job_name"] for row in restart_rows}):
        if r.sink_mode_for(job) != SINK_COORDINATES:
            continue  # rows tell their offsets in a coordinates sink only
        df = tables.sink_for(job).scan()
        if df is not None:
            job_restarts = [r for r in restart_rows if r["job_name"] == job]
            observed.update(observed_in_restart_ranges(spark, SinkReader(df, cols), job_restarts))
    table = fx.restarts_table(restart_rows, observed, run_id)
    merge_restarts(tables.restarts, table)
    result.restarts = sorted(table, key=lambda row: (row["started_at"], row["topic"], row["partition"]))
    for row in result.restarts:
        key = (row["classification"], "")
        result.counts[key] = result.counts.get(key, 0) + 1
    record_run(scope, run, COMMAND_FORENSICS, now)
    return result


def timeline(tables: AuditTables, *, job: str, at: datetime, around: timedelta) -> list[dict[str, Any]]:
    """Ledger events, group commits, restarts and findings of ``job`` within ``around`` of ``at``.

    A few thousand rows at most, read on the driver through delta-rs (the ledger's day partitions
    prune its files): no Spark, so a person's `forensics --at` answers in about a second."""
    lo, hi = at - around, at + around
    first, last = _at(lo), _at(hi)
    in_window = (pc.field("event_time") >= first) & (pc.field("event_time") <= last)
    ledger_rows = _rows(
        tables.ledger,
        (pc.field("job_name") == job) & in_window,
        order=lambda r: r["event_time"],
        limit=5000,
        prune=(pc.field("event_date") >= lo.date()) & (pc.field("event_date") <= hi.date()),
    )
    groups = sorted({r["group_id"] for r in ledger_rows if r.get("group_id")})
    runs = sorted({r["run_id"] for r in ledger_rows})
    committed, logged = pc.field("commit_time"), pc.field("log_time")
    commit_rows = _rows(
        tables.group_commits,
        pc.field("group_id").isin(groups)
        & (
            ((committed >= first) & (committed <= last))
            | (committed.is_null() & (logged >= first) & (logged <= last))
        ),
        order=lambda r: r["commit_time"] or r["log_time"],
        limit=5000 if groups else 0,
    )
    restart_rows = _rows(
        tables.restarts,
        (pc.field("job_name") == job) & (pc.field("started_at") >= first) & (pc.field("started_at") <= last),
    )
    finding_rows = _rows(
        tables.findings,
        (pc.field("job_name") == job) & (pc.field("run_id").isin(runs) | pc.field("run_id").is_null()),
        order=lambda r: (_SEVERITY_RANK.get(r["severity"], len(SEVERITIES)), r["finding_id"]),
        limit=50 if runs else 0,
    )
    incidents = [
        i
        for i in read_incidents(tables.incidents, jobs=[job])
        if set(i.run_ids) & set(runs) or (i.last_evidence_at is not None and lo <= i.last_evidence_at <= hi)
    ]
    findings = [StoredFinding.from_row(r) for r in finding_rows]
    return fx.timeline_entries(ledger_rows, commit_rows, restart_rows, findings, incidents)


_SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}  # most severe first


def _at(instant: datetime) -> pa.Scalar:
    return pa.scalar(instant, pa.timestamp("us", tz="UTC"))


def _rows(
    table_: TableHandle,
    where: pc.Expression,
    order: Callable[[dict[str, Any]], Any] | None = None,
    limit: int | None = None,
    prune: pc.Expression | None = None,
) -> list[dict[str, Any]]:
    """The rows of a table matching ``where``, sorted by ``order``, the first ``limit`` of them
    (none when the table does not exist or ``limit`` is 0)."""
    table = None if limit == 0 else table_.rows(where, prune)
    if table is None:
        return []
    rows: list[dict[str, Any]] = table.to_pylist()
    if order is not None:
        rows.sort(key=order)
    return rows if limit is None else rows[:limit]
