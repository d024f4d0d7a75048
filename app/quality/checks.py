"""`check`: run the Great Expectations suites of ``checks.suites`` over the audit tables.

Three parts, kept apart:

- pure ``DataFrame -> DataFrame`` builders of the frames the suites validate (the stored tables, and
  the derived frames that turn cross-row rules into column expectations);
- the GE runner: an ephemeral context, typed outcomes, and Data Docs built to ``checks.data_docs_dir``.
  Where a frame is validated is decided in one place, by its size (``on_driver``): a small frame
  (every audit table of a normal night) is collected once and validated by GE's pandas data source
  on the driver; a large one is handed to GE's Spark data source on the application's session, which
  runs a Spark job per metric bundle. Both run the same suites and report the same results; on tiny
  tables the Spark route costs tens of seconds of job scheduling for a few hundred rows;
- I/O: reading the tables (a missing table skips its suites) and writing the outcomes to the
  ``validation_results`` Delta table, one row per expectation and run.

Rule for "a completion for every snapshot": every checkpoint with a CHECKPOINT_SNAPSHOT has a
CHECKPOINT_COMPLETED in the same job and run, except the newest snapshotted checkpoint of each run.
That one may legitimately be in flight (the run is still going) or lost with the run (killed while
checkpointing); the restart forensics judge those, not this invariant.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StringType, StructField, StructType, TimestampType

from app.config import AppConfig
from app.contracts.tables import (
    FINDINGS_SCHEMA,
    LEDGER_SCHEMA,
    PARTITION_SUMMARY_SCHEMA,
    require_columns,
)
from app.contracts.vocabulary import EVENT_CHECKPOINT_COMPLETED, EVENT_CHECKPOINT_SNAPSHOT, SEVERITIES
from app.errors import UsageError
from app.storage import delta_rows
from checks.suites import SuiteSpec, all_suites

log = logging.getLogger(__name__)

# Outcomes of `check`, one row per expectation and run. Bookkeeping of this command, not a
# DESIGN section 4 table (like reconcile's audit_runs).
VALIDATION_RESULTS_SCHEMA: Final = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("suite", StringType(), False),
        StructField("table", StringType(), False),
        StructField("expectation", StringType(), False),
        StructField("kwargs", StringType(), True),  # JSON: the expectation's columns and bounds
        StructField("severity", StringType(), False),
        StructField("success", BooleanType(), False),
        StructField("observed", StringType(), True),  # JSON: GE's result (counts, sample of bad values)
        StructField("evaluated_at", TimestampType(), False),
    ]
)

# Frames of at most this many rows are validated on the driver with pandas; larger ones with Spark.
# A few hundred thousand rows of an audit table fit easily in the driver's memory and validate in
# seconds with pandas, while Spark pays a job per metric bundle whatever the size.
DRIVER_MAX_ROWS: Final = 200_000

# run ids end up in a Delta replaceWhere predicate: keep them to characters that need no quoting.
_RUN_ID = re.compile(r"^[A-Za-z0-9._:-]+$")


# --- typed outcomes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectationOutcome:
    suite: str
    table: str
    expectation: str
    kwargs: Mapping[str, Any]
    severity: str
    success: bool
    observed: Mapping[str, Any]

    @property
    def label(self) -> str:
        target = self.kwargs.get("column") or self.kwargs.get("column_list")
        if target is None and "column_A" in self.kwargs:
            target = f"{self.kwargs['column_A']} >= {self.kwargs['column_B']}"
        return f"{self.expectation}({target})" if target else self.expectation


@dataclass(frozen=True)
class SuiteOutcome:
    name: str
    table: str
    expectations: tuple[ExpectationOutcome, ...] = ()
    skipped: str | None = None  # why the suite did not run (its table does not exist yet)

    @property
    def success(self) -> bool:
        return all(e.success for e in self.expectations)


@dataclass(frozen=True)
class CheckSummary:
    run_id: str
    evaluated_at: datetime
    suites: tuple[SuiteOutcome, ...]
    reconcile_run_id: str | None = None  # the run whose findings and summary were checked
    data_docs: str | None = None  # URL of the Data Docs index
    results_table: str | None = None

    @property
    def outcomes(self) -> list[ExpectationOutcome]:
        return [e for s in self.suites for e in s.expectations]

    def failed(self, at_or_above: str = "info") -> list[ExpectationOutcome]:
        """Failed expectations whose severity is ``at_or_above`` or more severe."""
        limit = SEVERITIES.index(at_or_above)
        return [e for e in self.outcomes if not e.success and SEVERITIES.index(e.severity) <= limit]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "evaluated_at": self.evaluated_at.isoformat(),
            "reconcile_run_id": self.reconcile_run_id,
            "data_docs": self.data_docs,
            "results_table": self.results_table,
            "suites": [
                {
                    "suite": s.name,
                    "table": s.table,
                    "success": s.success,
                    "skipped": s.skipped,
                    "evaluated": len(s.expectations),
                    "failed": [
                        {"expectation": e.label, "severity": e.severity, "observed": e.observed}
                        for e in s.expectations
                        if not e.success
                    ],
                }
                for s in self.suites
            ],
        }


# --- frames (pure) -------------------------------------------------------------------------------


def ledger_frame(ledger: DataFrame) -> DataFrame:
    """The ledger plus detail's identity fields as columns (see app.stream.ledger.event_key_column)."""
    require_columns(ledger, LEDGER_SCHEMA.fieldNames(), "ledger")
    detail = F.col("detail")
    return ledger.select(
        *LEDGER_SCHEMA.fieldNames(),
        F.get_json_object(detail, "$.reason").alias("detail_reason"),
        F.get_json_object(detail, "$.error").alias("detail_error"),
        F.get_json_object(detail, "$.attempt").alias("detail_attempt"),
    )


