"""Pure pieces of the reference streaming job: Spark checkpoint files, startup plans, the ledger facts
a start recovers from, sink rows (the events of a start and a recovery: `stream.recorder`).

One micro-batch is one checkpoint: its id is Spark's batch id, its offsets are the end offsets Spark
wrote to `<checkpoint>/offsets/<id>` before running it, and it is complete once Spark wrote
`<checkpoint>/commits/<id>` after the sink accepted its output.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from app.contracts import vocabulary as vocab
from app.contracts.offsets import TopicPartitionKey
from app.contracts.tables import SINK_SCHEMA
from app.errors import CheckpointFormatError, OffsetAuditError

ENGINE = vocab.ENGINE_SPARK


# --- Spark's checkpoint files --------------------------------------------------------------------


def parse_offset_log(text: str) -> dict[TopicPartitionKey, int]:
    """`offsets/<batch>` -> {(topic, partition): end offset}. Line 1 is the version, line 2 metadata,
    then one line per source; a Kafka source's line is {"topic": {"partition": offset}}."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise CheckpointFormatError(f"unexpected offset log content: {text[:120]!r}")
    out: dict[TopicPartitionKey, int] = {}
    for line in lines[2:]:
        try:
            source = json.loads(line)
        except ValueError as exc:
            raise CheckpointFormatError(f"offset log source line is not JSON: {line[:120]!r}") from exc
        if not isinstance(source, dict):
            continue  # a non-Kafka source (or '-' for none): nothing of ours
        for topic, partitions in source.items():
            for partition, offset in partitions.items():
                out[(str(topic), int(partition))] = int(offset)
    return out


def parse_initial_offsets(text: str) -> dict[TopicPartitionKey, int]:
    """`sources/<source>/0` -> {(topic, partition): offset}: where a Kafka source started.

    Spark writes it once, when the source first resolves its starting offsets (before batch 0), and
    re-reads it on every restart until a batch commits: a zero byte (kept for files of Spark 2.1,
    SPARK-19517), a version line, then one JSON line {"topic": {"partition": offset}}.
    """
    lines = [ln for ln in text.removeprefix("\x00").splitlines() if ln.strip()]
    if len(lines) != 2 or not lines[0].startswith("v"):
        raise CheckpointFormatError(f"unexpected initial offsets content: {text[:120]!r}")
    try:
        source = json.loads(lines[1])
    except ValueError as exc:
        raise CheckpointFormatError(f"initial offsets are not JSON: {lines[1][:120]!r}") from exc
    if not isinstance(source, dict) or not all(isinstance(p, dict) for p in source.values()):
        raise CheckpointFormatError(
            f"initial offsets are not {{topic: {{partition: offset}}}}: {lines[1][:120]!r}"
        )
    return {(str(t), int(p)): int(o) for t, partitions in source.items() for p, o in partitions.items()}


def batch_ids(names: Iterable[str]) -> list[int]:
    """Batch ids among a checkpoint log directory's file names (skips .crc and temp files)."""
    return sorted(int(n) for n in names if n.isdigit())


# --- startup -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionStart:
    offset: int | None  # None: the mode resolves it later (Spark reads from the checkpoint)
    source: str  # checkpoint | group | earliest | latest | timestamp | specific


@dataclass(frozen=True)
class StartupPlan:
    mode: str
    starts: Mapping[TopicPartitionKey, PartitionStart]
    restored_checkpoint_id: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def starting_offsets_json(self) -> str:
        """Spark's `startingOffsets` option: explicit numbers for every partition."""
        by_topic: dict[str, dict[str, int]] = {}
        for (topic, partition), start in sorted(self.starts.items()):
            if start.offset is None:
                raise OffsetAuditError(f"no start offset resolved for {topic}-{partition}")
            by_topic.setdefault(topic, {})[str(partition)] = start.offset
        return json.dumps(by_topic, sort_keys=True)


def plan_fresh_start(
    mode: str,
    partitions: Iterable[TopicPartitionKey],
    watermarks: Mapping[TopicPartitionKey, tuple[int, int]],
    committed: Mapping[TopicPartitionKey, int] | None = None,
    by_timestamp: Mapping[TopicPartitionKey, int] | None = None,
    specific: Mapping[TopicPartitionKey, int] | None = None,
    reset: str = vocab.RESTORE_EARLIEST,
) -> StartupPlan:
    """Where each partition starts when there is no checkpoint state, as Flink's startup modes do.

    Partitions the mode has no offset for fall back to `reset` (earliest or latest), and the ledger
    records that fallback as the source, so a restart's forensics can tell a group resume from a reset.
    """
    if mode not in vocab.STARTUP_MODES:
        raise OffsetAuditError(f"unknown startup mode '{mode}', expected one of {vocab.STARTUP_MODES}")
    if reset not in vocab.RESET_STRATEGIES:
        raise OffsetAuditError(f"reset strategy must be one of {vocab.RESET_STRATEGIES}, got '{reset}'")
    starts: dict[TopicPartitionKey, PartitionStart] = {}
    offsets_by_mode: dict[str, Mapping[TopicPartitionKey, int] | None] = {
        vocab.RESTORE_GROUP: committed,
        vocab.RESTORE_TIMESTAMP: by_timestamp,
        vocab.RESTORE_SPECIFIC: specific,
    }
    chosen = offsets_by_mode.get(mode) or {}
    notes: list[str] = []
    for tp in sorted(partitions):
        low, high = watermarks[tp]
        if mode == vocab.RESTORE_EARLIEST:
            starts[tp] = PartitionStart(low, vocab.RESTORE_EARLIEST)
        elif mode == vocab.RESTORE_LATEST:
            starts[tp] = PartitionStart(high, vocab.RESTORE_LATEST)
        elif tp in chosen and chosen[tp] >= 0:
            # Kafka resets an out-of-range position; clamp the same way and say so.
            offset = min(max(chosen[tp], low), high)
            if offset != chosen[tp]:
                notes.append(f"{tp[0]}-{tp[1]}: {mode} offset {chosen[tp]} outside [{low}, {high}], clamped")
            starts[tp] = PartitionStart(offset, mode)
        else:
            starts[tp] = PartitionStart(low if reset == vocab.RESTORE_EARLIEST else high, reset)
    return StartupPlan(mode=mode, starts=starts, notes=tuple(notes))


