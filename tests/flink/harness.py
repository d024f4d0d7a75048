"""A real Flink job for the tests: a MiniCluster JVM started from the Maven jars, its REST API on loopback.

The Java programs under tests/flink/java/ are compiled with javac on first use into a cache dir keyed
by the hash of their sources and of the stack's classpath, so a second session compiles nothing.
Every wait polls the job's REST API (or the process) against a deadline; nothing sleeps a fixed time.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from app.runtime import jvm
from app.runtime.child_processes import parent_death_preexec
from tests.support.jvm_options import QUICK_JVM_OPTIONS

T = TypeVar("T")

JAVA_DIR = Path(__file__).resolve().parent / "java"
JOB_MAIN = "offsetaudit.flinktest.FlinkKafkaJob"
ORACLE_MAIN = "offsetaudit.flinktest.StateOracle"
STACKS = ("1.20", "2.2")
# 1.20 with Iceberg's Flink sink: its own stack, so the jobs of the other tests do not load Iceberg.
ICEBERG_STACK = "1.20-iceberg"
# A stack -> the classpaths (conf/jvm/<name>) it joins, in order: an artifact the first holds wins.
CLASSPATHS = {
    "1.20": ("flink-1.20",),
    "2.2": ("flink-2.2",),
    ICEBERG_STACK: ("flink-1.20", "flink-1.20-iceberg"),
}
# A stack -> the dirs of tests/flink/java/ compiled for it. The legacy FlinkKafkaConsumer is a
# SourceFunction, which Flink 2 removed: 1.20 only; the Iceberg sink needs the Iceberg jars.
SOURCE_DIRS = {
    "1.20": ("common", "legacy"),
    "2.2": ("common",),
    ICEBERG_STACK: ("common", "legacy", "iceberg"),
}
LEGACY_STACKS = frozenset(s for s, dirs in SOURCE_DIRS.items() if "legacy" in dirs)
SOURCES = ("kafkasource", "legacy")

START_TIMEOUT_S = 120.0
CHECKPOINT_TIMEOUT_S = 120.0
ORACLE_TIMEOUT_S = 180.0
REST_TIMEOUT_S = 5.0
# The source operator's records out, summed over subtasks: both sources report it (the sink is chained).
SOURCE_RECORDS_OUT = "Source__kafka-source.numRecordsOut"
POLL_S = 0.2
PORT_ATTEMPTS = 3

# The suite's quick JVM options (tests/support/jvm_options.py): these JVMs live for seconds to
# minutes, where start-up time dominates.
JVM_OPTIONS = (
    "-Xmx768m",
    *QUICK_JVM_OPTIONS,
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    # Java 17 closes java.base to reflection; Flink's Kryo and closure cleaner open it as the
    # distribution's scripts do.
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.time=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
)


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str, step_s: float = POLL_S) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(step_s)


def _port_taken(log_file: Path, since: int) -> bool:
    with log_file.open("rb") as f:
        f.seek(since)
        return b"Could not start rest endpoint on any port" in f.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the Java programs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FlinkStack:
    """One Flink version's jars plus the test programs compiled against them."""

    name: str
    classpath: tuple[Path, ...]
    classes: Path

    @property
    def runtime_classpath(self) -> str:
        return ":".join([str(self.classes), *(str(j) for j in self.classpath)])

    def java_cmd(self, main: str, args: Sequence[str]) -> list[str]:
        java = shutil.which("java")
        assert java, "java is not on PATH (make setup installs a JDK 17)"
        return [java, *JVM_OPTIONS, "-cp", self.runtime_classpath, main, *args]


def java_sources(stack: str) -> list[Path]:
    return sorted(p for d in SOURCE_DIRS[stack] for p in (JAVA_DIR / d).glob("*.java"))


def joined_classpath(parts: Sequence[Sequence[Path]]) -> tuple[Path, ...]:
    """The jars of several classpaths, each artifact once: the first classpath's copy wins (an
    added classpath repeats Flink's own jars, and another version of one invites NoSuchMethodErrors)."""
    seen: set[str] = set()
    out: list[Path] = []
    for jars in parts:
        names = {jvm.artifact_name(j) for j in jars}
        out += [j for j in jars if jvm.artifact_name(j) not in seen]
        seen |= names
    return tuple(out)


