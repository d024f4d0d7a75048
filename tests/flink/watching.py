"""What the Flink tests that follow a job with `flink-watch` share: the sidecar as a process, the
ledger's checkpoints, a restart where the sidecar keeps asking, and the audit of the result."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from deltalake import DeltaTable
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F

from app import cli
from app.config import AppConfig, load_config
from app.contracts import vocabulary as vocab
from app.kafka.clients import plain_conf, retry_kafka
from app.offsets_topic.run import ingest_offsets
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.runtime.child_processes import parent_death_preexec
from app.storage.tables import tables_from_config
from tests.flink.harness import FlinkJob, JobSpec, wait_for
from tests.support.streaming import KAFKA_TIMEOUT_S

FLINK_JOB_NAME = "offset-audit-flink-test"  # what the test job runner names its job
LEDGER_WAIT_S = 120.0
ROOT = Path(__file__).resolve().parents[2]

Processes = tuple[list[FlinkJob], list[subprocess.Popen[bytes]]]


def completions(ledger: Path) -> dict[str, dict[int, int]]:
    """The ledger's CHECKPOINT_COMPLETED rows: checkpoint directory -> partition -> raw offset. By
    directory, not id: a job restored from checkpoint N numbers its own from N + 1, and the dead
    process may have completed some of those ids too."""
    if not (ledger / "_delta_log").is_dir():
        return {}
    out: dict[str, dict[int, int]] = {}
    for r in DeltaTable(str(ledger)).to_pyarrow_table().to_pylist():
        if r["event_type"] == vocab.EVENT_CHECKPOINT_COMPLETED:
            path = str(json.loads(r["detail"])[vocab.DETAIL_EXTERNAL_PATH]).removeprefix("file:")
            # A checkpoint taken before the source's readers had their splits holds no partition:
            # one checkpoint-level row.
            partitions = out.setdefault(str(Path(path)), {})
            if r["partition"] is not None:
                partitions[r["partition"]] = r["raw_offset"]
    return out


def recorded_ids(ledger: Path) -> set[tuple[str, int]]:
    """(checkpoint's job directory name, checkpoint id) of every recorded completion of a `chk-N`
    (a savepoint's directory is elsewhere)."""
    paths = (Path(p) for p in completions(ledger))
    return {(p.parent.name, int(p.name[4:])) for p in paths if p.name.startswith("chk-")}


def wait_recorded(ledger: Path, job_id: str, ids: set[int]) -> None:
    wanted = {(job_id, i) for i in ids}
    wait_for(
        lambda: True if wanted <= recorded_ids(ledger) else None, LEDGER_WAIT_S, f"{wanted} in the ledger"
    )


def wait_recorded_since(ledger: Path, job_id: str, first_id: int) -> None:
    """Checkpoint ``first_id`` of the job or a later one in the ledger: the sidecar has followed the
    job that far (on a starved machine its first look may come after Flink deleted the checkpoint
    itself, which it then names missed)."""
    wait_for(
        lambda: True if any(j == job_id and i >= first_id for j, i in recorded_ids(ledger)) else None,
        LEDGER_WAIT_S,
        f"checkpoint {first_id} of {job_id} or a later one in the ledger",
    )


def restart_on_same_port(job: FlinkJob, path: Path | None, spec: JobSpec | None = None) -> FlinkJob:
    """A new Flink process restoring ``path`` (None: without state), its REST API where the old
    one's was (where the sidecar keeps asking)."""
    again = FlinkJob(job.stack, spec or job.spec, job.work_dir, restore=path, on_start=job.on_start)
    again.port, again.rest_url = job.port, job.rest_url
    return again.start()


@pytest.fixture
def processes() -> Iterator[Processes]:
    """The Flink jobs and sidecars a test started: none is left running after it."""
    jobs: list[FlinkJob] = []
    sidecars: list[subprocess.Popen[bytes]] = []
    yield jobs, sidecars
    for proc in sidecars:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    for job in jobs:
        job.stop()


def start_sidecar(
    job: FlinkJob, job_name: str, group: str, ledger: Path, log: Path, bootstrap: str | None = None
) -> subprocess.Popen[bytes]:
    """`flink-watch` following ``job``'s REST API by the job's name, waiting for it to come up. With
    ``bootstrap``, it asks that broker where a run without state started, in the startup mode the
    job publishes (its `start` parameter)."""
    argv = [
        sys.executable, "-m", "app.cli", "flink-watch", "--rest", job.rest_url, "--job-name", FLINK_JOB_NAME,
        "--job", job_name, "--group-id", group, "--ledger", str(ledger), "--poll-interval", "0.5",
        "--wait", "300", "--json",
    ]  # fmt: skip
    if bootstrap is not None:
        argv += ["--starting-offsets-key", "start", "--set", f"kafka.bootstrap_servers={bootstrap}"]
    with log.open("wb") as err:
        return subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=parent_death_preexec(signal.SIGKILL),
        )


def stop_sidecar(sidecar: subprocess.Popen[bytes], log: Path) -> bytes:
    """SIGTERM, as a deployment stops it; its stdout (the `--json` summary)."""
    sidecar.send_signal(signal.SIGTERM)
    out, _ = sidecar.communicate(timeout=60)
    assert sidecar.returncode == 0, log.read_text()
    return out


def audit_config(
    tmp_path: Path, bootstrap: str, ledger: Path, job_name: str, extra: Sequence[str] = ()
) -> AppConfig:
    """The audit of one Flink job whose output no table holds: sink mode `none`; ``extra``: more
    overrides."""
    overrides = [
        f"paths.data_dir={tmp_path / 'audit'}",
        f"kafka.bootstrap_servers={bootstrap}",
        f"tables.ledger={ledger}",
        f"reconcile.jobs=[{job_name}]",
        f"reconcile.sink_mode_by_job.{job_name}=none",
    ]
    overrides += extra
    return load_config("local", overrides=overrides, environ={})


def reconcile_findings(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    group: str,
    since: datetime,
    now: datetime,
    run_id: str,
) -> list[Row]:
    """`ingest-offsets` of the group then `reconcile`: the findings of that reconcile run."""
    ingest_offsets(spark, cfg, bootstrap, [group], run_id=f"ingest-{run_id}")
    run_reconcile(spark, cfg, AuditRun(run_id=run_id, now=now, since=since))
    findings = spark.read.format("delta").load(tables_from_config(cfg).findings)
    return findings.where(F.col("reconcile_run_id") == run_id).collect()


def serious(found: Sequence[Row], at_least: str = vocab.WARN) -> list[tuple[str, str]]:
    """(finding type, severity) of the findings at ``at_least`` or above."""
    return [(f.finding_type, f.severity) for f in found if vocab.severity_at_least(f.severity, at_least)]


def evidence(found: Sequence[Row], at_least: str = vocab.WARN) -> str:
    """The full rows of the findings at ``at_least`` or above, evidence included: what a failed
    assertion prints, so a failure on a CI machine says which commit or checkpoint it was about."""
    rows = [
        {**f.asDict(), "evidence": json.loads(f.evidence or "{}")}
        for f in found
        if vocab.severity_at_least(f.severity, at_least)
    ]
    return json.dumps(rows, indent=1, default=str, sort_keys=True)


def flink_import(path: Path, ledger: Path, job_name: str, group: str) -> dict[str, Any]:
    """`flink-import` of ``path``: its `--json` summary. The tail of a job whose process ended with it:
    what completed after the sidecar's last poll is retained (RETAIN_ON_CANCELLATION)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        argv = ["flink-import", "--path", str(path), "--job", job_name, "--group-id", group]
        code = cli.main([*argv, "--ledger", str(ledger), "--json"])
    assert code == 0
    result: dict[str, Any] = json.loads(buffer.getvalue())
    return result


def wait_group(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Until the group's committed offsets are ``offsets``, asked through one consumer of the group
    that never joins it."""
    consumer = Consumer(plain_conf(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    partitions = [TopicPartition(topic, p) for p in sorted(offsets)]

    def committed() -> dict[int, int]:
        found = retry_kafka(
            lambda left: consumer.committed(partitions, timeout=left),
            f"reading the offsets of {group}",
            KAFKA_TIMEOUT_S,
        )
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}

    try:
        wait_for(
            lambda: True if committed() == offsets else None, LEDGER_WAIT_S, f"{group} at {offsets}", 1.0
        )
    finally:
        consumer.close()
