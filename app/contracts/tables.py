"""Table contracts of CONTRACTS.md section 4, one StructType constant each.

Everything that reads or writes a table checks against these constants, so a contract change is a
change in exactly one place (plus the code that needs the new column).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from pyspark.sql import DataFrame
from pyspark.sql import types as t
from pyspark.sql.types import DataType, StructType

from app.errors import SchemaMismatchError

# --- the contracts' spelling ----------------------------------------------------------------------

# The column types the contracts use, by their Spark SQL names.
_TYPES: Final[dict[str, DataType]] = {
    "STRING": t.StringType(), "BIGINT": t.LongType(), "INT": t.IntegerType(), "BOOLEAN": t.BooleanType(),
    "DATE": t.DateType(), "DOUBLE": t.DoubleType(), "TIMESTAMP": t.TimestampType(), "BINARY": t.BinaryType(),
}  # fmt: skip


def _column_type(name: str) -> DataType:
    if name.startswith("ARRAY<") and name.endswith(">"):
        return t.ArrayType(_column_type(name[len("ARRAY<") : -1]))
    if name not in _TYPES:
        raise ValueError(f"unknown column type {name!r} in a table contract")
    return _TYPES[name]


def schema(columns: str) -> StructType:
    """A StructType from a column list in Spark's DDL spelling: `name TYPE [NOT NULL], ...`.

    Pure Python on purpose (Spark's own DDL parser needs a running JVM, and the contracts are read
    by JVM-free code and tests too); it knows exactly the types the contracts use."""
    fields = []
    for column in (c.split() for c in columns.split(",")):
        nullable = column[2:] != ["NOT", "NULL"]
        if len(column) != (2 if nullable else 4):
            raise ValueError(f"cannot read column {' '.join(column)!r} of a table contract")
        fields.append(t.StructField(column[0], _column_type(column[1]), nullable))
    return StructType(fields)


# --- tables --------------------------------------------------------------------------------------

LEDGER_SCHEMA: Final = schema(
    """
    job_name STRING NOT NULL, run_id STRING NOT NULL, engine STRING NOT NULL, checkpoint_id BIGINT,
    event_type STRING NOT NULL, event_time TIMESTAMP NOT NULL, group_id STRING, topic STRING,
    partition INT, offset BIGINT, raw_offset BIGINT, offset_semantics STRING, detail STRING,
    event_date DATE NOT NULL
    """
)

SINK_SCHEMA: Final = schema(
    """
    kafka_topic STRING NOT NULL, kafka_partition INT NOT NULL, kafka_offset BIGINT NOT NULL,
    kafka_timestamp TIMESTAMP, _checkpoint_id BIGINT, _run_id STRING, key BINARY, value BINARY
    """
)

GROUP_COMMITS_SCHEMA: Final = schema(
    """
    group_id STRING NOT NULL, topic STRING NOT NULL, partition INT NOT NULL, committed_offset BIGINT,
    leader_epoch INT, metadata STRING, commit_time TIMESTAMP, expire_time TIMESTAMP,
    record_kind STRING NOT NULL, value_version INT, transactional BOOLEAN, log_partition INT,
    log_offset BIGINT, log_time TIMESTAMP, ingest_run_id STRING NOT NULL
    """
)

# record_kind: 'metadata' | 'tombstone'
# members: JSON list of {member_id, client_id, client_host, ...}
GROUP_EVENTS_SCHEMA: Final = schema(
    """
    group_id STRING NOT NULL, record_kind STRING NOT NULL, value_version INT, protocol_type STRING,
    generation INT, protocol STRING, leader STRING, state_time TIMESTAMP, members STRING,
    log_partition INT NOT NULL, log_offset BIGINT NOT NULL, log_time TIMESTAMP,
    ingest_run_id STRING NOT NULL
    """
)

DECODE_ERRORS_SCHEMA: Final = schema(
    """
    log_partition INT NOT NULL, log_offset BIGINT NOT NULL, log_time TIMESTAMP, raw_key BINARY,
    raw_value BINARY, reason STRING NOT NULL, ingest_run_id STRING NOT NULL
    """
)

INGEST_POSITIONS_SCHEMA: Final = schema(
    """
    log_partition INT NOT NULL, next_offset BIGINT NOT NULL, ingest_run_id STRING NOT NULL,
    updated_at TIMESTAMP NOT NULL
    """
)

FINDINGS_SCHEMA: Final = schema(
    """
    finding_id STRING NOT NULL, reconcile_run_id STRING NOT NULL, detected_at TIMESTAMP NOT NULL,
    finding_type STRING NOT NULL, severity STRING NOT NULL, status STRING NOT NULL, job_name STRING,
    group_id STRING, topic STRING, partition INT, checkpoint_id BIGINT, run_id STRING,
    offset_start BIGINT, offset_end BIGINT, record_count BIGINT, evidence STRING
    """
)

# findings_by_type: JSON object finding_type -> count
PARTITION_SUMMARY_SCHEMA: Final = schema(
    """
    reconcile_run_id STRING NOT NULL, job_name STRING NOT NULL, group_id STRING, topic STRING NOT NULL,
    partition INT NOT NULL, sink_count BIGINT, sink_distinct BIGINT, sink_min_offset BIGINT,
    sink_max_offset BIGINT, last_checkpoint_id BIGINT, last_checkpoint_offset BIGINT,
    last_committed_offset BIGINT, last_commit_time TIMESTAMP, commit_lag_offsets BIGINT,
    commit_lag_seconds BIGINT, findings_by_type STRING
    """
)

# remedy: JSON: the plan
INCIDENTS_SCHEMA: Final = schema(
    """
    incident_id STRING NOT NULL, kind STRING NOT NULL, severity STRING NOT NULL, status STRING NOT NULL,
    job_name STRING, group_id STRING, run_ids ARRAY<STRING>, first_evidence_at TIMESTAMP,
    last_evidence_at TIMESTAMP, partitions INT, records_lost BIGINT, records_unverifiable BIGINT,
    records_duplicated BIGINT, records_replayed BIGINT, max_commit_lag BIGINT, cause STRING,
    remedy STRING, finding_ids ARRAY<STRING>, reconcile_run_id STRING NOT NULL
    """
)

RESTARTS_SCHEMA: Final = schema(
    """
    job_name STRING NOT NULL, run_id STRING NOT NULL, previous_run_id STRING,
    started_at TIMESTAMP NOT NULL, group_id STRING, topic STRING NOT NULL, partition INT NOT NULL,
    resumed_offset BIGINT, resume_source STRING, previous_checkpoint_offset BIGINT,
    group_committed_offset BIGINT, classification STRING NOT NULL, records_replayed BIGINT,
    records_skipped BIGINT, duplicates_observed BIGINT, forensics_run_id STRING NOT NULL
    """
)


def require_columns(df: DataFrame, columns: Iterable[str], table: str) -> None:
    """Fail early, naming the table and the missing columns, instead of deep inside a plan."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SchemaMismatchError(f"{table} lacks required columns {missing}; has {df.columns}")


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Select exactly the contract's columns, in order and cast to the contract's types."""
    require_columns(df, schema.fieldNames(), "frame")
    return df.select(*[df[f.name].cast(f.dataType).alias(f.name) for f in schema.fields])


# The runs of reconcile and forensics (CONTRACTS.md section 4): where the next incremental window
# starts. Bookkeeping of these two commands only.
# jobs: JSON list; [] = all jobs
# ledger_version: the ledger's Delta version the run read (null: no ledger yet, or a table written
# before the column was added, which gains it at its next write)
AUDIT_RUNS_SCHEMA: Final = schema(
    """
    run_id STRING NOT NULL, command STRING NOT NULL, jobs STRING, window_start TIMESTAMP,
    window_end TIMESTAMP NOT NULL, started_at TIMESTAMP NOT NULL, finished_at TIMESTAMP NOT NULL,
    status STRING NOT NULL, ledger_version BIGINT
    """
)

# Completeness per job, topic, partition and event-time window (CONTRACTS.md section 4). The window's
# offsets are [offset_start, offset_end), its bounds mapped by the broker's offsets-for-times lookup.
# expected = landed + lost + unverifiable + pending (data records only: transaction markers, aborted and
# compacted offsets are excluded); pending = offsets not yet judged (beyond the job's last completed
# checkpoint). completeness = landed / expected. Columns a sink mode cannot know are null, never guessed:
# `delta_batches` knows lost batches (lost, unverifiable) and offsets_in_sink_batches, not landed rows.
# final: the window is past the job's lateness and its offsets are below the last completed checkpoint;
# a final row is never recomputed, so re-running yields the same rows.
COMPLETENESS_SCHEMA: Final = schema(
    """
    job_name STRING NOT NULL, topic STRING NOT NULL, partition INT NOT NULL,
    window_start TIMESTAMP NOT NULL, window_end TIMESTAMP NOT NULL, offset_start BIGINT,
    offset_end BIGINT, sink_mode STRING NOT NULL, expected BIGINT, landed BIGINT, lost BIGINT,
    unverifiable BIGINT, duplicated BIGINT, pending BIGINT, offsets_in_sink_batches BIGINT,
    completeness DOUBLE, latency_p50_ms BIGINT, latency_p95_ms BIGINT, final BOOLEAN NOT NULL,
    computed_at TIMESTAMP NOT NULL, reconcile_run_id STRING NOT NULL
    """
)

# Outcomes of `check`, one row per expectation and run. Bookkeeping of this command, not a
# CONTRACTS.md section 4 table (like reconcile's audit_runs).
# kwargs: JSON: the expectation's columns and bounds
# observed: JSON: GE's result (counts, sample of bad values)
VALIDATION_RESULTS_SCHEMA: Final = schema(
    """
    run_id STRING NOT NULL, suite STRING NOT NULL, table STRING NOT NULL, expectation STRING NOT NULL,
    kwargs STRING, severity STRING NOT NULL, success BOOLEAN NOT NULL, observed STRING,
    evaluated_at TIMESTAMP NOT NULL
    """
)

# What `watch` last alerted for an incident: its fingerprint (severity, status and impact), so an
# incident is alerted when it opens and again only when that changes, across restarts of watch.
ALERT_STATE_SCHEMA: Final = schema(
    """
    incident_id STRING NOT NULL, fingerprint STRING NOT NULL, alerted_at TIMESTAMP NOT NULL,
    cycle_id STRING NOT NULL
    """
)


@dataclass(frozen=True)
class TableLayout:
    """How a table is laid out beyond its columns: set when it is created, by either engine."""

    partition_by: tuple[str, ...] = ()
    append_only: bool = False  # delta.appendOnly: the table refuses updates and deletes


# The ledger is an append-only journal, read by day: partitioned by event_date.
LEDGER_LAYOUT: Final = TableLayout(partition_by=("event_date",), append_only=True)


def layout_of(schema: StructType) -> TableLayout:
    """The layout of the table whose contract is ``schema``: the ledger's, or none beyond the columns."""
    return LEDGER_LAYOUT if schema == LEDGER_SCHEMA else TableLayout()


