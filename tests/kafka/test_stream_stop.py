"""`offset-audit stream` stopped by SIGTERM while a micro-batch is at work: the way a scheduler or a
person stops a job that is reading a backlog.

Spark's query.stop() interrupts the micro-batch thread, and in a Python foreachBatch that thread runs
the callback's own Spark calls: a stop landing there abandoned the batch halfway, and Spark's
stream thread died of StackOverflowError matching the callback's traceback (app.stream.batch_gate).
The job now lets the batch finish and stops the query after it: the batch is complete (in Spark's
commit log, the ledger and the group's offsets), RUN_STOPPED is written, the process exits 0, and
the next start continues exactly where the stopped run ended.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.storage.tables import tables_from_config
from app.stream.job import StopWhen, StreamJob
from tests.kafka.processes import cli, wait_for
from tests.support.streaming import (
    create_topic,
    duplicated_sink_coordinates,
    group_offsets,
    job_config,
    last_completed_offsets,
    produce,
    read,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 3
PER_TRIGGER = 10_000  # a batch long enough (seconds) to be caught at work
RECORDS = 30_000
JOB = "stop-job"
# One stop is enough: before the fix each stop during a batch failed, 28 of 28 (StackOverflowError
# in Spark's stream thread, the batch abandoned halfway).


def log_ids(directory: Path) -> set[int]:
    return {int(n) for n in os.listdir(directory) if n.isdigit()} if directory.exists() else set()


def batch_at_work(ledger: Path, checkpoint: Path, run_id: str) -> int | None:
    """A checkpoint this run has snapshotted in the ledger (its callback is running: the snapshot is
    appended beside the sink write) that Spark's commit log does not hold yet."""
    if not (ledger / "_delta_log" / f"{0:020}.json").exists():  # the job has not created it yet
        return None
    snapshots = DeltaTable(str(ledger)).to_pyarrow_table(
        columns=["checkpoint_id"],
        filters=[("run_id", "=", run_id), ("event_type", "=", "CHECKPOINT_SNAPSHOT")],
    )
    running = set(snapshots.column("checkpoint_id").to_pylist()) - log_ids(checkpoint / "commits")
    return min(running) if running else None


def sigterm_while_a_batch_is_at_work(
    argv: list[str], run_id: str, ledger: Path, checkpoint: Path, log_path: Path
) -> tuple[int, int, str]:
    """Starts the job, sends SIGTERM once a batch of this run is at work; (exit code, batch, output)."""
    with log_path.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        batch = wait_for(
            lambda: batch_at_work(ledger, checkpoint, run_id) if proc.poll() is None else -1,
            240,
            f"a micro-batch of {run_id} at work",
        )
        assert batch >= 0, f"{run_id} ended before a batch ran:\n{log_path.read_text()[-3000:]}"
        assert batch not in log_ids(checkpoint / "commits"), "the batch ended before the signal"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    return code, batch, log_path.read_text()


def test_sigterm_while_a_batch_is_at_work_finishes_it_and_exits_0(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic, group = f"stop-{unique}", f"stop-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, RECORDS, PARTITIONS)
    settings = [
        f"kafka.bootstrap_servers={bootstrap}",
        f"stream.topics=[{topic}]",
        f"stream.group_id={group}",
        f"stream.job_name={JOB}",
        "stream.trigger_interval=1 second",
        f"stream.max_offsets_per_trigger={PER_TRIGGER}",
        "stream.startup_mode=earliest",
    ]
    cfg = job_config(tmp_path, bootstrap, topic, group, JOB, *settings[4:])
    ledger_path, checkpoint = Path(tables_from_config(cfg).ledger), tmp_path / "checkpoints" / JOB

    argv = cli("stream", tmp_path, *settings, args=("--idle-seconds", "300", "--run-id", "run-stopped"))
    code, batch, output = sigterm_while_a_batch_is_at_work(
        argv, "run-stopped", ledger_path, checkpoint, tmp_path / "stopped.log"
    )

    assert code == 0, output[-3000:]
    assert "StackOverflowError" not in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    # The batch at work when the signal came completed: Spark committed it, and its offsets are the
    # group's (checked before the restart commits further).
    assert batch in log_ids(checkpoint / "commits")
    committed = group_offsets(bootstrap, group, topic, PARTITIONS)

    restarted = StreamJob(spark, cfg, bootstrap, run_id="run-restarted").run(StopWhen(idle_s=5))

    ledger = read(spark, cfg, "ledger")
    stopped_run = ledger.where(F.col("run_id") == "run-stopped")
    last_id, last_offsets = last_completed_offsets(stopped_run)
    assert (last_id, last_offsets) == (batch, committed)
    (stop,) = stopped_run.where(F.col("event_type") == "RUN_STOPPED").collect()
    assert json.loads(stop.detail)["reason"] == "stop requested"
    restored = ledger.where(
        (F.col("run_id") == restarted.run_id) & (F.col("event_type") == "OFFSETS_RESTORED")
    )
    # The restart resumes exactly where the stopped run's last batch ended, and reads to the end.
    assert {r.partition: r.offset for r in restored.collect()} == last_offsets
    assert last_completed_offsets(ledger, restarted.run_id)[1] == {
        p: RECORDS // PARTITIONS for p in range(PARTITIONS)
    }
    sink = read(spark, cfg, "sink")
    assert sink.count() == RECORDS
    assert duplicated_sink_coordinates(sink) == []
