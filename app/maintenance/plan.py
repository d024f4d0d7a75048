"""What a maintenance does to each table, decided from the config, the clock and the open incidents:
pure functions, no I/O (`maintenance.run` reads the inputs and carries the plan out).

Retention rule (README, "Maintenance and retention"): a table keeps the rows of its last
`maintenance.retention_days.<table>` days, by its own time column, except what an open incident
cites:
- its findings (their ids), its runs' restarts (their run ids) and the reconcile runs that found it
  (audit_runs), whatever their age; an open incident itself is never deleted;
- the raw evidence its findings were computed from: the ledger, group commits, group events and
  decode errors are kept from the oldest open incident's first evidence, less the reconcile's
  baseline lookback (where a night looks for the previous checkpoint and commit), for every job:
  re-running a reconciliation over an open incident's span sees the same inputs.
The latest run of each command (audit_runs) and its findings are kept too: the next window starts
where that run ended, and the dashboard shows its findings.

partition_summary has no time column: a reconcile run appends its rows (one per job, topic and
partition; a watch does so every minute) and only the latest run's are read. Its rows go with
their run, once audit_runs says the run finished before the cutoff (`expired_runs`): never a
protected run's (the latest reconcile, one that found an open incident), never a run audit_runs
does not know yet (one still writing; a killed one's rows are `reconcile.outputs`' to drop).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final

from app.config import MaintenanceConfig
from app.contracts.vocabulary import INCIDENT_OPEN

# The column each table's retention reads its rows' age from. The tables not named here nor in
# RUN_KEYED keep every row: ingest_positions (one row per __consumer_offsets partition); the sink
# is the user's.
TIME_COLUMNS: Final = {
    "ledger": "event_date",
    "group_commits": "log_time",
    "group_events": "log_time",
    "decode_errors": "log_time",
    "findings": "detected_at",
    "incidents": "last_evidence_at",
    "restarts": "started_at",
    "audit_runs": "finished_at",
    "validation_results": "evaluated_at",
    "completeness": "window_end",
}
# The tables whose rows have no time of their own: they age with the audit run that wrote them
# (audit_runs' finished_at), named by this column.
RUN_KEYED: Final = {"partition_summary": "reconcile_run_id"}
# Run ids per deletion of a run-keyed table's rows: a watch's 1,440 runs a day would make one
# predicate of tens of thousands of literals; each chunk is one Delta commit.
DELETE_CHUNK: Final = 500
# The tables ingest appends one file per run, in time order. Their window reads skip the files
# before the window by their min/max statistics (`reconcile.inputs`); compacting one whole would
# merge old and new records into files every window read opens, and rewrite its history each time.
INGEST_TABLES: Final = frozenset({"group_commits", "group_events", "decode_errors"})
# The raw inputs of a reconciliation: kept over the span of every open incident.
EVIDENCE_TABLES: Final = frozenset({"ledger", "group_commits", "group_events", "decode_errors"})


@dataclass(frozen=True)
class Protected:
    """What an open incident (or the latest runs) cites, so that retention keeps it."""

    finding_ids: frozenset[str] = frozenset()
    run_ids: frozenset[str] = frozenset()  # the audited job's runs (restarts)
    audit_run_ids: frozenset[str] = frozenset()  # reconcile/forensics runs (audit_runs, findings)
    evidence_from: datetime | None = None  # raw evidence is kept from here on; None: no open incident


def protected(
    open_incidents: Iterable[Mapping[str, object]],
    latest_runs: Iterable[str],
    lookback: timedelta,
) -> Protected:
    """The rows open incidents (rows of the incidents table with status open) and the latest audit
    runs cite; raw evidence from the oldest first evidence less ``lookback``."""
    findings: set[str] = set()
    runs: set[str] = set()
    audits = set(latest_runs)
    starts: list[datetime] = []
    for incident in open_incidents:
        findings.update(_strings(incident.get("finding_ids")))
        runs.update(_strings(incident.get("run_ids")))
        audits.update(_strings([incident.get("reconcile_run_id")]))
        first = incident.get("first_evidence_at")
        if isinstance(first, datetime):
            starts.append(first)
    earliest = min(starts, default=None)
    return Protected(
        frozenset(findings),
        frozenset(runs),
        frozenset(audits),
        None if earliest is None else earliest - lookback,
    )


def _strings(values: object) -> list[str]:
    if not isinstance(values, list | tuple):
        return []
    return [str(v) for v in values if v is not None]


def midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def cutoff(table: str, days: int, now: datetime, keep: Protected) -> datetime | None:
    """Rows of ``table`` older than this go (None: keep every row): ``days`` whole days before
    today's midnight, moved back to where the evidence of open incidents starts."""
    if days <= 0 or (table not in TIME_COLUMNS and table not in RUN_KEYED):
        return None
    limit = midnight(now.astimezone(UTC).date()) - timedelta(days=days)
    if table in EVIDENCE_TABLES and keep.evidence_from is not None:
        limit = min(limit, midnight(keep.evidence_from.astimezone(UTC).date()))
    return limit


