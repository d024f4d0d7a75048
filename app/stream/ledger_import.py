"""Backfill a job's ledger from an existing Spark checkpoint (`offset-audit ledger-import`).

A query that was never attached can still be audited over what its checkpoint retains: Spark keeps
the last `spark.sql.streaming.minBatchesToRetain` (default 100) entries of `offsets/` and
`commits/`, the query's id (`metadata`) and where its Kafka sources started (`sources/<n>/0`).

The imported run is the query: its run id is the query's id (a checkpoint deleted and recreated
has a new id, so it is a new run), whatever number of Spark runs the retained batches span. Its
events are those an attached run writes, built by the same `recorder.batch_events`, with
`detail.imported`: RUN_STARTED and OFFSETS_RESTORED (see `imported_start`), a CHECKPOINT_SNAPSHOT
per retained `offsets/<n>` and a CHECKPOINT_COMPLETED per retained `commits/<n>`. No RUN_STOPPED:
the checkpoint does not say whether or how the query stopped.

Nothing is written twice: a batch goes in one Delta commit under the transaction id an attached
run of the same query uses (app id scoped by the query id, version = batch id), the run's start
only when the ledger has no run of this query yet, and batches that some run of the query already
recorded (attached or imported) are left out.

With the query's Delta sink (``sink``), its transaction log is read too (`stream.sink_evidence`):
the import stops on a sink holding no commit of the query (the wrong sink or app id) before it
writes anything, each imported completion names the sink version(s) of its batch, and the result
counts the imported completions the sink holds, lacks, and can no longer say about.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final

from app.config import IcebergConfig
from app.contracts import vocabulary as vocab
from app.contracts.offsets import EventSource, LedgerEvent, TopicPartitionKey
from app.errors import UsageError
from app.storage.backend import StorageSettings
from app.storage.driver_files import DriverDirectory, driver_readable
from app.storage.files import modification_time_ms, read_text
from app.storage.handles import open_handle
from app.stream.checkpoint import COMMITS, OFFSETS, CheckpointFiles, batch_ids, parse_query_id
from app.stream.ledger import LedgerWriter, QueryRecord
from app.stream.recorder import RunRecorder, RunStart, batch_events, plan_restored
from app.stream.sink_evidence import SinkCounts, SinkEvidence, no_commits_of, require_commits, sink_counts
from app.stream.startup import ENGINE, PartitionStart, StartupPlan, plan_checkpoint_resume

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
    # With a sink: its path and txn app id, and what its log says of the imported completions.
    sink: str | None = None
    sink_app_id: str | None = None
    sink_holds: int | None = None
    sink_lacks: int | None = None  # lost batches: reconcile names them (BATCH_NOT_IN_SINK)
    sink_unverifiable: int | None = None  # completed before the sink's oldest commit file left
    sink_log_first_version: int | None = None
    oldest_verifiable_batch: int | None = None  # the oldest retained completed batch the log can check


def no_checkpoint(directory: str) -> UsageError:
    return UsageError(f"no Spark checkpoint at {directory}: {directory}/{METADATA} does not exist")


def no_sink_table(path: str) -> UsageError:
    return UsageError(
        f"--sink {path}: no Delta table there (no commit file in {path}/_delta_log) nor Iceberg table "
        "(no metadata file in its metadata/)"
    )


def checkpoint_query_id(checkpoint: CheckpointFiles) -> str:
    """The query id of the checkpoint; a UsageError naming the path when it is not one."""
    if read_text(checkpoint.spark, f"{checkpoint.directory}/{METADATA}") is None:
        raise no_checkpoint(checkpoint.directory)
    return checkpoint.query_id()


def check_inputs(
    storage: StorageSettings,
    directory: str,
    sink: str | None = None,
    sink_app_id: str | None = None,
    catalogs: IcebergConfig | None = None,
) -> None:
    """The checks `import_checkpoint` makes before it writes anything, made without a JVM where
    the checkpoint is read on the driver (`driver_files`: a local disk, an S3 store), so a wrong
    path answers before a session starts: a UsageError naming the path when ``directory`` holds no
    checkpoint, or ``sink`` is no Delta table or holds no commit of the app id. On a scheme only
    Hadoop reads, nothing is checked here: the import checks it all through the session."""
    if not driver_readable(directory):
        return
    checkpoint = DriverDirectory.at(storage, directory)
    metadata = checkpoint.read_text(METADATA)
    if metadata is None:
        raise no_checkpoint(directory)
    if sink is None:
        return
    app_id = sink_app_id or parse_query_id(metadata)
    held = open_handle("sink", sink, storage, catalogs).holds_txn_of(app_id)
    if held is None:
        raise no_sink_table(sink)
    if not held and batch_ids(checkpoint.names(COMMITS)):
        raise no_commits_of(sink, app_id, sink_app_id is not None)


def imported_run_start(
    plan: StartupPlan, checkpoint: str, query_id: str, sink: SinkEvidence | None = None
) -> RunStart:
    """What the imported run's RUN_STARTED says: its plan, the query and checkpoint, the sink."""
    with_sink = {} if sink is None else sink.run_detail()
    return RunStart(
        plan.mode,
        plan.restored_checkpoint_id,
        plan.notes,
        query_id=query_id,
        checkpoint=checkpoint,
        imported=True,
        extra=with_sink,
    )


