"""Tiny builders for ledger, group_commits and sink frames, so each test states its data next to
its assertions. Ledger rows go through LedgerEvent, so offsets are normalized exactly as the
streaming job's committer writes them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from app.contracts.offsets import LedgerEvent
from app.contracts.tables import GROUP_COMMITS_SCHEMA, LEDGER_SCHEMA, SINK_SCHEMA

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
    return LedgerEvent.for_partitions(
        **common, offsets={(TOPIC, p): o for p, o in offsets.items()}, detail=detail or {}
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


def ledger_df(spark: SparkSession, *groups: Iterable[LedgerEvent]) -> DataFrame:
    rows = [e.to_row() for g in groups for e in g]
    return spark.createDataFrame(rows, LEDGER_SCHEMA)


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


def commits_df(spark: SparkSession, *rows: tuple[Any, ...]) -> DataFrame:
    return spark.createDataFrame(list(rows), GROUP_COMMITS_SCHEMA)


def sink_rows(
    partition: int, offsets: Iterable[int], *, run: str = "run-1", cp: int = 1, topic: str = TOPIC
) -> list[tuple[Any, ...]]:
    return [(topic, partition, o, None, cp, run, None, None) for o in offsets]


def sink_df(spark: SparkSession, *row_groups: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame([r for g in row_groups for r in g], SINK_SCHEMA)


def rows_of(df: DataFrame, *cols: str) -> set[tuple[Any, ...]]:
    return {tuple(r[c] for c in cols) for r in df.collect()}
