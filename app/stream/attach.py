"""Audit your own streaming query: attach the ledger to it in one line.

    from app.audit import attach

    query = df.writeStream.format("delta").option("checkpointLocation", cp).start(path)
    with attach(query, job_name="payments", ledger="s3a://bucket/audit/ledger"):
        query.awaitTermination()
    # leaving the block, even by a failed query's error, waits until the run's last events are in
    # the ledger (`Attachment.close`)

It writes the ledger events the reference job writes (CONTRACTS.md section 4) for every Kafka
source of the query (subscribe, subscribePattern, assign, several sources in one query):
RUN_STARTED and OFFSETS_RESTORED once, dated when the run started however late the attach came
(`run_started_at`), a CHECKPOINT_SNAPSHOT and a CHECKPOINT_COMPLETED per completed batch (the batch
id is the checkpoint id, dated when Spark wrote its files), RUN_STOPPED when the query ends.

With ``group_id`` each completed batch's end offsets are committed to that consumer group by the
reference job's committer (`stream.committer.OffsetCommitter`: one commit in flight, superseded
ones skipped, COMMIT_* outcomes in the ledger), so lag tools see the query. Spark's offsets are
already Kafka's committed-offset convention (the next offset to read): they are committed as they
stand. A batch's COMMIT_REQUESTED goes into the ledger in the same Delta commit as its snapshot
and completion, and outcomes with the next batch or RUN_STOPPED, as the reference job does.

Spark's progress events only say *when* to look: they are asynchronous and can be lost or late, so
what is written comes from the query's checkpoint (`offsets/<batch>`: the batch's end offsets;
`commits/<batch>`: the batch completed). A listener hands a wake-up to one background thread
through a bounded queue and returns at once; that thread does every read and write, retries a
failed write and counts what still failed (a warning, and `ledger_write_failures` in RUN_STOPPED).
Nothing it does raises into Spark or blocks the query.

On attach, the batches the checkpoint holds that the job's ledger lacks (a run that died before
flushing them) are written first, as the reference job's start does (`stream.recorder`): their
completions are claims of the commits the dead run may have sent, and its commit requests left
unanswered are closed as outcome-unknown. Recovered batches are not committed again: the next
completed batch's commit covers their offsets.

Importing this module starts nothing; `attach` needs an active SparkSession (the query's). It sits
beside the other writers of a run (the reference job, `ledger-import`); `app.audit` is its public
face, and `app.attach` keeps the names importable from where they were.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from types import TracebackType
from typing import Any, Final, NamedTuple, TypeVar

from confluent_kafka import Consumer, KafkaException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.streaming.query import StreamingQuery

from app.config import StorageConfig
from app.contracts import vocabulary as vocab
from app.contracts.offsets import EventSource, LedgerEvent, TopicPartitionKey
from app.errors import AttachError
from app.kafka.clients import librdkafka_logger
from app.kafka.commit import close_within, open_commit_client
from app.stream.checkpoint import COMMITS, OFFSETS, CheckpointFiles, ledger_since
from app.stream.committer import OffsetCommitter
from app.stream.ledger import LedgerWriter
from app.stream.recorder import (
    RunCounts,
    RunRecorder,
    RunStart,
    batch_events,
    plan_restored,
    recover_unrecorded,
)
from app.stream.startup import ENGINE, LedgerFacts, PartitionStart, StartupPlan, plan_checkpoint_resume

__all__ = ["Attachment", "GroupCommits", "SessionAudit", "attach", "attach_session", "checkpoint_root"]

# The logger README names for attached runs: its name stayed when the module moved into `stream`.
log = logging.getLogger("app.attach")

# Wake-ups waiting for the writer thread; one pending wake-up covers any number of batches, so a
# full queue only drops wake-ups that would find nothing new.
QUEUE_SIZE: Final = 16
# A failed ledger operation is tried this often in all, waiting RETRY_WAIT_S, then twice that, ...
RETRY_ATTEMPTS: Final = 3
RETRY_WAIT_S: Final = 1.0
# How long `Attachment.close` waits for the run's last events by default.
CLOSE_TIMEOUT_S: Final = 120.0
# `commit_timeout_s`'s default: how long one group commit waits for the coordinator's answer
# (unanswered, COMMIT_FAILED _TIMED_OUT), and the run's end for the commit in flight (then
# COMMIT_FAILED OUTCOME_UNKNOWN).
COMMIT_TIMEOUT_S: Final = 30.0

_WAKE: Final = "wake"
_T = TypeVar("_T")


def utc_now() -> datetime:
    return datetime.now(UTC)


def checkpoint_root(query: StreamingQuery) -> str:
    """The checkpoint directory Spark resolved for ``query`` (its `checkpointLocation`).

    PySpark has no public accessor: this reads the JVM query's `resolvedCheckpointRoot`, the one
    place that depends on Spark's internals, so a Spark that changes it fails here, by name."""
    try:
        return str(query._jsq.streamingQuery().resolvedCheckpointRoot())
    except Exception as exc:  # py4j raises its own errors for a missing method or attribute
        raise AttachError(
            "cannot read the query's checkpoint location (StreamingQuery.resolvedCheckpointRoot): "
            f"this Spark version does not expose it as expected ({type(exc).__name__}: {exc})"
        ) from exc


