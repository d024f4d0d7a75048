"""Table contracts of shared/DESIGN.md section 4, one StructType constant each.

Everything that reads or writes a table checks against these constants, so a contract change is a
change in exactly one place (plus the code that needs the new column).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from app.errors import SchemaMismatchError

# --- vocabularies --------------------------------------------------------------------------------


# --- tables --------------------------------------------------------------------------------------

LEDGER_SCHEMA = StructType(
    [
        StructField("job_name", StringType(), False),
        StructField("run_id", StringType(), False),
        StructField("engine", StringType(), False),
        StructField("checkpoint_id", LongType(), True),
        StructField("event_type", StringType(), False),
        StructField("event_time", TimestampType(), False),
        StructField("group_id", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("raw_offset", LongType(), True),
        StructField("offset_semantics", StringType(), True),
        StructField("detail", StringType(), True),
        StructField("event_date", DateType(), False),
    ]
)

SINK_SCHEMA = StructType(
    [
        StructField("kafka_topic", StringType(), False),
        StructField("kafka_partition", IntegerType(), False),
        StructField("kafka_offset", LongType(), False),
        StructField("kafka_timestamp", TimestampType(), True),
        StructField("_checkpoint_id", LongType(), True),
        StructField("_run_id", StringType(), True),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
    ]
)

GROUP_COMMITS_SCHEMA = StructType(
    [
        StructField("group_id", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("committed_offset", LongType(), True),
        StructField("leader_epoch", IntegerType(), True),
        StructField("metadata", StringType(), True),
        StructField("commit_time", TimestampType(), True),
        StructField("expire_time", TimestampType(), True),
        StructField("record_kind", StringType(), False),
        StructField("value_version", IntegerType(), True),
        StructField("transactional", BooleanType(), True),
        StructField("log_partition", IntegerType(), True),
        StructField("log_offset", LongType(), True),
        StructField("log_time", TimestampType(), True),
        StructField("ingest_run_id", StringType(), False),
    ]
)

GROUP_EVENTS_SCHEMA = StructType(
    [
        StructField("group_id", StringType(), False),
        StructField("record_kind", StringType(), False),  # 'metadata' | 'tombstone'
        StructField("value_version", IntegerType(), True),
        StructField("protocol_type", StringType(), True),
        StructField("generation", IntegerType(), True),
        StructField("protocol", StringType(), True),
        StructField("leader", StringType(), True),
        StructField("state_time", TimestampType(), True),
        StructField("members", StringType(), True),  # JSON list of {member_id, client_id, client_host, ...}
        StructField("log_partition", IntegerType(), False),
        StructField("log_offset", LongType(), False),
        StructField("log_time", TimestampType(), True),
        StructField("ingest_run_id", StringType(), False),
    ]
)

DECODE_ERRORS_SCHEMA = StructType(
    [
        StructField("log_partition", IntegerType(), False),
        StructField("log_offset", LongType(), False),
        StructField("log_time", TimestampType(), True),
        StructField("raw_key", BinaryType(), True),
        StructField("raw_value", BinaryType(), True),
        StructField("reason", StringType(), False),
        StructField("ingest_run_id", StringType(), False),
    ]
)

INGEST_POSITIONS_SCHEMA = StructType(
    [
        StructField("log_partition", IntegerType(), False),
        StructField("next_offset", LongType(), False),
        StructField("ingest_run_id", StringType(), False),
        StructField("updated_at", TimestampType(), False),
    ]
)

FINDINGS_SCHEMA = StructType(
    [
        StructField("finding_id", StringType(), False),
        StructField("reconcile_run_id", StringType(), False),
        StructField("detected_at", TimestampType(), False),
        StructField("finding_type", StringType(), False),
        StructField("severity", StringType(), False),
        StructField("status", StringType(), False),
        StructField("job_name", StringType(), True),
        StructField("group_id", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("checkpoint_id", LongType(), True),
        StructField("run_id", StringType(), True),
        StructField("offset_start", LongType(), True),
        StructField("offset_end", LongType(), True),
        StructField("record_count", LongType(), True),
        StructField("evidence", StringType(), True),
    ]
)

PARTITION_SUMMARY_SCHEMA = StructType(
    [
        StructField("reconcile_run_id", StringType(), False),
        StructField("job_name", StringType(), False),
        StructField("group_id", StringType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("sink_count", LongType(), True),
        StructField("sink_distinct", LongType(), True),
        StructField("sink_min_offset", LongType(), True),
        StructField("sink_max_offset", LongType(), True),
        StructField("last_checkpoint_id", LongType(), True),
        StructField("last_checkpoint_offset", LongType(), True),
        StructField("last_committed_offset", LongType(), True),
        StructField("last_commit_time", TimestampType(), True),
        StructField("commit_lag_offsets", LongType(), True),
        StructField("commit_lag_seconds", LongType(), True),
        StructField("findings_by_type", StringType(), True),  # JSON object finding_type -> count
    ]
)

INCIDENTS_SCHEMA = StructType(
    [
        StructField("incident_id", StringType(), False),
        StructField("kind", StringType(), False),
        StructField("severity", StringType(), False),
        StructField("status", StringType(), False),
        StructField("job_name", StringType(), True),
        StructField("group_id", StringType(), True),
        StructField("run_ids", ArrayType(StringType()), True),
        StructField("first_evidence_at", TimestampType(), True),
        StructField("last_evidence_at", TimestampType(), True),
        StructField("partitions", IntegerType(), True),
        StructField("records_lost", LongType(), True),
        StructField("records_unverifiable", LongType(), True),
        StructField("records_duplicated", LongType(), True),
        StructField("records_replayed", LongType(), True),
        StructField("max_commit_lag", LongType(), True),
        StructField("cause", StringType(), True),
        StructField("remedy", StringType(), True),  # JSON: the plan
        StructField("finding_ids", ArrayType(StringType()), True),
        StructField("reconcile_run_id", StringType(), False),
    ]
)

RESTARTS_SCHEMA = StructType(
    [
        StructField("job_name", StringType(), False),
        StructField("run_id", StringType(), False),
        StructField("previous_run_id", StringType(), True),
        StructField("started_at", TimestampType(), False),
        StructField("group_id", StringType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("resumed_offset", LongType(), True),
        StructField("resume_source", StringType(), True),
        StructField("previous_checkpoint_offset", LongType(), True),
        StructField("group_committed_offset", LongType(), True),
        StructField("classification", StringType(), False),
        StructField("records_replayed", LongType(), True),
        StructField("records_skipped", LongType(), True),
        StructField("duplicates_observed", LongType(), True),
        StructField("forensics_run_id", StringType(), False),
    ]
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
