"""The embedded default broker: a single-node KRaft Kafka on loopback, in its own JVM.

Used by `offset-audit kafka-local start|stop|status`, by `demo` and by the test session. Its jars come
from conf/jvm/kafka/pom.xml and never share a classpath with Spark. State (pid, ports) lives in
<data_dir>/kafka/broker.json so a later command can find, reuse or stop the broker; the ports are kept
across restarts so clients reconnect to the same address when the broker comes back.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from app.errors import InfrastructureError, JvmSetupError
from app.kafka.local_broker import (
    KAFKA_MAIN,
    LOOPBACK,
    STATE_FILE,
    BrokerState,
    pid_alive,
    pid_is_our_broker,
    read_state,
    running_broker,
)
from app.runtime.child_processes import parent_death_preexec

log = logging.getLogger(__name__)

# The broker's files under its data directory, beside its state file (app.kafka.local_broker).
LOG_FILE, STDOUT_FILE, CONFIG_FILE, STORAGE_DIR = ("broker.log", "broker.out", "server.properties", "logs")
STORAGE_TOOL = "kafka.tools.StorageTool"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def new_cluster_id() -> str:
    """Kafka's Uuid text form: URL-safe base64 of 16 random bytes, no padding.

    Like Kafka's Uuid.randomUuid, never one that starts with '-': kafka-storage's argument parser
    would read it as an option (1 start in 64 failed with "--cluster-id: expected one argument").
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def server_properties(log_dir: Path, port: int, controller_port: int, offsets_partitions: int) -> str:
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": str(offsets_partitions),
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "2",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        # Allow the consumer-group protocol of KIP-848 next to the classic one (tests use both).
        "group.coordinator.rebalance.protocols": "classic,consumer",
        "log.retention.check.interval.ms": "5000",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def log4j2_properties(log_file: Path) -> str:
    return "\n".join(
        [
            "status = error",
            "appender.file.type = File",
            "appender.file.name = FILE",
            f"appender.file.fileName = {log_file}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.file.ref = FILE",
            "logger.state.name = state.change.logger",
            "logger.state.level = WARN",
            "",
        ]
    )


