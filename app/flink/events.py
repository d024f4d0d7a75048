"""The ledger events of a Flink job, from its REST facts and its checkpoints' decoded offsets (pure;
a run's start, restored offsets and stop are the run recorder's, `stream.recorder`, told the Flink facts).

A run is one attempt of a Flink job: the job's first start, and each restore (a failover of the same
job id restores from its latest checkpoint, a resubmission from the checkpoint or savepoint it is
given). Its run id comes from REST facts alone (`run_id_of`), so a sidecar that restarts finds the
same id and writes nothing twice. A run's events are those of a Spark run (CONTRACTS.md section 4):

- RUN_STARTED at the attempt's start (the restore time, else the job's start), `flink_job_id`, and
  for a restore `restored_checkpoint_id`, `external_path`, `savepoint`;
- OFFSETS_RESTORED per partition for a restore: the restored state's offsets, `source` checkpoint or
  savepoint. For an attempt started without state, `source` its startup mode (earliest, latest,
  group) and the offset where its source started (`stateless_start`): Flink resolves that inside
  the job and shows it nowhere, so the sidecar asks the broker for the mode's position and bounds
  it by the attempt's first checkpoint holding the partition (CONTRACTS.md section 7);
- CHECKPOINT_SNAPSHOT (at Flink's trigger time) and CHECKPOINT_COMPLETED (at its last
  acknowledgement) per partition of each completed checkpoint, under Flink's checkpoint id, in the
  dialect of the source that wrote the state (`flink-kafkasource` or `flink-legacy`);
- with a group id, COMMIT_REQUESTED per partition at the completion, `inferred`: both Kafka sources
  commit a checkpoint's offsets when Flink notifies them of its completion; the sidecar does not
  see the request, and whether the commit arrived is `__consumer_offsets`'s word, as for any job;
- RUN_STOPPED when the job reached a terminal state (its `reason`), with the run's counts.

A completed checkpoint whose offsets the ledger cannot hold (its files gone before they were read,
undecodable, out of the REST history between two polls) gets no checkpoint events: the ledger never
claims offsets it did not read, and a completion without a snapshot would read as an inconsistency.
It is listed instead in `missed_checkpoints` ({id, reason}) of the run's next CHECKPOINT_COMPLETED
and counted in its RUN_STOPPED.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from app.contracts import offsets as off
from app.contracts import vocabulary as vocab
from app.contracts.offsets import EventSource, LedgerEvent, TopicPartitionKey, commit_offset_for
from app.flink.metadata import FlinkCheckpointOffsets
from app.flink.rest import CheckpointStat, Restore
from app.stream import recorder
from app.stream.recorder import RunStart

# A retained checkpoint's directory name (a savepoint's is `savepoint-...`).
CHECKPOINT_NAME: Final = re.compile(r"^chk-\d+$")


def at_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def run_id_of(job_id: str, restore: Restore | None) -> str:
    """One run per attempt: the job id, and for a restore what it restored and when (the same
    checkpoint can be restored twice, by two failovers before the next one completes)."""
    if restore is None:
        return job_id
    return f"{job_id}-restore-{restore.checkpoint_id}-{restore.restore_ms}"


@dataclass(frozen=True)
class Attempt:
    """One attempt of a Flink job, as REST shows it."""

    job_id: str
    started_ms: int
    restore: Restore | None

    @property
    def run_id(self) -> str:
        return run_id_of(self.job_id, self.restore)

    @property
    def started_at(self) -> datetime:
        return at_ms(self.restore.restore_ms if self.restore is not None else self.started_ms)

    def owns(self, stat: CheckpointStat) -> bool:
        """Whether this attempt triggered ``stat`` (a restored attempt triggers from its restore on)."""
        return self.restore is None or stat.trigger_ms >= self.restore.restore_ms


@dataclass(frozen=True)
class Missed:
    """A completed checkpoint whose offsets the ledger does not hold, and why (MISSED_REASONS)."""

    checkpoint_id: int
    reason: str
    message: str | None = None

    def as_detail(self) -> dict[str, object]:
        out: dict[str, object] = {"id": self.checkpoint_id, vocab.DETAIL_REASON: self.reason}
        if self.message:
            out[vocab.DETAIL_MESSAGE] = self.message
        return out


def raw_offsets(decoded: FlinkCheckpointOffsets) -> dict[TopicPartitionKey, int]:
    return {(s.topic, s.partition): s.raw_offset for s in decoded.offsets}


def source_for(job_name: str, run_id: str, engine: str, group_id: str | None) -> EventSource:
    return EventSource(job_name, run_id, engine, group_id)


def run_start(
    attempt: Attempt, *, startup_mode: str | None = None, notes: Sequence[str] = (), imported: bool = False
) -> RunStart:
    """What ``attempt``'s RUN_STARTED says: a restore's mode is its source (checkpoint or
    savepoint), with where the restored state lies and Flink's own word on it."""
    restore = attempt.restore
    if restore is None:
        return RunStart(startup_mode, None, notes, flink_job_id=attempt.job_id, imported=imported)
    where = {vocab.DETAIL_EXTERNAL_PATH: restore.external_path, vocab.DETAIL_SAVEPOINT: restore.is_savepoint}
    return RunStart(
        restore_source(restore),
        restore.checkpoint_id,
        notes,
        flink_job_id=attempt.job_id,
        imported=imported,
        extra=where,
    )


