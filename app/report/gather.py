"""Reading for `offset-audit report`: the audit tables aggregated into the small rows the dashboard
shows, then rendered by ``app.report.render`` and written as one HTML file.

A table that does not exist yet (a fresh deployment, a command not run) is an empty section and a
note on the page, never an error. Only aggregates and the bounded findings list reach the driver.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from app.config import AppConfig
from app.contracts import vocabulary as vocab
from app.contracts.vocabulary import EVENT_CHECKPOINT_COMPLETED, SEVERITIES
from app.incidents.grouping import incident_order
from app.quality.checks import data_docs_dir, latest_reconcile_run, results_table_path
from app.report import render as rp
from app.storage.tables import read_delta, tables_from_config

log = logging.getLogger(__name__)

_FINDING_COLUMNS = (
    "finding_id", "finding_type", "severity", "status", "job_name", "group_id", "topic", "partition",
    "checkpoint_id", "run_id", "offset_start", "offset_end", "record_count", "detected_at", "evidence",
)  # fmt: skip


@dataclass(frozen=True)
class ReportTables:
    ledger: DataFrame | None
    findings: DataFrame | None
    partition_summary: DataFrame | None
    restarts: DataFrame | None
    validation_results: DataFrame | None
    incidents: DataFrame | None = None


def read_tables(spark: SparkSession, cfg: AppConfig) -> ReportTables:
    t = tables_from_config(cfg)
    return ReportTables(
        ledger=read_delta(spark, t.ledger),
        findings=read_delta(spark, t.findings),
        partition_summary=read_delta(spark, t.partition_summary),
        restarts=read_delta(spark, t.restarts),
        validation_results=read_delta(spark, results_table_path(cfg)),
        incidents=read_delta(spark, t.incidents),
    )


def _dicts(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def findings_by_day(findings: DataFrame) -> list[dict[str, Any]]:
    return _dicts(
        findings.groupBy(
            F.date_format("detected_at", "yyyy-MM-dd").alias("day"), "finding_type", "severity"
        ).agg(F.count(F.lit(1)).alias("count"))
    )


def open_findings(findings: DataFrame, limit: int) -> list[dict[str, Any]]:
    """Everything not judged benign, most severe and newest first, at most ``limit`` rows."""
    rank = F.array_position(F.array(*[F.lit(s) for s in SEVERITIES]), F.col("severity"))
    rows = (
        findings.where(F.col("status") != vocab.BENIGN)
        .orderBy(rank.asc(), F.col("detected_at").desc(), F.col("finding_id"))
        .select(*_FINDING_COLUMNS)
        .limit(limit)
    )
    return [r | {"detected_at": str(r["detected_at"])} for r in _dicts(rows)]


def top_incidents(incidents: DataFrame, limit: int) -> list[dict[str, Any]]:
    """Most severe first, then the most records lost or duplicated; at most ``limit``."""
    rows = _dicts(incidents)
    return sorted(rows, key=incident_order)[:limit]


def latest_summary(summary: DataFrame, reconcile_run_id: str | None) -> DataFrame:
    """One row per job/topic/partition: the given run's, else each partition's most advanced."""
    if reconcile_run_id is not None:
        return summary.where(F.col("reconcile_run_id") == reconcile_run_id)
    order = Window.partitionBy("job_name", "topic", "partition").orderBy(
        F.col("last_checkpoint_id").desc_nulls_last(), F.col("reconcile_run_id").desc()
    )
    return (
        summary.withColumn("_summary_rank", F.row_number().over(order))
        .where(F.col("_summary_rank") == 1)
        .drop("_summary_rank")
    )


def unresolved_gap_records(findings: DataFrame) -> dict[tuple[str, str, int], int]:
    rows = (
        findings.where((F.col("finding_type") == vocab.GAP) & (F.col("status") != vocab.BENIGN))
        .groupBy("job_name", "topic", "partition")
        .agg(F.sum("record_count").alias("missing"))
        .collect()
    )
    return {(r["job_name"], r["topic"], r["partition"]): int(r["missing"] or 0) for r in rows}


def checkpoint_commit_counts(ledger: DataFrame, findings: DataFrame | None) -> dict[str, tuple[int, int]]:
    """Per group: completed checkpoints (ledger) and, of those, the ones with a SKIPPED_COMMIT
    finding (distinct job/run/checkpoint), so the dashboard's skip rate counts exactly what the
    findings call a skipped commit: superseded, failed or never attempted alike."""
    checkpoint = F.struct("job_name", "run_id", "checkpoint_id")
    completed = (
        ledger.where(
            F.col("group_id").isNotNull()
            & F.col("checkpoint_id").isNotNull()
            & (F.col("event_type") == EVENT_CHECKPOINT_COMPLETED)
        )
        .groupBy("group_id")
        .agg(F.count_distinct(checkpoint).alias("c"))
        .collect()
    )
    skipped = (
        []
        if findings is None
        else findings.where(
            (F.col("finding_type") == "SKIPPED_COMMIT")
            & F.col("group_id").isNotNull()
            & F.col("checkpoint_id").isNotNull()
        )
        .groupBy("group_id")
        .agg(F.count_distinct(checkpoint).alias("s"))
        .collect()
    )
    skips = {r["group_id"]: int(r["s"]) for r in skipped}
    return {r["group_id"]: (int(r["c"]), skips.get(r["group_id"], 0)) for r in completed}


def group_lags(summary: DataFrame) -> list[dict[str, Any]]:
    return _dicts(
        summary.where(F.col("group_id").isNotNull())
        .groupBy("group_id")
        .agg(
            F.max("commit_lag_offsets").alias("lag_offsets"),
            F.max("commit_lag_seconds").alias("lag_seconds"),
        )
    )


def latest_checks(results: DataFrame) -> tuple[str | None, list[dict[str, Any]]]:
    latest = results.orderBy(F.col("evaluated_at").desc(), F.col("run_id").desc()).select("run_id").first()
    if latest is None:
        return None, []
    run_id = str(latest["run_id"])
    rows = _dicts(
        results.where(F.col("run_id") == run_id)
        .groupBy("suite")
        .agg(
            F.count(F.lit(1)).alias("evaluated"),
            F.sum(F.when(~F.col("success"), 1).otherwise(0)).alias("failed"),
        )
        .orderBy("suite")
    )
    return run_id, rows


def docs_href(docs_index: Path, report_path: Path) -> str | None:
    """A link that still works when the report and the docs are copied together: relative."""
    if not docs_index.is_file():
        return None
    return os.path.relpath(docs_index.resolve(), report_path.resolve().parent)


def gather(
    spark: SparkSession,
    cfg: AppConfig,
    run_id: str,
    output: Path,
    now: datetime | None = None,
    tables: ReportTables | None = None,
) -> rp.ReportData:
    t = tables or read_tables(spark, cfg)
    reconcile_run = latest_reconcile_run(spark, tables_from_config(cfg).runs)
    notes = [
        f"table {name} does not exist yet: its section is empty"
        for name, df in (
            ("findings", t.findings),
            ("partition_summary", t.partition_summary),
            ("restarts", t.restarts),
            ("ledger", t.ledger),
            ("validation_results", t.validation_results),
        )
        if df is None
    ]
    summary = None if t.partition_summary is None else latest_summary(t.partition_summary, reconcile_run)
    missing = {} if t.findings is None else unresolved_gap_records(t.findings)
    completeness = [] if summary is None else rp.completeness_rows(_dicts(summary), missing)
    lags = [] if summary is None else group_lags(summary)
    counts = {} if t.ledger is None else checkpoint_commit_counts(t.ledger, t.findings)
    check_run, checks = (None, []) if t.validation_results is None else latest_checks(t.validation_results)
    return rp.ReportData(
        title=cfg.report.title,
        generated_at=now or datetime.now(UTC),
        run_id=run_id,
        reconcile_run_id=reconcile_run,
        findings_by_day=[] if t.findings is None else findings_by_day(t.findings),
        groups=rp.group_rows(lags, counts),
        completeness=completeness,
        restarts=[] if t.restarts is None else rp.restart_rows(_dicts(t.restarts)),
        findings=[] if t.findings is None else open_findings(t.findings, cfg.report.max_findings),
        incidents=[]
        if t.incidents is None
        else rp.incident_rows(top_incidents(t.incidents, cfg.report.max_findings)),
        checks=checks,
        check_run_id=check_run,
        data_docs_href=docs_href(Path(data_docs_dir(cfg)) / "index.html", output),
        notes=notes,
    )


def report_path(cfg: AppConfig) -> Path:
    return Path(cfg.report.output or cfg.paths.under("report", "index.html"))


def build_report(
    spark: SparkSession, cfg: AppConfig, run_id: str, output: Path | None = None, now: datetime | None = None
) -> Path:
    """Gather, render and write the dashboard; returns the HTML file's path."""
    path = output or report_path(cfg)
    data = gather(spark, cfg, run_id, path, now)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rp.render_html(data), encoding="utf-8")
    log.info("report written to %s", path)
    return path
