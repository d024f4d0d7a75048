"""Reading for `offset-audit report`: the audit tables aggregated into the small rows the dashboard
shows, then rendered by ``app.report.render`` and written as one HTML file.

The tables are read on the driver by delta-rs into Arrow, in one pass each and only the columns
the page needs (of the ledger, its checkpoint completions alone), and aggregated by DuckDB: the
same numbers Spark computed in a dozen jobs, without a Spark job. The dashboard's rows are what
Spark's ``collect`` gave (timestamps as naive local times), so the page does not change.

A table that does not exist yet (a fresh deployment, a command not run) is an empty section and a
note on the page, never an error. Only aggregates and the bounded findings list reach Python.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.config import AppConfig
from app.contracts import vocabulary as vocab
from app.contracts.findings import parse_evidence, skipped_counts
from app.contracts.vocabulary import EVENT_CHECKPOINT_COMPLETED, SEVERITIES
from app.incidents.incident import StoredIncident, incident_order
from app.reconcile.completeness.reads import WINDOW_COLUMNS, recent_windows
from app.reconcile.outputs import latest_reconcile_run
from app.report import render as rp
from app.storage.handles import AuditTables, TableHandle
from app.storage.tables import data_docs_dir

log = logging.getLogger(__name__)

_FINDING_COLUMNS = (
    "finding_id", "finding_type", "severity", "status", "job_name", "group_id", "topic", "partition",
    "checkpoint_id", "run_id", "offset_start", "offset_end", "record_count", "detected_at", "evidence",
)  # fmt: skip
_CHECKPOINT_COLUMNS = ("event_type", "group_id", "job_name", "run_id", "checkpoint_id")


@dataclass(frozen=True)
class ReportTables:
    ledger: pa.Table | None  # the checkpoint completions of groups (``_CHECKPOINT_COLUMNS``)
    findings: pa.Table | None
    partition_summary: pa.Table | None  # the shown reconcile run's rows (``run_summary``)
    restarts: pa.Table | None
    validation_results: pa.Table | None
    incidents: pa.Table | None = None
    windows: pa.Table | None = None  # completeness rows of the recent windows (``recent_windows``)


def _read(
    table_: TableHandle,
    columns: Sequence[str] | None = None,
    where: pc.Expression | None = None,
) -> pa.Table | None:
    dataset = table_.dataset()
    if dataset is None:
        return None
    table: pa.Table = dataset.to_table(columns=None if columns is None else list(columns), filter=where)
    return table


def run_summary(partition_summary: TableHandle, reconcile_run: str | None) -> pa.Table | None:
    """The partition_summary rows the dashboard shows: ``reconcile_run``'s alone, else (no reconcile
    run succeeded yet) every row, for `latest_summary` to pick each partition's most advanced. A
    watch appends a run's rows every minute: the files whose statistics rule the run out are not
    opened (each run appends one; compacted history holds older, lower run ids of a watch)."""
    if reconcile_run is None:
        return _read(partition_summary)
    return partition_summary.rows_with("reconcile_run_id", reconcile_run)


def window_rows(windows: pa.Table) -> list[dict[str, Any]]:
    """The rows, windows as UTC text to the minute (the page names them as UTC)."""
    cols = ", ".join(f'"{c}"' for c in WINDOW_COLUMNS if c not in ("window_start", "window_end"))
    return _query(
        "SELECT strftime(window_start, '%Y-%m-%d %H:%M') AS window_start, "
        f"strftime(window_end, '%Y-%m-%d %H:%M') AS window_end, {cols} FROM windows",
        windows=windows,
    )


def read_tables(
    t: AuditTables, cfg: AppConfig, now: datetime | None = None, reconcile_run: str | None = None
) -> ReportTables:
    """The rows the report shows; of partition_summary, ``reconcile_run``'s (`run_summary`)."""
    since = (now or datetime.now(UTC)) - timedelta(hours=cfg.report.window_hours)
    completed = (
        (pc.field("event_type") == EVENT_CHECKPOINT_COMPLETED)
        & pc.field("group_id").is_valid()
        & pc.field("checkpoint_id").is_valid()
    )
    return ReportTables(
        ledger=_read(t.ledger, _CHECKPOINT_COLUMNS, completed),
        findings=_read(t.findings),
        partition_summary=run_summary(t.partition_summary, reconcile_run),
        restarts=_read(t.restarts),
        validation_results=_read(t.validation_results),
        incidents=_read(t.incidents),
        windows=recent_windows(t.completeness, since),
    )


