"""The per-bucket examination of a few sink rows on the driver: what ``sink_words`` with
``sink_bucket_stats`` and ``duplicate_runs`` compute in Spark, over the rows themselves, read once.

Partitions that fail the fingerprint proof are usually few and hold few rows (a gap, a replayed
batch). Spark's per-bucket aggregate and its duplicate search then cost two queries whose price is
planning, code generation and shuffles, not rows: about 2 s in a fresh JVM for a hundred thousand
rows. Read once as Arrow, numpy does the same arithmetic in milliseconds. The results are the same
values the Spark path gives (tests/spark/test_reconcile.py runs both over one sink); which path runs
is decided by ``app.routes.examine_route`` from the row count the fingerprint scan already returned.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.reconcile.sink_offsets import BUCKET_SHIFT, BUCKET_SIZE, BucketStat


@dataclass
class PartitionDetail:
    """One partition's rows in its range: bucket statistics, its distinct offsets (for the bitmaps
    of the buckets to inspect) and its duplicate runs, as ``duplicate_runs`` returns them."""

    buckets: list[BucketStat] = field(default_factory=list)
    duplicate_runs: list[dict[str, Any]] = field(default_factory=list)
    _distinct: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def bitmap(self, bucket: int) -> bytes:
        """The presence bitmap of one bucket, in ``bucket_bitmap``'s layout."""
        base = bucket * BUCKET_SIZE
        lo, hi = np.searchsorted(self._distinct, [base, base + BUCKET_SIZE])
        rel = self._distinct[lo:hi] - base
        out = np.zeros(BUCKET_SIZE // 8, np.uint8)
        # Little-endian bits: offset i of the bucket is bit i % 8 of byte i // 8.
        np.bitwise_or.at(out, rel >> 3, (1 << (rel & 7)).astype(np.uint8))
        return out.tobytes()


def writer_sort_key(writer: tuple[str | None, int | None]) -> tuple[bool, str, bool, int]:
    """Spark's ascending order of struct(run, cp), which ``array_sort`` uses: field by field, a
    null field first. (UTF-8 byte order, Spark's, is code point order, Python's.)"""
    run, cp = writer
    return (run is not None, run or "", cp is not None, cp or 0)


def writers_json(writers: Sequence[tuple[str | None, int | None]]) -> str:
    """``to_json(array_sort(collect_list(struct(run, cp))))`` as Spark writes it: null fields left
    out, fields in declaration order."""
    items = [
        {k: v for k, v in (("run", run), ("cp", cp)) if v is not None}
        for run, cp in sorted(writers, key=writer_sort_key)
    ]
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False)


def partition_details(rows: pa.Table) -> dict[tuple[str, int], PartitionDetail]:
    """Per (topic, partition) of ``rows`` (the canonical sink columns): its details.

    Rows are sorted once by (topic, partition, offset); each partition is then a slice, so the cost
    is one sort plus linear work, whatever the number of partitions.
    """
    if rows.num_rows == 0:
        return {}
    topics = pc.dictionary_encode(rows.column("topic")).combine_chunks()
    topic_names = topics.dictionary.to_pylist()
    topic = topics.indices.to_numpy()
    partition = rows.column("partition").to_numpy()
    offsets = rows.column("offset").to_numpy()
    order = np.lexsort((offsets, partition, topic))
    topic, partition, offsets = topic[order], partition[order], offsets[order]
    changes = (topic[1:] != topic[:-1]) | (partition[1:] != partition[:-1])
    edges = [0, *(np.flatnonzero(changes) + 1).tolist(), len(order)]
    runs = rows.column("writer_run_id")
    cps = rows.column("writer_checkpoint_id")
    out = {}
    for a, b in itertools.pairwise(edges):
        tp = (topic_names[int(topic[a])], int(partition[a]))
        out[tp] = _detail(tp, offsets[a:b], order[a:b], runs, cps)
    return out


def _detail(
    tp: tuple[str, int], offsets: np.ndarray, rows: np.ndarray, runs: pa.ChunkedArray, cps: pa.ChunkedArray
) -> PartitionDetail:
    """The details of one partition from its sorted offsets (``rows``: their row numbers)."""
    first = np.flatnonzero(np.r_[True, offsets[1:] != offsets[:-1]])
    distinct = offsets[first]
    copies = np.diff(np.r_[first, len(offsets)])
    bucket_of = distinct >> BUCKET_SHIFT
    starts = np.flatnonzero(np.r_[True, bucket_of[1:] != bucket_of[:-1]])
    ends = np.r_[starts[1:], len(distinct)]
    rows_per_bucket = np.add.reduceat(copies, starts)
    buckets = [
        BucketStat(int(bucket_of[s]), int(n), int(e - s), int(distinct[s]), int(distinct[e - 1]))
        for s, e, n in zip(starts, ends, rows_per_bucket, strict=True)
    ]
    repeated = np.flatnonzero(copies > 1)
    if not len(repeated):
        return PartitionDetail(buckets, [], distinct)
    return PartitionDetail(
        buckets, _duplicate_runs(tp, distinct, first, copies, repeated, rows, runs, cps), distinct
    )


def _duplicate_runs(
    tp: tuple[str, int],
    distinct: np.ndarray,
    first: np.ndarray,
    copies: np.ndarray,
    repeated: np.ndarray,
    rows: np.ndarray,
    runs: pa.ChunkedArray,
    cps: pa.ChunkedArray,
) -> list[dict[str, Any]]:
    """``duplicate_runs``' rows of one partition: offsets held more than once, folded into runs of
    consecutive offsets whose copies have the same writers."""
    # The row numbers of every copy of every repeated offset, in offset order.
    spans = [rows[first[i] : first[i] + copies[i]] for i in repeated]
    taken = pa.array(np.concatenate(spans))
    run_ids, checkpoints = runs.take(taken).to_pylist(), cps.take(taken).to_pylist()
    by_signature: dict[str, list[tuple[int, int]]] = defaultdict(list)
    pos = 0
    for i, span in zip(repeated, spans, strict=True):
        n = len(span)
        signature = writers_json(list(zip(run_ids[pos : pos + n], checkpoints[pos : pos + n], strict=True)))
        by_signature[signature].append((int(distinct[i]), n))
        pos += n
    out = []
    for signature, held in by_signature.items():
        for island in _islands(held):
            out.append(
                {
                    "topic": tp[0],
                    "partition": tp[1],
                    "offset_start": island[0][0],
                    "offset_end": island[-1][0] + 1,
                    "offsets": len(island),
                    "extra_copies": sum(n - 1 for _, n in island),
                    "max_copies": max(n for _, n in island),
                    "writers": signature,
                }
            )
    return out


def _islands(held: Sequence[tuple[int, int]]) -> Iterator[Sequence[tuple[int, int]]]:
    """Maximal runs of consecutive offsets in ``held`` ((offset, copies), ascending offsets)."""
    start = 0
    for i in range(1, len(held) + 1):
        if i == len(held) or held[i][0] != held[i - 1][0] + 1:
            yield held[start:i]
            start = i
