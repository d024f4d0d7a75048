"""`flink-watch`: a sidecar that follows a running Flink job and writes its ledger.

Every ``poll_s`` it asks the JobManager's REST API which job it follows (by id, or the newest job of a
name: a resubmission is followed too), the job's state and its checkpoints, and for each checkpoint
completed since the last poll reads its `_metadata` at `external_path` (`app.flink.metadata`) before
Flink deletes it (it keeps `execution.checkpointing.num-retained`). The events
(`app.flink.events`) go through the ledger writer of `app.stream.ledger`: a checkpoint's in one Delta
commit under the run's transaction id (version = checkpoint id), so a sidecar restarted over the same
history writes nothing twice; a run's start and stop keyed by their identity.

It only reads: REST GETs, at most 2 a second (`rest.Pacer`), and the checkpoint files. It never
slows or fails the job; the job does not know it is there.

Runs and restarts. Each attempt of the job is a run (`events.run_id_of`). A restore (a failover of
the job, a resubmission from a checkpoint or savepoint) starts a new run whose OFFSETS_RESTORED
are the restored state's offsets. The previous run got no RUN_STOPPED (it died: reconcile judges
its stop and the restart). When the restored checkpoint is one the ledger lacks (completed just
before the crash, between two polls), it is recorded first as the previous run's completion with
`recovered` (the dead process may have committed it), so the restart is judged against it.

Unreachable REST after the start (the JobManager restarting, the process killed) is retried every
poll until a stop; the first contact failing is an infrastructure error (exit 3).
"""

from __future__ import annotations

import logging
import os
import posixpath
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

import pyarrow.compute as pc

from app.contracts import vocabulary as vocab
from app.contracts.instants import instant
from app.contracts.offsets import EventSource, LedgerEvent, TopicPartitionKey
from app.errors import (
    FlinkCheckpointGoneError,
    FlinkRestError,
    FlinkStateError,
    InfrastructureError,
    UsageError,
)
from app.flink import events as ev
from app.flink.events import for_engine
from app.flink.files import list_objects, object_modified_ms, object_store_path
from app.flink.metadata import FlinkCheckpointOffsets, SplitOffset, read_checkpoint
from app.flink.positions import Positions
from app.flink.prefetch import CHECKPOINT_DIR, Prefetcher, local_dir
from app.flink.rest import (
    STATUS_COMPLETED,
    Checkpoints,
    CheckpointStat,
    CommitCounts,
    CommitMetrics,
    FlinkRest,
    JobSummary,
    Restore,
    newest_by_name,
    retention_warnings,
)
from app.storage import backend
from app.storage.handles import open_handle
from app.stream.ledger import LedgerWriter
from app.stream.recorder import RunRecorder, recovered_mark

log = logging.getLogger(__name__)

DEFAULT_POLL_S = 1.0
MAX_NAMED_UNREAD = 20  # a longer block of unread checkpoints is named by its ends (`unread`)
LOST_AT_END = (
    "completed or failed between the sidecar's last poll of its run and the run's end, and deleted before "
    "it was read"
)
# The columns the ledger reads below filter on: a read returns them with those asked for.
_FILTERED = ("job_name", "run_id", "event_type")

Reader = Callable[[str], FlinkCheckpointOffsets]


class Stop(Protocol):
    """What stops the loop between polls (`app.runtime.signals.StopSignal`)."""

    requested: int | None

    def wait(self, timeout_s: float) -> bool: ...


def local_path(external_path: str) -> str:
    """A `file:` URI as the local path it names; any other location as given."""
    if external_path.startswith("file://"):
        return external_path[len("file://") :]
    if external_path.startswith("file:"):
        return external_path[len("file:") :]
    return external_path


def failure_reason(exc: BaseException) -> str:
    """Why a checkpoint could not be read: its files were gone (Flink deleted them), or they were
    there and did not decode (or could not be read)."""
    return vocab.MISSED_FILES_GONE if isinstance(exc, FlinkCheckpointGoneError) else vocab.MISSED_UNREADABLE


