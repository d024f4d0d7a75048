"""Running the jobs the way README.md's "Running on a cluster" does: its bash block as written (the
library zipped for --py-files, the resolved jars as --jars, `spark-submit --master spark://...` of
jobs/<job>.py with `--env cluster`), only its placeholders filled with the tier's servers (readme.py).

Plus what the tests read afterwards: the event log Spark writes for each application, to tell where
tasks ran, and the Delta tables on either storage through delta-rs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from app import __version__
from app.runtime.child_processes import parent_death_preexec
from app.runtime.jvm import REPO_ROOT
from tests.cluster import readme
from tests.cluster.servers import (
    JVM_OPTIONS,
    PYSPARK_HOME,
    S3_ACCESS_KEY,
    S3_REGION,
    S3_SECRET_KEY,
    S3Server,
    SparkCluster,
)

SUBMIT_TIMEOUT_S = float(os.environ.get("CLUSTER_SUBMIT_TIMEOUT_S", "900"))
BUILD_TIMEOUT_S = 300
KAFKA_USERNAME = "cluster-tier"  # conf/cluster.yaml's SASL settings, unused on the PLAINTEXT broker
KAFKA_PASSWORD = "cluster-tier-kafka-password"
# The tests' own settings, outside the README's command: where each task ran, pinned zones, JVMs
# that start fast (servers.JVM_OPTIONS, prepended to the extra options), and one executor per
# application (one worker's single core): a second executor on the same two-core machine ran no
# task sooner and cost its own JVM start, about 9 CPU-seconds per submit; no claim of the tier
# needs two. No locality wait: on one host every task's data is as near to any executor.
SPARK_DEFAULTS = """\
spark.eventLog.enabled true
spark.eventLog.dir file://{event_log_dir}
spark.eventLog.rolling.enabled false
spark.eventLog.compress false
spark.ui.enabled false
spark.driver.defaultJavaOptions {jvm_options}
spark.executor.defaultJavaOptions {jvm_options}
spark.driver.extraJavaOptions -Duser.timezone=UTC
spark.executor.extraJavaOptions -Duser.timezone=UTC
spark.locality.wait 0s
spark.cores.max 1
"""


def working_copy(work_dir: Path) -> Path:
    """A directory that looks like the repository root to the README's relative paths (app, checks,
    jobs, conf), so its `python -m zipfile -c offset_audit.zip ...` writes there and not in the clone."""
    root = work_dir / "root"
    if not root.exists():
        root.mkdir(parents=True)
        for name in ("app", "checks", "jobs", "conf"):
            (root / name).symlink_to(REPO_ROOT / name, target_is_directory=True)
    return root


@dataclass(frozen=True)
class Submitted:
    returncode: int
    stdout: str
    stderr: str
    event_log_dir: Path

    def summary(self) -> dict[str, Any]:
        """The `--json` summary: the last line of stdout that is a JSON object."""
        for line in reversed(self.stdout.splitlines()):
            if line.startswith("{"):
                parsed: dict[str, Any] = json.loads(line)
                return parsed
        raise AssertionError(f"no JSON summary on stdout:\n{self.stdout[-2000:]}\n{self.stderr[-4000:]}")


def spark_submit(
    cluster: SparkCluster,
    s3: S3Server,
    jars: Sequence[Path],
    bootstrap: str,
    data_dir: str,
    job: str,
    args: Sequence[str],
    work_dir: Path,
) -> Running:
    """Starts README's block with its `submit <job>` line and ``args`` appended, as bash in a copy of
    the repository root, with an event log of its own; the caller may do other work before ``finish``."""
    event_log_dir = new_event_log_dir(work_dir, job)
    root = working_copy(work_dir)
    script = readme.cluster_block().script(
        job,
        args,
        {  # the placeholders of README's export lines
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "KAFKA_USERNAME": KAFKA_USERNAME,
            "KAFKA_PASSWORD": KAFKA_PASSWORD,
            "OFFSET_AUDIT_DATA_DIR": data_dir,
            "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
            "PYSPARK_PYTHON": sys.executable,
        },
        cluster.master_url,
        jars,
    )
    return start_script(
        script, submit_env(s3, event_log_dir, work_dir / f"local-{job}"), root, job, event_log_dir
    )


def submit_user_job(
    cluster: SparkCluster,
    s3: S3Server,
    jars: Sequence[Path],
    py_files: Path,
    job_file: Path,
    args: Sequence[str],
    work_dir: Path,
) -> Running:
    """Starts a user's own job file as README's "Audit your own job" submits one: the library as
    ``py_files`` (the zip `make dist` builds), Delta and the Kafka connector (and, for s3a://,
    hadoop-aws) as ``jars``, the cluster block's two settings for small tables, the job's arguments
    after its file. The keys of the object store are in the environment, where the job reads them."""
    name = job_file.stem
    event_log_dir = new_event_log_dir(work_dir, name)
    argv = [
        "spark-submit", "--master", cluster.master_url, "--jars", ",".join(map(str, jars)),
        "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
        "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # README's cluster block's settings for small tables: Spark's defaults scheduled 50 tasks
        # (the sink's snapshot) in every micro-batch after the first.
        "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.databricks.delta.snapshotPartitions=2",
        "--py-files", str(py_files), str(job_file), *args,
    ]  # fmt: skip
    env = submit_env(s3, event_log_dir, work_dir / f"local-{name}")
    env.update(
        AWS_ACCESS_KEY_ID=S3_ACCESS_KEY, AWS_SECRET_ACCESS_KEY=S3_SECRET_KEY, PYSPARK_PYTHON=sys.executable
    )
    return start_script(shlex.join(argv), env, work_dir, name, event_log_dir)


def build_dist(dist: Path) -> Path:
    """`make dist` into ``dist``: the wheel and the `--py-files` zip (once a session: ``dist``)."""
    built = subprocess.run(
        ["make", "-o", "python-deps", "dist", f"PY={sys.executable}", f"DIST={dist}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return dist


def wheel_of(dist: Path) -> Path:
    return dist / f"offset_audit-{__version__}-py3-none-any.whl"


def py_files_of(dist: Path) -> Path:
    """The `--py-files` zip `make dist` built into ``dist``."""
    return dist / f"offset_audit-{__version__}-py-files.zip"


def new_event_log_dir(work_dir: Path, job: str) -> Path:
    """An empty event log directory for one submit of ``job``, and beside it the SPARK_CONF_DIR
    whose spark-defaults.conf points there."""
    event_log_dir = work_dir / f"events-{job}-{len(list(work_dir.glob(f'events-{job}-*')))}"
    event_log_dir.mkdir(parents=True)
    spark_conf_dir = spark_conf_dir_of(event_log_dir)
    spark_conf_dir.mkdir()
    defaults = SPARK_DEFAULTS.format(event_log_dir=event_log_dir, jvm_options=JVM_OPTIONS)
    (spark_conf_dir / "spark-defaults.conf").write_text(defaults)
    return event_log_dir


def spark_conf_dir_of(event_log_dir: Path) -> Path:
    return event_log_dir.with_name(event_log_dir.name.replace("events-", "spark-conf-"))


def submit_env(s3: S3Server, event_log_dir: Path, local_dir: Path) -> dict[str, str]:
    """spark-submit's environment: this one without AWS, Spark or PySpark settings of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SPARK_", "PYSPARK_"))}
    env.update(
        # `python` and `spark-submit` as a shell with the project's virtualenv active finds them.
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        SPARK_HOME=str(PYSPARK_HOME),
        SPARK_CONF_DIR=str(spark_conf_dir_of(event_log_dir)),
        SPARK_LOCAL_IP="127.0.0.1",
        # What conf/cluster.yaml reads besides README's exports: an S3-compatible server on plain
        # HTTP, a broker without SASL, and where the dashboard and Data Docs go.
        S3_ENDPOINT=s3.endpoint,
        S3_PATH_STYLE_ACCESS="true",
        AWS_REGION=S3_REGION,
        KAFKA_SECURITY_PROTOCOL="PLAINTEXT",
        OFFSET_AUDIT_LOCAL_DIR=str(local_dir),
    )
    return env


