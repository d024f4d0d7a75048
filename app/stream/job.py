"""The reference streaming job: Kafka -> Delta sink, a Delta ledger of every checkpoint, and a
Flink-style commit of each completed checkpoint's offsets to the consumer group.

Per micro-batch (= checkpoint N):
  1. snapshot: N's end offsets, read from Spark's own offset log (written before the batch ran);
  2. the sink append, idempotent through Delta's txnAppId/txnVersion (a retried batch writes nothing);
  3. one ledger append with everything buffered so far (this snapshot, earlier completions and
     commit outcomes), idempotent the same way: exactly one extra Delta commit per batch.
The run's events go through the run recorder (`stream.recorder`), as an attached query's and an
import's do: it builds the recovery of a dead run, the run's start and stop, and each checkpoint's
snapshot and completion from Spark's checkpoint files (`recorder.batch_events`); the committer
records only its commit decisions. RUN_STARTED names the query's id (known once the query starts), as an
attached run's does, so `ledger-import` of the job's checkpoint finds the runs that recorded it.
Completion of N is Spark's commit log entry `commits/N`; a query listener (and, as a fallback, the
next batch and the shutdown) hands completed checkpoints to the committer, which commits them
asynchronously, at most one in flight, newer requests superseding older unsent ones.

A stop (SIGTERM/SIGINT, a stop condition) never interrupts a micro-batch at work: the one in
progress finishes and the query is stopped before the next one starts (app.stream.batch_gate says
why Spark's own stop must not land inside the callback).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import FrameType
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.streaming.query import StreamingQuery

from app.config import AppConfig
from app.contracts import vocabulary as vocab
from app.contracts.offsets import EventSource, LedgerEvent, TopicPartitionKey
from app.errors import InfrastructureError
from app.kafka.clients import librdkafka_conf, spark_kafka_options
from app.kafka.commit import (
    close_within,
    committed_offsets,
    committing_consumer,
    offsets_for_timestamp,
    open_commit_client,
    topic_partitions,
    watermarks,
)
from app.kafka.commit_outcome import CommitFn
from app.storage.handles import AuditTables
from app.stream.batch_gate import BatchGate
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
from app.stream.startup import ENGINE, StartupPlan, plan_checkpoint_resume, plan_fresh_start, to_sink_rows

log = logging.getLogger(__name__)
# How long the Kafka source's admin calls wait for a broker (kafka.java may override it).
SOURCE_API_TIMEOUT_MS: Final = 300_000
# How often the job looks at its stop conditions; at a requested stop more often, since a signal
# handler cannot safely wake a waiting thread (it may interrupt the very thread holding the lock).
POLL_S: Final = 0.25
STOP_POLL_S: Final = 0.02
# How long a batch held at its end waits for query.stop() to interrupt its thread.
STOP_INTERRUPT_WAIT_S: Final = 30.0
# Spark's status message while a planned batch runs: it is on its way into the callback, or in it.
PROCESSING_STATUS: Final = "Processing new data"


def utc_now() -> datetime:
    return datetime.now(UTC)


def source_options(cfg: AppConfig, bootstrap: str) -> dict[str, str]:
    """The Kafka source's options that come from the config (not the partitions or start offsets).

    The Kafka client properties (spark_kafka_options) include its defaults for bounded reads, such as
    a short fetch wait, which kafka.client and kafka.java override.
    """
    options = {
        # Spark's Kafka source fails the query when one admin call finds no broker for 60 s
        # (the Java client's default); a reference job should ride out a broker restart.
        "kafka.default.api.timeout.ms": str(SOURCE_API_TIMEOUT_MS),
        **spark_kafka_options(cfg.kafka, bootstrap),
        "failOnDataLoss": str(cfg.stream.fail_on_data_loss).lower(),
        "kafka.isolation.level": cfg.stream.isolation_level,
        # Ride out a short broker outage (each attempt waits for the client's API timeout)
        # instead of failing the query on the first unanswered offset lookup.
        "fetchOffset.numRetries": "10",
    }
    if cfg.stream.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(cfg.stream.max_offsets_per_trigger)
    return options


@dataclass
class StreamResult:
    run_id: str
    startup_mode: str
    restored_checkpoint_id: int | None
    batches: int = 0
    last_batch_id: int | None = None
    input_rows: int = 0
    successful_commits: int = 0
    failed_commits: int = 0
    recovered_events: int = 0
    processing_seconds: float = 0.0  # first batch start to last batch end
    stop_reason: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StopWhen:
    max_batches: int = 0  # 0: no limit
    idle_s: float = 0.0  # stop after this long without a new batch; 0: never
    duration_s: float = 0.0  # 0: no limit
    # Stop once completed batches have read each listed partition up to this offset (the next offset
    # to read): a bounded run over records produced beforehand ends when they are all in, however
    # long a slow machine takes, where idle_s could end it between two slow batches.
    offsets: Mapping[TopicPartitionKey, int] = field(default_factory=dict)

    def offsets_reached(self, read_up_to: Mapping[TopicPartitionKey, int]) -> bool:
        """True when ``offsets`` is set and every listed partition was read up to its offset."""
        return bool(self.offsets) and all(read_up_to.get(tp, -1) >= end for tp, end in self.offsets.items())


def progress_end_offsets(progress_json: str | None) -> dict[TopicPartitionKey, int]:
    """Where a progress report (Spark's JSON) says its Kafka sources' trigger ended, per partition.

    Spark reports a trigger's progress once its batch and the batch's commit log entry are written,
    so these offsets are read and committed. The report embeds a source's offsets as JSON when they
    are JSON, as Kafka's are ({topic: {partition: offset}}); any other source is left out."""
    progress = json.loads(progress_json) if progress_json else {}
    out: dict[TopicPartitionKey, int] = {}
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        for topic, partitions in end.items() if isinstance(end, dict) else []:
            out.update({(topic, int(p)): int(o) for p, o in partitions.items()})
    return out


def add_progress(rows_by_batch: dict[int, int], progress: Mapping[str, Any]) -> None:
    """One progress report of Spark into ``rows_by_batch`` (numInputRows per batch id). A batch
    reported twice (by the listener and by the query's recent progress) counts once, and a report
    without data for a batch id never hides the rows of that batch's run: the larger count wins."""
    batch_id = progress.get("batchId")
    if batch_id is None:
        return
    rows = int(progress.get("numInputRows") or 0)
    rows_by_batch[int(batch_id)] = max(rows, rows_by_batch.get(int(batch_id), 0))


class _CompletionListener(StreamingQueryListener):
    """Tells the job when Spark reports a finished batch; the job then checks the commit log."""

    def __init__(self, on_progress: Callable[[dict[str, Any]], None]) -> None:
        self._on_progress = on_progress

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's listener API
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        try:
            self._on_progress(json.loads(event.progress.json))
        except Exception:  # best effort: a listener error must never kill Spark's listener bus
            log.exception("progress handling failed")

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass


class StreamJob:
    def __init__(
        self,
        spark: SparkSession,
        cfg: AppConfig,
        bootstrap: str,
        run_id: str | None = None,
        clock: Callable[[], datetime] = utc_now,
        audited: bool = True,
        commit_fn_wrapper: Callable[[CommitFn], CommitFn] | None = None,
    ) -> None:
        # audited=False runs the same pipeline without ledger and committer: the baseline that the
        # benchmark compares against, never a user-facing mode.
        self.audited = audited
        # Lets the demo take the broker down exactly when a commit is sent; None in normal runs.
        self._commit_fn_wrapper = commit_fn_wrapper
        self.spark = spark
        self.cfg = cfg
        self.scfg = cfg.stream
        self.bootstrap = bootstrap
        self.run_id = run_id or f"run-{utc_now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
        self._events = EventSource(self.scfg.job_name, self.run_id, ENGINE, self.scfg.group_id)
        self.clock = clock
        tables = AuditTables.from_config(cfg, spark)
        self.sink = tables.sink_for(self.scfg.job_name)
        self.sink_path = self.sink.location
        self.ledger_path = tables.ledger.location
        self.checkpoint_dir = self.scfg.checkpoint_dir or cfg.paths.under("checkpoints", self.scfg.job_name)
        self._checkpoint = CheckpointFiles(spark, self.checkpoint_dir)
        self._ledger = LedgerWriter(spark, self.ledger_path, self.scfg.job_name, self.run_id)
        self._recorder = RunRecorder(self._ledger, self._events)
        self._batch_recorder: RunRecorder | None = None
        self._lock = threading.Lock()
        self._committer: OffsetCommitter | None = None
        # The end offsets of the batches handed to the committer and not completed yet, and the
        # completions recorded since the last ledger write (both guarded by _lock).
        self._planned: dict[int, dict[TopicPartitionKey, int]] = {}
        self._completions: list[LedgerEvent] = []
        # The run's start (its time, RUN_STARTED's facts, OFFSETS_RESTORED), written once the query's
        # id is known: by the main thread right after the query starts, or by its first batch if
        # that comes first.
        self._run_start: tuple[datetime, RunStart, list[LedgerEvent]] | None = None
        self._run_start_lock = threading.Lock()
        self._query_id: str | None = None
        self._batches = 0
        self._last_batch_id: int | None = None
        self._last_batch_at = time.monotonic()
        # Spark's progress reports, as numInputRows per batch id: from the listener while the query
        # runs, completed from the query's own recent progress when it stops (see _count_input_rows).
        self._input_rows_by_batch: dict[int, int] = {}
        self._first_batch_started: float | None = None
        self._last_batch_ended: float | None = None
        self._gate = BatchGate(hold_timeout_s=self.scfg.stop_timeout_s)
        self._stop_signal: int | None = None  # set by request_stop, logged by _await
        self._ledger_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-writer")

    def _query_scope(self) -> str:
        # The checkpoint's query id scopes the batches' Delta transaction ids: deleting the
        # checkpoint restarts batch ids at 0, and a fresh scope keeps Delta from taking those
        # batches for retries of old ones.
        if self._query_id is None:
            self._query_id = self._checkpoint.query_id()
        return self._query_id

    def _batch_ledger(self) -> RunRecorder:
        """The run's recorder of micro-batches, scoped by the query (see `_query_scope`)."""
        if self._batch_recorder is None:
            self._batch_recorder = self._recorder.scoped(self._query_scope())
        return self._batch_recorder

    # --- startup ---------------------------------------------------------------------------------
    def _plan(self, consumer: Any, partitions: list[TopicPartitionKey]) -> StartupPlan:
        offset_log = self._checkpoint.offset_log()
        commits = self._checkpoint.log_ids(COMMITS)
        initial = self._checkpoint.initial_offsets()
        if any(b in offset_log for b in commits):
            return plan_checkpoint_resume(offset_log, commits)
        if offset_log or initial is not None:
            # Nothing committed yet, but Spark's source already fixed where it starts: that wins.
            missing = set(partitions) - set(initial or {})
            previous = self._ledger.previous_run_starts() if missing and self.audited else {}
            return plan_checkpoint_resume(offset_log, commits, initial or {}, previous)
        timeout = self.cfg.kafka.request_timeout_s
        marks = watermarks(consumer, partitions, timeout)
        mode = self.scfg.startup_mode
        return plan_fresh_start(
            mode,
            partitions,
            marks,
            committed=committed_offsets(consumer, partitions, timeout)
            if mode == vocab.RESTORE_GROUP
            else None,
            by_timestamp=(
                offsets_for_timestamp(consumer, partitions, self.scfg.startup_timestamp_ms, timeout)
                if mode == vocab.RESTORE_TIMESTAMP
                else None
            ),
            specific=self.scfg.specific() if mode == vocab.RESTORE_SPECIFIC else None,
            reset=self.scfg.reset_strategy,
        )

    # --- per batch -------------------------------------------------------------------------------
    def _complete_finished_batches(self) -> None:
        """Hand every checkpoint that Spark's commit log marks complete to the committer, in order."""
        committer = self._committer
        if committer is None:
            return
        with self._lock:
            pending = committer.pending_checkpoint_ids
            if not pending:
                return
            done = set(self._checkpoint.log_ids(COMMITS))
            for checkpoint_id in sorted(pending):
                if checkpoint_id in done:
                    committer.notify_checkpoint_complete(checkpoint_id)
                    self._completions += batch_events(
                        self._checkpoint,
                        self._events,
                        checkpoint_id,
                        self._planned[checkpoint_id],
                        snapshot=False,
                        completed=True,
                        now=self.clock(),
                    )
            still_pending = set(committer.pending_checkpoint_ids)
            self._planned = {b: o for b, o in self._planned.items() if b in still_pending}

    def _take_recorded(self, committer: OffsetCommitter) -> list[LedgerEvent]:
        """The completions and the committer's decisions recorded since the last ledger write."""
        with self._lock:
            events, self._completions = [*self._completions, *committer.drain()], []
        return events

    def _process_batch(self, batch_df: DataFrame, batch_id: int) -> None:
        # Held at its end while the job stops the query, refused unwritten once it is being
        # stopped: see app.stream.batch_gate.
        with self._gate.batch(batch_id, self._release_held_batch):
            self._run_batch(batch_df, batch_id)

    def _release_held_batch(self) -> None:
        """Lets the batch held at its end return once query.stop() has marked the query stopped
        and interrupted Spark's micro-batch thread, with that interrupt cleared.

        The callback's py4j calls run on that very thread (pinned thread mode), so they can read
        and clear its flag. Left set, the interrupt would fail Spark's write of this batch's commit
        log entry (a forked chmod is interruptible), and the next start would run the batch again;
        cleared, Spark records the batch as done and ends the query at the top of its trigger loop,
        where it checks that the query was stopped.
        """
        jvm: Any = self.spark.sparkContext._jvm
        this_thread = jvm.java.lang.Thread.currentThread()
        deadline = time.monotonic() + STOP_INTERRUPT_WAIT_S
        # stop() marks the query stopped first, then interrupts this thread, then waits for it.
        while not this_thread.isInterrupted():
            if time.monotonic() > deadline:
                log.warning(
                    "the stop did not interrupt the micro-batch thread in %.0fs", STOP_INTERRUPT_WAIT_S
                )
                return
            time.sleep(STOP_POLL_S)
        jvm.java.lang.Thread.interrupted()  # clears the current thread's flag

    def _run_batch(self, batch_df: DataFrame, batch_id: int) -> None:
        started = self._last_batch_at = time.monotonic()
        if self._first_batch_started is None:
            self._first_batch_started = self._last_batch_at
        if not self.audited:
            self._write_sink(batch_df, batch_id)
            self._batch_done(batch_id)
            return
        committer = self._committer
        assert committer is not None  # set before the query starts
        self._complete_finished_batches()
        offsets = self._checkpoint.offsets_of(batch_id)
        if offsets is None:
            raise InfrastructureError(f"Spark's offset log has no entry for batch {batch_id}")
        snapshot = batch_events(
            self._checkpoint, self._events, batch_id, offsets, completed=False, now=self.clock()
        )
        with self._lock:
            committer.snapshot(batch_id, offsets)
            self._planned[batch_id] = offsets
        events = [*snapshot, *self._take_recorded(committer)]
        self._write_run_start()
        # The ledger append runs beside the sink append, so its small Delta commit hides behind the
        # sink's write instead of adding to the batch time (it is not even a Spark job: the ledger
        # writer, app.stream.ledger, commits it with delta-rs).
        # Both finish before the batch returns, and both are idempotent per batch id, so a failure of
        # either fails the batch and its retry completes whichever half is missing.
        t_prepared = time.monotonic()
        ledger_write = self._ledger_pool.submit(self._batch_ledger().batch, batch_id, events)
        try:
            self._write_sink(batch_df, batch_id)
            t_sink = time.monotonic()
        finally:
            ledger_write.result()
        self._batch_done(batch_id)
        log.info(
            "checkpoint %d written in %.2fs (prepare %.2fs, sink %.2fs, ledger wait %.2fs; %d ledger "
            "events); commits ok=%d failed=%d",
            batch_id,
            self._last_batch_at - started,
            t_prepared - started,
            t_sink - t_prepared,
            self._last_batch_at - t_sink,
            len(events),
            committer.successful_commits,
            committer.failed_commits,
        )

    def _write_sink(self, batch_df: DataFrame, batch_id: int) -> None:
        rows = to_sink_rows(batch_df, batch_id, self.run_id)
        app_id = f"offset-audit/{self.scfg.job_name}/{self._query_scope()}/sink"
        self.sink.append_once(rows, app_id, batch_id)

    def _batch_done(self, batch_id: int) -> None:
        self._batches += 1
        self._last_batch_id = batch_id
        self._last_batch_at = self._last_batch_ended = time.monotonic()

    def _on_progress(self, progress: dict[str, Any]) -> None:
        self._record_progress(progress)
        self._complete_finished_batches()

    def _record_progress(self, progress: Mapping[str, Any]) -> None:
        with self._lock:
            add_progress(self._input_rows_by_batch, progress)

    def _count_input_rows(self, query: StreamingQuery) -> None:
        """Adds the progress reports the listener has not been handed yet. Spark posts them to its
        listener bus asynchronously, so after a stop the last batch's report may still be on its way
        (on a busy machine the run then counted half its rows); the query keeps its recent reports
        itself, written before the trigger ends."""
        for progress in query.recentProgress:
            self._record_progress(progress)

    # --- run -------------------------------------------------------------------------------------
    def run(self, stop: StopWhen) -> StreamResult:
        self._ledger.ensure()
        self.sink.ensure()
        kconf = librdkafka_conf(self.cfg.kafka, self.bootstrap)
        meta_consumer = committing_consumer(kconf, self.scfg.group_id)
        commit_consumer, commit_fn = open_commit_client(
            kconf, self.scfg.group_id, self.cfg.kafka.request_timeout_s
        )
        try:
            partitions = topic_partitions(meta_consumer, self.scfg.topics, self.cfg.kafka.request_timeout_s)
            plan = self._plan(meta_consumer, partitions)
            result = StreamResult(self.run_id, plan.mode, plan.restored_checkpoint_id, notes=list(plan.notes))
            if self.audited:
                result.recovered_events = self._write_startup_events(plan, partitions)
                self._committer = self._new_committer(commit_fn)
            listener = _CompletionListener(self._on_progress)
            self.spark.streams.addListener(listener)
            try:
                query = self._start_query(plan, partitions)
                self._started(query)
                self._last_batch_at = time.monotonic()
                result.stop_reason = self._await(query, stop)
                self._count_input_rows(query)
            finally:
                self.spark.streams.removeListener(listener)
            self._shutdown(result)
            return result
        finally:
            meta_consumer.close()
            close_within(commit_consumer, self.scfg.commit_close_timeout_s)

    def _new_committer(self, commit_fn: CommitFn) -> OffsetCommitter:
        if self._commit_fn_wrapper is not None:
            commit_fn = self._commit_fn_wrapper(commit_fn)
        return OffsetCommitter(
            job_name=self.scfg.job_name,
            run_id=self.run_id,
            engine=ENGINE,
            group_id=self.scfg.group_id,
            commit_fn=commit_fn,
            max_pending=self.scfg.max_pending_checkpoints,
            clock=self.clock,
            commit_enabled=self.scfg.commit_offsets,
            # A batch's own events come from the checkpoint (`recorder.batch_events`), as an
            # attached query's do: the committer records only its commit decisions.
            records_checkpoints=False,
        )

    def _write_startup_events(self, plan: StartupPlan, partitions: list[TopicPartitionKey]) -> int:
        """What the previous run left unwritten, now, before the query starts (the checkpoint as
        that run left it); the run's start is kept for `_write_run_start`. Returns how many events
        were recovered."""
        now = self.clock()
        recovered: list[LedgerEvent] = []
        if plan.mode == vocab.RESTORE_CHECKPOINT:
            offset_log = self._checkpoint.offset_log()
            # Only the ledger days of the batches the checkpoint still holds: the job's whole
            # history would be read at every start otherwise.
            oldest = min(offset_log, default=None)
            recovered = recover_unrecorded(
                self._checkpoint,
                self._ledger.facts(ledger_since(self._checkpoint, oldest), oldest),
                offset_log,
                self._checkpoint.log_ids(COMMITS),
                self.scfg.job_name,
                self.scfg.group_id,
                self.run_id,
                now,
            )
        self._recorder.recover(recovered)
        if recovered:
            log.warning("recovered %d ledger events the previous run had not flushed", len(recovered))
        start = RunStart(
            plan.mode,
            plan.restored_checkpoint_id,
            plan.notes,
            checkpoint=self.checkpoint_dir,
            topics=self.scfg.topics,
            partitions=len(partitions),
        )
        self._run_start = (now, start, plan_restored(self._events, plan, now))
        starts = ", ".join(f"{t}-{p}@{s.offset}({s.source})" for (t, p), s in sorted(plan.starts.items()))
        log.info("run %s starts (%s): %s", self.run_id, plan.mode, starts)
        return len(recovered)

    def _started(self, query: StreamingQuery) -> None:
        """The query runs: its id is known (Spark creates a new checkpoint's `metadata` as the
        query starts), so the run's start can name it."""
        if self._query_id is None:
            self._query_id = str(query.id)
        if not self.audited:
            return
        try:
            self._write_run_start()
        except BaseException:
            query.stop()  # a run that cannot record its start must not run unrecorded
            raise

    def _write_run_start(self) -> None:
        """RUN_STARTED (with the query's id, as attached and imported runs say it: `ledger-import`
        of this checkpoint then knows the run) and OFFSETS_RESTORED, once."""
        with self._run_start_lock:
            if self._run_start is None:
                return
            when, start, restored = self._run_start
            self._recorder.start(when, replace(start, query_id=self._query_scope()), restored)
            self._run_start = None

    def _start_query(self, plan: StartupPlan, partitions: list[TopicPartitionKey]) -> StreamingQuery:
        assign: dict[str, list[int]] = {}
        for topic, partition in partitions:
            assign.setdefault(topic, []).append(partition)
        reader = (
            self.spark.readStream.format("kafka")
            .options(**source_options(self.cfg, self.bootstrap))
            .option("assign", json.dumps(assign))
        )
        if plan.mode != vocab.RESTORE_CHECKPOINT:
            reader = reader.option("startingOffsets", plan.starting_offsets_json())
        return (
            reader.load()
            .writeStream.foreachBatch(self._process_batch)
            .option("checkpointLocation", self.checkpoint_dir)
            .trigger(processingTime=self.scfg.trigger_interval)
            .queryName(f"offset-audit-{self.scfg.job_name}")
            .start()
        )

    def request_stop(self, signum: int = 0, frame: FrameType | None = None) -> None:
        """Stop after the micro-batch in progress. Also the SIGTERM/SIGINT handler, so it only
        sets attributes: no lock, no logging (a handler interrupts the main thread anywhere)."""
        self._stop_signal = signum
        self._gate.request_stop()

    def _await(self, query: StreamingQuery, stop: StopWhen) -> str:
        started = time.monotonic()
        reason = ""
        while not reason:
            self._raise_if_failed(query)
            if self._gate.stopping:
                reason = "stop requested"
                log.info("stop requested%s", f" (signal {self._stop_signal})" if self._stop_signal else "")
                break
            if not query.isActive:
                reason = "query terminated"
                break
            busy = bool(query.status.get("isTriggerActive"))
            now = time.monotonic()
            if stop.max_batches and self._batches >= stop.max_batches and not busy:
                reason = f"{self._batches} batches done"
            elif stop.idle_s and not busy and now - self._last_batch_at >= stop.idle_s:
                reason = f"idle for {stop.idle_s:.0f}s"
            elif stop.duration_s and now - started >= stop.duration_s and not busy:
                reason = f"ran {stop.duration_s:.0f}s"
            elif stop.offsets and not busy and stop.offsets_reached(self._read_up_to(query)):
                reason = "every partition read up to its stop offset"
            else:
                self._pause()
        self._stop_between_batches(query)
        self._raise_if_failed(query)
        return reason

    def _raise_if_failed(self, query: StreamingQuery) -> None:
        failure = query.exception()
        # A batch the gate refused ends the query with that refusal: the stop we asked for.
        if failure is not None and self._gate.refused is None:
            raise InfrastructureError(f"the streaming query failed: {failure}")

    def _pause(self) -> None:
        until = time.monotonic() + POLL_S
        while not self._gate.stopping and time.monotonic() < until:
            time.sleep(STOP_POLL_S)

    def _stop_between_batches(self, query: StreamingQuery) -> None:
        """query.stop() once no micro-batch is at work in the callback, within stream.stop_timeout_s."""
        deadline = time.monotonic() + self.scfg.stop_timeout_s
        self._gate.request_stop()
        # A batch Spark has planned is let into the callback, to run and be held at its end; one
        # refused there would end the query with an error (harmless, but Spark logs it as one).
        # Waiting for offsets (a broker down) is interrupted: no batch is planned yet.
        while (
            not self._gate.held
            and time.monotonic() < deadline
            and query.isActive
            and self._batch_under_way(query)
        ):
            time.sleep(STOP_POLL_S)
        at_work = self._gate.close(max(deadline - time.monotonic(), 0.0))
        if at_work is not None:
            log.warning(
                "checkpoint %d still running after %.0fs: stopping inside it (the next start runs it again)",
                at_work,
                self.scfg.stop_timeout_s,
            )
        query.stop()
        if self._gate.refused is not None:
            log.info(
                "checkpoint %d was planned as the job stopped; the next start runs it", self._gate.refused
            )

    def _batch_under_way(self, query: StreamingQuery) -> bool:
        """Spark has planned a batch (written its offset log entry) that has not ended yet."""
        status = query.status
        if not status.get("isTriggerActive"):
            return False
        if status.get("message") == PROCESSING_STATUS:
            return True
        # Between its offset log entry and that status the batch is planned all the same; the logs
        # are read only when the status does not tell.
        planned = self._checkpoint.log_ids(OFFSETS)
        return bool(planned) and planned[-1] not in self._checkpoint.log_ids(COMMITS)

    @staticmethod
    def _read_up_to(query: StreamingQuery) -> dict[TopicPartitionKey, int]:
        progress = query.lastProgress
        return progress_end_offsets(None if progress is None else progress.json)

    def _shutdown(self, result: StreamResult) -> None:
        self._ledger_pool.shutdown(wait=True)
        result.batches = self._batches
        result.last_batch_id = self._last_batch_id
        result.input_rows = sum(self._input_rows_by_batch.values())
        if self._first_batch_started is not None and self._last_batch_ended is not None:
            result.processing_seconds = round(self._last_batch_ended - self._first_batch_started, 3)
        committer = self._committer
        if committer is None:
            return
        self._complete_finished_batches()
        if not committer.close(timeout=self.scfg.commit_close_timeout_s):
            log.warning("the last offset commit did not finish in %.0fs", self.scfg.commit_close_timeout_s)
            committer.abandon_in_flight()
        counts = RunCounts(
            batches=self._batches,
            successful_commits=committer.successful_commits,
            failed_commits=committer.failed_commits,
        )
        stopped_at = self.clock()
        pending = self._take_recorded(committer)
        self._recorder.stop(stopped_at, self._last_batch_id, result.stop_reason, counts, pending)
        result.successful_commits = committer.successful_commits
        result.failed_commits = committer.failed_commits
        log.info(
            "run %s stopped (%s): %d batches, %d rows, commits ok=%d failed=%d",
            self.run_id,
            result.stop_reason,
            result.batches,
            result.input_rows,
            result.successful_commits,
            result.failed_commits,
        )


def install_signal_handlers(job: StreamJob) -> None:
    """SIGTERM/SIGINT stop the job cleanly: the last checkpoint is committed and RUN_STOPPED written."""
    signal.signal(signal.SIGTERM, job.request_stop)
    signal.signal(signal.SIGINT, job.request_stop)
