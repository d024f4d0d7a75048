"""A model of Flink's commit-on-checkpoint offset committer that records every step in the ledger.

Flink's Kafka consumer commits group offsets only after a checkpoint completes, asynchronously, and
only the newest: ``snapshotState`` keeps the offsets pending by checkpoint id (at most 100),
``notifyCheckpointComplete`` takes the completed one and drops the older pending ones, and the
consumer thread keeps a single "next offsets to commit" slot that a newer request overwrites while a
commit is still in flight. This class reproduces that path for a Spark job (one micro-batch is one
checkpoint), so the group offsets drift in the same ways, and writes a ledger event for every
decision, which is what the reconciliation later explains the drift with.

Events go to an internal thread-safe buffer that the job flushes with its next micro-batch
(``drain``), and optionally to a listener. The Kafka call itself is injected (``commit_fn``) so the
whole machinery runs without a broker, and ``autostart=False`` with ``run_once`` drives the worker
step by step so tests reach the racy states deterministically.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from app.contracts import vocabulary as vocab
from app.contracts.offsets import (
    EventSource,
    LedgerEvent,
    TopicPartitionKey,
    commit_offset_for,
    normalize_offset,
    offset_semantics_for,
)
from app.errors import CommitterStateError, ConfigError
from app.kafka.commit_outcome import CommitError, CommitFailedError, CommitFn, CommitResult

logger = logging.getLogger(__name__)

MAX_NUM_PENDING_CHECKPOINTS: Final = 100  # FlinkKafkaConsumerBase's bound on pending checkpoints

# Flink's own wording, so that people who know the Flink log line recognise the situation.
SUPERSEDED_WARNING: Final = (
    "Committing offsets to Kafka takes longer than the checkpoint interval. "
    "Skipping commit of previous offsets because newer complete checkpoint offsets are available."
)


@dataclass(frozen=True)
class _CommitRequest:
    checkpoint_id: int
    attempt: int
    raw_offsets: Mapping[TopicPartitionKey, int]  # sentinels already removed
    commit_offsets: Mapping[TopicPartitionKey, int]  # what goes to Kafka, same keys


def _utc_now() -> datetime:
    return datetime.now(UTC)


class OffsetCommitter:
    """Commit-on-checkpoint offset committer with Flink's semantics and a ledger of every step.

    Call ``snapshot`` when a micro-batch's offsets are fixed, ``notify_checkpoint_complete`` once
    its output is durable, ``drain`` to collect the ledger events, and ``close`` at shutdown.
    Methods may be called from any thread; the Kafka call runs on one worker thread (or, with
    ``autostart=False``, in whichever thread calls ``run_once``), never more than one at a time.
    With ``records_checkpoints=False`` it records only its commit decisions (COMMIT_*): the caller
    writes the checkpoints' own events from Spark's checkpoint (`stream.recorder.batch_events`).
    """

    def __init__(
        self,
        *,
        job_name: str,
        run_id: str,
        engine: str,
        group_id: str,
        commit_fn: CommitFn,
        max_pending: int = MAX_NUM_PENDING_CHECKPOINTS,
        clock: Callable[[], datetime] = _utc_now,
        listener: Callable[[LedgerEvent], None] | None = None,
        commit_enabled: bool = True,
        autostart: bool = True,
        records_checkpoints: bool = True,
    ) -> None:
        offset_semantics_for(engine)  # unknown engines fail here, not at the first checkpoint
        if max_pending < 1:
            raise ConfigError("max_pending", f"must be at least 1, got {max_pending}")
        self._job_name = job_name
        self._run_id = run_id
        self._engine = engine
        self._group_id = group_id
        self._source = EventSource(job_name, run_id, engine, group_id)
        self._commit_fn = commit_fn
        self._max_pending = max_pending
        self._clock = clock
        self._listener = listener
        self._commit_enabled = commit_enabled
        self._records_checkpoints = records_checkpoints

        # One condition guards all mutable state below; the worker waits on it for work and
        # close() waits on it for the worker to go idle.
        self._cond = threading.Condition()
        self._pending: OrderedDict[int, dict[TopicPartitionKey, int]] = OrderedDict()
        self._slot: _CommitRequest | None = None  # Flink's nextOffsetsToCommit
        self._in_flight: _CommitRequest | None = None
        self._abandoned: set[int] = set()  # attempts closed out by abandon_in_flight()
        self._buffer: list[LedgerEvent] = []
        self._attempts = 0
        self._successful_commits = 0
        self._failed_commits = 0
        self._closed = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        if autostart:
            self.start()

    # --- checkpoint protocol ---------------------------------------------------------------------

    def snapshot(self, checkpoint_id: int, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Record checkpoint ``checkpoint_id``'s offsets and keep them pending until it completes."""
        # Normalizing first rejects corrupt offsets before anything is recorded or kept.
        for raw in offsets.values():
            normalize_offset(raw, self._engine)
        captured = dict(offsets)
        with self._cond:
            self._check_open()
            now = self._now()
            events = self._checkpoint_record(
                vocab.EVENT_CHECKPOINT_SNAPSHOT, checkpoint_id, captured, now, {}
            )
            # Re-snapshotting an id (a retried micro-batch) replaces its offsets in place, like
            # Flink's LinkedMap.put keeps the key's position.
            self._pending[checkpoint_id] = captured
            while len(self._pending) > self._max_pending:
                # Flink truncates silently; we record it because those offsets can never be
                # committed any more, which the reconciliation must be able to explain.
                evicted_id, evicted = self._pending.popitem(last=False)
                logger.warning(
                    "More than %d checkpoints pending; dropping checkpoint %d without commit",
                    self._max_pending,
                    evicted_id,
                )
                detail = {
                    vocab.DETAIL_REASON: vocab.SKIP_PENDING_EVICTED,
                    vocab.DETAIL_EVICTED_BY: checkpoint_id,
                }
                events += self._partition_events(vocab.EVENT_COMMIT_SKIPPED, evicted_id, evicted, now, detail)
            self._buffer.extend(events)
        self._notify(events)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> bool:
        """Record the completion and hand its offsets to the commit worker.

        Returns True when a commit was requested, False when it was skipped (the ledger says why).
        """
        with self._cond:
            self._check_open()
            now = self._now()
            if checkpoint_id not in self._pending:
                # Flink only logs "Received confirmation for unknown checkpoint id" and returns;
                # the engine still says the checkpoint completed, so both facts are recorded.
                logger.warning("Received confirmation for unknown checkpoint id %d", checkpoint_id)
                events = [
                    *self._checkpoint_record(vocab.EVENT_CHECKPOINT_COMPLETED, checkpoint_id, {}, now, {}),
                    self._event(
                        vocab.EVENT_COMMIT_SKIPPED,
                        checkpoint_id,
                        now,
                        {vocab.DETAIL_REASON: vocab.SKIP_UNKNOWN_CHECKPOINT},
                    ),
                ]
                requested = False
            else:
                events, requested = self._complete_locked(checkpoint_id, now)
            self._buffer.extend(events)
        self._notify(events)
        return requested

    def _complete_locked(self, checkpoint_id: int, now: datetime) -> tuple[list[LedgerEvent], bool]:
        offsets = self._pending.pop(checkpoint_id)
        # Older pending checkpoints are dropped without commit and WITHOUT a COMMIT_SKIPPED row,
        # as Flink does: offsets are positions, so committing checkpoint N covers everything an
        # older checkpoint would have committed, and an older one whose own completion arrives
        # later is recorded then as unknown_checkpoint. A skip row here would make the
        # reconciliation report skipped commits for checkpoints that may never have completed.
        # Their ids go into the completion's detail so forensics can still see the discard.
        older = [cid for cid in self._pending if cid < checkpoint_id]
        for cid in older:
            del self._pending[cid]
        completed_detail: dict[str, object] = {vocab.DETAIL_DISCARDED_PENDING: older} if older else {}
        if older and not self._records_checkpoints:
            # Only the completion row carries the discard; its writer hands completions in the
            # order of Spark's commit log, so this is not expected: the log keeps it visible.
            logger.warning("checkpoint %d completed before pending checkpoints %s", checkpoint_id, older)
        events = self._checkpoint_record(
            vocab.EVENT_CHECKPOINT_COMPLETED, checkpoint_id, offsets, now, completed_detail
        )

        if not self._commit_enabled:
            # Checked before emptiness: with commits off, "disabled" is the reason nothing was
            # committed, whatever the offsets were.
            detail = {vocab.DETAIL_REASON: vocab.SKIP_COMMIT_DISABLED}
            events += self._partition_events(vocab.EVENT_COMMIT_SKIPPED, checkpoint_id, offsets, now, detail)
            return events, False

        committable = {
            tp: raw for tp, raw in offsets.items() if commit_offset_for(raw, self._engine) is not None
        }
        if not committable:
            filtered = sorted([topic, partition] for topic, partition in offsets)
            empty_detail: dict[str, object] = {
                vocab.DETAIL_REASON: vocab.SKIP_EMPTY_OFFSETS,
                "filtered_partitions": filtered,
            }
            events.append(self._event(vocab.EVENT_COMMIT_SKIPPED, checkpoint_id, now, empty_detail))
            return events, False

        self._attempts += 1
        request = _CommitRequest(
            checkpoint_id=checkpoint_id,
            attempt=self._attempts,
            raw_offsets=committable,
            commit_offsets={tp: self._commit_offset(raw) for tp, raw in committable.items()},
        )
        events += self._partition_events(
            vocab.EVENT_COMMIT_REQUESTED,
            checkpoint_id,
            committable,
            now,
            {vocab.DETAIL_ATTEMPT: request.attempt},
        )
        events += self._put_in_slot_locked(request, now)
        return events, True

    def _put_in_slot_locked(self, request: _CommitRequest, now: datetime) -> list[LedgerEvent]:
        # Flink's setOffsetsToCommit: nextOffsetsToCommit.getAndSet(new) != null means the
        # consumer thread never picked the older request up, because a commit is in flight.
        replaced, self._slot = self._slot, request
        self._cond.notify_all()
        if replaced is None:
            return []
        logger.warning(
            "%s (skipping checkpoint %d, committing checkpoint %d)",
            SUPERSEDED_WARNING,
            replaced.checkpoint_id,
            request.checkpoint_id,
        )
        detail = {
            vocab.DETAIL_REASON: vocab.SKIP_SUPERSEDED_IN_FLIGHT,
            vocab.DETAIL_ATTEMPT: replaced.attempt,
            vocab.DETAIL_SUPERSEDED_BY: request.checkpoint_id,
        }
        return self._partition_events(
            vocab.EVENT_COMMIT_SKIPPED, replaced.checkpoint_id, replaced.raw_offsets, now, detail
        )

    # --- the commit worker -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the background worker (done by the constructor unless ``autostart=False``)."""
        with self._cond:
            self._check_open()
            if self._thread is not None:
                raise CommitterStateError("the commit worker is already running")
            # Daemon: a commit stuck on an unreachable broker must not keep the driver process
            # alive after close() gave up; abandon_in_flight() records that outcome instead.
            self._thread = threading.Thread(
                target=self._worker_loop, name=f"offset-committer-{self._job_name}", daemon=True
            )
            self._thread.start()

    def run_once(self) -> int | None:
        """Commit what sits in the slot, synchronously; return its checkpoint id or None if idle.

        Only without a worker thread: this is the step-by-step drive for tests and for callers
        that prefer to commit inline.
        """
        with self._cond:
            if self._thread is not None:
                raise CommitterStateError("run_once() is for autostart=False; a worker thread is running")
            request = self._take_slot_locked()
        if request is None:
            return None
        self._execute(request)
        return request.checkpoint_id

    def _worker_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (self._slot is None or self._in_flight is not None):
                    self._cond.wait()
                request = self._take_slot_locked()
                if request is None:  # stopping, and the slot is flushed
                    return
            self._execute(request)

    def _take_slot_locked(self) -> _CommitRequest | None:
        # Moving the request from the slot to in-flight in one locked step: there is no moment
        # in which a request is in neither place, so in_flight() and abandon_in_flight() never
        # miss one, and a second commit cannot start while one is outstanding.
        if self._slot is None or self._in_flight is not None:
            return None
        request, self._slot = self._slot, None
        self._in_flight = request
        return request

    def _execute(self, request: _CommitRequest) -> None:
        logger.debug(
            "Committing offsets of checkpoint %d (attempt %d)", request.checkpoint_id, request.attempt
        )
        try:
            result = self._commit_fn(request.commit_offsets)
        except CommitFailedError as exc:
            result = CommitResult.failed(exc.error)
        except Exception as exc:
            # Broad on purpose: the worker must outlive a buggy or unexpected commit_fn, and the
            # failure belongs in the ledger as a failed commit rather than in a dead thread.
            logger.exception("commit_fn raised for checkpoint %d", request.checkpoint_id)
            result = CommitResult.failed(CommitError(type(exc).__name__, retriable=False, message=str(exc)))

        with self._cond:
            now = self._now()
            events, failed = self._outcome_events(request, result, now)
            late = request.attempt in self._abandoned
            if late:
                # Already counted as failed by abandon_in_flight(); the real outcome is still
                # recorded because it is the truth about what reached Kafka.
                self._abandoned.discard(request.attempt)
            elif failed:
                self._failed_commits += 1
            else:
                self._successful_commits += 1
            counts = (self._successful_commits, self._failed_commits)
            self._in_flight = None
            self._buffer.extend(events)
            self._cond.notify_all()
        self._notify(events)
        if failed:
            logger.warning(
                "Offset commit of checkpoint %d failed%s (failed commits: %d)",
                request.checkpoint_id,
                " after it was abandoned" if late else "",
                counts[1],
            )
        else:
            logger.info(
                "Committed offsets of checkpoint %d%s (successful commits: %d)",
                request.checkpoint_id,
                " after it was abandoned" if late else "",
                counts[0],
            )

    def _outcome_events(
        self, request: _CommitRequest, result: CommitResult, now: datetime
    ) -> tuple[list[LedgerEvent], bool]:
        unasked = set(result.acknowledged) - set(request.commit_offsets)
        if unasked:
            logger.warning("Commit acknowledgement names partitions never sent: %s", sorted(unasked))
        events: list[LedgerEvent] = []
        failed = False
        for tp in sorted(request.commit_offsets):
            sent = request.commit_offsets[tp]
            detail: dict[str, object] = {vocab.DETAIL_ATTEMPT: request.attempt}
            error = result.errors.get(tp)
            if error is None and tp in result.acknowledged:
                offset = result.acknowledged[tp]
                if offset != sent:
                    detail["requested_offset"] = sent
                events.append(self._tp_event(vocab.EVENT_COMMIT_SUCCEEDED, request, tp, offset, now, detail))
                continue
            if error is None:
                error = result.error or CommitError(
                    vocab.ERROR_OUTCOME_UNKNOWN,
                    retriable=True,
                    message="partition missing from the acknowledgement",
                )
            failed = True
            detail.update(error.to_detail())
            events.append(self._tp_event(vocab.EVENT_COMMIT_FAILED, request, tp, sent, now, detail))
        return events, failed

    # --- shutdown --------------------------------------------------------------------------------

    def in_flight(self) -> int | None:
        """The checkpoint id whose commit has been sent and not yet answered, if any."""
        with self._cond:
            return None if self._in_flight is None else self._in_flight.checkpoint_id

    def close(self, timeout: float | None = None) -> bool:
        """Stop accepting checkpoints, flush the slot, wait for the commit in flight, stop the worker.

        Returns True when everything finished, False when ``timeout`` expired first; then call
        ``abandon_in_flight()`` to record what is left as outcome-unknown / not sent. Without a
        worker thread the slot is flushed inline and ``timeout`` cannot bound the Kafka call.
        """
        with self._cond:
            self._closed = True
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            while self.run_once() is not None:
                pass
            return self.in_flight() is None
        thread.join(timeout)
        return not thread.is_alive()

    def abandon_in_flight(self) -> list[int]:
        """Close out commits that will not be answered before the process stops.

        The request in flight gets COMMIT_FAILED with error OUTCOME_UNKNOWN (Kafka may or may not
        have stored it); a request still waiting in the slot gets COMMIT_FAILED with NOT_SENT
        (it certainly did not reach Kafka) and is withdrawn. Returns the checkpoint ids closed out.
        """
        with self._cond:
            now = self._now()
            events: list[LedgerEvent] = []
            closed_out: list[int] = []
            if self._in_flight is not None and self._in_flight.attempt not in self._abandoned:
                request = self._in_flight
                self._abandoned.add(request.attempt)
                self._failed_commits += 1
                unknown = CommitError(
                    vocab.ERROR_OUTCOME_UNKNOWN,
                    retriable=True,
                    message="process stopped before Kafka answered",
                )
                events += self._request_failed_events(request, unknown, now)
                closed_out.append(request.checkpoint_id)
            if self._slot is not None:
                request, self._slot = self._slot, None
                self._failed_commits += 1
                not_sent = CommitError(
                    vocab.ERROR_NOT_SENT, retriable=True, message="process stopped before sending"
                )
                events += self._request_failed_events(request, not_sent, now)
                closed_out.append(request.checkpoint_id)
            self._buffer.extend(events)
        self._notify(events)
        if closed_out:
            logger.warning("Abandoned offset commits of checkpoints %s at shutdown", closed_out)
        return closed_out

    # --- results ---------------------------------------------------------------------------------

    def drain(self) -> list[LedgerEvent]:
        """Take every event recorded so far, oldest first; the job writes them with its next batch."""
        with self._cond:
            events, self._buffer = self._buffer, []
        return events

    @property
    def successful_commits(self) -> int:
        """Commit attempts every partition of which Kafka acknowledged (Flink's commitsSucceeded)."""
        with self._cond:
            return self._successful_commits

    @property
    def failed_commits(self) -> int:
        """Commit attempts with at least one failed or unknown partition (Flink's commitsFailed)."""
        with self._cond:
            return self._failed_commits

    @property
    def pending_checkpoint_ids(self) -> tuple[int, ...]:
        """Snapshotted checkpoints not yet completed, oldest first."""
        with self._cond:
            return tuple(self._pending)

    # --- helpers ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise CommitterStateError("the committer is closed")

    def _now(self) -> datetime:
        return self._clock()

    def _commit_offset(self, raw: int) -> int:
        offset = commit_offset_for(raw, self._engine)
        if offset is None:  # callers filtered these out; a None here is a bug, not data
            raise AssertionError(f"offset {raw} is not committable for {self._engine}")
        return offset

    def _event(
        self, event_type: str, checkpoint_id: int, now: datetime, detail: Mapping[str, object]
    ) -> LedgerEvent:
        """A checkpoint-level event: no partition is known or concerned."""
        return self._source.event(event_type, now, checkpoint_id, detail)

    def _checkpoint_record(
        self,
        event_type: str,
        checkpoint_id: int,
        offsets: Mapping[TopicPartitionKey, int],
        now: datetime,
        detail: Mapping[str, object],
    ) -> list[LedgerEvent]:
        """The committer's own CHECKPOINT_SNAPSHOT/COMPLETED, unless its caller writes those from
        the checkpoint (``records_checkpoints=False``: the reference job and attached queries, see
        `stream.recorder.batch_events`); then it records only its commit decisions."""
        if not self._records_checkpoints:
            return []
        return self._partition_events(event_type, checkpoint_id, offsets, now, detail)

    def _partition_events(
        self,
        event_type: str,
        checkpoint_id: int,
        offsets: Mapping[TopicPartitionKey, int],
        now: datetime,
        detail: Mapping[str, object],
    ) -> list[LedgerEvent]:
        return self._source.checkpoint_events(event_type, now, checkpoint_id, offsets, detail)

    def _tp_event(
        self,
        event_type: str,
        request: _CommitRequest,
        tp: TopicPartitionKey,
        offset: int,
        now: datetime,
        detail: Mapping[str, object],
    ) -> LedgerEvent:
        """A commit outcome row: ``offset`` is what Kafka holds or was asked to hold."""
        topic, partition = tp
        return self._source.event(
            event_type,
            now,
            request.checkpoint_id,
            detail,
            topic=topic,
            partition=partition,
            offset=offset,
            raw_offset=request.raw_offsets[tp],
        )

    def _request_failed_events(
        self, request: _CommitRequest, error: CommitError, now: datetime
    ) -> list[LedgerEvent]:
        return [
            self._tp_event(
                vocab.EVENT_COMMIT_FAILED,
                request,
                tp,
                request.commit_offsets[tp],
                now,
                {vocab.DETAIL_ATTEMPT: request.attempt, **error.to_detail()},
            )
            for tp in sorted(request.commit_offsets)
        ]

    def _notify(self, events: list[LedgerEvent]) -> None:
        # Outside the lock, so a listener may call back into the committer without deadlock.
        if self._listener is None:
            return
        for event in events:
            try:
                self._listener(event)
            except Exception:
                # Broad on purpose: the listener is an optional side channel (metrics, logs);
                # the buffer already holds the event, and the commit path must not die for it.
                logger.exception("ledger event listener failed on %s", event.event_type)