class FlinkLedger:
    """The ledger as the sidecar and the import use it: one `LedgerWriter` per run of the job."""

    def __init__(self, storage: backend.StorageSettings, location: str, job_name: str) -> None:
        self.storage = storage
        self.location = location
        self.table = open_handle("ledger", location, storage)
        self.job_name = job_name
        self._writers: dict[str, LedgerWriter] = {}

    def writer(self, run_id: str) -> LedgerWriter:
        if run_id not in self._writers:
            self._writers[run_id] = LedgerWriter(
                self.storage, self.location, self.job_name, run_id, scope=run_id
            )
        return self._writers[run_id]

    def recorder(self, source: EventSource) -> RunRecorder:
        """The recorder of the run ``source`` names: its checkpoints under the run's transaction id."""
        return RunRecorder(self.writer(source.run_id), source)

    def ensure(self) -> None:
        self.writer("-").ensure()

    def completed_ids(self, run_id: str | None = None, runs: list[str] | None = None) -> set[int]:
        """The checkpoint ids the ledger holds completions of: of one run, of ``runs``, or of the job."""
        where = (pc.field("job_name") == self.job_name) & (
            pc.field("event_type") == vocab.EVENT_CHECKPOINT_COMPLETED
        )
        if run_id is not None:
            where = where & (pc.field("run_id") == run_id)
        if runs is not None:
            where = where & pc.field("run_id").isin(runs)
        rows = self.table.rows(where, columns=[*_FILTERED, "checkpoint_id"])
        if rows is None:
            return set()
        return {int(i) for i in pc.unique(rows.column("checkpoint_id")).to_pylist() if i is not None}

    def partitions(self) -> list[TopicPartitionKey]:
        """The partitions the job's recorded checkpoints hold."""
        where = (
            (pc.field("job_name") == self.job_name)
            & (pc.field("event_type") == vocab.EVENT_CHECKPOINT_COMPLETED)
            & pc.field("partition").is_valid()
        )
        rows = self.table.rows(where, columns=[*_FILTERED, "topic", "partition"])
        if rows is None:
            return []
        return sorted({(str(r["topic"]), int(r["partition"])) for r in rows.to_pylist()})

    def latest_completion(self, run_id: str) -> tuple[int, int, dict[TopicPartitionKey, int | None]] | None:
        """The newest recorded completion of ``run_id``: its checkpoint id, time (epoch ms) and raw
        offsets."""
        where = (
            (pc.field("job_name") == self.job_name)
            & (pc.field("event_type") == vocab.EVENT_CHECKPOINT_COMPLETED)
            & (pc.field("run_id") == run_id)
        )
        rows = self.table.rows(
            where, columns=[*_FILTERED, "checkpoint_id", "event_time", "topic", "partition", "raw_offset"]
        )
        if rows is None or rows.num_rows == 0:
            return None
        found = rows.to_pylist()
        newest = max(int(r["checkpoint_id"]) for r in found)
        mine = [r for r in found if int(r["checkpoint_id"]) == newest]
        when = min(int(instant(r["event_time"]).timestamp() * 1000) for r in mine)
        offsets = {
            (r["topic"], int(r["partition"])): r["raw_offset"] for r in mine if r["partition"] is not None
        }
        return newest, when, offsets

    def last_run_id(self) -> str | None:
        return self.writer("-").facts().last_run_id

    def completion(self, checkpoint_id: int) -> tuple[str, dict[TopicPartitionKey, int | None]] | None:
        """The engine and raw offsets of the job's recorded completion of ``checkpoint_id``, if any."""
        where = (
            (pc.field("job_name") == self.job_name)
            & (pc.field("event_type") == vocab.EVENT_CHECKPOINT_COMPLETED)
            & (pc.field("checkpoint_id") == checkpoint_id)
            & pc.field("partition").is_valid()
        )
        rows = self.table.rows(
            where, columns=[*_FILTERED, "checkpoint_id", "engine", "topic", "partition", "raw_offset"]
        )
        if rows is None or rows.num_rows == 0:
            return None
        found = rows.to_pylist()
        return str(found[0]["engine"]), {(r["topic"], int(r["partition"])): r["raw_offset"] for r in found}


@dataclass
class WatchSummary:
    """What a sidecar did, for its final print."""

    runs: list[str] = field(default_factory=list)
    checkpoints_recorded: int = 0
    missed: list[dict[str, object]] = field(default_factory=list)
    failed_checkpoints: int = 0
    events_written: int = 0
    rest_requests: int = 0
    stopped_runs: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failed_commits: int = 0  # counted by the job's Kafka source metrics while followed


@dataclass
class _Start:
    """Where an attempt without state started, until its first checkpoint holding partitions says
    it: the startup mode (None: not known yet), and the group's offsets asked before the job could
    commit (``section 7``)."""

    mode: str | None
    group_offsets: dict[TopicPartitionKey, int] = field(default_factory=dict)


@dataclass
class _Run:
    attempt: ev.Attempt
    recorder: RunRecorder
    counts: ev.RunCounts
    pending_missed: list[ev.Missed] = field(default_factory=list)
    recorded: set[int] = field(default_factory=set)
    stopped: bool = False
    start: _Start | None = None  # an attempt without state whose start offsets are not written yet
    newest: tuple[CheckpointStat, FlinkCheckpointOffsets] | None = None  # recorded, with partitions
    metrics: CommitMetrics | None = None  # where its source counts commits, once found
    commits: CommitCounts | None = None  # the counters at the last sample (None: no baseline yet)
    failed_ids: set[int] = field(default_factory=set)  # its failed checkpoints: none of them is lost


