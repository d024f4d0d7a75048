"""A run's bookkeeping in Delta: the run markers its data commits carry, the seq of the next run, and
the positions (ingest_positions) the run stores last. Whichever route wrote a run's data, its markers
and positions are read and written here, so a run that died on one route is finished by the other.

Atomicity of data and positions. Delta has no multi-table transactions, so a run is made idempotent and
recoverable instead. Every run has a sequence number (`IngestPlan.seq`, increasing from run to run).
group_commits, group_events and decode_errors are plain appends under Delta's idempotent transaction ids
(`txnAppId` = INGEST_TXN_APP_ID, `txnVersion` = seq, on the Spark route; delta-rs writes the same `txn`
action on the driver route): an append whose version the table has already committed is skipped, so
writing a run's data twice never counts it twice. Each data commit records the run's plan (run id,
seq, ranges) in its `userMetadata`. ingest_positions is written last, in one Delta commit for all
partitions, which records the seq it completes (app/offsets_topic/run.py finishes a pending run).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

from app.offsets_topic.plan import Clock, IngestPlan
from app.offsets_topic.ranges import merge_positions, positions_rows
from app.offsets_topic.tables import DATA_TABLES, INGEST_POSITIONS
from app.storage.handles import AuditTables, TableHandle

_HISTORY_DEPTH = 25  # recent commits searched for the last run's marker; ingest writes one per run


def read_positions(positions: TableHandle) -> dict[int, int]:
    rows = positions.read_columns(["log_partition", "next_offset"]) or []
    return {int(r["log_partition"]): int(r["next_offset"]) for r in rows}


def commit_user_metadata(table: TableHandle) -> list[tuple[int, str | None]]:
    """(version, userMetadata) of a table's recent commits; none when there is no table.

    Every run of `ingest-offsets` reads these several times, also when it has nothing to read:
    delta-rs reads them from the log in milliseconds, where Spark runs a job each time.
    """
    return table.commit_metadata(_HISTORY_DEPTH)


def run_markers(table: TableHandle) -> list[dict[str, Any]]:
    """The run markers ({"ingest_seq", "ingest_run_id", ...}) of a table's recent commits, newest first."""
    out = []
    for _, metadata in sorted(commit_user_metadata(table), key=lambda c: -c[0]):
        try:
            marker = json.loads(metadata or "")
        except ValueError:
            continue  # a commit by someone else (OPTIMIZE, a repair, snapshot mode)
        if isinstance(marker, dict) and "ingest_seq" in marker:
            out.append(marker)
    return out


def last_seq(markers: Sequence[dict[str, Any]]) -> int:
    return max((int(m["ingest_seq"]) for m in markers), default=-1)


def next_seq(store: AuditTables, clock: Clock) -> int:
    """A seq above every one committed: the clock, or one more than the last seq if the clock lags."""
    seen = max(last_seq(run_markers(store.named(t))) for t in (*DATA_TABLES, INGEST_POSITIONS))
    return max(clock(), seen + 1)


def store_positions(store: AuditTables, plan: IngestPlan, clock: Clock) -> dict[int, int]:
    """The last step of a run: one Delta commit moving every read partition to the end of its range
    (none when nothing was read)."""
    positions = merge_positions(plan.stored, plan.ranges)
    moved = [r.partition for r in plan.to_read]
    rows = [
        {"log_partition": p, "next_offset": n, "ingest_run_id": rid, "updated_at": _utc(ms)}
        for p, n, rid, ms in positions_rows(positions, moved, plan.run_id, clock())
    ]
    # A few rows on the driver: delta-rs commits them without a Spark job. The marker is the
    # commit's userMetadata, read back by `run_markers` like the data tables' markers.
    store.ingest_positions.merge(rows, user_metadata=plan.marker())
    return positions


def _utc(epoch_ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.UTC)