def run_started(
    source: EventSource,
    attempt: Attempt,
    *,
    startup_mode: str | None = None,
    notes: Sequence[str] = (),
    imported: bool = False,
) -> LedgerEvent:
    """RUN_STARTED of ``attempt``, at its start (`run_start`)."""
    start = run_start(attempt, startup_mode=startup_mode, notes=notes, imported=imported)
    return recorder.run_started(source, attempt.started_at, start)


def restore_source(restore: Restore) -> str:
    """Checkpoint or savepoint. Flink 2 reports every restore from a path (a resubmission with
    `execution.state-recovery.path`) as a savepoint, a retained `chk-N` too: the path's name says."""
    path = (restore.external_path or "").rstrip("/")
    if CHECKPOINT_NAME.match(path.rsplit("/", 1)[-1]):
        return vocab.RESTORE_CHECKPOINT
    return vocab.RESTORE_SAVEPOINT if restore.is_savepoint else vocab.RESTORE_CHECKPOINT


def offsets_restored(
    source: EventSource,
    attempt: Attempt,
    offsets: Mapping[TopicPartitionKey, int | None],
    extra: Mapping[str, object] | None = None,
) -> list[LedgerEvent]:
    """OFFSETS_RESTORED of a restored attempt: ``offsets`` raw, in ``source``'s engine dialect."""
    restore = attempt.restore
    if restore is None or not offsets:
        return []
    return recorder.offsets_restored(
        source, attempt.started_at, restore.checkpoint_id, offsets, restore_source(restore), extra=extra
    )


# The words a job's parameters may name its Kafka source's startup mode with: ours, Flink's
# KafkaSource builder's (`OffsetsInitializer.committedOffsets`), Flink SQL's `scan.startup.mode`.
STARTUP_WORDS: Final = {
    vocab.RESTORE_EARLIEST: vocab.RESTORE_EARLIEST,
    "earliest-offset": vocab.RESTORE_EARLIEST,
    vocab.RESTORE_LATEST: vocab.RESTORE_LATEST,
    "latest-offset": vocab.RESTORE_LATEST,
    vocab.RESTORE_GROUP: vocab.RESTORE_GROUP,
    "committed": vocab.RESTORE_GROUP,
    "group-offsets": vocab.RESTORE_GROUP,
}
# The startup modes a broker can say the position of: the log's start, its end, the group's offset.
BROKER_MODES: Final = (vocab.RESTORE_EARLIEST, vocab.RESTORE_LATEST, vocab.RESTORE_GROUP)
# A partition the source has not read yet keeps its mode's marker in the state: the mode it says.
_MARKED_MODES: Final = {
    off.KAFKASOURCE_EARLIEST_OFFSET: vocab.RESTORE_EARLIEST,
    off.KAFKASOURCE_COMMITTED_OFFSET: vocab.RESTORE_GROUP,
    off.KAFKASOURCE_LATEST_OFFSET: vocab.RESTORE_LATEST,
    off.EARLIEST_OFFSET: vocab.RESTORE_EARLIEST,
    off.GROUP_OFFSET: vocab.RESTORE_GROUP,
    off.LATEST_OFFSET: vocab.RESTORE_LATEST,
}


def startup_mode_named(value: str | None) -> str | None:
    """The startup mode a job parameter's value names (case and spaces aside), else None."""
    return None if value is None else STARTUP_WORDS.get(value.strip().lower())


