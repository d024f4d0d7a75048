"""`maintain` end to end: every table the project writes (config ``tables:``; the sink only with
``maintenance.include_sink``) is, in this order,
1. put back to append-only if it should be and a killed deletion left it lifted (the ledger);
2. rid of its rows older than its retention (`maintenance.plan`: never what an open incident cites;
   partition_summary's by its reconcile runs' finish times, read from audit_runs before any table's
   retention runs, audit_runs' own included);
3. compacted: the ledger's closed days, an unpartitioned table whole, each when it holds more than
   ``compact_min_files`` files;
4. checkpointed (a log checkpoint at its version, then the log entries it makes unnecessary);
5. vacuumed with ``vacuum_retention_hours`` (never below Delta's 7 days: config refuses less).

Each step is one Delta commit or none, so a maintenance killed anywhere leaves every table
readable and the next one does what is left (`storage.maintenance`). It runs on the driver through
delta-rs, beside a streaming job that appends to the ledger and beside a `watch` (or another audit
command) that MERGEs and appends to the audit tables: a commit that loses its race to the other
side's is run again on the newer version, on either side (`storage.maintenance` says why).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from app.config import AppConfig, RetentionConfig
from app.contracts.instants import instant
from app.contracts.vocabulary import INCIDENT_OPEN
from app.maintenance import plan
from app.storage.backend import StorageSettings
from app.storage.handles import ICEBERG, AuditTables, TableHandle
from app.storage.tables import TABLE_NAMES

log = logging.getLogger(__name__)

# The audit commits to an Iceberg sink only a repair's snapshots: expiry and compaction of a table
# other writers commit to (and whose snapshots attribute their batches) stay with whoever runs it.
OWNERS_UPKEEP: Final = "an Iceberg sink: its snapshot expiry and compaction are its owner's"


@dataclass
class TableOutcome:
    """What one table's maintenance did."""

    table: str
    files_before: int = 0
    files_after: int = 0
    rows_deleted: int = 0
    compacted: list[str] = field(default_factory=list)  # partitions ("" for a whole table)
    files_compacted: int = 0  # files rewritten into fewer
    files_vacuumed: int = 0
    append_only_restored: bool = False
    seconds: float = 0.0
    missing: bool = False  # no table yet: nothing to do
    skipped: str | None = None  # why the table was left alone (an Iceberg sink: its owner's upkeep)


@dataclass
class MaintenanceResult:
    now: str
    tables: list[TableOutcome] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def maintained_tables(cfg: AppConfig) -> list[str]:
    """Every table the project writes; the sink too when config says so."""
    return [t for t in TABLE_NAMES if t != "sink" or cfg.maintenance.include_sink]


def read_audit_runs(audit_runs: TableHandle) -> list[dict[str, Any]]:
    """Every audit run's id, command and finish time (UTC)."""
    runs = audit_runs.read_columns(["run_id", "command", "finished_at"]) or []
    return [{k: instant(v) for k, v in r.items()} for r in runs]


def read_protected(tables: AuditTables, cfg: AppConfig, runs: Sequence[Mapping[str, Any]]) -> plan.Protected:
    """What the open incidents and the latest audit runs (of ``runs``, `read_audit_runs`) cite
    (`plan.protected`)."""
    columns = ["status", "finding_ids", "run_ids", "reconcile_run_id", "first_evidence_at"]
    incidents = tables.incidents.read_columns(columns) or []
    open_ones = [{k: instant(v) for k, v in r.items()} for r in incidents if r["status"] == INCIDENT_OPEN]
    latest: dict[str, tuple[datetime, str]] = {}
    for r in runs:
        at = r["finished_at"]
        if r["command"] not in latest or (at, r["run_id"]) > latest[r["command"]]:
            latest[r["command"]] = (at, r["run_id"])
    lookback = timedelta(days=cfg.reconcile.baseline_lookback_days)
    return plan.protected(open_ones, [run for _, run in latest.values()], lookback)


def maintain(
    storage: StorageSettings,
    cfg: AppConfig,
    now: datetime,
    only: Sequence[str] = (),
    tables: AuditTables | None = None,
) -> MaintenanceResult:
    """Maintain every table of `maintained_tables` (or ``only`` those) as of ``now``: ``tables``
    those of the caller's run (a nightly's), else the config's reached with ``storage``."""
    tables = tables or AuditTables.from_config(cfg, storage)
    # Read once, before any retention: audit_runs' own deletes the runs partition_summary's
    # retention dates its rows by.
    runs = read_audit_runs(tables.audit_runs)
    keep = read_protected(tables, cfg, runs)
    result = MaintenanceResult(now.isoformat())
    for name in only or maintained_tables(cfg):
        started = time.monotonic()
        outcome = maintain_table(tables.named(name), cfg, now, keep, runs)
        outcome.seconds = round(time.monotonic() - started, 2)
        result.tables.append(outcome)
        if outcome.missing or outcome.skipped:
            continue
        log.info(
            "maintain %s: files %d -> %d, %d rows past retention deleted, %d files compacted, "
            "%d files vacuumed (%.1fs)",
            name,
            outcome.files_before,
            outcome.files_after,
            outcome.rows_deleted,
            outcome.files_compacted,
            outcome.files_vacuumed,
            outcome.seconds,
        )
    return result


