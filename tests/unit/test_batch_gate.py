"""The gate that keeps a stop out of a running micro-batch: which batches run, which are held at
their end, which are refused, and what closing it waits for.

The callback runs on a thread of its own, as Spark's micro-batch thread runs it; every hand-over
is an Event, never a sleep.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from app.stream.batch_gate import BatchGate, BatchRefusedError

pytestmark = pytest.mark.unit

DEADLINE_S = 30.0  # generous: each wait ends on an event long before


class Callback(threading.Thread):
    """One micro-batch's callback: enters the gate, signals, waits for `finish`, then leaves
    (raising if told to); records whether the gate released it."""

    def __init__(self, gate: BatchGate, batch_id: int, fail: bool = False) -> None:
        super().__init__(daemon=True)
        self.gate, self.batch_id, self.fail = gate, batch_id, fail
        self.entered, self.finish, self.released = threading.Event(), threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.gate.batch(self.batch_id, self.released.set):
                self.entered.set()
                assert self.finish.wait(DEADLINE_S)
                if self.fail:
                    raise RuntimeError("the sink write failed")
        except BaseException as exc:  # handed to the test
            self.error = exc


def started(gate: BatchGate, batch_id: int, fail: bool = False) -> Callback:
    callback = Callback(gate, batch_id, fail)
    callback.start()
    assert callback.entered.wait(DEADLINE_S)
    return callback


def in_thread(work: Callable[[], int | None]) -> tuple[threading.Thread, list[int | None]]:
    out: list[int | None] = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    return thread, out


def test_without_a_stop_a_batch_runs_through_and_is_not_held() -> None:
    gate = BatchGate(hold_timeout_s=DEADLINE_S)
    callback = started(gate, 0)
    callback.finish.set()
    callback.join(DEADLINE_S)

    assert not callback.is_alive()
    assert callback.error is None
    assert not callback.released.is_set()


def test_a_stop_lets_the_batch_at_work_finish_and_holds_it_until_the_gate_closes() -> None:
    gate = BatchGate(hold_timeout_s=DEADLINE_S)
    callback = started(gate, 7)
    gate.request_stop()
    closing, closed_with = in_thread(lambda: gate.close(DEADLINE_S))

    assert not gate.held  # still at work: nothing may stop the query yet
    callback.finish.set()
    closing.join(DEADLINE_S)
    callback.join(DEADLINE_S)

    assert closed_with == [None]  # no batch left at work
    assert callback.error is None
    assert callback.released.is_set()  # held until the close, then released, on its own thread
    assert gate.refused is None


def test_after_the_close_a_new_batch_is_refused_before_its_body_runs() -> None:
    gate = BatchGate(hold_timeout_s=DEADLINE_S)
    assert gate.close(DEADLINE_S) is None  # nothing inside: closes at once
    ran: list[int] = []

    with pytest.raises(BatchRefusedError, match="checkpoint 3 not run"), gate.batch(3, lambda: None):
        ran.append(3)
    with pytest.raises(BatchRefusedError), gate.batch(4, lambda: None):
        ran.append(4)

    assert ran == []
    assert gate.refused == 3


def test_a_batch_admitted_after_the_stop_request_still_runs_and_is_held() -> None:
    gate = BatchGate(hold_timeout_s=DEADLINE_S)
    gate.request_stop()
    callback = started(gate, 5)  # planned by Spark before the stop: it runs
    closing, closed_with = in_thread(lambda: gate.close(DEADLINE_S))
    callback.finish.set()
    closing.join(DEADLINE_S)
    callback.join(DEADLINE_S)

    assert closed_with == [None]
    assert callback.error is None
    assert callback.released.is_set()


def test_close_names_a_batch_still_at_work_at_its_deadline() -> None:
    gate = BatchGate(hold_timeout_s=DEADLINE_S)
    callback = started(gate, 9)

    assert gate.close(0.0) == 9

    callback.finish.set()
    callback.join(DEADLINE_S)
    assert callback.error is None
    assert callback.released.is_set()  # it ends normally and is released, the gate being closed


def test_a_failing_batch_is_not_held_and_its_error_goes_through() -> None:
    gate = BatchGate(hold_timeout_s=DEADLINE_S)
    callback = started(gate, 2, fail=True)
    gate.request_stop()
    callback.finish.set()
    callback.join(DEADLINE_S)

    assert isinstance(callback.error, RuntimeError)
    assert not callback.released.is_set()
    assert gate.close(DEADLINE_S) is None
