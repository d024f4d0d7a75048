"""The run recorder: a run's ledger events, built once for every writer of a run, and written.

Four writers record runs (CONTRACTS.md section 4): the reference job (`stream.job`), an attached
query (`stream.attach`), `ledger-import` (`stream.ledger_import`) and, for Flink jobs, the sidecar
and its import (`flink.watcher`, `flink.import_`, whose Flink facts `flink.events` turns into the
arguments here). Each says what it knows of its run; this module alone turns it into events:

- the recovery of what a dead run left: the batches of a Spark checkpoint the ledger lacks, and
  its commit requests never answered (`recover_unrecorded`, `recovery_events`), marked
  `recovered` with the run that rebuilt them (`recovered_mark`, a Flink restore's too);
- the run's start: RUN_STARTED, its detail built from a `RunStart` (`run_started`), and
  OFFSETS_RESTORED (`offsets_restored`; a Spark start plan's through `plan_restored`);
- a Spark batch's CHECKPOINT_SNAPSHOT and CHECKPOINT_COMPLETED, stamped with its files' times
  (`batch_events`); the committer's commit outcomes and a Flink checkpoint's events come built;
- the run's end: RUN_STOPPED with its `RunCounts` (`run_stopped`).

`RunRecorder` writes them through one run's `stream.ledger.LedgerWriter`: a start, a recovery, the
outcomes outside a batch and the stop keyed by their identity (`write_new`), a batch or checkpoint
in one Delta commit under the run's transaction id (`write`). Every detail key is a word of
`contracts.vocabulary`. The builders are pure but for `batch_events` and `recover_unrecorded`,
which read the checkpoint files' times.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from app import __version__
from app.contracts import vocabulary as vocab
from app.contracts.offsets import EventSource, LedgerEvent, TopicPartitionKey
from app.stream.checkpoint import COMMITS, OFFSETS, CheckpointFiles
from app.stream.ledger import LedgerWriter
from app.stream.startup import ENGINE, LedgerFacts, StartupPlan

# --- the run's start -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStart:
    """What a run's RUN_STARTED says: how it started (``mode``: a startup mode or restore source,
    None when nothing named it), from which checkpoint, with notes on the plan; and what the writer
    knows besides. A field left None (or False) is not in the detail: each writer says what it
    knows (CONTRACTS.md section 4 lists which writer says what). ``extra``: a writer's own facts
    (a Flink restore's path, an import's sink), under vocabulary keys."""

    mode: str | None
    restored_checkpoint_id: int | None
    notes: Sequence[str] = ()
    query_id: str | None = None
    checkpoint: str | None = None
    topics: Sequence[str] | None = None
    partitions: int | None = None
    flink_job_id: str | None = None
    attached: bool = False
    imported: bool = False
    extra: Mapping[str, object] = field(default_factory=dict)

    def detail(self) -> dict[str, object]:
        detail: dict[str, object] = {
            vocab.DETAIL_STARTUP_MODE: self.mode,
            vocab.DETAIL_RESTORED_CHECKPOINT_ID: self.restored_checkpoint_id,
            vocab.DETAIL_APP_VERSION: __version__,
            vocab.DETAIL_NOTES: list(self.notes),
        }
        known: dict[str, object] = {
            vocab.DETAIL_QUERY_ID: self.query_id,
            vocab.DETAIL_CHECKPOINT: self.checkpoint,
            vocab.DETAIL_TOPICS: None if self.topics is None else list(self.topics),
            vocab.DETAIL_PARTITIONS: self.partitions,
            vocab.DETAIL_FLINK_JOB_ID: self.flink_job_id,
        }
        detail.update({key: value for key, value in known.items() if value is not None})
        if self.attached:
            detail[vocab.DETAIL_ATTACHED] = True
        if self.imported:
            detail[vocab.DETAIL_IMPORTED] = True
        return {**detail, **self.extra}


def run_started(source: EventSource, when: datetime, start: RunStart) -> LedgerEvent:
    """The run's RUN_STARTED at ``when``, under the checkpoint it restored (None: none)."""
    return source.event(vocab.EVENT_RUN_STARTED, when, start.restored_checkpoint_id, start.detail())


