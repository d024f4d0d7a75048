"""The completeness table's reads on the driver, for whoever shows its windows: the dashboard and
the window gauges of the alerts. Only delta-rs and Arrow: no Spark session, no broker."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from app.storage.handles import TableHandle

# What the dashboard and the gauges read of a window's row.
WINDOW_COLUMNS: Final = (
    "job_name", "topic", "partition", "window_start", "window_end", "sink_mode", "expected", "landed",
    "lost", "unverifiable", "duplicated", "pending", "offsets_in_sink_batches", "completeness",
    "latency_p50_ms", "latency_p95_ms", "final",
)  # fmt: skip


def recent_windows(completeness: TableHandle, since: datetime) -> pa.Table | None:
    """The completeness rows of the windows starting at ``since`` or later (``WINDOW_COLUMNS``),
    None when there is no table yet. The filter is pushed down to the files' statistics, so the
    read is bounded by the recent windows, not by the table's history."""
    dataset = completeness.dataset()
    if dataset is None:
        return None
    start = pa.scalar(since.astimezone(UTC), type=pa.timestamp("us", tz="UTC"))
    table: pa.Table = dataset.to_table(columns=list(WINDOW_COLUMNS), filter=pc.field("window_start") >= start)
    return table
