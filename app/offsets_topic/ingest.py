"""Pure logic of `ingest-offsets`: which `__consumer_offsets` ranges to read, the executor-side decoder,
and the DataFrame transforms from decoded records to the group_commits / group_events / decode_errors
contracts (shared/DESIGN.md sections 4 and 6). No I/O here; app/offsets_topic/ingest_io.py reads and writes.

On a cluster, decoding runs on the executors in two routes (app/offsets_topic/jvm_decode.py): the
common records as Spark SQL expressions in the JVM, the rest through `DataFrame.mapInArrow` and the
complete Python decoder over only those records; exactly one output row per input record. Every record
therefore shows up in the counts (read, decoded, skipped by type, other groups, quarantined) from one
read of Kafka. With a local master the driver decodes instead (app/offsets_topic/driver_decode.py, the
same `decode_row`); `app.routes.decode_route` is where that is decided.
"""

from __future__ import annotations

import functools
import json
import operator
import struct
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from app.contracts.tables import (
    DECODE_ERRORS_SCHEMA,
    GROUP_COMMITS_SCHEMA,
    GROUP_EVENTS_SCHEMA,
    conform,
    require_columns,
)
from app.errors import OffsetAuditError
from app.offsets_topic.decoder import (
    GROUP_METADATA_KEY_TYPE,
    OFFSET_COMMIT_KEY_TYPES,
    DecodeFailure,
    GroupMetadata,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    SkippedRecord,
    decode_record,
    partition_for_group,
)

# --- kinds of decoded rows -----------------------------------------------------------------------

KIND_COMMIT = "commit"
KIND_TOMBSTONE = "tombstone"
KIND_GROUP_METADATA = "group_metadata"
KIND_GROUP_TOMBSTONE = "group_tombstone"
KIND_SKIPPED = "skipped"  # a record type the audit does not read (types 3+)
KIND_OTHER_GROUP = "other_group"  # an offset/group record of a group that is not audited
KIND_ERROR = "error"
# Internal to the decode step, never in a table: a record the JVM decoder leaves to the Python one
# (app/offsets_topic/jvm_decode.py), carried with its raw bytes until that decoder has run.
KIND_ROUTED = "routed"
KINDS = (
    KIND_COMMIT,
    KIND_TOMBSTONE,
    KIND_GROUP_METADATA,
    KIND_GROUP_TOMBSTONE,
    KIND_SKIPPED,
    KIND_OTHER_GROUP,
    KIND_ERROR,
)

# The Kafka source's columns the decoder needs; nothing else crosses into Python.
KAFKA_INPUT_COLUMNS = ("partition", "offset", "timestamp", "key", "value")