def start_script(script: str, env: dict[str, str], cwd: Path, job: str, event_log_dir: Path) -> Running:
    """``script`` run by bash in ``cwd``, in a process group of its own; its output goes to files
    named after ``job`` and the submit's number beside its event log, so a second submit of the same
    job keeps the first one's output for the post-mortem."""
    name = f"{job}-{event_log_dir.name.rsplit('-', 1)[1]}-cluster"
    work_dir = event_log_dir.parent
    out, err = work_dir / f"{name}.stdout", work_dir / f"{name}.stderr"
    (work_dir / f"{name}.sh").write_text(script)  # for a failure's post-mortem
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            ["bash", "-e", "-c", script], env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout,
            stderr=stderr, start_new_session=True, preexec_fn=parent_death_preexec(),
        )  # fmt: skip
    return Running(process, name, out, err, event_log_dir)


@dataclass
class Running:
    """A started spark-submit, its output going to files kept for a failure's post-mortem. As a context
    manager it kills the whole process group on the way out if the run is still going."""

    process: subprocess.Popen[bytes]
    name: str
    out: Path
    err: Path
    event_log_dir: Path

    def finish(self) -> Submitted:
        """Wait for the end; past the deadline the process group is killed and the test fails."""
        try:
            returncode = self.process.wait(timeout=SUBMIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            tail = "\n".join(self.err.read_text(errors="replace").splitlines()[-60:])
            raise AssertionError(f"{self.name} did not finish in {SUBMIT_TIMEOUT_S:.0f}s:\n{tail}") from None
        return Submitted(
            returncode,
            self.out.read_text(errors="replace"),
            self.err.read_text(errors="replace"),
            self.event_log_dir,
        )

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


# --- where tasks ran: Spark's event log ----------------------------------------------------------

# The Kafka connector's relation (batch reads) or scan (micro-batches) in a physical plan.
KAFKA_SCAN = re.compile(r"Kafka(Relation|Scan|Source|Table)")


@dataclass(frozen=True)
class TaskPlacement:
    executor_id: str
    host: str


def event_log(event_log_dir: Path) -> list[dict[str, Any]]:
    """The events of the one application that logged to ``event_log_dir`` (plain JSON lines)."""
    (log_file,) = [p for p in event_log_dir.iterdir() if p.is_file() and not p.name.startswith(".")]
    return [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]


def tasks_of_plans(event_log_dir: Path, matches: Callable[[str], bool]) -> list[TaskPlacement]:
    """Every task of the SQL executions with a line of their physical plan that ``matches``, and of
    the executions nested in them."""
    events = event_log(event_log_dir)
    starts = [e for e in events if e["Event"].endswith("SparkListenerSQLExecutionStart")]
    matching = {
        e["executionId"]
        for e in starts
        if any(matches(line) for line in e.get("physicalPlanDescription", "").splitlines())
    }
    # Work nested in a matching execution (a micro-batch's foreachBatch writes) runs as executions of
    # its own whose root is the matching one.
    executions = matching | {e["executionId"] for e in starts if e.get("rootExecutionId") in matching}
    stages = {
        stage
        for e in events
        if e["Event"] == "SparkListenerJobStart"
        and int((e.get("Properties") or {}).get("spark.sql.execution.id", -1)) in executions
        for stage in e["Stage IDs"]
    }
    return [
        TaskPlacement(e["Task Info"]["Executor ID"], e["Task Info"]["Host"])
        for e in events
        if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in stages
    ]


def tasks_scanning(event_log_dir: Path, location: str) -> list[TaskPlacement]:
    """Every task of the SQL executions whose physical plan scans files at ``location``."""
    return tasks_of_plans(event_log_dir, lambda line: "Scan" in line and location in line)


def tasks_reading_kafka(event_log_dir: Path) -> list[TaskPlacement]:
    """Every task of the SQL executions that read a Kafka topic (batch relation or micro-batch scan)."""
    return tasks_of_plans(event_log_dir, lambda line: KAFKA_SCAN.search(line) is not None)


def executors_added(event_log_dir: Path) -> dict[str, str]:
    """executor id -> host of every executor the application was given."""
    return {
        e["Executor ID"]: e["Executor Info"]["Host"]
        for e in event_log(event_log_dir)
        if e["Event"] == "SparkListenerExecutorAdded"
    }


# --- tables on either storage ---------------------------------------------------------------------


def delta_rs_s3_options(s3: S3Server) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
        "AWS_REGION": S3_REGION,
        "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }


def read_table(path: str, s3: S3Server | None = None) -> pa.Table:
    """A Delta table at a local path, or at s3a://bucket/... (read as s3:// by delta-rs)."""
    if path.startswith("s3a://"):
        assert s3 is not None
        return DeltaTable(
            "s3://" + path.removeprefix("s3a://"), storage_options=delta_rs_s3_options(s3)
        ).to_pyarrow_table()
    return DeltaTable(path).to_pyarrow_table()
