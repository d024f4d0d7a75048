"""Running the jobs the way README.md's "Running on a cluster" does: the library zipped for
--py-files, the resolved jars as --jars, `spark-submit --master spark://...` of jobs/<job>.py, and
the configuration layer for object storage with its credentials from the environment.

Plus what the tests read afterwards: the event log Spark writes for each application, to tell where
tasks ran, and the Delta tables on either storage through delta-rs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from app.runtime.child_processes import parent_death_preexec
from app.runtime.jvm import REPO_ROOT
from tests.cluster.conftest import (
    PYSPARK_HOME,
    S3_ACCESS_KEY,
    S3_REGION,
    S3_SECRET_KEY,
    S3Server,
    SparkCluster,
)

SPARK_SUBMIT = PYSPARK_HOME / "bin" / "spark-submit"
SUBMIT_TIMEOUT_S = float(os.environ.get("CLUSTER_SUBMIT_TIMEOUT_S", "420"))

# The config layer of README's example, for an S3 API server on plain HTTP (conf/<env>.yaml).
S3_ENV_YAML = """\
spark:
  mode: cluster
storage:
  options:
    fs.s3a.endpoint: ${S3_ENDPOINT}
    fs.s3a.endpoint.region: us-east-1
    fs.s3a.path.style.access: "true"
    fs.s3a.connection.ssl.enabled: "false"
    fs.s3a.aws.credentials.provider: org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider
    fs.s3a.access.key: ${S3_ACCESS_KEY}
    fs.s3a.secret.key: ${S3_SECRET_KEY}
"""


def package_library(out_dir: Path) -> Path:
    """README's `python -m zipfile -c offset_audit.zip app checks`, run at the repository root."""
    target = out_dir / "offset_audit.zip"
    if not target.exists():
        subprocess.run(
            [sys.executable, "-m", "zipfile", "-c", str(target), "app", "checks"], cwd=REPO_ROOT, check=True
        )
    return target


def conf_dir_with_s3_env(out_dir: Path) -> Path:
    """conf/base.yaml beside an `s3` layer: `--conf-dir <it> --env s3`."""
    conf = out_dir / "conf"
    if not conf.exists():
        conf.mkdir()
        shutil.copy(REPO_ROOT / "conf" / "base.yaml", conf / "base.yaml")
        (conf / "s3.yaml").write_text(S3_ENV_YAML)
    return conf


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
    job: str,
    args: Sequence[str],
    work_dir: Path,
    extra_env: Mapping[str, str] | None = None,
) -> Running:
    """Starts `spark-submit --master spark://... jobs/<job>.py --env s3 ...` with an event log of its
    own; the caller may do other work before ``finish``."""
    event_log_dir = work_dir / f"events-{job}-{len(list(work_dir.glob(f'events-{job}-*')))}"
    event_log_dir.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SPARK_", "PYSPARK_"))}
    env.update(
        SPARK_HOME=str(PYSPARK_HOME),
        SPARK_CONF_DIR=str(cluster.work_dir / "conf"),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        S3_ENDPOINT=s3.endpoint,
        S3_ACCESS_KEY=S3_ACCESS_KEY,
        S3_SECRET_KEY=S3_SECRET_KEY,
        **(extra_env or {}),
    )
    cmd = [
        str(SPARK_SUBMIT),
        "--master", cluster.master_url,
        "--jars", ",".join(str(j) for j in jars),
        "--py-files", str(package_library(work_dir)),
        "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
        "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "--conf", "spark.driver.extraJavaOptions=-Duser.timezone=UTC",
        "--conf", "spark.executor.extraJavaOptions=-Duser.timezone=UTC",
        # Sized for small audit tables on a two-core cluster, as README's example says.
        "--conf", "spark.sql.shuffle.partitions=4",
        "--conf", "spark.databricks.delta.snapshotPartitions=2",
        # The tests' own instrumentation: where each task ran.
        "--conf", "spark.eventLog.enabled=true",
        "--conf", "spark.eventLog.rolling.enabled=false",
        "--conf", "spark.eventLog.compress=false",
        "--conf", f"spark.eventLog.dir=file://{event_log_dir}",
        "--conf", "spark.ui.enabled=false",
        str(REPO_ROOT / "jobs" / f"{job}.py"),
        "--env", "s3", "--conf-dir", str(conf_dir_with_s3_env(work_dir)),
        *args,
    ]  # fmt: skip
    name = f"{job}-cluster"
    out, err = work_dir / f"{name}.stdout", work_dir / f"{name}.stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            cmd, env=env, cwd=work_dir, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
            start_new_session=True, preexec_fn=parent_death_preexec(),
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


@dataclass(frozen=True)
class TaskPlacement:
    executor_id: str
    host: str


def event_log(event_log_dir: Path) -> list[dict[str, Any]]:
    """The events of the one application that logged to ``event_log_dir`` (plain JSON lines)."""
    (log_file,) = [p for p in event_log_dir.iterdir() if p.is_file() and not p.name.startswith(".")]
    return [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]


def tasks_scanning(event_log_dir: Path, location: str) -> list[TaskPlacement]:
    """Every task of the SQL executions whose physical plan scans files at ``location``."""
    events = event_log(event_log_dir)
    executions = {
        e["executionId"]
        for e in events
        if e["Event"].endswith("SparkListenerSQLExecutionStart")
        and any(
            "Scan" in line and location in line for line in e.get("physicalPlanDescription", "").splitlines()
        )
    }
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
