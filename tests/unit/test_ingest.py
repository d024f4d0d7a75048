"""Spec for the pure parts of `ingest-offsets` (app.offsets_topic): partition selection, range planning,
positions, the record decoder and the progress counts. No JVM: the decoder is exercised on
pyarrow batches directly."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from app.errors import OffsetAuditError
from app.offsets_topic.decoded import (
    ARROW_DECODED_SCHEMA,
    DECODED_FIELDS,
    DECODED_SCHEMA,
    KIND_COMMIT,
    KIND_ERROR,
    KIND_GROUP_METADATA,
    KIND_GROUP_TOMBSTONE,
    KIND_OTHER_GROUP,
    KIND_SKIPPED,
    KIND_TOMBSTONE,
    TIMESTAMP_MAX_MS,
    TIMESTAMP_MIN_MS,
)
from app.offsets_topic.decoder import partition_for_group
from app.offsets_topic.progress import (
    PartitionProgress,
    progress_rows,
    summarize_progress,
    times_out_of_range_warning,
    total_progress,
)
from app.offsets_topic.ranges import (
    PartitionRange,
    kafka_read_options,
    merge_positions,
    plan_ranges,
    positions_rows,
    select_partitions,
)
from app.offsets_topic.row_decoder import (
    decode_kafka_batches,
    decode_row,
    epoch_ms_times,
    fast_commit_row,
    group_prefix_filter,
    make_record_decoder,
)
from app.offsets_topic.table_rows import to_group_commits
from tests.unit.kafka_bytes import (
    Member,
    group_metadata_key,
    group_metadata_value,
    int16,
    offset_commit_key,
    offset_commit_value,
    string,
)
from tests.unit.offsets_records import AUDITED, RECORDS

pytestmark = pytest.mark.unit

# --- partition selection -------------------------------------------------------------------------


def test_no_groups_selects_every_partition() -> None:
    assert select_partitions([], 5) == [0, 1, 2, 3, 4]


def test_groups_select_their_partitions_once_and_sorted() -> None:
    groups = ["orders-audit", "payments", "orders-audit", "x"]
    expected = sorted({partition_for_group(g, 50) for g in groups})
    assert select_partitions(groups, 50) == expected
    assert len(select_partitions(["payments"], 50)) == 1


def test_selection_uses_kafka_abs_for_min_int_hash() -> None:
    # "polygenelubricants" hashes to Integer.MIN_VALUE: Kafka's abs makes it 0, so partition 0 of any count.
    assert select_partitions(["polygenelubricants"], 7) == [0]


def test_selection_rejects_a_missing_topic() -> None:
    with pytest.raises(OffsetAuditError, match="must be positive"):
        select_partitions(["g"], 0)


# --- range planning ------------------------------------------------------------------------------


def test_first_run_reads_from_log_start_to_last_stable_offset() -> None:
    ranges = plan_ranges([1, 0], stored={}, log_start={0: 0, 1: 5}, log_end={0: 10, 1: 5})
    assert ranges == [PartitionRange(0, 0, 10, None), PartitionRange(1, 5, 5, None)]


def test_next_run_continues_at_stored_position() -> None:
    ranges = plan_ranges([0], stored={0: 7, 3: 99}, log_start={0: 0}, log_end={0: 12})
    assert ranges == [PartitionRange(0, 7, 12, 7)]


def test_position_below_log_start_continues_at_log_start_and_says_so() -> None:
    (r,) = plan_ranges([0], stored={0: 3}, log_start={0: 10}, log_end={0: 20})
    assert (r.start, r.end, r.stored, r.note) == (10, 20, 3, "retention")


def test_position_beyond_log_end_reads_nothing_and_keeps_position() -> None:
    (r,) = plan_ranges([0], stored={0: 50}, log_start={0: 0}, log_end={0: 20})
    assert (r.start, r.end, r.size, r.note) == (50, 50, 0, "ahead")
    assert merge_positions({0: 50}, [r]) == {0: 50}


def test_cap_limits_each_partition_read() -> None:
    ranges = plan_ranges(
        [0, 1],
        stored={1: 95},
        log_start={0: 0, 1: 0},
        log_end={0: 1000, 1: 100},
        max_records_per_partition=10,
    )
    assert [(r.start, r.end) for r in ranges] == [(0, 10), (95, 100)]


def test_read_options_pin_exactly_the_nonempty_ranges() -> None:
    ranges = [PartitionRange(0, 4, 4, 4), PartitionRange(3, 0, 17, None), PartitionRange(4, 2, 7, 2)]
    opts = kafka_read_options("__consumer_offsets", ranges)
    assert json.loads(opts["assign"]) == {"__consumer_offsets": [3, 4]}
    assert json.loads(opts["startingOffsets"]) == {"__consumer_offsets": {"3": 0, "4": 2}}
    assert json.loads(opts["endingOffsets"]) == {"__consumer_offsets": {"3": 17, "4": 7}}


def test_read_options_refuse_an_empty_plan() -> None:
    with pytest.raises(OffsetAuditError, match="nothing to read"):
        kafka_read_options("t", [PartitionRange(0, 4, 4, 4)])


# --- positions -----------------------------------------------------------------------------------


def test_positions_move_read_partitions_to_range_end_and_keep_others() -> None:
    merged = merge_positions({0: 4, 2: 9}, [PartitionRange(0, 4, 10, 4), PartitionRange(1, 0, 3, None)])
    assert merged == {0: 10, 1: 3, 2: 9}


def test_position_rows_cover_only_the_given_partitions() -> None:
    rows = positions_rows({0: 10, 1: 3, 2: 9}, [1, 0], "run-1", 1_700_000_000_000)
    assert rows == [(0, 10, "run-1", 1_700_000_000_000), (1, 3, "run-1", 1_700_000_000_000)]


# --- the Arrow batch decoder ---------------------------------------------------------------------


def kafka_batch(records: Sequence[tuple[bytes | None, bytes | None]], partition: int = 3) -> pa.RecordBatch:
    """A batch shaped like the Kafka source's columns, as mapInArrow hands it to the decoder on the
    executors."""
    n = len(records)
    return pa.RecordBatch.from_pydict(
        {
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(range(100, 100 + n), pa.int64()),
            "timestamp": pa.array(
                [1_700_000_000_000_000 + i for i in range(n)], pa.timestamp("us", tz="UTC")
            ),
            "key": pa.array([k for k, _ in records], pa.binary()),
            "value": pa.array([v for _, v in records], pa.binary()),
        }
    )


def decode_rows(
    records: Sequence[tuple[bytes | None, bytes | None]], groups: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    (out,) = list(decode_kafka_batches(groups)([kafka_batch(records)]))
    assert out.schema.names == DECODED_SCHEMA.fieldNames()
    rows: list[dict[str, Any]] = out.to_pylist()
    return rows


ALICE = Member("m-1", client_id="svc-a", client_host="/10.0.0.7", group_instance_id=None)
GROUP_VALUE = group_metadata_value(3, "consumer", 7, "range", "m-1", [ALICE], state_ts=9)


def pick(row: dict[str, Any], *names: str) -> tuple[Any, ...]:
    return tuple(row[n] for n in names)


def test_decoder_emits_one_row_per_record_with_coordinates() -> None:
    rows = decode_rows(
        [
            (offset_commit_key("g1", "orders", 2), offset_commit_value(3, 42, "m", 1_000, leader_epoch=5)),
            (offset_commit_key("g1", "orders", 2), None),
            (group_metadata_key("g1"), GROUP_VALUE),
            (group_metadata_key("g1"), None),
            (int16(4) + string("g1"), b"\x00\x00"),
            (b"\x00", b""),
        ]
    )  # fmt: skip
    assert [r["kind"] for r in rows] == [
        KIND_COMMIT, KIND_TOMBSTONE, KIND_GROUP_METADATA, KIND_GROUP_TOMBSTONE, KIND_SKIPPED, KIND_ERROR,
    ]  # fmt: skip
    assert [(r["log_partition"], r["log_offset"]) for r in rows] == [(3, 100 + i) for i in range(6)]
    commit = rows[0]
    assert pick(commit, "group_id", "topic", "partition", "committed_offset") == ("g1", "orders", 2, 42)
    assert pick(commit, "leader_epoch", "metadata", "commit_time_ms", "value_version") == (5, "m", 1_000, 3)
    assert rows[1]["committed_offset"] is None
    assert rows[1]["partition"] == 2
    meta = rows[2]
    assert pick(meta, "generation", "protocol_type", "protocol", "leader") == (7, "consumer", "range", "m-1")
    assert meta["state_time_ms"] == 9
    members = json.loads(meta["members"])
    assert [(m["member_id"], m["client_id"], m["client_host"]) for m in members] == [
        ("m-1", "svc-a", "/10.0.0.7")
    ]
    assert rows[4]["record_type"] == 4
    assert rows[5]["raw_key"] == b"\x00"
    assert rows[5]["reason"].startswith("truncated record key")


def test_decoder_keeps_v1_expire_time_and_all_commit_versions() -> None:
    records = [
        (offset_commit_key("g", "t", 0, record_type=v % 2), offset_commit_value(v, 10 + v, expire_ts=77))
        for v in range(5)
    ]
    rows = decode_rows(records)
    assert [(r["value_version"], r["committed_offset"]) for r in rows] == [(v, 10 + v) for v in range(5)]
    assert [r["expire_time_ms"] for r in rows] == [None, 77, None, None, None]


def test_decoder_with_groups_marks_other_groups_without_decoding_them() -> None:
    rows = decode_rows(
        [
            (offset_commit_key("audited", "t", 0), offset_commit_value(3, 1)),
            (offset_commit_key("someone-else", "t", 0), b"garbage that would not decode"),
            (group_metadata_key("someone-else"), None),
            (offset_commit_key("audited-2", "t", 0), None),
        ],
        groups=("audited",),
    )
    assert [r["kind"] for r in rows] == [KIND_COMMIT, KIND_OTHER_GROUP, KIND_OTHER_GROUP, KIND_OTHER_GROUP]


def test_decoder_quarantines_a_null_key_and_a_bad_value_without_raising() -> None:
    rows = decode_rows([(None, b"v"), (offset_commit_key("g", "t", 0), int16(3) + b"\x00")])
    assert [r["kind"] for r in rows] == [KIND_ERROR, KIND_ERROR]
    assert rows[0]["reason"].startswith("null record key")
    assert rows[1]["raw_value"] == int16(3) + b"\x00"
    assert rows[1]["record_type"] == 1


def test_decoder_handles_an_empty_batch() -> None:
    assert decode_rows([]) == []


@pytest.mark.parametrize("groups", [(), AUDITED], ids=["all-groups", "audited-groups"])
def test_record_decoder_gives_the_complete_decoders_row_for_every_kind_of_record(
    groups: tuple[str, ...],
) -> None:
    """The memoised fast path of `make_record_decoder` changes no row: each equals `decode_row`'s, the
    per-record decoder whose fallback is the authoritative `decode_record`; also on a second call, when
    the commit keys are already parsed."""
    keys, values = [k for k, _ in RECORDS], [v for _, v in RECORDS]
    decode = make_record_decoder(groups)
    audited = group_prefix_filter(groups)
    expected = [decode_row(k, v, audited) for k, v in RECORDS]
    for _ in range(2):
        decoded = decode(
            pa.array([3] * len(RECORDS), pa.int32()), pa.array(range(len(RECORDS)), pa.int64()),
            epoch_ms_times([0] * len(RECORDS)), keys, values,
        )  # fmt: skip
        assert decoded.schema == ARROW_DECODED_SCHEMA
        got = [tuple(r[f] for f in DECODED_FIELDS) for r in decoded.to_pylist()]
        assert got == expected
    kinds = {row[0] for row in expected}
    assert kinds >= {KIND_COMMIT, KIND_TOMBSTONE, KIND_GROUP_METADATA, KIND_SKIPPED, KIND_ERROR}
    assert (KIND_OTHER_GROUP in kinds) == bool(groups)


# --- progress ------------------------------------------------------------------------------------


def test_progress_counts_per_partition_and_in_total() -> None:
    rows = [
        (0, KIND_COMMIT, 1, 10, 2), (0, KIND_TOMBSTONE, 1, 2, 0), (0, KIND_SKIPPED, 3, 4, 0),
        (0, KIND_SKIPPED, 8, 1, 0), (1, KIND_ERROR, None, 1, 0), (1, KIND_OTHER_GROUP, 1, 5, 0),
        (1, KIND_SKIPPED, 3, 2, 0), (1, KIND_GROUP_METADATA, 2, 3, 1),
    ]  # fmt: skip
    parts = summarize_progress(rows)
    assert parts == [
        PartitionProgress(0, read=17, decoded=12, skipped_by_type=((3, 4), (8, 1)), times_out_of_range=2),
        PartitionProgress(
            1,
            read=11,
            decoded=3,
            other_groups=5,
            quarantined=1,
            skipped_by_type=((3, 2),),
            times_out_of_range=1,
        ),
    ]
    # A record with a time out of range is decoded (its row is kept), never counted a second time.
    for p in parts:
        assert p.read == p.decoded + p.other_groups + p.quarantined + sum(n for _, n in p.skipped_by_type)
    total = total_progress(parts)
    assert total == PartitionProgress(
        -1, read=28, decoded=15, other_groups=5, quarantined=1, skipped_by_type=((3, 6), (8, 1)),
        times_out_of_range=3,
    )  # fmt: skip
    assert total.as_dict()["times_out_of_range"] == 3


# --- times out of range --------------------------------------------------------------------------


def at(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def test_the_time_range_is_the_one_every_table_reader_holds() -> None:
    """Nanoseconds in an int64 (what Arrow reads Spark's INT96 timestamps as): the tighter of the
    ranges the writers and readers hold."""
    int64_min, int64_max = -(2**63), 2**63 - 1
    assert TIMESTAMP_MAX_MS * 1_000_000 <= int64_max < (TIMESTAMP_MAX_MS + 1) * 1_000_000
    assert (TIMESTAMP_MIN_MS - 1) * 1_000_000 < int64_min <= TIMESTAMP_MIN_MS * 1_000_000
    assert at(TIMESTAMP_MAX_MS) == datetime(2262, 4, 11, 23, 47, 16, 854_000, UTC)
    assert at(TIMESTAMP_MIN_MS) == datetime(1677, 9, 21, 0, 12, 43, 146_000, UTC)


def test_driver_tables_keep_a_commit_with_an_odd_time_and_null_that_time() -> None:
    """The group_commits rule (both routes run it; the spark tier holds their rows equal): a time beyond
    the range is null in its row, a time at either end is kept, and the record is counted once."""
    key = offset_commit_key("g", "t", 0)
    values = [
        offset_commit_value(1, 10, "", 2**63 - 1, expire_ts=TIMESTAMP_MAX_MS),
        offset_commit_value(1, 11, "", TIMESTAMP_MIN_MS, expire_ts=TIMESTAMP_MIN_MS - 1),
        offset_commit_value(3, 12, "", -(2**63)),
        offset_commit_value(3, 13, "", 1_700_000_000_000),
    ]
    decoded = make_record_decoder()(
        pa.array([0] * 4, pa.int32()),
        pa.array(range(4), pa.int64()),
        epoch_ms_times([0] * 4),
        [key] * 4,
        values,
    )
    rows = to_group_commits(decoded, "r").to_pylist()
    got = [(r["committed_offset"], r["commit_time"], r["expire_time"]) for r in rows]
    assert got == [
        (10, None, at(TIMESTAMP_MAX_MS)),
        (11, at(TIMESTAMP_MIN_MS), None),
        (12, None, None),
        (13, at(1_700_000_000_000), None),
    ]
    assert progress_rows(decoded) == [(0, KIND_COMMIT, 1, 4, 3)]


def test_times_out_of_range_warn_with_counts_per_partition() -> None:
    parts = [PartitionProgress(3, read=5, decoded=5, times_out_of_range=2), PartitionProgress(4, read=1)]
    warning = times_out_of_range_warning("__consumer_offsets", parts)
    assert warning is not None
    assert warning.startswith("2 decoded records (__consumer_offsets-3: 2) carry a commit, expire")
    assert "their rows are kept with that time null" in warning
    assert times_out_of_range_warning("__consumer_offsets", [PartitionProgress(4, read=1)]) is None


# --- the fast path equals the complete decoder ---------------------------------------------------


def slow_row(key: bytes, value: bytes | None) -> tuple[Any, ...]:
    """decode_row without the fast path: what the authoritative decode_record yields."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("app.offsets_topic.row_decoder.fast_commit_row", lambda *_: None)
        return decode_row(key, value, None)


COMMIT_VALUES = [
    offset_commit_value(v, offset, md, ts, leader_epoch=epoch, expire_ts=exp)
    for v in (0, 1, 2, 3, 4, 5, 9)
    for offset, md, ts, epoch, exp in [
        (0, "", 0, -1, -1),
        (2**62, "checkpoint=17;ü", 1_700_000_000_123, 7, 1_800_000_000_000),
        (-1, "x" * 126, -5, 0, 0),
        (5, "y" * 200, 1, 2**31 - 1, -1),  # 2-byte compact length in v4: slow path
    ]
] + [offset_commit_value(4, 3, "m", 9, tags=[(0, bytes(16))])]  # topic id tag: slow path


@pytest.mark.parametrize("value", COMMIT_VALUES, ids=lambda v: v[:2].hex() + "-" + str(len(v)))
def test_fast_path_equals_decode_record(value: bytes) -> None:
    key = offset_commit_key("grüppe", "orders.v1", 2**31 - 1, record_type=0)
    assert decode_row(key, value, None) == slow_row(key, value)


def test_fast_path_takes_the_common_records() -> None:
    key = offset_commit_key("g", "t", 1)
    for v in (0, 1, 2, 3, 4):
        assert fast_commit_row(key, offset_commit_value(v, 10, "", 5), 1) is not None


def test_fast_path_falls_back_on_every_corruption() -> None:
    rng = random.Random(7)
    key = offset_commit_key("g", "t", 1)
    for value in COMMIT_VALUES[:20]:
        for _ in range(60):
            bad_key, bad_value = bytearray(key), bytearray(value)
            target = bad_key if rng.random() < 0.3 else bad_value
            op = rng.randrange(3)
            i = rng.randrange(len(target))
            if op == 0:
                target[i] = rng.randrange(256)
            elif op == 1:
                del target[i:]
            else:
                target[i:i] = bytes([rng.randrange(256)])
            assert decode_row(bytes(bad_key), bytes(bad_value), None) == slow_row(
                bytes(bad_key), bytes(bad_value)
            )
