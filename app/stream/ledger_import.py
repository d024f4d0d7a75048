"""Backfill a job's ledger from an existing Spark checkpoint (`offset-audit ledger-import`).

A query that was never attached can still be audited over what its checkpoint retains: Spark keeps
the last `spark.sql.streaming.minBatchesToRetain` (default 100) entries of `offsets/` and
`commits/`, the query's id (`metadata`) and where its Kafka sources started (`sources/<n>/0`).

The imported run is the query: its run id is the query's id (a checkpoint deleted and recreated
has a new id, so it is a new run), whatever number of Spark runs the retained batches span. Its
events are those an attached run writes, built by the same `checkpoint.batch_events`, with
`detail.imported`: RUN_STARTED and OFFSETS_RESTORED (see `imported_start`), a CHECKPOINT_SNAPSHOT
per retained `offsets/<n>` and a CHECKPOINT_COMPLETED per retained `commits/<n>`. No RUN_STOPPED:
the checkpoint does not say whether or how the query stopped.

Nothing is written twice: a batch goes in one Delta commit under the transaction id an attached
run of the same query uses (app id scoped by the query id, version = batch id), the run's start
only when the ledger has no run of this query yet, and batches that some run of the query already
recorded (attached or imported) are left out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from app import __version__
from app.contracts import vocabulary as vocab
from app.contracts.offsets import EventSource, LedgerEvent, TopicPartitionKey
from app.errors import UsageError
from app.storage.backend import StorageSettings
from app.storage.files import modification_time_ms, read_text
from app.stream.checkpoint import COMMITS, OFFSETS, CheckpointFiles, batch_events
from app.stream.ledger import LedgerWriter, QueryRecord
from app.stream.startup import ENGINE, PartitionStart, StartupPlan, plan_checkpoint_resume, restored_events

log = logging.getLogger(__name__)

# Progress is reported once per this many batches by default.
PROGRESS_EVERY: Final = 100
METADATA: Final = "metadata"

Progress = Callable[[int, int], None]


def imported_start(
    offset_log: Mapping[int, Mapping[TopicPartitionKey, int]],
    initial: Mapping[TopicPartitionKey, int] | None,
) -> StartupPlan | None:
    """Where the imported run starts, as far as the checkpoint still says.

    With batch 0 retained, where the Kafka sources started (``initial``, `sources/<n>/0`), as a new
    checkpoint's attached run says (`specific`: which `startingOffsets` resolved them is not in the
    checkpoint). Once Spark purged batch 0, where the batches before the oldest retained one ended
    cannot be known: the run is known from the end of the oldest retained batch (`checkpoint`
    resume from it). None for a checkpoint without batches or initial offsets."""
    if 0 in offset_log or not offset_log:
        if initial is None:
            return None
        starts = {tp: PartitionStart(o, vocab.RESTORE_SPECIFIC) for tp, o in initial.items()}
        note = "a new checkpoint: where Spark's Kafka sources resolved their startingOffsets"
        return StartupPlan(mode=vocab.RESTORE_SPECIFIC, starts=starts, notes=(note,))
    oldest = min(offset_log)
    plan = plan_checkpoint_resume({oldest: offset_log[oldest]}, [oldest])
    note = (
        f"batches before {oldest} are no longer in the checkpoint (minBatchesToRetain): "
        f"the run is known from the end of batch {oldest}"
    )
    return StartupPlan(plan.mode, plan.starts, plan.restored_checkpoint_id, (note,))


def batches_to_import(
    offset_log: Mapping[int, Mapping[TopicPartitionKey, int]],
    committed: set[int],
    record: QueryRecord,
) -> list[tuple[int, bool, bool]]:
    """(batch, with its snapshot, with its completion) for every retained batch whose events the
    ledger lacks, ascending (the order Delta's transaction versions need)."""
    out = []
    for batch in sorted(offset_log):
        snapshot = batch not in record.snapshot_ids
        completed = batch in committed and batch not in record.completed_ids
        if snapshot or completed:
            out.append((batch, snapshot, completed))
    return out


@dataclass(frozen=True)
class ImportResult:
    """What one import found and wrote."""

    query_id: str
    run_id: str
    retained_batches: int
    oldest_batch: int | None
    newest_batch: int | None
    batches_imported: int  # batches with at least one event written now
    # Batches the ledger held already: recorded by a run of this query, or under its transaction id
    # by a writer that does not name the query in its RUN_STARTED.
    batches_recorded: int
    events_written: int
    run_start_written: bool


def checkpoint_query_id(checkpoint: CheckpointFiles) -> str:
    """The query id of the checkpoint; a UsageError naming the path when it is not one."""
    if read_text(checkpoint.spark, f"{checkpoint.directory}/{METADATA}") is None:
        raise UsageError(
            f"no Spark checkpoint at {checkpoint.directory}: {checkpoint.directory}/{METADATA} does not exist"
        )
    return checkpoint.query_id()


def run_start_events(
    source: EventSource, plan: StartupPlan, when: datetime, checkpoint: str, query_id: str
) -> list[LedgerEvent]:
    """RUN_STARTED and OFFSETS_RESTORED of the imported run."""
    imported = {vocab.DETAIL_IMPORTED: True}
    started = source.event(
        vocab.EVENT_RUN_STARTED,
        when,
        plan.restored_checkpoint_id,
        {
            "startup_mode": plan.mode,
            "restored_checkpoint_id": plan.restored_checkpoint_id,
            "app_version": __version__,
            vocab.DETAIL_QUERY_ID: query_id,
            "checkpoint": checkpoint,
            "notes": list(plan.notes),
            **imported,
        },
    )
    return [started, *restored_events(plan, source.job_name, source.run_id, source.group_id, when, imported)]


def import_checkpoint(
    checkpoint: CheckpointFiles,
    ledger: str,
    job_name: str,
    storage: StorageSettings = None,
    *,
    progress: Progress | None = None,
    progress_every: int = PROGRESS_EVERY,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ImportResult:
    """Write the ledger events of ``checkpoint``'s retained batches that the ledger at ``ledger``
    lacks, as job ``job_name``; ``progress(done, total)`` every ``progress_every`` batches.

    ``storage``: the ledger's storage settings (the session, or a `StorageConfig`), by default the
    checkpoint's session. A missing checkpoint is a UsageError; an unreachable ledger raises the
    storage's error (an infrastructure error)."""
    query_id = checkpoint_query_id(checkpoint)
    writer = LedgerWriter(
        checkpoint.spark if storage is None else storage,
        ledger,
        job_name,
        run_id=query_id,
        scope=query_id,
    )
    writer.ensure()
    record = writer.query_record(query_id)
    offset_log = checkpoint.offset_log()
    committed = set(checkpoint.log_ids(COMMITS))
    source = EventSource(job_name, query_id, ENGINE, None)

    written = 0
    if not record.run_ids:
        plan = imported_start(offset_log, checkpoint.source_initial_offsets())
        if plan is not None:
            when = _started_at(checkpoint, offset_log) or now()
            written += writer.write_new(run_start_events(source, plan, when, checkpoint.directory, query_id))
    start_written = written > 0

    todo = batches_to_import(offset_log, committed, record)
    imported = 0
    for done, (batch, snapshot, completed) in enumerate(todo, start=1):
        count = _import_batch(checkpoint, writer, source, batch, offset_log[batch], snapshot, completed, now)
        written += count
        imported += 1 if count else 0
        if progress is not None and (done % progress_every == 0 or done == len(todo)):
            progress(done, len(todo))
    return ImportResult(
        query_id=query_id,
        run_id=query_id,
        retained_batches=len(offset_log),
        oldest_batch=min(offset_log, default=None),
        newest_batch=max(offset_log, default=None),
        batches_imported=imported,
        batches_recorded=len(offset_log) - imported,
        events_written=written,
        run_start_written=start_written,
    )


def _started_at(
    checkpoint: CheckpointFiles, offset_log: Mapping[int, Mapping[TopicPartitionKey, int]]
) -> datetime | None:
    """When the imported run is known to start: the query's creation (its metadata file) with batch
    0 retained, else when Spark planned the oldest retained batch."""
    if 0 in offset_log or not offset_log:
        ms = modification_time_ms(checkpoint.spark, f"{checkpoint.directory}/{METADATA}")
        return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)
    return checkpoint.written_at(OFFSETS, min(offset_log))


def _import_batch(
    checkpoint: CheckpointFiles,
    writer: LedgerWriter,
    source: EventSource,
    batch: int,
    offsets: Mapping[TopicPartitionKey, int],
    snapshot: bool,
    completed: bool,
    now: Callable[[], datetime],
) -> int:
    """One batch's missing events; how many were written."""
    events = batch_events(
        checkpoint,
        source,
        batch,
        offsets,
        completed=completed,
        now=now(),
        detail={vocab.DETAIL_IMPORTED: True},
    )
    if not snapshot:
        events = [e for e in events if e.event_type != vocab.EVENT_CHECKPOINT_SNAPSHOT]
    if not completed:
        # A batch Spark planned but did not commit yet: its transaction version stays free for the
        # completion a later import (or attached run) writes, so its snapshot is keyed instead.
        return writer.write_new(events)
    return len(events) if writer.write(events, batch) else 0