def classes_key(sources: Sequence[Path], classpath: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for src in sources:
        digest.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    for jar in classpath:
        digest.update(str(jar).encode() + b"\0")
    return digest.hexdigest()[:16]


def compile_stack(stack: str, cache_dir: Path) -> FlinkStack:
    """The stack's jars (resolved by setup-jvm) and the programs compiled against them, once per hash."""
    classpath = joined_classpath([jvm.resolve_classpath(name, cache_dir) for name in CLASSPATHS[stack]])
    sources = java_sources(stack)
    out = cache_dir / "flink-test-classes" / f"{stack}-{classes_key(sources, classpath)}"
    if not (out / ".complete").exists():
        with compile_lock(out):
            if not (out / ".complete").exists():  # another worker may have compiled it meanwhile
                compile_into(stack, sources, classpath, out)
    return FlinkStack(stack, classpath, out)


@contextmanager
def compile_lock(out: Path) -> Iterator[None]:
    """One compile of a stack at a time across the suite's workers (each a process): the others wait
    and then find it done, instead of each running javac on the same sources."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def compile_into(stack: str, sources: Sequence[Path], classpath: Sequence[Path], out: Path) -> None:
    """javac the stack's programs into a private dir, then publish it as `out` whole."""
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    javac = shutil.which("javac")
    assert javac, "javac is not on PATH (make setup installs a JDK 17)"
    cmd = [javac, "-nowarn", "-encoding", "UTF-8", "-d", str(tmp), "-cp", ":".join(map(str, classpath))]
    proc = subprocess.run(
        [*cmd, *map(str, sources)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"javac failed on the Flink {stack} programs:\n{proc.stdout}{proc.stderr}"
    (tmp / ".complete").touch()
    publish(tmp, out)


def publish(tmp: Path, out: Path) -> None:
    """Move a finished compile into place, once: a half-written dir is never seen under `out` (it
    is renamed there whole), and a dir another session put there first is kept, since its programs
    may be running right now; this session's copy is dropped."""
    try:
        os.rename(tmp, out)  # fails when `out` exists and holds files
    except OSError:
        if not (out / ".complete").exists():  # left by an older layout: nothing can be using it
            shutil.rmtree(out, ignore_errors=True)
            os.rename(tmp, out)
            return
        shutil.rmtree(tmp, ignore_errors=True)


def oracle(stack: FlinkStack, path: Path | str, log_file: Path | None = None) -> dict[str, Any]:
    """The Kafka source's offsets in a checkpoint or savepoint dir, read by Flink's State Processor API."""
    log = log_file.open("ab") if log_file is not None else subprocess.DEVNULL
    try:
        proc = subprocess.run(
            stack.java_cmd(ORACLE_MAIN, [str(path)]),
            stdout=subprocess.PIPE,
            stderr=log,
            timeout=ORACLE_TIMEOUT_S,
            check=False,
        )
    finally:
        if log_file is not None and not isinstance(log, int):
            log.close()
    lines = proc.stdout.decode(errors="replace").strip().splitlines()
    assert proc.returncode == 0, f"the oracle failed on {path} (exit {proc.returncode}); see {log_file}"
    assert lines, f"the oracle printed nothing for {path}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# --- the REST API ----------------------------------------------------------------------------------


def rest_get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=REST_TIMEOUT_S) as resp:
        return json.loads(resp.read())


def rest_post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=REST_TIMEOUT_S) as resp:
        return json.loads(resp.read() or b"{}")


def rest_patch(url: str) -> None:
    request = urllib.request.Request(url, method="PATCH")
    with urllib.request.urlopen(request, timeout=REST_TIMEOUT_S):
        pass


# --- one job process -------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSpec:
    bootstrap: str
    topic: str
    group: str
    source: str = "kafkasource"
    start: str = "earliest"
    # Flink deletes a checkpoint once this many newer ones completed (1 s apart by default): a
    # sidecar starved of CPU for longer than that names the deleted ones missed instead of reading
    # them. 10 leaves it ten seconds; the tests of missed checkpoints set fewer.
    num_retained: int = 10
    interval_ms: int = 1000
    parallelism: int = 2
    record_delay_ms: int = 0  # a slow operator chained to the source: milliseconds a record
    # An Iceberg table (ns.t) of the Hadoop catalog at `warehouse` (a URI) holds the records, with
    # their topic, partition and offset: the 1.20-iceberg stack only. None: they are discarded.
    iceberg: tuple[str, str] | None = None  # (warehouse, table)

    def args(self) -> list[str]:
        args = [
            "--bootstrap", self.bootstrap, "--topic", self.topic, "--group", self.group,
            "--source", self.source, "--start", self.start, "--num-retained", str(self.num_retained),
            "--interval-ms", str(self.interval_ms), "--parallelism", str(self.parallelism),
            "--record-delay-ms", str(self.record_delay_ms),
        ]  # fmt: skip
        if self.iceberg is not None:
            args += ["--sink", "iceberg", "--warehouse", self.iceberg[0], "--table", self.iceberg[1]]
        return args


def now_ms() -> int:
    """This machine's clock in ms, as Flink's JobManager stamps `trigger_timestamp`."""
    return time.time_ns() // 1_000_000


class FlinkJob:
    """One MiniCluster process running one Kafka-reading job, until cancelled or killed.

    Checkpoints land under ``checkpoint_dir/<job id>/chk-N``; a restart is a new process (and job id)
    restoring from a path, writing under the same ``checkpoint_dir``.
    """

    def __init__(
        self,
        stack: FlinkStack,
        spec: JobSpec,
        work_dir: Path,
        restore: Path | str | None = None,
        on_start: Callable[[FlinkJob], None] | None = None,
    ) -> None:
        if spec.source == "legacy" and stack.name not in LEGACY_STACKS:
            raise ValueError(f"the legacy FlinkKafkaConsumer does not exist on Flink {stack.name}")
        if spec.iceberg is not None and stack.name != ICEBERG_STACK:
            raise ValueError(f"Iceberg's Flink sink is on the {ICEBERG_STACK} stack, not {stack.name}")
        self.stack = stack
        self.spec = spec
        self.work_dir = work_dir
        self.checkpoint_dir = work_dir / "checkpoints"
        self.savepoint_dir = work_dir / "savepoints"
        self.restore = restore
        self.log_file = work_dir / "flink.log"
        self.port = free_port()
        self.rest_url = f"http://127.0.0.1:{self.port}"
        self.job_id = ""
        # told of every process started, restarts included, so a fixture can stop them all
        self.on_start = on_start
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None, "the job was not started"
        return self._proc.pid

    def start(self) -> FlinkJob:
        """Start the process and wait for its job to run; a REST port taken between choosing it and
        Flink binding it is chosen again."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
            self._spawn()
            try:
                self.job_id = wait_for(
                    self._running_job, START_TIMEOUT_S, f"a RUNNING job at {self.rest_url}"
                )
                return self
            except AssertionError:
                lost_port = (
                    self._proc is not None
                    and self._proc.poll() is not None
                    and _port_taken(self.log_file, log_start)
                )
                if not lost_port or attempt == PORT_ATTEMPTS:
                    raise
            self.port = free_port()
            self.rest_url = f"http://127.0.0.1:{self.port}"
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        args = [*self.spec.args(), "--checkpoint-dir", self.checkpoint_dir.resolve().as_uri()]
        args += ["--rest-port", str(self.port)]
        if self.restore is not None:
            args += ["--restore", str(self.restore)]
        with self.log_file.open("ab") as log:
            log.write(f"\n=== start {' '.join(args)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.stack.java_cmd(JOB_MAIN, args),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                # a test session killed with SIGKILL leaves no Flink JVM behind
                preexec_fn=parent_death_preexec(signal.SIGKILL),
            )
        if self.on_start is not None:
            self.on_start(self)

    def _alive(self) -> None:
        assert self._proc is not None
        code = self._proc.poll()
        if code is not None:
            tail = "\n".join(self.log_file.read_text(errors="replace").splitlines()[-30:])
            raise AssertionError(f"the Flink process exited with {code}:\n{tail}")

    def _running_job(self) -> str | None:
        self._alive()
        try:
            jobs = rest_get(f"{self.rest_url}/jobs/overview")["jobs"]
        except (OSError, ValueError):
            return None  # the REST endpoint is not up yet
        running = [j["jid"] for j in jobs if j["state"] == "RUNNING"]
        return running[0] if running else None

    # --- REST facts ------------------------------------------------------------------------------
    def checkpoints(self) -> dict[str, Any]:
        stats: dict[str, Any] = rest_get(f"{self.rest_url}/jobs/{self.job_id}/checkpoints")
        return stats

    def completed(self) -> list[dict[str, Any]]:
        """The completed checkpoints in the REST history (at most the last 10), oldest first."""
        history = self.checkpoints().get("history", [])
        done = [c for c in history if c["status"] == "COMPLETED" and not c.get("is_savepoint")]
        return sorted(done, key=lambda c: int(c["id"]))

    def wait_checkpoints(
        self, count: int, after_id: int = 0, timeout_s: float = CHECKPOINT_TIMEOUT_S
    ) -> list[dict[str, Any]]:
        """Wait until `count` checkpoints with an id above `after_id` completed; their REST entries."""

        def probe() -> list[dict[str, Any]] | None:
            self._alive()
            try:
                counts = self.checkpoints()["counts"]
                done = [c for c in self.completed() if int(c["id"]) > after_id]
            except (OSError, ValueError, KeyError):
                return None
            return done if len(done) >= count and counts["completed"] >= count else None

        what = f"{count} completed checkpoints after {after_id} at {self.rest_url}"
        return wait_for(probe, timeout_s, what)

    def records_read(self) -> int | None:
        """Records the source emitted in this process (summed over subtasks), None before it reports."""
        base = f"{self.rest_url}/jobs/{self.job_id}"
        vertices = rest_get(base).get("vertices", [])
        # A job just switched to RUNNING may be listed before its graph: no source vertex yet.
        source = next((v["id"] for v in vertices if str(v["name"]).startswith("Source: kafka-source")), None)
        if source is None:
            return None
        rows = rest_get(f"{base}/vertices/{source}/subtasks/metrics?get={SOURCE_RECORDS_OUT}&agg=sum")
        return int(float(rows[0]["sum"])) if rows else None

    def wait_records_read(self, count: int, timeout_s: float = CHECKPOINT_TIMEOUT_S) -> None:
        def probe() -> bool | None:
            self._alive()
            read = self.records_read()
            assert read is None or read <= count, (
                f"the job read {read} records, more than the {count} expected"
            )
            return True if read == count else None

        wait_for(probe, timeout_s, f"the job at {self.rest_url} to read {count} records")

    def checkpoint_after_now(self, timeout_s: float = CHECKPOINT_TIMEOUT_S) -> dict[str, Any]:
        """The first checkpoint triggered after this call, once completed: its REST entry.

        Its state holds everything the job had read when this was called."""
        return self.wait_triggered_after(now_ms(), 1, timeout_s)[0]

    def wait_triggered_after(
        self, since_ms: int, count: int = 1, timeout_s: float = CHECKPOINT_TIMEOUT_S
    ) -> list[dict[str, Any]]:
        """The first ``count`` completed checkpoints triggered at or after ``since_ms`` (`now_ms`),
        oldest first: their REST entries.

        Chosen by their `trigger_timestamp`, not by the ids the history lists at ``since_ms``:
        Flink's REST serves checkpoint statistics from a cache, so a checkpoint triggered just
        before (whose barrier passed the source before the last records, or before an outage
        began) may not be listed yet. The JobManager runs on this machine: its clock is this one.
        """

        def probe() -> list[dict[str, Any]] | None:
            self._alive()
            try:
                after = [c for c in self.completed() if int(c["trigger_timestamp"]) >= since_ms]
            except (OSError, ValueError, KeyError):
                return None
            return after[:count] if len(after) >= count else None

        what = f"{count} checkpoint(s) triggered after {since_ms} at {self.rest_url}"
        return wait_for(probe, timeout_s, what)

    def latest_completed(self) -> dict[str, Any]:
        latest: dict[str, Any] = self.checkpoints()["latest"]["completed"]
        return latest

    def job_state(self) -> str:
        return str(rest_get(f"{self.rest_url}/jobs/{self.job_id}")["state"])

    # --- control -----------------------------------------------------------------------------------
    def savepoint(self, timeout_s: float = CHECKPOINT_TIMEOUT_S) -> Path:
        """Trigger a savepoint through REST and wait for it; its directory."""
        self.savepoint_dir.mkdir(parents=True, exist_ok=True)
        body = {"target-directory": self.savepoint_dir.resolve().as_uri(), "cancel-job": False}
        trigger = rest_post(f"{self.rest_url}/jobs/{self.job_id}/savepoints", body)["request-id"]

        def probe() -> str | None:
            self._alive()
            status = rest_get(f"{self.rest_url}/jobs/{self.job_id}/savepoints/{trigger}")
            if status["status"]["id"] != "COMPLETED":
                return None
            operation = status["operation"]
            assert "failure-cause" not in operation, f"the savepoint failed: {operation['failure-cause']}"
            return str(operation["location"])

        location = wait_for(probe, timeout_s, f"savepoint {trigger}")
        return Path(location.removeprefix("file:"))

    def trigger_checkpoint(self, timeout_s: float = CHECKPOINT_TIMEOUT_S) -> int:
        """Trigger a checkpoint through REST (Flink 1.19 on) and wait for it: its id. With a long
        `interval_ms`, what each checkpoint holds is the test's choice."""
        url = f"{self.rest_url}/jobs/{self.job_id}/checkpoints"
        trigger = rest_post(url, {"checkpointType": "CONFIGURED"})["request-id"]

        def probe() -> int | None:
            self._alive()
            status = rest_get(f"{url}/{trigger}")
            if status["status"]["id"] != "COMPLETED":
                return None
            operation = status["operation"]
            assert "failure-cause" not in operation, f"the checkpoint failed: {operation['failure-cause']}"
            return int(operation["checkpointId"])

        return wait_for(probe, timeout_s, f"checkpoint {trigger}")

    def cancel(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Cancel the job through REST; the process ends with it."""
        rest_patch(f"{self.rest_url}/jobs/{self.job_id}?mode=cancel")
        self.wait_exit(timeout_s)

    def kill9(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGKILL)
        self.wait_exit(30.0)

    def wait_exit(self, timeout_s: float) -> int:
        assert self._proc is not None
        return self._proc.wait(timeout=timeout_s)

    def stop(self) -> None:
        """Teardown: whatever state the process is in, none is left running."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=30)

    def restart_from(self, path: Path | str) -> FlinkJob:
        """A new process (a new job id) restoring from a checkpoint or savepoint dir, same checkpoint dir."""
        assert self._proc is None or self._proc.poll() is not None, "stop the running process first"
        return FlinkJob(self.stack, self.spec, self.work_dir, restore=path, on_start=self.on_start).start()

    # --- files -------------------------------------------------------------------------------------
    def checkpoint_path(self, checkpoint: dict[str, Any]) -> Path:
        """The local dir of a REST checkpoint entry (its external_path)."""
        return Path(str(checkpoint["external_path"]).removeprefix("file:"))

    def copy_checkpoint(
        self, at_least: dict[str, Any], timeout_s: float = CHECKPOINT_TIMEOUT_S
    ) -> tuple[dict[str, Any], Path]:
        """A copy of the newest completed checkpoint whose id is at least `at_least`'s: its REST entry
        and the copy's dir.

        The job deletes a checkpoint's dir when `num_retained` newer ones complete, which on a busy
        machine can happen between the REST read and the end of the copy: a dir that vanishes is
        given up for the next newest. Callers pass a checkpoint taken after the job stopped reading,
        so every newer one holds the same offsets. The state files' handles are relative to
        `_metadata`, so the copy reads as the original."""

        def probe() -> tuple[dict[str, Any], Path] | None:
            self._alive()
            newest = self.latest_completed()
            if int(newest["id"]) < int(at_least["id"]):
                return None
            source = self.checkpoint_path(newest)
            target = self.work_dir / "copies" / self.job_id / source.name
            shutil.rmtree(target, ignore_errors=True)
            try:
                shutil.copytree(source, target)
            except (FileNotFoundError, shutil.Error):
                return None  # subsumed while it was copied
            return (newest, target) if (target / "_metadata").is_file() else None

        return wait_for(probe, timeout_s, f"a copy of a checkpoint from {at_least['id']} on")

    def retained(self) -> list[Path]:
        """This job's chk-N dirs on disk, by id."""
        found = (self.checkpoint_dir / self.job_id).glob("chk-*")
        return sorted((p for p in found if (p / "_metadata").exists()), key=lambda p: int(p.name[4:]))