# One wide row per record. Timestamps stay epoch milliseconds here: converting on the JVM side
# (timestamp_millis) is cheaper than building datetime objects in Python.
DECODED_SCHEMA = StructType(
    [
        StructField("log_partition", IntegerType(), False),
        StructField("log_offset", LongType(), False),
        StructField("log_time", TimestampType(), True),
        StructField("kind", StringType(), False),
        StructField("record_type", IntegerType(), True),
        StructField("group_id", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("committed_offset", LongType(), True),
        StructField("leader_epoch", IntegerType(), True),
        StructField("metadata", StringType(), True),
        StructField("commit_time_ms", LongType(), True),
        StructField("expire_time_ms", LongType(), True),
        StructField("value_version", IntegerType(), True),
        StructField("protocol_type", StringType(), True),
        StructField("generation", IntegerType(), True),
        StructField("protocol", StringType(), True),
        StructField("leader", StringType(), True),
        StructField("state_time_ms", LongType(), True),
        StructField("members", StringType(), True),
        StructField("reason", StringType(), True),
        StructField("raw_key", BinaryType(), True),
        StructField("raw_value", BinaryType(), True),
    ]
)

# Columns filled by the Python decoder, in DECODED_SCHEMA order (the first three pass through untouched).
DECODED_FIELDS = tuple(f.name for f in DECODED_SCHEMA.fields[3:])
ARROW_DECODED_SCHEMA = to_arrow_schema(DECODED_SCHEMA)

# --- the times a table holds ---------------------------------------------------------------------

# The epoch-millisecond range the ingest tables' TIMESTAMP columns take, on both decode paths. A commit
# value's commit and expire timestamps are what the committing client sent (old OffsetCommit versions
# let it choose), so any int64 can arrive. Spark's TIMESTAMP and the driver path's Arrow timestamp[us]
# hold microseconds in an int64 (|ms| <= 9_223_372_036_854_775; beyond it both fail the whole run), but
# Spark writes Parquet timestamps as INT96, which delta-rs and Arrow read back as nanoseconds in an
# int64: a Spark-written time outside 1677-09-21..2262-04-11 makes every driver-side reader of the table
# (reconcile, quality) fail. The range is therefore the nanosecond one, which every writer and reader
# here holds; no real commit time lies outside it. A time outside it is stored as null, its row is
# kept (the committed offset is what the audit needs), and the record is counted in
# `PartitionProgress.times_out_of_range`, which the run reports as a warning.
TIMESTAMP_MAX_MS: Final = (2**63 - 1) // 1_000_000  # 2262-04-11T23:47:16.854Z
TIMESTAMP_MIN_MS: Final = -TIMESTAMP_MAX_MS  # 1677-09-21T00:12:43.146Z
# The decoded epoch-ms fields that become TIMESTAMP columns (group_commits, group_events).
TIME_MS_FIELDS: Final = ("commit_time_ms", "expire_time_ms", "state_time_ms")


# --- which partitions, which ranges --------------------------------------------------------------


def select_partitions(groups: Collection[str], partition_count: int) -> list[int]:
    """The `__consumer_offsets` partitions holding `groups`; every partition when no group is given."""
    if partition_count <= 0:
        raise OffsetAuditError(f"__consumer_offsets partition count must be positive, got {partition_count}")
    if not groups:
        return list(range(partition_count))
    return sorted({partition_for_group(g, partition_count) for g in groups})


@dataclass(frozen=True)
class PartitionRange:
    """One partition's read for this run: [start, end), plus why start moved, if it did."""

    partition: int
    start: int
    end: int
    stored: int | None  # the position remembered by the previous run, None on the first run
    note: str | None = None  # 'retention' (stored < log start) or 'ahead' (stored > end), for the log

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(
    partitions: Iterable[int],
    stored: Mapping[int, int],
    log_start: Mapping[int, int],
    log_end: Mapping[int, int],
    max_records_per_partition: int = 0,
) -> list[PartitionRange]:
    """Per partition, read from the stored position (or the log start) to `log_end`, capped.

    `log_end` is the last stable offset (read_committed): everything below it is decided, so a run never
    stops inside an open transaction and the next run cannot see a commit that this one already missed.
    """
    ranges = []
    for p in sorted(set(partitions)):
        lo, hi = log_start[p], log_end[p]
        position = stored.get(p)
        note = None
        start = lo if position is None else position
        if position is not None and position < lo:
            # Compaction/retention removed records we never read: continue at what exists, and say so.
            start, note = lo, "retention"
        if start > hi:
            # Stored position beyond the log end: the topic was recreated or a different cluster is
            # configured. Reading nothing and keeping the position is the safe choice; the log says why.
            ranges.append(PartitionRange(p, start, start, position, "ahead"))
            continue
        end = hi if max_records_per_partition <= 0 else min(hi, start + max_records_per_partition)
        ranges.append(PartitionRange(p, start, end, position, note))
    return ranges


def kafka_read_options(topic: str, ranges: Iterable[PartitionRange]) -> dict[str, str]:
    """`assign` plus explicit starting/ending offsets for the non-empty ranges, as the Kafka source wants."""
    todo = [r for r in ranges if r.size > 0]
    if not todo:
        raise OffsetAuditError("no partition has new records; nothing to read")
    return {
        "assign": json.dumps({topic: [r.partition for r in todo]}),
        "startingOffsets": json.dumps({topic: {str(r.partition): r.start for r in todo}}),
        "endingOffsets": json.dumps({topic: {str(r.partition): r.end for r in todo}}),
    }


def merge_positions(stored: Mapping[int, int], ranges: Iterable[PartitionRange]) -> dict[int, int]:
    """Positions after this run: each read partition moves to the end of its range; others stay."""
    merged = dict(stored)
    for r in ranges:
        if r.note == "ahead":
            continue
        merged[r.partition] = r.end
    return merged


def positions_rows(
    positions: Mapping[int, int], partitions: Collection[int], run_id: str, now_ms: int
) -> list[tuple[int, int, str, int]]:
    """Rows (log_partition, next_offset, ingest_run_id, updated_at ms) for the partitions this run read."""
    return [(p, positions[p], run_id, now_ms) for p in sorted(partitions) if p in positions]


# --- the executor-side decoder -------------------------------------------------------------------


def group_prefix_filter(groups: Collection[str]) -> Callable[[bytes], bool] | None:
    """A cheap test on raw key bytes: does this offset/group key belong to an audited group?

    Keys of types 0, 1 and 2 start with int16 type, int16 length and the group's UTF-8 bytes, so the
    group can be compared before decoding the value: records of other groups cost almost nothing.
    """
    if not groups:
        return None
    wanted = frozenset(g.encode("utf-8") for g in groups)

    def is_audited(key: bytes) -> bool:
        n = int.from_bytes(key[2:4], "big", signed=True)
        return key[4 : 4 + n] in wanted

    return is_audited


def _members_json(record: GroupMetadata) -> str:
    # Subscription and assignment are opaque protocol bytes; their sizes are enough for forensics.
    return json.dumps(
        [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "session_timeout_ms": m.session_timeout_ms,
                "subscription_bytes": len(m.subscription),
                "assignment_bytes": len(m.assignment),
            }
            for m in record.members
        ],
        separators=(",", ":"),
    )