def checkpoint_completion(ledger: DataFrame) -> DataFrame:
    """One row per snapshotted checkpoint that should have completed (all but each run's newest);
    ``snapshot_without_completion`` names it ('job/run/checkpoint') when it never completed."""
    require_columns(ledger, ("job_name", "run_id", "checkpoint_id", "event_type", "event_time"), "ledger")
    key = ["job_name", "run_id", "checkpoint_id"]
    with_cp = ledger.where(F.col("checkpoint_id").isNotNull())
    snapshots = (
        with_cp.where(F.col("event_type") == EVENT_CHECKPOINT_SNAPSHOT)
        .groupBy(*key)
        .agg(F.min("event_time").alias("snapshot_at"))
    )
    completions = (
        with_cp.where(F.col("event_type") == EVENT_CHECKPOINT_COMPLETED)
        .groupBy(*key)
        .agg(F.min("event_time").alias("completed_at"))
    )
    newest = F.max("checkpoint_id").over(Window.partitionBy("job_name", "run_id"))
    missing = F.when(
        F.col("completed_at").isNull(),
        F.concat_ws("/", "job_name", "run_id", F.col("checkpoint_id").cast("string")),
    )
    return (
        snapshots.withColumn("_newest_cp", newest)
        .where(F.col("checkpoint_id") < F.col("_newest_cp"))
        .join(completions, on=key, how="left")
        .select(*key, "snapshot_at", "completed_at", missing.alias("snapshot_without_completion"))
    )


def commits_vs_checkpoints(summary: DataFrame) -> DataFrame:
    """Per audited partition, the group's latest committed offset next to the latest completed
    checkpoint's offset, as reconcile computed them for its findings and the dashboard's commit lag
    (``partition_summary``): the check cannot disagree with them by defining either anew."""
    require_columns(summary, PARTITION_SUMMARY_SCHEMA.fieldNames(), "partition_summary")
    return summary.where(F.col("last_committed_offset").isNotNull()).select(
        "job_name",
        "group_id",
        "topic",
        "partition",
        F.col("last_committed_offset").alias("committed_offset"),
        F.col("last_commit_time").alias("commit_time"),
        # No completed checkpoint covers the partition yet: any positive commit is ahead of it.
        F.coalesce(F.col("last_checkpoint_offset"), F.lit(0)).alias("completed_offset"),
    )


def of_run(df: DataFrame, reconcile_run_id: str | None) -> DataFrame:
    """Rows of one reconcile run, or all rows when no run is known."""
    return df if reconcile_run_id is None else df.where(F.col("reconcile_run_id") == reconcile_run_id)


def confirmed_gaps(findings: DataFrame, reconcile_run_id: str | None) -> DataFrame:
    require_columns(findings, FINDINGS_SCHEMA.fieldNames(), "findings")
    is_confirmed_gap: Column = (F.col("finding_type") == "GAP") & (F.col("status") == "confirmed")
    return of_run(findings, reconcile_run_id).where(is_confirmed_gap)


def build_frames(
    tables: Mapping[str, DataFrame | None], reconcile_run_id: str | None
) -> dict[str, DataFrame | None]:
    """The frame of every suite (``SuiteSpec.frame``); None where its table does not exist."""
    ledger, commits = tables.get("ledger"), tables.get("group_commits")
    findings, summary = tables.get("findings"), tables.get("partition_summary")
    if summary is not None:
        require_columns(summary, PARTITION_SUMMARY_SCHEMA.fieldNames(), "partition_summary")
    return {
        "ledger": None if ledger is None else ledger_frame(ledger),
        "checkpoint_completion": None if ledger is None else checkpoint_completion(ledger),
        "group_commits": commits,
        "commits_vs_checkpoints": (
            None if summary is None else commits_vs_checkpoints(of_run(summary, reconcile_run_id))
        ),
        "findings": findings,
        "confirmed_gaps": None if findings is None else confirmed_gaps(findings, reconcile_run_id),
        # Thresholds apply to the latest state; older summaries were checked by earlier runs.
        "partition_summary": None if summary is None else of_run(summary, reconcile_run_id),
    }


