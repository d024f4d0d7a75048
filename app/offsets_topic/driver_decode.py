"""The driver's decoder of `__consumer_offsets`: records as a Kafka consumer returns them -> Arrow
batches of the decoded rows and of the group_commits / group_events / decode_errors contracts.

Pure functions over bytes and Arrow: no Kafka, no Delta (app/offsets_topic/driver_io.py does the I/O).
Each record goes through `ingest.decode_row`, the function the Spark path's Python decoder runs too:
the common records (offset commits v0-v4, tombstones, skipped types, other groups) by a few struct
calls, everything else by the complete `decoder.decode_record`, malformed bytes as KIND_ERROR rows. The
Arrow transforms below give exactly the columns and types of `ingest.to_group_commits` and its siblings,
and tests hold the two paths to identical rows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from app.contracts.tables import DECODE_ERRORS_SCHEMA, GROUP_COMMITS_SCHEMA, GROUP_EVENTS_SCHEMA
from app.offsets_topic.ingest import (
    DECODED_FIELDS,
    KIND_COMMIT,
    KIND_ERROR,
    KIND_GROUP_METADATA,
    KIND_GROUP_TOMBSTONE,
    KIND_TOMBSTONE,
    TIME_MS_FIELDS,
    TIMESTAMP_MAX_MS,
    TIMESTAMP_MIN_MS,
    ProgressRow,
    decode_row,
    decoded_columns,
    fast_commit_key,
    fast_commit_value,
    group_prefix_filter,
)

ARROW_GROUP_COMMITS = to_arrow_schema(GROUP_COMMITS_SCHEMA)
ARROW_GROUP_EVENTS = to_arrow_schema(GROUP_EVENTS_SCHEMA)
ARROW_DECODE_ERRORS = to_arrow_schema(DECODE_ERRORS_SCHEMA)
_TS = pa.timestamp("us", tz="UTC")


# Distinct record keys remembered per run: (group, topic, partition) repeats in every commit of that
# partition, so the key is parsed once; a cluster has at most groups x partitions distinct keys, and
# beyond this bound the memo is simply started again.
_KEY_MEMO_SIZE = 200_000
_COMMIT_TYPES = (0, 1)  # OFFSET_COMMIT_KEY_TYPES, as the second byte of a key whose first is 0
_DENSE = 5 + 6  # kind, record_type, group, topic, partition + the commit value's six fields
_NO_REST = (None,) * (len(DECODED_FIELDS) - _DENSE)


def make_record_decoder(
    groups: Collection[str] = (),
) -> Callable[[Sequence[int], Sequence[int], Sequence[int], Sequence[Any], Sequence[Any]], pa.RecordBatch]:
    """A function (partitions, offsets, timestamps in epoch ms, keys, values) -> one DECODED_SCHEMA
    batch with a row per record, in the given order. `groups` empty: every group is audited.

    Every row equals `ingest.decode_row`'s; the common record (an offset commit of an audited group)
    is built from two parts without the 20-field tuple: the key's (kind, type, group, topic, partition),
    memoised per distinct key, and the value's six fields. Any other record is `decode_row`'s row."""
    audited = group_prefix_filter(tuple(groups))
    memo: dict[bytes, tuple[Any, ...] | None] = {}

    def commit_head(key: bytes) -> tuple[Any, ...] | None:
        """(KIND_COMMIT, type, group, topic, partition) of an audited, well-formed commit key, else None."""
        if len(memo) >= _KEY_MEMO_SIZE:
            memo.clear()
        head = None
        if len(key) >= 4 and key[0] == 0 and key[1] in _COMMIT_TYPES and (audited is None or audited(key)):
            parsed = fast_commit_key(key)
            head = None if parsed is None else (KIND_COMMIT, key[1], *parsed)
        memo[key] = head
        return head

    def decode(
        partitions: Sequence[int],
        offsets: Sequence[int],
        timestamps_ms: Sequence[int],
        keys: Sequence[Any],
        values: Sequence[Any],
    ) -> pa.RecordBatch:
        heads: list[tuple[Any, ...]] = []
        tails: list[tuple[Any, ...]] = []
        rest: dict[int, tuple[Any, ...]] = {}  # the fields after the dense ones, where any is set
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            if key is not None and value is not None:
                head = memo[key] if key in memo else commit_head(key)
                if head is not None:
                    tail = fast_commit_value(value)
                    if tail is not None:
                        heads.append(head)
                        tails.append(tail)
                        continue
            row = decode_row(key, value, audited)
            heads.append(row[:5])
            tails.append(row[5:_DENSE])
            if row[_DENSE:] != _NO_REST:
                rest[i] = row[_DENSE:]
        n = len(heads)
        columns: list[Sequence[Any]] = (
            [*zip(*heads, strict=True), *zip(*tails, strict=True)] if n else [()] * _DENSE
        )
        for j in range(len(_NO_REST)):  # () is a column of nulls
            columns.append([rest[i][j] if i in rest else None for i in range(n)] if rest else ())
        # Kafka's record timestamp in ms, which the Spark source's `timestamp` column holds too.
        times = pa.array(timestamps_ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
        return decoded_columns(
            pa.array(partitions, pa.int32()), pa.array(offsets, pa.int64()), times, columns, n
        )

    return decode


def _in_time_range(ms: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """True where an epoch-ms column fits a table's TIMESTAMP (`ingest.TIMESTAMP_MAX_MS`), null where null."""
    return pc.and_(pc.greater_equal(ms, TIMESTAMP_MIN_MS), pc.less_equal(ms, TIMESTAMP_MAX_MS))


