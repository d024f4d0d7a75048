"""Child JVMs (the embedded broker, the local Spark driver) that must not outlive the Python process
that started them, however it ends: a SIGKILL runs no Python cleanup, so the kernel has to do it.

Linux's PR_SET_PDEATHSIG asks the kernel to signal a process when its parent dies. It is set in the
child between fork and exec (a Popen preexec_fn) and survives the exec. Elsewhere it is unavailable
and children are left to their own means (Spark's driver, for one, exits when its stdin closes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
import threading
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1

Preexec = Callable[[], None]


def parent_death_preexec(sig: int = signal.SIGTERM) -> Preexec | None:
    """A preexec_fn that makes the child receive `sig` when this process dies, or None where that
    cannot be promised: not Linux, or not the main thread.

    The kernel signals when the *thread* that forked exits, not the process: a child started from a
    worker thread would die with that thread. Only the main thread lives as long as the process.
    libc is looked up here, in the parent, so the child only makes the one system call.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):  # no libc prctl: not Linux
        return None

    def ask_for_parent_death_signal() -> None:  # pragma: no cover - runs in the child
        prctl(_PR_SET_PDEATHSIG, sig)

    return ask_for_parent_death_signal


def chain_preexec(*steps: Preexec | None) -> Preexec:
    """One preexec_fn running each given step in order."""

    def run_all() -> None:  # pragma: no cover - runs in the child
        for step in steps:
            if step is not None:
                step()

    return run_all