def _spark_value(value: Any) -> Any:
    """What Spark's collect gives for a value: timestamps as naive local times."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone().replace(tzinfo=None)
    return value


def _query(sql: str, params: Sequence[Any] = (), **tables: pa.Table) -> list[dict[str, Any]]:
    """``sql`` over the given Arrow tables (by name) in DuckDB, as rows like Spark's collect."""
    import duckdb

    db = duckdb.connect(":memory:")
    db.execute("SET TimeZone = 'UTC'")  # dates and days as Spark's UTC session computes them
    for name, table in tables.items():
        db.register(name, table)
    rows = db.sql(sql, params=list(params)).to_arrow_table().to_pylist()
    return [{k: _spark_value(v) for k, v in r.items()} for r in rows]


def findings_by_day(findings: pa.Table) -> list[dict[str, Any]]:
    return _query(
        "SELECT strftime(detected_at, '%Y-%m-%d') AS day, finding_type, severity, count(*) AS count "
        "FROM findings GROUP BY ALL ORDER BY ALL",
        findings=findings,
    )


def open_findings(findings: pa.Table, limit: int) -> list[dict[str, Any]]:
    """Everything not judged benign, most severe and newest first, at most ``limit`` rows."""
    cols = ", ".join(f'"{c}"' for c in _FINDING_COLUMNS)
    rows = _query(
        # An unknown severity ranks first, as Spark's array_position (0 when absent) put it.
        f"SELECT {cols} FROM findings WHERE status <> ? "
        "ORDER BY coalesce(list_position(?, severity), 0), detected_at DESC, finding_id LIMIT ?",
        [vocab.BENIGN, list(SEVERITIES), limit],
        findings=findings,
    )
    return [r | {"detected_at": str(r["detected_at"])} for r in rows]


def stored_incidents(incidents: pa.Table) -> list[StoredIncident]:
    return [
        StoredIncident.from_row({k: _spark_value(v) for k, v in r.items()}) for r in incidents.to_pylist()
    ]


def top_incidents(incidents: pa.Table, limit: int) -> list[StoredIncident]:
    """Most severe first, then the most records lost or duplicated; at most ``limit``."""
    return sorted(stored_incidents(incidents), key=incident_order)[:limit]


def incident_impact(incidents: pa.Table) -> list[dict[str, Any]]:
    """The impact chart's rows over every stored incident (render.impact_by_day)."""
    return rp.impact_by_day(stored_incidents(incidents))


def latest_summary(summary: pa.Table, reconcile_run_id: str | None) -> list[dict[str, Any]]:
    """One row per job/topic/partition: the given run's, else each partition's most advanced."""
    if reconcile_run_id is not None:
        return _query("SELECT * FROM summary WHERE reconcile_run_id = ?", [reconcile_run_id], summary=summary)
    return _query(
        "SELECT * FROM summary QUALIFY row_number() OVER (PARTITION BY job_name, topic, partition "
        "ORDER BY last_checkpoint_id DESC NULLS LAST, reconcile_run_id DESC) = 1",
        summary=summary,
    )


def unresolved_gap_records(findings: pa.Table) -> dict[tuple[str, str, int], int]:
    """Per job, topic and partition, the offsets the sink lacks: its unresolved GAPs', and the records
    a restart skipped in a sink that cannot show them (a RESTART_SKIP read back from the source)."""
    rows = _query(
        "SELECT job_name, topic, partition, CAST(sum(record_count) AS BIGINT) AS missing FROM findings "
        "WHERE finding_type = ? AND status <> ? GROUP BY ALL",
        [vocab.GAP, vocab.BENIGN],
        findings=findings,
    )
    out = {(r["job_name"], r["topic"], r["partition"]): int(r["missing"] or 0) for r in rows}
    skips = _query(
        "SELECT job_name, topic, partition, record_count, evidence FROM findings WHERE finding_type = ?",
        [vocab.RESTART_SKIP],
        findings=findings,
    )
    for r in skips:
        counts = skipped_counts(parse_evidence(r["evidence"]), r["record_count"])
        if counts is not None:
            key = (r["job_name"], r["topic"], r["partition"])
            out[key] = out.get(key, 0) + sum(counts)
    return out


def checkpoint_commit_counts(ledger: pa.Table, findings: pa.Table | None) -> dict[str, tuple[int, int]]:
    """Per group: completed checkpoints (ledger) and, of those, the ones with a SKIPPED_COMMIT
    finding (distinct job/run/checkpoint), so the dashboard's skip rate counts exactly what the
    findings call a skipped commit: superseded, failed or never attempted alike."""
    per_checkpoint = (
        "SELECT group_id, count(DISTINCT {{'j': job_name, 'r': run_id, 'c': checkpoint_id}}) AS n "
        "FROM {table} WHERE group_id IS NOT NULL AND checkpoint_id IS NOT NULL AND {kind} GROUP BY group_id"
    )
    completed = _query(
        per_checkpoint.format(table="ledger", kind="event_type = ?"),
        [EVENT_CHECKPOINT_COMPLETED],
        ledger=ledger,
    )
    skipped = (
        []
        if findings is None
        else _query(
            per_checkpoint.format(table="findings", kind="finding_type = ?"),
            [vocab.SKIPPED_COMMIT],
            findings=findings,
        )
    )
    skips = {r["group_id"]: int(r["n"]) for r in skipped}
    return {r["group_id"]: (int(r["n"]), skips.get(r["group_id"], 0)) for r in completed}


