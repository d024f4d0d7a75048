"""A stop asked by a signal: SIGTERM or SIGINT end the wait of a long-lived loop (`watch` between
cycles, the Flink watcher between polls) at once, and the loop stops at its next boundary."""

from __future__ import annotations

import contextlib
import os
import select
import signal
from types import FrameType


class StopSignal:
    """SIGTERM/SIGINT ask for a stop; ``wait`` sleeps until the timeout or a stop, whichever first.

    The handler only sets a flag and writes a byte to a pipe: no lock is taken in a signal handler
    (it runs in the main thread between two bytecodes, maybe while that thread holds the lock), and
    the wait wakes at once on the byte instead of sleeping through the signal."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self.requested: int | None = None

    def request(self, signum: int, _frame: FrameType | None = None) -> None:
        self.requested = signum
        # A full pipe holds earlier requests already: the wait wakes anyway.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"x")

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.request)
        signal.signal(signal.SIGINT, self.request)

    def wait(self, timeout_s: float) -> bool:
        """True when a stop was requested (now or before), after at most ``timeout_s``."""
        if self.requested is None:
            select.select([self._read], [], [], max(timeout_s, 0.0))
        return self.requested is not None
