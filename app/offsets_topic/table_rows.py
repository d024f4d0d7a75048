"""Decoded records -> the rows of the tables `ingest-offsets` writes: group_commits, group_events and
decode_errors (CONTRACTS.md sections 4 and 6), one Arrow function per table.

The rule is written once, over Arrow batches of DECODED_SCHEMA rows, and both routes run it: the
driver's on the batches it decodes (app/offsets_topic/driver_route.py), Spark's on the executors
through `DataFrame.mapInArrow` (app/offsets_topic/spark_route.py). Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from app.contracts.tables import DECODE_ERRORS_SCHEMA, GROUP_COMMITS_SCHEMA, GROUP_EVENTS_SCHEMA
from app.offsets_topic.decoded import (
    KIND_GROUP_METADATA,
    TIMESTAMP_MAX_MS,
    TIMESTAMP_MIN_MS,
)
from app.offsets_topic.tables import DECODE_ERRORS, GROUP_COMMITS, GROUP_EVENTS, TABLE_KINDS

ARROW_GROUP_COMMITS: Final = to_arrow_schema(GROUP_COMMITS_SCHEMA)
ARROW_GROUP_EVENTS: Final = to_arrow_schema(GROUP_EVENTS_SCHEMA)
ARROW_DECODE_ERRORS: Final = to_arrow_schema(DECODE_ERRORS_SCHEMA)
_TS = pa.timestamp("us", tz="UTC")


# --- the times a table holds ---------------------------------------------------------------------


def in_time_range(ms: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """True where an epoch-ms column fits a table's TIMESTAMP (`decoded.TIMESTAMP_MAX_MS`), null if null."""
    return pc.and_(pc.greater_equal(ms, TIMESTAMP_MIN_MS), pc.less_equal(ms, TIMESTAMP_MAX_MS))


def all_in_time_range(ms: pa.Array | pa.ChunkedArray) -> bool:
    """Does every value of an epoch-ms column fit? One pass, and nearly always true: the per-row
    masks are then skipped (they would add ~1.5% to the driver's decode of a batch)."""
    bounds = pc.min_max(ms)
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    return lo is None or (lo >= TIMESTAMP_MIN_MS and hi <= TIMESTAMP_MAX_MS)


def _ms(decoded: pa.RecordBatch, name: str) -> pa.Array:
    """An epoch-ms column as timestamp[us], null outside the range a table holds: the cast alone would
    fail the whole run on one odd record."""
    ms = decoded.column(name)
    if not all_in_time_range(ms):
        ms = pc.if_else(in_time_range(ms), ms, pa.scalar(None, pa.int64()))
    return ms.cast(pa.timestamp("ms", tz="UTC")).cast(_TS)


# --- the tables ----------------------------------------------------------------------------------


def _of_kinds(decoded: pa.RecordBatch, table: str) -> pa.RecordBatch:
    return decoded.filter(pc.is_in(decoded.column("kind"), value_set=pa.array(TABLE_KINDS[table])))


def _constant(value: Any, n: int, type_: pa.DataType) -> pa.Array:
    return pa.array([value] * n, type=type_) if value is not None else pa.nulls(n, type_)


def _batch(schema: pa.Schema, columns: dict[str, pa.Array]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)


def to_group_commits(decoded: pa.RecordBatch, run_id: str) -> pa.RecordBatch:
    """Offset commits and offset tombstones -> group_commits rows.

    `transactional` is null: the topic is read with read_committed, so aborted commits never arrive
    and committed ones are indistinguishable from plain ones (neither a consumer's records nor the
    Kafka source expose batch attributes or control records). Null says "not known", the truth.
    """
    rows = _of_kinds(decoded, GROUP_COMMITS)
    n = rows.num_rows
    col = rows.column
    return _batch(
        ARROW_GROUP_COMMITS,
        {
            "group_id": col("group_id"), "topic": col("topic"), "partition": col("partition"),
            "committed_offset": col("committed_offset"), "leader_epoch": col("leader_epoch"),
            "metadata": col("metadata"), "commit_time": _ms(rows, "commit_time_ms"),
            "expire_time": _ms(rows, "expire_time_ms"), "record_kind": col("kind"),
            "value_version": col("value_version"), "transactional": pa.nulls(n, pa.bool_()),
            "log_partition": col("log_partition"), "log_offset": col("log_offset"),
            "log_time": col("log_time"), "ingest_run_id": _constant(run_id, n, pa.string()),
        },
    )  # fmt: skip


def to_group_events(decoded: pa.RecordBatch, run_id: str) -> pa.RecordBatch:
    """Group metadata records and group tombstones -> group_events rows."""
    rows = _of_kinds(decoded, GROUP_EVENTS)
    n = rows.num_rows
    col = rows.column
    record_kind = pc.if_else(
        pc.equal(col("kind"), KIND_GROUP_METADATA), pa.scalar("metadata"), pa.scalar("tombstone")
    )
    return _batch(
        ARROW_GROUP_EVENTS,
        {
            "group_id": col("group_id"), "record_kind": record_kind, "value_version": col("value_version"),
            "protocol_type": col("protocol_type"), "generation": col("generation"),
            "protocol": col("protocol"), "leader": col("leader"),
            "state_time": _ms(rows, "state_time_ms"), "members": col("members"),
            "log_partition": col("log_partition"), "log_offset": col("log_offset"),
            "log_time": col("log_time"), "ingest_run_id": _constant(run_id, n, pa.string()),
        },
    )  # fmt: skip


def to_decode_errors(decoded: pa.RecordBatch, run_id: str) -> pa.RecordBatch:
    """Malformed records with their bytes and reason -> decode_errors rows."""
    rows = _of_kinds(decoded, DECODE_ERRORS)
    col = rows.column
    return _batch(
        ARROW_DECODE_ERRORS,
        {
            "log_partition": col("log_partition"), "log_offset": col("log_offset"),
            "log_time": col("log_time"), "raw_key": col("raw_key"), "raw_value": col("raw_value"),
            "reason": col("reason"), "ingest_run_id": _constant(run_id, rows.num_rows, pa.string()),
        },
    )  # fmt: skip


# The rule of each data table, by table name (app/offsets_topic/tables.py DATA_TABLES).
TableRule = Callable[[pa.RecordBatch, str], pa.RecordBatch]
TABLE_RULES: Final[Mapping[str, TableRule]] = {
    GROUP_COMMITS: to_group_commits,
    GROUP_EVENTS: to_group_events,
    DECODE_ERRORS: to_decode_errors,
}
