"""Spec for app.offsets_topic.decoder: the group -> partition rule and the `__consumer_offsets`
record layouts.

Layouts come from Kafka's schema files (group-coordinator/src/main/resources/common/message/*.json). Most
bytes are built with tests/unit/kafka_bytes.py; the hex literals are written by hand from the schema, so the
encoder and the decoder cannot share one mistake unnoticed.
"""

from __future__ import annotations

import random

import pytest

from app.errors import OffsetAuditError
from app.offsets_topic import decoder as consumer_offsets
from app.offsets_topic.decoder import (
    DEFAULT_OFFSETS_TOPIC_PARTITIONS,
    DecodedRecord,
    DecodeFailure,
    GroupMember,
    GroupMetadata,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    SkippedRecord,
    decode_record,
    java_string_hash,
    kafka_abs,
    partition_for_group,
)
from tests.unit import kafka_bytes as kb

pytestmark = pytest.mark.unit

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
TOPIC_ID = bytes.fromhex("00112233445566778899aabbccddeeff")


def reference_java_hash(s: str) -> int:
    """Independent of the module: the closed form sum(u_i * 31^(n-1-i)) over UTF-16 code units, reduced
    mod 2^32 once at the end (equal to Java's step-wise wrapping, since wrapping is reduction mod 2^32)."""
    raw = s.encode("utf-16-be", "surrogatepass")
    units = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]
    total = int(sum(u * 31 ** (len(units) - 1 - i) for i, u in enumerate(units))) % 2**32
    return total - 2**32 if total >= 2**31 else total


# --- group -> partition ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        pytest.param("", 0, id="empty"),
        pytest.param("a", 97, id="a"),
        pytest.param("hello", 99162322, id="hello"),
        # Well-known Java string whose hash is exactly Integer.MIN_VALUE.
        pytest.param("polygenelubricants", INT_MIN, id="polygenelubricants"),
        # 122 * (31^5 + ... + 1) = 122 * (31^6 - 1) / 30 = 122 * 29583456 = 3609181632 >= 2^31,
        # so the int32 value is 3609181632 - 2^32 = -685785664.
        pytest.param("zzzzzz", -685785664, id="negative-hash"),
        # グ U+30B0=12464, ル U+30EB=12523, ー U+30FC=12540, プ U+30D7=12503:
        # 12464*29791 + 12523*961 + 12540*31 + 12503 = 371315024 + 12034603 + 388740 + 12503 = 383750870.
        pytest.param("グループ", 383750870, id="katakana"),
        # U+1F600 is the surrogate pair D83D DE00 in UTF-16: 31*55357 + 56832 = 1772899.
        # Hashing the code point 0x1F600 = 128512 instead would be the classic mistake.
        pytest.param("😀", 1772899, id="emoji-surrogate-pair"),
    ],
)
def test_java_string_hash_known_values(s: str, expected: int) -> None:
    assert java_string_hash(s) == expected
    assert reference_java_hash(s) == expected


@pytest.mark.parametrize(
    "s",
    [
        "consumer-group-1",
        "flink-job",
        "spark-kafka-source-42",
        "Ünïcödé",
        "混合グループ🚀x",
        "𝔘𝔫𝔦",
        "\ud800",
        "a" * 500,
    ],
)
def test_java_string_hash_matches_independent_reference(s: str) -> None:
    assert java_string_hash(s) == reference_java_hash(s)


@pytest.mark.parametrize(
    ("n", "expected"),
    [(0, 0), (7, 7), (-7, 7), (INT_MAX, INT_MAX), (INT_MIN + 1, INT_MAX), (INT_MIN, 0)],
)
def test_kafka_abs(n: int, expected: int) -> None:
    assert kafka_abs(n) == expected


@pytest.mark.parametrize("n", [INT_MAX + 1, INT_MIN - 1])
def test_kafka_abs_rejects_values_outside_int32(n: int) -> None:
    with pytest.raises(OffsetAuditError):
        kafka_abs(n)


