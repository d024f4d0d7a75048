"""Which offsets the sink holds, computed at the cost of about one scan: per-partition fingerprints
(XOR of Spark's xxhash64 of every offset), and the driver-side arithmetic that turns the
per-bucket statistics and presence words of ``app.reconcile.sink.buckets`` into missing ranges."""

from __future__ import annotations

import itertools
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Final

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.contracts.tables import require_columns
from app.reconcile.findings import PartitionRange

# A partition's sink rows are first summarized by count, min, max and a fingerprint (the XOR of
# xxhash64 of every offset), which proves the common case, a complete partition, at the cost of one
# scan. Partitions that fail it are examined per bucket of 32768 offsets (count, distinct, min,
# max per bucket), built from 64-offset presence words; a bucket's words decode to a 4 KiB bitmap.
BUCKET_SHIFT: Final = 15


BUCKET_SIZE: Final = 1 << BUCKET_SHIFT


WORD_SHIFT: Final = 6


WORD_BITS: Final = 1 << WORD_SHIFT


SINK_COLUMNS: Final = ("topic", "partition", "offset", "writer_checkpoint_id", "writer_run_id")


def offset_fingerprint(offset: Column) -> Column:
    """The fingerprint term of one offset; XOR-aggregated over a partition's rows."""
    return F.xxhash64(offset.cast("long"))


def sink_fingerprints(sink: DataFrame, topics: Sequence[str]) -> DataFrame:
    """rows, min, max and fingerprint (XOR of ``offset_fingerprint``) per (topic, partition).

    Together they prove a partition complete without counting distinct offsets: when the rows in
    [lo, hi) number hi - lo and their fingerprint equals that of the offsets lo..hi-1 each once,
    every offset is there exactly once. (An offset held an even number of times, absent ones
    included, leaves its hash out of the XOR, an odd number of times puts it in; with hi - lo rows
    the two agree only if every offset is held once, or if the hashes of the offsets held an even
    number of times XOR to exactly the same 64 bits: chance 2^-64.) Fixed-width aggregates over
    a handful of groups, so it costs about what a bare count does: Spark hash-aggregates inside
    each task before anything is shuffled. Each topic is aggregated on its own and named
    afterwards: a string in the grouping key takes the hash map off its fixed-width fast path,
    which nearly doubles the cost, and a filter on one topic lets Delta skip the other topics'
    files (the Kafka source writes one file per topic-partition and batch).
    """
    require_columns(sink, ["topic", "partition", "offset"], "sink")
    if not topics:
        raise ValueError("sink_fingerprints needs the topics to aggregate")
    offset = F.col("offset")
    per_topic = [
        sink.filter(F.col("topic") == F.lit(topic))
        .groupBy("partition")
        .agg(
            F.count("*").alias("rows"),
            F.min(offset).alias("min_offset"),
            F.max(offset).alias("max_offset"),
            F.bit_xor(offset_fingerprint(offset)).alias("fingerprint"),
        )
        .select(F.lit(topic).alias("topic"), "partition", "rows", "min_offset", "max_offset", "fingerprint")
        for topic in dict.fromkeys(topics)
    ]
    return reduce(DataFrame.unionByName, per_topic)