def marked_mode(decoded: FlinkCheckpointOffsets) -> str | None:
    """The startup mode the markers of a checkpoint's not-yet-read partitions name, when they all
    name one (a partition read already holds an offset, which says nothing of the mode)."""
    modes = {_MARKED_MODES.get(s.raw_offset) for s in decoded.offsets if s.raw_offset < 0}
    modes.discard(None)
    return next(iter(modes)) if len(modes) == 1 else None


def stateless_start(
    asked: Mapping[TopicPartitionKey, int], decoded: FlinkCheckpointOffsets
) -> dict[TopicPartitionKey, int]:
    """Where each partition of ``decoded`` (the attempt's first checkpoint holding it) started, as a
    next offset: the broker's position for the startup mode (``asked``), lowered to the checkpoint's
    own offset when that is below it.

    Both bound the start from above. The checkpoint: a source's position only moves forward. The
    broker's: asked once the source held its split (latest: the end then is at or past the end the
    source took; earliest: the log start only moves forward), or for the group before the job
    committed anything itself. So the result never counts a read record as skipped unless records
    arrived between the source's start and its first checkpoint (then, at most those: section 7).
    A partition the broker gave no position for is left out: unknown, never guessed."""
    out: dict[TopicPartitionKey, int] = {}
    for split in decoded.offsets:
        tp = (split.topic, split.partition)
        if tp not in asked:
            continue
        held = off.normalize_offset(split.raw_offset, decoded.engine)
        out[tp] = asked[tp] if held is None else min(asked[tp], held)
    return out


def raw_in_dialect(next_offset: int, engine: str) -> int:
    """A next offset as ``engine`` stores it (the legacy consumer stores the last processed one)."""
    last_processed = off.offset_semantics_for(engine) == vocab.SEMANTICS_LAST_PROCESSED
    return next_offset - 1 if last_processed else next_offset


def offsets_started(
    source: EventSource,
    attempt: Attempt,
    mode: str,
    starts: Mapping[TopicPartitionKey, int],
    checkpoint_id: int,
) -> list[LedgerEvent]:
    """OFFSETS_RESTORED of an attempt started without state: ``starts`` (next offsets), `source` the
    startup ``mode``, `startup_checkpoint` the first checkpoint that bounded them; at the attempt's start."""
    raw: dict[TopicPartitionKey, int | None] = {
        tp: raw_in_dialect(o, source.engine) for tp, o in starts.items()
    }
    bound = {vocab.DETAIL_STARTUP_CHECKPOINT: checkpoint_id}
    return recorder.offsets_restored(source, attempt.started_at, None, raw, mode, extra=bound)


def checkpoint_events(
    source: EventSource,
    stat: CheckpointStat,
    decoded: FlinkCheckpointOffsets,
    *,
    missed: Sequence[Missed] = (),
    commits: bool = True,
    extra: Mapping[str, object] | None = None,
    completed_at: datetime | None = None,
) -> list[LedgerEvent]:
    """A completed checkpoint's CHECKPOINT_SNAPSHOT and CHECKPOINT_COMPLETED (and, with a group and
    ``commits``, its inferred COMMIT_REQUESTED), in the dialect of the state's source.

    ``source``'s engine must be ``decoded.engine`` (`for_engine`): the offsets are normalised in it.
    ``missed``: the run's checkpoints missed since the last recorded one, named on the completion."""
    if source.engine != decoded.engine:
        source = for_engine(source, decoded.engine)
    raw = raw_offsets(decoded)
    common: dict[str, object] = {
        vocab.DETAIL_EXTERNAL_PATH: stat.external_path or decoded.path,
        vocab.DETAIL_SAVEPOINT: stat.is_savepoint,
        vocab.DETAIL_OPERATOR_ID: decoded.operator_id,
        **(extra or {}),
    }
    done = completed_at or at_ms(stat.ack_ms if stat.ack_ms is not None else stat.trigger_ms)
    triggered = min(at_ms(stat.trigger_ms), done)
    completion = dict(common)
    if missed:
        completion[vocab.DETAIL_MISSED_CHECKPOINTS] = [m.as_detail() for m in missed]
    events = source.checkpoint_events(
        vocab.EVENT_CHECKPOINT_SNAPSHOT, triggered, stat.checkpoint_id, raw, common
    )
    events += source.checkpoint_events(
        vocab.EVENT_CHECKPOINT_COMPLETED, done, stat.checkpoint_id, raw, completion
    )
    if commits and source.group_id is not None:
        sent = {tp: o for tp, o in raw.items() if commit_offset_for(o, source.engine) is not None}
        detail = {vocab.DETAIL_INFERRED: True, **(extra or {})}
        events += source.partition_events(
            vocab.EVENT_COMMIT_REQUESTED, done, stat.checkpoint_id, sent, detail
        )
    return events


