"""`check`: run the Great Expectations suites of ``checks.suites`` over the audit tables.

Three parts, kept apart:

- builders of the frames the suites validate (the stored tables, and the derived frames that turn
  cross-row rules into column expectations), twice over the same rules: DuckDB over Arrow on the
  driver, and pure ``DataFrame -> DataFrame`` transforms for Spark;
- the GE runner: an ephemeral context, typed outcomes, and Data Docs built to ``checks.data_docs_dir``.
  Where a table is validated is decided in one place, by its size (``app.routes.check_route``): a small table
  (every audit table of a normal night) is read by delta-rs into Arrow, its frames are built by
  DuckDB and validated by GE's pandas data source on the driver, with no Spark job at all; a large
  one is read by Spark and handed to GE's Spark data source on the application's session, which
  runs a Spark job per metric bundle. Both run the same suites and report the same results; on
  tiny tables the Spark route costs tens of seconds of job scheduling for a few hundred rows;
- I/O: reading the tables (a missing table skips its suites) and writing the outcomes to the
  ``validation_results`` Delta table, one row per expectation and run.

The ledger and the group commits only grow, so a night validates its window of them (``since``: the
night's reconcile window, which a failed night does not move), with an overlap for rows written
late; findings and partition summaries are validated whole or by reconcile run as before.

Rule for "a completion for every snapshot": every checkpoint with a CHECKPOINT_SNAPSHOT has a
CHECKPOINT_COMPLETED in the same job and run, except the newest snapshotted checkpoint of each run.
That one may legitimately be in flight (the run is still going) or lost with the run (killed while
checkpointing); the restart forensics judge those, not this invariant. Over a window, the frame
holds the checkpoints snapshotted or completed in the window and each run's newest checkpoint
snapshotted before it (exempt last night, judged now that the run went on), judged against the
checkpoint events of the reconcile look-back.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeAlias

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StringType, StructField, StructType, TimestampType

from app.config import AppConfig, ChecksConfig
from app.contracts.tables import (
    FINDINGS_SCHEMA,
    LEDGER_SCHEMA,
    PARTITION_SUMMARY_SCHEMA,
    require_columns,
)
from app.contracts.vocabulary import EVENT_CHECKPOINT_COMPLETED, EVENT_CHECKPOINT_SNAPSHOT, SEVERITIES
from app.errors import SchemaMismatchError, UsageError
from app.reconcile.outputs import latest_reconcile_run
from app.routes import CHECK_DRIVER_MAX_ROWS, DRIVER, check_route
from app.storage import delta_rows
from app.storage.tables import data_docs_dir, tables_from_config
from checks.suites import SuiteSpec, Thresholds, all_suites

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

# A night's window starts this much before its reconcile window. A night validates every row
# written before it reads the ledger, whatever its time, so only a row written after the previous
# night read it with a time before that night's start could escape: the ledger's writers append a
# micro-batch's events seconds after their time, and this leaves room for a slow commit.
WINDOW_OVERLAP: Final = timedelta(minutes=2)

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


# --- frames for Spark (pure) --------------------------------------------------------------------


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


def checkpoint_completion(ledger: DataFrame, since: datetime | None = None) -> DataFrame:
    """One row per snapshotted checkpoint that should have completed (all but each run's newest);
    ``snapshot_without_completion`` names it ('job/run/checkpoint') when it never completed. With
    ``since``, only the checkpoints whose verdict the rows from ``since`` on can change (module
    docstring); ``ledger`` then holds the checkpoint events of the look-back too."""
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
    run = Window.partitionBy("job_name", "run_id")
    before = F.when(F.col("snapshot_at") < F.lit(since), F.col("checkpoint_id"))
    missing = F.when(
        F.col("completed_at").isNull(),
        F.concat_ws("/", "job_name", "run_id", F.col("checkpoint_id").cast("string")),
    )
    judged = (
        snapshots.withColumn("_newest_cp", F.max("checkpoint_id").over(run))
        .withColumn("_newest_before", F.max(before).over(run) if since is not None else F.lit(None))
        .where(F.col("checkpoint_id") < F.col("_newest_cp"))
        .join(completions, on=key, how="left")
    )
    if since is not None:
        judged = judged.where(
            (F.col("snapshot_at") >= F.lit(since))
            | (F.col("completed_at") >= F.lit(since))
            | (F.col("checkpoint_id") == F.col("_newest_before"))
        )
    return judged.select(*key, "snapshot_at", "completed_at", missing.alias("snapshot_without_completion"))


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


# --- frames on the driver (DuckDB and Arrow, the same rules) -------------------------------------

_DETAIL_FIELDS: Final = ("reason", "error", "attempt")


def _require(table: pa.Table, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise SchemaMismatchError(f"{name} lacks required columns {missing}; has {table.column_names}")


def _duckdb() -> Any:
    import duckdb

    db = duckdb.connect(":memory:")
    db.execute("SET TimeZone = 'UTC'")  # timestamps come back as Spark's route gives them
    return db


def ledger_rows(ledger: pa.Table) -> pa.Table:
    """``ledger_frame`` on the driver. Spark's get_json_object yields null for text that is not
    JSON, where DuckDB would raise: json_valid guards it."""
    _require(ledger, LEDGER_SCHEMA.fieldNames(), "ledger")
    cols = ", ".join(f'"{c}"' for c in LEDGER_SCHEMA.fieldNames())
    details = ", ".join(
        f"CASE WHEN json_valid(detail) THEN json_extract_string(detail, '$.{f}') END AS detail_{f}"
        for f in _DETAIL_FIELDS
    )
    db = _duckdb()
    db.register("ledger", ledger)
    out: pa.Table = db.sql(f"SELECT {cols}, {details} FROM ledger").to_arrow_table()
    return out


_COMPLETION_SQL: Final = """
WITH events AS (
    SELECT job_name, run_id, checkpoint_id, event_type, event_time
    FROM ledger WHERE checkpoint_id IS NOT NULL
), snapshots AS (
    SELECT job_name, run_id, checkpoint_id, min(event_time) AS snapshot_at
    FROM events WHERE event_type = $snapshot GROUP BY job_name, run_id, checkpoint_id
), completions AS (
    SELECT job_name, run_id, checkpoint_id, min(event_time) AS completed_at
    FROM events WHERE event_type = $completed GROUP BY job_name, run_id, checkpoint_id
), judged AS (
    SELECT *,
        max(checkpoint_id) OVER run AS newest,
        max(CASE WHEN snapshot_at < $since THEN checkpoint_id END) OVER run AS newest_before
    FROM snapshots
    WINDOW run AS (PARTITION BY job_name, run_id)
)
SELECT s.job_name, s.run_id, s.checkpoint_id, s.snapshot_at, c.completed_at,
    CASE WHEN c.completed_at IS NULL
        THEN concat_ws('/', s.job_name, s.run_id, CAST(s.checkpoint_id AS VARCHAR)) END
        AS snapshot_without_completion
FROM judged s LEFT JOIN completions c
    ON s.job_name = c.job_name AND s.run_id = c.run_id AND s.checkpoint_id = c.checkpoint_id
WHERE s.checkpoint_id < s.newest
    AND ($since IS NULL OR s.snapshot_at >= $since OR c.completed_at >= $since
         OR s.checkpoint_id = s.newest_before)
ORDER BY s.job_name, s.run_id, s.checkpoint_id
"""


def checkpoint_completion_rows(ledger: pa.Table, since: datetime | None = None) -> pa.Table:
    """``checkpoint_completion`` on the driver, ordered by job, run and checkpoint."""
    _require(ledger, ("job_name", "run_id", "checkpoint_id", "event_type", "event_time"), "ledger")
    db = _duckdb()
    db.register("ledger", ledger)
    params = {
        "snapshot": EVENT_CHECKPOINT_SNAPSHOT,
        "completed": EVENT_CHECKPOINT_COMPLETED,
        "since": since,
    }
    sql = _COMPLETION_SQL.replace("$since", "CAST($since AS TIMESTAMPTZ)")
    out: pa.Table = db.sql(sql, params=params).to_arrow_table()
    return out


def of_run_rows(table: pa.Table, reconcile_run_id: str | None) -> pa.Table:
    if reconcile_run_id is None:
        return table
    return table.filter(pc.field("reconcile_run_id") == reconcile_run_id)


def commits_vs_checkpoint_rows(summary: pa.Table) -> pa.Table:
    """``commits_vs_checkpoints`` on the driver."""
    _require(summary, PARTITION_SUMMARY_SCHEMA.fieldNames(), "partition_summary")
    rows = summary.filter(pc.field("last_committed_offset").is_valid())
    completed = pc.coalesce(rows.column("last_checkpoint_offset"), pa.scalar(0, pa.int64()))
    return pa.table(
        {
            "job_name": rows.column("job_name"),
            "group_id": rows.column("group_id"),
            "topic": rows.column("topic"),
            "partition": rows.column("partition"),
            "committed_offset": rows.column("last_committed_offset"),
            "commit_time": rows.column("last_commit_time"),
            "completed_offset": completed,
        }
    )


def confirmed_gap_rows(findings: pa.Table, reconcile_run_id: str | None) -> pa.Table:
    _require(findings, FINDINGS_SCHEMA.fieldNames(), "findings")
    is_confirmed_gap = (pc.field("finding_type") == "GAP") & (pc.field("status") == "confirmed")
    return of_run_rows(findings, reconcile_run_id).filter(is_confirmed_gap)


# --- every frame ---------------------------------------------------------------------------------

Frame: TypeAlias = pd.DataFrame | DataFrame  # validated on the driver (pandas) or with Spark


@dataclass(frozen=True)
class CheckInputs:
    """The tables a check reads, each as Arrow (small: the driver route) or a Spark DataFrame
    (large), None where the table does not exist. ``checkpoints`` holds the ledger's checkpoint
    events the completion rule needs (the whole ledger when not windowed)."""

    ledger: pa.Table | DataFrame | None = None
    checkpoints: pa.Table | DataFrame | None = None
    group_commits: pa.Table | DataFrame | None = None
    findings: pa.Table | DataFrame | None = None
    partition_summary: pa.Table | DataFrame | None = None
    since: datetime | None = None  # the window's start (checkpoint completion), None: whole tables


def as_pandas(table: pa.Table) -> pd.DataFrame:
    """Arrow as pandas with nullable integers and booleans (``_PANDAS_TYPES``)."""
    return table.to_pandas(types_mapper=_PANDAS_TYPES.get)


# How a suite's frame is built from its CheckInputs table, on each route.
_Builders: TypeAlias = tuple[str, Callable[[pa.Table], pa.Table], Callable[[DataFrame], DataFrame]]


def _same(t: Any) -> Any:
    return t


def _frame_builders(run: str | None, since: datetime | None) -> dict[str, _Builders]:
    """Suite frame -> (the CheckInputs field it is made from, its builder over an Arrow table read on
    the driver, its builder over a Spark frame): one row per suite, so the routes cannot drift."""
    return {
        "ledger": ("ledger", ledger_rows, ledger_frame),
        "checkpoint_completion": (
            "checkpoints",
            lambda t: checkpoint_completion_rows(t, since),
            lambda df: checkpoint_completion(df, since),
        ),
        "group_commits": ("group_commits", _same, _same),
        "commits_vs_checkpoints": (
            "partition_summary",
            lambda t: commits_vs_checkpoint_rows(of_run_rows(t, run)),
            lambda df: commits_vs_checkpoints(of_run(df, run)),
        ),
        "findings": ("findings", _same, _same),
        "confirmed_gaps": (
            "findings",
            lambda t: confirmed_gap_rows(t, run),
            lambda df: confirmed_gaps(df, run),
        ),
        # Thresholds apply to the latest state; older summaries were checked by earlier runs.
        "partition_summary": ("partition_summary", lambda t: of_run_rows(t, run), lambda df: of_run(df, run)),
    }


def build_frames(inputs: CheckInputs, reconcile_run_id: str | None) -> dict[str, Frame | None]:
    """The frame of every suite (``SuiteSpec.frame``): pandas for a table read on the driver, Spark
    for a large one; None where its table does not exist."""
    frames: dict[str, Frame | None] = {}
    for name, (field, on_arrow, on_spark) in _frame_builders(reconcile_run_id, inputs.since).items():
        table = getattr(inputs, field)
        if isinstance(table, pa.Table):
            frames[name] = as_pandas(on_arrow(table))
        elif isinstance(table, DataFrame):
            frames[name] = on_spark(table)
        else:
            frames[name] = None
    return frames


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


def validate_suites(
    specs: Sequence[SuiteSpec],
    frames: Mapping[str, Frame | None],
    *,
    run_id: str,
    now: datetime,
    data_docs_dir: str | None = None,
) -> tuple[tuple[SuiteOutcome, ...], str | None]:
    """Run every suite over its frame; returns the outcomes and the Data Docs index URL."""
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    context = gx_context(data_docs_dir)
    # The frames are handed over as batches: GE computes in pandas on the driver, or on the
    # session that made the frame.
    sources: dict[str, Any] = {}

    def source(route: str) -> Any:
        # Made when first needed: GE's Spark source gets (or starts) a session, which a night
        # whose tables all fit on the driver never needs.
        if route not in sources:
            if route == "pandas":
                sources[route] = context.data_sources.add_pandas(name="offset_audit_driver")
            else:
                sources[route] = context.data_sources.add_spark(name="offset_audit")
        return sources[route]

    run = RunIdentifier(run_name=run_id, run_time=now)
    outcomes: list[SuiteOutcome] = []
    for spec in specs:
        df = frames.get(spec.frame)
        if df is None:
            outcomes.append(SuiteOutcome(spec.name, spec.table, skipped=f"table {spec.table} does not exist"))
            continue
        started = time.monotonic()
        route = "pandas" if isinstance(df, pd.DataFrame) else "spark"
        asset = source(route).add_dataframe_asset(name=spec.name)
        batch = asset.add_batch_definition_whole_dataframe("whole")
        suite = context.suites.add(gx.ExpectationSuite(name=spec.name))
        for c in spec.checks:
            suite.add_expectation(c.expectation)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=spec.name, data=batch, suite=suite)
        )
        if isinstance(df, pd.DataFrame):
            result = definition.run(batch_parameters={"dataframe": df}, run_id=run)
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


def _at(start: datetime) -> pa.Scalar:
    return pa.scalar(start, pa.timestamp("us", tz="UTC"))


# A window as a filter for delta-rs and the same filter for Spark (built only on the Spark route).
Where: TypeAlias = tuple[pc.Expression, Callable[[], Column]]


def ledger_window(start: datetime) -> Where:
    """Ledger rows from ``start`` on, and those without a time (the not-null checks must see
    them); event_date prunes the partitions."""
    arrow = ((pc.field("event_date") >= start.date()) | pc.field("event_date").is_null()) & (
        (pc.field("event_time") >= _at(start)) | pc.field("event_time").is_null()
    )

    def spark() -> Column:
        return ((F.col("event_date") >= F.lit(start.date())) | F.col("event_date").isNull()) & (
            (F.col("event_time") >= F.lit(start)) | F.col("event_time").isNull()
        )

    return arrow, spark


def checkpoint_events(start: datetime | None) -> Where:
    """The ledger's checkpoint snapshots and completions (from ``start``'s day on, when given)."""
    types = [EVENT_CHECKPOINT_SNAPSHOT, EVENT_CHECKPOINT_COMPLETED]
    arrow = pc.field("checkpoint_id").is_valid() & pc.field("event_type").isin(types)
    if start is not None:
        arrow = arrow & (pc.field("event_date") >= start.date())

    def spark() -> Column:
        cond = F.col("checkpoint_id").isNotNull() & F.col("event_type").isin(types)
        return cond if start is None else cond & (F.col("event_date") >= F.lit(start.date()))

    return arrow, spark


def commits_window(start: datetime) -> Where:
    """Group commits committed or logged from ``start`` on, and those with neither time."""
    committed, logged = pc.field("commit_time"), pc.field("log_time")
    arrow = (committed >= _at(start)) | (logged >= _at(start)) | (committed.is_null() & logged.is_null())

    def spark() -> Column:
        c, g = F.col("commit_time"), F.col("log_time")
        return (c >= F.lit(start)) | (g >= F.lit(start)) | (c.isNull() & g.isNull())

    return arrow, spark


def read_for_check(
    spark: SparkSession,
    path: str,
    max_rows: int,
    where: Where | None = None,
    columns: Sequence[str] | None = None,
    route_by: Where | None = None,
) -> pa.Table | DataFrame | None:
    """The table's rows to validate (``where``: the same filter for delta-rs and for Spark):
    Arrow read by delta-rs when ``check_route`` says they are few, else a Spark DataFrame; None when
    there is no table yet. ``route_by`` counts other rows of the table for that choice: the rows
    a derived frame is made of can be many more than the frame's."""
    dataset = delta_rows.dataset(spark, path)
    if dataset is None:
        return None
    arrow_filter = None if where is None else where[0]
    counted = arrow_filter if route_by is None else route_by[0]
    if check_route(dataset.count_rows(filter=counted), max_rows) == DRIVER:
        table: pa.Table = dataset.to_table(
            columns=None if columns is None else list(columns), filter=arrow_filter
        )
        return table
    df = spark.read.format("delta").load(path)
    df = df if where is None else df.where(where[1]())
    return df if columns is None else df.select(*columns)


