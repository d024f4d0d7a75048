"""What a `coordinates` sink holds of each completeness window, one rule over Arrow rows
(``window_stats``) run where `app.routes.examine_route` says: on the driver over the rows read once
when the windows are small (a watch cycle's few provisional windows: a Spark aggregation with its
shuffles cost more than the work, about 2 s a cycle), else by Spark's executors, each task over
whole windows (``window_stats_by_spark``), as the sink examination of reconcile does.

Per window: distinct offsets (landed), rows, the distinct offsets at or beyond the window's last
completed checkpoint, the lowest and highest offset, the holes between consecutive offsets, and the
latency percentiles (completion time of the first checkpoint that passed an offset minus the
record's earliest timestamp among its copies).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

ROWS_SCHEMA: Final = pa.schema([("_w", pa.int32()), ("_offset", pa.int64()), ("_ts_ms", pa.int64())])
STATS_SCHEMA: Final = pa.schema(
    [
        ("w", pa.int32()),
        ("landed", pa.int64()),
        ("rows", pa.int64()),
        ("landed_pending", pa.int64()),
        ("lowest", pa.int64()),
        ("highest", pa.int64()),
        ("holes", pa.list_(pa.struct([("s", pa.int64()), ("e", pa.int64())]))),
        ("p50", pa.int64()),
        ("p95", pa.int64()),
    ]
)
STATS_SPARK_SCHEMA: Final = (
    "w int, landed long, rows long, landed_pending long, lowest long, highest long, "
    "holes array<struct<s: long, e: long>>, p50 long, p95 long"
)


@dataclass(frozen=True)
class StatsPlan:
    """One window's rule inputs: where its pending offsets start, and per checkpoint interval
    [lo, hi) the completion time (epoch ms) of the checkpoint that passed those offsets."""

    pending_from: int
    intervals: tuple[tuple[int, int, int], ...]


def window_stats(rows: pa.Table, plans: Sequence[StatsPlan]) -> pa.Table:
    """The statistics (``STATS_SCHEMA``) of every window ``rows`` (``ROWS_SCHEMA``: window index,
    offset, timestamp in ms or null) hold; ``plans`` by window index."""
    w = rows.column("_w").to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = rows.column("_offset").to_numpy(zero_copy_only=False).astype(np.int64)
    ts = rows.column("_ts_ms").cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    order = np.lexsort((ts, offsets, w))  # nan last: a copy with a timestamp wins
    w, offsets, ts = w[order], offsets[order], ts[order]
    out: dict[str, list[object]] = {name: [] for name in STATS_SCHEMA.names}
    starts = np.flatnonzero(np.r_[True, w[1:] != w[:-1]]) if len(w) else np.array([], dtype=np.int64)
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(w)
        index = int(w[start])
        _one_window(index, offsets[start:end], ts[start:end], plans[index], out)
    return pa.table(out, schema=STATS_SCHEMA)


def _one_window(
    index: int, offsets: np.ndarray, ts: np.ndarray, plan: StatsPlan, out: dict[str, list[object]]
) -> None:
    first = np.r_[True, offsets[1:] != offsets[:-1]]
    distinct, earliest = offsets[first], ts[first]
    gaps = np.flatnonzero(np.diff(distinct) > 1)
    latency = _latencies(distinct, earliest, plan.intervals)
    p50: int | None = None
    p95: int | None = None
    if len(latency):
        p50, p95 = (int(v) for v in np.percentile(latency, [50, 95], method="inverted_cdf"))
    out["w"].append(index)
    out["landed"].append(len(distinct))
    out["rows"].append(len(offsets))
    out["landed_pending"].append(int((distinct >= plan.pending_from).sum()))
    out["lowest"].append(int(distinct[0]))
    out["highest"].append(int(distinct[-1]))
    out["holes"].append([{"s": int(distinct[g]) + 1, "e": int(distinct[g + 1])} for g in gaps])
    out["p50"].append(p50)
    out["p95"].append(p95)


def _latencies(offsets: np.ndarray, ts: np.ndarray, intervals: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """Completion minus timestamp (ms) of the offsets with a timestamp and a checkpoint past them."""
    if not intervals:
        return np.array([], dtype=np.float64)
    los = np.array([lo for lo, _, _ in intervals], dtype=np.int64)
    his = np.array([hi for _, hi, _ in intervals], dtype=np.int64)
    done = np.array([ms for _, _, ms in intervals], dtype=np.float64)
    at = np.searchsorted(his, offsets, side="right")  # the first interval whose end is beyond the offset
    inside = at < len(his)
    inside[inside] &= offsets[inside] >= los[at[inside]]
    latency: np.ndarray = (done[np.minimum(at, len(his) - 1)] - ts)[inside & ~np.isnan(ts)]
    return latency


def window_stats_by_spark(rows: DataFrame, plans: Sequence[StatsPlan], tasks: int) -> DataFrame:
    """``window_stats`` run by Spark's executors over ``rows`` (the columns of ``ROWS_SCHEMA``): the
    rows are hashed by window into ``tasks`` partitions, so each holds whole windows, and each task
    runs the rule once over all of its rows."""
    if tasks < 1:
        raise ValueError(f"window_stats_by_spark needs at least one task, got {tasks}")
    chosen = list(plans)

    def task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        held = list(batches)
        if held:
            yield from window_stats(pa.Table.from_batches(held), chosen).to_batches()

    return rows.select(*ROWS_SCHEMA.names).repartition(tasks, "_w").mapInArrow(task, STATS_SPARK_SCHEMA)
