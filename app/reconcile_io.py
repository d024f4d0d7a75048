"""Reading and writing for `reconcile` and `forensics`: Delta tables, the MERGE into findings, and
confirmation of suspected gaps against the source topic.

The sink is the only large input. It is read in full once, and only for the partitions and
offset ranges the window's checkpoints cover, through filters on its coordinate columns so Delta's
per-file min/max statistics skip every file outside them:

1. one aggregate per (topic, partition): rows, min, max and a fingerprint, the XOR of xxhash64 of
   every offset (``app.reconcile.sink_fingerprints``). Compared with the fingerprint of the offsets
   the range must hold, computed on the driver (``expected_fingerprint``, each offset once
   however many partitions share it), it proves most partitions complete at about the cost
   of a bare count;
2. the partitions that fail it, read again alone: a hash aggregate per 64-offset word (rows and a
   presence word, ``sink_words``), rolled up per 32768-offset bucket into count, distinct, min and
   max (``sink_bucket_stats``);
3. the few buckets that are not complete, read again alone for their presence words, which locate
   the missing ranges, and the buckets that hold more rows than distinct offsets, read again for
   their duplicate offsets.

The ledger window and the group's commits are small: they are read once into Arrow (by delta-rs
on local storage) and analysed on the driver (``app.ledger_audit``): findings, the ranges above,
restarts. Spark runs only the sink reads. The rows a run stores (findings, partition summary, the
run record) are likewise written from the driver (``app.delta_rows``).

Rows past the last completed checkpoint are counted by a tail-only read.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import reduce
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from app import delta_rows, incidents
from app import forensics as fx
from app import ledger_audit as la
from app import reconcile as rc
from app.config import AppConfig, KafkaConfig, ReconcileConfig
from app.errors import (
    ConfigError,
    InfrastructureError,
    KafkaUnavailableError,
    SchemaMismatchError,
    error_kind,
)
from app.ledger import is_local_path
from app.schemas import (
    FINDINGS_SCHEMA,
    GROUP_COMMITS_SCHEMA,
    INCIDENTS_SCHEMA,
    LEDGER_SCHEMA,
    PARTITION_SUMMARY_SCHEMA,
    RESTARTS_SCHEMA,
    SEVERITIES,
)

log = logging.getLogger(__name__)

# Successful runs of reconcile and forensics: where the next incremental window starts. Not a
# DESIGN section 4 table: it is bookkeeping of these two commands only.
AUDIT_RUNS_SCHEMA: Final = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("command", StringType(), False),
        StructField("jobs", StringType(), True),  # JSON list; [] = all jobs
        StructField("window_start", TimestampType(), True),
        StructField("window_end", TimestampType(), False),
        StructField("started_at", TimestampType(), False),
        StructField("finished_at", TimestampType(), False),
        StructField("status", StringType(), False),
    ]
)
RUN_SUCCEEDED: Final = "succeeded"
RUN_PENDING: Final = "pending"
RUN_FAILED: Final = "failed"
RUN_STATUSES: Final = (RUN_SUCCEEDED, RUN_PENDING, RUN_FAILED)
RESTARTS_KEY: Final = ("job_name", "run_id", "topic", "partition")
SINK_CANONICAL: Final = rc.SINK_COLUMNS
# Above this many ranges the sink filter is a bounding box plus a join (see SinkReader.where).
EXACT_FILTER_MAX_RANGES: Final = 16
RESTART_RANGES_DDL: Final = (
    "job_name string, run_id string, topic string, partition int, range_start long, range_end long"
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
        sink_by_job={} if sink_override else dict(r.sink_tables),
        sink_key="--sink" if sink_override else "reconcile.sink_table",
    )


# --- generic Delta helpers -----------------------------------------------------------------------


def read_delta(spark: SparkSession, path: str) -> DataFrame | None:
    """The table at ``path``, or None when there is none yet (a fresh deployment)."""
    try:
        if not DeltaTable.isDeltaTable(spark, path):
            return None
    except Exception as exc:
        # Broad on purpose: the storage client raises its own types (S3, ABFS, local IO).
        raise InfrastructureError(f"cannot access table storage at {path}: {exc}") from exc
    return spark.read.format("delta").load(path)


def empty(spark: SparkSession, schema: StructType) -> DataFrame:
    return spark.createDataFrame([], schema)


def merge_findings(spark: SparkSession, path: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Upsert by finding_id: a re-run updates what it sees again and keeps the first detected_at."""
    delta_rows.merge_rows(spark, path, FINDINGS_SCHEMA, rows, "finding_id", keep=("detected_at",))


