"""Reconciliation of the three accounts (ledger, group commits, sink): pure transforms.

Sink-derived findings (GAP, DUPLICATE, SINK_BEYOND_CHECKPOINT) start from small per-bucket
aggregates that the I/O module collects, so their range arithmetic is plain Python and testable
without a JVM. Everything read from the ledger and the group's commits (ledger- and
commit-derived findings, completed checkpoints, the ranges the sink must hold, restarts) lives in
app/reconcile/ledger_audit.py: those inputs are small, so they are analysed on the driver.

Every finding function returns the *core* columns (``FINDING_CORE``): the contract's columns minus
the run id and detection time, plus ``identity``, a string that together with the coordinates makes
the finding unique. ``finalize_findings`` turns those rows into the ``findings`` contract with
``finding_id = sha2(identity columns)`` -- never over run ids of the reconciliation or times of
detection, so a re-run over the same inputs yields the same ids.

Internal frames use canonical names: the sink is renamed by the I/O module to ``topic, partition,
offset, writer_checkpoint_id, writer_run_id``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce
from typing import Any, Final

import numpy as np
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StringType,
    StructField,
    StructType,
)

from app.contracts.tables import FINDINGS_SCHEMA, require_columns
from app.contracts.vocabulary import (
    BENIGN,
    CONFIRMED,
    CRITICAL,
    DUPLICATE,
    ERROR,
    GAP,
    INFO,
    OPEN,
    SEVERITIES,
    SINK_BEYOND_CHECKPOINT,
    UNVERIFIABLE,
    WARN,
)

# A partition's sink rows are first summarized by count, min, max and a fingerprint (the XOR of
# xxhash64 of every offset), which proves the common case, a complete partition, at the cost of one
# scan. Partitions that fail it are examined per bucket of 32768 offsets (count, distinct, min,
# max per bucket), built from 64-offset presence words; a bucket's words decode to a 4 KiB bitmap.
BUCKET_SHIFT: Final = 15
BUCKET_SIZE: Final = 1 << BUCKET_SHIFT
WORD_SHIFT: Final = 6
WORD_BITS: Final = 1 << WORD_SHIFT


# The findings contract minus what finalize_findings adds (id, run, time), plus the identity the id
# is hashed from: derived, so the contract stays in app/contracts/tables.py alone.
FINDING_CORE_SCHEMA: Final = StructType(
    [f for f in FINDINGS_SCHEMA.fields if f.name not in ("finding_id", "reconcile_run_id", "detected_at")]
    + [StructField("identity", StringType(), True)]
)
FINDING_CORE: Final = tuple(FINDING_CORE_SCHEMA.fieldNames())
# What makes a finding itself; evidence, counts, severity and status may change between runs.
IDENTITY_COLUMNS: Final = (
    "finding_type",
    "job_name",
    "group_id",
    "topic",
    "partition",
    "checkpoint_id",
    "run_id",
    "offset_start",
    "identity",
)

SINK_COLUMNS: Final = ("topic", "partition", "offset", "writer_checkpoint_id", "writer_run_id")


@dataclass(frozen=True)
class AuditWindow:
    """The ledger window a run judges: events in [since, until). ``since`` None means all history.

    Events before ``since`` (within the look-back the I/O module read) are context only: the
    previous checkpoint, the previous commit, the previous run.
    """

    until: datetime
    since: datetime | None = None


@dataclass(frozen=True)
class MatchRules:
    """How group commits are tied to checkpoints, and when a silent run counts as dead."""

    commit_match_window_s: float = 300.0
    clock_skew_s: float = 5.0
    run_silence_s: float = 3600.0


# --- small helpers -------------------------------------------------------------------------------


# The id is sha2-256 over the identity columns as strings, a null spelled out so (null, 'a') and
# ('a', null) differ; the same bytes earlier versions hashed in Spark, so stored ids stay valid.
_NULL: Final = "\u2400"
_SEP: Final = "\u241f"


def finding_id(row: Mapping[str, Any]) -> str:
    parts = [_NULL if row[c] is None else str(row[c]) for c in IDENTITY_COLUMNS]
    return hashlib.sha256(_SEP.join(parts).encode("utf-8")).hexdigest()


def finalize_findings(
    core: Iterable[Mapping[str, Any]], reconcile_run_id: str, detected_at: datetime
) -> list[dict[str, Any]]:
    """FINDING_CORE rows -> findings contract rows, one per finding id (``one_per_finding_id``)."""
    rows = [
        {
            **{f.name: r.get(f.name) for f in FINDINGS_SCHEMA.fields},
            "finding_id": finding_id(r),
            "reconcile_run_id": reconcile_run_id,
            "detected_at": detected_at,
        }
        for r in core
    ]
    return one_per_finding_id(rows)


def finding_order(row: Mapping[str, Any]) -> tuple[int, int]:
    """Sort key of a finalized finding: most severe first, then the one counting the most records."""
    return SEVERITIES.index(row["severity"]), -(row["record_count"] or 0)


def one_per_finding_id(rows: Iterable[Any]) -> list[Any]:
    """Finalized rows, one per finding id: the first by ``finding_order`` (the most severe, then the
    one counting the most records). Two rows share an id only when input rows were duplicated.
    Order is kept."""
    best: dict[str, Any] = {}
    for row in rows:
        kept = best.get(row["finding_id"])
        if kept is None or finding_order(row) < finding_order(kept):
            best[row["finding_id"]] = row
    return list(best.values())


# --- sink completeness: buckets, gaps, duplicates ------------------------------------------------


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
    a handful of groups, so it costs about what a bare count does. One topic at a time, for the
    reasons ``sink_words`` gives.
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


# Spark's xxhash64 of a long (XXH64 of its 8 little-endian bytes, seed 42), vectorized so the
# expected fingerprint of a range is computed on the driver: millions of offsets per second,
# without a Spark job (one took 1-2 s whatever the size). Arithmetic is modulo 2^64, as in Java.
_XXH_P1: Final = 0x9E3779B185EBCA87
_XXH_P2: Final = 0xC2B2AE3D27D4EB4F
_XXH_P3: Final = 0x165667B19E3779F9
_XXH_P4: Final = 0x85EBCA77C2B2AE63
_XXH_P5: Final = 0x27D4EB2F165667C5
_XXH_SEED: Final = 42
_MASK64: Final = (1 << 64) - 1
# Offsets hashed per numpy batch: 4M offsets, 32 MiB per array.
FINGERPRINT_BATCH: Final = 1 << 22


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


def sink_words(sink: DataFrame, topics: Sequence[str]) -> DataFrame:
    """rows and a 64-bit presence word per (topic, partition, word = offset // 64).

    Only fixed-width aggregates (count, bit_or), so Spark hash-aggregates inside each task and a
    clustered sink shrinks 64-fold before anything is shuffled. (Spark's own bitmap aggregate keeps
    a binary buffer, which forces a sort of every row: several times the cost of the scan.) Each
    topic is aggregated on its own and named afterwards: a string in the grouping key takes the
    hash map off its fixed-width fast path, which nearly doubles the cost, and a filter on one
    topic lets Delta skip the other topics' files (the Kafka source writes one file per
    topic-partition and batch). Rows of topics not in ``topics`` are left out.
    """
    require_columns(sink, ["topic", "partition", "offset"], "sink")
    if not topics:
        raise ValueError("sink_words needs the topics to aggregate")
    offset = F.col("offset")
    word = F.shiftright(offset, WORD_SHIFT).cast("long").alias("word")
    # shiftleft with a per-row shift: PySpark's F.shiftleft only takes a constant.
    bit = F.call_function("shiftleft", F.lit(1).cast("long"), offset.bitwiseAND(WORD_BITS - 1).cast("int"))
    per_topic = [
        sink.filter(F.col("topic") == F.lit(topic))
        .groupBy("partition", word)
        .agg(F.count("*").alias("rows"), F.bit_or(bit).alias("bits"))
        .select(F.lit(topic).alias("topic"), "partition", "word", "rows", "bits")
        for topic in dict.fromkeys(topics)
    ]
    return reduce(DataFrame.unionByName, per_topic)


def _lowest_bit(bits: Column) -> Column:
    """Index of the lowest set bit: smear it into every higher position, then count the rest.
    Shifts only: ANSI mode rejects the overflow of the usual x & -x at bit 63."""
    smeared = bits
    for shift in (1, 2, 4, 8, 16, 32):
        smeared = smeared.bitwiseOR(F.shiftleft(smeared, shift))
    return WORD_BITS - F.bit_count(smeared)


def _highest_bit(bits: Column) -> Column:
    """Index of the highest set bit: smear it into every lower position, then count."""
    smeared = bits
    for shift in (1, 2, 4, 8, 16, 32):
        smeared = smeared.bitwiseOR(F.shiftrightunsigned(smeared, shift))
    return F.bit_count(smeared) - 1


def sink_bucket_stats(words: DataFrame) -> DataFrame:
    """count, distinct, min and max per (topic, partition, 32768-offset bucket), from ``sink_words``.

    Exact: a word's distinct offsets are its set bits, its extra copies are rows minus those.
    Completeness of a bucket is then arithmetic; the words of the few incomplete buckets locate
    the missing offsets (``bucket_bitmap``).
    """
    require_columns(words, ["topic", "partition", "word", "rows", "bits"], "sink words")
    word, bits = F.col("word"), F.col("bits")
    return words.groupBy(
        "topic", "partition", F.shiftright(word, BUCKET_SHIFT - WORD_SHIFT).cast("long").alias("bucket")
    ).agg(
        F.sum("rows").cast("long").alias("rows"),
        F.sum(F.bit_count(bits)).cast("long").alias("distinct"),
        F.min(word * WORD_BITS + _lowest_bit(bits)).alias("min_offset"),
        F.max(word * WORD_BITS + _highest_bit(bits)).alias("max_offset"),
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
class PartitionRange:
    """What one partition of one job must hold in the sink: [lo, hi); lo None = unknown."""

    job_name: str
    group_id: str | None
    topic: str
    partition: int
    lo: int | None
    hi: int
    lo_source: str
    hi_checkpoint_id: int | None = None
    hi_run_id: str | None = None
    beyond_from: int | None = None
    last_checkpoint_id: int | None = None
    last_checkpoint_offset: int | None = None
    last_completed_at: datetime | None = None


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


def duplicate_buckets(sink: PartitionSink) -> list[int]:
    return sorted(b.bucket for b in sink.buckets.values() if b.rows > b.distinct)


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


def duplicate_runs(sink: DataFrame) -> DataFrame:
    """Offsets present more than once, folded into runs of consecutive offsets with the same writers.

    Returns topic, partition, offset_start, offset_end (exclusive), offsets, extra_copies, writers
    (JSON: the (run, checkpoint) of every copy). Meant for a sink already narrowed to the buckets
    that hold duplicates.
    """
    writers = F.array_sort(
        F.collect_list(
            F.struct(F.col("writer_run_id").alias("run"), F.col("writer_checkpoint_id").alias("cp"))
        )
    )
    dups = (
        sink.groupBy("topic", "partition", "offset")
        .agg(F.count("*").alias("_copies"), writers.alias("_writers"))
        .filter(F.col("_copies") > 1)
        .withColumn("_signature", F.to_json(F.col("_writers")))
    )
    by_offset = Window.partitionBy("topic", "partition", "_signature").orderBy("offset")
    islands = dups.withColumn("_island", F.col("offset") - F.row_number().over(by_offset))
    return islands.groupBy("topic", "partition", "_signature", "_island").agg(
        F.min("offset").alias("offset_start"),
        (F.max("offset") + 1).alias("offset_end"),
        F.count("*").alias("offsets"),
        F.sum(F.col("_copies") - 1).alias("extra_copies"),
        F.max("_copies").alias("max_copies"),
        F.first("_signature").alias("writers"),
    )


def gap_finding(
    rng: PartitionRange,
    start: int,
    end: int,
    verdict: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One GAP in FINDING_CORE form. ``verdict`` is the source-topic confirmation or None (not run)."""
    evidence: dict[str, Any]
    if verdict is None:
        status, evidence = OPEN, {"confirmation": "not run"}
    else:
        status, evidence = str(verdict["status"]), dict(verdict)
    severity = {CONFIRMED: CRITICAL, OPEN: CRITICAL, UNVERIFIABLE: ERROR, BENIGN: INFO}[status]
    evidence.update(
        {
            "missing_offsets": end - start,
            "range_source": rng.lo_source,
            "covered_by_checkpoint": rng.hi_checkpoint_id,
            "covered_by_run": rng.hi_run_id,
            "checkpoint_offset": rng.hi,
        }
    )
    evidence["status"] = status
    return _core_row(
        GAP,
        severity,
        status,
        rng,
        offset_start=start,
        offset_end=end,
        record_count=end - start,
        evidence=evidence,
        checkpoint_id=rng.hi_checkpoint_id,
    )


