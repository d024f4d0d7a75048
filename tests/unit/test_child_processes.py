"""The parent-death signal reaches pyspark's driver launcher, which replaces any preexec_fn it is given."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark import java_gateway

from app.runtime.child_processes import chain_preexec, parent_death_preexec
from app.runtime.spark import DriverPopenKwargs

pytestmark = pytest.mark.unit


class _LaunchedError(Exception):
    """Stops launch_gateway right after it called Popen: no JVM is started."""


@pytest.fixture
def sigint_restored() -> Iterator[None]:
    # pyspark's own preexec_fn ignores SIGINT; run here, it would do so for the test process.
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


def test_pysparks_launcher_runs_its_preexec_and_ours(
    monkeypatch: pytest.MonkeyPatch, sigint_restored: None
) -> None:
    ran: list[str] = []
    seen: dict[str, Any] = {}

    def fake_popen(command: list[str], **kwargs: Any) -> None:
        seen.update(kwargs)
        kwargs["preexec_fn"]()  # what the child runs between fork and exec
        raise _LaunchedError

    monkeypatch.setattr(java_gateway, "Popen", fake_popen)
    launch: Callable[..., object] = java_gateway.launch_gateway  # unannotated in pyspark
    with pytest.raises(_LaunchedError):
        launch(None, popen_kwargs=DriverPopenKwargs(lambda: ran.append("ours")))

    assert ran == ["ours"]
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # pyspark's step ran too, first
    assert seen["stdin"] is not None  # the pipe pyspark's own tie relies on is still there


def test_chained_steps_run_in_order_and_skip_none() -> None:
    ran: list[int] = []
    chain_preexec(lambda: ran.append(1), None, lambda: ran.append(2))()
    assert ran == [1, 2]


def test_no_parent_death_signal_from_a_worker_thread() -> None:
    # The kernel would signal the child when that thread ends, long before the process does.
    found: list[object] = []
    worker = threading.Thread(target=lambda: found.append(parent_death_preexec()))
    worker.start()
    worker.join()
    assert found == [None]
    assert parent_death_preexec() is not None  # the main thread, on Linux