_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_QI = struct.Struct(">qi")
_QQ = struct.Struct(">qq")
_NO_EPOCH = -1
_NULLS_AFTER_COMMIT = (None,) * 9


def fast_commit_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of a well-formed offset commit key (types 0/1), or None."""
    try:
        glen = _H.unpack_from(key, 2)[0]
        if glen < 0:
            return None
        t_at = 4 + glen
        tlen = _H.unpack_from(key, t_at)[0]
        p_at = t_at + 2 + tlen
        if tlen < 0 or len(key) != p_at + 4:
            return None
        return key[4:t_at].decode(), key[t_at + 2 : p_at].decode(), _I.unpack_from(key, p_at)[0]
    except (struct.error, IndexError, UnicodeDecodeError):
        return None


def fast_commit_value(value: bytes) -> tuple[int, int | None, str, int, int | None, int] | None:
    """(offset, leader epoch, metadata, commit ts, expire ts, version) of a well-formed offset commit
    value (v0-v4, no tagged fields, metadata under 127 bytes in v4+), or None."""
    try:
        version = _H.unpack_from(value, 0)[0]
        if version < 0:
            return None
        expire: int | None = None
        epoch: int | None = None
        if version >= 3:
            offset, epoch = _QI.unpack_from(value, 2)
            if version >= 4:
                mlen = value[14] - 1  # compact string, one-byte uvarint only
                if mlen < 0 or value[14] & 0x80:
                    return None
                m_at = 15
                if len(value) != m_at + mlen + 9 or value[-1] != 0:  # ... commit ts, zero tagged fields
                    return None
            else:
                mlen = _H.unpack_from(value, 14)[0]
                m_at = 16
                if mlen < 0 or len(value) != m_at + mlen + 8:
                    return None
            if epoch == _NO_EPOCH:
                epoch = None
        else:
            offset = _Q.unpack_from(value, 2)[0]
            mlen = _H.unpack_from(value, 10)[0]
            m_at = 12
            if mlen < 0 or len(value) != m_at + mlen + (16 if version == 1 else 8):
                return None
        commit_ts = _Q.unpack_from(value, m_at + mlen)[0]
        if version == 1:
            expire = _Q.unpack_from(value, m_at + mlen + 8)[0]
            if expire == -1:
                expire = None
        return offset, epoch, value[m_at : m_at + mlen].decode(), commit_ts, expire, version
    except (struct.error, IndexError, UnicodeDecodeError):
        return None


def fast_commit_row(key: bytes, value: bytes, record_type: int) -> tuple[Any, ...] | None:
    """The common case, decoded with a few struct calls: a well-formed offset commit (v0-v4, no tagged
    fields, short metadata). Returns None for anything else, and the caller falls back to the complete,
    authoritative `decode_record`. On a busy cluster nearly every record takes this path, ~15x faster.
    Unit tests hold it equal to `decode_record` on every version and on corrupted bytes."""
    head = fast_commit_key(key)
    if head is None:
        return None
    tail = fast_commit_value(value)
    if tail is None:
        return None
    return (KIND_COMMIT, record_type, *head, *tail, *_NULLS_AFTER_COMMIT)


def decode_row(
    key: bytes | None, value: bytes | None, audited: Callable[[bytes], bool] | None
) -> tuple[Any, ...]:
    """One record -> the decoder-filled columns of DECODED_SCHEMA (`DECODED_FIELDS` order). Never raises."""
    if key is not None and len(key) >= 2:
        record_type = int.from_bytes(key[:2], "big", signed=True)
        known = record_type in OFFSET_COMMIT_KEY_TYPES or record_type == GROUP_METADATA_KEY_TYPE
        if not known:
            return (KIND_SKIPPED, record_type, *_NULLS_AFTER_TYPE)
        if audited is not None and len(key) >= 4 and not audited(key):
            return (KIND_OTHER_GROUP, record_type, *_NULLS_AFTER_TYPE)
        if record_type != GROUP_METADATA_KEY_TYPE and value is not None:
            fast = fast_commit_row(key, value, record_type)
            if fast is not None:
                return fast
    else:
        record_type = None
    rec = decode_record(key, value)
    if isinstance(rec, OffsetCommit):
        return (
            KIND_COMMIT, record_type, rec.group_id, rec.topic, rec.partition, rec.offset, rec.leader_epoch,
            rec.metadata, rec.commit_timestamp_ms, rec.expire_timestamp_ms, rec.value_version,
            None, None, None, None, None, None, None, None, None,
        )  # fmt: skip
    if isinstance(rec, OffsetTombstone):
        return (
            KIND_TOMBSTONE, record_type, rec.group_id, rec.topic, rec.partition,
            None, None, None, None, None, None, None, None, None, None, None, None, None, None, None,
        )  # fmt: skip
    if isinstance(rec, GroupMetadata):
        return (
            KIND_GROUP_METADATA, record_type, rec.group_id, None, None, None, None, None, None, None,
            rec.value_version, rec.protocol_type, rec.generation, rec.protocol, rec.leader,
            rec.current_state_timestamp_ms, _members_json(rec), None, None, None,
        )  # fmt: skip
    if isinstance(rec, GroupTombstone):
        return (KIND_GROUP_TOMBSTONE, record_type, rec.group_id, *_NULLS_AFTER_GROUP)
    if isinstance(rec, SkippedRecord):  # unreachable after the type check above, kept for safety
        return (KIND_SKIPPED, rec.record_type, *_NULLS_AFTER_TYPE)
    reason = rec.reason if isinstance(rec, DecodeFailure) else f"unexpected decoder result {rec!r}"
    return (
        KIND_ERROR, record_type, *_NULLS_BEFORE_REASON, reason,
        None if key is None else bytes(key), None if value is None else bytes(value),
    )  # fmt: skip


_NULLS_AFTER_TYPE = (None,) * (len(DECODED_FIELDS) - 2)
_NULLS_AFTER_GROUP = (None,) * (len(DECODED_FIELDS) - 3)
_NULLS_BEFORE_REASON = (None,) * (len(DECODED_FIELDS) - 5)


def decoded_batch(
    partitions: pa.Array, offsets: pa.Array, timestamps: pa.Array, rows: Sequence[tuple[Any, ...]]
) -> pa.RecordBatch:
    """A DECODED_SCHEMA batch from the records' log coordinates and their `decode_row` tuples."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(DECODED_FIELDS)
    return decoded_columns(partitions, offsets, timestamps, columns, len(rows))


