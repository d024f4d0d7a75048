"""Decode records of Kafka's `__consumer_offsets` topic into typed records (CONTRACTS.md section 6).

Pure functions over bytes: no Spark, no I/O. The layouts follow Kafka's own message schemas in
`group-coordinator/src/main/resources/common/message/` (LegacyOffsetCommitKey/Value, OffsetCommitKey/Value,
GroupMetadataKey/Value). Keys are never flexible; values become flexible at version 4.

`decode_record` never raises: the ingest job must keep reading a partition past one bad record, so every
problem comes back as a `DecodeFailure` whose reason names the structure, version and byte position, and the
raw bytes go to the decode_errors table.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from app.errors import OffsetAuditError

# Kafka's broker default for offsets.topic.num.partitions; callers should read the real count from the topic.
DEFAULT_OFFSETS_TOPIC_PARTITIONS = 50

# Record type 0 is LegacyOffsetCommitKey, 1 is OffsetCommitKey: same key layout, both carry offset commits.
OFFSET_COMMIT_KEY_TYPES = frozenset({0, 1})
GROUP_METADATA_KEY_TYPE = 2

# Value versions above these are read with the newest layout we know: since KIP-915 a version bump may only
# add tagged fields, which a reader that skips unknown tags handles.
LATEST_OFFSET_COMMIT_VALUE_VERSION = 4
LATEST_GROUP_METADATA_VALUE_VERSION = 4
FIRST_FLEXIBLE_VALUE_VERSION = 4

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_NO_LEADER_EPOCH = -1
_NO_TIMESTAMP = -1


# --- group -> partition --------------------------------------------------------------------------


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units with 32-bit signed overflow."""
    # Java strings are UTF-16, so a character outside the BMP contributes two surrogate code units.
    # surrogatepass keeps lone surrogates (legal in both Java and Python strings) instead of failing.
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h > _INT32_MAX else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: like Math.abs, except that Integer.MIN_VALUE maps to 0 instead of itself."""
    if not _INT32_MIN <= n <= _INT32_MAX:
        raise OffsetAuditError(f"kafka_abs takes a 32-bit signed int, got {n}")
    return 0 if n == _INT32_MIN else abs(n)


def partition_for_group(group_id: str, partition_count: int) -> int:
    """The `__consumer_offsets` partition that holds `group_id`, as the group coordinator computes it."""
    if partition_count <= 0:
        raise OffsetAuditError(f"__consumer_offsets partition count must be positive, got {partition_count}")
    return kafka_abs(java_string_hash(group_id)) % partition_count


# --- decoded records -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    group_id: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int | None  # None where the value has no epoch (< v3) or carries -1
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None  # only value v1 has the field
    value_version: int


@dataclass(frozen=True, slots=True)
class OffsetTombstone:
    """The committed offset was deleted: expiry, offset delete or group delete."""

    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None  # value v3+
    client_id: str
    client_host: str
    rebalance_timeout_ms: int | None  # value v1+
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    group_id: str
    value_version: int
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int | None  # value v2+, -1 means unknown
    members: tuple[GroupMember, ...]


@dataclass(frozen=True, slots=True)
class GroupTombstone:
    """The group was removed."""

    group_id: str


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    """A record type this audit does not read (consumer/share/streams group records, or one not yet known)."""

    record_type: int


@dataclass(frozen=True, slots=True)
class DecodeFailure:
    reason: str


DecodedRecord = (
    OffsetCommit | OffsetTombstone | GroupMetadata | GroupTombstone | SkippedRecord | DecodeFailure
)
BytesLike = bytes | bytearray | memoryview  # PySpark hands BinaryType values over as bytearray


# --- byte reader ---------------------------------------------------------------------------------


class _MalformedError(Exception):
    """Internal: the bytes do not match the layout. Becomes a DecodeFailure, never leaves this module."""


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_MAX_UVARINT_BYTES = 5  # Kafka's readUnsignedVarint stops at 5 bytes (a 32-bit value)


class _Reader:
    """Big-endian cursor over one key or value; `label` names the structure in error messages."""

    __slots__ = ("_buf", "_label", "_pos")

    def __init__(self, buf: bytes, label: str) -> None:
        self._buf = buf
        self._label = label
        self._pos = 0

    def relabel(self, label: str) -> None:
        self._label = label

    def _fail(self, at: int, what: str) -> _MalformedError:
        # `at` is where the offending field starts, which is what someone reading a hex dump needs.
        return _MalformedError(f"malformed {self._label} at byte {at}: {what}")

    def _take(self, n: int) -> bytes:
        have = len(self._buf) - self._pos
        if n > have:
            raise _MalformedError(f"truncated {self._label} at byte {self._pos}: need {n} bytes, have {have}")
        chunk = self._buf[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def read_int16(self) -> int:
        value: int = _INT16.unpack(self._take(2))[0]
        return value

    def read_int32(self) -> int:
        value: int = _INT32.unpack(self._take(4))[0]
        return value

    def read_int64(self) -> int:
        value: int = _INT64.unpack(self._take(8))[0]
        return value

    def read_uvarint(self) -> int:
        start = self._pos
        result = 0
        for i in range(_MAX_UVARINT_BYTES):
            b = self._take(1)[0]
            result |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                return result
        raise self._fail(start, f"unsigned varint longer than {_MAX_UVARINT_BYTES} bytes")

    def _length(self, flexible: bool, kind: str, field: str) -> int:
        """A length prefix, -1 for null. Compact lengths are stored +1 so that 0 can mean null."""
        start = self._pos
        if flexible:
            n = self.read_uvarint() - 1
        else:
            n = self.read_int16() if kind == "string" else self.read_int32()
        if n < -1:
            raise self._fail(start, f"negative {kind} length {n} for {field}")
        return n

    def _non_null_length(self, flexible: bool, kind: str, field: str) -> int:
        start = self._pos
        n = self._length(flexible, kind, field)
        if n == -1:
            raise self._fail(start, f"non-nullable {kind} {field} is null")
        return n

    def _utf8(self, n: int) -> str:
        start = self._pos
        raw = self._take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            # Kafka encodes Java strings, which always yields valid UTF-8; invalid bytes mean corruption,
            # and a group id silently repaired with U+FFFD would hash to a different partition.
            raise self._fail(start, f"invalid UTF-8 ({exc.reason})") from exc

    def read_nullable_string(self, flexible: bool, field: str) -> str | None:
        n = self._length(flexible, "string", field)
        return None if n == -1 else self._utf8(n)

    def read_string(self, flexible: bool, field: str) -> str:
        return self._utf8(self._non_null_length(flexible, "string", field))

    def read_bytes(self, flexible: bool, field: str) -> bytes:
        return self._take(self._non_null_length(flexible, "bytes", field))

    def read_array_length(self, flexible: bool, field: str) -> int:
        return self._non_null_length(flexible, "array", field)

    def skip_tagged_fields(self) -> None:
        # Every tag is skipped, known or not: the only tag defined so far (OffsetCommitValue tag 0, the
        # topic id, Kafka 4.1+) is not part of the audit's record, and skipping by size is forward compatible.
        for _ in range(self.read_uvarint()):
            self.read_uvarint()  # tag
            self._take(self.read_uvarint())


# --- keys ----------------------------------------------------------------------------------------


class _OffsetKey(NamedTuple):
    group_id: str
    topic: str
    partition: int


def _decode_offset_commit_key(r: _Reader) -> _OffsetKey:
    # Both LegacyOffsetCommitKey (type 0) and OffsetCommitKey (type 1) are version 0, non-flexible.
    group = r.read_string(flexible=False, field="group")
    topic = r.read_string(flexible=False, field="topic")
    return _OffsetKey(group, topic, r.read_int32())


def _decode_group_metadata_key(r: _Reader) -> str:
    return r.read_string(flexible=False, field="group")


# --- offset commit values ------------------------------------------------------------------------


class _CommitValue(NamedTuple):
    offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None


def _epoch_or_none(epoch: int) -> int | None:
    return None if epoch == _NO_LEADER_EPOCH else epoch


def _timestamp_or_none(ts: int) -> int | None:
    return None if ts == _NO_TIMESTAMP else ts


def _decode_offset_commit_value_v0(r: _Reader) -> _CommitValue:
    offset = r.read_int64()
    metadata = r.read_string(flexible=False, field="metadata")
    return _CommitValue(offset, None, metadata, r.read_int64(), None)


def _decode_offset_commit_value_v1(r: _Reader) -> _CommitValue:
    offset = r.read_int64()
    metadata = r.read_string(flexible=False, field="metadata")
    commit_ts = r.read_int64()
    return _CommitValue(offset, None, metadata, commit_ts, _timestamp_or_none(r.read_int64()))


def _decode_offset_commit_value_v3(r: _Reader) -> _CommitValue:
    offset = r.read_int64()
    epoch = _epoch_or_none(r.read_int32())
    metadata = r.read_string(flexible=False, field="metadata")
    return _CommitValue(offset, epoch, metadata, r.read_int64(), None)


def _decode_offset_commit_value_v4(r: _Reader) -> _CommitValue:
    offset = r.read_int64()
    epoch = _epoch_or_none(r.read_int32())
    metadata = r.read_string(flexible=True, field="metadata")
    commit_ts = r.read_int64()
    r.skip_tagged_fields()
    return _CommitValue(offset, epoch, metadata, commit_ts, None)


_OFFSET_COMMIT_VALUE_DECODERS: dict[int, Callable[[_Reader], _CommitValue]] = {
    0: _decode_offset_commit_value_v0,
    1: _decode_offset_commit_value_v1,
    2: _decode_offset_commit_value_v0,  # v2 dropped v1's expire timestamp again (KIP-211)
    3: _decode_offset_commit_value_v3,
    4: _decode_offset_commit_value_v4,
}


def _decode_offset_commit(key: _OffsetKey, r: _Reader, version: int) -> OffsetCommit:
    decode = _OFFSET_COMMIT_VALUE_DECODERS[min(version, LATEST_OFFSET_COMMIT_VALUE_VERSION)]
    v = decode(r)
    return OffsetCommit(
        group_id=key.group_id,
        topic=key.topic,
        partition=key.partition,
        offset=v.offset,
        leader_epoch=v.leader_epoch,
        metadata=v.metadata,
        commit_timestamp_ms=v.commit_timestamp_ms,
        expire_timestamp_ms=v.expire_timestamp_ms,
        value_version=version,
    )


# --- group metadata values -----------------------------------------------------------------------
# One version-gated decoder mirrors the schema's "versions": "N+" annotations more faithfully than five
# near-identical copies would.


def _decode_group_member(r: _Reader, version: int) -> GroupMember:
    flexible = version >= FIRST_FLEXIBLE_VALUE_VERSION
    member_id = r.read_string(flexible, "memberId")
    instance_id = r.read_nullable_string(flexible, "groupInstanceId") if version >= 3 else None
    client_id = r.read_string(flexible, "clientId")
    client_host = r.read_string(flexible, "clientHost")
    rebalance_timeout = r.read_int32() if version >= 1 else None
    session_timeout = r.read_int32()
    subscription = r.read_bytes(flexible, "subscription")
    assignment = r.read_bytes(flexible, "assignment")
    if flexible:
        r.skip_tagged_fields()
    # In the value's field order, which is the dataclass's.
    return GroupMember(
        member_id, instance_id, client_id, client_host, rebalance_timeout, session_timeout, subscription,
        assignment,
    )  # fmt: skip


def _decode_group_metadata(group_id: str, r: _Reader, version: int) -> GroupMetadata:
    layout = min(version, LATEST_GROUP_METADATA_VALUE_VERSION)
    flexible = layout >= FIRST_FLEXIBLE_VALUE_VERSION
    protocol_type = r.read_string(flexible, "protocolType")
    generation = r.read_int32()
    protocol = r.read_nullable_string(flexible, "protocol")
    leader = r.read_nullable_string(flexible, "leader")
    state_ts = _timestamp_or_none(r.read_int64()) if layout >= 2 else None
    member_count = r.read_array_length(flexible, "members")
    members = tuple(_decode_group_member(r, layout) for _ in range(member_count))
    if flexible:
        r.skip_tagged_fields()
    return GroupMetadata(group_id, version, protocol_type, generation, protocol, leader, state_ts, members)


# --- record --------------------------------------------------------------------------------------


def _read_value_version(value: bytes, kind: str) -> tuple[_Reader, int]:
    r = _Reader(value, f"{kind} value")
    version = r.read_int16()
    if version < 0:
        raise _MalformedError(f"malformed {kind} value at byte 0: negative version {version}")
    r.relabel(f"{kind} value v{version}")
    return r, version


def _decode(key: bytes, value: bytes | None) -> DecodedRecord:
    kr = _Reader(key, "record key")
    record_type = kr.read_int16()
    if record_type in OFFSET_COMMIT_KEY_TYPES:
        kr.relabel(f"offset commit key (type {record_type})")
        okey = _decode_offset_commit_key(kr)
        if value is None:
            return OffsetTombstone(okey.group_id, okey.topic, okey.partition)
        vr, version = _read_value_version(value, "offset commit")
        return _decode_offset_commit(okey, vr, version)
    if record_type == GROUP_METADATA_KEY_TYPE:
        kr.relabel("group metadata key")
        group_id = _decode_group_metadata_key(kr)
        if value is None:
            return GroupTombstone(group_id)
        vr, version = _read_value_version(value, "group metadata")
        return _decode_group_metadata(group_id, vr, version)
    # Types 3..24 are consumer/share/streams group records (Kafka 3.7+); anything else is newer still.
    # Neither is needed to audit committed offsets, so they are counted, never failed on.
    return SkippedRecord(record_type)


def decode_record(key: BytesLike | None, value: BytesLike | None) -> DecodedRecord:
    """Decode one `__consumer_offsets` record. A None value is a tombstone. Never raises."""
    if key is None:
        return DecodeFailure("null record key: every __consumer_offsets record has a key")
    try:
        return _decode(bytes(key), None if value is None else bytes(value))
    except _MalformedError as exc:
        return DecodeFailure(str(exc))
    except Exception as exc:
        # Best-effort path: a decoder bug must not stop ingestion of a whole partition. The record lands in
        # decode_errors with this reason, which says plainly that the decoder, not the data, is at fault.
        return DecodeFailure(f"internal decoder error: {type(exc).__name__}: {exc}")