@pytest.mark.parametrize(
    ("group_id", "partitions", "expected"),
    [
        pytest.param("", 50, 0, id="empty"),
        pytest.param("a", 50, 47, id="a"),
        pytest.param("hello", 50, 22, id="hello"),
        pytest.param("polygenelubricants", 50, 0, id="min-value-abs-is-zero"),
        # abs(-685785664) % 50 = 14, whereas (h & 0x7fffffff) % 50 = 1461697984 % 50 = 34.
        pytest.param("zzzzzz", 50, 14, id="negative-hash-uses-abs-not-mask"),
        pytest.param("グループ", 50, 20, id="katakana"),
        # 1772899 % 50 = 49; hashing the code point would give 128512 % 50 = 12.
        pytest.param("😀", 50, 49, id="emoji"),
        pytest.param("hello", 1, 0, id="single-partition"),
        pytest.param("zzzzzz", 7, 685785664 % 7, id="seven-partitions"),
    ],
)
def test_partition_for_group(group_id: str, partitions: int, expected: int) -> None:
    assert partition_for_group(group_id, partitions) == expected


def test_default_partition_count_is_kafkas() -> None:
    assert DEFAULT_OFFSETS_TOPIC_PARTITIONS == 50


@pytest.mark.parametrize("partitions", [0, -1])
def test_partition_for_group_rejects_non_positive_count(partitions: int) -> None:
    with pytest.raises(OffsetAuditError, match="must be positive"):
        partition_for_group("g", partitions)


# --- hand-written bytes ----------------------------------------------------------------------------

# fromhex ignores spaces, so each field gets its own group (and survives the formatter).
# type 1 | group "g1" | topic "t" | partition 3
KEY_G1_T_3 = bytes.fromhex("0001 0002 6731 0001 74 00000003")
COMMIT_TS = 1_700_000_000_000  # 0x0000018b_cfe56800
V4_VALUE_WITH_TOPIC_ID = bytes.fromhex(
    # v4 | offset 100 | epoch -1 | compact metadata "m" (len+1 = 2) | commit ts
    "0004 0000000000000064 ffffffff 02 6d 0000018bcfe56800"
    # tagged fields: count 1 | tag 0 (topic id) | size 16 | uuid
    " 01 00 10 00112233445566778899aabbccddeeff"
)


def test_hex_offset_commit_v3() -> None:
    # v3 | offset 42 | leader epoch 5 | metadata "" | commit ts
    value = bytes.fromhex("0003 000000000000002a 00000005 0000 0000018bcfe56800")
    assert decode_record(KEY_G1_T_3, value) == OffsetCommit(
        group_id="g1",
        topic="t",
        partition=3,
        offset=42,
        leader_epoch=5,
        metadata="",
        commit_timestamp_ms=COMMIT_TS,
        expire_timestamp_ms=None,
        value_version=3,
    )


def test_hex_offset_commit_v1_with_expire_timestamp() -> None:
    # v1 | offset 255 | metadata "ab" | commit ts | expire ts = commit ts + 256
    value = bytes.fromhex("0001 00000000000000ff 0002 6162 0000018bcfe56800 0000018bcfe56900")
    assert decode_record(KEY_G1_T_3, value) == OffsetCommit(
        "g1", "t", 3, 255, None, "ab", COMMIT_TS, COMMIT_TS + 256, 1
    )


def test_hex_offset_commit_v4_with_topic_id_tag() -> None:
    assert decode_record(KEY_G1_T_3, V4_VALUE_WITH_TOPIC_ID) == OffsetCommit(
        "g1", "t", 3, 100, None, "m", COMMIT_TS, None, 4
    )


def test_hex_group_metadata_v0_empty_group() -> None:
    key = bytes.fromhex("0002 0001 67")  # type 2 | group "g"
    # v0 | "consumer" | generation 1 | protocol null | leader null | 0 members
    value = bytes.fromhex("0000 0008 636f6e73756d6572 00000001 ffff ffff 00000000")
    assert decode_record(key, value) == GroupMetadata("g", 0, "consumer", 1, None, None, None, ())