# --- Great Expectations --------------------------------------------------------------------------


def gx_context(data_docs_dir: str | None) -> Any:
    """An in-memory GE context (nothing written but Data Docs), quiet and offline."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    sites = {}
    if data_docs_dir:
        sites["offset_audit"] = {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": data_docs_dir},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites=sites,
        analytics_enabled=False,  # the network is closed, and nobody asked to be counted
        progress_bars=ProgressBarsConfig(globally=False),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def _json_value(value: Any) -> Any:
    """GE's results hold numpy scalars and timestamps on the pandas route: plain JSON values, so
    both routes store the same observed values."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()  # numpy scalars
    if hasattr(value, "isoformat"):
        return str(value.to_pydatetime() if hasattr(value, "to_pydatetime") else value)
    return str(value)


_ROW_POSITION_KEYS: Final = frozenset({"partial_unexpected_index_list", "unexpected_index_list"})


def outcomes_of(spec: SuiteSpec, result: Any) -> tuple[ExpectationOutcome, ...]:
    """GE's suite result as typed outcomes; an expectation that raised counts as failed."""
    out = []
    for r in result.results:
        cfg = r.expectation_config
        kwargs = {k: v for k, v in dict(cfg.kwargs).items() if k != "batch_id"}
        # Row positions in the collected frame (pandas route only) name no row of the table.
        observed = {k: v for k, v in dict(r.result or {}).items() if k not in _ROW_POSITION_KEYS}
        exc = r.exception_info or {}
        if exc.get("raised_exception"):
            observed["exception"] = exc.get("exception_message")
        out.append(
            ExpectationOutcome(
                suite=spec.name,
                table=spec.table,
                expectation=str(cfg.type),
                kwargs=json.loads(json.dumps(kwargs, default=_json_value)),
                severity=str((cfg.meta or {}).get("severity", "error")),
                success=bool(r.success),
                observed=json.loads(json.dumps(observed, default=_json_value)),
            )
        )
    return tuple(out)


# Spark's nullable integers and booleans as pandas' nullable dtypes: numpy's would turn an int
# column with a null into floats (3 -> 3.0 in every observed value).
_PANDAS_TYPES: Final[Mapping[pa.DataType, Any]] = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


def on_driver(df: DataFrame, max_rows: int = DRIVER_MAX_ROWS) -> pd.DataFrame | None:
    """The one place that decides where a frame is validated: the frame as pandas when it has at
    most ``max_rows`` rows (one Spark job, reading at most ``max_rows + 1`` rows), else None
    (validate it with Spark)."""
    if max_rows <= 0:
        return None
    table = df.limit(max_rows + 1).toArrow()
    if table.num_rows > max_rows:
        return None
    return table.to_pandas(types_mapper=_PANDAS_TYPES.get)


def validate_suites(
    specs: Sequence[SuiteSpec],
    frames: Mapping[str, DataFrame | None],
    *,
    run_id: str,
    now: datetime,
    data_docs_dir: str | None = None,
    driver_max_rows: int = DRIVER_MAX_ROWS,
) -> tuple[tuple[SuiteOutcome, ...], str | None]:
    """Run every suite over its frame; returns the outcomes and the Data Docs index URL."""
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    context = gx_context(data_docs_dir)
    # The frames are handed over as batches: GE computes in pandas on the driver, or on the
    # session that made the frame.
    sources = {
        "pandas": context.data_sources.add_pandas(name="offset_audit_driver"),
        "spark": context.data_sources.add_spark(name="offset_audit"),
    }
    run = RunIdentifier(run_name=run_id, run_time=now)
    collected: dict[str, pd.DataFrame | None] = {}  # frame name -> pandas (None: use Spark)
    outcomes: list[SuiteOutcome] = []
    for spec in specs:
        df = frames.get(spec.frame)
        if df is None:
            outcomes.append(SuiteOutcome(spec.name, spec.table, skipped=f"table {spec.table} does not exist"))
            continue
        started = time.monotonic()
        if spec.frame not in collected:
            collected[spec.frame] = on_driver(df, driver_max_rows)
        local = collected[spec.frame]
        route = "spark" if local is None else "pandas"
        asset = sources[route].add_dataframe_asset(name=spec.name)
        batch = asset.add_batch_definition_whole_dataframe("whole")
        suite = context.suites.add(gx.ExpectationSuite(name=spec.name))
        for c in spec.checks:
            suite.add_expectation(c.expectation)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=spec.name, data=batch, suite=suite)
        )
        if local is not None:
            result = definition.run(batch_parameters={"dataframe": local}, run_id=run)
        else:
            cached = df.persist()  # GE runs one Spark job per metric bundle over the same frame
            try:
                result = definition.run(batch_parameters={"dataframe": cached}, run_id=run)
            finally:
                cached.unpersist()
        outcomes.append(SuiteOutcome(spec.name, spec.table, outcomes_of(spec, result)))
        verdict = "passed" if outcomes[-1].success else "FAILED"
        log.info("suite %s (%s): %s in %.1fs", spec.name, route, verdict, time.monotonic() - started)
    docs = None
    if data_docs_dir and any(o.skipped is None for o in outcomes):
        docs = context.build_data_docs(site_names=["offset_audit"]).get("offset_audit")
    return tuple(outcomes), docs


