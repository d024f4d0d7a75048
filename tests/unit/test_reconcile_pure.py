"""The range arithmetic behind GAP detection, without a JVM."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from app.contracts.findings import StoredFinding
from app.contracts.vocabulary import GAP, OPEN, severity_at_least
from app.reconcile.findings import Finding, PartitionRange, gap_finding, one_per_finding_id
from app.reconcile.sink import offsets as sink_offsets
from app.reconcile.sink.offsets import (
    BUCKET_SIZE,
    BucketStat,
    PartitionSink,
    bitmap_offsets,
    bucket_bitmap,
    buckets_to_inspect,
    effective_lo,
    elementary_segments,
    expected_fingerprint,
    is_complete,
    missing_ranges,
    proven_complete,
    range_fingerprint,
)
from tests.support.ledger_data import GROUP, JOB, TOPIC

pytestmark = pytest.mark.unit


def bitmap(*positions: int) -> bytes:
    out = bytearray(BUCKET_SIZE // 8)
    for p in positions:
        out[p // 8] |= 1 << (p % 8)
    return bytes(out)


def test_bitmap_offsets_reads_bit_i_of_byte_i_div_8() -> None:
    assert bitmap_offsets(2, bitmap(0, 9, 32767)) == [
        2 * BUCKET_SIZE,
        2 * BUCKET_SIZE + 9,
        3 * BUCKET_SIZE - 1,
    ]


def test_bucket_bitmap_places_each_word_bit_at_its_offset() -> None:
    words_per_bucket = BUCKET_SIZE // 64
    first = 3 * words_per_bucket
    # bit 63 makes the word negative as a signed long, the way Spark hands it over
    words = [(first, 1 | 1 << 9), (first + 1, -(1 << 63)), (first + words_per_bucket - 1, 1 << 63 >> 1)]
    base = 3 * BUCKET_SIZE
    assert bitmap_offsets(3, bucket_bitmap(3, words)) == [
        base,
        base + 9,
        base + 64 + 63,
        base + BUCKET_SIZE - 2,
    ]


def test_bucket_bitmap_rejects_a_word_of_another_bucket() -> None:
    with pytest.raises(ValueError, match="not in bucket 0"):
        bucket_bitmap(0, [(BUCKET_SIZE // 64, 1)])


def test_complete_partition_needs_no_inspection() -> None:
    sink = PartitionSink.of([BucketStat(0, 100, 100, 0, 99)])
    assert is_complete(0, 100, sink)
    assert buckets_to_inspect(0, 100, sink) == []
    assert missing_ranges(0, 100, sink, {}) == []


def test_missing_ranges_from_bitmaps_and_empty_buckets() -> None:
    # bucket 0 lacks 5..9, bucket 1 has no row at all, bucket 2 holds its first 10 offsets
    b0 = bitmap(*[p for p in range(BUCKET_SIZE) if not 5 <= p < 10])
    sink = PartitionSink.of(
        [
            BucketStat(0, BUCKET_SIZE - 5, BUCKET_SIZE - 5, 0, BUCKET_SIZE - 1),
            BucketStat(2, 10, 10, 2 * BUCKET_SIZE, 2 * BUCKET_SIZE + 9),
        ]
    )
    hi = 2 * BUCKET_SIZE + 10
    assert not is_complete(0, hi, sink)
    assert buckets_to_inspect(0, hi, sink) == [0]  # bucket 2 is complete within [lo, hi)
    assert missing_ranges(0, hi, sink, {0: b0}) == [(5, 10), (BUCKET_SIZE, 2 * BUCKET_SIZE)]


def test_duplicates_hide_gaps_from_a_bare_count_but_not_from_distinct() -> None:
    sink = PartitionSink.of([BucketStat(0, 10, 9, 0, 9)])  # one offset twice, one missing
    assert sink.rows == 10
    assert not is_complete(0, 10, sink)


def test_unknown_start_falls_back_to_the_first_sink_offset() -> None:
    rng = PartitionRange("j", "g", "t", 0, lo=None, hi=50, lo_source="sink_min")
    assert effective_lo(rng, PartitionSink.of([BucketStat(0, 10, 10, 40, 49)])) == 40
    assert effective_lo(rng, PartitionSink()) == 50  # nothing in the sink, nothing to prove


def test_severity_order() -> None:
    assert severity_at_least("critical", "error")
    assert not severity_at_least("warn", "error")


# --- the fingerprint proof of complete partitions -------------------------------------------------


def test_elementary_segments_cut_overlapping_ranges_once_and_skip_uncovered_stretches() -> None:
    assert elementary_segments([(0, 10), (5, 15), (20, 30), (7, 7), (20, 30)]) == [
        (0, 5),
        (5, 10),
        (10, 15),
        (20, 30),
    ]
    assert elementary_segments([]) == []


def test_expected_fingerprint_is_the_same_whatever_the_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = expected_fingerprint(-5, 1000)
    mask = (1 << 64) - 1
    # XOR composes over adjacent ranges, and an empty range contributes nothing.
    assert whole & mask == (expected_fingerprint(-5, 333) ^ expected_fingerprint(333, 1000)) & mask
    assert expected_fingerprint(7, 7) == 0
    assert -(1 << 63) <= whole < 1 << 63  # a signed long, as Spark's bit_xor returns
    monkeypatch.setattr(sink_offsets, "FINGERPRINT_BATCH", 7)
    assert expected_fingerprint(-5, 1000) == whole


def test_range_fingerprint_xors_the_pieces_of_the_range_and_refuses_an_incomplete_cover() -> None:
    pieces = {(0, 5): 0b0011, (5, 10): 0b0101, (10, 15): 0b1000}
    assert range_fingerprint(0, 10, pieces) == 0b0110
    assert range_fingerprint(5, 15, pieces) == 0b1101
    assert range_fingerprint(0, 15, pieces) == 0b1110
    assert range_fingerprint(0, 20, pieces) is None  # 15..19 has no piece
    assert range_fingerprint(2, 10, pieces) is None  # starts inside a piece


@pytest.mark.parametrize(
    ("rows", "lo_seen", "hi_seen", "fingerprint", "expected", "proven"),
    [
        (10, 0, 9, 42, 42, True),
        (10, 0, 9, 41, 42, False),  # same count, other offsets (a gap and a duplicate)
        (9, 0, 9, 42, 42, False),
        (10, 1, 9, 42, 42, False),
        (10, 0, 8, 42, 42, False),
        (10, 0, 9, 42, None, False),
    ],
)
def test_proven_complete_needs_count_bounds_and_fingerprint(
    rows: int, lo_seen: int, hi_seen: int, fingerprint: int, expected: int | None, proven: bool
) -> None:
    assert proven_complete(0, 10, rows, lo_seen, hi_seen, fingerprint, expected) is proven
    assert proven_complete(5, 5, 0, 0, 0, 0, 0) is False  # nothing to prove: an empty range


def test_one_per_finding_id_keeps_the_most_severe_then_the_largest() -> None:
    def stored(finding_id: str, severity: str, record_count: int | None) -> StoredFinding:
        found = Finding.of(GAP, severity, OPEN, {}, {}, record_count=record_count)
        at = datetime(2026, 3, 1, tzinfo=UTC)
        return dataclasses.replace(StoredFinding.of(found, "rec", at), finding_id=finding_id)

    findings = [
        stored("a", "warn", 5),
        stored("b", "info", None),
        stored("a", "error", 1),
        stored("a", "error", 3),
    ]
    assert one_per_finding_id(findings) == [findings[3], findings[1]]


def test_gap_statuses_follow_the_confirmation_verdict() -> None:
    rng = PartitionRange(JOB, GROUP, TOPIC, 0, lo=0, hi=100, lo_source="restored", hi_checkpoint_id=3)
    cases = {
        None: ("open", "critical"),
        "confirmed": ("confirmed", "critical"),
        "benign": ("benign", "info"),
        "unverifiable": ("unverifiable", "error"),
    }
    for verdict, expected in cases.items():
        row = gap_finding(rng, 10, 20, None if verdict is None else {"status": verdict})
        assert (row.status, row.severity) == expected
        assert (row.offset_start, row.offset_end, row.record_count, row.checkpoint_id) == (
            10,
            20,
            10,
            3,
        )
    assert gap_finding(rng, 10, 20, None).evidence["confirmation"] == "not run"