def test_hex_group_metadata_v4_flexible() -> None:
    key = bytes.fromhex("0002 0001 67")
    value = bytes.fromhex(
        "0004"
        " 09 636f6e73756d6572"  # protocolType "consumer" (compact length 8+1)
        " 00000007"  # generation 7
        " 06 72616e6765"  # protocol "range"
        " 03 6d31"  # leader "m1"
        " 0000018bcfe56800"  # currentStateTimestamp
        " 02"  # compact array: 1 member
        " 03 6d31"  # memberId "m1"
        " 00"  # groupInstanceId null
        " 02 63"  # clientId "c"
        " 03 2f68"  # clientHost "/h"
        " 000493e0"  # rebalanceTimeout 300000
        " 0000afc8"  # sessionTimeout 45000
        " 03 0102"  # subscription, 2 bytes
        " 01"  # assignment, empty
        " 00"  # member tagged fields: none
        " 00"  # group tagged fields: none
    )
    member = GroupMember("m1", None, "c", "/h", 300_000, 45_000, b"\x01\x02", b"")
    assert decode_record(key, value) == GroupMetadata(
        "g", 4, "consumer", 7, "range", "m1", COMMIT_TS, (member,)
    )


def test_encoder_agrees_with_hand_written_bytes() -> None:
    assert kb.offset_commit_key("g1", "t", 3) == KEY_G1_T_3
    assert kb.offset_commit_value(4, 100, "m", COMMIT_TS, tags=[(0, TOPIC_ID)]) == V4_VALUE_WITH_TOPIC_ID


# --- keys ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("record_type", [0, 1])
def test_offset_commit_key_types(record_type: int) -> None:
    key = kb.offset_commit_key("grp", "orders", 7, record_type=record_type)
    got = decode_record(key, kb.offset_commit_value(3, 10, "", 5, leader_epoch=2))
    assert got == OffsetCommit("grp", "orders", 7, 10, 2, "", 5, None, 3)


def test_group_metadata_key_type() -> None:
    got = decode_record(
        kb.group_metadata_key("grp"), kb.group_metadata_value(3, "consumer", 1, None, None, [])
    )
    assert isinstance(got, GroupMetadata)
    assert got.group_id == "grp"


@pytest.mark.parametrize("record_type", [*range(3, 25), 25, 99, 32767, -1])
def test_other_record_types_are_skipped_whatever_their_bytes(record_type: int) -> None:
    key = kb.int16(record_type) + b"\xff\xfe anything"
    assert decode_record(key, b"\x00") == SkippedRecord(record_type)
    assert decode_record(key, None) == SkippedRecord(record_type)
    assert decode_record(kb.int16(record_type), b"garbage") == SkippedRecord(record_type)


def test_trailing_bytes_after_key_are_tolerated() -> None:
    key = kb.offset_commit_key("g", "t", 0) + b"\x00\x01"
    assert isinstance(decode_record(key, None), OffsetTombstone)


# --- offset commit values --------------------------------------------------------------------------

OFFSET_KEY = kb.offset_commit_key("grp", "orders", 4)


@pytest.mark.parametrize(
    ("version", "expected_epoch", "expected_expire"),
    [
        pytest.param(0, None, None, id="v0"),
        pytest.param(1, None, 9_000, id="v1-has-expire"),
        pytest.param(2, None, None, id="v2-like-v0"),
        pytest.param(3, 11, None, id="v3-leader-epoch"),
        pytest.param(4, 11, None, id="v4-flexible"),
        pytest.param(5, 11, None, id="v5-read-as-v4"),
    ],
)
def test_offset_commit_value_versions(
    version: int, expected_epoch: int | None, expected_expire: int | None
) -> None:
    value = kb.offset_commit_value(version, 1234, "meta", 5_000, leader_epoch=11, expire_ts=9_000)
    assert decode_record(OFFSET_KEY, value) == OffsetCommit(
        group_id="grp",
        topic="orders",
        partition=4,
        offset=1234,
        leader_epoch=expected_epoch,
        metadata="meta",
        commit_timestamp_ms=5_000,
        expire_timestamp_ms=expected_expire,
        value_version=version,
    )