def imported_restored(source: EventSource, plan: StartupPlan, when: datetime) -> list[LedgerEvent]:
    """The imported run's OFFSETS_RESTORED: the recorder's, marked imported."""
    return plan_restored(source, plan, when, {vocab.DETAIL_IMPORTED: True})


def import_checkpoint(
    checkpoint: CheckpointFiles,
    ledger: str,
    job_name: str,
    storage: StorageSettings = None,
    *,
    progress: Progress | None = None,
    progress_every: int = PROGRESS_EVERY,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sink: str | None = None,
    sink_app_id: str | None = None,
    catalogs: IcebergConfig | None = None,
) -> ImportResult:
    """Write the ledger events of ``checkpoint``'s retained batches that the ledger at ``ledger``
    lacks, as job ``job_name``; ``progress(done, total)`` every ``progress_every`` batches.

    ``storage``: the ledger's and the sink's storage settings (the session, or a `StorageConfig`),
    by default the checkpoint's session. ``sink``: the query's Delta sink, whose commits carry the
    txn app id ``sink_app_id`` (default: the query's id, as Spark's Delta sink writes it), or its
    Iceberg sink (a path, or an ``iceberg:`` address of ``catalogs``), whose snapshots carry the
    query's id and the batch id in their summaries (`storage.iceberg`). A
    missing checkpoint, a sink that is no Delta table or holds no commit of the app id is a
    UsageError, raised before anything is written; an unreachable ledger raises the storage's error
    (an infrastructure error)."""
    query_id = checkpoint_query_id(checkpoint)
    offset_log = checkpoint.offset_log()
    committed = set(checkpoint.log_ids(COMMITS))
    settings = checkpoint.spark if storage is None else storage
    evidence = None
    if sink is not None:
        evidence = read_sink(settings, sink, sink_app_id or query_id, catalogs)
        require_commits(evidence, committed, sink_app_id is not None)
    writer = LedgerWriter(
        checkpoint.spark if storage is None else storage,
        ledger,
        job_name,
        run_id=query_id,
        scope=query_id,
    )
    writer.ensure()
    record = writer.query_record(query_id)
    source = EventSource(job_name, query_id, ENGINE, None)
    recorder = RunRecorder(writer, source)

    written = 0
    if not record.run_ids:
        plan = imported_start(offset_log, checkpoint.source_initial_offsets())
        if plan is not None:
            when = _started_at(checkpoint, offset_log) or now()
            start = imported_run_start(plan, checkpoint.directory, query_id, evidence)
            written += recorder.start(when, start, imported_restored(source, plan, when))
    start_written = written > 0

    todo = batches_to_import(offset_log, committed, record)
    imported = 0
    statuses: list[str] = []
    for done, (batch, snapshot, completed) in enumerate(todo, start=1):
        count, status = _import_batch(
            checkpoint, recorder, batch, offset_log[batch], snapshot, completed, now, evidence
        )
        written += count
        imported += 1 if count else 0
        if count and status is not None:
            statuses.append(status)
        if progress is not None and (done % progress_every == 0 or done == len(todo)):
            progress(done, len(todo))
    result = ImportResult(
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
    return _with_sink_counts(result, checkpoint, evidence, statuses, committed)


def read_sink(
    storage: StorageSettings, path: str, app_id: str, catalogs: IcebergConfig | None = None
) -> SinkEvidence:
    """The sink's log (a Delta table's commits, an Iceberg table's snapshots), for the commits of
    ``app_id``; a UsageError when ``path`` is neither."""
    log_ = open_handle("sink", path, storage, catalogs).sink_log()
    if log_ is None:
        raise no_sink_table(path)
    return SinkEvidence.of(path, app_id, log_)


def oldest_verifiable_batch(
    checkpoint: CheckpointFiles, evidence: SinkEvidence, committed: set[int]
) -> int | None:
    """The oldest retained completed batch that completed once the sink's log starts: every batch
    from it on can be checked against the log (all of them, for a log never cleaned)."""
    starts = evidence.log.starts_at
    for batch in sorted(committed):
        if starts is None:
            return batch
        when = checkpoint.written_at(COMMITS, batch) or evidence.committed_at(batch)
        if when is not None and when >= starts:
            return batch
    return None


def _with_sink_counts(
    result: ImportResult,
    checkpoint: CheckpointFiles,
    evidence: SinkEvidence | None,
    statuses: list[str],
    committed: set[int],
) -> ImportResult:
    if evidence is None:
        return result
    counts: SinkCounts = sink_counts(
        statuses, evidence.log.first_version, oldest_verifiable_batch(checkpoint, evidence, committed)
    )
    return replace(
        result,
        sink=evidence.path,
        sink_app_id=evidence.app_id,
        sink_holds=counts.held,
        sink_lacks=counts.lacked,
        sink_unverifiable=counts.unverifiable,
        sink_log_first_version=counts.log_first_version,
        oldest_verifiable_batch=counts.oldest_verifiable_batch,
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
    recorder: RunRecorder,
    batch: int,
    offsets: Mapping[TopicPartitionKey, int],
    snapshot: bool,
    completed: bool,
    now: Callable[[], datetime],
    sink: SinkEvidence | None = None,
) -> tuple[int, str | None]:
    """One batch's missing events: how many were written, and with a sink, whether it holds the
    batch's output (None without a sink or a completion)."""
    imported = {vocab.DETAIL_IMPORTED: True}
    # A file time that cannot be read (the file purged under the import) falls back to when the
    # sink committed the batch, right before its completion, rather than to the import's clock,
    # which would date the batch months late and after the batches completed behind it.
    fallback = (sink.committed_at(batch) if sink is not None else None) or now()
    events = batch_events(
        checkpoint, recorder.source, batch, offsets, completed=completed, now=fallback, detail=imported
    )
    if not snapshot:
        events = [e for e in events if e.event_type != vocab.EVENT_CHECKPOINT_SNAPSHOT]
    if not completed:
        # A batch Spark planned but did not commit yet: its transaction version stays free for the
        # completion a later import (or attached run) writes, so its snapshot is keyed instead.
        return recorder.record(events), None
    status = None
    if sink is not None:
        events, status = _with_sink_detail(events, sink, batch)
    return (len(events) if recorder.batch(batch, events) else 0), status


def _with_sink_detail(
    events: list[LedgerEvent], sink: SinkEvidence, batch: int
) -> tuple[list[LedgerEvent], str]:
    """The batch's events, its completions naming its sink commits; and whether the sink holds it."""
    done = [e.event_time for e in events if e.event_type == vocab.EVENT_CHECKPOINT_COMPLETED]
    completed_at = min(done, default=None)
    detail = sink.completion_detail(batch, completed_at)
    out = [
        replace(e, detail={**e.detail, **detail}) if e.event_type == vocab.EVENT_CHECKPOINT_COMPLETED else e
        for e in events
    ]
    return out, sink.status(batch, completed_at)
