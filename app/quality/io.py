"""The check's reads and writes: the audit tables it validates, each read by the engine
``app.routes.check_route`` picks for its size, and its outcomes written to ``validation_results``.

Which rows a check reads is one SQL predicate per table, run by either engine (``app.quality.engines``):
DuckDB over the table's Arrow dataset (delta-rs; the predicate's filters pushed down to its
partitions and row groups) when the rows are few, else Spark over the Delta table. A missing table is
None, which skips its suites.

The ledger and the group commits only grow, so a night validates its window of them (``since``: the
night's reconcile window, which a failed night does not move), with an overlap for rows written
late; findings and partition summaries are read whole and validated by reconcile run; completeness
rows by when they were computed (a final row never is again).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from app.config import AppConfig
from app.contracts.tables import VALIDATION_RESULTS_SCHEMA
from app.contracts.vocabulary import EVENT_CHECKPOINT_COMPLETED, EVENT_CHECKPOINT_SNAPSHOT
from app.errors import UsageError
from app.quality.engines import Relation, column_list, on_driver, run
from app.quality.frames import CHECKPOINT_EVENT_COLUMNS, CheckInputs
from app.quality.outcomes import CheckSummary
from app.routes import DRIVER, check_route
from app.storage.handles import AuditTables, TableHandle

# A night's window starts this much before its reconcile window. A night validates every row
# written before it reads the ledger, whatever its time, so only a row written after the previous
# night read it with a time before that night's start could escape: the ledger's writers append a
# micro-batch's events seconds after their time, and this leaves room for a slow commit.
WINDOW_OVERLAP: Final = timedelta(minutes=2)

# run ids end up in a Delta replaceWhere predicate: keep them to characters that need no quoting.
_RUN_ID: Final = re.compile(r"^[A-Za-z0-9._:-]+$")


# --- which rows are read -------------------------------------------------------------------------

# Each predicate reads every row when its start is null (a check of whole tables).

# Ledger rows from :start on, and those without a time (the not-null checks must see them);
# event_date prunes the partitions.
LEDGER_WINDOW: Final = """
CAST(:start AS TIMESTAMP) IS NULL
OR ((event_date >= CAST(:start_day AS DATE) OR event_date IS NULL)
    AND (event_time >= CAST(:start AS TIMESTAMP) OR event_time IS NULL))
"""

# The ledger's checkpoint snapshots and completions, from :start_day on.
CHECKPOINT_EVENTS: Final = """
checkpoint_id IS NOT NULL AND event_type IN (:snapshot, :completed)
AND (CAST(:start_day AS DATE) IS NULL OR event_date >= CAST(:start_day AS DATE))
"""

# Group commits committed or logged from :start on, and those with neither time.
COMMITS_WINDOW: Final = """
CAST(:start AS TIMESTAMP) IS NULL
OR commit_time >= CAST(:start AS TIMESTAMP)
OR log_time >= CAST(:start AS TIMESTAMP)
OR (commit_time IS NULL AND log_time IS NULL)
"""


# Completeness rows computed from :start on: a final row is never recomputed, so one that became
# final before the window was judged by an earlier night.
COMPLETENESS_WINDOW: Final = """
CAST(:start AS TIMESTAMP) IS NULL OR computed_at >= CAST(:start AS TIMESTAMP)
"""


@dataclass(frozen=True)
class Read:
    """The rows of a table a check reads: ``where`` (SQL over the table's columns, the same text
    for both engines) with its parameters, and ``columns`` (None: all)."""

    where: str = "TRUE"
    params: Mapping[str, Any] = field(default_factory=dict)
    columns: tuple[str, ...] | None = None

    @property
    def select(self) -> str:
        cols = "*" if self.columns is None else column_list(self.columns)
        return f"SELECT {cols} FROM stored WHERE {self.where}"

    @property
    def count(self) -> str:
        return f"SELECT count(*) AS n FROM stored WHERE {self.where}"


def ledger_window(start: datetime | None) -> Read:
    return Read(LEDGER_WINDOW, {"start": start, "start_day": None if start is None else start.date()})


def checkpoint_events(start: datetime | None) -> Read:
    params = {
        "snapshot": EVENT_CHECKPOINT_SNAPSHOT,
        "completed": EVENT_CHECKPOINT_COMPLETED,
        "start_day": None if start is None else start.date(),
    }
    return Read(CHECKPOINT_EVENTS, params, CHECKPOINT_EVENT_COLUMNS)


def commits_window(start: datetime | None) -> Read:
    return Read(COMMITS_WINDOW, {"start": start})


def completeness_window(start: datetime | None) -> Read:
    return Read(COMPLETENESS_WINDOW, {"start": start})


# The partition summaries of the reconcile run a check judges (every frame of them filters by it):
# a watch appends a run's rows every minute, which the check need not read.
SUMMARY_OF_RUN: Final = """
CAST(:run AS STRING) IS NULL OR reconcile_run_id = CAST(:run AS STRING)
"""


def summary_rows_of_run(reconcile_run_id: str | None) -> Read:
    return Read(SUMMARY_OF_RUN, {"run": reconcile_run_id})


def read_for_check(
    table: TableHandle,
    max_rows: int,
    read: Read | None = None,
    route_by: Read | None = None,
) -> Relation | None:
    """The table's rows ``read`` names: Arrow, read by delta-rs through DuckDB, when ``check_route``
    says they are few, else a Spark DataFrame; None when there is no table yet. ``route_by`` counts
    other rows of the table for that choice: the rows a derived frame is made of can be many more
    than the frame's."""
    dataset = table.dataset()
    if dataset is None:
        return None
    wanted = read or Read()
    counted = route_by or wanted
    rows = on_driver(counted.count, {"stored": dataset}, counted.params).column("n")[0].as_py()
    stored = dataset if check_route(rows, max_rows) == DRIVER else table.load()
    return run(wanted.select, {"stored": stored}, wanted.params)


