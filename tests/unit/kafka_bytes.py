"""Test-side encoders for `__consumer_offsets` records, written from Kafka's message schema JSON files.

Deliberately independent of app.offsets_topic.decoder (no shared helpers), so that a mistake has to be
made twice, in two styles, to go unnoticed; hand-written hex literals in the tests guard against that too.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def int16(n: int) -> bytes:
    return n.to_bytes(2, "big", signed=True)


def int32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def int64(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def string(s: str | None) -> bytes:
    """Old-style (nullable) string: int16 length, -1 for null."""
    if s is None:
        return int16(-1)
    raw = s.encode()
    return int16(len(raw)) + raw


def compact_string(s: str | None) -> bytes:
    """Flexible-version string: uvarint of length+1, 0 for null."""
    if s is None:
        return uvarint(0)
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def blob(b: bytes) -> bytes:
    return int32(len(b)) + b


def compact_blob(b: bytes) -> bytes:
    return uvarint(len(b) + 1) + b


def tagged_fields(tags: list[tuple[int, bytes]] | None = None) -> bytes:
    tags = tags or []
    return uvarint(len(tags)) + b"".join(uvarint(tag) + uvarint(len(data)) + data for tag, data in tags)


# --- keys ------------------------------------------------------------------------------------------


def offset_commit_key(group: str, topic: str, partition: int, record_type: int = 1) -> bytes:
    return int16(record_type) + string(group) + string(topic) + int32(partition)


def group_metadata_key(group: str) -> bytes:
    return int16(2) + string(group)


# --- values ----------------------------------------------------------------------------------------


def offset_commit_value(
    version: int,
    offset: int,
    metadata: str = "",
    commit_ts: int = 0,
    *,
    leader_epoch: int = -1,
    expire_ts: int = -1,
    tags: list[tuple[int, bytes]] | None = None,
) -> bytes:
    """OffsetCommitValue.json: offset 0+, leaderEpoch 3+, metadata 0+, commitTimestamp 0+,
    expireTimestamp 1 only; flexible 4+ (any version >= 4 is written with the v4 layout)."""
    out = int16(version) + int64(offset)
    if version >= 3:
        out += int32(leader_epoch)
    out += compact_string(metadata) if version >= 4 else string(metadata)
    out += int64(commit_ts)
    if version == 1:
        out += int64(expire_ts)
    if version >= 4:
        out += tagged_fields(tags)
    return out


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int = 10_000
    rebalance_timeout: int = 300_000
    group_instance_id: str | None = None
    subscription: bytes = b""
    assignment: bytes = b""
    tags: list[tuple[int, bytes]] = field(default_factory=list)


def _member(m: Member, version: int) -> bytes:
    flexible = version >= 4
    s = compact_string if flexible else string
    b = compact_blob if flexible else blob
    out = s(m.member_id)
    if version >= 3:
        out += s(m.group_instance_id)
    out += s(m.client_id) + s(m.client_host)
    if version >= 1:
        out += int32(m.rebalance_timeout)
    out += int32(m.session_timeout) + b(m.subscription) + b(m.assignment)
    if flexible:
        out += tagged_fields(m.tags)
    return out


def group_metadata_value(
    version: int,
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    members: list[Member],
    *,
    state_ts: int = -1,
    tags: list[tuple[int, bytes]] | None = None,
) -> bytes:
    """GroupMetadataValue.json: protocolType, generation, protocol?, leader?, currentStateTimestamp 2+,
    members [memberId, groupInstanceId? 3+, clientId, clientHost, rebalanceTimeout 1+, sessionTimeout,
    subscription, assignment]; flexible 4+."""
    flexible = version >= 4
    s = compact_string if flexible else string
    out = int16(version) + s(protocol_type) + int32(generation) + s(protocol) + s(leader)
    if version >= 2:
        out += int64(state_ts)
    out += uvarint(len(members) + 1) if flexible else int32(len(members))
    out += b"".join(_member(m, version) for m in members)
    if flexible:
        out += tagged_fields(tags)
    return out
