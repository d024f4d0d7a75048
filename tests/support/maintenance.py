"""Ledger days for `maintain`: micro-batches written through the job's ledger writer on chosen days,
and the files each day holds."""

from __future__ import annotations

from datetime import UTC, date, datetime

from deltalake import DeltaTable

from app.stream.ledger import LedgerWriter
from tests.support.ledger_data import JOB, day_events

NOW = datetime(2026, 3, 20, 12, 0, tzinfo=UTC)
FILES_PER_DAY = 8  # micro-batches (one file each) of every written day


def write_days(ledger: str, days: list[date], run: str = "run-1") -> int:
    """FILES_PER_DAY micro-batches on each day, through the job's ledger writer; the rows written."""
    writer = LedgerWriter(None, ledger, JOB, run, scope=f"history-{run}")
    writer.ensure()
    rows = 0
    for n, day in enumerate(days):
        for b in range(FILES_PER_DAY):
            events = day_events(day, n * FILES_PER_DAY + b + 1, run)
            writer.write(events, n * FILES_PER_DAY + b)
            rows += len(events)
    return rows


def files_per_day(path: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in DeltaTable(path).get_add_actions(flatten=True).column("partition.event_date").to_pylist():
        counts[p.isoformat()] = counts.get(p.isoformat(), 0) + 1
    return counts