def elementary_segments(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pieces [a, b) that the half-open ``ranges`` cut the number line into, inside some range.

    Every range is a union of consecutive pieces, and partitions of a topic usually share their
    offsets, so the expected fingerprints of all ranges need each offset hashed once, not once per
    partition.
    """
    edges: dict[int, int] = defaultdict(int)
    for lo, hi in ranges:
        if hi > lo:
            edges[lo] += 1
            edges[hi] -= 1
    out: list[tuple[int, int]] = []
    active = 0
    points = sorted(edges)
    for a, b in itertools.pairwise(points):
        active += edges[a]
        if active > 0:
            out.append((a, b))
    return out


_XXH_SEED: Final = 42


# Offsets hashed per numpy batch: 4M offsets, 32 MiB per array.
FINGERPRINT_BATCH: Final = 1 << 22


# Spark's xxhash64 of a long (XXH64 of its 8 little-endian bytes, seed 42), vectorized so the
# expected fingerprint of a range is computed on the driver: millions of offsets per second,
# without a Spark job (one took 1-2 s whatever the size). Arithmetic is modulo 2^64, as in Java.
_XXH_P1: Final = 0x9E3779B185EBCA87
_XXH_P2: Final = 0xC2B2AE3D27D4EB4F
_XXH_P3: Final = 0x165667B19E3779F9
_XXH_P4: Final = 0x85EBCA77C2B2AE63
_XXH_P5: Final = 0x27D4EB2F165667C5
_MASK64: Final = (1 << 64) - 1


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def xxhash64_longs(values: np.ndarray) -> np.ndarray:
    """Spark's ``xxhash64(cast(v as long))`` of each value, as uint64 (the same 64 bits)."""
    k1 = values.astype(np.int64).view(np.uint64) * np.uint64(_XXH_P2)
    k1 = _rotl(k1, 31) * np.uint64(_XXH_P1)
    h = np.uint64((_XXH_SEED + _XXH_P5 + 8) & _MASK64) ^ k1
    h = _rotl(h, 27) * np.uint64(_XXH_P1) + np.uint64(_XXH_P4)
    h ^= h >> np.uint64(33)
    h *= np.uint64(_XXH_P2)
    h ^= h >> np.uint64(29)
    h *= np.uint64(_XXH_P3)
    h ^= h >> np.uint64(32)
    return h


def expected_fingerprint(start: int, end: int) -> int:
    """The fingerprint of a sink holding each offset of [start, end) once: the XOR of
    ``offset_fingerprint`` over them, as the signed long Spark's ``bit_xor`` gives."""
    acc = 0
    for lo in range(start, end, FINGERPRINT_BATCH):
        batch = np.arange(lo, min(lo + FINGERPRINT_BATCH, end), dtype=np.int64)
        acc ^= int(np.bitwise_xor.reduce(xxhash64_longs(batch)))
    return acc - (1 << 64) if acc >= 1 << 63 else acc


def range_fingerprint(lo: int, hi: int, segments: Mapping[tuple[int, int], int]) -> int | None:
    """The fingerprint of lo..hi-1 from the pieces ``elementary_segments`` cut it into; None when
    a piece is missing (the range was not among those the segments were cut from)."""
    out, pos = 0, lo
    for a, b in sorted(k for k in segments if lo <= k[0] and k[1] <= hi):
        if a != pos:
            return None
        out ^= segments[(a, b)]
        pos = b
    return out if pos == hi else None


def proven_complete(
    lo: int, hi: int, rows: int, min_offset: int, max_offset: int, fingerprint: int, expected: int | None
) -> bool:
    """Every offset of [lo, hi) is in the sink exactly once (see ``sink_fingerprints``)."""
    return (
        hi > lo
        and expected is not None
        and rows == hi - lo
        and min_offset == lo
        and max_offset == hi - 1
        and fingerprint == expected
    )


def bucket_bitmap(bucket: int, words: Iterable[tuple[int, int]]) -> bytes:
    """The presence bitmap of one bucket (the layout ``bitmap_offsets`` reads) from its (word, bits)."""
    out = bytearray(BUCKET_SIZE // 8)
    first = bucket * (BUCKET_SIZE // WORD_BITS)
    for word, bits in words:
        index = word - first
        if not 0 <= index < BUCKET_SIZE // WORD_BITS:
            raise ValueError(f"word {word} is not in bucket {bucket}")
        # Little-endian: offset bit i of the word lands in byte i // 8, bit i % 8.
        struct.pack_into("<q", out, index * 8, bits)
    return bytes(out)


@dataclass(frozen=True)
class BucketStat:
    bucket: int
    rows: int
    distinct: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class PartitionSink:
    """Aggregates of one partition's sink rows inside [lo, hi)."""

    rows: int = 0
    distinct: int = 0
    min_offset: int | None = None
    max_offset: int | None = None
    buckets: Mapping[int, BucketStat] = field(default_factory=dict)

    @classmethod
    def of(cls, buckets: Iterable[BucketStat]) -> PartitionSink:
        by_id = {b.bucket: b for b in buckets}
        if not by_id:
            return cls()
        values = list(by_id.values())
        return cls(
            rows=sum(b.rows for b in values),
            distinct=sum(b.distinct for b in values),
            min_offset=min(b.min_offset for b in values),
            max_offset=max(b.max_offset for b in values),
            buckets=by_id,
        )


def effective_lo(rng: PartitionRange, sink: PartitionSink) -> int:
    """lo, or the sink's first offset when the ledger cannot say where the data starts."""
    if rng.lo is not None:
        return rng.lo
    return sink.min_offset if sink.min_offset is not None else rng.hi


def is_complete(lo: int, hi: int, sink: PartitionSink) -> bool:
    """The cheap proof: as many distinct offsets in [lo, hi) as the range is long."""
    return hi <= lo or sink.distinct == hi - lo


def buckets_to_inspect(lo: int, hi: int, sink: PartitionSink) -> list[int]:
    """Buckets overlapping [lo, hi) that hold some rows but not all offsets they should."""
    out = []
    for b in sorted(sink.buckets.values(), key=lambda s: s.bucket):
        start, end = max(lo, b.bucket * BUCKET_SIZE), min(hi, (b.bucket + 1) * BUCKET_SIZE)
        if end > start and b.distinct < end - start:
            out.append(b.bucket)
    return out


def bitmap_offsets(bucket: int, bitmap: bytes) -> list[int]:
    """The offsets a bucket bitmap marks present (bit i of byte i // 8, least significant first)."""
    out = []
    base = bucket * BUCKET_SIZE
    for byte_index, byte in enumerate(bitmap):
        if byte == 0:
            continue
        for bit in range(8):
            if byte >> bit & 1:
                out.append(base + byte_index * 8 + bit)
    return out


def missing_ranges(
    lo: int, hi: int, sink: PartitionSink, bitmaps: Mapping[int, bytes]
) -> list[tuple[int, int]]:
    """Half-open ranges inside [lo, hi) absent from the sink.

    Buckets with no rows are missing whole; buckets in ``bitmaps`` are decoded; other buckets are
    complete (the caller fetched a bitmap for every bucket ``buckets_to_inspect`` named).
    """
    if hi <= lo:
        return []
    ranges: list[tuple[int, int]] = []

    def add(start: int, end: int) -> None:
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            return
        if ranges and ranges[-1][1] == start:
            ranges[-1] = (ranges[-1][0], end)
        else:
            ranges.append((start, end))

    first, last = lo // BUCKET_SIZE, (hi - 1) // BUCKET_SIZE
    present = sorted(b for b in sink.buckets if first <= b <= last)
    cursor = first
    for b in [*present, last + 1]:
        if b > cursor:
            add(cursor * BUCKET_SIZE, b * BUCKET_SIZE)  # buckets without a single row
        if b > last:
            break
        if b in bitmaps:
            start, end = max(lo, b * BUCKET_SIZE), min(hi, (b + 1) * BUCKET_SIZE)
            have = [o for o in bitmap_offsets(b, bitmaps[b]) if start <= o < end]
            pos = start
            for o in have:
                if o > pos:
                    add(pos, o)
                pos = o + 1
            if pos < end:
                add(pos, end)
        cursor = b + 1
    return ranges
