"""Where each table lives (one resolver from config to locations) and generic reads of a Delta table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from app.config import ICEBERG_PREFIX, AppConfig, IcebergConfig, PathsConfig, check_iceberg_address
from app.errors import (
    InfrastructureError,
)

# The table names of `tables:` in the config; each is also the default location's last segment.
TABLE_NAMES: Final = (
    "sink",
    "ledger",
    "group_commits",
    "group_events",
    "decode_errors",
    "ingest_positions",
    "findings",
    "partition_summary",
    "restarts",
    "incidents",
    "audit_runs",
    "validation_results",
    "alert_state",
    "completeness",
)


def resolve(paths: PathsConfig, value: str, name: str) -> str:
    """The location of table ``name`` configured as ``value``: "" is <data_dir>/tables/<name>, a bare
    name lives under <data_dir>/tables, anything with a slash is a path or URI as it stands, and so
    is an Iceberg catalog address (iceberg:<catalog>.<namespace>.<table>)."""
    chosen = value or name
    return chosen if "/" in chosen or chosen.startswith(ICEBERG_PREFIX) else paths.under("tables", chosen)


@dataclass(frozen=True)
class Tables:
    """Every table's location, resolved once from `tables:` (the only place a location is computed)."""

    sink: str
    ledger: str
    group_commits: str
    group_events: str
    decode_errors: str
    ingest_positions: str
    findings: str
    partition_summary: str
    restarts: str
    incidents: str
    audit_runs: str
    validation_results: str
    alert_state: str
    completeness: str
    sink_by_job: Mapping[str, str] = field(default_factory=dict)
    sink_key: str = "tables.sink"
    # The catalogs an Iceberg sink's address names (`iceberg.catalogs`).
    iceberg: IcebergConfig = field(default_factory=IcebergConfig)

    def sink_for(self, job: str) -> str:
        return self.sink_by_job.get(job, self.sink)

    def sink_key_for(self, job: str) -> str:
        """The setting that names ``job``'s sink, for error messages."""
        return f"tables.sink_by_job.{job}" if job in self.sink_by_job else self.sink_key

    def named(self, name: str) -> str:
        """The location of the table called ``name`` (one of TABLE_NAMES)."""
        if name not in TABLE_NAMES:
            raise ValueError(f"no table called {name!r}; known: {', '.join(TABLE_NAMES)}")
        location: str = getattr(self, name)
        return location


def tables_from_config(cfg: AppConfig, sink_override: str | None = None) -> Tables:
    """Every location from `tables:`; ``sink_override`` (``--sink``) replaces the sink of every job."""
    t, p = cfg.tables, cfg.paths
    located = {name: resolve(p, getattr(t, name), name) for name in TABLE_NAMES}
    if sink_override:
        check_iceberg_address(sink_override, cfg.iceberg, "--sink")
        located["sink"] = sink_override
    return Tables(
        **located,
        sink_by_job={} if sink_override else {job: resolve(p, v, "sink") for job, v in t.sink_by_job.items()},
        sink_key="--sink" if sink_override else "tables.sink",
        iceberg=cfg.iceberg,
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
