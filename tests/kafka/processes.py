"""Process helpers for the tests that run the real CLI: argv, children by /proc, bounded waits."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tests.support.config import set_options

T = TypeVar("T")


def cli(command: str, data_dir: Path, *overrides: str, args: tuple[str, ...] = ()) -> list[str]:
    """`offset-audit <command>` as this interpreter runs it, with its data under `data_dir`."""
    return [sys.executable, "-m", "app.cli", command, *args, *set_options(*overrides, data_dir=data_dir)]


def parent_pid(pid: int) -> int | None:
    """The parent of `pid` from /proc, None once the process is gone (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name in parentheses may hold spaces; the fields after the last ')' are fixed.
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[1])


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and parent_pid(int(entry)) == pid:
            out.append(int(entry))
    return out


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str, step_s: float = 0.05) -> T:
    """Poll `probe` until it returns something other than None; fail with `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(step_s)