def agreed_offsets(
    before: Mapping[TopicPartitionKey, int | None], after: Mapping[TopicPartitionKey, int | None]
) -> dict[TopicPartitionKey, int]:
    """The partitions two checkpoints of one run hold at the same raw offset, with it: every
    checkpoint of the run between them held that offset too (a source's position never moves back
    within a run)."""
    return {tp: o for tp, o in before.items() if o is not None and after.get(tp) == o}


def lost_commit(
    source: EventSource, checkpoint_id: int, after: datetime, offsets: Mapping[TopicPartitionKey, int]
) -> list[LedgerEvent]:
    """The commit a checkpoint the ledger lost (its run ended before the sidecar read it, its files
    deleted since) may have requested, of the partitions whose offset it is known to have held
    (``agreed_offsets``): COMMIT_REQUESTED `inferred` and `recovered`, at ``after`` (the completion
    of the checkpoint before it, which it followed). No CHECKPOINT_* events: its completion is not
    known, only that the job commits that offset if it completed."""
    sent = {tp: o for tp, o in offsets.items() if commit_offset_for(o, source.engine) is not None}
    detail = {vocab.DETAIL_INFERRED: True, vocab.DETAIL_RECOVERED: True}
    return source.partition_events(vocab.EVENT_COMMIT_REQUESTED, after, checkpoint_id, sent, detail)


def commits_failed(
    source: EventSource,
    stat: CheckpointStat,
    decoded: FlinkCheckpointOffsets,
    failed: int,
    total_failed: int,
    when: datetime,
) -> list[LedgerEvent]:
    """COMMIT_FAILED per committable partition of the newest recorded checkpoint, when the source's
    commitsFailed counter rose by ``failed`` (to ``total_failed``) since the last sample.

    The counter says how many commits failed, not whose: Flink's reader commits each completed
    checkpoint's offsets (and drops a commit still in flight for a newer one), so the failures are
    put on the newest checkpoint whose commit was requested before the sample. `attempt` is the
    counter's value, so two rises against the same checkpoint are two events."""
    if source.engine != decoded.engine:
        source = for_engine(source, decoded.engine)
    raw = raw_offsets(decoded)
    sent = {tp: o for tp, o in raw.items() if commit_offset_for(o, source.engine) is not None}
    detail = {
        vocab.DETAIL_ERROR: vocab.ERROR_COMMITS_FAILED_METRIC,
        vocab.DETAIL_ATTEMPT: total_failed,
        vocab.DETAIL_COMMITS_FAILED: failed,
        vocab.DETAIL_INFERRED: True,
        vocab.DETAIL_MESSAGE: (
            f"the Kafka source's commitsFailed rose by {failed} (all subtasks) since the last poll; "
            f"Flink does not say which checkpoints' commits they were: put on checkpoint {stat.checkpoint_id}"
        ),
    }
    return source.partition_events(vocab.EVENT_COMMIT_FAILED, when, stat.checkpoint_id, sent, detail)


def for_engine(source: EventSource, engine: str) -> EventSource:
    return EventSource(source.job_name, source.run_id, engine, source.group_id)


@dataclass
class RunCounts:
    """What a run's RUN_STOPPED counts."""

    recorded: int = 0
    failed: int = 0
    missed: list[Missed] | None = None

    def counts(self) -> recorder.RunCounts:
        return recorder.RunCounts(
            checkpoints_recorded=self.recorded,
            failed_checkpoints=self.failed,
            missed_checkpoints=[m.as_detail() for m in self.missed or []],
        )

    def detail(self) -> dict[str, Any]:
        return self.counts().detail()


def stop_reason(state: str) -> str:
    """RUN_STOPPED's reason for a job that reached the terminal ``state`` (Flink's JobStatus)."""
    return state.lower()


def run_stopped(source: EventSource, when: datetime, state: str, counts: RunCounts) -> LedgerEvent:
    """RUN_STOPPED of a run whose job reached the terminal ``state`` (Flink's JobStatus)."""
    return recorder.run_stopped(source, when, None, stop_reason(state), counts.counts())
