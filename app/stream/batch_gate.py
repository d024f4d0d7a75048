"""When the streaming job may stop its query: never while a micro-batch is at work in its callback.

Spark's `StreamingQuery.stop()` interrupts the micro-batch thread. In a Python `foreachBatch` that
thread is the one that runs every py4j call the callback makes (pinned thread mode), so the
interrupt surfaces in the middle of the batch's writes as a `Py4JJavaError` (InterruptedException,
ClosedByInterruptException). Spark then recognises the interruption by matching the callback's
whole traceback against a regular expression (`StreamExecution.PROXY_ERROR`, a repeated
alternation that recurses once per character): on a traceback that carries a Java stack trace the
query thread dies of StackOverflowError instead of stopping, and the batch is abandoned halfway.

The gate makes the stop land between batches instead:
- once a stop is requested, the batch in the callback runs to its end and is then held there, its
  writes done, until the query is being stopped: Spark cannot start another batch meanwhile, and
  the job's `release` (see StreamJob) lets Spark finish that batch undisturbed;
- a batch that reaches the callback after the query is being stopped is refused before it writes
  anything: Spark's checkpoint keeps it planned but not committed, and the next start runs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from app.errors import OffsetAuditError


class BatchRefusedError(OffsetAuditError):
    """A micro-batch that reached the callback while the query was being stopped; it ends the
    query without writing anything."""

    def __init__(self, batch_id: int) -> None:
        super().__init__(f"checkpoint {batch_id} not run: the job is stopping (the next start runs it)")
        self.batch_id = batch_id


class BatchGate:
    """Admits micro-batches into the callback, holds the last one at its end while the job stops
    the query, and refuses any that comes after."""

    def __init__(self, hold_timeout_s: float) -> None:
        self._hold_timeout_s = hold_timeout_s
        self._cond = threading.Condition()
        self._stopping = False  # a stop was requested: batches still run, and wait at their end
        self._closed = False  # the query is being stopped: batches are refused
        self._inside: int | None = None
        self._held = False
        self._refused: int | None = None

    def request_stop(self) -> None:
        """A bare attribute write, so a signal handler may call it: the handler runs in the main
        thread between two bytecodes, possibly while that thread holds the gate's lock."""
        self._stopping = True

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def held(self) -> bool:
        """A batch is held at its end."""
        return self._held

    @property
    def refused(self) -> int | None:
        """The first batch refused (None if none was)."""
        return self._refused

    @contextmanager
    def batch(self, batch_id: int, release: Callable[[], None]) -> Iterator[None]:
        """The callback's body runs inside this. Raises BatchRefusedError once the gate is closed.
        A body that ends normally while a stop is requested is held until the gate closes (the
        query is being stopped), then ``release()`` runs, on the callback's thread."""
        with self._cond:
            if self._closed:
                if self._refused is None:
                    self._refused = batch_id
                raise BatchRefusedError(batch_id)
            self._inside = batch_id
        try:
            yield
            if self._stopping and self._hold():
                release()
        finally:
            with self._cond:
                self._inside = None
                self._held = False
                self._cond.notify_all()

    def _hold(self) -> bool:
        """Until the gate closes (True), or the hold timeout passes (False)."""
        with self._cond:
            self._held = True
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._closed, self._hold_timeout_s)

    def close(self, timeout_s: float) -> int | None:
        """Called just before stopping the query: waits until no batch is at work in the callback
        (none inside, or the one inside held at its end), then refuses every later batch. Returns
        the id of a batch still at work at the deadline, None when there is none."""
        with self._cond:
            self._stopping = True
            self._cond.wait_for(lambda: self._inside is None or self._held, timeout_s)
            self._closed = True
            self._cond.notify_all()
            return None if self._inside is None or self._held else self._inside
