"""The per-bucket examination of a sink, written once and run by either engine.

The partitions the fingerprints do not prove complete are examined per (topic, partition,
32768-offset bucket): rows, distinct offsets, lowest and highest offset, the 64-offset presence
words of a bucket that lacks some of its offsets (they locate the missing ranges), and the runs of
offsets it holds more than once, with the writers of every copy. ``examine_buckets`` is that rule,
over Arrow rows. It takes any number of whole groups, so:

- on the driver it runs once over the partitions' rows read once into Arrow (no Spark query to
  plan, which costs about a second in a fresh JVM whatever the size);
- on Spark's executors, for partitions too large for the driver, it runs once per task over the
  rows hashed to that task by (topic, partition, bucket), whole groups each
  (``examined_by_spark``).

Which one runs, and over how many tasks, is ``app.routes``' decision (``examine_route``,
``examine_tasks``). Either way the driver gets one row per bucket; ``partitions_examined`` turns
them into per-partition results, joining the duplicate runs a bucket edge cut in two (runs are
few, so that step is cheap and needs no engine).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from app.contracts.tables import require_columns
from app.reconcile.sink.offsets import (
    BUCKET_SHIFT,
    BUCKET_SIZE,
    SINK_COLUMNS,
    WORD_BITS,
    WORD_SHIFT,
    BucketStat,
    bucket_bitmap,
)

_WORD: Final = pa.struct([("word", pa.int64()), ("bits", pa.int64())])
# One run of consecutive offsets held more than once with the same writers; offset_end exclusive,
# writers the JSON of every copy's (run, checkpoint) (``writers_json``).
_RUN: Final = pa.struct(
    [
        ("offset_start", pa.int64()),
        ("offset_end", pa.int64()),
        ("offsets", pa.int64()),
        ("extra_copies", pa.int64()),
        ("max_copies", pa.int64()),
        ("writers", pa.string()),
    ]
)

# What ``examine_buckets`` returns: one row per (topic, partition, bucket). ``words`` is null for a
# bucket that holds all its offsets; ``duplicates`` lists its runs (empty when it has none).
EXAMINED_SCHEMA: Final = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("bucket", pa.int64()),
        ("rows", pa.int64()),
        ("distinct", pa.int64()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),
        ("words", pa.list_(_WORD)),
        ("duplicates", pa.list_(_RUN)),
    ]
)

# The same schema as Spark names it, for the rows the executors hand back (``examined_by_spark``).
EXAMINED_SPARK_SCHEMA: Final = from_arrow_schema(EXAMINED_SCHEMA)


def writer_sort_key(writer: tuple[str | None, int | None]) -> tuple[bool, str, bool, int]:
    """Writers in Spark's ascending order of struct(run, cp) (``array_sort``): field by field, a
    null field first. (UTF-8 byte order, Spark's, is code point order, Python's.) The evidence of
    the DUPLICATE findings stored so far lists the writers in this order, and keeps it."""
    run, cp = writer
    return (run is not None, run or "", cp is not None, cp or 0)


def writers_json(writers: Sequence[tuple[str | None, int | None]]) -> str:
    """The copies' writers as the evidence JSON: sorted by ``writer_sort_key``, a null field left
    out, fields in the order run, cp, no spaces (what Spark's ``to_json`` of that array writes)."""
    items = [
        {k: v for k, v in (("run", run), ("cp", cp)) if v is not None}
        for run, cp in sorted(writers, key=writer_sort_key)
    ]
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False)


