"""`forensics` end to end: the restarts of a window classified and stored, and the incident timeline
around a moment."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig
from app.contracts.vocabulary import SEVERITIES
from app.reconcile import findings as rc
from app.reconcile import forensics as fx
from app.reconcile.outputs import AuditRun, merge_restarts, read_incidents, record_run, resolve_scope
from app.reconcile.run import match_rules, open_ledger_audit
from app.reconcile.sink import SinkReader, observed_in_restart_ranges, sink_columns
from app.storage.tables import read_delta, tables_from_config


@dataclass
class ForensicsResult:
    run_id: str
    window: rc.AuditWindow
    jobs: list[str]
    restarts: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)


def run_forensics(spark: SparkSession, cfg: AppConfig, run: AuditRun) -> ForensicsResult:
    """Classify every run start in the window and MERGE them into ``restarts``.

    The RESTART_* findings of these restarts belong to ``reconcile`` alone (one owner per finding
    type), which judges the same restarts with the same functions."""
    r = cfg.reconcile
    scope = resolve_scope(spark, cfg, run, "forensics")
    tables, job_list, window, now, run_id = scope.tables, scope.jobs, scope.window, run.now, run.run_id
    rules = match_rules(r)
    result = ForensicsResult(run_id=run_id, window=window, jobs=job_list)
    audit = open_ledger_audit(spark, tables, window, rules, job_list, r.groups, r.baseline_lookback_days)
    try:
        restart_rows = audit.restarts()
    finally:
        audit.close()
    cols = sink_columns(cfg)
    observed: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for job in sorted({row["job_name"] for row in restart_rows}):
        df = read_delta(spark, tables.sink_for(job))
        if df is not None:
            job_restarts = [r for r in restart_rows if r["job_name"] == job]
            observed.update(observed_in_restart_ranges(spark, SinkReader(df, cols), job_restarts))
    table = fx.restarts_table(restart_rows, observed, run_id)
    merge_restarts(spark, tables.restarts, table)
    result.restarts = sorted(table, key=lambda row: (row["started_at"], row["topic"], row["partition"]))
    for row in result.restarts:
        key = (row["classification"], "")
        result.counts[key] = result.counts.get(key, 0) + 1
    record_run(spark, scope, run, "forensics", now)
    return result


def timeline(
    spark: SparkSession, cfg: AppConfig, *, job: str, at: datetime, around: timedelta
) -> list[dict[str, Any]]:
    """Ledger events, group commits, restarts and findings of ``job`` within ``around`` of ``at``."""
    tables = tables_from_config(cfg)
    lo, hi = at - around, at + around
    ledger = read_delta(spark, tables.ledger)
    if ledger is None:
        return []
    events = ledger.filter(
        (F.col("job_name") == job)
        & (F.col("event_date") >= F.lit(lo.date()))
        & (F.col("event_date") <= F.lit(hi.date()))
        & F.col("event_time").between(F.lit(lo), F.lit(hi))
    )
    ledger_rows = [r.asDict() for r in events.orderBy("event_time").limit(5000).collect()]
    groups = sorted({r["group_id"] for r in ledger_rows if r.get("group_id")})
    runs = sorted({r["run_id"] for r in ledger_rows})
    commit_rows = _rows(
        spark,
        tables.group_commits,
        F.col("group_id").isin(groups) & F.coalesce("commit_time", "log_time").between(F.lit(lo), F.lit(hi)),
        limit=5000 if groups else 0,
    )
    restart_rows = _rows(
        spark, tables.restarts, (F.col("job_name") == job) & F.col("started_at").between(F.lit(lo), F.lit(hi))
    )
    most_severe_first = F.array_position(F.array(*[F.lit(s) for s in SEVERITIES]), F.col("severity"))
    finding_rows = _rows(
        spark,
        tables.findings,
        (F.col("job_name") == job) & (F.col("run_id").isin(runs) | F.col("run_id").isNull()),
        order=most_severe_first,
        limit=50 if runs else 0,
    )
    incident_rows = [
        i
        for i in read_incidents(spark, cfg, jobs=[job])
        if set(i["run_ids"] or []) & set(runs)
        or (i["last_evidence_at"] is not None and lo <= i["last_evidence_at"] <= hi)
    ]
    return fx.timeline_entries(ledger_rows, commit_rows, restart_rows, finding_rows, incident_rows)


def _rows(
    spark: SparkSession, path: str, where: Column, order: Column | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """The rows of a table matching ``where`` (none when the table does not exist or ``limit`` is 0)."""
    df = read_delta(spark, path)
    if df is None or limit == 0:
        return []
    df = df.filter(where)
    if order is not None:
        df = df.orderBy(order)
    if limit is not None:
        df = df.limit(limit)
    return [r.asDict() for r in df.collect()]