@pytest.mark.parametrize("version", [3, 4])
def test_leader_epoch_minus_one_means_none(version: int) -> None:
    got = decode_record(OFFSET_KEY, kb.offset_commit_value(version, 1, leader_epoch=-1))
    assert isinstance(got, OffsetCommit)
    assert got.leader_epoch is None


def test_v1_expire_timestamp_minus_one_means_none() -> None:
    got = decode_record(OFFSET_KEY, kb.offset_commit_value(1, 1, expire_ts=-1))
    assert isinstance(got, OffsetCommit)
    assert got.expire_timestamp_ms is None


def test_offset_edge_values() -> None:
    got = decode_record(OFFSET_KEY, kb.offset_commit_value(3, 2**63 - 1, commit_ts=-5, leader_epoch=INT_MAX))
    assert isinstance(got, OffsetCommit)
    assert (got.offset, got.commit_timestamp_ms, got.leader_epoch) == (2**63 - 1, -5, INT_MAX)


def test_flexible_metadata_longer_than_127_bytes() -> None:
    metadata = "é" * 150  # 300 UTF-8 bytes: the compact length 301 needs a two-byte uvarint
    value = kb.offset_commit_value(4, 1, metadata)
    assert value[2 + 8 + 4 : 2 + 8 + 4 + 2] == bytes([0xAD, 0x02])  # 301 = 0b10_0101101
    got = decode_record(OFFSET_KEY, value)
    assert isinstance(got, OffsetCommit)
    assert got.metadata == metadata


@pytest.mark.parametrize("length", [300, 32_767])
def test_old_style_metadata_length_is_a_signed_int16(length: int) -> None:
    got = decode_record(OFFSET_KEY, kb.offset_commit_value(3, 1, "x" * length))
    assert isinstance(got, OffsetCommit)
    assert len(got.metadata) == length


def test_unknown_tagged_fields_are_skipped() -> None:
    tags = [(0, TOPIC_ID), (7, b"xyz"), (300, bytes(200))]  # tag 300 and size 200 are multi-byte uvarints
    got = decode_record(OFFSET_KEY, kb.offset_commit_value(4, 77, "m", 1, leader_epoch=3, tags=tags))
    assert got == OffsetCommit("grp", "orders", 4, 77, 3, "m", 1, None, 4)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_trailing_bytes_after_non_flexible_value_are_tolerated(version: int) -> None:
    value = kb.offset_commit_value(version, 8, "m", 1) + b"\x01\x02\x03"
    got = decode_record(OFFSET_KEY, value)
    assert isinstance(got, OffsetCommit)
    assert got.offset == 8


def test_offset_tombstone() -> None:
    assert decode_record(OFFSET_KEY, None) == OffsetTombstone("grp", "orders", 4)


def test_type_0_key_tombstone() -> None:
    assert decode_record(kb.offset_commit_key("g", "t", 1, record_type=0), None) == OffsetTombstone(
        "g", "t", 1
    )


# --- group metadata values -------------------------------------------------------------------------

GROUP_KEY = kb.group_metadata_key("payments")
MEMBERS = [
    kb.Member(
        "consumer-1-aaa",
        "consumer-1",
        "/10.0.0.1",
        session_timeout=45_000,
        rebalance_timeout=300_000,
        group_instance_id="static-1",
        subscription=b"\x00\x01sub",
        assignment=b"\x00\x01asg",
    ),
    kb.Member("consumer-2-bbb", "client-ü", "/10.0.0.2", session_timeout=10_000, rebalance_timeout=60_000),
]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
def test_group_metadata_value_versions(version: int) -> None:
    value = kb.group_metadata_value(version, "consumer", 12, "range", "consumer-1-aaa", MEMBERS, state_ts=777)
    got = decode_record(GROUP_KEY, value)
    assert isinstance(got, GroupMetadata)
    assert (got.group_id, got.value_version, got.protocol_type) == ("payments", version, "consumer")
    assert (got.generation, got.protocol, got.leader) == (12, "range", "consumer-1-aaa")
    assert got.current_state_timestamp_ms == (777 if version >= 2 else None)
    assert [(m.member_id, m.client_id, m.client_host) for m in got.members] == [
        ("consumer-1-aaa", "consumer-1", "/10.0.0.1"),
        ("consumer-2-bbb", "client-ü", "/10.0.0.2"),
    ]
    first = got.members[0]
    assert first.group_instance_id == ("static-1" if version >= 3 else None)
    assert first.rebalance_timeout_ms == (300_000 if version >= 1 else None)
    assert first.session_timeout_ms == 45_000
    assert (first.subscription, first.assignment) == (b"\x00\x01sub", b"\x00\x01asg")