def _count(files: dict[str, int] | None) -> int:
    return sum((files or {}).values())


def maintain_table(
    table: TableHandle,
    cfg: AppConfig,
    now: datetime,
    keep: plan.Protected,
    runs: Sequence[Mapping[str, Any]] = (),
) -> TableOutcome:
    """Maintain one table; ``runs`` are the audit runs (`read_audit_runs`) read before any retention."""
    m, name = cfg.maintenance, table.name
    if table.table_format == ICEBERG:
        log.info("maintain %s: skipped, %s", name, OWNERS_UPKEEP)
        return TableOutcome(name, skipped=OWNERS_UPKEEP)
    files = table.files_by_partition()
    if files is None:
        log.info("maintain %s: no table yet", name)
        return TableOutcome(name, missing=True)
    outcome = TableOutcome(name, files_before=_count(files))
    append_only = table.layout.append_only  # the contract's: the ledger
    if append_only and table.restore_append_only():
        log.warning("maintain %s: delta.appendOnly was lifted (a killed maintenance): set again", name)
        outcome.append_only_restored = True
    if name != "sink":
        outcome.rows_deleted = _apply_retention(table, files, now, keep, m.retention_days, runs)
        if outcome.rows_deleted:
            files = table.files_by_partition() or {}
    column = table.partition_column()
    targets = [] if name == "sink" else plan.compaction_targets(name, column is not None, files, now, m)
    for partition in targets:
        log.info("maintain %s: compacting %s (%d files)", name, partition or "the table", files[partition])
        done = table.compact({column: partition} if column else None)
        outcome.compacted.append(partition)
        outcome.files_compacted += done.files_removed
    log.info("maintain %s: checkpoint", name)
    table.checkpoint()
    log.info("maintain %s: vacuum (retention %dh)", name, m.vacuum_retention_hours)
    outcome.files_vacuumed = table.vacuum(timedelta(hours=m.vacuum_retention_hours))
    outcome.files_after = _count(table.files_by_partition())
    return outcome


def _apply_retention(
    table: TableHandle,
    files: dict[str, int],
    now: datetime,
    keep: plan.Protected,
    days: RetentionConfig,
    runs: Sequence[Mapping[str, Any]],
) -> int:
    name = table.name
    limit = plan.cutoff(name, int(getattr(days, name, 0)), now, keep)
    if limit is None:
        return 0
    if name in plan.RUN_KEYED:
        return _delete_expired_runs(table, plan.RUN_KEYED[name], limit, keep, runs)
    if name == "ledger" and not plan.older_partitions(list(files), limit):
        return 0  # nothing that old: no commit (the property changes would cost the appender a retry)
    if name != "ledger" and not _has_rows_before(table, plan.TIME_COLUMNS[name], limit):
        return 0
    predicate = plan.retention_predicate(name, limit, keep)
    log.info("maintain %s: deleting rows before %s", name, limit.isoformat())
    return table.delete_rows(predicate, append_only=table.layout.append_only)


def _delete_expired_runs(
    table: TableHandle,
    column: str,
    limit: datetime,
    keep: plan.Protected,
    runs: Sequence[Mapping[str, Any]],
) -> int:
    """Delete the rows of the runs (``column``) that finished before ``limit`` (`plan.expired_runs`),
    a chunk of run ids per commit; none when no such run has rows. Reads ``column`` alone."""
    held = table.read_columns([column]) or []
    expired = plan.expired_runs(runs, {str(r[column]) for r in held}, limit, keep)
    if not expired:
        return 0
    log.info(
        "maintain %s: deleting the rows of %d run(s) finished before %s",
        table.name,
        len(expired),
        limit.isoformat(),
    )
    return sum(table.delete(column, chunk) for chunk in plan.chunks(expired))


def _has_rows_before(table: TableHandle, column: str, limit: datetime) -> bool:
    """Whether any row's ``column`` is before ``limit``: read from that column alone, so that a table
    with nothing to delete gets no commit."""
    import pyarrow.compute as pc

    old = table.rows(pc.field(column) < limit, prune=pc.field(column) < limit, columns=[column])
    return old is not None and old.num_rows > 0


def summary_text(result: MaintenanceResult) -> str:
    lines = [f"maintenance as of {result.now}"]
    for t in result.tables:
        if t.missing:
            lines.append(f"  {t.table:<20} no table yet")
            continue
        if t.skipped:
            lines.append(f"  {t.table:<20} skipped: {t.skipped}")
            continue
        lines.append(
            f"  {t.table:<20} files {t.files_before:>6,d} -> {t.files_after:<6,d} "
            f"deleted rows {t.rows_deleted:,d}, compacted {t.files_compacted:,d} files"
            f" in {len(t.compacted)} partition(s), vacuumed {t.files_vacuumed:,d} files  ({t.seconds:.1f}s)"
        )
    return "\n".join(lines)