def _port_open(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False


class LocalKafka:
    """Start, find and stop the single-node broker whose storage is under `data_dir`."""

    def __init__(
        self,
        data_dir: Path,
        classpath: Sequence[Path],
        offsets_partitions: int = 5,
        heap: str = "512m",
        start_timeout_s: float = 90.0,
        die_with_parent: bool = False,
        java: str | None = None,
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.classpath = list(classpath)
        self.offsets_partitions = offsets_partitions
        self.heap = heap
        self.start_timeout_s = start_timeout_s
        self.die_with_parent = die_with_parent
        self.java = java or shutil.which("java") or ""
        self._proc: subprocess.Popen[bytes] | None = None

    # --- paths -----------------------------------------------------------------------------------
    def path(self, name: str) -> Path:
        """One of this broker's files (STATE_FILE, LOG_FILE, ...), under its data directory."""
        return self.data_dir / name

    # --- state -----------------------------------------------------------------------------------
    def _read_state(self) -> BrokerState | None:
        return read_state(self.data_dir)

    def status(self) -> BrokerState | None:
        """The running broker, or None. A stale state file (dead pid) counts as not running."""
        return running_broker(self.data_dir)

    def _ports(self) -> tuple[int, int]:
        previous = self._read_state()
        if previous is not None:
            return previous.port, previous.controller_port
        return free_port(), free_port()

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> BrokerState:
        running = self.status()
        if running is not None:
            log.info("local Kafka already running on %s (pid %d)", running.bootstrap_servers, running.pid)
            return running
        if not self.java:
            raise JvmSetupError("java is not on PATH; install a JDK 17 (make setup does it on Debian)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        port, controller_port = self._ports()
        for p in (port, controller_port):
            if _port_open(p):
                raise InfrastructureError(f"port {p} of the local broker is taken by another process")
        self.path(CONFIG_FILE).write_text(
            server_properties(self.path(STORAGE_DIR), port, controller_port, self.offsets_partitions)
        )
        (self.data_dir / "log4j2.properties").write_text(log4j2_properties(self.path(LOG_FILE)))
        self._format_storage()
        t0 = time.monotonic()
        # The log file is appended to across restarts: only what this start writes counts.
        log_start = self.path(LOG_FILE).stat().st_size if self.path(LOG_FILE).exists() else 0
        self._proc = self._spawn([KAFKA_MAIN, str(self.path(CONFIG_FILE))])
        state = BrokerState(
            pid=self._proc.pid, port=port, controller_port=controller_port, started_at=time.time()
        )
        self.path(STATE_FILE).write_text(json.dumps(asdict(state)))
        self._wait_ready(state, t0, log_start)
        log.info("local Kafka ready on %s in %.1fs (pid %d)", state.bootstrap_servers, time.monotonic() - t0,
                 state.pid)  # fmt: skip
        return state

    def _java_cmd(self, main_and_args: Sequence[str]) -> list[str]:
        return [
            self.java,
            f"-Xmx{self.heap}",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            ":".join(str(j) for j in self.classpath),
            *main_and_args,
        ]

    def _format_storage(self) -> None:
        if (self.path(STORAGE_DIR) / "meta.properties").exists():
            return  # formatted before: keep the data, a restart must not lose topics or commits
        cmd = self._java_cmd(
            [STORAGE_TOOL, "format", "-t", new_cluster_id(), "-c", str(self.path(CONFIG_FILE))]
        )
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise InfrastructureError(
                f"formatting the local broker's storage failed (exit {proc.returncode}):\n"
                + "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
            )

    def _spawn(self, main_and_args: Sequence[str]) -> subprocess.Popen[bytes]:
        out = self.path(STDOUT_FILE).open("ab")
        try:
            return subprocess.Popen(
                self._java_cmd(main_and_args),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal must not reach the broker directly
                # The broker JVM gets SIGTERM when the process that started it dies, so a test session
                # or demo killed with SIGKILL leaves no orphan broker behind.
                preexec_fn=parent_death_preexec() if self.die_with_parent else None,
            )
        finally:
            out.close()

    def _wait_ready(self, state: BrokerState, t0: float, log_start: int) -> None:
        deadline = t0 + self.start_timeout_s
        while time.monotonic() < deadline:
            if not pid_alive(state.pid):
                self._fail_start(f"the broker process exited during startup (pid {state.pid})")
            if _port_open(state.port) and self._started_line_logged(log_start):
                return
            time.sleep(0.2)
        self.stop()
        self._fail_start(f"the broker did not become ready within {self.start_timeout_s:.0f}s")

    def _started_line_logged(self, since: int) -> bool:
        try:
            with self.path(LOG_FILE).open("rb") as f:
                f.seek(since)
                return b"Kafka Server started" in f.read()
        except OSError:
            return False

    def _fail_start(self, reason: str) -> None:
        tail = self.tail_log(20)
        raise InfrastructureError(f"{reason}; broker log: {self.path(LOG_FILE)}\n{tail}")

    def tail_log(self, lines: int) -> str:
        chunks = []
        for f in (self.path(STDOUT_FILE), self.path(LOG_FILE)):
            with contextlib.suppress(OSError):
                chunks.extend(f.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(chunks[-lines:])

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker (TERM, then KILL after the timeout). True if one was running."""
        state = self._read_state()
        pid = self._proc.pid if self._proc is not None else (state.pid if state else 0)
        if (
            pid <= 0
            or not pid_alive(pid)
            or (self._proc is None and not pid_is_our_broker(pid, self.data_dir))
        ):
            self._mark_stopped(state)
            return False
        os.kill(pid, signal.SIGTERM)
        if not self._wait_exit(pid, timeout_s):
            log.warning("local Kafka (pid %d) ignored SIGTERM for %.0fs; killing it", pid, timeout_s)
            os.kill(pid, signal.SIGKILL)
            self._wait_exit(pid, 10)
        self._mark_stopped(state)
        return True

    def kill(self) -> None:
        """Hard stop (SIGKILL), for tests and the demo's broker outage."""
        state = self._read_state()
        pid = self._proc.pid if self._proc is not None else (state.pid if state else 0)
        if pid > 0 and pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
            self._wait_exit(pid, 10)
        self._mark_stopped(state)

    def _wait_exit(self, pid: int, timeout_s: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout=timeout_s)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return True
            time.sleep(0.1)
        return False

    def _mark_stopped(self, state: BrokerState | None) -> None:
        # Keep the ports for the next start; pid 0 says "not running".
        if state is not None:
            self.path(STATE_FILE).write_text(json.dumps({**asdict(state), "pid": 0}))
        self._proc = None