def decoded_columns(
    partitions: pa.Array,
    offsets: pa.Array,
    timestamps: pa.Array,
    columns: Sequence[Sequence[Any]],
    n: int,
) -> pa.RecordBatch:
    """A DECODED_SCHEMA batch of `n` rows from the log coordinates and one sequence per decoder-filled
    field (`DECODED_FIELDS` order); an empty sequence stands for a column of nulls."""
    arrays: list[pa.Array] = [
        partitions.cast(pa.int32()),
        offsets.cast(pa.int64()),
        timestamps.cast(pa.timestamp("us", tz="UTC")),
    ]
    for name, col in zip(DECODED_FIELDS, columns, strict=True):
        type_ = ARROW_DECODED_SCHEMA.field(name).type
        arrays.append(pa.array(col, type=type_) if len(col) or not n else pa.nulls(n, type_))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_DECODED_SCHEMA)


def make_batch_decoder(
    groups: Collection[str] = (),
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function for `mapInArrow`: Kafka source batches in, DECODED_SCHEMA batches out, 1:1 rows.

    `groups` (may be empty: keep every group) is captured by value, so it ships to the executors.
    """
    group_list = tuple(groups)

    def decode_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        audited = group_prefix_filter(group_list)
        for batch in batches:
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            rows = [decode_row(k, v, audited) for k, v in zip(keys, values, strict=True)]
            yield decoded_batch(
                batch.column("partition"), batch.column("offset"), batch.column("timestamp"), rows
            )

    return decode_batches


def decode_in_python(kafka_df: DataFrame, groups: Collection[str] = ()) -> DataFrame:
    """Kafka source rows -> DECODED_SCHEMA rows, every record through the complete Python decoder."""
    require_columns(kafka_df, KAFKA_INPUT_COLUMNS, "kafka source")
    return kafka_df.select(*KAFKA_INPUT_COLUMNS).mapInArrow(make_batch_decoder(groups), DECODED_SCHEMA)


# --- decoded rows -> table contracts -------------------------------------------------------------


def _in_time_range(ms: Column) -> Column:
    return ms.between(TIMESTAMP_MIN_MS, TIMESTAMP_MAX_MS)


def _ts(ms_column: str) -> Column:
    """An epoch-ms column as TIMESTAMP, null outside the range a table holds (TIMESTAMP_MAX_MS):
    timestamp_millis alone would fail the whole run with a long overflow on one odd record."""
    ms = F.col(ms_column)
    return F.when(_in_time_range(ms), F.timestamp_millis(ms))


def _time_out_of_range() -> Column:
    """A decoded row with a time (TIME_MS_FIELDS) that its table stores as null: never null itself."""
    odd = (F.coalesce(~_in_time_range(F.col(c)), F.lit(False)) for c in TIME_MS_FIELDS)
    return functools.reduce(operator.or_, odd)


def to_group_commits(decoded: DataFrame, run_id: str) -> DataFrame:
    """Offset commits and offset tombstones -> the group_commits contract.

    `transactional` is null: the job reads with read_committed, so aborted commits never arrive and
    committed ones are indistinguishable from plain ones (the Kafka source exposes neither batch
    attributes nor control records). Null says "not known", which is the truth.
    """
    require_columns(decoded, DECODED_SCHEMA.fieldNames(), "decoded records")
    out = (
        decoded.where(F.col("kind").isin(KIND_COMMIT, KIND_TOMBSTONE))
        .withColumn("commit_time", _ts("commit_time_ms"))
        .withColumn("expire_time", _ts("expire_time_ms"))
        .withColumn("record_kind", F.col("kind"))
        .withColumn("transactional", F.lit(None).cast("boolean"))
        .withColumn("ingest_run_id", F.lit(run_id))
    )
    return conform(out, GROUP_COMMITS_SCHEMA)


def to_group_events(decoded: DataFrame, run_id: str) -> DataFrame:
    """Group metadata records and group tombstones -> the group_events contract."""
    require_columns(decoded, DECODED_SCHEMA.fieldNames(), "decoded records")
    out = (
        decoded.where(F.col("kind").isin(KIND_GROUP_METADATA, KIND_GROUP_TOMBSTONE))
        .withColumn(
            "record_kind",
            F.when(F.col("kind") == KIND_GROUP_METADATA, F.lit("metadata")).otherwise(F.lit("tombstone")),
        )
        .withColumn("state_time", _ts("state_time_ms"))
        .withColumn("ingest_run_id", F.lit(run_id))
    )
    return conform(out, GROUP_EVENTS_SCHEMA)


def to_decode_errors(decoded: DataFrame, run_id: str) -> DataFrame:
    require_columns(decoded, DECODED_SCHEMA.fieldNames(), "decoded records")
    out = decoded.where(F.col("kind") == KIND_ERROR).withColumn("ingest_run_id", F.lit(run_id))
    return conform(out, DECODE_ERRORS_SCHEMA)


SNAPSHOT_INPUT_COLUMNS = (
    "group_id", "topic", "partition", "committed_offset", "leader_epoch", "metadata", "log_time_ms",
)  # fmt: skip


def snapshot_to_group_commits(offsets: DataFrame, run_id: str) -> DataFrame:
    """Admin API committed offsets -> group_commits rows of record_kind 'snapshot'.

    log_time is when the snapshot was taken; what the Admin API does not report (commit time, log
    coordinates, value version, transactional) stays null rather than being guessed.
    """
    require_columns(offsets, SNAPSHOT_INPUT_COLUMNS, "committed offsets")
    out = (
        offsets.withColumn("commit_time", F.lit(None).cast("timestamp"))
        .withColumn("expire_time", F.lit(None).cast("timestamp"))
        .withColumn("record_kind", F.lit("snapshot"))
        .withColumn("value_version", F.lit(None).cast("int"))
        .withColumn("transactional", F.lit(None).cast("boolean"))
        .withColumn("log_partition", F.lit(None).cast("int"))
        .withColumn("log_offset", F.lit(None).cast("long"))
        .withColumn("log_time", _ts("log_time_ms"))
        .withColumn("ingest_run_id", F.lit(run_id))
    )
    return conform(out, GROUP_COMMITS_SCHEMA)


# (log_partition, kind, record_type, records, of them with a time out of range): one row of the counts.
ProgressRow = tuple[int, str, int | None, int, int]


def progress_counts(decoded: DataFrame) -> DataFrame:
    """(log_partition, kind, record_type, records, times_out_of_range): the small frame the progress
    log is built from, in the aggregation that counts the records."""
    require_columns(decoded, ("log_partition", "kind", "record_type", *TIME_MS_FIELDS), "decoded records")
    return decoded.groupBy("log_partition", "kind", "record_type").agg(
        F.count(F.lit(1)).alias("records"),
        F.count(F.when(_time_out_of_range(), 1)).alias("times_out_of_range"),
    )


@dataclass(frozen=True)
class PartitionProgress:
    partition: int
    read: int = 0
    decoded: int = 0  # commits + tombstones + group metadata + group tombstones of audited groups
    other_groups: int = 0
    quarantined: int = 0
    skipped_by_type: tuple[tuple[int, int], ...] = ()
    # Decoded records (already counted in `decoded`) with a time stored as null, as out of range.
    times_out_of_range: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "read": self.read,
            "decoded": self.decoded,
            "other_groups": self.other_groups,
            "quarantined": self.quarantined,
            "skipped_by_type": {str(t): n for t, n in self.skipped_by_type},
            "times_out_of_range": self.times_out_of_range,
        }


def summarize_progress(rows: Iterable[ProgressRow]) -> list[PartitionProgress]:
    """`progress_counts` rows -> one PartitionProgress per partition."""
    acc: dict[int, dict[str, Any]] = {}
    for partition, kind, record_type, n, odd_times in rows:
        a = acc.setdefault(
            partition, {"read": 0, "decoded": 0, "other": 0, "bad": 0, "skipped": {}, "odd_times": 0}
        )
        a["read"] += n
        a["odd_times"] += odd_times
        if kind == KIND_SKIPPED:
            key = -1 if record_type is None else record_type
            a["skipped"][key] = a["skipped"].get(key, 0) + n
        elif kind == KIND_OTHER_GROUP:
            a["other"] += n
        elif kind == KIND_ERROR:
            a["bad"] += n
        else:
            a["decoded"] += n
    return [
        PartitionProgress(
            partition=p,
            read=a["read"],
            decoded=a["decoded"],
            other_groups=a["other"],
            quarantined=a["bad"],
            skipped_by_type=tuple(sorted(a["skipped"].items())),
            times_out_of_range=a["odd_times"],
        )
        for p, a in sorted(acc.items())
    ]


def total_progress(parts: Iterable[PartitionProgress]) -> PartitionProgress:
    """All partitions added up; partition -1 marks the total."""
    read = decoded = other = bad = odd_times = 0
    skipped: dict[int, int] = {}
    for p in parts:
        read, decoded, other, bad, odd_times = (
            read + p.read,
            decoded + p.decoded,
            other + p.other_groups,
            bad + p.quarantined,
            odd_times + p.times_out_of_range,
        )
        for t, n in p.skipped_by_type:
            skipped[t] = skipped.get(t, 0) + n
    return PartitionProgress(-1, read, decoded, other, bad, tuple(sorted(skipped.items())), odd_times)


def times_out_of_range_warning(topic: str, parts: Iterable[PartitionProgress]) -> str | None:
    """The run's warning about times stored as null (TIMESTAMP_MAX_MS), None when there is none."""
    odd = {p.partition: p.times_out_of_range for p in parts if p.times_out_of_range}
    if not odd:
        return None
    where = ", ".join(f"{topic}-{p}: {n}" for p, n in sorted(odd.items()))
    return (
        f"{sum(odd.values())} decoded records ({where}) carry a commit, expire or group state time "
        f"outside what the tables' TIMESTAMP columns hold ({TIMESTAMP_MIN_MS} to {TIMESTAMP_MAX_MS} ms "
        "since the epoch, 1677-09-21 to 2262-04-11 UTC): their rows are kept with that time null"
    )