# --- I/O -----------------------------------------------------------------------------------------


def result_rows(summary: CheckSummary) -> list[tuple[Any, ...]]:
    return [
        (
            summary.run_id,
            e.suite,
            e.table,
            e.expectation,
            json.dumps(e.kwargs, sort_keys=True),
            e.severity,
            e.success,
            json.dumps(e.observed, sort_keys=True),
            summary.evaluated_at,
        )
        for e in summary.outcomes
    ]


def results_frame(spark: SparkSession, summary: CheckSummary) -> DataFrame:
    return spark.createDataFrame(result_rows(summary), VALIDATION_RESULTS_SCHEMA)


def write_results(spark: SparkSession, path: str, summary: CheckSummary) -> None:
    """Replace this run's rows in one commit, so a re-run of the same run id never doubles them;
    delta-rs commits them from the driver (no Spark job for a few dozen rows)."""
    names = VALIDATION_RESULTS_SCHEMA.fieldNames()
    rows = [dict(zip(names, r, strict=True)) for r in result_rows(summary)]
    delta_rows.replace_rows(spark, path, VALIDATION_RESULTS_SCHEMA, rows, f"run_id = '{summary.run_id}'")


def latest_reconcile_run(spark: SparkSession, runs_path: str) -> str | None:
    """The newest successful reconcile run (reconcile's audit_runs), or None before the first."""
    from app.storage.tables import read_delta

    runs = read_delta(spark, runs_path)
    if runs is None:
        return None
    row = (
        runs.where((F.col("command") == "reconcile") & (F.col("status") == "succeeded"))
        .orderBy(F.col("finished_at").desc(), F.col("run_id").desc())
        .select("run_id")
        .first()
    )
    return None if row is None else str(row["run_id"])


def results_table_path(cfg: AppConfig) -> str:
    return cfg.checks.results_table or cfg.paths.table("validation_results")


def data_docs_dir(cfg: AppConfig) -> str:
    return cfg.checks.data_docs_dir or str(Path(cfg.paths.under("data_docs")).resolve())


@dataclass(frozen=True)
class CheckOptions:
    build_docs: bool = True
    write_results: bool = True
    reconcile_run_id: str | None = None  # default: the latest successful reconcile run
    extra_tables: Mapping[str, DataFrame] = field(default_factory=dict)  # tests inject frames
    driver_max_rows: int = DRIVER_MAX_ROWS  # frames up to this size are validated on the driver


def run_checks(
    spark: SparkSession,
    cfg: AppConfig,
    run_id: str,
    now: datetime | None = None,
    options: CheckOptions | None = None,
) -> CheckSummary:
    """Read the audit tables, validate every suite, keep the outcomes and build Data Docs."""
    from app.storage.tables import read_delta, tables_from_config

    if not _RUN_ID.match(run_id):
        raise UsageError(f"run id {run_id!r}: use letters, digits and . _ : - only")
    opts = options or CheckOptions()
    evaluated_at = now or datetime.now(UTC)
    t = tables_from_config(cfg)
    tables: dict[str, DataFrame | None] = {
        "ledger": read_delta(spark, t.ledger),
        "group_commits": read_delta(spark, t.group_commits),
        "findings": read_delta(spark, t.findings),
        "partition_summary": read_delta(spark, t.partition_summary),
    }
    tables.update(opts.extra_tables)
    reconcile_run = opts.reconcile_run_id or latest_reconcile_run(spark, t.runs)
    frames = build_frames(tables, reconcile_run)
    docs_dir = data_docs_dir(cfg) if opts.build_docs else None
    suites, docs = validate_suites(
        all_suites(cfg.checks),
        frames,
        run_id=run_id,
        now=evaluated_at,
        data_docs_dir=docs_dir,
        driver_max_rows=opts.driver_max_rows,
    )
    results_path = results_table_path(cfg) if opts.write_results else None
    summary = CheckSummary(run_id, evaluated_at, suites, reconcile_run, docs, results_path)
    if results_path and summary.outcomes:
        write_results(spark, results_path, summary)
    return summary