def examine_buckets(rows: pa.Table) -> pa.Table:
    """One ``EXAMINED_SCHEMA`` row per (topic, partition, bucket) of ``rows`` (the canonical sink
    columns, ``SINK_COLUMNS``), whatever the number of groups ``rows`` holds.

    Rows are sorted once by (topic, partition, offset); groups, distinct offsets and words are then
    boundaries in that order, so the cost is one sort plus vectorized linear work, and a Python
    step per offset held more than once (its writers).
    """
    if rows.num_rows == 0:
        return EXAMINED_SCHEMA.empty_table()
    topics = pc.dictionary_encode(rows.column("topic").combine_chunks())
    topic = topics.indices.to_numpy()
    partition = rows.column("partition").to_numpy()
    offset = rows.column("offset").to_numpy()
    order = np.lexsort((offset, partition, topic))
    topic, partition, offset = topic[order], partition[order], offset[order]

    # Distinct (topic, partition, offset): index of each one's first row, and its copies.
    new_tp = np.r_[True, (topic[1:] != topic[:-1]) | (partition[1:] != partition[:-1])]
    first = np.flatnonzero(new_tp | np.r_[True, offset[1:] != offset[:-1]])
    copies = np.diff(np.r_[first, len(order)])
    new_tp, topic, partition, offset = new_tp[first], topic[first], partition[first], offset[first]

    bucket = offset >> BUCKET_SHIFT
    starts = np.flatnonzero(new_tp | np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], len(offset)]
    distinct = ends - starts
    incomplete = distinct < BUCKET_SIZE
    groups = {
        "topic": topics.dictionary.take(pa.array(topic[starts])).cast(pa.string()),
        "partition": pa.array(partition[starts], pa.int32()),
        "bucket": pa.array(bucket[starts], pa.int64()),
        "rows": pa.array(np.add.reduceat(copies, starts), pa.int64()),
        "distinct": pa.array(distinct, pa.int64()),
        "min_offset": pa.array(offset[starts], pa.int64()),
        "max_offset": pa.array(offset[ends - 1], pa.int64()),
        "words": _words(new_tp, offset, starts, incomplete),
        "duplicates": _duplicates(
            offset,
            first,
            copies,
            order,
            starts,
            rows.column("writer_run_id"),
            rows.column("writer_checkpoint_id"),
        ),
    }
    return pa.table(groups, schema=EXAMINED_SCHEMA)


def _words(new_tp: np.ndarray, offset: np.ndarray, starts: np.ndarray, incomplete: np.ndarray) -> pa.Array:
    """Per group, the (word, bits) of its distinct offsets when the group is incomplete, else null.
    ``offset``: the distinct offsets sorted within each (topic, partition) group, ``starts`` the
    first of each group. Offset o sets bit o % 64 of word o // 64: the layout ``bucket_bitmap`` reads."""
    word = offset >> WORD_SHIFT
    word_starts = np.flatnonzero(new_tp | np.r_[True, word[1:] != word[:-1]])
    bit = np.left_shift(np.uint64(1), (offset & (WORD_BITS - 1)).astype(np.uint64))
    bits = np.bitwise_or.reduceat(bit, word_starts).view(np.int64)  # a signed long, as Spark keeps it
    group = np.searchsorted(starts, word_starts, side="right") - 1
    kept = incomplete[group]
    values = pa.StructArray.from_arrays(
        [pa.array(word[word_starts][kept], pa.int64()), pa.array(bits[kept], pa.int64())],
        fields=list(_WORD),
    )
    return _lists(np.bincount(group[kept], minlength=len(starts)), values, ~incomplete)


def _duplicates(
    offset: np.ndarray,
    first: np.ndarray,
    copies: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    runs: pa.ChunkedArray,
    checkpoints: pa.ChunkedArray,
) -> pa.Array:
    """Per group, its offsets held more than once folded into runs of consecutive offsets whose
    copies have the same writers, ascending by (offset_start, writers).

    ``offset`` are the distinct offsets, ``first`` and ``copies`` where each one's rows start in
    the sorted order and how many there are, ``order`` the sorted order's row numbers in the input."""
    repeated = np.flatnonzero(copies > 1)
    found: list[tuple[int, int, int, int, int, int, str]] = []
    if len(repeated):
        # The input row numbers of every copy of every repeated offset, in offset order.
        spans = [order[first[i] : first[i] + copies[i]] for i in repeated]
        taken = pa.array(np.concatenate(spans))
        run_ids, cps = runs.take(taken).to_pylist(), checkpoints.take(taken).to_pylist()
        group_of = np.searchsorted(starts, repeated, side="right") - 1
        held: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
        pos = 0
        for i, group in zip(repeated.tolist(), group_of.tolist(), strict=True):
            n = int(copies[i])
            signature = writers_json(list(zip(run_ids[pos : pos + n], cps[pos : pos + n], strict=True)))
            held[(group, signature)].append((int(offset[i]), n))
            pos += n
        for (group, signature), offsets in held.items():
            for island in _islands(offsets):
                found.append(
                    (
                        group,
                        island[0][0],
                        island[-1][0] + 1,
                        len(island),
                        sum(n - 1 for _, n in island),
                        max(n for _, n in island),
                        signature,
                    )
                )
    found.sort(key=lambda r: (r[0], r[1], r[6]))
    columns = list(zip(*found, strict=True)) if found else [()] * 7
    values = pa.StructArray.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns[1:], _RUN, strict=True)], fields=list(_RUN)
    )
    return _lists(np.bincount(np.array(columns[0], np.int64), minlength=len(starts)), values)