def expired_runs(
    runs: Iterable[Mapping[str, object]], present: Iterable[str], limit: datetime, keep: Protected
) -> list[str]:
    """The run ids among ``present`` (those a run-keyed table holds) whose rows retention deletes at
    ``limit``, sorted: runs that audit_runs (``runs``: rows with run_id and finished_at) says
    finished before ``limit``, by their last row (a nightly records each command under one run id),
    less the protected ones. A run audit_runs does not know is kept: it may still be writing."""
    finished: dict[str, datetime] = {}
    for r in runs:
        run, at = r.get("run_id"), r.get("finished_at")
        if run is None or not isinstance(at, datetime):
            continue
        finished[str(run)] = max(at, finished.get(str(run), at))
    return sorted(
        run
        for run in set(present)
        if run in finished and finished[run] < limit and run not in keep.audit_run_ids
    )


def chunks(values: Sequence[str], size: int = DELETE_CHUNK) -> list[list[str]]:
    """``values`` in consecutive lists of at most ``size``."""
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, not {size}")
    return [list(values[i : i + size]) for i in range(0, len(values), size)]


def _quoted(values: Iterable[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in sorted(values))


def retention_predicate(table: str, limit: datetime, keep: Protected) -> str:
    """The SQL predicate (delta-rs) of the rows of ``table`` that retention deletes at ``limit``."""
    column = TIME_COLUMNS[table]
    if table == "ledger":  # a date partition: whole files go, nothing is rewritten
        return f"\"{column}\" < '{limit.date().isoformat()}'"
    clauses = [f"\"{column}\" < '{limit.isoformat()}'"]
    exempt: dict[str, frozenset[str]] = {}
    if table == "findings":
        exempt = {"finding_id": keep.finding_ids, "reconcile_run_id": keep.audit_run_ids}
    elif table == "incidents":
        clauses.append(f"\"status\" <> '{INCIDENT_OPEN}'")
    elif table == "restarts":
        exempt = {"run_id": keep.run_ids}
    elif table == "audit_runs":
        exempt = {"run_id": keep.audit_run_ids}
    clauses += [f'"{c}" NOT IN ({_quoted(v)})' for c, v in exempt.items() if v]
    return " AND ".join(clauses)


def closed_partitions(files: Mapping[str, int], now: datetime, cfg: MaintenanceConfig) -> list[str]:
    """The ledger's closed days worth compacting, oldest first: older than today less
    ``closed_after_days`` (no running job appends to them) and holding more than
    ``compact_min_files`` files."""
    last_open = now.astimezone(UTC).date() - timedelta(days=cfg.closed_after_days)
    closed = [
        d for d, n in files.items() if d and date.fromisoformat(d) < last_open and n > cfg.compact_min_files
    ]
    return sorted(closed)


def compaction_targets(
    table: str, partitioned: bool, files: Mapping[str, int], now: datetime, cfg: MaintenanceConfig
) -> list[str]:
    """The partitions of ``table`` to compact ("" for the whole of an unpartitioned table): the
    ledger's closed days; a small unpartitioned table whole once it holds more than
    ``compact_min_files`` files; never the tables ingest appends in time order (`INGEST_TABLES`)."""
    if table in INGEST_TABLES:
        return []
    if partitioned:
        return closed_partitions(files, now, cfg)
    return [""] if files.get("", 0) > cfg.compact_min_files else []


def older_partitions(files: Sequence[str], limit: datetime) -> list[str]:
    """The date partitions a ledger retention at ``limit`` removes."""
    return sorted(d for d in files if d and date.fromisoformat(d) < limit.date())