def merge_incidents(spark: SparkSession, path: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Upsert by incident_id: a re-run over the same findings updates, never adds."""
    delta_rows.merge_rows(spark, path, INCIDENTS_SCHEMA, rows, "incident_id")


def resolved_incidents(spark: SparkSession, tables: Tables) -> set[str]:
    rows = delta_rows.read_columns(spark, tables.incidents, ["incident_id", "status"]) or []
    return {r["incident_id"] for r in rows if r["status"] == incidents.RESOLVED}


def mark_resolved(
    spark: SparkSession, cfg: AppConfig, row: Mapping[str, Any], repair: Mapping[str, Any]
) -> None:
    """Record a repair on its incident: status resolved, what was done inside the remedy."""
    plan = json.loads(row["remedy"] or "{}")
    plan["executed"] = dict(repair)
    updated = {**row, "status": incidents.RESOLVED, "remedy": json.dumps(plan, sort_keys=True, default=str)}
    merge_incidents(spark, tables_from_config(cfg).incidents, [updated])


def read_incidents(
    spark: SparkSession, cfg: AppConfig, *, jobs: Sequence[str] = (), since: datetime | None = None
) -> list[dict[str, Any]]:
    """Stored incidents, most severe first; only ``jobs`` (all when empty), only with evidence at or
    after ``since``."""
    rows = delta_rows.read_columns(spark, tables_from_config(cfg).incidents, INCIDENTS_SCHEMA.fieldNames())
    out = []
    for row in rows or []:
        row = {k: delta_rows.instant(v) for k, v in row.items()}
        if jobs and row["job_name"] not in jobs:
            continue
        last = row["last_evidence_at"]
        if since is not None and last is not None and last < since:
            continue
        out.append(row)
    return sorted(out, key=incidents.incident_order)


def _completed_offsets(ranges: Sequence[rc.PartitionRange]) -> dict[tuple[str, str, int], int]:
    """(job, topic, partition) -> the highest offset a completed checkpoint vouches for: where a
    restart from group offsets must resume to be exact."""
    return {
        (r.job_name, r.topic, r.partition): r.beyond_from if r.beyond_from is not None else r.hi
        for r in ranges
    }


def merge_restarts(spark: SparkSession, path: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Upsert restarts by (job, run, topic, partition): a re-run replaces what it classified before."""
    delta_rows.merge_rows(spark, path, RESTARTS_SCHEMA, rows, RESTARTS_KEY)


def last_window_end(spark: SparkSession, path: str, command: str, jobs: Sequence[str]) -> datetime | None:
    """Where the previous successful run of ``command`` over the same jobs stopped."""
    runs = delta_rows.read_columns(spark, path, ["command", "status", "jobs", "window_end"]) or []
    ends = [
        delta_rows.instant(r["window_end"])
        for r in runs
        if r["command"] == command and r["status"] == RUN_SUCCEEDED and r["jobs"] == json.dumps(sorted(jobs))
    ]
    return max(ends, default=None)


def record_run(
    spark: SparkSession,
    path: str,
    *,
    run_id: str,
    command: str,
    jobs: Sequence[str],
    window: rc.AuditWindow,
    started_at: datetime,
    finished_at: datetime,
    status: str = RUN_SUCCEEDED,
) -> None:
    """One row per run and command, upserted: only a ``succeeded`` row moves the next default
    window; ``failed`` and ``pending`` (a nightly step whose night has not finished) do not."""
    if status not in RUN_STATUSES:
        raise ValueError(f"run status {status!r} is not one of {RUN_STATUSES}")
    row = (
        run_id,
        command,
        json.dumps(sorted(jobs)),
        window.since,
        window.until,
        started_at,
        finished_at,
        status,
    )
    delta_rows.merge_rows(
        spark,
        path,
        AUDIT_RUNS_SCHEMA,
        [dict(zip(AUDIT_RUNS_SCHEMA.fieldNames(), row, strict=True))],
        ("run_id", "command"),
    )


def confirm_runs(spark: SparkSession, path: str, run_id: str) -> int:
    """Mark the ``pending`` runs recorded under ``run_id`` succeeded (a nightly whose every step
    finished); returns how many."""
    names = AUDIT_RUNS_SCHEMA.fieldNames()
    rows = delta_rows.read_columns(spark, path, names) or []
    pending = [
        {**r, "status": RUN_SUCCEEDED} for r in rows if r["run_id"] == run_id and r["status"] == RUN_PENDING
    ]
    delta_rows.merge_rows(spark, path, AUDIT_RUNS_SCHEMA, pending, ("run_id", "command"))
    return len(pending)


def record_failed_run(
    spark: SparkSession,
    path: str,
    run_id: str,
    command: str,
    jobs: Sequence[str],
    window: rc.AuditWindow,
    started_at: datetime,
) -> None:
    """Best effort: the run failed, and the storage that failed it may fail this write too."""
    try:
        record_run(
            spark,
            path,
            run_id=run_id,
            command=command,
            jobs=jobs,
            window=window,
            started_at=started_at,
            finished_at=datetime.now(UTC),
            status=RUN_FAILED,
        )
    except Exception:  # broad on purpose: the original failure is what the caller reports
        log.warning("could not record the failed %s run %s", command, run_id, exc_info=True)


def drop_orphan_summaries(spark: SparkSession, tables: Tables) -> None:
    """Remove partition_summary rows of reconcile runs that never finished (killed midway)."""
    summary = delta_rows.read_columns(spark, tables.partition_summary, ["reconcile_run_id"])
    if not summary:
        return
    runs = delta_rows.read_columns(spark, tables.runs, ["run_id", "command"]) or []
    done = {r["run_id"] for r in runs if r["command"] == "reconcile"}
    orphans = {r["reconcile_run_id"] for r in summary} - done
    if orphans:
        log.info("removing the partition summaries of %d unfinished run(s)", len(orphans))
        delta_rows.delete_where_in(spark, tables.partition_summary, "reconcile_run_id", orphans)


# --- reading the inputs --------------------------------------------------------------------------


def read_ledger(
    spark: SparkSession, path: str, window: rc.AuditWindow, jobs: Sequence[str], lookback_days: int
) -> DataFrame:
    df = read_delta(spark, path)
    if df is None:
        return empty(spark, LEDGER_SCHEMA)
    if window.since is not None:
        # event_date is the partition column: whole days before the look-back are never listed.
        first_day = (window.since - timedelta(days=lookback_days)).date()
        df = df.filter(F.col("event_date") >= F.lit(first_day))
    if jobs:
        df = df.filter(F.col("job_name").isin(list(jobs)))
    return df


def read_group_commits(
    spark: SparkSession, path: str, window: rc.AuditWindow, groups: Sequence[str], lookback_days: int
) -> DataFrame:
    df = read_delta(spark, path)
    if df is None or not groups:
        return empty(spark, GROUP_COMMITS_SCHEMA)
    df = df.filter(F.col("group_id").isin(list(groups)))
    if window.since is not None:
        first = window.since - timedelta(days=lookback_days)
        when = F.coalesce("commit_time", "log_time")
        df = df.filter(when.isNull() | (when >= F.lit(first)))
    return df


def read_ledger_rows(
    spark: SparkSession, path: str, window: rc.AuditWindow, jobs: Sequence[str], lookback_days: int
) -> pa.Table:
    """The window's ledger (with its look-back) as one Arrow table for the driver-side analysis.

    On local storage delta-rs reads it (about half a second for 800K rows, where a first Spark
    read plus conversion took 13 s); elsewhere Spark does, with the storage credentials.
    """
    if not is_local_path(path):
        return read_ledger(spark, path, window, jobs, lookback_days).toArrow()
    dataset = delta_rows.local_dataset(path)
    if dataset is None:
        return to_arrow_schema(LEDGER_SCHEMA).empty_table()
    keep = pc.scalar(True)
    if window.since is not None:
        keep = pc.field("event_date") >= pc.scalar((window.since - timedelta(days=lookback_days)).date())
    if jobs:
        keep = keep & pc.field("job_name").isin(list(jobs))
    return dataset.to_table(filter=keep)


def read_group_commit_rows(
    spark: SparkSession, path: str, window: rc.AuditWindow, groups: Sequence[str], lookback_days: int
) -> pa.Table:
    """The groups' commits (with the look-back) as one Arrow table, read as read_ledger_rows."""
    if not is_local_path(path):
        return read_group_commits(spark, path, window, groups, lookback_days).toArrow()
    dataset = delta_rows.local_dataset(path)
    if dataset is None or not groups:
        return to_arrow_schema(GROUP_COMMITS_SCHEMA).empty_table()
    rows = dataset.to_table(filter=pc.field("group_id").isin(list(groups)))
    if window.since is None:
        return rows
    when = pc.coalesce(rows.column("commit_time"), rows.column("log_time"))
    first = pa.scalar(window.since - timedelta(days=lookback_days), type=when.type)
    return rows.filter(pc.or_kleene(pc.is_null(when), pc.greater_equal(when, first)))


@dataclass(frozen=True)
class SinkColumns:
    topic: str
    partition: str
    offset: str
    checkpoint: str
    run: str


def sink_columns(cfg: AppConfig) -> SinkColumns:
    r = cfg.reconcile
    return SinkColumns(
        r.sink_topic_column,
        r.sink_partition_column,
        r.sink_offset_column,
        r.sink_checkpoint_column,
        r.sink_run_column,
    )


class SinkReader:
    """The sink of one job, read through coordinate filters (Delta file skipping) and renamed."""

    def __init__(self, df: DataFrame, cols: SinkColumns) -> None:
        missing = [c for c in (cols.topic, cols.partition, cols.offset) if c not in df.columns]
        if missing:
            raise SchemaMismatchError(f"sink lacks coordinate columns {missing}; has {df.columns}")
        self._df = df
        self._cols = cols

    def where(self, ranges: Iterable[tuple[str, int, int | None, int | None]]) -> DataFrame:
        """Rows of the given (topic, partition, start, end) ranges (None = unbounded), renamed to
        the canonical sink columns. The filter is on the table's own columns, before any projection,
        so Delta prunes files by their min/max statistics.

        A few ranges become one exact disjunction. Many would make a predicate too large for
        Spark's code generation (it then falls back to interpreting it for every row, several
        times slower than the scan itself), so they become one bounding box per topic, which Delta
        still prunes files with, followed by an exact broadcast join on (topic, partition).
        """
        c = self._cols
        wanted = list(ranges)
        if not wanted:
            raise ValueError("SinkReader.where needs at least one range")

        def bounded(term: Column, start: int | None, end: int | None) -> Column:
            if start is not None:
                term = term & (F.col(c.offset) >= F.lit(start))
            if end is not None:
                term = term & (F.col(c.offset) < F.lit(end))
            return term

        exact: DataFrame | None = None
        if len(wanted) <= EXACT_FILTER_MAX_RANGES:
            terms = [
                bounded((F.col(c.topic) == F.lit(t)) & (F.col(c.partition) == F.lit(p)), lo, hi)
                for t, p, lo, hi in wanted
            ]
            filtered = self._df.filter(reduce(lambda a, b: a | b, terms))
        else:
            boxes: dict[str, list[tuple[int, int | None, int | None]]] = defaultdict(list)
            for t, p, lo, hi in wanted:
                boxes[t].append((p, lo, hi))
            terms = []
            for t, parts in boxes.items():
                los, his = [lo for _, lo, _ in parts], [hi for _, _, hi in parts]
                term = (F.col(c.topic) == F.lit(t)) & F.col(c.partition).isin(
                    sorted({p for p, _, _ in parts})
                )
                terms.append(
                    bounded(
                        term,
                        None if None in los else min(x for x in los if x is not None),
                        None if None in his else max(x for x in his if x is not None),
                    )
                )
            filtered = self._df.filter(reduce(lambda a, b: a | b, terms))
            if all(len({(lo, hi) for _, lo, hi in parts}) == 1 for parts in boxes.values()):
                # Every partition of a topic wants the same range: the box is already exact.
                return self._canonical(filtered)
            exact = self._df.sparkSession.createDataFrame(
                wanted, "_w_topic string, _w_partition int, _w_start long, _w_end long"
            )

        out = self._canonical(filtered)
        if exact is None:
            return out
        inside = (
            (F.col("topic") == F.col("_w_topic"))
            & (F.col("partition") == F.col("_w_partition"))
            & (F.col("_w_start").isNull() | (F.col("offset") >= F.col("_w_start")))
            & (F.col("_w_end").isNull() | (F.col("offset") < F.col("_w_end")))
        )
        return out.join(F.broadcast(exact), on=inside, how="inner").select(*SINK_CANONICAL)

    def _canonical(self, filtered: DataFrame) -> DataFrame:
        c = self._cols

        def optional(name: str, alias: str, type_: str) -> Column:
            return (F.col(name) if name in self._df.columns else F.lit(None)).cast(type_).alias(alias)

        return filtered.select(
            F.col(c.topic).cast("string").alias("topic"),
            F.col(c.partition).cast("int").alias("partition"),
            F.col(c.offset).cast("long").alias("offset"),
            optional(c.checkpoint, "writer_checkpoint_id", "long"),
            optional(c.run, "writer_run_id", "string"),
        )


# --- gap confirmation against the source topic ---------------------------------------------------


@dataclass(frozen=True)
class SuspectedGap:
    topic: str
    partition: int
    start: int
    end: int  # exclusive


GapConfirmer = Callable[[Sequence[SuspectedGap]], list[dict[str, Any]]]


def kafka_gap_confirmer(
    kafka: KafkaConfig, bootstrap: str, *, max_records: int, timeout_s: float
) -> GapConfirmer:
    """A confirmer that reads exactly the suspected ranges back with a read_committed consumer.

    read_committed never returns transaction markers or aborted records, and compacted-away offsets
    simply do not exist any more, so a range that returns no record while it lies at or above the
    log start offset is benign. Below the log start offset retention has deleted the evidence:
    unverifiable. The cost is one seek and a few fetches per gap, whatever the topic's size.
    """

    def confirm(gaps: Sequence[SuspectedGap]) -> list[dict[str, Any]]:
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        from app.kafka_clients import is_retriable, librdkafka_conf
        from app.kafka_commit import watermarks

        if not gaps:
            return []
        conf = librdkafka_conf(
            kafka,
            bootstrap,
            **{
                "group.id": f"offset-audit-confirm-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            },
        )
        consumer = Consumer(conf)
        verdicts: list[dict[str, Any]] = []
        try:
            for gap in gaps:
                # Retries retriable errors (a leader moving) within timeout_s, then KafkaUnavailableError.
                tp = (gap.topic, gap.partition)
                low, high = watermarks(consumer, [tp], timeout_s)[tp]
                verdict: dict[str, Any] = {"log_start_offset": low, "high_watermark": high}
                below = max(0, min(gap.end, low) - gap.start)
                start, end = max(gap.start, low), min(gap.end, high)
                sample: list[int] = []
                found, capped, finished = 0, False, True
                if start < end:
                    consumer.assign([TopicPartition(gap.topic, gap.partition, start)])
                    deadline = time.monotonic() + timeout_s
                    finished = False
                    while time.monotonic() < deadline:
                        msg = consumer.poll(min(1.0, max(0.0, deadline - time.monotonic())))
                        if msg is None:
                            continue
                        err = msg.error()
                        if err is not None:
                            if err.code() == KafkaError._PARTITION_EOF:
                                finished = True
                                break
                            if is_retriable(err):
                                continue  # librdkafka fetches again by itself; the deadline bounds it
                            raise KafkaUnavailableError(f"reading {gap.topic}/{gap.partition}: {err.str()}")
                        offset = msg.offset()
                        if offset is None or offset >= end:
                            finished = True
                            break
                        if offset >= start:
                            found += 1
                            if len(sample) < 10:
                                sample.append(offset)
                            if found >= max_records:
                                capped = finished = True
                                break
                    consumer.unassign()
                verdict.update(
                    {
                        "data_records": found,
                        "data_records_capped": capped,
                        "sample_offsets": sample,
                        "offsets_below_log_start": below,
                        "offsets_beyond_high_watermark": max(0, gap.end - max(high, gap.start)),
                    }
                )
                if found:
                    verdict["status"] = rc.CONFIRMED
                elif not finished:
                    # Could not see the range in time: an audit failure, not a verdict on the data.
                    raise KafkaUnavailableError(
                        f"reading {gap.topic}/{gap.partition} [{start}, {end}) from {bootstrap} "
                        f"did not finish within {timeout_s:.0f}s"
                    )
                elif below:
                    verdict["status"] = rc.UNVERIFIABLE
                else:
                    verdict["status"] = rc.BENIGN
                    verdict["explanation"] = (
                        "no committed data records: transaction markers, aborted or compacted"
                    )
                verdicts.append(verdict)
        finally:
            consumer.close()
        return verdicts

    return confirm


def unavailable_confirmer(reason: KafkaUnavailableError) -> GapConfirmer:
    """A confirmer for when Kafka could not even be located: fails the run if there are gaps."""

    def confirm(gaps: Sequence[SuspectedGap]) -> list[dict[str, Any]]:
        if not gaps:
            return []
        raise KafkaUnavailableError(f"cannot confirm {len(gaps)} suspected gap(s): {reason}") from reason

    return confirm


# --- reconcile -----------------------------------------------------------------------------------


@dataclass
class ReconcileResult:
    run_id: str
    window: rc.AuditWindow
    jobs: list[str]
    partitions: int = 0
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (finding_type, severity) -> n
    new_findings: int = 0
    gaps_suspected: int = 0
    confirmation: str = "not needed"
    top: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    sink_seconds: float = 0.0  # of `seconds`, spent reading the sink
    incidents: list[dict[str, Any]] = field(default_factory=list)  # incidents contract rows
    audited_jobs: list[str] = field(default_factory=list)  # the jobs the window held

    def worst(self) -> str | None:
        present = {sev for (_, sev), n in self.counts.items() if n}
        return next((s for s in SEVERITIES if s in present), None)


def _rows_to_ranges(rows: Iterable[Any]) -> list[rc.PartitionRange]:
    return [
        rc.PartitionRange(
            job_name=r["job_name"],
            group_id=r["group_id"],
            topic=r["topic"],
            partition=r["partition"],
            lo=r["lo"],
            hi=r["hi"],
            lo_source=r["lo_source"],
            hi_checkpoint_id=r["hi_checkpoint_id"],
            hi_run_id=r["hi_run_id"],
            beyond_from=r["beyond_from"],
            last_checkpoint_id=r["last_checkpoint_id"],
            last_checkpoint_offset=r["last_checkpoint_offset"],
            last_completed_at=r["last_completed_at"],
        )
        for r in rows
    ]


@dataclass
class SinkOutcome:
    rows: list[dict[str, Any]] = field(default_factory=list)  # FINDING_CORE dicts
    stats: dict[tuple[str, str, int], rc.PartitionSink] = field(default_factory=dict)
    gaps: list[tuple[rc.PartitionRange, int, int]] = field(default_factory=list)


def examine_sink(
    spark: SparkSession, sink: SinkReader, ranges: Sequence[rc.PartitionRange], active_run: str | None
) -> SinkOutcome:
    """GAP candidates, DUPLICATE and SINK_BEYOND_CHECKPOINT rows of one job's sink."""
    out = SinkOutcome()
    if not ranges:
        return out
    by_tp = {(r.topic, r.partition): r for r in ranges}
    job = ranges[0].job_name
    covered = [(r.topic, r.partition, r.lo, r.hi) for r in ranges if r.lo is None or r.hi > r.lo]
    per_tp: dict[tuple[str, int], list[rc.BucketStat]] = defaultdict(list)
    bitmaps: dict[tuple[str, int], dict[int, bytes]] = defaultdict(dict)
    sinks: dict[tuple[str, int], rc.PartitionSink] = {}
    proven: dict[tuple[str, int], rc.PartitionSink] = {}
    if covered:
        topics = sorted({t for t, _, _, _ in covered})
        started = time.monotonic()
        proven, with_rows = _prove_complete(spark, sink, covered, by_tp, topics)
        sinks.update(proven)
        log.info(
            "sink of %s: %d of %d partitions proven complete by count and fingerprint in %.1fs",
            job,
            len(proven),
            len(covered),
            time.monotonic() - started,
        )
        # The rest is examined per bucket, reading only its partitions (Delta skips the others).
        rest = [c for c in covered if (c[0], c[1]) in with_rows and (c[0], c[1]) not in proven]
        if rest:
            started = time.monotonic()
            for row in rc.sink_bucket_stats(rc.sink_words(sink.where(rest), topics)).collect():
                per_tp[(row["topic"], row["partition"])].append(
                    rc.BucketStat(
                        row["bucket"], row["rows"], row["distinct"], row["min_offset"], row["max_offset"]
                    )
                )
        # Incomplete buckets are read again, alone (Delta skips every other file), for their
        # presence words: cheaper than keeping the words of the whole sink around.
        inspect: list[tuple[str, int, int | None, int | None]] = []
        for tp, rng in by_tp.items():
            if tp in proven:
                continue
            ps = sinks[tp] = rc.PartitionSink.of(per_tp.get(tp, []))
            lo = rc.effective_lo(rng, ps)
            if not rc.is_complete(lo, rng.hi, ps):
                inspect += [
                    (tp[0], tp[1], max(lo, b * rc.BUCKET_SIZE), min(rng.hi, (b + 1) * rc.BUCKET_SIZE))
                    for b in rc.buckets_to_inspect(lo, rng.hi, ps)
                ]
        if inspect:
            found: dict[tuple[str, int, int], list[tuple[int, int]]] = defaultdict(list)
            for row in rc.sink_words(sink.where(inspect), topics).collect():
                b = row["word"] * rc.WORD_BITS // rc.BUCKET_SIZE
                found[(row["topic"], row["partition"], b)].append((row["word"], row["bits"]))
            for (topic, partition, b), bucket_words in found.items():
                bitmaps[(topic, partition)][b] = rc.bucket_bitmap(b, bucket_words)
        if rest:
            log.info(
                "sink of %s: %d partition(s) examined per bucket (%d bucket(s) decoded) in %.1fs",
                job,
                len(rest),
                len(inspect),
                time.monotonic() - started,
            )

    dup_ranges: list[tuple[str, int, int | None, int | None]] = []
    for tp, rng in by_tp.items():
        ps = sinks.get(tp, rc.PartitionSink())  # absent: nothing covered, so nothing was read
        out.stats[(job, tp[0], tp[1])] = ps
        if tp in proven:
            continue
        lo = rc.effective_lo(rng, ps)
        for start, end in rc.missing_ranges(lo, rng.hi, ps, bitmaps.get(tp, {})):
            out.gaps.append((rng, start, end))
        for b in rc.duplicate_buckets(ps):
            dup_ranges.append((tp[0], tp[1], b * rc.BUCKET_SIZE, (b + 1) * rc.BUCKET_SIZE))
    if dup_ranges:
        for run in rc.duplicate_runs(sink.where(dup_ranges)).collect():
            out.rows.append(rc.duplicate_finding(by_tp[(run["topic"], run["partition"])], run.asDict()))

    tails = [(r.topic, r.partition, r.beyond_from, None) for r in ranges if r.beyond_from is not None]
    if tails:
        beyond = sink.where(tails)
        if active_run is not None:
            # Rows of the batch the live run is writing right now are not beyond anything yet.
            beyond = beyond.filter(
                F.col("writer_run_id").isNotNull() & (F.col("writer_run_id") != active_run)
            )
        agg = beyond.groupBy("topic", "partition").agg(
            F.count("*").alias("rows"),
            F.max("offset").alias("max_offset"),
            F.slice(F.array_sort(F.collect_set("writer_run_id")), 1, 10).alias("runs"),
            F.slice(F.array_sort(F.collect_set("writer_checkpoint_id")), 1, 20).alias("checkpoints"),
        )
        for row in agg.collect():
            rng = by_tp[(row["topic"], row["partition"])]
            out.rows.append(rc.beyond_finding(rng, row.asDict()))
    return out


def _prove_complete(
    spark: SparkSession,
    sink: SinkReader,
    covered: Sequence[tuple[str, int, int | None, int]],
    by_tp: Mapping[tuple[str, int], rc.PartitionRange],
    topics: Sequence[str],
) -> tuple[dict[tuple[str, int], rc.PartitionSink], set[tuple[str, int]]]:
    """One scan of the covered ranges: the partitions proven complete by count and fingerprint,
    with their statistics, and the set of every partition that has rows in its range."""
    started = time.monotonic()
    prints = {
        (r["topic"], r["partition"]): r for r in rc.sink_fingerprints(sink.where(covered), topics).collect()
    }
    scanned = time.monotonic()
    candidates: dict[tuple[str, int], tuple[int, int]] = {}
    for tp, row in prints.items():
        rng = by_tp[tp]
        lo = row["min_offset"] if rng.lo is None else rng.lo
        # Only ranges the sink holds exactly as many rows of are worth an expected fingerprint, so
        # offsets are generated for no more than the rows just read.
        if row["rows"] == rng.hi - lo:
            candidates[tp] = (lo, rng.hi)
    segments = rc.elementary_segments(candidates.values())
    expected = {(a, b): rc.expected_fingerprint(a, b) for a, b in segments}
    log.debug(
        "fingerprints: sink scan %.1fs, expected fingerprints of %d offsets %.1fs",
        scanned - started,
        sum(b - a for a, b in segments),
        time.monotonic() - scanned,
    )
    proven = {}
    for tp, (lo, hi) in candidates.items():
        row = prints[tp]
        if rc.proven_complete(
            lo,
            hi,
            row["rows"],
            row["min_offset"],
            row["max_offset"],
            row["fingerprint"],
            rc.range_fingerprint(lo, hi, expected),
        ):
            # Complete: every offset once, so distinct offsets equal rows.
            proven[tp] = rc.PartitionSink(row["rows"], row["rows"], row["min_offset"], row["max_offset"])
    return proven, set(prints)


def observed_in_restart_ranges(
    spark: SparkSession, sink: SinkReader, restarts: Sequence[Mapping[str, Any]]
) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    """Per restart and partition: offsets present and duplicate copies the sink holds in the range
    the restart replayed or skipped. Only those ranges are read; no range, no read."""
    ranges = fx.restart_ranges(restarts)
    if not ranges:
        return {}
    copies = (
        sink.where([(r["topic"], r["partition"], r["range_start"], r["range_end"]) for r in ranges])
        .groupBy("topic", "partition", "offset")
        .agg(F.count("*").alias("_copies"))
    )
    rdf = spark.createDataFrame(ranges, RESTART_RANGES_DDL)
    joined = rdf.join(
        copies,
        on=(rdf["topic"] == copies["topic"])
        & (rdf["partition"] == copies["partition"])
        & (copies["offset"] >= rdf["range_start"])
        & (copies["offset"] < rdf["range_end"]),
        how="left",
    )
    rows = joined.groupBy(rdf["job_name"], rdf["run_id"], rdf["topic"], rdf["partition"]).agg(
        F.coalesce(F.sum(copies["_copies"] - 1), F.lit(0)).cast("long").alias("duplicates_observed"),
        F.count(copies["offset"]).alias("present_offsets"),
    )
    return {(r["job_name"], r["run_id"], r["topic"], r["partition"]): r.asDict() for r in rows.collect()}


def match_rules(r: ReconcileConfig) -> rc.MatchRules:
    return rc.MatchRules(r.commit_match_window_s, r.clock_skew_s, r.run_silence_s)


def last_ingest_time(spark: SparkSession, path: str) -> datetime | None:
    """When ingest-offsets last stored its positions: group_commits holds every commit made
    before then, which is what lets a stopped job's last checkpoints be judged."""
    rows = delta_rows.read_columns(spark, path, ["updated_at"]) or []
    times = [delta_rows.instant(r["updated_at"]) for r in rows if r["updated_at"] is not None]
    return max(times, default=None)


def _ledger_audit(
    spark: SparkSession,
    tables: Tables,
    window: rc.AuditWindow,
    rules: rc.MatchRules,
    jobs: Sequence[str],
    groups: Sequence[str],
    lookback_days: int,
) -> la.LedgerAudit:
    """The window's ledger and the group's commits, read once and loaded for the driver-side
    analysis (app.ledger_audit): they are small next to the sink, which alone Spark scans."""
    started = time.monotonic()
    ledger = read_ledger_rows(spark, tables.ledger, window, jobs, lookback_days)
    group_list = sorted(set(groups) or la.ledger_groups(ledger))
    commits = read_group_commit_rows(spark, tables.group_commits, window, group_list, lookback_days)
    log.info(
        "ledger window: %d ledger rows, %d group commits of %d group(s), read in %.1fs",
        ledger.num_rows,
        commits.num_rows,
        len(group_list),
        time.monotonic() - started,
    )
    return la.LedgerAudit(ledger, commits, window, rules, last_ingest_time(spark, tables.ingest_positions))


def run_reconcile(
    spark: SparkSession,
    cfg: AppConfig,
    *,
    run_id: str,
    now: datetime,
    since: datetime | None,
    until: datetime | None,
    jobs: Sequence[str] = (),
    sink_override: str | None = None,
    confirmer: GapConfirmer | None = None,
    status: str = RUN_SUCCEEDED,
) -> ReconcileResult:
    """The whole reconciliation: read, detect, confirm gaps, MERGE findings, write partition_summary.

    ``since`` None means: where the last successful run over the same jobs stopped (or all history).
    ``confirmer`` None leaves gaps 'open' and says so in their evidence. An audit that cannot see
    (a missing sink table: ConfigError; Kafka unreachable for confirmation, storage, Spark:
    InfrastructureError) raises before it writes any finding, and its run never moves the window.
    ``status`` is what a run that finished is recorded as (a nightly records ``pending`` until its
    last step is done).
    """
    started = time.monotonic()
    r = cfg.reconcile
    tables = tables_from_config(cfg, sink_override)
    job_list = sorted(set(jobs) or set(r.jobs))
    if since is None:
        since = last_window_end(spark, tables.runs, "reconcile", job_list)
    window = rc.AuditWindow(until=until or now, since=since)
    rules = match_rules(r)
    result = ReconcileResult(run_id=run_id, window=window, jobs=job_list)
    try:
        audit = _ledger_audit(spark, tables, window, rules, job_list, r.groups, r.baseline_lookback_days)
        try:
            _reconcile_inputs(spark, cfg, tables, audit, result, now, confirmer)
        finally:
            audit.close()
    except Exception as exc:  # broad on purpose: a run that could not see is recorded, then re-raised
        if error_kind(exc) != "usage":  # a usage error (a missing sink) writes nothing at all
            record_failed_run(spark, tables.runs, run_id, "reconcile", job_list, window, now)
        raise
    record_run(
        spark,
        tables.runs,
        run_id=run_id,
        command="reconcile",
        jobs=job_list,
        window=window,
        started_at=now,
        finished_at=now + timedelta(seconds=time.monotonic() - started),
        status=status,
    )
    result.seconds = time.monotonic() - started
    return result


def _reconcile_inputs(
    spark: SparkSession,
    cfg: AppConfig,
    tables: Tables,
    audit: la.LedgerAudit,
    result: ReconcileResult,
    now: datetime,
    confirmer: GapConfirmer | None,
) -> None:
    started = time.monotonic()
    ledger_local = rc.finalize_findings(audit.all_findings(), result.run_id, now)
    log.info("ledger and commit findings: %d in %.1fs", len(ledger_local), time.monotonic() - started)
    sink_local, ranges, stats = _sink_and_restart_findings(spark, cfg, tables, audit, result, now, confirmer)
    local = rc.one_per_finding_id([*ledger_local, *sink_local])
    found = incidents.group_findings(local)
    result.incidents = incidents.carry_resolution(
        incidents.to_rows(found, result.run_id, _completed_offsets(ranges)), resolved_incidents(spark, tables)
    )
    result.audited_jobs = sorted(
        {r.job_name for r in ranges} | {f["job_name"] for f in local if f["job_name"]}
    )
    # Everything is known before the first write: a failure above leaves the tables untouched.
    drop_orphan_summaries(spark, tables)
    merge_findings(spark, tables.findings, local)
    merge_incidents(spark, tables.incidents, result.incidents)
    result.top = sorted(local, key=rc.finding_order)[:10]
    by_type: dict[tuple[str, str, int], dict[str, int]] = defaultdict(dict)
    for f in local:
        key = (f["finding_type"], f["severity"])
        result.counts[key] = result.counts.get(key, 0) + 1
        if f["topic"] is not None and f["partition"] is not None:
            tp_counts = by_type[(f["job_name"], f["topic"], f["partition"])]
            tp_counts[f["finding_type"]] = tp_counts.get(f["finding_type"], 0) + 1
    _write_summary(spark, tables, result.run_id, ranges, stats, by_type, audit.latest_commits())


def _sink_and_restart_findings(
    spark: SparkSession,
    cfg: AppConfig,
    tables: Tables,
    audit: la.LedgerAudit,
    result: ReconcileResult,
    now: datetime,
    confirmer: GapConfirmer | None,
) -> tuple[list[dict[str, Any]], list[rc.PartitionRange], dict[tuple[str, str, int], rc.PartitionSink]]:
    """GAP, DUPLICATE, SINK_BEYOND_CHECKPOINT and RESTART_* findings, finalized as local rows, with
    the covered ranges and the sink's statistics per partition."""
    # The sink, job by job (each job may have its own sink table).
    ranges = _rows_to_ranges(audit.coverage())
    result.partitions = len(ranges)
    active = audit.active_runs()
    by_job: dict[str, list[rc.PartitionRange]] = defaultdict(list)
    for rng in ranges:
        by_job[rng.job_name].append(rng)
    restart_rows = audit.restarts()
    sink_rows: list[dict[str, Any]] = []
    stats: dict[tuple[str, str, int], rc.PartitionSink] = {}
    gaps: list[tuple[rc.PartitionRange, int, int]] = []
    observed: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    cols = sink_columns(cfg)
    sink_started = time.monotonic()
    for job in sorted(set(by_job) | {r["job_name"] for r in restart_rows}):
        df = read_delta(spark, tables.sink_for(job))
        if df is None:
            # Not an empty sink: the audit cannot see, so it claims nothing (DESIGN section 5).
            raise ConfigError(
                tables.sink_key_for(job),
                f"no Delta table at {tables.sink_for(job)} (the sink of job {job}); nothing was written",
            )
        sink = SinkReader(df, cols)
        outcome = examine_sink(spark, sink, by_job.get(job, []), active.get(job))
        sink_rows += outcome.rows
        stats.update(outcome.stats)
        gaps += outcome.gaps
        observed.update(
            observed_in_restart_ranges(spark, sink, [r for r in restart_rows if r["job_name"] == job])
        )

    result.sink_seconds = time.monotonic() - sink_started
    result.gaps_suspected = len(gaps)
    verdicts: list[dict[str, Any] | None] = [None] * len(gaps)
    if gaps and confirmer is not None:
        # A failure here propagates: unconfirmed gaps written as findings would claim a loss the
        # audit could not check, and the next run must look at them again.
        verdicts = list(confirmer([SuspectedGap(g.topic, g.partition, s, e) for g, s, e in gaps]))
        result.confirmation = f"{len(gaps)} gap(s) read back from Kafka"
    elif gaps:
        result.confirmation = "disabled: gaps left open"
    judged = [(rng, start, end, v) for (rng, start, end), v in zip(gaps, verdicts, strict=True)]
    sink_rows += rc.gap_findings(judged)

    core = [*fx.find_restart_anomalies(restart_rows, observed), *sink_rows]
    return rc.finalize_findings(core, result.run_id, now), ranges, stats


def _write_summary(
    spark: SparkSession,
    tables: Tables,
    run_id: str,
    ranges: Sequence[rc.PartitionRange],
    stats: Mapping[tuple[str, str, int], rc.PartitionSink],
    by_type: Mapping[tuple[str, str, int], Mapping[str, int]],
    latest: Mapping[tuple[str | None, str, int], tuple[int | None, datetime | None]],
) -> None:
    rows = []
    for rng in ranges:
        ps = stats.get((rng.job_name, rng.topic, rng.partition), rc.PartitionSink())
        committed, commit_time = latest.get((rng.group_id, rng.topic, rng.partition), (None, None))
        lag = (
            None
            if committed is None or rng.last_checkpoint_offset is None
            else rng.last_checkpoint_offset - committed
        )
        lag_s = (
            None
            if commit_time is None or rng.last_completed_at is None
            else int((rng.last_completed_at - commit_time).total_seconds())
        )
        rows.append(
            (
                run_id,
                rng.job_name,
                rng.group_id,
                rng.topic,
                rng.partition,
                ps.rows,
                ps.distinct,
                ps.min_offset,
                ps.max_offset,
                rng.last_checkpoint_id,
                rng.last_checkpoint_offset,
                committed,
                commit_time,
                lag,
                lag_s,
                json.dumps(dict(sorted(by_type.get((rng.job_name, rng.topic, rng.partition), {}).items()))),
            )
        )
    # One append is one Delta commit: a run killed before it leaves nothing half-written.
    names = PARTITION_SUMMARY_SCHEMA.fieldNames()
    delta_rows.append_rows(
        spark,
        tables.partition_summary,
        PARTITION_SUMMARY_SCHEMA,
        [dict(zip(names, row, strict=True)) for row in rows],
    )


# --- forensics -----------------------------------------------------------------------------------


@dataclass
class ForensicsResult:
    run_id: str
    window: rc.AuditWindow
    jobs: list[str]
    restarts: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)


def run_forensics(
    spark: SparkSession,
    cfg: AppConfig,
    *,
    run_id: str,
    now: datetime,
    since: datetime | None,
    until: datetime | None,
    jobs: Sequence[str] = (),
    sink_override: str | None = None,
    status: str = RUN_SUCCEEDED,
) -> ForensicsResult:
    """Classify every run start in the window; MERGE restarts and RESTART_* findings."""
    r = cfg.reconcile
    tables = tables_from_config(cfg, sink_override)
    job_list = sorted(set(jobs) or set(r.jobs))
    if since is None:
        since = last_window_end(spark, tables.runs, "forensics", job_list)
    window = rc.AuditWindow(until=until or now, since=since)
    rules = match_rules(r)
    result = ForensicsResult(run_id=run_id, window=window, jobs=job_list)
    audit = _ledger_audit(spark, tables, window, rules, job_list, r.groups, r.baseline_lookback_days)
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
    merge_findings(
        spark,
        tables.findings,
        rc.finalize_findings(fx.find_restart_anomalies(restart_rows, observed), run_id, now),
    )
    result.restarts = sorted(table, key=lambda row: (row["started_at"], row["topic"], row["partition"]))
    for row in result.restarts:
        key = (row["classification"], "")
        result.counts[key] = result.counts.get(key, 0) + 1
    record_run(
        spark,
        tables.runs,
        run_id=run_id,
        command="forensics",
        jobs=job_list,
        window=window,
        started_at=now,
        finished_at=now,
        status=status,
    )
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
    commit_rows: list[dict[str, Any]] = []
    gc = read_delta(spark, tables.group_commits)
    if gc is not None and groups:
        commit_rows = [
            r.asDict()
            for r in gc.filter(
                F.col("group_id").isin(groups)
                & F.coalesce("commit_time", "log_time").between(F.lit(lo), F.lit(hi))
            )
            .limit(5000)
            .collect()
        ]
    restart_rows: list[dict[str, Any]] = []
    rs = read_delta(spark, tables.restarts)
    if rs is not None:
        restart_rows = [
            r.asDict()
            for r in rs.filter(
                (F.col("job_name") == job) & F.col("started_at").between(F.lit(lo), F.lit(hi))
            ).collect()
        ]
    finding_rows: list[dict[str, Any]] = []
    fs = read_delta(spark, tables.findings)
    if fs is not None and runs:
        finding_rows = [
            r.asDict()
            for r in fs.filter(
                (F.col("job_name") == job) & (F.col("run_id").isin(runs) | F.col("run_id").isNull())
            )
            .orderBy(F.array_position(F.array(*[F.lit(s) for s in SEVERITIES]), F.col("severity")))
            .limit(50)
            .collect()
        ]
    incident_rows = [
        i
        for i in read_incidents(spark, cfg, jobs=[job])
        if set(i["run_ids"] or []) & set(runs)
        or (i["last_evidence_at"] is not None and lo <= i["last_evidence_at"] <= hi)
    ]
    return fx.timeline_entries(ledger_rows, commit_rows, restart_rows, finding_rows, incident_rows)