def _lists(counts: np.ndarray, values: pa.StructArray, null: np.ndarray | None = None) -> pa.Array:
    """One list per group: the next ``counts[i]`` of ``values`` (in group order), null where ``null``."""
    offsets = pa.array(np.r_[0, np.cumsum(counts)], pa.int32())
    mask = None if null is None else pa.array(null)
    return pa.ListArray.from_arrays(offsets, values, type=pa.list_(values.type), mask=mask)


def _islands(held: Sequence[tuple[int, int]]) -> Iterator[Sequence[tuple[int, int]]]:
    """Maximal runs of consecutive offsets in ``held`` ((offset, copies), ascending offsets)."""
    start = 0
    for i in range(1, len(held) + 1):
        if i == len(held) or held[i][0] != held[i - 1][0] + 1:
            yield held[start:i]
            start = i


def examined_by_spark(rows: DataFrame, tasks: int) -> DataFrame:
    """``examine_buckets`` run by Spark's executors over ``rows`` (the canonical sink columns): the
    same rows out as on the driver.

    The rows are hashed by (topic, partition, bucket) into ``tasks`` partitions, so each holds whole
    groups, and each task runs the rule once over all of its rows. (``groupBy(...).applyInArrow``
    would also hand it whole groups, but sorts every row and calls Python once per group: about
    1.5 times as long for 2.5M rows, bench.examine.)
    """
    require_columns(rows, list(SINK_COLUMNS), "sink")
    if tasks < 1:
        raise ValueError(f"examined_by_spark needs at least one task, got {tasks}")
    bucket = F.shiftright(F.col("offset"), BUCKET_SHIFT)
    return (
        rows.select(*SINK_COLUMNS)
        .repartition(tasks, "topic", "partition", bucket)
        .mapInArrow(_examine_task, EXAMINED_SPARK_SCHEMA)
    )


def _examine_task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows of one task, whole groups only (see ``examined_by_spark``), examined at once."""
    rows = list(batches)
    if rows:
        yield from examine_buckets(pa.Table.from_batches(rows)).to_batches()


@dataclass(frozen=True)
class PartitionBuckets:
    """What the examination found in one partition's range: its bucket statistics, the presence
    words of its buckets that lack some offsets, and its duplicate runs (``duplicate_finding``'s
    input: offset_start, offset_end, offsets, extra_copies, max_copies, writers)."""

    buckets: tuple[BucketStat, ...]
    words: Mapping[int, Sequence[tuple[int, int]]]
    duplicates: tuple[Mapping[str, Any], ...]

    def bitmap(self, bucket: int) -> bytes:
        """The presence bitmap of one bucket that lacks some of its offsets (``bucket_bitmap``)."""
        return bucket_bitmap(bucket, self.words[bucket])


def partitions_examined(examined: pa.Table) -> dict[tuple[str, int], PartitionBuckets]:
    """``examine_buckets``' rows (from either engine) per (topic, partition)."""
    stats: dict[tuple[str, int], list[BucketStat]] = defaultdict(list)
    words: dict[tuple[str, int], dict[int, list[tuple[int, int]]]] = defaultdict(dict)
    runs: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for row in examined.to_pylist():
        tp, bucket = (row["topic"], row["partition"]), row["bucket"]
        stat = BucketStat(bucket, row["rows"], row["distinct"], row["min_offset"], row["max_offset"])
        stats[tp].append(stat)
        if row["words"] is not None:
            words[tp][bucket] = [(w["word"], w["bits"]) for w in row["words"]]
        runs[tp] += row["duplicates"] or []
    return {
        tp: PartitionBuckets(
            tuple(sorted(found, key=lambda b: b.bucket)), words[tp], tuple(joined_runs(runs[tp]))
        )
        for tp, found in stats.items()
    }


def joined_runs(runs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One partition's duplicate runs with the pieces a bucket edge cut joined again: a run with the
    same writers that ends where another starts is one run. Ascending by (offset_start, writers)."""
    out: list[dict[str, Any]] = []
    for run in sorted(runs, key=lambda r: (r["writers"], r["offset_start"])):
        last = out[-1] if out else None
        if last and last["writers"] == run["writers"] and last["offset_end"] == run["offset_start"]:
            out[-1] = {
                **last,
                "offset_end": run["offset_end"],
                "offsets": last["offsets"] + run["offsets"],
                "extra_copies": last["extra_copies"] + run["extra_copies"],
                "max_copies": max(last["max_copies"], run["max_copies"]),
            }
        else:
            out.append(dict(run))
    return sorted(out, key=lambda r: (r["offset_start"], r["writers"]))