def read_inputs(spark: SparkSession, cfg: AppConfig, since: datetime | None, max_rows: int) -> CheckInputs:
    """What a check validates: with ``since``, the ledger and group commits from ``since`` less
    ``WINDOW_OVERLAP``, and the checkpoint events of reconcile's look-back before it; else all.

    The checkpoint events take the window's route: the completion frame has a row per checkpoint
    of the window, however many events the look-back holds (a few narrow columns, which the
    driver aggregates in DuckDB)."""
    t = tables_from_config(cfg)
    start = None if since is None else since - WINDOW_OVERLAP
    context = None if start is None else start - timedelta(days=cfg.reconcile.baseline_lookback_days)
    window = None if start is None else ledger_window(start)
    return CheckInputs(
        ledger=read_for_check(spark, t.ledger, max_rows, window),
        checkpoints=read_for_check(
            spark,
            t.ledger,
            max_rows,
            checkpoint_events(context),
            ("job_name", "run_id", "checkpoint_id", "event_type", "event_time"),
            route_by=window,
        ),
        group_commits=read_for_check(
            spark, t.group_commits, max_rows, None if start is None else commits_window(start)
        ),
        findings=read_for_check(spark, t.findings, max_rows),
        partition_summary=read_for_check(spark, t.partition_summary, max_rows),
        since=start,
    )


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
) -> CheckSummary:
    """Read the audit tables, validate every suite, keep the outcomes and build Data Docs."""
    if not _RUN_ID.match(run_id):
        raise UsageError(f"run id {run_id!r}: use letters, digits and . _ : - only")
    opts = options or CheckOptions()
    evaluated_at = now or datetime.now(UTC)
    tables = tables_from_config(cfg)
    reconcile_run = opts.reconcile_run_id or latest_reconcile_run(spark, tables.runs)
    inputs = read_inputs(spark, cfg, opts.since, opts.driver_max_rows)
    docs_dir = data_docs_dir(cfg) if opts.build_docs else None
    suites, docs = validate_suites(
        all_suites(thresholds(cfg.checks)),
        build_frames(inputs, reconcile_run),
        run_id=run_id,
        now=evaluated_at,
        data_docs_dir=docs_dir,
    )
    results_path = tables.validation_results if opts.write_results else None
    summary = CheckSummary(run_id, evaluated_at, suites, reconcile_run, docs, results_path)
    if results_path and summary.outcomes:
        write_results(spark, results_path, summary)
    return summary