@pytest.mark.parametrize("version", [2, 3, 4])
def test_group_state_timestamp_minus_one_means_none(version: int) -> None:
    got = decode_record(
        GROUP_KEY, kb.group_metadata_value(version, "consumer", 1, None, None, [], state_ts=-1)
    )
    assert isinstance(got, GroupMetadata)
    assert got.current_state_timestamp_ms is None


def test_group_metadata_v4_long_strings_and_tags() -> None:
    host = "/" + "h" * 199  # 200 bytes
    member = kb.Member("m" * 130, "c" * 128, host, tags=[(5, b"member-tag")], subscription=bytes(range(256)))
    value = kb.group_metadata_value(
        4, "consumer", 3, "p" * 140, None, [member], tags=[(0, b"x"), (9, bytes(150))]
    )
    got = decode_record(GROUP_KEY, value)
    assert isinstance(got, GroupMetadata)
    assert got.protocol == "p" * 140
    (m,) = got.members
    assert (m.member_id, m.client_id, m.client_host) == ("m" * 130, "c" * 128, host)
    assert m.subscription == bytes(range(256))


def test_group_tombstone() -> None:
    assert decode_record(GROUP_KEY, None) == GroupTombstone("payments")


# --- inputs from Spark -----------------------------------------------------------------------------


def test_bytearray_and_memoryview_inputs() -> None:
    value = kb.offset_commit_value(3, 5, "m", 1)
    expected = decode_record(OFFSET_KEY, value)
    assert isinstance(expected, OffsetCommit)
    assert decode_record(bytearray(OFFSET_KEY), bytearray(value)) == expected
    assert decode_record(memoryview(OFFSET_KEY), memoryview(value)) == expected


# --- failures --------------------------------------------------------------------------------------


def test_none_key() -> None:
    for value in (None, b"\x00\x03"):
        got = decode_record(None, value)
        assert isinstance(got, DecodeFailure)
        assert "null record key" in got.reason


def test_truncation_reason_names_structure_version_and_position() -> None:
    # 2 (version) + 8 (offset) + 4 (epoch) + 3 (metadata "m") = byte 17, where commitTimestamp starts.
    value = kb.offset_commit_value(3, 1, "m", 1)[:20]
    assert decode_record(OFFSET_KEY, value) == DecodeFailure(
        "truncated offset commit value v3 at byte 17: need 8 bytes, have 3"
    )


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        pytest.param(b"", None, "truncated record key at byte 0: need 2 bytes, have 0", id="empty-key"),
        pytest.param(
            b"\x00", None, "truncated record key at byte 0: need 2 bytes, have 1", id="one-byte-key"
        ),
        pytest.param(
            OFFSET_KEY, b"", "truncated offset commit value at byte 0", id="empty-value-is-not-null"
        ),
        pytest.param(OFFSET_KEY, b"\xff\xff", "negative version -1", id="negative-value-version"),
        pytest.param(
            kb.int16(1) + kb.int16(-2),
            None,
            "offset commit key (type 1) at byte 2: negative string length -2",
            id="bad-len",
        ),
        pytest.param(kb.int16(1) + kb.int16(-1), None, "non-nullable string group is null", id="null-group"),
        pytest.param(
            kb.int16(2) + kb.int16(2) + b"\xc3\x28",
            None,
            "group metadata key at byte 4: invalid UTF-8",
            id="utf8",
        ),
        pytest.param(
            OFFSET_KEY,
            kb.int16(4) + kb.int64(1) + kb.int32(0) + b"\x00" + kb.int64(0) + b"\x00",
            "non-nullable string metadata is null",
            id="v4-null-metadata",
        ),
        pytest.param(
            OFFSET_KEY,
            kb.int16(4) + kb.int64(1) + kb.int32(0) + b"\x80\x80\x80\x80\x80\x01",
            "unsigned varint longer than 5 bytes",
            id="long-uvarint",
        ),
        pytest.param(
            OFFSET_KEY,
            kb.int16(4) + kb.int64(1) + kb.int32(0) + b"\x01" + kb.int64(0) + b"\x01\x00\x05ab",
            "need 5 bytes, have 2",
            id="tag-size-beyond-end",
        ),
        pytest.param(
            GROUP_KEY,
            kb.int16(3)
            + kb.string("consumer")
            + kb.int32(1)
            + kb.string(None) * 2
            + kb.int64(0)
            + kb.int32(-1),
            "non-nullable array members is null",
            id="null-members",
        ),
        pytest.param(
            GROUP_KEY,
            kb.int16(3)
            + kb.string("consumer")
            + kb.int32(1)
            + kb.string(None) * 2
            + kb.int64(0)
            + kb.int32(INT_MAX),
            "truncated group metadata value v3",
            id="huge-member-count",
        ),
    ],
)
def test_malformed_records(key: bytes, value: bytes | None, reason: str) -> None:
    got = decode_record(key, value)
    assert isinstance(got, DecodeFailure)
    assert reason in got.reason