@dataclass(frozen=True)
class AttachedStart:
    """Where the attached run starts: its first batch id and the startup plan, once known (what its
    RUN_STARTED then says is the recorder's `RunStart`)."""

    first_batch: int
    plan: StartupPlan | None


def run_start(
    offset_log: Mapping[int, Mapping[TopicPartitionKey, int]],
    committed: list[int],
    reported: list[int],
    initial: Mapping[TopicPartitionKey, int] | None,
    previous_starts: Callable[[], Mapping[TopicPartitionKey, int]],
) -> AttachedStart:
    """The run's first batch and its start, from the checkpoint as the run found it.

    ``reported`` are the batch ids the query already reported (an attach a moment after `start()`
    can come after the first batches): the run began at the first of them. Otherwise it begins
    after the last committed batch. With a committed batch before it, the run starts where that
    batch ended (`plan_checkpoint_resume`); with none, where its Kafka sources started
    (``initial``, `sources/<n>/0`), which Spark writes before the first batch: until then the plan
    is unknown (None). ``previous_starts`` (the job's last run's OFFSETS_RESTORED) is asked for
    only in that last case: it reads the job's ledger, which a start with a committed batch need
    not touch."""
    first = min(reported) if reported else max(committed, default=-1) + 1
    before = {b: o for b, o in offset_log.items() if b < first}
    done = [b for b in committed if b < first]
    if any(b in before for b in done):
        return AttachedStart(first, plan_checkpoint_resume(before, done))
    if initial is None:
        return AttachedStart(first, None)
    previous = previous_starts()
    if before or previous:
        # A run that died before its first commit: Spark starts again where its sources started.
        return AttachedStart(first, plan_checkpoint_resume(before, done, initial, previous))
    starts = {tp: PartitionStart(o, vocab.RESTORE_SPECIFIC) for tp, o in initial.items()}
    note = "a new checkpoint: where Spark's Kafka sources resolved their startingOffsets"
    return AttachedStart(first, StartupPlan(mode=vocab.RESTORE_SPECIFIC, starts=starts, notes=(note,)))


def spark_instant(text: str | None) -> datetime | None:
    """An instant as Spark's listener events write it (`2026-03-04T10:00:00.123Z`, UTC), None when
    absent or unreadable (a time that cannot be read dates nothing)."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def run_started_at(
    attached_at: datetime, query_started: datetime | None, reported: Iterable[datetime | None]
) -> datetime:
    """When the attached run started: the earliest of the attach itself, the query's start as
    Spark's listener reported it (``query_started``, known to `attach_session`) and the trigger
    times of the progress reports the run made before the attach (``reported``).

    An attach can come after the run's first batches (`attach_session` attaches a query at its
    first progress report, `attach` may be called late): the run's RUN_STARTED and OFFSETS_RESTORED
    must still be dated before those batches' completions, which are dated when Spark wrote their
    files (`recorder.batch_events`), or reconcile takes the run's own first batch for the last
    one before the restart. A batch's trigger starts before Spark plans or commits it, so the
    first report's time is never later than any of the run's checkpoint files."""
    return min([attached_at, *(t for t in (query_started, *reported) if t is not None)])


@dataclass(frozen=True)
class GroupCommits:
    """The consumer group an attached run commits to: the committer and its Kafka client."""

    group_id: str
    committer: OffsetCommitter
    consumer: Consumer
    timeout_s: float = COMMIT_TIMEOUT_S

    def take_outcomes(self) -> list[LedgerEvent]:
        """The committer's COMMIT_* events recorded so far (it records no checkpoint events: those
        come from the checkpoint, `recorder.batch_events`)."""
        return self.committer.drain()

    def close(self) -> list[LedgerEvent]:
        """Wait for the commit in flight (bounded), close out what is left unanswered, close the
        client; returns the last outcomes."""
        if not self.committer.close(timeout=self.timeout_s):
            log.warning(
                "the last offset commit to group %s did not finish in %.0fs",
                self.group_id,
                self.timeout_s,
            )
            self.committer.abandon_in_flight()
        close_within(self.consumer, self.timeout_s)
        return self.take_outcomes()


class _Listener(StreamingQueryListener):
    """Forwards one query's progress and termination to its Attachment; never raises into Spark."""

    def __init__(self, attachment: Attachment) -> None:
        self._attachment = attachment

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's listener API
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        try:
            if str(event.progress.id) == self._attachment.query_id:
                self._attachment.wake()
        except Exception:  # a listener error must never reach Spark's listener bus
            log.exception("progress handling failed")

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        try:
            if str(event.id) == self._attachment.query_id:
                failure = event.exception
                self._attachment.stop(f"query failed: {failure}" if failure else "query terminated")
        except Exception:
            log.exception("termination handling failed")