def group_lags(summary: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    lags: dict[str, dict[str, Any]] = {}
    for r in summary:
        if r["group_id"] is None:
            continue
        lag = lags.setdefault(
            r["group_id"], {"group_id": r["group_id"], "lag_offsets": None, "lag_seconds": None}
        )
        for out, col in (("lag_offsets", "commit_lag_offsets"), ("lag_seconds", "commit_lag_seconds")):
            if r[col] is not None:
                lag[out] = r[col] if lag[out] is None else max(lag[out], r[col])
    return list(lags.values())


def latest_checks(results: pa.Table) -> tuple[str | None, list[dict[str, Any]]]:
    latest = _query(
        "SELECT run_id FROM results ORDER BY evaluated_at DESC, run_id DESC LIMIT 1", results=results
    )
    if not latest:
        return None, []
    run_id = str(latest[0]["run_id"])
    rows = _query(
        "SELECT suite, count(*) AS evaluated, "
        "CAST(sum(CASE WHEN NOT success THEN 1 ELSE 0 END) AS BIGINT) AS failed "
        "FROM results WHERE run_id = ? GROUP BY suite ORDER BY suite",
        [run_id],
        results=results,
    )
    return run_id, rows


def docs_href(docs_index: Path, report_path: Path) -> str | None:
    """A link that still works when the report and the docs are copied together: relative."""
    if not docs_index.is_file():
        return None
    return os.path.relpath(docs_index.resolve(), report_path.resolve().parent)


def gather(
    audit_tables: AuditTables,
    cfg: AppConfig,
    run_id: str,
    output: Path,
    now: datetime | None = None,
    tables: ReportTables | None = None,
) -> rp.ReportData:
    reconcile_run = latest_reconcile_run(audit_tables.audit_runs)
    t = tables or read_tables(audit_tables, cfg, now, reconcile_run)
    notes = [
        f"table {name} does not exist yet: its section is empty"
        for name, df in (
            ("findings", t.findings),
            ("partition_summary", t.partition_summary),
            ("restarts", t.restarts),
            ("ledger", t.ledger),
            ("validation_results", t.validation_results),
            ("completeness", t.windows),
        )
        if df is None
    ]
    summary = None if t.partition_summary is None else latest_summary(t.partition_summary, reconcile_run)
    missing = {} if t.findings is None else unresolved_gap_records(t.findings)
    completeness = [] if summary is None else rp.completeness_rows(summary, missing)
    lags = [] if summary is None else group_lags(summary)
    counts = {} if t.ledger is None else checkpoint_commit_counts(t.ledger, t.findings)
    check_run, checks = (None, []) if t.validation_results is None else latest_checks(t.validation_results)
    cells = [] if t.windows is None else rp.window_cells(window_rows(t.windows))
    return rp.ReportData(
        title=cfg.report.title,
        generated_at=now or datetime.now(UTC),
        run_id=run_id,
        reconcile_run_id=reconcile_run,
        findings_by_day=[] if t.findings is None else findings_by_day(t.findings),
        groups=rp.group_rows(lags, counts),
        completeness=completeness,
        restarts=[]
        if t.restarts is None
        else rp.restart_rows(_query("SELECT * FROM restarts", restarts=t.restarts)),
        findings=[] if t.findings is None else open_findings(t.findings, cfg.report.max_findings),
        incidents=[]
        if t.incidents is None
        else rp.incident_rows(top_incidents(t.incidents, cfg.report.max_findings)),
        impact=[] if t.incidents is None else incident_impact(t.incidents),
        windows=cells,
        latency=rp.latency_lines(cells),
        window_hours=cfg.report.window_hours,
        checks=checks,
        check_run_id=check_run,
        data_docs_href=docs_href(Path(data_docs_dir(cfg)) / "index.html", output),
        notes=notes,
    )


def report_path(cfg: AppConfig) -> Path:
    return Path(cfg.report.output or cfg.paths.under("report", "index.html"))


def build_report(
    tables: AuditTables,
    cfg: AppConfig,
    run_id: str,
    output: Path | None = None,
    now: datetime | None = None,
) -> Path:
    """Gather, render and write the dashboard; returns the HTML file's path."""
    path = output or report_path(cfg)
    data = gather(tables, cfg, run_id, path, now)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rp.render_html(data), encoding="utf-8")
    log.info("report written to %s", path)
    return path
