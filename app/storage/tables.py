"""Where each table lives (one resolver from config to locations) and generic reads of a Delta table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from app.config import AppConfig
from app.errors import (
    InfrastructureError,
)


@dataclass(frozen=True)
class Tables:
    ledger: str
    group_commits: str
    findings: str
    partition_summary: str
    restarts: str
    incidents: str
    runs: str
    sink: str
    ingest_positions: str
    validation_results: str
    sink_by_job: Mapping[str, str] = field(default_factory=dict)
    sink_key: str = "reconcile.sink_table"

    def sink_for(self, job: str) -> str:
        return self.sink_by_job.get(job, self.sink)

    def sink_key_for(self, job: str) -> str:
        """The setting that names ``job``'s sink, for error messages."""
        return f"reconcile.sink_tables.{job}" if job in self.sink_by_job else self.sink_key


def tables_from_config(cfg: AppConfig, sink_override: str | None = None) -> Tables:
    r, p = cfg.reconcile, cfg.paths
    return Tables(
        ledger=r.ledger_table or p.table("ledger"),
        group_commits=r.group_commits_table or p.table("group_commits"),
        findings=r.findings_table or p.table("findings"),
        partition_summary=r.partition_summary_table or p.table("partition_summary"),
        restarts=r.restarts_table or p.table("restarts"),
        incidents=r.incidents_table or p.table("incidents"),
        runs=r.runs_table or p.table("audit_runs"),
        sink=sink_override or r.sink_table or p.table("sink"),
        ingest_positions=p.table("ingest_positions"),
        validation_results=cfg.checks.results_table or p.table("validation_results"),
        sink_by_job={} if sink_override else dict(r.sink_tables),
        sink_key="--sink" if sink_override else "reconcile.sink_table",
    )


def data_docs_dir(cfg: AppConfig) -> str:
    """Where `check` builds its Data Docs and the dashboard links to them: a local directory."""
    return cfg.checks.data_docs_dir or str(Path(cfg.paths.under("data_docs")).resolve())


def read_delta(spark: SparkSession, path: str) -> DataFrame | None:
    """The table at ``path``, or None when there is none yet (a fresh deployment)."""
    try:
        if not DeltaTable.isDeltaTable(spark, path):
            return None
    except Exception as exc:
        # Broad on purpose: the storage client raises its own types (S3, ABFS, local IO).
        raise InfrastructureError(f"cannot access table storage at {path}: {exc}") from exc
    return spark.read.format("delta").load(path)
