"""`check`: the Great Expectations suites of ``checks.suites`` over the audit tables, end to end.

One function wires the parts, each in its own module:

- ``io``: the tables to validate, each read by the engine ``app.routes.check_route`` picks for its
  size (a normal night's audit tables fit on the driver: delta-rs and DuckDB, no Spark job), and the
  outcomes written to ``validation_results``;
- ``frames``: the frames the suites validate, each rule one SQL text that either engine runs
  (``engines``);
- ``runner``: Great Expectations over those frames, typed outcomes (``outcomes``) and Data Docs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from app.config import AppConfig, ChecksConfig
from app.quality.frames import build_frames
from app.quality.io import check_run_id, read_inputs, write_results
from app.quality.outcomes import CheckSummary
from app.quality.runner import validate_suites
from app.reconcile.outputs import latest_reconcile_run
from app.routes import CHECK_DRIVER_MAX_ROWS
from app.storage.handles import AuditTables
from app.storage.tables import data_docs_dir
from checks.suites import Thresholds, all_suites


@dataclass(frozen=True)
class CheckOptions:
    build_docs: bool = True
    write_results: bool = True
    reconcile_run_id: str | None = None  # default: the latest successful reconcile run
    # Validate the ledger and group commits from here on (a night's window); None: whole tables.
    since: datetime | None = None
    driver_max_rows: int = CHECK_DRIVER_MAX_ROWS  # tables up to this size are validated on the driver


def thresholds(cfg: ChecksConfig) -> Thresholds:
    return Thresholds(cfg.max_confirmed_gaps, cfg.max_commit_lag_offsets, cfg.max_commit_lag_seconds)


def run_checks(
    spark: SparkSession,
    cfg: AppConfig,
    run_id: str,
    now: datetime | None = None,
    options: CheckOptions | None = None,
    tables: AuditTables | None = None,
) -> CheckSummary:
    """Read the audit tables (``tables``: a nightly's or watch's, else the config's), validate
    every suite, keep the outcomes and build Data Docs."""
    check_run_id(run_id)
    opts = options or CheckOptions()
    tables = tables or AuditTables.from_config(cfg, spark)
    evaluated_at = now or datetime.now(UTC)
    reconcile_run = opts.reconcile_run_id or latest_reconcile_run(tables.audit_runs)
    inputs = read_inputs(tables, cfg, opts.since, opts.driver_max_rows, reconcile_run)
    suites, docs = validate_suites(
        all_suites(thresholds(cfg.checks)),
        build_frames(inputs, reconcile_run, cfg.completeness.floor),
        run_id=run_id,
        now=evaluated_at,
        data_docs_dir=data_docs_dir(cfg) if opts.build_docs else None,
    )
    results_path = tables.validation_results.location if opts.write_results else None
    summary = CheckSummary(run_id, evaluated_at, suites, reconcile_run, docs, results_path)
    if results_path and summary.outcomes:
        write_results(tables.validation_results, summary)
    return summary