def gap_findings(
    gaps: Sequence[tuple[PartitionRange, int, int, Mapping[str, Any] | None]],
) -> list[dict[str, Any]]:
    """GAP rows in FINDING_CORE form: one per gap, except the benign ones (transaction markers,
    aborted or compacted records), which are one finding per partition and window with their
    count, so a transactional source does not yield one row per marker."""
    out: list[dict[str, Any]] = []
    benign: dict[tuple[str, str, int], list[tuple[PartitionRange, int, int, Mapping[str, Any]]]] = (
        defaultdict(list)
    )
    for rng, start, end, verdict in gaps:
        if verdict is not None and verdict.get("status") == BENIGN:
            benign[(rng.job_name, rng.topic, rng.partition)].append((rng, start, end, verdict))
        else:
            out.append(gap_finding(rng, start, end, verdict))
    for key in sorted(benign):
        out.append(benign_gaps_finding(benign[key]))
    return out


# Benign gaps listed one by one in the evidence, at most.
BENIGN_RANGES_SHOWN: Final = 20


def benign_gaps_finding(gaps: Sequence[tuple[PartitionRange, int, int, Mapping[str, Any]]]) -> dict[str, Any]:
    """One partition's benign gaps as one GAP (info): the span they lie in, the offsets missing in
    all, counts by cause, the first ranges. Its identity is that of a gap over the span, so a
    lone benign gap keeps the id it has when a later run cannot confirm it."""
    ordered = sorted(gaps, key=lambda g: g[1])
    rng = ordered[-1][0]
    by_cause: dict[str, int] = defaultdict(int)
    for _, start, end, verdict in ordered:
        by_cause[str(verdict.get("cause") or "no_committed_data_records")] += end - start
    missing = sum(end - start for _, start, end, _ in ordered)
    return _core_row(
        GAP,
        INFO,
        BENIGN,
        rng,
        offset_start=ordered[0][1],
        offset_end=max(end for _, _, end, _ in ordered),
        record_count=missing,
        evidence={
            "status": BENIGN,
            "gaps": len(ordered),
            "missing_offsets": missing,
            "by_cause": dict(sorted(by_cause.items())),
            "ranges": [[start, end] for _, start, end, _ in ordered[:BENIGN_RANGES_SHOWN]],
            "ranges_truncated": len(ordered) > BENIGN_RANGES_SHOWN,
            "explanation": "no committed data records: transaction markers, aborted or compacted",
            "range_source": rng.lo_source,
            "covered_by_checkpoint": rng.hi_checkpoint_id,
            "covered_by_run": rng.hi_run_id,
            "checkpoint_offset": rng.hi,
        },
        checkpoint_id=rng.hi_checkpoint_id,
    )