def offsets_restored(
    source: EventSource,
    when: datetime,
    checkpoint_id: int | None,
    offsets: Mapping[TopicPartitionKey, int | None],
    restored_from: str,
    *,
    mode: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> list[LedgerEvent]:
    """OFFSETS_RESTORED, one per partition of ``offsets`` (raw, in ``source``'s engine dialect):
    where the run starts, ``restored_from`` a RESTORE_SOURCES word; a Spark plan's ``mode`` too."""
    detail: dict[str, object] = {vocab.DETAIL_SOURCE: restored_from}
    if mode is not None:
        detail[vocab.DETAIL_MODE] = mode
    detail.update(extra or {})
    return source.partition_events(vocab.EVENT_OFFSETS_RESTORED, when, checkpoint_id, offsets, detail)


def plan_restored(
    source: EventSource, plan: StartupPlan, when: datetime, extra: Mapping[str, object] | None = None
) -> list[LedgerEvent]:
    """A Spark run's OFFSETS_RESTORED, one per partition of ``plan``, grouped by where each starts:
    the reference job's, an attached run's and an import's."""
    events: list[LedgerEvent] = []
    for restored_from in sorted({s.source for s in plan.starts.values()}):
        offsets = {tp: s.offset for tp, s in plan.starts.items() if s.source == restored_from}
        events += offsets_restored(
            source, when, plan.restored_checkpoint_id, offsets, restored_from, mode=plan.mode, extra=extra
        )
    return events


# --- a Spark checkpoint's batches ------------------------------------------------------------------


def batch_events(
    checkpoint: CheckpointFiles,
    source: EventSource,
    batch_id: int,
    offsets: Mapping[TopicPartitionKey, int],
    *,
    completed: bool,
    now: datetime,
    detail: Mapping[str, object] | None = None,
    snapshot: bool = True,
) -> list[LedgerEvent]:
    """Checkpoint batch ``batch_id`` as ledger events: its CHECKPOINT_SNAPSHOT (unless not
    ``snapshot``) and, when ``completed``, its CHECKPOINT_COMPLETED, one per partition of
    ``offsets`` (its entry in the offset log). The one place a batch becomes events: the reference
    job's batches, an attached run's and an import's (recovery follows the same rule,
    `recovery_events`).

    Each is stamped when Spark wrote the batch's file (`offsets/<n>`, `commits/<n>`), as recovery
    stamps its events, so an event written late (a slow listener, an import months later) keeps the
    batch's own time; ``now`` only for a file whose time cannot be read."""
    extra = dict(detail or {})
    logs = [(vocab.EVENT_CHECKPOINT_SNAPSHOT, OFFSETS)] if snapshot else []
    if completed:
        logs.append((vocab.EVENT_CHECKPOINT_COMPLETED, COMMITS))
    events: list[LedgerEvent] = []
    for event_type, log_name in logs:
        when = checkpoint.written_at(log_name, batch_id) or now
        events += source.checkpoint_events(event_type, when, batch_id, offsets, extra)
    return events


# --- what a dead run left ------------------------------------------------------------------------


def recovered_mark(recovered_by: str) -> dict[str, object]:
    """The detail of every event rebuilt for a dead run: `recovered`, and the run that rebuilt it."""
    return {vocab.DETAIL_RECOVERED: True, vocab.DETAIL_RECOVERED_BY: recovered_by}


def recovery_events(
    facts: LedgerFacts,
    offset_log: Mapping[int, Mapping[TopicPartitionKey, int]],
    committed_batches: Iterable[int],
    job_name: str,
    group_id: str | None,
    new_run_id: str,
    now: datetime,
    written_at: Mapping[tuple[str, int], datetime] | None = None,
) -> list[LedgerEvent]:
    """Events the previous run could not flush before it died, rebuilt from Spark's checkpoint.

    They carry the previous run's id (they belong to it) and `recovered_mark`. Their time is when
    Spark wrote the checkpoint file (`written_at[("offsets"|"commits", batch)]`), so they sort
    before the new run's start like the events they stand for; `now` only when that is unknown. A
    commit that was requested but never answered is closed as OUTCOME_UNKNOWN; the reconciliation
    settles what really happened from __consumer_offsets.
    """
    times = written_at or {}
    owner = EventSource(job_name, facts.last_run_id or new_run_id, ENGINE, group_id)
    detail = recovered_mark(new_run_id)
    events: list[LedgerEvent] = []
    for batch in sorted(offset_log):
        if batch not in facts.snapshot_ids:
            when = times.get((OFFSETS, batch), now)
            events += owner.checkpoint_events(
                vocab.EVENT_CHECKPOINT_SNAPSHOT, when, batch, offset_log[batch], detail
            )
    for batch in sorted(set(committed_batches)):
        if batch in offset_log and batch not in facts.completed_ids:
            when = times.get((COMMITS, batch), now)
            events += owner.checkpoint_events(
                vocab.EVENT_CHECKPOINT_COMPLETED, when, batch, offset_log[batch], detail
            )
    for (run_id, attempt), checkpoint_id in sorted(facts.open_commit_attempts.items()):
        unknown = {
            **detail,
            vocab.DETAIL_ATTEMPT: attempt,
            vocab.DETAIL_ERROR: vocab.ERROR_OUTCOME_UNKNOWN,
            vocab.DETAIL_RETRIABLE: True,
            vocab.DETAIL_MESSAGE: "the process stopped before the commit was acknowledged",
        }
        attempt_writer = EventSource(job_name, run_id, ENGINE, group_id)
        events.append(attempt_writer.event(vocab.EVENT_COMMIT_FAILED, now, checkpoint_id, unknown))
    return events


def recover_unrecorded(
    checkpoint: CheckpointFiles,
    facts: LedgerFacts,
    offset_log: Mapping[int, Mapping[TopicPartitionKey, int]],
    committed_batches: Iterable[int],
    job_name: str,
    group_id: str | None,
    new_run_id: str,
    now: datetime,
) -> list[LedgerEvent]:
    """`recovery_events` for the batches of ``offset_log`` and ``committed_batches`` the ledger
    lacks (``facts``), each stamped with when Spark wrote its checkpoint file: what a start writes
    first, the reference job's and an attached query's alike."""
    committed = list(committed_batches)
    written_at = {}
    for log_name, batches, known in (
        (OFFSETS, list(offset_log), facts.snapshot_ids),
        (COMMITS, committed, facts.completed_ids),
    ):
        for batch in set(batches) - known:
            when = checkpoint.written_at(log_name, batch)
            if when is not None:
                written_at[(log_name, batch)] = when
    return recovery_events(facts, offset_log, committed, job_name, group_id, new_run_id, now, written_at)


# --- the run's end -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCounts:
    """What a run's RUN_STOPPED counts; a count left None is one its writer does not keep."""

    batches: int | None = None
    recovered_events: int | None = None
    successful_commits: int | None = None
    failed_commits: int | None = None
    ledger_write_failures: int | None = None
    checkpoints_recorded: int | None = None
    failed_checkpoints: int | None = None
    missed_checkpoints: Sequence[Mapping[str, object]] | None = None

    def detail(self) -> dict[str, object]:
        counts: dict[str, object] = {
            vocab.DETAIL_BATCHES: self.batches,
            vocab.DETAIL_RECOVERED_EVENTS: self.recovered_events,
            vocab.DETAIL_SUCCESSFUL_COMMITS: self.successful_commits,
            vocab.DETAIL_FAILED_COMMITS: self.failed_commits,
            vocab.DETAIL_LEDGER_WRITE_FAILURES: self.ledger_write_failures,
            vocab.DETAIL_CHECKPOINTS_RECORDED: self.checkpoints_recorded,
            vocab.DETAIL_FAILED_CHECKPOINTS: self.failed_checkpoints,
            vocab.DETAIL_MISSED_CHECKPOINTS: (
                None if self.missed_checkpoints is None else [dict(m) for m in self.missed_checkpoints]
            ),
        }
        return {key: value for key, value in counts.items() if value is not None}


def run_stopped(
    source: EventSource, when: datetime, checkpoint_id: int | None, reason: str, counts: RunCounts
) -> LedgerEvent:
    """The run's RUN_STOPPED at ``when``: why it stopped, its counts, under its last checkpoint."""
    detail = {vocab.DETAIL_REASON: reason, **counts.detail()}
    return source.event(vocab.EVENT_RUN_STOPPED, when, checkpoint_id, detail)


# --- one run's ledger ----------------------------------------------------------------------------


class RunRecorder:
    """One run's events written to its ledger: ``source`` stamps them (job, run, engine, group),
    ``writer`` writes them (its scope names the run's transaction id of batch appends)."""

    def __init__(self, writer: LedgerWriter, source: EventSource) -> None:
        self.writer = writer
        self.source = source

    @property
    def job_name(self) -> str:
        return self.source.job_name

    @property
    def run_id(self) -> str:
        return self.source.run_id

    def scoped(self, scope: str) -> RunRecorder:
        """The same run whose batches are appended under ``scope``'s transaction id (the streaming
        query's id, known once the query runs: batch ids restart at 0 with a new checkpoint)."""
        writer = LedgerWriter(self.writer.storage, self.writer.location, self.job_name, self.run_id, scope)
        return RunRecorder(writer, self.source)

    def ensure(self) -> None:
        self.writer.ensure()

    def recover(self, events: Sequence[LedgerEvent]) -> int:
        """What a dead run left (`recover_unrecorded`), before this run's start; how many were new."""
        return self.writer.write_new(events)

    def start(self, when: datetime, start: RunStart, restored: Sequence[LedgerEvent] = ()) -> int:
        """RUN_STARTED and the run's OFFSETS_RESTORED; how many were new (a start written already
        is not written again)."""
        return self.writer.write_new([run_started(self.source, when, start), *restored])

    def batch(self, batch_id: int, events: Sequence[LedgerEvent]) -> bool:
        """A batch's (a checkpoint's) events in one Delta commit; a retry writes nothing (False)."""
        return self.writer.write(events, batch_id)

    def record(self, events: Sequence[LedgerEvent]) -> int:
        """Events outside a batch (commit outcomes, a planned batch's snapshot), each once."""
        return self.writer.write_new(events) if events else 0

    def stop(
        self,
        when: datetime,
        checkpoint_id: int | None,
        reason: str,
        counts: RunCounts,
        pending: Sequence[LedgerEvent] = (),
    ) -> int:
        """The run's last events (``pending``) and its RUN_STOPPED, in one write."""
        stopped = run_stopped(self.source, when, checkpoint_id, reason, counts)
        return self.writer.write_new([*pending, stopped])