VALID_RECORDS = [
    pytest.param(
        OFFSET_KEY, kb.offset_commit_value(v, 99, "md", 5, leader_epoch=2, expire_ts=7), id=f"commit-v{v}"
    )
    for v in range(6)
] + [
    pytest.param(
        GROUP_KEY,
        kb.group_metadata_value(v, "consumer", 3, "range", "l", MEMBERS, state_ts=1, tags=[(1, b"t")]),
        id=f"group-v{v}",
    )
    for v in range(6)
]


@pytest.mark.parametrize(("key", "value"), VALID_RECORDS)
def test_truncation_at_every_byte_is_a_decode_failure(key: bytes, value: bytes) -> None:
    assert not isinstance(decode_record(key, value), DecodeFailure)
    for cut in range(len(key)):
        got = decode_record(key[:cut], value)
        assert isinstance(got, DecodeFailure), (cut, got)
        assert got.reason.startswith("truncated"), got.reason
    for cut in range(len(value)):
        got = decode_record(key, value[:cut])
        assert isinstance(got, DecodeFailure), (cut, got)
        assert got.reason.startswith("truncated"), got.reason


DECODED_TYPES = (OffsetCommit, OffsetTombstone, GroupMetadata, GroupTombstone, SkippedRecord, DecodeFailure)


def assert_clean_outcome(got: DecodedRecord) -> None:
    assert isinstance(got, DECODED_TYPES)
    if isinstance(got, DecodeFailure):
        assert not got.reason.startswith("internal decoder error"), got.reason


def test_random_garbage_never_raises() -> None:
    rng = random.Random(20240611)
    for _ in range(3_000):
        key = rng.randbytes(rng.randrange(0, 24))
        if rng.random() < 0.8:  # mostly the interesting types, so garbage reaches the value decoders
            key = kb.int16(rng.choice([0, 1, 2])) + key
        value = (
            None
            if rng.random() < 0.1
            else kb.int16(rng.randrange(-2, 7)) + rng.randbytes(rng.randrange(0, 64))
        )
        assert_clean_outcome(decode_record(key, value))


@pytest.mark.parametrize(("key", "value"), VALID_RECORDS)
def test_byte_flips_never_raise(key: bytes, value: bytes) -> None:
    rng = random.Random(len(value))
    for _ in range(300):
        flipped = bytearray(value)
        for _ in range(rng.randrange(1, 4)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        assert_clean_outcome(decode_record(key, bytes(flipped)))


def test_a_decoder_bug_becomes_a_decode_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_: object) -> object:
        raise KeyError("bug")

    monkeypatch.setitem(consumer_offsets._OFFSET_COMMIT_VALUE_DECODERS, 3, broken)
    got = decode_record(OFFSET_KEY, kb.offset_commit_value(3, 1))
    assert got == DecodeFailure("internal decoder error: KeyError: 'bug'")