def duplicate_finding(rng: PartitionRange, run: Mapping[str, Any]) -> dict[str, Any]:
    writers = json.loads(str(run["writers"]))
    return _core_row(
        DUPLICATE,
        ERROR,
        OPEN,
        rng,
        offset_start=int(run["offset_start"]),
        offset_end=int(run["offset_end"]),
        record_count=int(run["extra_copies"]),
        evidence={
            "duplicated_offsets": int(run["offsets"]),
            "extra_copies": int(run["extra_copies"]),
            "max_copies": int(run["max_copies"]),
            "writers": writers,
        },
    )


def beyond_finding(rng: PartitionRange, stats: Mapping[str, Any]) -> dict[str, Any]:
    start = int(rng.beyond_from if rng.beyond_from is not None else rng.hi)
    return _core_row(
        SINK_BEYOND_CHECKPOINT,
        WARN,
        OPEN,
        rng,
        offset_start=start,
        offset_end=int(stats["max_offset"]) + 1,
        record_count=int(stats["rows"]),
        evidence={
            "latest_completed_offset": start,
            "sink_rows": int(stats["rows"]),
            "sink_max_offset": int(stats["max_offset"]),
            "writer_runs": list(stats.get("runs") or []),
            "writer_checkpoints": list(stats.get("checkpoints") or []),
        },
    )


def _core_row(
    finding_type: str,
    severity: str,
    status: str,
    rng: PartitionRange,
    *,
    offset_start: int,
    offset_end: int | None,
    record_count: int,
    evidence: Mapping[str, Any],
    checkpoint_id: int | None = None,
    run_id: str | None = None,
    identity: str = "",
) -> dict[str, Any]:
    return {
        "finding_type": finding_type,
        "severity": severity,
        "status": status,
        "job_name": rng.job_name,
        "group_id": rng.group_id,
        "topic": rng.topic,
        "partition": rng.partition,
        "checkpoint_id": checkpoint_id,
        "run_id": run_id,
        "offset_start": offset_start,
        "offset_end": offset_end,
        "record_count": record_count,
        "evidence": json.dumps(evidence, sort_keys=True, default=str),
        "identity": identity,
    }


def severity_at_least(severity: str, threshold: str) -> bool:
    """True when ``severity`` is as severe as ``threshold`` or more (SEVERITIES is most severe first)."""
    return SEVERITIES.index(severity) <= SEVERITIES.index(threshold)
