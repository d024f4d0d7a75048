"""`flink-import`: backfill a job's ledger from the checkpoints and savepoints Flink retained.

Flink writes a job's checkpoints under `<checkpoint dir>/<job id>/chk-<n>` and keeps the last
`execution.checkpointing.num-retained` of them (with RETAIN_ON_CANCELLATION, also after the job
ends); savepoints go to `savepoint-<first 6 hex digits of the job id>-<random>` directories. The
import walks a directory, local or on S3 (a checkpoint root, one job's directory, one `chk-<n>`, a savepoint
directory or a directory of savepoints) for every such directory holding a `_metadata`, decodes each
(`app.flink.metadata`) and writes what the ledger lacks.

One imported run per Flink job id, its run id the job id (the sidecar's id of a job's first attempt
too): RUN_STARTED and OFFSETS_RESTORED from the oldest retained checkpoint (`source` checkpoint:
what came before it is gone) when the ledger has no run of that Flink job yet, then a
CHECKPOINT_SNAPSHOT and a CHECKPOINT_COMPLETED per retained checkpoint or savepoint (and, with a
group id, the commit Flink requests on completion, `inferred`), all `imported`, timed by the
`_metadata` file's modification time (Flink writes it last, when the checkpoint completes). No
RUN_STOPPED: the files do not say how the job ended. A savepoint joins the run of the job id its
name starts with (found under the path or in the ledger); one of an unknown job is reported, not
imported. Checkpoints some run of the same Flink job recorded already (the sidecar's or an earlier
import's) are left out, so importing again adds nothing. A checkpoint that does not decode is
reported with its error and writes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import pyarrow.compute as pc

from app.contracts import vocabulary as vocab
from app.contracts.instants import instant
from app.contracts.offsets import EventSource
from app.errors import FlinkStateError, InfrastructureError, UsageError
from app.flink import events as ev
from app.flink.files import list_objects, object_store_path
from app.flink.metadata import FlinkCheckpointOffsets, read_checkpoint
from app.flink.rest import STATUS_COMPLETED, CheckpointStat, Restore
from app.flink.watcher import FlinkLedger, local_path

log = logging.getLogger(__name__)

METADATA: Final = "_metadata"
CHECKPOINT_DIR: Final = re.compile(r"^chk-(\d+)$")
SAVEPOINT_DIR: Final = re.compile(r"^savepoint-([0-9a-f]{6})-[0-9a-f]+$")
JOB_ID: Final = re.compile(r"^[0-9a-f]{32}$")
# How deep under --path the walk looks: root / job id / chk-N.
MAX_DEPTH: Final = 3

Reader = Callable[[str], FlinkCheckpointOffsets]


@dataclass(frozen=True)
class Found:
    """A retained checkpoint or savepoint directory."""

    path: str
    savepoint: bool
    job_key: str  # the job id (checkpoints), or the 6-digit prefix of a savepoint's name
    modified_ms: int


def find_retained(root: str, storage_options: Mapping[str, str] | None = None) -> list[Found]:
    """Every `chk-<n>` and `savepoint-*` directory with a `_metadata` at or under ``root`` (a local
    directory or an S3 one, reached with ``storage_options``)."""
    trimmed = root.rstrip("/")
    found = (
        _found_in_store(trimmed, storage_options) if object_store_path(trimmed) else _found_on_disk(trimmed)
    )
    return sorted(found, key=lambda f: (f.job_key, f.modified_ms, f.path))


def _found_on_disk(root: str) -> list[Found]:
    root = local_path(root)
    if "://" in root:
        raise UsageError(
            f"--path {root}: flink-import reads local directories (or file:, s3:, s3a:, s3p: URIs)"
        )
    if not os.path.isdir(root):
        raise UsageError(f"--path {root}: no such directory")
    found: list[Found] = []
    for directory, subdirs, files in os.walk(root):
        depth = directory[len(root) :].count(os.sep)
        if depth >= MAX_DEPTH:
            subdirs.clear()
        if METADATA not in files:
            continue
        subdirs.clear()  # a checkpoint's own subdirectories hold state files, not checkpoints
        modified = int(os.stat(os.path.join(directory, METADATA)).st_mtime * 1000)
        found.extend(_retained(directory, modified))
    return found


def _found_in_store(root: str, storage_options: Mapping[str, str] | None) -> list[Found]:
    """The object-store twin of the walk: one listing of every key under ``root``, the same depth."""
    objects = list_objects(root, storage_options)
    if not objects:
        raise UsageError(f"--path {root}: no such directory (no object under it)")
    found: list[Found] = []
    for stored in objects:
        parts = stored.relative.split("/")
        if parts[-1] != METADATA or len(parts) - 1 > MAX_DEPTH:
            continue
        found.extend(_retained("/".join([root, *parts[:-1]]), stored.modified_ms))
    return found


def _retained(directory: str, modified_ms: int) -> list[Found]:
    """The retained checkpoint or savepoint a directory holding a `_metadata` is, by its name."""
    name = posixpath.basename(directory)
    if CHECKPOINT_DIR.match(name):
        return [Found(directory, False, posixpath.basename(posixpath.dirname(directory)), modified_ms)]
    if match := SAVEPOINT_DIR.match(name):
        return [Found(directory, True, match.group(1), modified_ms)]
    return []


@dataclass
class FlinkImportResult:
    """What one import found and wrote."""

    path: str
    found: int = 0
    imported: int = 0  # checkpoints and savepoints written now
    already_recorded: int = 0
    events_written: int = 0
    runs: list[str] = field(default_factory=list)
    runs_started: list[str] = field(default_factory=list)
    unreadable: list[dict[str, str]] = field(default_factory=list)
    unassigned_savepoints: list[str] = field(default_factory=list)
    oldest_checkpoint: int | None = None
    newest_checkpoint: int | None = None


RunStarts = dict[str, list[tuple[datetime, str]]]


def flink_runs(ledger: FlinkLedger) -> RunStarts:
    """The ledger's runs of the job by the Flink job id their RUN_STARTED names: (start, run id),
    in start order."""
    where = (pc.field("job_name") == ledger.job_name) & (pc.field("event_type") == vocab.EVENT_RUN_STARTED)
    rows = ledger.table.rows(where, columns=["job_name", "event_type", "run_id", "event_time", "detail"])
    out: RunStarts = {}
    for row in [] if rows is None else rows.to_pylist():
        flink_job = json.loads(row["detail"] or "{}").get(vocab.DETAIL_FLINK_JOB_ID)
        if isinstance(flink_job, str):
            out.setdefault(flink_job, []).append((instant(row["event_time"]), str(row["run_id"])))
    return {job: sorted(set(starts)) for job, starts in out.items()}


def run_at(starts: list[tuple[datetime, str]], when: datetime) -> str:
    """The run of a Flink job that was running at ``when``: the last one started by then, else the
    first."""
    before = [run for started, run in starts if started <= when]
    return before[-1] if before else starts[0][1]


def job_of(found: Found, job_ids: set[str]) -> str | None:
    """The Flink job id a retained directory belongs to (a savepoint: the one its prefix names)."""
    if not found.savepoint:
        return found.job_key
    matches = sorted(j for j in job_ids if j.startswith(found.job_key))
    return matches[0] if len(matches) == 1 else None


def import_retained(
    path: str,
    ledger: FlinkLedger,
    *,
    group_id: str | None = None,
    read: Reader | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> FlinkImportResult:
    """Write the ledger events of the checkpoints and savepoints under ``path`` the ledger lacks."""
    reader: Reader = read or (lambda p: read_checkpoint(p, storage_options))
    retained = find_retained(path, storage_options)
    result = FlinkImportResult(path=path, found=len(retained))
    if not retained:
        return result
    ledger.ensure()
    runs = flink_runs(ledger)
    job_ids = {f.job_key for f in retained if not f.savepoint} | set(runs)
    by_job: dict[str, list[tuple[Found, FlinkCheckpointOffsets]]] = {}
    for found in retained:
        job = job_of(found, job_ids)
        if job is None:
            result.unassigned_savepoints.append(found.path)
            continue
        try:
            decoded = reader(found.path)
        except (FlinkStateError, InfrastructureError) as exc:
            log.warning("flink-import: %s not imported: %s", found.path, exc)
            result.unreadable.append({"path": found.path, "error": str(exc)[:300]})
            continue
        by_job.setdefault(job, []).append((found, decoded))
    for job, snapshots in sorted(by_job.items()):
        snapshots.sort(key=lambda s: s[1].checkpoint_id)
        _import_job(ledger, job, snapshots, runs.get(job, []), group_id, result)
    ids = [d.checkpoint_id for s in by_job.values() for _, d in s]
    result.oldest_checkpoint, result.newest_checkpoint = min(ids, default=None), max(ids, default=None)
    return result


def _import_job(
    ledger: FlinkLedger,
    job: str,
    snapshots: list[tuple[Found, FlinkCheckpointOffsets]],
    job_runs: list[tuple[datetime, str]],
    group_id: str | None,
    result: FlinkImportResult,
) -> None:
    imported = {vocab.DETAIL_IMPORTED: True}
    done = ledger.completed_ids(runs=[r for _, r in job_runs]) if job_runs else set()
    if not job_runs:
        run_id = job
        oldest_found, oldest = next((s for s in snapshots if not s[0].savepoint), snapshots[0])
        restore = Restore(
            oldest.checkpoint_id, oldest_found.modified_ms, oldest_found.savepoint, oldest_found.path
        )
        attempt = ev.Attempt(job, oldest_found.modified_ms, restore)
        source = EventSource(ledger.job_name, run_id, oldest.engine, group_id)
        note = (
            f"imported from {result.path}: the checkpoints before {oldest.checkpoint_id} are no longer "
            f"retained; the run is known from the end of checkpoint {oldest.checkpoint_id}"
        )
        start = ev.run_start(attempt, notes=[note], imported=True)
        # Imported runs keep the job id as their run id whatever they restored (not `run_id_of`).
        restored = ev.offsets_restored(source, attempt, {**ev.raw_offsets(oldest)}, imported)
        result.events_written += ledger.recorder(source).start(attempt.started_at, start, restored)
        result.runs_started.append(run_id)
        job_runs = [(attempt.started_at, run_id)]
    for found, decoded in snapshots:
        if decoded.checkpoint_id in done:
            result.already_recorded += 1
            continue
        when = found.modified_ms
        run_id = run_at(job_runs, _at(when))
        if run_id not in result.runs:
            result.runs.append(run_id)
        stat = CheckpointStat(
            decoded.checkpoint_id, STATUS_COMPLETED, found.savepoint, when, when, found.path, False
        )
        source = EventSource(ledger.job_name, run_id, decoded.engine, group_id)
        events = ev.checkpoint_events(source, stat, decoded, extra=imported, completed_at=_at(when))
        written = ledger.recorder(source).record(events)
        result.events_written += written
        if written:
            result.imported += 1
        else:
            result.already_recorded += 1
        done.add(decoded.checkpoint_id)


def _at(ms: int) -> datetime:
    return ev.at_ms(ms)
