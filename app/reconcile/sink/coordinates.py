"""The sink examination of `reconcile`: which offsets the sink holds, missing or twice, read at the
cost of about one scan.

The sink is the only large input. It is read in full once, and only for the partitions and
offset ranges the window's checkpoints cover, through filters on its coordinate columns so the
format's per-file statistics skip every file outside them (Delta's min/max in its log; an Iceberg
sink's partition values and column bounds in its manifests, the filter pushed into Iceberg's scan):

1. one aggregate per (topic, partition): rows, min, max and a fingerprint, the XOR of xxhash64 of
   every offset (``app.reconcile.sink.offsets.sink_fingerprints``). Compared with the fingerprint of
   the offsets the range must hold, computed on the driver (``expected_fingerprint``, each offset once
   however many partitions share it), it proves most partitions complete at about the cost
   of a bare count;
2. the partitions that fail it, read again alone and examined per 32768-offset bucket (rows,
   distinct, min, max, the presence words of a bucket lacking offsets, its duplicate runs), which
   locates the missing ranges and the duplicate runs. That examination is one rule over Arrow
   rows (``app.reconcile.sink.buckets.examine_buckets``), run where ``app.routes.examine_route``
   says: when the partitions hold few rows (a gap or a replayed batch usually leaves a few
   partitions with few rows), on the driver over the rows read once, since a Spark query costs
   about a second of planning and code generation in a fresh JVM whatever its size; otherwise on
   Spark's executors, each task over whole buckets (``examined_by_spark``). Either way only the
   range's rows count.

The ledger window and the group's commits are small: they are read once into Arrow (by delta-rs,
on every storage) and analysed on the driver (``app.reconcile.ledger.audit``): findings, the ranges above,
restarts. Spark runs only the sink reads. The rows a run stores (findings, partition summary, the
run record) are likewise written from the driver (their handles, ``app.storage.handles``).

Rows past the last completed checkpoint are counted by a tail-only read, on a thread of its own
while the reads above run.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Final

from pyspark import inheritable_thread_target
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig
from app.errors import (
    SchemaMismatchError,
)
from app.reconcile import findings as rc
from app.reconcile.findings import Finding, PartitionRange
from app.reconcile.sink.buckets import examine_buckets, examined_by_spark, partitions_examined
from app.reconcile.sink.offsets import (
    BUCKET_SIZE,
    SINK_COLUMNS,
    PartitionSink,
    buckets_to_inspect,
    effective_lo,
    elementary_segments,
    expected_fingerprint,
    is_complete,
    missing_ranges,
    proven_complete,
    range_fingerprint,
    sink_fingerprints,
)
from app.routes import DRIVER, EXAMINE_DRIVER_MAX_ROWS, examine_route, examine_tasks

log = logging.getLogger(__name__)

SINK_CANONICAL: Final = SINK_COLUMNS


# Above this many ranges the sink filter is a bounding box plus a join (see SinkReader.where).
EXACT_FILTER_MAX_RANGES: Final = 16


@dataclass(frozen=True)
class SinkColumns:
    topic: str
    partition: str
    offset: str
    checkpoint: str
    run: str


def sink_columns(cfg: AppConfig) -> SinkColumns:
    r = cfg.reconcile
    return SinkColumns(
        r.sink_topic_column,
        r.sink_partition_column,
        r.sink_offset_column,
        r.sink_checkpoint_column,
        r.sink_run_column,
    )


class SinkReader:
    """The sink of one job, read through coordinate filters (file skipping by the table format's
    statistics, Delta's or Iceberg's) and renamed."""

    def __init__(self, df: DataFrame, cols: SinkColumns) -> None:
        missing = [c for c in (cols.topic, cols.partition, cols.offset) if c not in df.columns]
        if missing:
            raise SchemaMismatchError(f"sink lacks coordinate columns {missing}; has {df.columns}")
        self._df = df
        self._cols = cols

    def where(self, ranges: Iterable[tuple[str, int, int | None, int | None]]) -> DataFrame:
        """Rows of the given (topic, partition, start, end) ranges (None = unbounded), renamed to
        the canonical sink columns. The filter is on the table's own columns, before any projection,
        so Delta prunes files by their min/max statistics.

        A few ranges become one exact disjunction. Many would make a predicate too large for
        Spark's code generation (it then falls back to interpreting it for every row, several
        times slower than the scan itself), so they become one bounding box per topic, which Delta
        still prunes files with, followed by an exact broadcast join on (topic, partition).
        """
        c = self._cols
        wanted = list(ranges)
        if not wanted:
            raise ValueError("SinkReader.where needs at least one range")

        def bounded(term: Column, start: int | None, end: int | None) -> Column:
            if start is not None:
                term = term & (F.col(c.offset) >= F.lit(start))
            if end is not None:
                term = term & (F.col(c.offset) < F.lit(end))
            return term

        exact: DataFrame | None = None
        if len(wanted) <= EXACT_FILTER_MAX_RANGES:
            terms = [
                bounded((F.col(c.topic) == F.lit(t)) & (F.col(c.partition) == F.lit(p)), lo, hi)
                for t, p, lo, hi in wanted
            ]
            filtered = self._df.filter(reduce(lambda a, b: a | b, terms))
        else:
            boxes: dict[str, list[tuple[int, int | None, int | None]]] = defaultdict(list)
            for t, p, lo, hi in wanted:
                boxes[t].append((p, lo, hi))
            terms = []
            for t, parts in boxes.items():
                los, his = [lo for _, lo, _ in parts], [hi for _, _, hi in parts]
                term = (F.col(c.topic) == F.lit(t)) & F.col(c.partition).isin(
                    sorted({p for p, _, _ in parts})
                )
                terms.append(
                    bounded(
                        term,
                        None if None in los else min(x for x in los if x is not None),
                        None if None in his else max(x for x in his if x is not None),
                    )
                )
            filtered = self._df.filter(reduce(lambda a, b: a | b, terms))
            if all(len({(lo, hi) for _, lo, hi in parts}) == 1 for parts in boxes.values()):
                # Every partition of a topic wants the same range: the box is already exact.
                return self._canonical(filtered)
            exact = self._df.sparkSession.createDataFrame(
                wanted, "_w_topic string, _w_partition int, _w_start long, _w_end long"
            )

        out = self._canonical(filtered)
        if exact is None:
            return out
        inside = (
            (F.col("topic") == F.col("_w_topic"))
            & (F.col("partition") == F.col("_w_partition"))
            & (F.col("_w_start").isNull() | (F.col("offset") >= F.col("_w_start")))
            & (F.col("_w_end").isNull() | (F.col("offset") < F.col("_w_end")))
        )
        return out.join(F.broadcast(exact), on=inside, how="inner").select(*SINK_CANONICAL)

    def _canonical(self, filtered: DataFrame) -> DataFrame:
        c = self._cols

        def optional(name: str, alias: str, type_: str) -> Column:
            return (F.col(name) if name in self._df.columns else F.lit(None)).cast(type_).alias(alias)

        return filtered.select(
            F.col(c.topic).cast("string").alias("topic"),
            F.col(c.partition).cast("int").alias("partition"),
            F.col(c.offset).cast("long").alias("offset"),
            optional(c.checkpoint, "writer_checkpoint_id", "long"),
            optional(c.run, "writer_run_id", "string"),
        )


def _rows_to_ranges(rows: Iterable[Any]) -> list[PartitionRange]:
    """The coverage rows of the ledger audit as ranges (the rows carry every field of the range)."""
    names = [f.name for f in dataclasses.fields(PartitionRange)]
    return [PartitionRange(**{n: r[n] for n in names}) for r in rows]


@dataclass
class SinkOutcome:
    rows: list[Finding] = field(default_factory=list)
    stats: dict[tuple[str, str, int], PartitionSink] = field(default_factory=dict)
    gaps: list[tuple[PartitionRange, int, int]] = field(default_factory=list)


def examine_sink(
    spark: SparkSession,
    sink: SinkReader,
    ranges: Sequence[PartitionRange],
    active_run: str | None,
    driver_max_rows: int = EXAMINE_DRIVER_MAX_ROWS,
) -> SinkOutcome:
    """GAP candidates, DUPLICATE and SINK_BEYOND_CHECKPOINT rows of one job's sink.

    ``driver_max_rows``: the partitions the fingerprints do not prove complete are examined on the
    driver when they hold at most this many rows in their ranges, else by Spark (same results).
    """
    out = SinkOutcome()
    if not ranges:
        return out
    by_tp = {(r.topic, r.partition): r for r in ranges}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sink-tail") as pool:
        # The tail read depends on nothing below and usually reads no file at all (Delta skips
        # every file by its statistics), so what it costs is planning and a file-filtering job:
        # done on a thread of its own while the sink is scanned, that latency is hidden.
        beyond = pool.submit(inheritable_thread_target(spark)(_beyond_rows), sink, ranges, by_tp, active_run)
        _examine_ranges(spark, sink, ranges, by_tp, out, driver_max_rows)
        out.rows += beyond.result()
    return out


def _examine_ranges(
    spark: SparkSession,
    sink: SinkReader,
    ranges: Sequence[PartitionRange],
    by_tp: Mapping[tuple[str, int], PartitionRange],
    out: SinkOutcome,
    driver_max_rows: int,
) -> None:
    """GAP candidates, DUPLICATE rows and statistics of one job's sink into ``out``."""
    job = ranges[0].job_name
    covered = [(r.topic, r.partition, r.lo, r.hi) for r in ranges if r.lo is None or r.hi > r.lo]
    examined: dict[tuple[str, int], _Examined] = {}
    proven: dict[tuple[str, int], PartitionSink] = {}
    if covered:
        topics = sorted({t for t, _, _, _ in covered})
        started = time.monotonic()
        proven, rows_in_range = _prove_complete(spark, sink, covered, by_tp, topics)
        log.info(
            "sink of %s: %d of %d partitions proven complete by count and fingerprint in %.1fs",
            job,
            len(proven),
            len(covered),
            time.monotonic() - started,
        )
        # The rest is examined per bucket, reading only its partitions (Delta skips the others).
        rest = [c for c in covered if (c[0], c[1]) in rows_in_range and (c[0], c[1]) not in proven]
        if rest:
            started = time.monotonic()
            rows = sum(rows_in_range[(t, p)] for t, p, _, _ in rest)
            route = examine_route(rows, driver_max_rows)
            examined = _examine_per_bucket(sink, rest, by_tp, route, rows)
            log.info(
                "sink of %s: %d partition(s), %d row(s), examined per bucket %s in %.1fs",
                job,
                len(rest),
                rows,
                "on the driver" if route == DRIVER else "by Spark",
                time.monotonic() - started,
            )

    for tp, rng in by_tp.items():
        if tp in proven:
            out.stats[(job, tp[0], tp[1])] = proven[tp]
            continue
        found = examined.get(tp)
        if found is None:  # no row in its range (or no range to read): all of it is missing
            found = _Examined(missing=_missing(rng, PartitionSink(), lambda b: bytes(BUCKET_SIZE // 8)))
        out.stats[(job, tp[0], tp[1])] = found.sink
        for start, end in found.missing:
            out.gaps.append((rng, start, end))
        out.rows += [rc.duplicate_finding(rng, run) for run in found.duplicates]


@dataclass
class _Examined:
    """What the per-bucket examination found in one partition's range."""

    sink: PartitionSink = field(default_factory=PartitionSink)
    missing: list[tuple[int, int]] = field(default_factory=list)
    duplicates: list[Mapping[str, Any]] = field(default_factory=list)


def _missing(rng: PartitionRange, ps: PartitionSink, bitmap: Callable[[int], bytes]) -> list[tuple[int, int]]:
    """The missing ranges of one partition: the bitmaps of the buckets that lack offsets decide."""
    lo = effective_lo(rng, ps)
    if is_complete(lo, rng.hi, ps):
        return []
    return missing_ranges(lo, rng.hi, ps, {b: bitmap(b) for b in buckets_to_inspect(lo, rng.hi, ps)})


def _examine_per_bucket(
    sink: SinkReader,
    rest: Sequence[tuple[str, int, int | None, int]],
    by_tp: Mapping[tuple[str, int], PartitionRange],
    route: str,
    rows: int,
) -> dict[tuple[str, int], _Examined]:
    """The ``rows`` rows of ``rest`` examined per bucket by ``examine_buckets`` on the engine ``route``
    names: read once onto the driver and examined there, or by bucket on Spark's executors."""
    read = sink.where(rest)
    if route == DRIVER:
        examined = examine_buckets(read.toArrow())
    else:
        tasks = examine_tasks(rows, read.sparkSession.sparkContext.defaultParallelism)
        examined = examined_by_spark(read, tasks).toArrow()
    out = {}
    for tp, found in partitions_examined(examined).items():
        ps = PartitionSink.of(found.buckets)
        out[tp] = _Examined(ps, _missing(by_tp[tp], ps, found.bitmap), list(found.duplicates))
    return out


def _beyond_rows(
    sink: SinkReader,
    ranges: Sequence[PartitionRange],
    by_tp: Mapping[tuple[str, int], PartitionRange],
    active_run: str | None,
) -> list[Finding]:
    """SINK_BEYOND_CHECKPOINT rows: sink rows past the last completed checkpoint, by a tail-only read."""
    tails = [(r.topic, r.partition, r.beyond_from, None) for r in ranges if r.beyond_from is not None]
    if not tails:
        return []
    beyond = sink.where(tails)
    if active_run is not None:
        # Rows of the batch the live run is writing right now are not beyond anything yet.
        beyond = beyond.filter(F.col("writer_run_id").isNotNull() & (F.col("writer_run_id") != active_run))
    agg = beyond.groupBy("topic", "partition").agg(
        F.count("*").alias("rows"),
        F.max("offset").alias("max_offset"),
        F.slice(F.array_sort(F.collect_set("writer_run_id")), 1, 10).alias("runs"),
        F.slice(F.array_sort(F.collect_set("writer_checkpoint_id")), 1, 20).alias("checkpoints"),
    )
    return [rc.beyond_finding(by_tp[(row["topic"], row["partition"])], row.asDict()) for row in agg.collect()]


def _prove_complete(
    spark: SparkSession,
    sink: SinkReader,
    covered: Sequence[tuple[str, int, int | None, int]],
    by_tp: Mapping[tuple[str, int], PartitionRange],
    topics: Sequence[str],
) -> tuple[dict[tuple[str, int], PartitionSink], dict[tuple[str, int], int]]:
    """One scan of the covered ranges: the partitions proven complete by count and fingerprint,
    with their statistics, and the rows in its range of every partition that has some."""
    started = time.monotonic()
    prints = {
        (r["topic"], r["partition"]): r for r in sink_fingerprints(sink.where(covered), topics).collect()
    }
    scanned = time.monotonic()
    candidates: dict[tuple[str, int], tuple[int, int]] = {}
    for tp, row in prints.items():
        rng = by_tp[tp]
        lo = row["min_offset"] if rng.lo is None else rng.lo
        # Only ranges the sink holds exactly as many rows of are worth an expected fingerprint, so
        # offsets are generated for no more than the rows just read.
        if row["rows"] == rng.hi - lo:
            candidates[tp] = (lo, rng.hi)
    segments = elementary_segments(candidates.values())
    expected = {(a, b): expected_fingerprint(a, b) for a, b in segments}
    log.debug(
        "fingerprints: sink scan %.1fs, expected fingerprints of %d offsets %.1fs",
        scanned - started,
        sum(b - a for a, b in segments),
        time.monotonic() - scanned,
    )
    proven = {}
    for tp, (lo, hi) in candidates.items():
        row = prints[tp]
        if proven_complete(
            lo,
            hi,
            row["rows"],
            row["min_offset"],
            row["max_offset"],
            row["fingerprint"],
            range_fingerprint(lo, hi, expected),
        ):
            # Complete: every offset once, so distinct offsets equal rows.
            proven[tp] = PartitionSink(row["rows"], row["rows"], row["min_offset"], row["max_offset"])
    return proven, {tp: row["rows"] for tp, row in prints.items()}
