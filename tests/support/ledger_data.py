"""Tiny builders for ledger, group_commits and sink rows, so each test states its data next to its
assertions; as Arrow tables for the driver-side audit (no JVM). Ledger rows go through LedgerEvent,
so offsets are normalized exactly as the streaming job's committer writes them.

`write_table` stores such rows as a fixture Delta table with delta-rs, the way the app writes its
own audit tables (`storage.delta_rows`: the contract's schema, nullability and layout), in
milliseconds and without a Spark job; Spark still reads them as its own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from app.contracts.offsets import EventSource, LedgerEvent
from app.contracts.tables import (
    COMPLETENESS_SCHEMA,
    FINDINGS_SCHEMA,
    GROUP_COMMITS_SCHEMA,
    INCIDENTS_SCHEMA,
    INGEST_POSITIONS_SCHEMA,
    LEDGER_SCHEMA,
    PARTITION_SUMMARY_SCHEMA,
    RESTARTS_SCHEMA,
    SINK_SCHEMA,
)
from app.contracts.vocabulary import ENGINE_FLINK_LEGACY, EVENT_COMMIT_SUCCEEDED
from app.kafka.commit_outcome import CommitResult
from app.storage import delta_rows
from app.stream.committer import OffsetCommitter

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


# When the job of ``covered_skips_story`` stops.
COVERED_SKIPS_STOP = 20


def covered_skips_story(engine: str) -> tuple[list[LedgerEvent], list[tuple[Any, ...]]]:
    """Ledger events as the committer writes them in ``engine``'s dialect, and the group commits it
    made: checkpoint 2's request is superseded in flight by 3's, checkpoint 4 is evicted from the
    pending ones by 5's snapshot; 1, 3 and 5 are committed (10, 30, 50), so 3 covers 2 and 5
    covers 4. The run starts at 0 s and stops at ``COVERED_SKIPS_STOP``."""

    def raw(offset: int) -> int:
        # Flink's legacy consumer records the last processed offset: one less than the next to read.
        return offset - 1 if engine == ENGINE_FLINK_LEGACY else offset

    ticks = iter(range(1, COVERED_SKIPS_STOP))
    committer = OffsetCommitter(
        job_name=JOB,
        run_id="run-1",
        engine=engine,
        group_id=GROUP,
        commit_fn=CommitResult.ok,
        clock=lambda: at(next(ticks)),
        max_pending=1,
        autostart=False,
    )
    tp = (TOPIC, 0)
    committer.snapshot(1, {tp: raw(10)})
    committer.notify_checkpoint_complete(1)
    committer.run_once()
    committer.snapshot(2, {tp: raw(20)})
    committer.notify_checkpoint_complete(2)  # waits in the slot ...
    committer.snapshot(3, {tp: raw(30)})
    committer.notify_checkpoint_complete(3)  # ... and 3 takes its place: superseded_in_flight
    committer.run_once()
    committer.snapshot(4, {tp: raw(40)})
    committer.snapshot(5, {tp: raw(50)})  # one pending at most: 4 is evicted
    committer.notify_checkpoint_complete(4)
    committer.notify_checkpoint_complete(5)
    committer.run_once()
    events = committer.drain()
    acked = [e for e in events if e.event_type == EVENT_COMMIT_SUCCEEDED]
    # The group's log holds what the broker acknowledged, normalized in both dialects.
    commits = [gc((e.event_time - T0).total_seconds(), 0, e.offset) for e in acked]
    started = ev("RUN_STARTED", 0, engine=engine)
    return [*started, *events, *ev("RUN_STOPPED", COVERED_SKIPS_STOP, engine=engine)], commits


def sink_rows(
    partition: int, offsets: Iterable[int], *, run: str = "run-1", cp: int = 1, topic: str = TOPIC
) -> list[tuple[Any, ...]]:
    return [(topic, partition, o, None, cp, run, None, None) for o in offsets]


def ledger_table(*groups: Iterable[LedgerEvent]) -> pa.Table:
    rows = [e.to_row() for g in groups for e in g]
    return pa.Table.from_pylist(rows, schema=to_arrow_schema(LEDGER_SCHEMA))


def with_topic(ledger: pa.Table, topic: str) -> pa.Table:
    """The ledger's per-partition events moved to ``topic`` (events of the whole run keep none)."""
    i = ledger.schema.get_field_index("topic")
    topics = pc.if_else(pc.is_null(ledger["partition"]), pa.scalar(None, pa.string()), pa.scalar(topic))
    return ledger.set_column(i, ledger.schema.field(i), topics)


def contract_table(schema: StructType, rows: Iterable[Mapping[str, Any] | Sequence[Any]]) -> pa.Table:
    """``rows`` (dicts, or tuples in the contract's column order) as Arrow in the contract's schema."""
    names = schema.fieldNames()
    dicts = [r if isinstance(r, Mapping) else dict(zip(names, r, strict=True)) for r in rows]
    return pa.Table.from_pylist(dicts, schema=to_arrow_schema(schema))


def commits_table(*rows: tuple[Any, ...]) -> pa.Table:
    return contract_table(GROUP_COMMITS_SCHEMA, rows)


def sink_table(*row_groups: list[tuple[Any, ...]]) -> pa.Table:
    return contract_table(SINK_SCHEMA, [r for g in row_groups for r in g])


# The contract of each table a test writes by name (`storage.tables.Tables.named`).
CONTRACTS: Final[Mapping[str, StructType]] = {
    "ledger": LEDGER_SCHEMA,
    "group_commits": GROUP_COMMITS_SCHEMA,
    "sink": SINK_SCHEMA,
    "ingest_positions": INGEST_POSITIONS_SCHEMA,
    "findings": FINDINGS_SCHEMA,
    "partition_summary": PARTITION_SUMMARY_SCHEMA,
    "restarts": RESTARTS_SCHEMA,
    "completeness": COMPLETENESS_SCHEMA,
}


def write_table(path: str, schema: StructType, rows: pa.Table | Sequence[Mapping[str, Any]]) -> None:
    """Append ``rows`` to the Delta table at ``path`` with delta-rs, creating it as the app creates its
    tables (`delta_rows.append_rows`): the contract's schema and nullability, and its layout (the
    ledger partitioned by event_date and append-only)."""
    dicts = rows.to_pylist() if isinstance(rows, pa.Table) else rows
    delta_rows.append_rows(None, path, schema, dicts)


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


def day_events(day: date, cp: int, run: str = "run-1") -> list[LedgerEvent]:
    """One micro-batch's events (snapshot, completion, commit, ack of 2 partitions) on ``day``."""
    seconds = (datetime(day.year, day.month, day.day, 10, tzinfo=UTC) - T0).total_seconds() + cp
    return checkpoint(cp, seconds, {0: 10 * cp, 1: 10 * cp}, run=run)


def incident_row(
    incident_id: str, status: str, first: datetime, last: datetime, findings: list[str]
) -> dict[str, Any]:
    """An incidents-contract row (a critical restart of run-1, found by rec-1) citing ``findings``."""
    row: dict[str, Any] = {f.name: None for f in INCIDENTS_SCHEMA.fields}
    row.update(
        incident_id=incident_id,
        kind="restart",
        severity="critical",
        status=status,
        job_name=JOB,
        run_ids=["run-1"],
        first_evidence_at=first,
        last_evidence_at=last,
        finding_ids=findings,
        reconcile_run_id="rec-1",
    )
    return row