def plan_checkpoint_resume(
    offset_log: Mapping[int, Mapping[TopicPartitionKey, int]],
    committed_batches: Iterable[int],
    initial_offsets: Mapping[TopicPartitionKey, int] | None = None,
    previous_starts: Mapping[TopicPartitionKey, int] | None = None,
) -> StartupPlan:
    """Resuming from Spark's checkpoint: where Spark will really read from, per partition.

    With a committed batch, the run starts at the end of the last one: a batch in the offset log
    without a commit is re-run by Spark from the previous batch's end, which is the same position.

    With none (a run that died before its first batch committed, between `offsets/0` and
    `commits/0`, or before `offsets/0`), Spark starts again from the offsets its source recorded
    when it first started (`initial_offsets`, from `sources/0/0`), ignoring any startingOffsets.
    Partitions those do not cover (the file was unreadable) take where the previous run said it
    started (`previous_starts`, its OFFSETS_RESTORED rows), else stay unknown (offset None).
    """
    done = [b for b in committed_batches if b in offset_log]
    if done:
        last = max(done)
        starts = {tp: PartitionStart(off, vocab.RESTORE_CHECKPOINT) for tp, off in offset_log[last].items()}
        return StartupPlan(mode=vocab.RESTORE_CHECKPOINT, starts=starts, restored_checkpoint_id=last)
    initial = {tp: o for tp, o in (initial_offsets or {}).items() if o >= 0}  # never a sentinel
    previous = previous_starts or {}
    planned = offset_log[min(offset_log)] if offset_log else {}
    partitions = sorted({*planned, *(initial_offsets or {})} or previous)
    notes: list[str] = []
    if offset_log:
        notes.append(f"checkpoint {min(offset_log)} was planned but never committed: Spark replays it")
    from_ledger = [tp for tp in partitions if tp not in initial and tp in previous]
    if from_ledger:
        notes.append(
            "start offsets of "
            + ", ".join(f"{t}-{p}" for t, p in from_ledger)
            + f" taken from the previous run's {vocab.EVENT_OFFSETS_RESTORED}"
            + " (no initial offsets in the checkpoint)"
        )
    starts = {
        tp: PartitionStart(initial.get(tp, previous.get(tp)), vocab.RESTORE_CHECKPOINT) for tp in partitions
    }
    return StartupPlan(
        mode=vocab.RESTORE_CHECKPOINT, starts=starts, restored_checkpoint_id=None, notes=tuple(notes)
    )


# --- crash recovery ------------------------------------------------------------------------------

# A batch's events carry the time Spark wrote its checkpoint file (`recorder.batch_events`,
# `recorder.recovery_events`), a time of the file system's clock; this much slack keeps a skew between that
# clock and the ledger writer's (or a commit answered late) from putting a retained batch's events
# on a day a bounded read skips.
FACTS_SLACK: Final = timedelta(days=1)


def facts_since(oldest_batch_written: datetime | None) -> date | None:
    """The first ledger day (event_date) a start reads to learn what the ledger holds of the
    checkpoint's retained batches: the UTC day Spark wrote the oldest of them, less `FACTS_SLACK`.
    None (read every day) when that time is unknown (no offsets file, no modification time).

    Spark keeps only its last batches (`minBatchesToRetain`, 100 by default) and a start recovers
    only those, so the days before them hold nothing a start needs but cost a read of every file."""
    if oldest_batch_written is None:
        return None
    return (oldest_batch_written.astimezone(UTC) - FACTS_SLACK).date()


@dataclass(frozen=True)
class LedgerFacts:
    """What the ledger already says about one job's checkpoints (read at startup)."""

    snapshot_ids: frozenset[int]
    completed_ids: frozenset[int]
    open_commit_attempts: Mapping[tuple[str, int], int]  # (run_id, attempt) -> checkpoint id
    last_run_id: str | None


# --- sink rows -----------------------------------------------------------------------------------


def to_sink_rows(kafka_df: DataFrame, checkpoint_id: int, run_id: str) -> DataFrame:
    """Kafka source rows -> sink rows carrying their coordinates and the checkpoint that wrote them."""
    return kafka_df.select(
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.lit(checkpoint_id).cast("long").alias("_checkpoint_id"),
        F.lit(run_id).alias("_run_id"),
        F.col("key"),
        F.col("value"),
    ).select(*[F.col(f.name).cast(f.dataType) for f in SINK_SCHEMA.fields])