# --- a table's contract as one value: what a table handle binds beside its location ----------------

# The keys the MERGE writers upsert by (a table without one is appended, replaced or deleted by value).
RESTARTS_KEY: Final = ("job_name", "run_id", "topic", "partition")
COMPLETENESS_KEY: Final = ("job_name", "topic", "partition", "window_start")
AUDIT_RUNS_KEY: Final = ("run_id", "command")


@dataclass(frozen=True)
class TableContract:
    """A table as the contracts know it, before it has a place: its name (one of `tables:` in the
    config), columns, the key its MERGE upserts by (empty: never merged), and its layout."""

    name: str
    schema: StructType
    key: tuple[str, ...] = ()
    layout: TableLayout = field(default_factory=TableLayout)


def _contracts(*contracts: TableContract) -> dict[str, TableContract]:
    return {c.name: c for c in contracts}


# Every table by its name in `tables:`, in the config's order.
TABLE_CONTRACTS: Final[Mapping[str, TableContract]] = _contracts(
    TableContract("sink", SINK_SCHEMA),
    TableContract("ledger", LEDGER_SCHEMA, layout=LEDGER_LAYOUT),
    TableContract("group_commits", GROUP_COMMITS_SCHEMA),
    TableContract("group_events", GROUP_EVENTS_SCHEMA),
    TableContract("decode_errors", DECODE_ERRORS_SCHEMA),
    TableContract("ingest_positions", INGEST_POSITIONS_SCHEMA, key=("log_partition",)),
    TableContract("findings", FINDINGS_SCHEMA, key=("finding_id",)),
    TableContract("partition_summary", PARTITION_SUMMARY_SCHEMA),
    TableContract("restarts", RESTARTS_SCHEMA, key=RESTARTS_KEY),
    TableContract("incidents", INCIDENTS_SCHEMA, key=("incident_id",)),
    TableContract("audit_runs", AUDIT_RUNS_SCHEMA, key=AUDIT_RUNS_KEY),
    TableContract("validation_results", VALIDATION_RESULTS_SCHEMA),
    TableContract("alert_state", ALERT_STATE_SCHEMA, key=("incident_id",)),
    TableContract("completeness", COMPLETENESS_SCHEMA, key=COMPLETENESS_KEY),
)
