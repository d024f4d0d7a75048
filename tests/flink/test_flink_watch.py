"""`flink-watch` following a real Flink job (a MiniCluster JVM: Flink 1.20 with the `KafkaSource` and
the legacy `FlinkKafkaConsumer`, Flink 2.2 with the `KafkaSource`) on the real broker: every completed
checkpoint reaches the ledger with the offsets Flink's State Processor API reads from its files, a
`kill -9` of the whole Flink process and a restart from its latest retained checkpoint is judged an
exact resume with nothing at warn or above, and `flink-import` of the checkpoint directory adds what
completed after the sidecar's last poll, then nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app import cli
from app.config import load_config
from app.contracts import vocabulary as vocab
from app.offsets_topic.run import ingest_offsets
from app.reconcile.forensics_run import run_forensics
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.runtime.child_processes import parent_death_preexec
from app.storage.tables import tables_from_config
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec, wait_for
from tests.kafka.streaming import create_topic, group_offsets, produce

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.spark]

JOB = "flink-payments"
FLINK_JOB_NAME = "offset-audit-flink-test"  # what the test job runner names its job
PARTITIONS = 2
LEDGER_WAIT_S = 120.0
ROOT = Path(__file__).resolve().parents[2]


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
    """(checkpoint's job directory name, checkpoint id) of every recorded completion."""
    return {(Path(p).parent.name, int(Path(p).name.removeprefix("chk-"))) for p in completions(ledger)}


def wait_recorded(ledger: Path, job_id: str, ids: set[int]) -> None:
    wanted = {(job_id, i) for i in ids}
    wait_for(
        lambda: True if wanted <= recorded_ids(ledger) else None, LEDGER_WAIT_S, f"{wanted} in the ledger"
    )


def restart_on_same_port(job: FlinkJob, path: Path) -> FlinkJob:
    """A new Flink process restoring ``path``, its REST API where the old one's was (where the
    sidecar keeps asking)."""
    again = FlinkJob(job.stack, job.spec, job.work_dir, restore=path, on_start=job.on_start)
    again.port, again.rest_url = job.port, job.rest_url
    return again.start()


@pytest.fixture
def processes() -> Iterator[tuple[list[FlinkJob], list[subprocess.Popen[bytes]]]]:
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


@pytest.mark.parametrize(
    ("stack", "source"), [("1.20", "kafkasource"), ("2.2", "kafkasource"), ("1.20", "legacy")]
)
def test_a_killed_flink_job_restored_from_its_latest_checkpoint_is_an_exact_resume_in_the_ledger(
    stack: str,
    source: str,
    spark: SparkSession,
    bootstrap: str,
    unique: str,
    tmp_path: Path,
    flink_stacks: Callable[[str], FlinkStack],
    processes: tuple[list[FlinkJob], list[subprocess.Popen[bytes]]],
) -> None:
    jobs, sidecars = processes
    flink = flink_stacks(stack)
    topic, group = f"flink-watch-{unique}", f"flink-watch-{unique}-group"
    ledger = tmp_path / "ledger"
    since = datetime.now(UTC) - timedelta(minutes=1)
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 200, PARTITIONS)
    spec = JobSpec(bootstrap, topic, group, source=source)
    job = FlinkJob(flink, spec, tmp_path / "flink", on_start=jobs.append)
    # The sidecar first, waiting for the JobManager it is deployed beside: it sees checkpoint 1.
    argv = [
        sys.executable, "-m", "app.cli", "flink-watch", "--rest", job.rest_url, "--job-name", FLINK_JOB_NAME,
        "--job", JOB, "--group-id", group, "--ledger", str(ledger), "--poll-interval", "0.5",
        "--wait", "300", "--json",
    ]  # fmt: skip
    log = (tmp_path / "flink-watch.log").open("wb")
    watcher = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=parent_death_preexec(signal.SIGKILL),
    )
    sidecars.append(watcher)
    job.start()
    first_job_id = job.job_id

    job.wait_checkpoints(3)
    produce(bootstrap, topic, 100, PARTITIONS, start=200)
    job.wait_checkpoints(6)
    job.kill9()
    # Its latest checkpoint is the newest one it retained: one may have completed since REST last said.
    restore_path = job.retained()[-1]
    latest_id = int(restore_path.name.removeprefix("chk-"))
    first_retained = {int(p.name.removeprefix("chk-")) for p in job.retained()}

    produce(bootstrap, topic, 100, PARTITIONS, start=300)
    second = restart_on_same_port(job, restore_path)
    assert second.job_id != first_job_id
    after = second.wait_checkpoints(4, after_id=latest_id)
    # The dead process's last checkpoints: polled before the kill, or (one completed between the
    # last poll and the kill) recorded as its recovered completion when the restore named it.
    wait_recorded(ledger, first_job_id, first_retained)
    wait_recorded(ledger, second.job_id, {int(c["id"]) for c in after})
    # Stopped once the group's commits caught up with everything produced (they follow the
    # checkpoints asynchronously, seconds behind on a busy machine).
    end = {p: 400 // PARTITIONS for p in range(PARTITIONS)}
    wait_for(
        lambda: True if group_offsets(bootstrap, group, topic, PARTITIONS) == end else None,
        LEDGER_WAIT_S,
        f"{group} at {end}",
    )
    second.cancel()
    watcher.send_signal(signal.SIGTERM)
    out, _ = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, (tmp_path / "flink-watch.log").read_text()
    summary = json.loads(out)
    assert summary["missed"] == []
    assert len(summary["runs"]) == 2
    assert summary["runs"][0] == first_job_id
    assert summary["runs"][1].startswith(f"{second.job_id}-restore-{latest_id}-")

    # What completed in the last moments of the cancelled process, after the sidecar's last poll,
    # is retained (RETAIN_ON_CANCELLATION): the import of the checkpoint directory adds it.
    retained = sorted(p for p in job.checkpoint_dir.glob("*/chk-*") if (p / "_metadata").exists())
    tail = import_json(job.checkpoint_dir, ledger, group)
    assert tail["already_recorded"] + tail["imported"] == len(retained)
    assert tail["unreadable"] == []
    # Every retained checkpoint of both processes: the ledger's offsets are Flink's own.
    recorded = completions(ledger)
    assert len(retained) >= 4
    for path in retained:
        oracle = json.loads(
            subprocess.run(
                flink.java_cmd("offsetaudit.flinktest.StateOracle", [str(path)]),
                capture_output=True, check=True, timeout=300,
            ).stdout.decode().strip().splitlines()[-1]
        )  # fmt: skip
        assert int(oracle["checkpoint_id"]) == int(path.name.removeprefix("chk-"))
        assert recorded[str(path)] == {o["partition"]: o["raw_offset"] for o in oracle["offsets"]}, path

    cfg = load_config(
        "local",
        overrides=[
            f"paths.data_dir={tmp_path / 'audit'}",
            f"kafka.bootstrap_servers={bootstrap}",
            f"tables.ledger={ledger}",
            f"reconcile.jobs=[{JOB}]",
            f"reconcile.sink_mode_by_job.{JOB}=none",
            "reconcile.confirm_gaps=false",
        ],
        environ={},
    )
    ingest_offsets(spark, cfg, bootstrap, [group], run_id="ingest-flink")
    now = datetime.now(UTC)
    run_reconcile(spark, cfg, AuditRun(run_id="rec-flink", now=now, since=since))
    findings = spark.read.format("delta").load(tables_from_config(cfg).findings)
    found = findings.where(F.col("reconcile_run_id") == "rec-flink").collect()
    assert [
        (f.finding_type, f.severity) for f in found if vocab.severity_at_least(f.severity, vocab.WARN)
    ] == []
    types = {f.finding_type for f in found}
    assert vocab.FOREIGN_COMMIT not in types  # the group's commits are the job's own
    assert vocab.UNCLEAN_STOP in types  # the kill was seen, and judged harmless (info)
    run_forensics(spark, cfg, AuditRun(run_id="for-flink", now=now, since=since))
    restarts = spark.read.format("delta").load(tables_from_config(cfg).restarts).collect()
    assert {r.classification for r in restarts if r.job_name == JOB} == {vocab.RESTART_EXACT}

    # Importing the same directory again adds nothing.
    again = import_json(job.checkpoint_dir, ledger, group)
    assert again["events_written"] == 0
    assert again["already_recorded"] == len(retained)


def import_json(path: Path, ledger: Path, group: str) -> dict[str, Any]:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli.main(
            [
                "flink-import",
                "--path",
                str(path),
                "--job",
                JOB,
                "--group-id",
                group,
                "--ledger",
                str(ledger),
                "--json",
            ]
        )
    assert code == 0
    result: dict[str, Any] = json.loads(buffer.getvalue())
    return result