class FlinkWatcher:
    """Follows one Flink job (``flink_job_id``) or the newest job named ``flink_job_name``."""

    def __init__(
        self,
        rest: FlinkRest,
        ledger: FlinkLedger,
        *,
        flink_job_id: str | None = None,
        flink_job_name: str | None = None,
        group_id: str | None = None,
        poll_s: float = DEFAULT_POLL_S,
        read: Reader | None = None,
        engine: str = vocab.ENGINE_FLINK_KAFKASOURCE,
        startup_mode: str | None = None,
        startup_key: str | None = None,
        positions: Positions | None = None,
        storage_options: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        prefetch: Prefetcher | None = None,
    ) -> None:
        if (flink_job_id is None) == (flink_job_name is None):
            raise UsageError("follow a Flink job by its id or by its name (one of them)")
        self.rest = rest
        self.ledger = ledger
        self.flink_job_id = flink_job_id
        self.flink_job_name = flink_job_name
        self.group_id = group_id
        self.poll_s = poll_s
        self.read: Reader = read or (lambda path: read_checkpoint(path, storage_options))
        self.storage_options = storage_options
        self.engine = engine
        self.startup_mode = startup_mode
        self.startup_key = startup_key
        self.positions = positions
        self.clock = clock
        self.prefetch = prefetch
        self.summary = WatchSummary()
        self.job: JobSummary | None = None
        self.run: _Run | None = None
        self.last_id: int | None = None  # the newest checkpoint id handled (recorded, failed or missed)
        self.completed_count: int | None = None
        self._down = False
        self._job_dir: str | None = None  # the followed job's checkpoint directory, where known

    # --- the loop -----------------------------------------------------------------------------

    def start(self, wait_s: float = 0.0, stop: Stop | None = None) -> list[str]:
        """The first contact: the job must be there (UsageError by id; by name it may come later),
        the REST reachable within ``wait_s`` seconds (else FlinkRestError: exit 3; a sidecar may start
        beside its JobManager). Returns the retention warnings, also logged."""
        deadline = self.clock() + wait_s
        while True:
            try:
                job = self._resolve()
                break
            except FlinkRestError:
                if self.clock() >= deadline or (stop is not None and stop.wait(self.poll_s)):
                    raise
                if stop is None:
                    time.sleep(self.poll_s)
        if job is None and self.flink_job_id is not None:
            raise UsageError(f"the JobManager at {self.rest.base_url} knows no job {self.flink_job_id}")
        self.ledger.ensure()
        if job is not None:
            warnings = retention_warnings(self.rest.checkpoint_config(job.job_id), self.poll_s)
            for warning in warnings:
                log.warning("flink-watch: %s", warning)
            self.summary.warnings = warnings
        return self.summary.warnings

    def follow(self, stop: Stop, max_polls: int | None = None) -> WatchSummary:
        """Polls every ``poll_s`` (start to start) until a stop, the followed job id's end, or
        ``max_polls``."""
        polls = 0
        ended = False
        while stop.requested is None and (max_polls is None or polls < max_polls):
            polls += 1
            started = self.clock()
            if self.poll_once():
                ended = True
                break
            if stop.wait(self.poll_s - (self.clock() - started)):
                break
        if not ended and stop.requested is not None:
            self.last_look()
        self.summary.rest_requests = self.rest.requests
        return self.summary

    def last_look(self) -> None:
        """At a stop, one more poll: what the job completed since the last one is recorded (Flink
        may have committed it already, and an unrecorded commit is foreign). When the REST API is
        gone (an application cluster or a MiniCluster ends with its job), the job's checkpoint
        directory still tells it: each `chk-K` after the last handled one holding `_metadata`
        (Flink writes it as the checkpoint completes)."""
        self.poll_once()
        run = self.run
        if not self._down or run is None or run.stopped:
            return
        directory = self._checkpoint_dir(run)
        if directory is None:
            return
        after = self.last_id if self.last_id is not None else max(run.recorded, default=-1)
        found = dict(_retained_in(directory, range(after + 1, 2**62), self.storage_options))
        if not found:
            return
        extra = recovered_mark(run.attempt.run_id)
        below_ms = run.newest[0].ack_ms if run.newest is not None else None
        now_ms = int(time.time() * 1000)
        for checkpoint_id in range(after + 1, max(found) + 1):
            path = found.get(checkpoint_id, f"{directory}/chk-{checkpoint_id}")
            read = self._read(CheckpointStat(checkpoint_id, STATUS_COMPLETED, False, 0, 0, path, False))
            if isinstance(read, ev.Missed) and checkpoint_id not in found:
                read = ev.Missed(checkpoint_id, vocab.MISSED_FILES_GONE, LOST_AT_END)
            stat = _stat_from_file(checkpoint_id, path, now_ms, self.storage_options)
            if _modified_ms(path, self.storage_options) is None and below_ms is not None:
                # read ahead, its files deleted since: it completed after the checkpoint below it
                stat = replace(stat, trigger_ms=below_ms, ack_ms=below_ms)
            self._write(stat, read, run, extra)
            below_ms = stat.ack_ms
            self.last_id = checkpoint_id
        log.info(
            "flink-watch: the REST API is gone; checkpoints %d-%d of run %s read from %s",
            after + 1,
            max(found),
            run.attempt.run_id,
            directory,
        )

    def _checkpoint_dir(self, run: _Run) -> str | None:
        """The directory of the followed job's `chk-K`: beside its last recorded checkpoint, else
        where the read-ahead looks."""
        if run.newest is not None and run.newest[0].external_path:
            return posixpath.dirname(run.newest[0].external_path.rstrip("/"))
        return self._job_dir

    def poll_once(self) -> bool:
        """One poll; True when the followed job id ended (nothing more will happen to it)."""
        try:
            return self._poll()
        except FlinkRestError as exc:
            if not self._down:
                log.warning("flink-watch: %s; retrying every %.1f s", exc, self.poll_s)
            self._down = True
            return False

    def _poll(self) -> bool:
        job = self._resolve()
        if self._down:
            log.info("flink-watch: the Flink REST API answers again")
            self._down = False
        if job is None:
            return False
        new_job = self.job is None or job.job_id != self.job.job_id
        if new_job and not (job.running or job.terminal):
            # A job still being created or scheduled has not restored its state yet: its attempt
            # (and so its run) is known once it runs.
            return False
        if self.job is not None and new_job:
            self._leave(self.job)
        if new_job:
            # Checkpoint ids and counts are the job's: a new job (a resubmission) starts its own.
            self.completed_count = None
            self.last_id = None
            self._prefetch_job(job)
        self.job = job
        checkpoints = self.rest.checkpoints(job.job_id)
        attempt = ev.Attempt(job.job_id, job.start_ms, checkpoints.restored)
        if self.run is None or self.run.attempt.run_id != attempt.run_id:
            if self.run is not None and self.run.attempt.job_id == job.job_id and attempt.restore is not None:
                # A failover: what the dying attempt completed before the restore is its own.
                self._record(checkpoints, self.run, before_ms=attempt.restore.restore_ms)
            self._begin(attempt, checkpoints)
        assert self.run is not None
        recorded = self.run.counts.recorded
        self._record(checkpoints, self.run)
        if self.run.counts.recorded > recorded:
            self._sample_commits(self.run)
        self.completed_count = checkpoints.completed_count
        if job.terminal:
            self._stop(self.run, job)
            return self.flink_job_id is not None
        return False

    def _prefetch_job(self, job: JobSummary) -> None:
        """Point the read-ahead at the new job's checkpoint directory, `<checkpoint dir>/<job id>`."""
        self._job_dir = None
        if self.prefetch is None:
            return
        root = self.rest.checkpoint_config(job.job_id).directory
        self._job_dir = None if root is None else f"{root.rstrip('/')}/{job.job_id}"
        self.prefetch.watch(self._job_dir, 0)

    def _resolve(self) -> JobSummary | None:
        if self.flink_job_id is not None:
            return self.rest.job(self.flink_job_id)
        assert self.flink_job_name is not None
        return newest_by_name(self.rest.jobs(), self.flink_job_name)

    # --- runs -----------------------------------------------------------------------------------

    def _begin(self, attempt: ev.Attempt, checkpoints: Checkpoints) -> None:
        previous = self.run.attempt.run_id if self.run is not None else self.ledger.last_run_id()
        engine, restored, note = self._restored_offsets(attempt)
        source = EventSource(self.ledger.job_name, attempt.run_id, engine, self.group_id)
        recorder = self.ledger.recorder(source)
        self.run = _Run(
            attempt, recorder, ev.RunCounts(missed=[]), recorded=self.ledger.completed_ids(attempt.run_id)
        )
        if not self.run.recorded:
            # Followed from its start: the source's counters start at zero with the attempt's tasks.
            self.run.commits = CommitCounts(0, 0)
        if attempt.restore is not None and restored is not None and previous not in (None, attempt.run_id):
            self._recover(previous, attempt, engine, restored, checkpoints)
        notes = [note] if note else []
        mode = self.startup_mode
        if attempt.restore is None:
            mode = self._startup_mode(attempt)
            self.run.start = self._sight(mode, checkpoints) if not self.run.recorded else None
            if self.positions is None:
                notes.append(
                    "started without state, and no broker to ask where its Kafka sources started: the "
                    "first checkpoint is the earliest position known"
                )
        start = ev.run_start(attempt, startup_mode=mode, notes=notes)
        offsets = ev.offsets_restored(source, attempt, restored or {})
        self.summary.events_written += recorder.start(attempt.started_at, start, offsets)
        self.summary.runs.append(attempt.run_id)
        if attempt.restore is not None and self.last_id is None:
            # What the restored checkpoint's id and those before it were is the earlier attempts' story.
            self.last_id = attempt.restore.checkpoint_id
            if self.prefetch is not None:
                self.prefetch.forget_through(self.last_id)
        log.info("flink-watch: run %s of Flink job %s started", attempt.run_id, attempt.job_id)

    def _sample_commits(self, run: _Run) -> None:
        """After new checkpoints were recorded (their commits requested), the source's commit
        counters: a rise of commitsFailed since the last sample becomes COMMIT_FAILED on the newest
        recorded checkpoint. One GET a sample (a few more until the counters are registered); none
        without a group id, since no commit is expected then."""
        if self.group_id is None or run.newest is None:
            return
        job_id = run.attempt.job_id
        try:
            if run.metrics is None:
                run.metrics = self.rest.commit_metrics(job_id)
                if run.metrics is None:
                    return
            counts = self.rest.commit_counts(job_id, run.metrics)
        except FlinkRestError as exc:
            # Best effort: the checkpoints are recorded; an unanswered sample is taken next time.
            log.info("flink-watch: the commit counters of run %s not read: %s", run.attempt.run_id, exc)
            return
        if counts is None:
            return
        before, run.commits = run.commits, counts
        if before is None or counts.failed <= before.failed:
            return
        stat, decoded = run.newest
        failed = counts.failed - before.failed
        source = run.recorder.source
        events = ev.commits_failed(source, stat, decoded, failed, counts.failed, datetime.now(UTC))
        self.summary.failed_commits += failed
        self.summary.events_written += run.recorder.record(events)
        log.warning(
            "flink-watch: %d commits of run %s failed since the last poll (its Kafka source's commitsFailed)",
            failed,
            run.attempt.run_id,
        )

    def _startup_mode(self, attempt: ev.Attempt) -> str | None:
        """The startup mode of an attempt without state: what the job published under the startup
        key, else what the sidecar was told (None: the first checkpoint's markers may say)."""
        if self.startup_key is not None:
            value = self.rest.job_parameter(attempt.job_id, self.startup_key)
            named = ev.startup_mode_named(value)
            if named is not None:
                return named
            if value is not None:
                log.warning(
                    "flink-watch: job parameter %s is %r, not a startup mode", self.startup_key, value
                )
        return self.startup_mode

    def _sight(self, mode: str | None, checkpoints: Checkpoints) -> _Start | None:
        """The pending start of an attempt without state. From the group's offsets, they are asked
        now, while the attempt has completed no checkpoint (its own commits follow its checkpoints),
        for the partitions the job's ledger knows."""
        if self.positions is None:
            return None
        start = _Start(mode)
        if mode == vocab.RESTORE_GROUP and checkpoints.completed_count == 0:
            start.group_offsets = self.positions.at(mode, self.ledger.partitions(), self.group_id)
        return start

    def _write_start(self, run: _Run, stat: CheckpointStat, read: FlinkCheckpointOffsets) -> None:
        """The OFFSETS_RESTORED of an attempt without state, at its first checkpoint holding
        partitions (before it, its source has no split): the broker's position for the mode, bounded
        by that checkpoint (`events.stateless_start`)."""
        start = run.start
        if start is None or self.positions is None or not read.offsets:
            return
        run.start = None
        mode = start.mode or ev.marked_mode(read)
        if mode not in ev.BROKER_MODES:
            log.warning(
                "flink-watch: run %s started without state from an unknown position (startup mode %s): "
                "no start offsets recorded; name it with --starting-offsets or --starting-offsets-key",
                run.attempt.run_id,
                mode,
            )
            return
        tps = [(s.topic, s.partition) for s in read.offsets]
        asked = {tp: o for tp, o in start.group_offsets.items() if tp in set(tps)}
        missing = [tp for tp in tps if tp not in asked]
        if missing and not (mode == vocab.RESTORE_GROUP and start.group_offsets):
            asked.update(self.positions.at(mode, missing, self.group_id))
        starts = ev.stateless_start(asked, read)
        source = for_engine(run.recorder.source, read.engine)
        events = ev.offsets_started(source, run.attempt, mode, starts, stat.checkpoint_id)
        self.summary.events_written += run.recorder.record(events)

    def _restored_offsets(
        self, attempt: ev.Attempt
    ) -> tuple[str, dict[TopicPartitionKey, int | None] | None, str | None]:
        """The engine and raw offsets the attempt restored: read from the restored state, else the
        ledger's completion of that checkpoint; with a note when neither could say."""
        restore = attempt.restore
        if restore is None:
            return self.engine, None, None
        if restore.external_path is not None:
            try:
                decoded = self.read(restore.external_path)
                offsets: dict[TopicPartitionKey, int | None] = {**ev.raw_offsets(decoded)}
                return decoded.engine, offsets, None
            except (FlinkStateError, InfrastructureError) as exc:
                failure = f"the restored state at {restore.external_path} could not be read: {exc}"
        else:
            failure = "Flink reported no path for the restored state"
        recorded = self.ledger.completion(restore.checkpoint_id)
        if recorded is not None:
            return recorded[0], recorded[1], f"{failure}; offsets from the ledger's completion"
        log.warning("flink-watch: %s, and the ledger holds no completion of it", failure)
        return self.engine, None, failure

    def _recover(
        self,
        previous: str,
        attempt: ev.Attempt,
        engine: str,
        restored: dict[TopicPartitionKey, int | None],
        checkpoints: Checkpoints,
    ) -> None:
        """Record the restored checkpoint as the previous run's completion when the ledger lacks it,
        with the checkpoints between that run's last recorded one and it: they completed between its
        last poll and its end (a process killed moments after a few checkpoints, or a sidecar that
        fell behind). Each is read from its retained files, else from what the read-ahead decoded
        before Flink deleted them; one neither holds is lost: named in the restored completion's
        `missed_checkpoints`, with the commit it may have requested where the checkpoints on both
        sides agree on a partition's offset (it held that offset too), so the group's commit of it
        is the job's own and not a FOREIGN_COMMIT."""
        restore = attempt.restore
        if restore is None or ev.restore_source(restore) != vocab.RESTORE_CHECKPOINT:
            return
        held = self.ledger.completed_ids(run_id=previous)
        if restore.checkpoint_id in held:
            return
        extra = recovered_mark(attempt.run_id)
        source = EventSource(self.ledger.job_name, previous, engine, self.group_id)
        recorder = self.ledger.recorder(source)
        reads: dict[int, tuple[str, FlinkCheckpointOffsets]] = {}
        for checkpoint_id, path in _retained_between(
            restore.external_path, max(held, default=-1), restore, self.storage_options
        ):
            try:
                reads[checkpoint_id] = (path, self.read(path))
            except (FlinkStateError, InfrastructureError) as exc:
                log.warning(
                    "flink-watch: retained checkpoint %s of run %s not recovered: %s", path, previous, exc
                )
        last = self.ledger.latest_completion(previous) if held else None
        gap = range(last[0] + 1, restore.checkpoint_id) if last is not None else range(0)
        dead = self.run if self.run is not None and self.run.attempt.run_id == previous else None
        failed = dead.failed_ids if dead is not None else set()
        # already named by the run's own polls (a failover's history is still there to read)
        named = {m.checkpoint_id for m in (dead.counts.missed or [])} if dead is not None else set()
        for checkpoint_id in gap:
            ahead = self._read_ahead(restore.external_path, checkpoint_id)
            if checkpoint_id not in reads and ahead is not None:
                reads[checkpoint_id] = ahead
        writes: dict[int, list[LedgerEvent]] = {}
        lost: list[ev.Missed] = []
        below = None if last is None else (last[1], last[2])
        for checkpoint_id in sorted({*reads, *(i for i in gap if i not in failed)}):
            if checkpoint_id in reads:
                path, earlier = reads[checkpoint_id]
                stat = _stat_from_file(checkpoint_id, path, restore.restore_ms, self.storage_options)
                if below is not None and _modified_ms(path, self.storage_options) is None:
                    # read ahead, its files deleted since: it completed after the checkpoint below it
                    stat = replace(stat, trigger_ms=below[0], ack_ms=below[0])
                writes[checkpoint_id] = ev.checkpoint_events(
                    for_engine(source, earlier.engine), stat, earlier, commits=False, extra=extra
                )
                below = (stat.ack_ms or stat.trigger_ms, {**ev.raw_offsets(earlier)})
                continue
            if checkpoint_id not in named:
                lost.append(ev.Missed(checkpoint_id, vocab.MISSED_FILES_GONE, LOST_AT_END))
            above = next((ev.raw_offsets(reads[i][1]) for i in sorted(reads) if i > checkpoint_id), restored)
            if below is not None:
                agreed = ev.agreed_offsets(below[1], above)
                writes[checkpoint_id] = ev.lost_commit(source, checkpoint_id, ev.at_ms(below[0]), agreed)
        for checkpoint_id in sorted(writes):
            if writes[checkpoint_id]:
                self.summary.events_written += _written(recorder, checkpoint_id, writes[checkpoint_id])
        self.summary.checkpoints_recorded += len(reads)
        for missed in lost:
            self.summary.missed.append(missed.as_detail())
            log.warning(
                "flink-watch: checkpoint %d of run %s not recorded (%s): %s",
                missed.checkpoint_id,
                previous,
                missed.reason,
                missed.message,
            )
        in_history = next((s for s in checkpoints.history if s.checkpoint_id == restore.checkpoint_id), None)
        # A resubmission's history starts empty: the checkpoint completed before the restore.
        stat = in_history or _stat_from_file(
            restore.checkpoint_id, restore.external_path, restore.restore_ms, self.storage_options
        )
        offsets = tuple(
            SplitOffset(t, p, raw, None) for (t, p), raw in sorted(restored.items()) if raw is not None
        )
        decoded = FlinkCheckpointOffsets(
            restore.checkpoint_id, engine, "", restore.external_path or "", offsets
        )
        events = ev.checkpoint_events(source, stat, decoded, missed=lost, commits=False, extra=extra)
        self.summary.events_written += _written(recorder, restore.checkpoint_id, events)
        self.summary.checkpoints_recorded += 1

    def _read_ahead(
        self, restored_path: str | None, checkpoint_id: int
    ) -> tuple[str, FlinkCheckpointOffsets] | None:
        """What the read-ahead decoded of the dead run's `chk-<checkpoint_id>` (beside the restored
        checkpoint), if it did."""
        if self.prefetch is None or restored_path is None:
            return None
        path = f"{posixpath.dirname(restored_path.rstrip('/'))}/chk-{checkpoint_id}"
        decoded = self.prefetch.take(path)
        return None if decoded is None or decoded.checkpoint_id != checkpoint_id else (path, decoded)

    def _record(self, checkpoints: Checkpoints, run: _Run, before_ms: int | None = None) -> None:
        """Record ``run``'s checkpoints that completed since the last one handled, in id order."""
        history = {s.checkpoint_id: s for s in checkpoints.history}
        new = [
            s
            for s in checkpoints.history
            if (self.last_id is None or s.checkpoint_id > self.last_id)
            and run.attempt.owns(s)
            and (before_ms is None or s.trigger_ms < before_ms)
            and (s.completed or s.failed)
        ]
        if new and self.last_id is not None and self.completed_count is not None:
            seen = sum(1 for s in new if s.completed)
            if checkpoints.completed_count - self.completed_count > seen:
                gap = [i for i in range(self.last_id + 1, new[0].checkpoint_id) if i not in history]
                self._name_missed(run, unread(gap))
        elif new and self.completed_count is None:
            self._name_missed(run, _before_history(checkpoints, run, self.last_id, new[0].checkpoint_id))
        ready: list[CheckpointStat] = []
        for stat in new:
            # An in-progress checkpoint before a finished one stops the walk: it is handled next poll.
            if any(
                s.checkpoint_id < stat.checkpoint_id and not (s.completed or s.failed)
                for s in checkpoints.history
                if self.last_id is None or s.checkpoint_id > self.last_id
            ):
                break
            ready.append(stat)
        # Every file is read before anything is written: Flink deletes a checkpoint's files as later
        # ones complete, and a ledger write (a Delta commit) takes longer than a decode.
        reads = {
            s.checkpoint_id: self._read(s)
            for s in ready
            if s.completed and s.checkpoint_id not in run.recorded
        }
        for stat in ready:
            if stat.failed:
                run.counts.failed += 1
                run.failed_ids.add(stat.checkpoint_id)
                self.summary.failed_checkpoints += 1
            elif stat.checkpoint_id in reads:
                self._write(stat, reads[stat.checkpoint_id], run)
            self.last_id = stat.checkpoint_id
        if self.prefetch is not None and self.last_id is not None:
            self.prefetch.forget_through(self.last_id)

    def _name_missed(self, run: _Run, missed: Sequence[ev.Missed]) -> None:
        """Checkpoints of ``run`` that left the REST history unread: named on its next recorded
        completion, counted in its RUN_STOPPED and the summary, and logged."""
        run.pending_missed += missed
        assert run.counts.missed is not None
        run.counts.missed += missed
        self.summary.missed += [m.as_detail() for m in missed]
        if missed:
            log.warning(
                "flink-watch: checkpoints %s of run %s not recorded (%s): they left the REST history "
                "before the sidecar saw them",
                ", ".join(str(m.checkpoint_id) for m in missed),
                run.attempt.run_id,
                vocab.MISSED_NOT_IN_HISTORY,
            )

    def _read(self, stat: CheckpointStat) -> FlinkCheckpointOffsets | ev.Missed:
        if stat.external_path is None:
            return ev.Missed(stat.checkpoint_id, vocab.MISSED_NO_EXTERNAL_PATH)
        ahead = None if self.prefetch is None else self.prefetch.take(stat.external_path)
        if ahead is not None and ahead.checkpoint_id == stat.checkpoint_id:
            return ahead
        try:
            return self.read(stat.external_path)
        except (FlinkStateError, InfrastructureError) as exc:
            return ev.Missed(stat.checkpoint_id, failure_reason(exc), str(exc)[:300])

    def _write(
        self,
        stat: CheckpointStat,
        read: FlinkCheckpointOffsets | ev.Missed,
        run: _Run,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        if isinstance(read, ev.Missed):
            run.pending_missed.append(read)
            assert run.counts.missed is not None
            run.counts.missed.append(read)
            self.summary.missed.append(read.as_detail())
            log.warning(
                "flink-watch: checkpoint %d of run %s not recorded (%s): %s",
                stat.checkpoint_id,
                run.attempt.run_id,
                read.reason,
                read.message,
            )
            return
        self._write_start(run, stat, read)
        events = ev.checkpoint_events(run.recorder.source, stat, read, missed=run.pending_missed, extra=extra)
        self.summary.events_written += _written(run.recorder, stat.checkpoint_id, events)
        run.pending_missed = []
        if read.offsets:
            run.newest = (stat, read)
        run.recorded.add(stat.checkpoint_id)
        run.counts.recorded += 1
        self.summary.checkpoints_recorded += 1

    def _stop(self, run: _Run, job: JobSummary) -> None:
        if run.stopped:
            return
        when = ev.at_ms(job.end_ms) if job.end_ms else datetime.now(UTC)
        reason = ev.stop_reason(job.state)
        self.summary.events_written += run.recorder.stop(when, None, reason, run.counts.counts())
        self.summary.stopped_runs.append(run.attempt.run_id)
        run.stopped = True
        log.info("flink-watch: run %s stopped (%s)", run.attempt.run_id, job.state)

    def _leave(self, previous: JobSummary) -> None:
        """The followed name moved to a new job: the old one's last checkpoints and its end, when the
        JobManager still knows it (a killed process's job is gone: no stop is recorded)."""
        if self.run is None or self.run.attempt.job_id != previous.job_id:
            return
        job = self.rest.job(previous.job_id)
        if job is None or not job.terminal:
            return
        self._record(self.rest.checkpoints(job.job_id), self.run)
        self._stop(self.run, job)


def _before_history(
    checkpoints: Checkpoints, run: _Run, last_id: int | None, first_new: int
) -> list[ev.Missed]:
    """At the sidecar's first look at a job (started after the job's first checkpoints, or again
    after a while), the checkpoints of ``run`` that already left the REST history, when its counts
    say some completed there: those after the last the ledger holds of the run (else the restored
    one, else the job's start) and before ``first_new``, the first in the history still to handle.
    Named like a gap between two polls, so their commits are the job's (CONTRACTS.md section 5)."""
    if checkpoints.completed_count <= sum(1 for s in checkpoints.history if s.completed):
        return []
    restore = run.attempt.restore
    after = max([*run.recorded, restore.checkpoint_id if restore is not None else 0, last_id or 0])
    listed = {s.checkpoint_id for s in checkpoints.history}
    return unread([i for i in range(after + 1, first_new) if i not in listed])


def unread(ids: Sequence[int]) -> list[ev.Missed]:
    """Checkpoints that left the REST history unread, named (ascending ``ids``). A long block (a
    sidecar first started on a job that ran for weeks, a REST API down for a day) is named by its
    first id, saying how many more it stands for, and its newest `MAX_NAMED_UNREAD` - 1: a million
    entries would swell the completion's detail and each finding's evidence, and the spans
    reconcile draws from them are the same (bounded by the recorded checkpoints around them)."""
    if len(ids) <= MAX_NAMED_UNREAD:
        return [ev.Missed(i, vocab.MISSED_NOT_IN_HISTORY) for i in ids]
    newest = ids[len(ids) - MAX_NAMED_UNREAD + 1 :]
    more = len(ids) - MAX_NAMED_UNREAD
    note = f"and {more} more unread checkpoints after it, before {newest[0]}, not named one by one"
    return [ev.Missed(ids[0], vocab.MISSED_NOT_IN_HISTORY, note)] + [
        ev.Missed(i, vocab.MISSED_NOT_IN_HISTORY) for i in newest
    ]


def _written(recorder: RunRecorder, checkpoint_id: int, events: list[LedgerEvent]) -> int:
    """One Delta commit for a checkpoint's events (the run's transaction id, version = its id):
    how many were written (none when a sidecar before this one wrote them)."""
    return len(events) if recorder.batch(checkpoint_id, events) else 0


def _stat_from_file(
    checkpoint_id: int, path: str | None, restore_ms: int, storage_options: Mapping[str, str] | None = None
) -> CheckpointStat:
    """A retained checkpoint's REST facts when REST no longer has them: completed when Flink wrote
    its `_metadata` (before the restore that read it)."""
    when = min(_modified_ms(path, storage_options) or restore_ms, restore_ms - 1)
    return CheckpointStat(checkpoint_id, STATUS_COMPLETED, False, when, when, path, False)


def _retained_between(
    restored_path: str | None,
    after: int,
    restore: Restore,
    storage_options: Mapping[str, str] | None = None,
) -> list[tuple[int, str]]:
    """The retained `chk-K` beside the restored checkpoint with ``after`` < K < its id, ascending
    (local directories and S3 ones)."""
    if restored_path is None:
        return []
    parent = posixpath.dirname(restored_path.rstrip("/"))
    return _retained_in(parent, range(after + 1, restore.checkpoint_id), storage_options)


def _retained_in(
    parent: str, wanted: range, storage_options: Mapping[str, str] | None = None
) -> list[tuple[int, str]]:
    """The `chk-K` under ``parent`` holding `_metadata` with K in ``wanted``, ascending."""
    if object_store_path(parent):
        return sorted(
            (checkpoint_id, f"{parent}/chk-{checkpoint_id}")
            for checkpoint_id in _stored_checkpoints(parent, storage_options)
            if checkpoint_id in wanted
        )
    directory = local_dir(parent)
    if directory is None:
        return []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        match = CHECKPOINT_DIR.match(name)
        path = os.path.join(directory, name)
        if match and int(match.group(1)) in wanted and os.path.exists(os.path.join(path, "_metadata")):
            found.append((int(match.group(1)), path))
    return sorted(found)


def _stored_checkpoints(parent: str, storage_options: Mapping[str, str] | None) -> list[int]:
    """The ids of the `chk-K/_metadata` objects under the S3 directory ``parent`` (none when it cannot
    be listed: the recovery is a best effort, as on disk)."""
    try:
        stored = list_objects(parent, storage_options)
    except (FlinkStateError, InfrastructureError) as exc:
        log.warning("flink-watch: %s not listed: %s", parent, exc)
        return []
    ids = []
    for item in stored:
        directory, _, name = item.relative.partition("/")
        match = CHECKPOINT_DIR.match(directory)
        if match and name == "_metadata":
            ids.append(int(match.group(1)))
    return ids


def _modified_ms(external_path: str | None, storage_options: Mapping[str, str] | None = None) -> int | None:
    if external_path is None:
        return None
    if object_store_path(external_path):
        try:
            return object_modified_ms(f"{external_path.rstrip('/')}/_metadata", storage_options)
        except (FlinkStateError, InfrastructureError):
            return None
    try:
        return int(os.stat(os.path.join(local_path(external_path), "_metadata")).st_mtime * 1000)
    except OSError:
        return None
