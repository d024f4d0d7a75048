"""Where the embedded broker runs: the state file it leaves under its data directory.

``kafka.bootstrap_servers: local`` resolves through this module (``app.kafka.clients``); the broker
itself (``app.demo.local_kafka``, which starts and stops it) writes the file. Both import this
module, so the Kafka clients never depend on the demo.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

STATE_FILE: Final = "broker.json"  # under the broker's data directory
KAFKA_MAIN: Final = "kafka.Kafka"  # the broker JVM's main class
LOOPBACK: Final = "127.0.0.1"


@dataclass(frozen=True)
class BrokerState:
    pid: int  # 0: stopped (the ports are kept for the next start)
    port: int
    controller_port: int
    started_at: float

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"


def read_state(data_dir: Path) -> BrokerState | None:
    """The state file under ``data_dir`` as written, or None when there is none (or it is unreadable)."""
    try:
        return BrokerState(**json.loads((data_dir / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) is not a running broker.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def pid_is_our_broker(pid: int, data_dir: Path) -> bool:
    """Guard against PID reuse: the process must be a Kafka JVM using our config file."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return pid_alive(pid)
    return KAFKA_MAIN in cmdline and str(data_dir) in cmdline


def running_broker(data_dir: Path) -> BrokerState | None:
    """The broker running under ``data_dir``, or None. A stale state file (dead pid) counts as none."""
    data_dir = data_dir.resolve()
    state = read_state(data_dir)
    if state is None or state.pid <= 0:
        return None
    if pid_alive(state.pid) and pid_is_our_broker(state.pid, data_dir):
        return state
    return None
