"""Keeping a Delta table small, through delta-rs on the driver: its files per partition, compaction
of one partition (or of an unpartitioned table), log checkpoints, VACUUM and deletion of old rows.

Every operation here is one Delta commit (or none) that a concurrent appender survives:
- compaction is delta-rs's OPTIMIZE: its remove and add actions carry dataChange=false, it rewrites
  only the partition it is given, and an append to another partition (or any append, for delta-rs:
  appends read nothing) commits on top of it without a conflict;
- a checkpoint is not a commit at all: a Parquet summary of the log up to a version, written next
  to it, which readers start from instead of replaying every JSON entry; ``cleanup_metadata`` then
  drops the JSON entries older than both the table's log retention (delta.logRetentionDuration, 30
  days by default) and the checkpoint;
- VACUUM deletes only files that no version inside the retention references: the caller's
  retention, never below Delta's safe minimum (``enforce_retention_duration`` refuses less);
- a deletion of old rows removes files (dataChange=true). An append-only table (the ledger) refuses
  that, so its delta.appendOnly is lifted for the one deletion and set again right after; a kill in
  between leaves it lifted, and ``restore_append_only`` (the first thing every maintenance does)
  sets it again. Both the property changes and the deletion make a concurrent delta-rs append fail
  its commit once; `delta_rows`' appends retry such a conflict (their transaction id keeps a retry
  from writing twice).

Beside a writer that MERGEs (a `watch` cycle upserting findings, incidents, completeness and
alert_state every minute) the race goes both ways. A compaction or deletion whose files a MERGE
rewrote meanwhile fails its commit ("a concurrent transaction deleted data this operation read"),
and so does a MERGE under which a compaction or deletion committed ("a concurrent transactions added
new data"); delta-rs raises CommitFailedError for both, OPTIMIZE included. Each side runs its step
again from a fresh load of the table (`delta_rows.retrying_conflicts`, CONFLICT_ATTEMPTS in all):
the compaction plans again over the newer files, the deletion and the MERGE match again; all are
idempotent, and a failed commit wrote nothing. Retrying, rather than skipping the table's step for
the night, keeps the night green and loses nothing; a step that still loses after every attempt
fails the maintenance with the table named, as any storage error does, and the next run does it.
A checkpoint or a VACUUM conflicts with neither side.

A SIGKILL at any point leaves a readable table: a Delta commit is one put-if-absent of its log
entry, so a killed compaction leaves only unreferenced files (removed by a later VACUUM), a killed
checkpoint a checkpoint file that ``_last_checkpoint`` does not name yet.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from app.errors import InfrastructureError
from app.storage import backend, delta_rows

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

APPEND_ONLY: Final = "delta.appendOnly"


@dataclass(frozen=True)
class Compaction:
    files_removed: int
    files_added: int


def _table(storage: backend.StorageSettings, path: str) -> tuple[backend.Location, DeltaTable]:
    """The table at ``path`` and where it is, or an InfrastructureError when there is none."""
    where = backend.location(storage, path)
    table = backend.open_table(where)
    if table is None:
        raise InfrastructureError(f"no Delta table at {path}")
    return where, table


def files_by_partition(storage: backend.StorageSettings, path: str) -> dict[str, int] | None:
    """How many live data files each partition holds, keyed by the partition's value as text (one
    key, "", for an unpartitioned table); None when there is no table. Read from the log alone."""
    where = backend.location(storage, path)
    table = backend.open_table(where)
    if table is None:
        return None
    with backend.storage_errors(where, "list the files of"):
        columns = table.metadata().partition_columns
        actions = table.get_add_actions(flatten=True)
    if not columns:
        return {"": actions.num_rows}
    (column,) = columns  # the ledger's event_date: the one partitioned table the project writes
    counts: dict[str, int] = {}
    for value in actions.column(f"partition.{column}").to_pylist():
        key = "" if value is None else (value.isoformat() if hasattr(value, "isoformat") else str(value))
        counts[key] = counts.get(key, 0) + 1
    return counts


def partition_column(storage: backend.StorageSettings, path: str) -> str | None:
    """The table's one partition column, or None when it has none."""
    where, table = _table(storage, path)
    with backend.storage_errors(where, "read the metadata of"):
        columns = list(table.metadata().partition_columns)
    return columns[0] if columns else None


def compact(
    storage: backend.StorageSettings, path: str, partition: Mapping[str, str] | None = None
) -> Compaction:
    """Rewrite the small files of ``partition`` (column -> value; the whole table when None) into
    few large ones, in one dataChange=false commit (no commit when nothing is worth rewriting)."""
    filters = None if not partition else [(k, "=", v) for k, v in partition.items()]

    def compact_once() -> Compaction:
        where, table = _table(storage, path)
        with backend.storage_errors(where, "compact"):
            metrics = table.optimize.compact(partition_filters=filters)
        return Compaction(int(metrics.get("numFilesRemoved", 0)), int(metrics.get("numFilesAdded", 0)))

    return delta_rows.retrying_conflicts("compact", path, compact_once)


def checkpoint(storage: backend.StorageSettings, path: str) -> None:
    """A log checkpoint at the table's current version, then the log entries it makes unnecessary
    and the table's log retention allows to drop."""
    where, table = _table(storage, path)
    with backend.storage_errors(where, "checkpoint"):
        table.create_checkpoint()
        table.cleanup_metadata()


def vacuum(storage: backend.StorageSettings, path: str, retention: timedelta) -> int:
    """Delete the files no version of the last ``retention`` references; how many were deleted.
    delta-rs refuses a retention below the table's delta.deletedFileRetentionDuration (7 days)."""
    where, table = _table(storage, path)
    hours = int(retention.total_seconds() // 3600)
    with backend.storage_errors(where, "vacuum"):
        deleted = table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=True)
    return len(deleted)


def is_append_only(storage: backend.StorageSettings, path: str) -> bool:
    where, table = _table(storage, path)
    with backend.storage_errors(where, "read the properties of"):
        return str(table.metadata().configuration.get(APPEND_ONLY, "false")).lower() == "true"


def restore_append_only(storage: backend.StorageSettings, path: str) -> bool:
    """Set delta.appendOnly again on a table whose contract says append-only, where a deletion that
    was killed midway left it lifted; True when it had to."""
    if is_append_only(storage, path):
        return False
    _set_append_only(storage, path, True)
    return True


def _set_append_only(storage: backend.StorageSettings, path: str, value: bool) -> None:
    def set_once() -> None:
        where, table = _table(storage, path)
        with backend.storage_errors(where, "set the properties of"):
            table.alter.set_table_properties(
                {APPEND_ONLY: "true" if value else "false"}, raise_if_not_exists=False
            )

    delta_rows.retrying_conflicts("set the properties of", path, set_once)


def delete_rows(storage: backend.StorageSettings, path: str, predicate: str, append_only: bool) -> int:
    """Delete the rows matching the SQL ``predicate`` in one commit; how many. On an append-only
    table (``append_only``) the property is lifted for the deletion alone (the module's docstring)."""
    if append_only:
        _set_append_only(storage, path, False)
        log.info("%s: delta.appendOnly lifted for the deletion", path)

    def delete_once() -> dict[str, Any]:
        where, table = _table(storage, path)
        with backend.storage_errors(where, "delete old rows of"):
            return table.delete(predicate)

    try:
        metrics = delta_rows.retrying_conflicts("delete old rows of", path, delete_once)
    finally:
        if append_only:
            _set_append_only(storage, path, True)
    return int(metrics.get("num_deleted_rows", 0))
