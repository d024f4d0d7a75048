"""A catalogue of `__consumer_offsets` records of every kind the decoder meets, built with the test-side
encoders (tests/unit/kafka_bytes.py): the records both decode routes are held to, in the unit tier (the
record decoder against the complete per-record decoder) and the spark tier (the two routes' rows)."""

from __future__ import annotations

from app.offsets_topic.decoded import TIMESTAMP_MAX_MS, TIMESTAMP_MIN_MS
from tests.unit.kafka_bytes import (
    Member,
    group_metadata_key,
    group_metadata_value,
    int16,
    offset_commit_key,
    offset_commit_value,
    string,
)

Record = tuple[bytes | None, bytes | None]

KEY = offset_commit_key("grüppe", "orders.v1", 2**31 - 1, record_type=0)
MAX_MS, MIN_MS = TIMESTAMP_MAX_MS, TIMESTAMP_MIN_MS
# The common records, which the fast path decodes: every commit key and value version, edge values,
# tombstones, record types the audit skips. The commit and expire timestamps (expire: v1 only) include
# both ends of the range a TIMESTAMP column holds, one step beyond each, and int64's own ends.
COMMON: list[Record] = [
    (
        offset_commit_key("g", "t", p, record_type=v % 2),
        offset_commit_value(v, off, md, ts, leader_epoch=e, expire_ts=x),
    )
    for v in (0, 1, 2, 3, 4, 5)
    for p, off, md, ts, e, x in [
        (0, 0, "", 0, -1, -1),
        (-1, 2**62, "checkpoint=17;ü", 1_700_000_000_123, 7, 1_800_000_000_000),
        (2**31 - 1, -1, "x" * 125, -5, 0, 0),
        (3, -(2**63), "m", 2**63 - 1, -(2**31), -(2**63)),
        (4, 5, "n", -(2**63), 1, 2**63 - 1),
        (5, 6, "in", MAX_MS, 2, MIN_MS),
        (6, 7, "in", MIN_MS, 3, MAX_MS),
        (7, 8, "out", MAX_MS + 1, 4, MIN_MS - 1),
        (8, 9, "out", MIN_MS - 1, 5, MAX_MS + 1),
    ]
] + [
    (KEY, None),
    (offset_commit_key("g", "", 0, record_type=1), None),
    (int16(4) + string("g"), b"\x00\x00"),
    (int16(-1), b""),
]  # fmt: skip
# The rest, which the complete decoder takes: group metadata, long metadata, tagged fields, malformed bytes.
MEMBER = Member("m-1", client_id="svc-a", client_host="/10.0.0.7", group_instance_id=None)
RARE: list[Record] = [
    (group_metadata_key("g"), group_metadata_value(3, "consumer", 7, "range", "m-1", [MEMBER], state_ts=9)),
    (group_metadata_key("g"), None),
    (group_metadata_key("g"), group_metadata_value(2, "consumer", 8, "range", "m-1", [], state_ts=MAX_MS)),
    (group_metadata_key("g"), group_metadata_value(2, "consumer", 9, "range", None, [], state_ts=2**63 - 1)),
    (KEY, offset_commit_value(4, 5, "y" * 200, 1)),  # two-byte compact length
    (KEY, offset_commit_value(4, 3, "m", 9, tags=[(0, bytes(16))])),  # topic id tag
    (KEY, offset_commit_value(3, 1)[:-1]),  # truncated value
    (KEY, offset_commit_value(3, 1) + b"\x00"),  # trailing byte
    (KEY, int16(-2) + bytes(30)),  # negative version
    (KEY[:-1], offset_commit_value(3, 1)),  # truncated key
    (KEY + b"\x00", None),  # trailing byte in a tombstone key
    (int16(1) + int16(2) + b"\xff\xfe" + string("t") + bytes(4), offset_commit_value(3, 1)),  # bad UTF-8
    (int16(1) + int16(3) + b"\xed\xa0\x80" + string("t") + bytes(4), None),  # a surrogate
    (int16(1) + int16(2) + b"\xc0\x80" + string("t") + bytes(4), None),  # overlong encoding
    (KEY, int16(3) + bytes(12) + int16(1) + b"\xf4\x90" + bytes(8)),  # beyond U+10FFFF (truncated)
    (b"\x00", b""),
    (None, b"v"),
]
# Records of a group that is not audited when the audited groups are AUDITED.
OTHER_GROUPS: list[Record] = [
    (offset_commit_key("other", "t", 0), b"garbage"),
    (group_metadata_key("other"), None),
]
AUDITED = ("g", "grüppe")
RECORDS: list[Record] = COMMON + RARE + OTHER_GROUPS
