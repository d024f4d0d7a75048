"""`flink-watch` following a real Flink job (a MiniCluster JVM: Flink 1.20 with the `KafkaSource` and
the legacy `FlinkKafkaConsumer`, Flink 2.2 with the `KafkaSource`) on the real broker: every completed
checkpoint reaches the ledger with the offsets Flink's State Processor API reads from its files, a
`kill -9` of the whole Flink process and a restart from its latest retained checkpoint is judged an
exact resume with nothing at warn or above, and `flink-import` of the checkpoint directory adds what
completed after the sidecar's last poll, then nothing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.contracts import vocabulary as vocab
from app.reconcile.forensics.run import run_forensics
from app.reconcile.outputs import AuditRun
from app.storage.tables import tables_from_config
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec, wait_for
from tests.flink.watching import (
    LEDGER_WAIT_S,
    Processes,
    audit_config,
    completions,
    evidence,
    flink_import,
    processes,  # noqa: F401 (a fixture)
    reconcile_findings,
    restart_on_same_port,
    serious,
    start_sidecar,
    stop_sidecar,
    wait_recorded,
)
from tests.support.streaming import create_topic, group_offsets, produce

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.spark]

JOB = "flink-payments"
PARTITIONS = 2


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
    processes: Processes,  # noqa: F811
) -> None:
    jobs, sidecars = processes
    flink = flink_stacks(stack)
    topic, group = f"flink-watch-{unique}", f"flink-watch-{unique}-group"
    ledger = tmp_path / "ledger"
    since = datetime.now(UTC) - timedelta(minutes=1)
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 200, PARTITIONS)
    # Flink deletes a checkpoint once `num_retained` newer ones completed, and a machine starved by
    # other work can delay the sidecar's first sight of a new job by seconds: capture at the tightest
    # setting (3 retained, 1 s apart) is measured by `bench.flink_capture`. The claim here is every
    # checkpoint with Flink's own offsets and an exact resume, so the job keeps 4 checkpoints 2 s apart.
    spec = JobSpec(bootstrap, topic, group, source=source, num_retained=4, interval_ms=2000)
    job = FlinkJob(flink, spec, tmp_path / "flink", on_start=jobs.append)
    # The sidecar first, waiting for the JobManager it is deployed beside: it sees checkpoint 1.
    log = tmp_path / "flink-watch.log"
    watcher = start_sidecar(job, JOB, group, ledger, log)
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
    summary = json.loads(stop_sidecar(watcher, log))
    assert summary["missed"] == []
    assert len(summary["runs"]) == 2
    assert summary["runs"][0] == first_job_id
    assert summary["runs"][1].startswith(f"{second.job_id}-restore-{latest_id}-")

    # What completed in the last moments of the cancelled process, after the sidecar's last poll,
    # is retained (RETAIN_ON_CANCELLATION): the import of the checkpoint directory adds it.
    retained = sorted(p for p in job.checkpoint_dir.glob("*/chk-*") if (p / "_metadata").exists())
    tail = flink_import(job.checkpoint_dir, ledger, JOB, group)
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

    cfg = audit_config(tmp_path, bootstrap, ledger, JOB, ["reconcile.confirm_gaps=false"])
    now = datetime.now(UTC)
    found = reconcile_findings(spark, cfg, bootstrap, group, since, now, "rec-flink")
    assert serious(found) == [], evidence(found)
    types = {f.finding_type for f in found}
    assert vocab.FOREIGN_COMMIT not in types  # the group's commits are the job's own
    assert vocab.UNCLEAN_STOP in types  # the kill was seen, and judged harmless (info)
    run_forensics(spark, cfg, AuditRun(run_id="for-flink", now=now, since=since))
    restarts = spark.read.format("delta").load(tables_from_config(cfg).restarts).collect()
    assert {r.classification for r in restarts if r.job_name == JOB} == {vocab.RESTART_EXACT}

    # Importing the same directory again adds nothing.
    again = flink_import(job.checkpoint_dir, ledger, JOB, group)
    assert again["events_written"] == 0
    assert again["already_recorded"] == len(retained)