class Attachment:
    """The audit attached to one streaming query: a listener and the thread that writes its ledger.

    Made by `attach`. `close()` after the query ended waits until RUN_STOPPED is written; as a
    context manager, leaving the block closes it (`close_if_ended`), also when the block raised.
    ``query_started``: when Spark says the run started, where the attach knows it (see
    `run_started_at`). `ledger_write_failures` counts the ledger operations that failed after
    their retries."""

    def __init__(
        self,
        query: StreamingQuery,
        spark: SparkSession,
        writer: LedgerWriter,
        checkpoint: CheckpointFiles,
        clock: Callable[[], datetime] = utc_now,
        commits: GroupCommits | None = None,
        query_started: datetime | None = None,
    ) -> None:
        self.query = query
        self.query_id = str(query.id)
        self.spark = spark
        self.writer = writer
        self.checkpoint = checkpoint
        self.clock = clock
        # The run's start: the attach's time until `_begin` knows better (`run_started_at`).
        self.started_at = clock()
        self._query_started = query_started
        self.ledger_write_failures = 0
        self.recovered_events = 0
        self.batches_written = 0
        self.commits = commits
        self.group_id = None if commits is None else commits.group_id
        self._events = EventSource(writer.job_name, writer.run_id, ENGINE, self.group_id)
        self.recorder = RunRecorder(writer, self._events)
        self._queue: queue.Queue[str] = queue.Queue(maxsize=QUEUE_SIZE)
        self._stop_reason: str | None = None
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._start: AttachedStart | None = None
        self._run_started = False
        self._written: set[int] = set()  # this run's batches whose events are in the ledger
        self._handed: set[int] = set()  # this run's batches handed to the committer
        self._outcomes: list[LedgerEvent] = []  # commit events taken from the committer, unwritten
        self._last_batch: int | None = None
        self._listener = _Listener(self)
        self._thread = threading.Thread(target=self._work, name=f"ledger-{writer.job_name}", daemon=True)

    # --- the listener's side (Spark's listener thread): hand over and return --------------------

    def wake(self) -> None:
        """A batch may have completed: have the writer thread look at the checkpoint."""
        # A full queue: a wake-up is already waiting, and it reads the whole checkpoint.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_WAKE)

    def stop(self, reason: str) -> None:
        """The query ended: write what is left and RUN_STOPPED (the first reason given wins)."""
        if self._stop_reason is None:
            self._stop_reason = reason
        self._stopping.set()
        self.wake()

    # --- the user's side ------------------------------------------------------------------------

    def start(self) -> Attachment:
        self.spark.streams.addListener(self._listener)
        self._thread.start()
        if not self.query.isActive:  # ended before the listener was there to hear it
            self.stop(self._ended_reason())
        return self

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """Once the query has ended, wait until the run's last events and RUN_STOPPED are written
        (True), at most ``timeout`` seconds (False). Removes the listener."""
        if not self.query.isActive:
            # Spark's termination event is asynchronous: the query's own state is enough.
            self.stop(self._ended_reason())
        finished = self._done.wait(timeout)
        if finished:
            self.spark.streams.removeListener(self._listener)
        else:
            log.warning("the ledger writer of %s did not finish in %.0fs", self.writer.job_name, timeout)
        return finished

    def __enter__(self) -> Attachment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Leaving ``with attach(...)``: `close()`, whether the block ended or raised (a failed
        query's `awaitTermination()` raises), so the run's end is written either way."""
        self.close_if_ended()

    def close_if_ended(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """`close()` once the query has ended; while it still runs (the block was left by an
        interrupt or an error of its own), nothing to wait for: the listener stays and writes the
        run's end when the query ends, if the process is still there."""
        if self.query.isActive:
            log.warning(
                "the audit of job %s was left while its query still runs: the run's end is written "
                "when the query ends",
                self.writer.job_name,
            )
            return False
        return self.close(timeout)

    def _ended_reason(self) -> str:
        failure = self.query.exception()
        return f"query failed: {failure}" if failure is not None else "query terminated"

    # --- the writer thread ------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            self._step(self._begin)
            while not self._stopping.is_set():
                self._queue.get()
                self._step(self._sync)
            self._step(self._sync)
            self._step(self._finish)
        finally:
            self._done.set()

    def _step(self, step: Callable[[], None]) -> None:
        """One step of the writer thread; an error in it (a checkpoint file that could not be read)
        is counted and logged, and the next wake-up tries again: never raised out of the thread."""
        try:
            step()
        except Exception:
            self.ledger_write_failures += 1
            log.exception(
                "the ledger writer of %s failed; it tries again at the next batch", self.writer.job_name
            )

    def _retry(self, what: str, operation: Callable[[], _T]) -> tuple[bool, _T | None]:
        """Run ``operation``, retried; (False, None) and one failure counted when every try failed."""
        wait = RETRY_WAIT_S
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                return True, operation()
            except Exception as exc:
                if attempt == RETRY_ATTEMPTS:
                    self.ledger_write_failures += 1
                    log.warning(
                        "ledger %s of job %s failed %d times (%s: %s); the next attach recovers it "
                        "from the checkpoint",
                        what,
                        self.writer.job_name,
                        attempt,
                        type(exc).__name__,
                        exc,
                    )
                    return False, None
                time.sleep(wait)  # a back-off between tries, not a synchronisation
                wait *= 2
        return False, None

    def _begin(self) -> None:
        """The run's start: the ledger, what a dead run left unwritten, and where this run starts."""
        self._retry("creation", self.writer.ensure)

        def previous_starts() -> Mapping[TopicPartitionKey, int]:
            _, previous = self._retry("read", self.writer.previous_run_starts)
            return previous or {}

        offset_log = self.checkpoint.offset_log()
        committed = self.checkpoint.log_ids(COMMITS)
        progress = self.query.recentProgress
        reported = [int(p.batchId) for p in progress]
        self.started_at = run_started_at(
            self.started_at, self._query_started, [spark_instant(p.timestamp) for p in progress]
        )
        self._start = run_start(
            offset_log, committed, reported, self.checkpoint.source_initial_offsets(), previous_starts
        )
        done = [b for b in committed if b < self._start.first_batch]
        # A batch planned but never committed by the dead run is run again by this one: it is ours.
        last_done = max(done, default=-1)
        before = {b: o for b, o in offset_log.items() if b <= last_done}
        # Only the ledger days of the batches recovered (see `stream.checkpoint.ledger_since`).
        oldest = min(before, default=None)
        since = ledger_since(self.checkpoint, oldest)
        ok, facts = self._retry("read", lambda: self.writer.facts(since, oldest))
        if ok and facts is not None:
            self._recover(facts, before, done)
        self._write_run_start()

    def _recover(
        self,
        facts: LedgerFacts,
        before: Mapping[int, Mapping[TopicPartitionKey, int]],
        done: list[int],
    ) -> None:
        """Events of the batches before this run (``before``: their offset log; ``done``: those
        committed) that the ledger lacks, as the reference job's start."""
        if self.commits is None:
            # Without a group this run commits nothing, and a dead run's open requests belong to a
            # group only an attach with that group_id can speak for.
            facts = LedgerFacts(facts.snapshot_ids, facts.completed_ids, {}, facts.last_run_id)
        events = recover_unrecorded(
            self.checkpoint,
            facts,
            before,
            done,
            self.writer.job_name,
            self.group_id,
            self.writer.run_id,
            self.clock(),
        )
        if events:
            ok, count = self._retry("recovery", lambda: self.recorder.recover(events))
            if ok and count:
                self.recovered_events = count
                log.warning(
                    "recovered %d ledger events of job %s from its checkpoint", count, self.writer.job_name
                )

    def _write_run_start(self) -> None:
        """RUN_STARTED and OFFSETS_RESTORED, once the run's start is known (see `run_start`)."""
        if self._run_started or self._start is None:
            return
        plan = self._start.plan
        if plan is None:
            plan = self._resolve_plan()
            if plan is None:
                return
        start = RunStart(
            plan.mode,
            plan.restored_checkpoint_id,
            plan.notes,
            query_id=self.query_id,
            checkpoint=self.checkpoint.directory,
            attached=True,
        )
        restored = plan_restored(self._events, plan, self.started_at)
        self._retry("run start", lambda: self.recorder.start(self.started_at, start, restored))
        # Written or counted as failed: either way it is not tried again with every batch.
        self._run_started = True

    def _resolve_plan(self) -> StartupPlan | None:
        """A run without a committed batch before it starts where its sources started, which Spark
        records before its first batch; a batch committed without that file starts nowhere known."""
        assert self._start is not None
        initial = self.checkpoint.source_initial_offsets()
        if initial is None and not any(
            b >= self._start.first_batch for b in self.checkpoint.log_ids(COMMITS)
        ):
            return None
        start = run_start({}, [], [], initial or {}, dict)
        self._start = AttachedStart(self._start.first_batch, start.plan)
        return start.plan

    def _sync(self) -> None:
        """Write every batch of this run that the checkpoint marks complete and the ledger lacks."""
        if self._start is None:
            self._begin()  # it failed before: it is idempotent, and nothing else can be written first
        self._write_run_start()
        assert self._start is not None
        first = self._start.first_batch
        for batch in self.checkpoint.log_ids(COMMITS):
            if batch < first or batch in self._written:
                continue
            offsets = self.checkpoint.offsets_of(batch)
            if offsets is None:
                continue  # Spark writes offsets/<n> before commits/<n>; a missing one was cleaned up
            self._commit(batch, offsets)
            events = [
                *batch_events(
                    self.checkpoint, self._events, batch, offsets, completed=True, now=self.clock()
                ),
                *self._outcomes,
            ]
            ok, wrote = self._retry(f"write of batch {batch}", partial(self.recorder.batch, batch, events))
            if ok and not wrote and self._outcomes:
                # The batch was in the ledger already (a write that went through but reported an
                # error), so these commit events were not: they go in on their own.
                ok, _ = self._retry("commit events", partial(self.recorder.record, self._outcomes))
            if not ok:
                # In order or not at all: Delta skips a transaction version at or below the latest
                # one of its app id, so a later batch written first would make this one's retry a
                # silent no-op. The next wake-up (or the next attach's recovery) tries from here.
                break
            self._outcomes = []
            self._written.add(batch)
            self.batches_written += 1
            self._last_batch = max(batch, self._last_batch or 0)

    def _commit(self, batch: int, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Hand a completed batch to the committer, once; its commit request (sent by the
        committer's own thread) is then written with the batch's events, in one Delta commit."""
        if self.commits is None or batch in self._handed:
            return
        committer = self.commits.committer
        committer.snapshot(batch, offsets)
        committer.notify_checkpoint_complete(batch)
        self._handed.add(batch)
        self._outcomes += self.commits.take_outcomes()

    def _finish(self) -> None:
        """At the query's end: a snapshot of the batch it planned but did not complete (the next
        start runs it again), and RUN_STOPPED."""
        if self._start is None:
            self._begin()
        assert self._start is not None
        first = self._start.first_batch
        committed = set(self.checkpoint.log_ids(COMMITS))
        planned = [b for b in self.checkpoint.log_ids(OFFSETS) if b >= first and b not in committed]
        events: list[LedgerEvent] = []
        for batch in planned:
            offsets = self.checkpoint.offsets_of(batch)
            if offsets is not None:
                events += batch_events(
                    self.checkpoint, self._events, batch, offsets, completed=False, now=self.clock()
                )
        committer = None
        if self.commits is not None:
            self._outcomes += self.commits.close()
            committer = self.commits.committer
        counts = RunCounts(
            batches=self.batches_written,
            recovered_events=self.recovered_events,
            successful_commits=None if committer is None else committer.successful_commits,
            failed_commits=None if committer is None else committer.failed_commits,
            # Counted before this write: a failure of RUN_STOPPED itself is only in the log.
            ledger_write_failures=self.ledger_write_failures,
        )
        reason = self._stop_reason or "query terminated"
        stopped_at = self.clock()
        pending = [*events, *self._outcomes]
        self._retry(
            "run stop", lambda: self.recorder.stop(stopped_at, self._last_batch, reason, counts, pending)
        )
        log.info(
            "run %s of job %s stopped: %d batches written, %d ledger write failures",
            self.writer.run_id,
            self.writer.job_name,
            self.batches_written,
            self.ledger_write_failures,
        )


def attach(
    query: StreamingQuery,
    *,
    job_name: str,
    ledger: str,
    storage_options: Mapping[str, str] | None = None,
    group_id: str | None = None,
    kafka_options: Mapping[str, Any] | None = None,
    commit_timeout_s: float = COMMIT_TIMEOUT_S,
) -> Attachment:
    """Audit ``query``: write its ledger events to the Delta table at ``ledger`` as job ``job_name``.

    Call it right after `start()`. ``storage_options`` are Hadoop filesystem properties (`fs.*`,
    e.g. `fs.s3a.endpoint`) for the ledger's object store; without them the active session's Hadoop
    configuration is used. With ``group_id``, each completed batch's end offsets are committed to
    that consumer group; ``kafka_options`` are then the commit client's settings in confluent-kafka
    (librdkafka) names: `bootstrap.servers` and whatever security settings the cluster needs
    (`security.protocol`, `sasl.*`, `ssl.*`); they are not read from the query's source options,
    whose Java client names differ, and their values are never logged. Without ``group_id`` nothing
    is committed. ``commit_timeout_s`` bounds how long one commit waits for the group
    coordinator's answer (unanswered, it fails as _TIMED_OUT) and how long the run's end waits for
    the commit in flight (then closed out as OUTCOME_UNKNOWN). Returns the `Attachment`: call its
    `close()` once the query has ended.
    Raises AttachError when the query's checkpoint cannot be found or the commit settings are
    unusable; never fails the query later (a broker that is down makes commits fail, recorded).
    """
    if not job_name:
        raise AttachError("attach: job_name must name the job")
    if not ledger:
        raise AttachError("attach: ledger must name the ledger table's location")
    conf = commit_client_conf(group_id, kafka_options)
    check_commit_timeout(commit_timeout_s)
    commits = GroupSettings(group_id, conf, commit_timeout_s)
    return _attach(SparkSession.active(), query, job_name, ledger, storage_options, commits)


def _attach(
    spark: SparkSession,
    query: StreamingQuery,
    job_name: str,
    ledger: str,
    storage_options: Mapping[str, str] | None,
    group: GroupSettings,
    query_started: datetime | None = None,
) -> Attachment:
    checkpoint = CheckpointFiles(spark, checkpoint_root(query))
    storage = StorageConfig(options=dict(storage_options)) if storage_options else spark
    # The run is Spark's run of the query; the query's id scopes the batches' Delta transaction ids
    # (a new checkpoint restarts batch ids at 0 under a new query id).
    run_id = str(query.runId)
    writer = LedgerWriter(storage, ledger, job_name, run_id, scope=str(query.id))
    commits = group.commits(job_name, run_id)
    attachment = Attachment(query, spark, writer, checkpoint, commits=commits, query_started=query_started)
    return attachment.start()


def commit_client_conf(
    group_id: str | None, kafka_options: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The commit client's librdkafka settings, None without a group; AttachError naming the
    argument or key that is missing (never a value: they may be secrets)."""
    if group_id is None:
        if kafka_options:
            raise AttachError("attach: kafka_options are the group commit's settings; they need group_id")
        return None
    if not group_id:
        raise AttachError("attach: group_id must name the consumer group (or be None: no commits)")
    options = dict(kafka_options or {})
    if not options.get("bootstrap.servers"):
        raise AttachError(
            "attach: kafka_options must hold 'bootstrap.servers' (librdkafka names) to commit to group "
            f"{group_id}"
        )
    if "group.id" in options:
        raise AttachError("attach: kafka_options must not set 'group.id'; group_id names the group")
    return {"logger": librdkafka_logger(), **options}


def check_commit_timeout(timeout_s: float) -> None:
    """AttachError unless ``timeout_s`` is a positive, finite number of seconds (the waits it bounds
    cannot take infinity)."""
    number = isinstance(timeout_s, int | float) and not isinstance(timeout_s, bool)
    if not number or not 0 < timeout_s < math.inf:
        raise AttachError(
            f"attach: commit_timeout_s must be a positive, finite number of seconds, got {timeout_s!r}"
        )


@dataclass(frozen=True)
class GroupSettings:
    """What `attach` was told about the group commits: the group (None: no commits), the commit
    client's librdkafka settings and the commit timeout."""

    group_id: str | None
    conf: Mapping[str, Any] | None
    timeout_s: float = COMMIT_TIMEOUT_S

    def commits(self, job_name: str, run_id: str) -> GroupCommits | None:
        if self.group_id is None or self.conf is None:
            return None
        return group_commits(job_name, run_id, self.group_id, self.conf, self.timeout_s)


def group_commits(
    job_name: str, run_id: str, group_id: str, conf: Mapping[str, Any], timeout_s: float = COMMIT_TIMEOUT_S
) -> GroupCommits:
    """The committer of an attached run and its client; the client connects at its first commit."""
    try:
        consumer, commit_fn = open_commit_client(conf, group_id, timeout_s)
    except KafkaException as exc:
        raise AttachError(
            f"attach: the Kafka client refused kafka_options: {redacted(str(exc), conf)}"
        ) from exc
    committer = OffsetCommitter(
        job_name=job_name,
        run_id=run_id,
        engine=ENGINE,
        group_id=group_id,
        commit_fn=commit_fn,
        records_checkpoints=False,
    )
    return GroupCommits(group_id, committer, consumer, timeout_s)


def redacted(message: str, conf: Mapping[str, Any]) -> str:
    """``message`` with every text option but the bootstrap servers masked: librdkafka quotes
    the value it refused, and that value may be a password."""
    for key, value in conf.items():
        if key != "bootstrap.servers" and isinstance(value, str) and value:
            message = message.replace(value, "***")
    return message


# --- every query of a session ------------------------------------------------------------------

QueryNamer = Callable[[StreamingQuery], str | None]


class _Seen(NamedTuple):
    """What the session listener hands its audit's thread: one event of one query's run."""

    kind: str  # "started", "progress" (the run's first) or "terminated"
    query_id: str
    run_id: str
    kafka: bool = False  # a progress report naming a Kafka source
    at: datetime | None = None  # when Spark says the run started (its start event)


def query_name(query: StreamingQuery) -> str | None:
    """The job name `attach_session` gives a query by default: its `queryName`."""
    return query.name or None


def reads_kafka(progress: Any) -> bool:
    """Whether a query's progress report names a Kafka source (`KafkaV2[...]`, `KafkaSource[...]`)."""
    return any("kafka" in str(source.description).lower() for source in progress.sources)


class _SessionListener(StreamingQueryListener):
    """Hands every query's start, first progress and end to the SessionAudit's thread."""

    def __init__(self, audit: SessionAudit) -> None:
        self._audit = audit
        self._judged: set[str] = set()  # runs whose first progress was handed over (this thread only)

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's listener API
        try:
            started = spark_instant(event.timestamp)
            self._audit.hand(_Seen("started", str(event.id), str(event.runId), at=started))
        except Exception:  # a listener error must never reach Spark's listener bus
            log.exception("query start handling failed")

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        try:
            run = str(event.progress.runId)
            if run not in self._judged:
                self._judged.add(run)
                self._audit.hand(_Seen("progress", str(event.progress.id), run, reads_kafka(event.progress)))
        except Exception:
            log.exception("progress handling failed")

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        try:
            self._judged.discard(str(event.runId))
            self._audit.hand(_Seen("terminated", str(event.id), str(event.runId)))
        except Exception:
            log.exception("termination handling failed")


class SessionAudit:
    """Every query a session starts that reads Kafka, attached once it reported its first batch.

    Made by `attach_session`. Which sources a query reads is known from its first progress report
    (the public API says no more before), so a query is attached then; its batches reported before
    are its own run's (`run_start`), so nothing is missed, and its start is dated by the query's
    start event. `close()` after the queries ended waits for every attached run's RUN_STOPPED; as
    a context manager, leaving the block does so for every run whose query has ended."""

    def __init__(
        self,
        spark: SparkSession,
        ledger: str,
        job_name: QueryNamer,
        storage_options: Mapping[str, str] | None,
        group_id: QueryNamer | None,
        kafka_options: Mapping[str, Any] | None,
        commit_timeout_s: float = COMMIT_TIMEOUT_S,
    ) -> None:
        self.spark = spark
        self.ledger = ledger
        self.job_name = job_name
        self.storage_options = storage_options
        self.group_id = group_id
        self.kafka_options = kafka_options
        self.commit_timeout_s = commit_timeout_s
        self.attachments: dict[str, Attachment] = {}  # by Spark's run id
        # Runs seen starting, not yet judged: the query and when the run started.
        self._started: dict[str, tuple[StreamingQuery | None, datetime | None]] = {}
        self._queue: queue.Queue[_Seen | None] = queue.Queue()
        self._lock = threading.Lock()
        self._listener = _SessionListener(self)
        self._thread = threading.Thread(target=self._work, name="ledger-session", daemon=True)

    def start(self) -> SessionAudit:
        self.spark.streams.addListener(self._listener)
        self._thread.start()
        return self

    def hand(self, message: _Seen) -> None:
        """From Spark's listener thread: never blocks (the queue is unbounded, one item per event
        of a query's start, first batch and end)."""
        self._queue.put_nowait(message)

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """Stop attaching new queries; wait (at most ``timeout`` seconds for each) until every
        attached run that has ended wrote its last events. True when all of them did."""
        return all([a.close(timeout) for a in self._stop_attaching(timeout)])

    def __enter__(self) -> SessionAudit:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Leaving ``with attach_session(...)``, whether the block ended or raised: no new query is
        attached, and every attached run whose query has ended gets its end written (as
        `Attachment.close_if_ended`)."""
        for attachment in self._stop_attaching(CLOSE_TIMEOUT_S):
            attachment.close_if_ended()

    def _stop_attaching(self, timeout: float) -> list[Attachment]:
        """Remove the session's listener, let its thread attach what it was handed; the attachments."""
        self.spark.streams.removeListener(self._listener)
        self._queue.put_nowait(None)
        self._thread.join(timeout)
        with self._lock:
            return list(self.attachments.values())

    def _work(self) -> None:
        while (message := self._queue.get()) is not None:
            self._try(message)
        # Progress events still on Spark's listener bus when the listener went are never handed
        # over: the runs that started meanwhile are judged by the progress they keep themselves.
        for run_id, (query, _) in list(self._started.items()):
            recent = [] if query is None else query.recentProgress
            query_id = "" if query is None else str(query.id)
            self._try(_Seen("progress", query_id, run_id, any(map(reads_kafka, recent))))

    def _try(self, seen: _Seen) -> None:
        try:
            self._handle(seen)
        except Exception:  # one query's failure to attach must not end the others' audit
            log.exception("attaching query %s failed", seen.query_id)

    def _handle(self, seen: _Seen) -> None:
        query_id = seen.query_id
        if seen.kind == "started":
            # Taken now: once the query has ended, the session no longer hands it out.
            self._started[seen.run_id] = (self.spark.streams.get(query_id), seen.at)
            return
        query, started = self._started.pop(seen.run_id, (None, None))
        if seen.kind != "progress" or not seen.kafka:
            return
        query = query or self.spark.streams.get(query_id)
        if query is None:
            log.warning("query %s ended before it could be attached: its run is not in the ledger", query_id)
            return
        job = self.job_name(query)
        if not job:
            log.warning(
                "query %s reads Kafka but has no job name (a queryName, or job_name): not audited",
                query_id,
            )
            return
        group = None if self.group_id is None else self.group_id(query)
        conf = commit_client_conf(group, self.kafka_options if group else None)
        commits = GroupSettings(group, conf, self.commit_timeout_s)
        attachment = _attach(
            self.spark, query, job, self.ledger, self.storage_options, commits, query_started=started
        )
        with self._lock:
            self.attachments[seen.run_id] = attachment
        log.info("attached query %s as job %s", query_id, job)


def attach_session(
    spark: SparkSession,
    *,
    ledger: str,
    job_name: QueryNamer = query_name,
    storage_options: Mapping[str, str] | None = None,
    group_id: QueryNamer | None = None,
    kafka_options: Mapping[str, Any] | None = None,
    commit_timeout_s: float = COMMIT_TIMEOUT_S,
) -> SessionAudit:
    """Audit every streaming query ``spark`` starts from now on that reads Kafka, as `attach` does.

    Call it before starting the queries. Each query becomes the job ``job_name(query)``: by default
    its `queryName`, and a query without one (or for which ``job_name`` returns None) is left
    unaudited with a warning, since two queries under one job name would mix their checkpoints.
    ``group_id(query)``, when given, names the consumer group the query's batches are committed to
    (None: no commits), with ``kafka_options`` and ``commit_timeout_s`` as in `attach`. Queries
    that read no Kafka are ignored. Returns the `SessionAudit`: call its `close()` once the queries
    have ended.
    """
    if not ledger:
        raise AttachError("attach_session: ledger must name the ledger table's location")
    if group_id is None and kafka_options:
        raise AttachError("attach_session: kafka_options are the group commit's settings; they need group_id")
    check_commit_timeout(commit_timeout_s)
    return SessionAudit(
        spark, ledger, job_name, storage_options, group_id, kafka_options, commit_timeout_s
    ).start()
