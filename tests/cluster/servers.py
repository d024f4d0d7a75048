"""The servers a cluster run needs, each in its own processes on loopback: a Spark standalone master
and workers from pyspark's own distribution, and an S3 API server (moto's server mode) with one
bucket, reached through Hadoop's s3a:// connector.

Plain functions and context managers, no pytest: the cluster tier's fixtures (conftest.py) and the
reconcile benchmark's `--cluster` and `--s3a` runs start the same servers the same way.

Every child gets the kernel's parent-death signal (as the embedded broker does) and its own
process group, which stopping ends whole: a worker's executors die with it, and a killed parent
leaves no JVM behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pyspark

from app.runtime.child_processes import parent_death_preexec
from tests.kafka.processes import wait_for
from tests.support.jvm_options import QUICK_JVM

PYSPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = PYSPARK_HOME / "bin" / "spark-class"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0
# Credentials of the S3 server; the jobs get them through config (storage.options with ${ENV}).
S3_ACCESS_KEY = "cluster-tier-access"
S3_SECRET_KEY = "cluster-tier-secret"
S3_REGION = "us-east-1"
# Every JVM of the tier (daemons, drivers, executors) lives seconds to minutes over tiny tables, where
# start-up dominates: the suite's quick JVM options (tests/support/jvm_options.py).
JVM_OPTIONS = QUICK_JVM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def server_env(home: Path) -> dict[str, str]:
    """The servers' environment: pyspark as SPARK_HOME, loopback, no AWS credentials inherited (the
    jobs must reach the storage with what their config says, not with what the workers happen to have)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SPARK_", "PYSPARK_"))}
    conf_dir = home / "conf"  # empty: nobody's spark-defaults.conf or log4j2 settings leak in
    conf_dir.mkdir(parents=True, exist_ok=True)
    env.update(
        SPARK_HOME=str(PYSPARK_HOME),
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(home / "logs"),
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS=JVM_OPTIONS,
        PYSPARK_PYTHON=sys.executable,
    )
    return env


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start_daemon(name: str, argv: Sequence[str], env: Mapping[str, str], log_dir: Path) -> Daemon:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopping ends it with its children
            preexec_fn=parent_death_preexec(),
        )
    return Daemon(name, process, log)


def stop_daemons(daemons: Sequence[Daemon]) -> None:
    """SIGTERM to each process group (a worker stops its executors), SIGKILL to what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for d in daemons:
            if d.process.poll() is None or sig == signal.SIGKILL:
                with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
                    os.killpg(d.process.pid, sig)
        for d in daemons:
            try:
                d.process.wait(timeout=STOP_TIMEOUT_S if sig == signal.SIGTERM else 10)
            except subprocess.TimeoutExpired:
                continue


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def require_running(daemons: Sequence[Daemon]) -> None:
    for d in daemons:
        if d.process.poll() is not None:
            raise AssertionError(f"{d.name} exited with {d.process.returncode}:\n{d.tail()}")


@dataclass(frozen=True)
class SparkCluster:
    master_url: str  # spark://127.0.0.1:<port>
    ui_url: str  # the master's web UI; /json lists the workers
    work_dir: Path


@dataclass(frozen=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:<port>
    bucket: str

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=S3_ACCESS_KEY,
            aws_secret_access_key=S3_SECRET_KEY,
            region_name=S3_REGION,
        )


def alive_workers(ui_url: str) -> int | None:
    """How many workers the master lists as ALIVE, None while its UI is not listening yet."""
    try:
        state = fetch_json(f"{ui_url}/json")
    except OSError:
        return None
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


@contextlib.contextmanager
def spark_cluster(home: Path, workers: int = 2, worker_memory: str = "1g") -> Iterator[SparkCluster]:
    """A master and ``workers`` workers (one core, ``worker_memory`` each) under ``home`` (logs and
    work dirs), yielded once every worker is ALIVE; all stopped on the way out."""
    env = server_env(home)
    port, ui_port = free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    ui_url = f"http://127.0.0.1:{ui_port}"
    daemons = [
        start_daemon(
            "master",
            [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master",
             "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)],
            env,
            home / "logs",
        )
    ]  # fmt: skip
    try:
        for i in range(workers):
            work_dir = home / f"worker-{i}"
            work_dir.mkdir(parents=True, exist_ok=True)
            daemons.append(
                start_daemon(
                    f"worker-{i}",
                    [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker",
                     "--host", "127.0.0.1", "--webui-port", str(free_port()),
                     "--cores", "1", "--memory", worker_memory, "--work-dir", str(work_dir), master_url],
                    env,
                    home / "logs",
                )
            )  # fmt: skip

        def all_alive() -> int | None:
            require_running(daemons)
            alive = alive_workers(ui_url)
            return alive if alive == workers else None

        wait_for(all_alive, START_TIMEOUT_S, f"{workers} ALIVE workers at {ui_url}/json", step_s=0.5)
        yield SparkCluster(master_url, ui_url, home)
    finally:
        stop_daemons(daemons)
        remove_executor_jars(home)


def remove_executor_jars(home: Path) -> int:
    """Deletes the copies of the jars every executor fetched into its work dir (`--jars`: 0.7 GB an
    executor with the AWS SDK bundle, some 15 GB a session), keeping the executors' logs for a
    post-mortem. Returns how many went."""
    jars = list(home.glob("worker-*/app-*/*/*.jar"))
    for jar in jars:
        jar.unlink(missing_ok=True)
    return len(jars)


@contextlib.contextmanager
def s3_server(home: Path, bucket: str) -> Iterator[S3Server]:
    """moto's S3 server on a free loopback port with ``bucket`` created; stopped on the way out."""
    port = free_port()
    daemon = start_daemon(
        "moto",
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        server_env(home),
        home / "logs",
    )
    try:
        server = S3Server(f"http://127.0.0.1:{port}", bucket)

        def bucket_created() -> bool | None:
            require_running([daemon])
            try:
                server.client().create_bucket(Bucket=bucket)
            except Exception:  # not listening yet; boto3 raises several kinds for that
                return None
            return True

        wait_for(bucket_created, START_TIMEOUT_S, f"the S3 server at {server.endpoint}", step_s=0.5)
        yield server
    finally:
        stop_daemons([daemon])