def _all_in_time_range(ms: pa.Array | pa.ChunkedArray) -> bool:
    """Does every value of an epoch-ms column fit? One pass, and nearly always true: the per-row
    masks are then skipped (they would add ~1.5% to the driver's decode of a batch)."""
    bounds = pc.min_max(ms)
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    return lo is None or (lo >= TIMESTAMP_MIN_MS and hi <= TIMESTAMP_MAX_MS)


def progress_rows(decoded: pa.RecordBatch | pa.Table) -> list[ProgressRow]:
    """(log_partition, kind, record_type, records, times_out_of_range) of decoded rows, as
    `ingest.progress_counts`."""
    table = decoded if isinstance(decoded, pa.Table) else pa.Table.from_batches([decoded])
    aggregates = [("log_offset", "count")]
    odd_fields = [c for c in TIME_MS_FIELDS if not _all_in_time_range(table.column(c))]
    if odd_fields:
        odd = functools.reduce(
            pc.or_, (pc.invert(pc.fill_null(_in_time_range(table.column(c)), True)) for c in odd_fields)
        )
        table = table.append_column("odd_time", odd.cast(pa.int64()))
        aggregates.append(("odd_time", "sum"))
    counts = table.group_by(["log_partition", "kind", "record_type"], use_threads=False).aggregate(aggregates)
    return [
        (r["log_partition"], r["kind"], r["record_type"], r["log_offset_count"], r.get("odd_time_sum", 0))
        for r in counts.to_pylist()
    ]


def _of_kinds(decoded: pa.RecordBatch, kinds: tuple[str, ...]) -> pa.RecordBatch:
    return decoded.filter(pc.is_in(decoded.column("kind"), value_set=pa.array(kinds)))


def _ms(decoded: pa.RecordBatch, name: str) -> pa.Array:
    """An epoch-ms column as timestamp[us], null outside the range a table holds, as `ingest._ts`:
    the cast alone would fail the whole run on one odd record."""
    ms = decoded.column(name)
    if not _all_in_time_range(ms):
        ms = pc.if_else(_in_time_range(ms), ms, pa.scalar(None, pa.int64()))
    return ms.cast(pa.timestamp("ms", tz="UTC")).cast(_TS)


def _constant(value: Any, n: int, type_: pa.DataType) -> pa.Array:
    return pa.array([value] * n, type=type_) if value is not None else pa.nulls(n, type_)


def _batch(schema: pa.Schema, columns: dict[str, pa.Array]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)


def to_group_commits(decoded: pa.RecordBatch, run_id: str) -> pa.RecordBatch:
    """Offset commits and tombstones -> group_commits rows (`ingest.to_group_commits` on Arrow)."""
    rows = _of_kinds(decoded, (KIND_COMMIT, KIND_TOMBSTONE))
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
    """Group metadata and group tombstones -> group_events rows (`ingest.to_group_events` on Arrow)."""
    rows = _of_kinds(decoded, (KIND_GROUP_METADATA, KIND_GROUP_TOMBSTONE))
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
    rows = _of_kinds(decoded, (KIND_ERROR,))
    col = rows.column
    return _batch(
        ARROW_DECODE_ERRORS,
        {
            "log_partition": col("log_partition"), "log_offset": col("log_offset"),
            "log_time": col("log_time"), "raw_key": col("raw_key"), "raw_value": col("raw_value"),
            "reason": col("reason"), "ingest_run_id": _constant(run_id, rows.num_rows, pa.string()),
        },
    )  # fmt: skip
