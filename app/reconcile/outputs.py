"""The audit tables `reconcile` and `forensics` write: findings, restarts, the partition summaries of
runs that never finished, and their run records (audit_runs), from which the next incremental
window starts. The incidents table's reads and writes are `app.incidents.io`'s."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow.compute as pc
from pyspark.sql import SparkSession

from app.config import AppConfig
from app.contracts.findings import StoredFinding
from app.contracts.instants import instant
from app.contracts.tables import AUDIT_RUNS_SCHEMA
from app.contracts.vocabulary import (
    COMMAND_RECONCILE,
    RUN_FAILED,
    RUN_PENDING,
    RUN_STATUSES,
    RUN_SUCCEEDED,
)
from app.reconcile import findings as rc
from app.storage.handles import AuditTables, TableHandle

log = logging.getLogger(__name__)


def merge_findings(findings_table: TableHandle, findings: Sequence[StoredFinding]) -> None:
    """Upsert by finding_id: a re-run updates what it sees again and keeps the first detected_at."""
    findings_table.merge([f.to_row() for f in findings], keep=("detected_at",))


def merge_restarts(restarts: TableHandle, rows: Sequence[Mapping[str, Any]]) -> None:
    """Upsert restarts by (job, run, topic, partition): a re-run replaces what it classified before."""
    restarts.merge(rows)


@dataclass(frozen=True)
class AuditRun:
    """One run of ``reconcile`` or ``forensics``: its id and clock, the window and the jobs it judges."""

    run_id: str
    now: datetime
    since: datetime | None = None  # None: where the last successful run over the same jobs stopped
    until: datetime | None = None  # None: now
    jobs: Sequence[str] = ()  # empty: reconcile.jobs of the config
    sink_override: str | None = None
    status: str = RUN_SUCCEEDED  # what a finished run is recorded as (a nightly: pending)


@dataclass(frozen=True)
class AuditScope:
    """An AuditRun resolved against the config and the previous runs."""

    tables: AuditTables
    jobs: list[str]
    window: rc.AuditWindow
    # The ledger's version every read of the run is of (None: no ledger yet); see CONTRACTS.md
    # section 4, audit_runs.
    ledger_version: int | None = None


@dataclass(frozen=True)
class PreviousRun:
    """Where the last successful run of a command over the same jobs ended, and the ledger's
    version it read (None: recorded before audit_runs had the column)."""

    window_end: datetime
    ledger_version: int | None


def resolve_scope(
    spark: SparkSession, cfg: AppConfig, run: AuditRun, command: str, tables: AuditTables | None = None
) -> AuditScope:
    """The run against the config: ``tables`` those of the caller's run (its context's, resolved
    once with ``--sink`` applied), else the config's with the run's ``--sink``. The ledger's
    version is pinned here; the default window starts where the last run ended, or earlier at a
    row that run could not see (`reach_back`)."""
    if tables is None:
        tables = AuditTables.from_config(cfg, spark, run.sink_override)
    jobs = sorted(set(run.jobs) or set(cfg.reconcile.jobs))
    version = tables.ledger.version() if tables.ledger.exists() else None
    since = run.since
    if since is None:
        previous = last_run(tables.audit_runs, command, jobs)
        since = None if previous is None else reach_back(tables.ledger, previous, version, jobs)
    return AuditScope(tables, jobs, rc.AuditWindow(until=run.until or run.now, since=since), version)


def last_run(audit_runs: TableHandle, command: str, jobs: Sequence[str]) -> PreviousRun | None:
    """The previous successful run of ``command`` over the same jobs (the one that ended last)."""
    columns = ["command", "status", "jobs", "window_end", "ledger_version"]
    runs = audit_runs.read_columns(columns, optional=("ledger_version",)) or []
    done = [
        PreviousRun(instant(r["window_end"]), r["ledger_version"])
        for r in runs
        if r["command"] == command and r["status"] == RUN_SUCCEEDED and r["jobs"] == json.dumps(sorted(jobs))
    ]
    return max(done, key=lambda p: p.window_end, default=None)


def last_window_end(audit_runs: TableHandle, command: str, jobs: Sequence[str]) -> datetime | None:
    """Where the previous successful run of ``command`` over the same jobs stopped."""
    previous = last_run(audit_runs, command, jobs)
    return None if previous is None else previous.window_end


def reach_back(
    ledger: TableHandle, previous: PreviousRun, version: int | None, jobs: Sequence[str]
) -> datetime:
    """Where the next window starts: where ``previous`` ended, or earlier, at the earliest ledger row
    of ``jobs`` dated before that end which the ledger holds at ``version`` and did not hold at the
    version ``previous`` read. Such a row was written after its time (a write that committed late,
    the rows recovered for a dead run): no window examined it yet."""
    end, seen = previous.window_end, previous.ledger_version
    if seen is None or version is None or version <= seen:
        return end
    keep = pc.field("job_name").isin(list(jobs)) if jobs else None
    late = ledger.unseen_rows(seen, version, "event_time", end, keep)
    if late is None:
        log.warning(
            "the ledger's version %d, which the previous run read, cannot be read any more (its log "
            "entries cleaned up, or its files vacuumed): rows written late before %s are not looked for",
            seen,
            end.isoformat(),
        )
        return end
    if late.num_rows == 0:
        return end
    earliest: datetime = instant(pc.min(late.column("event_time")).as_py())
    log.info(
        "%d ledger row(s) dated before %s were written after the previous run read the ledger "
        "(version %d): the window starts at %s, the earliest of them",
        late.num_rows,
        end.isoformat(),
        seen,
        earliest.isoformat(),
    )
    return min(end, earliest)


def latest_reconcile_run(audit_runs: TableHandle) -> str | None:
    """The newest successful reconcile run in ``audit_runs``, or None before the first; read on the
    driver (no Spark job for a few run records). Its findings and partition summaries are the
    latest state the check validates and the dashboard shows."""
    runs = audit_runs.read_columns(["run_id", "command", "status", "finished_at"]) or []
    done = [r for r in runs if r["command"] == COMMAND_RECONCILE and r["status"] == RUN_SUCCEEDED]
    latest = max(done, key=lambda r: (instant(r["finished_at"]), r["run_id"]), default=None)
    return None if latest is None else str(latest["run_id"])


def record_run(
    scope: AuditScope,
    run: AuditRun,
    command: str,
    finished_at: datetime,
    status: str | None = None,
) -> None:
    """One row per run and command, upserted: only a ``succeeded`` row moves the next default
    window; ``failed`` and ``pending`` (a nightly step whose night has not finished) do not."""
    status = status or run.status
    if status not in RUN_STATUSES:
        raise ValueError(f"run status {status!r} is not one of {RUN_STATUSES}")
    row = (
        run.run_id,
        command,
        json.dumps(sorted(scope.jobs)),
        scope.window.since,
        scope.window.until,
        run.now,
        finished_at,
        status,
        scope.ledger_version,
    )
    scope.tables.audit_runs.merge([dict(zip(AUDIT_RUNS_SCHEMA.fieldNames(), row, strict=True))])


def confirm_runs(audit_runs: TableHandle, run_id: str) -> int:
    """Mark the ``pending`` runs recorded under ``run_id`` succeeded (a nightly whose every step
    finished); returns how many."""
    rows = audit_runs.read_columns(AUDIT_RUNS_SCHEMA.fieldNames(), optional=("ledger_version",)) or []
    pending = [
        {**r, "status": RUN_SUCCEEDED} for r in rows if r["run_id"] == run_id and r["status"] == RUN_PENDING
    ]
    audit_runs.merge(pending)
    return len(pending)


def record_failed_run(scope: AuditScope, run: AuditRun, command: str) -> None:
    """Best effort: the run failed, and the storage that failed it may fail this write too."""
    try:
        record_run(scope, run, command, datetime.now(UTC), RUN_FAILED)
    except Exception:  # broad on purpose: the original failure is what the caller reports
        log.warning("could not record the failed %s run %s", command, run.run_id, exc_info=True)


def drop_orphan_summaries(tables: AuditTables) -> None:
    """Remove partition_summary rows of reconcile runs that never finished (killed midway)."""
    summary = tables.partition_summary.read_columns(["reconcile_run_id"])
    if not summary:
        return
    runs = tables.audit_runs.read_columns(["run_id", "command"]) or []
    done = {r["run_id"] for r in runs if r["command"] == COMMAND_RECONCILE}
    orphans = {r["reconcile_run_id"] for r in summary} - done
    if orphans:
        log.info("removing the partition summaries of %d unfinished run(s)", len(orphans))
        tables.partition_summary.delete("reconcile_run_id", orphans)
