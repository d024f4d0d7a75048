"""The record decoder of `__consumer_offsets`: records (key and value bytes, with their log
coordinates) -> Arrow batches of DECODED_SCHEMA rows, one row per record, in the given order. Both
routes run it: the driver's over a consumer's records (app/offsets_topic/driver_route.py), Spark's on
the executors through `DataFrame.mapInArrow` (app/offsets_topic/spark_route.py, `decode_kafka_batches`).

The common record (an offset commit v0-v4 with no tagged fields and short metadata, of an audited
group) is decoded by a few struct calls, its key parsed once per distinct key; anything else goes
through `decode_row`, whose fallback is the complete, authoritative `decoder.decode_record`; malformed
bytes become KIND_ERROR rows. Pure functions over bytes and Arrow: no Kafka, no Spark session.
"""

from __future__ import annotations

import contextlib
import gc
import json
import struct
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from app.offsets_topic.decoded import (
    ARROW_DECODED_SCHEMA,
    DECODED_FIELDS,
    KIND_COMMIT,
    KIND_ERROR,
    KIND_GROUP_METADATA,
    KIND_GROUP_TOMBSTONE,
    KIND_OTHER_GROUP,
    KIND_SKIPPED,
    KIND_TOMBSTONE,
)
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
)

# --- one record ----------------------------------------------------------------------------------


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


# --- batches of records ---------------------------------------------------------------------------


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


# Distinct record keys remembered per decoder: (group, topic, partition) repeats in every commit of
# that partition, so the key is parsed once; a cluster has at most groups x partitions distinct keys,
# and beyond this bound the memo is simply started again.
_KEY_MEMO_SIZE = 200_000
_COMMIT_TYPES = (0, 1)  # OFFSET_COMMIT_KEY_TYPES, as the second byte of a key whose first is 0
_DENSE = 5 + 6  # kind, record_type, group, topic, partition + the commit value's six fields
_NO_REST = (None,) * (len(DECODED_FIELDS) - _DENSE)

# (log partitions, log offsets, log times, keys, values) -> a DECODED_SCHEMA batch, a row per record.
RecordDecoder = Callable[
    [pa.Array, pa.Array, pa.Array, Sequence[bytes | None], Sequence[bytes | None]], pa.RecordBatch
]


def make_record_decoder(groups: Collection[str] = ()) -> RecordDecoder:
    """A function (log partitions, log offsets, log times, keys, values) -> one DECODED_SCHEMA batch
    with a row per record, in the given order. The log coordinates are Arrow arrays (any integer type;
    the times a timestamp array), keys and values Python bytes. `groups` empty: every group is audited.

    Every row equals `decode_row`'s; the common record (an offset commit of an audited group) is built
    from two parts without the 20-field tuple: the key's (kind, type, group, topic, partition),
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
        partitions: pa.Array,
        offsets: pa.Array,
        log_times: pa.Array,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
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
        return decoded_columns(partitions, offsets, log_times, columns, n)

    return decode


def epoch_ms_times(timestamps_ms: Sequence[int]) -> pa.Array:
    """Kafka record timestamps in epoch milliseconds, as a consumer gives them, as the decoder's log times
    (the Kafka source's `timestamp` column holds the same instant)."""
    return pa.array(timestamps_ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a bulk decode, and back on after (if it was on).

    The decode allocates millions of small tuples, none of them in a reference cycle (reference counting
    frees them all), and the collector's passes over them took ~40% of a 3M-record read (measured,
    bench.ingest_offsets). Nothing is leaked: cyclic garbage made meanwhile is collected once it is back.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def decode_kafka_batches(
    groups: Collection[str] = (),
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function `mapInArrow` runs on the executors: batches of the Kafka source's columns
    (`decoded.KAFKA_INPUT_COLUMNS`) in, DECODED_SCHEMA batches out, a row per record.

    `groups` is captured by value, so it ships with the function; the decoder (and its memo of keys)
    is made where the function runs, once per task."""
    group_list = tuple(groups)

    def decode_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        decode = make_record_decoder(group_list)
        with cyclic_gc_paused():
            for batch in batches:
                col = batch.column
                yield decode(
                    col("partition"), col("offset"), col("timestamp"),
                    col("key").to_pylist(), col("value").to_pylist(),
                )  # fmt: skip

    return decode_batches
