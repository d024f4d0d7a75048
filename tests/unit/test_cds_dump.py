"""The archive dump's bookkeeping (tests/support/cds.py): which pid it waits for, and that it only
takes an archive whose JVM has exited."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.support.cds import driver_pid, exited

pytestmark = pytest.mark.unit


def test_the_driver_pid_is_found_among_the_dumping_jvms_own_lines() -> None:
    out = "[warning][cds] Skipping Foo\ndriver-pid 4242\nSkipping jdk/internal/reflect/Generated12\n"
    assert driver_pid(out) == 4242
    with pytest.raises(ValueError, match="not enough values"):
        driver_pid("Skipping jdk/internal/reflect/Generated12\n")


def test_a_jvm_still_running_at_the_deadline_is_not_taken_as_exited() -> None:
    assert not exited(os.getpid(), time.monotonic() + 0.3)
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    assert exited(int(child.stdout), time.monotonic() + 5)
