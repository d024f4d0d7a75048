"""Tiny builders for ledger, group_commits and sink rows, so each test states its data next to its
assertions; as Arrow tables for the driver-side audit (no JVM). Ledger rows go through LedgerEvent,
so offsets are normalized exactly as the streaming job's committer writes them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from app.contracts.offsets import EventSource, LedgerEvent
from app.contracts.tables import FINDINGS_SCHEMA, GROUP_COMMITS_SCHEMA, LEDGER_SCHEMA

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TOPIC = "orders"
GROUP = "grp"
JOB = "job-a"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ev(
    event_type: str,
    t: float,
    *,
    run: str = "run-1",
    cp: int | None = None,
    offsets: Mapping[int, int | None] | None = None,
    detail: Mapping[str, object] | None = None,
    engine: str = "spark",
    job: str = JOB,
    group: str = GROUP,
) -> list[LedgerEvent]:
    """One event, per partition when ``offsets`` ({partition: raw offset}) is given."""
    common: dict[str, Any] = dict(
        job_name=job,
        run_id=run,
        engine=engine,
        checkpoint_id=cp,
        event_type=event_type,
        event_time=at(t),
        group_id=group,
    )
    if offsets is None:
        return [LedgerEvent(**common, detail=detail or {})]
    writer = EventSource(job, run, engine, group)
    return writer.partition_events(
        event_type, at(t), cp, {(TOPIC, p): o for p, o in offsets.items()}, detail or {}
    )


def checkpoint(
    cp: int, t: float, offsets: Mapping[int, int], *, run: str = "run-1", commit: bool = True, **kw: Any
) -> list[LedgerEvent]:
    """Snapshot at t, completion at t+1, and (by default) commit requested at t+1, acked at t+2."""
    events = ev("CHECKPOINT_SNAPSHOT", t, run=run, cp=cp, offsets=offsets, **kw)
    events += ev("CHECKPOINT_COMPLETED", t + 1, run=run, cp=cp, offsets=offsets, **kw)
    if commit:
        events += ev("COMMIT_REQUESTED", t + 1, run=run, cp=cp, offsets=offsets, detail={"attempt": cp}, **kw)
        events += ev("COMMIT_SUCCEEDED", t + 2, run=run, cp=cp, offsets=offsets, detail={"attempt": cp}, **kw)
    return events


_log_offset = iter(range(1_000_000))


def gc(
    t: float | None,
    partition: int,
    offset: int | None,
    *,
    kind: str = "commit",
    group: str = GROUP,
    topic: str = TOPIC,
) -> tuple[Any, ...]:
    """A group_commits row; log offsets increase in creation order, like the real log."""
    when = None if t is None else at(t)
    log = None if kind == "snapshot" else next(_log_offset)
    return (
        group,
        topic,
        partition,
        offset,
        None,
        "",
        when,
        None,
        kind,
        3,
        False,
        None if log is None else 0,
        log,
        when,
        "ingest-1",
    )


def sink_rows(
    partition: int, offsets: Iterable[int], *, run: str = "run-1", cp: int = 1, topic: str = TOPIC
) -> list[tuple[Any, ...]]:
    return [(topic, partition, o, None, cp, run, None, None) for o in offsets]


def ledger_table(*groups: Iterable[LedgerEvent]) -> pa.Table:
    rows = [e.to_row() for g in groups for e in g]
    return pa.Table.from_pylist(rows, schema=to_arrow_schema(LEDGER_SCHEMA))


def commits_table(*rows: tuple[Any, ...]) -> pa.Table:
    names = GROUP_COMMITS_SCHEMA.fieldNames()
    dicts = [dict(zip(names, r, strict=True)) for r in rows]
    return pa.Table.from_pylist(dicts, schema=to_arrow_schema(GROUP_COMMITS_SCHEMA))


def finding_row(finding_id: str, run: str, detected_at: datetime, **kw: Any) -> dict[str, Any]:
    """A findings-contract row (a critical open GAP of orders/0 unless ``kw`` says otherwise)."""
    row: dict[str, Any] = {f.name: None for f in FINDINGS_SCHEMA.fields}
    row.update(
        finding_id=finding_id,
        reconcile_run_id=run,
        detected_at=detected_at,
        finding_type="GAP",
        severity="critical",
        status="open",
        topic="orders",
        partition=0,
        offset_start=10,
        record_count=5,
        evidence="{}",
    )
    row.update(kw)
    return row