def read_inputs(
    t: AuditTables,
    cfg: AppConfig,
    since: datetime | None,
    max_rows: int,
    reconcile_run_id: str | None = None,
) -> CheckInputs:
    """What a check validates: with ``since``, the ledger and group commits from ``since`` less
    ``WINDOW_OVERLAP``, and the checkpoint events of reconcile's look-back before it; else all.
    The partition summaries of ``reconcile_run_id`` alone when given (the run the check judges).

    The checkpoint events take the window's route: the completion frame has a row per checkpoint
    of the window, however many events the look-back holds (a few narrow columns, which the
    driver aggregates in DuckDB)."""
    start = None if since is None else since - WINDOW_OVERLAP
    look_back = None if start is None else start - timedelta(days=cfg.reconcile.baseline_lookback_days)
    window = ledger_window(start)
    return CheckInputs(
        ledger=read_for_check(t.ledger, max_rows, window),
        checkpoints=read_for_check(
            t.ledger,
            max_rows,
            checkpoint_events(look_back),
            route_by=None if start is None else window,
        ),
        group_commits=read_for_check(t.group_commits, max_rows, commits_window(start)),
        findings=read_for_check(t.findings, max_rows),
        partition_summary=read_for_check(
            t.partition_summary, max_rows, summary_rows_of_run(reconcile_run_id)
        ),
        completeness=read_for_check(t.completeness, max_rows, completeness_window(start)),
        since=start,
    )


# --- what is written -----------------------------------------------------------------------------


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise UsageError(f"run id {run_id!r}: use letters, digits and . _ : - only")
    return run_id


def result_rows(summary: CheckSummary) -> list[tuple[Any, ...]]:
    return [
        (
            summary.run_id,
            e.suite,
            e.table,
            e.expectation,
            json.dumps(e.kwargs, sort_keys=True),
            e.severity,
            e.success,
            json.dumps(e.observed, sort_keys=True),
            summary.evaluated_at,
        )
        for e in summary.outcomes
    ]


def write_results(validation_results: TableHandle, summary: CheckSummary) -> None:
    """Replace this run's rows in one commit, so a re-run of the same run id never doubles them;
    delta-rs commits them from the driver (no Spark job for a few dozen rows)."""
    names = VALIDATION_RESULTS_SCHEMA.fieldNames()
    rows = [dict(zip(names, r, strict=True)) for r in result_rows(summary)]
    validation_results.replace_where(rows, f"run_id = '{check_run_id(summary.run_id)}'")
