"""What the tests of `offset-audit watch` as a process read in its output and its webhook: the
successful cycles' lines and the POSTs that alerted records lost."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.kafka.processes import wait_for
from tests.support.http_server import Request

CYCLE_TIMEOUT_S = 300  # a cycle takes seconds; a shared, slow machine gets room
CYCLE_OK = re.compile(r"^cycle (\d+) (watch-\S+) ok: ", re.MULTILINE)


def ok_cycles(log_path: Path) -> int:
    return len(CYCLE_OK.findall(log_path.read_text(errors="replace")))


def wait_cycles(proc: subprocess.Popen[bytes], log_path: Path, count: int) -> None:
    """Until ``count`` cycles have succeeded in the output at ``log_path``; fails if the watch ends."""

    def probe() -> bool | None:
        assert proc.poll() is None, f"watch ended ({proc.returncode}):\n{log_path.read_text()[-4000:]}"
        return True if ok_cycles(log_path) >= count else None

    wait_for(probe, CYCLE_TIMEOUT_S, f"{count} successful watch cycles", step_s=0.2)


def lost_posts(received: list[Request], incident_id: str) -> list[dict[str, Any]]:
    """The POSTs that alerted ``incident_id`` with records lost."""
    payloads = [json.loads(r.body) for r in received if r.method == "POST"]
    return [
        p
        for p in payloads
        for i in p["opened"] + p["changed"]
        if i["incident_id"] == incident_id and i["impact"]["records_lost"]
    ]
