"""A Delta table's transaction log, commit by commit: which streaming batch each commit wrote.

Spark's Delta streaming sink writes a ``txn`` action with every commit (app id = the query's id,
version = the batch id), and so does a ``foreachBatch`` that writes with ``txnAppId``/``txnVersion``
(or the session's ``spark.databricks.delta.write.txnAppId``/``txnVersion`` for a MERGE). A Delta
log checkpoint keeps only the latest ``txn`` of each app id, so the history of batches is read from
the commit files (``_delta_log/<version>.json``) themselves, never from checkpoints.

Commit files older than the table's ``delta.logRetentionDuration`` (30 days by default) are deleted
by Delta's log cleanup: what they said is unknown, and ``SinkLog.first_version`` says from where the
log is complete. The files are listed and read with the storage the facade uses for delta-rs:
Arrow's local file system for local tables, delta-rs's object store (with the same storage options)
elsewhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from pyarrow import fs

from app.contracts import vocabulary as vocab
from app.storage import backend, driver_files

LOG_DIR: Final = "_delta_log"
RESTORE: Final = "RESTORE"
_COMMIT_NAME_DIGITS: Final = 20  # <version zero-padded to 20 digits>.json
# The rows a commit wrote in its commitInfo's metrics: Spark's name, then delta-rs's.
_ROW_METRICS: Final = ("numOutputRows", "num_added_rows")


@dataclass(frozen=True)
class SinkCommit:
    """One commit of the sink as its commit file tells it.

    ``txns``: the (app id, version) of its ``txn`` actions. ``rows_added``: records in its added
    files (their stats' numRecords), else the rows its commitInfo's metrics count, else unknown.
    ``restored_to``/``restored_at``: for a RESTORE, the version or instant the table went back to.
    An Iceberg sink's snapshot is one too (`storage.iceberg.sink_log_of`): its version is the
    snapshot id, its txn the Spark query's id and epoch of its summary, and ``flink`` the Flink
    committer's (job id, operator id, max committed checkpoint id), which covers every checkpoint of
    that job above the one its previous snapshot covered.
    """

    version: int
    timestamp: datetime | None
    operation: str | None
    txns: tuple[tuple[str, int], ...] = ()
    rows_added: int | None = None
    restored_to: int | None = None
    restored_at: datetime | None = None
    flink: tuple[str, str, int] | None = None


@dataclass(frozen=True)
class SinkLog:
    """The commits read, by version, and the oldest version whose commit file still exists (older
    ones were cleaned past log retention: None when the log holds no commit file at all).

    An Iceberg sink's log (`storage.iceberg.sink_log_of`) says itself what a Delta log's RESTOREs
    and first version say: ``taken_back``, the snapshots a rollback took out of the table's current
    history (-> the current snapshot), and ``expired_before``, when its history starts after an
    expiry. ``version_key``/``undone_key``: the evidence keys that name its versions and what took
    them back (a Delta version and its RESTORE, an Iceberg snapshot id and the current snapshot)."""

    commits: tuple[SinkCommit, ...]
    first_version: int | None
    taken_back: Mapping[int, int] | None = None
    expired_before: datetime | None = None
    version_key: str = vocab.DETAIL_SINK_VERSIONS
    undone_key: str = "removed_by_restore"
    gone_meaning: str = "the sink's commit files of this time were cleaned (log retention)"
    # The app ids the whole log names, where its commits were read from a point on (Iceberg: the
    # summaries of older snapshots are skipped, not their writers' names); None: the commits' txns.
    named_apps: frozenset[str] | None = None

    def undone(self) -> dict[int, int]:
        """Version -> what took its output out of the table (`undone_versions` for Delta)."""
        return dict(self.taken_back) if self.taken_back is not None else undone_versions(self.commits)

    @property
    def starts_at(self) -> datetime | None:
        """When the oldest commit file left was written, when log cleanup removed older ones;
        None for a complete log (it starts at version 0) or one whose first commit was not read.
        A batch completed before it may have had a commit that is gone: unverifiable, not lost."""
        if self.expired_before is not None:
            return self.expired_before
        if self.first_version in (None, 0):
            return None
        first = next((c for c in self.commits if c.version == self.first_version), None)
        return first.timestamp if first is not None else None


def _millis(value: Any) -> datetime | None:
    return datetime.fromtimestamp(value / 1000, UTC) if isinstance(value, int | float) else None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _stats_records(add: dict[str, Any]) -> int | None:
    stats = add.get("stats")
    if not isinstance(stats, str):
        return None
    try:
        return _int(json.loads(stats).get("numRecords"))
    except (ValueError, AttributeError):
        return None


def _restored_at(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_commit(version: int, lines: Iterable[str]) -> SinkCommit:
    """A commit file's actions (one JSON object per line) as a ``SinkCommit``."""
    info: dict[str, Any] = {}
    txns: list[tuple[str, int]] = []
    added: list[int | None] = []
    for line in lines:
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action:
            info = action["commitInfo"] or {}
        elif "txn" in action:
            txn = action["txn"]
            txns.append((str(txn["appId"]), int(txn["version"])))
        elif "add" in action and action["add"].get("dataChange", True):
            added.append(_stats_records(action["add"]))
    metrics = info.get("operationMetrics") or {}
    rows: int | None = None
    if added and None not in added:
        rows = sum(n for n in added if n is not None)
    elif (counted := next((k for k in _ROW_METRICS if k in metrics), None)) is not None:
        rows = _int(metrics[counted])
    elif not added:
        rows = 0
    params = info.get("operationParameters") or {}
    operation = info.get("operation")
    restore = operation == RESTORE
    return SinkCommit(
        version=version,
        timestamp=_millis(info.get("timestamp")),
        operation=operation,
        txns=tuple(txns),
        rows_added=rows,
        restored_to=_int(params.get("version")) if restore else None,
        restored_at=_restored_at(params.get("timestamp")) if restore else None,
    )


def commit_version(name: str) -> int | None:
    """The version of a commit file's name, None for any other file of the log (checkpoints,
    checksums, temporary files)."""
    stem, dot, ext = name.partition(".")
    if dot and ext == "json" and len(stem) == _COMMIT_NAME_DIGITS and stem.isdigit():
        return int(stem)
    return None


def _file_system(where: backend.Location) -> tuple[fs.FileSystem, str]:
    """The file system and the log directory's path in it."""
    files, root = driver_files.file_system(where)
    return files, os.path.join(root, LOG_DIR) if root else LOG_DIR


def _commit_files(files: fs.FileSystem, log_dir: str) -> list[tuple[int, str, datetime | None]]:
    """(version, path, mtime) of every commit file of the log, ascending."""
    listed = files.get_file_info(fs.FileSelector(log_dir, allow_not_found=True))
    return sorted(
        (v, info.path, info.mtime) for info in listed if (v := commit_version(info.base_name)) is not None
    )


def _read_commit(files: fs.FileSystem, version: int, file_path: str) -> SinkCommit:
    with files.open_input_stream(file_path) as stream:
        text = stream.read().decode("utf-8")
    return parse_commit(version, text.splitlines())


def read_sink_log(
    storage: backend.StorageSettings, path: str, modified_since: datetime | None = None
) -> SinkLog | None:
    """The commits of the table at ``path`` (None when there is no Delta log there).

    ``modified_since`` skips commit files last written before it (their batches lie before the
    audited window), so a long-lived sink costs a listing, not a read of every commit."""
    where = backend.location(storage, path)
    with backend.storage_errors(where, "read the log of"):
        files, log_dir = _file_system(where)
        versions = _commit_files(files, log_dir)
        if not versions:
            return None
        commits = [
            _read_commit(files, version, file_path)
            for version, file_path, mtime in versions
            if modified_since is None or mtime is None or _aware(mtime) >= modified_since
        ]
    return SinkLog(tuple(commits), versions[0][0])


def holds_txn_of(storage: backend.StorageSettings, path: str, app_id: str) -> bool | None:
    """Whether a commit of the table at ``path`` carries a txn of ``app_id`` (None when there is no
    Delta log there). The commit files are read newest first up to the first that does: a streaming
    sink's newest commits are its query's, so the right sink costs a listing and a file or so."""
    where = backend.location(storage, path)
    with backend.storage_errors(where, "read the log of"):
        files, log_dir = _file_system(where)
        versions = _commit_files(files, log_dir)
        if not versions:
            return None
        return any(
            any(a == app_id for a, _ in _read_commit(files, version, file_path).txns)
            for version, file_path, _ in reversed(versions)
        )


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def undone_versions(commits: Sequence[SinkCommit]) -> dict[int, int]:
    """Version -> the RESTORE commit that took the table back to before it: its output is no longer
    in the table. A RESTORE by instant goes back to the last version committed at or before it."""
    out: dict[int, int] = {}
    for restore in commits:
        if restore.operation != RESTORE:
            continue
        target = restore.restored_to
        if target is None and restore.restored_at is not None:
            before = [
                c.version for c in commits if c.timestamp is not None and c.timestamp <= restore.restored_at
            ]
            target = max(before, default=None)
        if target is None:
            continue
        for c in commits:
            if target < c.version < restore.version:
                out.setdefault(c.version, restore.version)
    return out


def commits_by_txn(commits: Iterable[SinkCommit]) -> dict[tuple[str, int], list[SinkCommit]]:
    """(app id, version) -> the commits carrying that txn, by version: one streaming batch's
    commits."""
    out: dict[tuple[str, int], list[SinkCommit]] = {}
    for c in commits:
        for txn in c.txns:
            out.setdefault(txn, []).append(c)
    return out


def output_kept(commits: Sequence[SinkCommit], undone: Mapping[int, int]) -> bool:
    """Whether a batch's output is in the table: one of its ``commits`` is, or the only ones a
    RESTORE (``undone``) took back added no rows (an empty batch: nothing was lost)."""
    taken = [c for c in commits if c.version in undone]
    return len(taken) < len(commits) or (bool(taken) and not any(c.rows_added for c in taken))


def commits_since(log: SinkLog, since: datetime | None) -> SinkLog:
    """The log's commits made at or after ``since`` (all of them for None, and the undated)."""
    if since is None:
        return log
    kept = tuple(c for c in log.commits if c.timestamp is None or c.timestamp >= since)
    return replace(log, commits=kept)
