"""A sidecar that fell behind a job killed moments later (the legacy `FlinkKafkaConsumer` on Flink
1.20, the real broker): the checkpoints Flink completed and deleted while the sidecar was not
looking are named as missed, and the commits the job made of them are its own, not a
FOREIGN_COMMIT.

The window is stretched by events, not by time: the sidecar is stopped (SIGSTOP) once it recorded
a checkpoint, the job completes more checkpoints than it retains (so the first of them are
deleted), is killed, and only then the sidecar resumes and follows the restore."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.contracts import vocabulary as vocab
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec, wait_for
from tests.flink.watching import (
    LEDGER_WAIT_S,
    Processes,
    audit_config,
    evidence,
    processes,  # noqa: F401 (a fixture)
    reconcile_findings,
    recorded_ids,
    restart_on_same_port,
    serious,
    start_sidecar,
    stop_sidecar,
    wait_group,
    wait_recorded,
)
from tests.support.streaming import create_topic, produce

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.spark]

JOB = "flink-behind"
PARTITIONS = 2
RETAINED = 3


def test_checkpoints_deleted_while_the_sidecar_was_behind_a_killed_job_are_named_and_committed_as_its_own(
    spark: SparkSession,
    bootstrap: str,
    unique: str,
    tmp_path: Path,
    flink_stacks: Callable[[str], FlinkStack],
    processes: Processes,  # noqa: F811
) -> None:
    jobs, sidecars = processes
    topic, group = f"flink-behind-{unique}", f"flink-behind-{unique}-group"
    ledger, log = tmp_path / "ledger", tmp_path / "flink-watch.log"
    since = datetime.now(UTC) - timedelta(minutes=1)
    create_topic(bootstrap, topic, PARTITIONS)
    spec = JobSpec(bootstrap, topic, group, source="legacy", num_retained=RETAINED)
    job = FlinkJob(flink_stacks("1.20"), spec, tmp_path / "flink", on_start=jobs.append)
    watcher = start_sidecar(job, JOB, group, ledger, log)
    sidecars.append(watcher)
    job.start()
    # The records come once the sidecar follows the job: a sidecar slow to start (a starved
    # machine) then misses only checkpoints of an empty topic, which commit nothing.
    wait_for(
        lambda: True if any(j == job.job_id for j, _ in recorded_ids(ledger)) else None,
        LEDGER_WAIT_S,
        "the sidecar following the job",
    )
    produce(bootstrap, topic, 200, PARTITIONS)
    job.wait_records_read(200)
    reached = int(job.checkpoint_after_now()["id"])
    # That checkpoint or a later one: a sidecar slow to start (a starved machine) may first look
    # after Flink deleted it, which names it missed; the claim below is about what follows.
    wait_for(
        lambda: True if any(j == job.job_id and i >= reached for j, i in recorded_ids(ledger)) else None,
        LEDGER_WAIT_S,
        f"checkpoint {reached} or a later one in the ledger",
    )
    wait_group(bootstrap, group, topic, {0: 100, 1: 100})

    # The sidecar stops looking; the job completes more checkpoints than it retains, then dies.
    os.kill(watcher.pid, signal.SIGSTOP)
    try:
        # The signal is delivered asynchronously: what it recorded is read once it stands still.
        wait_for(lambda: True if process_state(watcher.pid) == "T" else None, 30.0, "the sidecar stopped")
        seen = max(i for j, i in recorded_ids(ledger) if j == job.job_id)
        job.wait_checkpoints(RETAINED + 2, after_id=seen)
        job.kill9()
    finally:
        os.kill(watcher.pid, signal.SIGCONT)
    retained = [int(p.name.removeprefix("chk-")) for p in job.retained()]
    gone = set(range(seen + 1, retained[0]))
    assert len(gone) >= 2, (seen, retained)

    second = restart_on_same_port(job, job.retained()[-1])
    after = second.wait_checkpoints(2, after_id=retained[-1])
    wait_recorded(ledger, second.job_id, {int(c["id"]) for c in after})
    wait_recorded(ledger, job.job_id, set(retained))
    second.cancel()
    summary = json.loads(stop_sidecar(watcher, log))

    # Never silent: each deleted checkpoint is recovered (the read-ahead may have decoded it before
    # the sidecar stopped) or named missed (a checkpoint that failed unseen is named too), never both.
    # (Checkpoints up to `seen` a slow-starting sidecar missed are named too, and are not the claim.)
    named = {m["id"]: m[vocab.DETAIL_REASON] for m in summary["missed"]}
    missed = {i for i in named if i > seen}
    recovered = {i for j, i in recorded_ids(ledger) if j == job.job_id and i in gone}
    assert gone <= missed | recovered, (gone, named, recovered)
    assert not missed & recovered, (named, recovered)
    assert missed <= set(range(seen + 1, retained[-1])), (gone, named)
    assert set(named.values()) <= {vocab.MISSED_FILES_GONE}
    # The job read nothing while they completed: each held 100 a partition, and committed it.
    cfg = audit_config(tmp_path, bootstrap, ledger, JOB, ["reconcile.confirm_gaps=false"])
    found = reconcile_findings(spark, cfg, bootstrap, group, since, datetime.now(UTC), "rec-behind")
    assert serious(found) == [], evidence(found)
    assert vocab.FOREIGN_COMMIT not in {f.finding_type for f in found}
    assert vocab.UNCLEAN_STOP in {f.finding_type for f in found}


def process_state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped by a signal)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]
