"""The reference streaming job on the real broker and real Spark/Delta.

Covers the job's guarantees (README, CONTRACTS.md section 4) end to end: every record in the sink
exactly once, a snapshot and a completion for every checkpoint, the group's committed offsets equal
to the last completed checkpoint, a hard kill and restart without duplicate sink or ledger rows,
a restart from the group's offsets after the checkpoint is gone, and `ledger-import` of the job's
own checkpoint adding nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app import cli
from app.errors import InfrastructureError
from app.reconcile.forensics.run import run_forensics
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.storage.tables import tables_from_config
from app.stream.job import StreamJob
from app.stream.ledger import event_key_column
from app.stream.startup import parse_initial_offsets
from tests.kafka.streaming import (
    create_topic,
    duplicated_sink_coordinates,
    group_offsets,
    job_config,
    last_completed_offsets,
    produce,
    read,
    until_all_read,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 3


def ledger_duplicates(spark: SparkSession, ledger_path: str) -> int:
    ledger = spark.read.format("delta").load(ledger_path)
    return ledger.groupBy(event_key_column().alias("k")).count().where("count > 1").count()


def test_job_writes_sink_once_ledger_per_checkpoint_and_commits_last_checkpoint(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic, group = f"orders-{unique}", f"job-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 900, PARTITIONS)
    cfg = job_config(tmp_path, bootstrap, topic, group, "orders-job", "stream.max_offsets_per_trigger=300")

    result = StreamJob(spark, cfg, bootstrap).run(until_all_read(bootstrap, topic, PARTITIONS))

    assert result.stop_reason == "every partition read up to its stop offset"
    sink = read(spark, cfg, "sink")
    assert sink.count() == 900
    assert result.input_rows == 900
    assert duplicated_sink_coordinates(sink) == []
    per_partition = {r[0]: r[1] for r in sink.groupBy("kafka_partition").count().collect()}
    assert per_partition == {0: 300, 1: 300, 2: 300}

    ledger = read(spark, cfg, "ledger").where(F.col("run_id") == result.run_id)
    kinds = {
        r.event_type: {r2.checkpoint_id for r2 in ledger.where(F.col("event_type") == r.event_type).collect()}
        for r in ledger.select("event_type").groupBy("event_type").count().collect()
    }
    assert result.batches >= 3  # 900 records, at most 300 per checkpoint
    assert kinds["CHECKPOINT_SNAPSHOT"] == kinds["CHECKPOINT_COMPLETED"] == set(range(result.batches))
    assert {"RUN_STARTED", "OFFSETS_RESTORED", "COMMIT_REQUESTED", "COMMIT_SUCCEEDED", "RUN_STOPPED"} <= set(
        kinds
    )

    last_id, last_offsets = last_completed_offsets(ledger)
    assert last_id == result.last_batch_id
    assert last_offsets == {0: 300, 1: 300, 2: 300}
    assert group_offsets(bootstrap, group, topic, PARTITIONS) == last_offsets
    assert result.failed_commits == 0
    assert ledger_duplicates(spark, tables_from_config(cfg).ledger) == 0


def test_hard_kill_and_restart_neither_duplicates_nor_loses(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic, group = f"kill-{unique}", f"kill-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 6000, PARTITIONS)
    extra = ["stream.max_offsets_per_trigger=300"]
    cfg = job_config(tmp_path, bootstrap, topic, group, "kill-job", *extra)

    cmd = [sys.executable, "-m", "app.cli", "stream", "--idle-seconds", "120", "--run-id", "run-killed"]
    for item in [
        f"paths.data_dir={tmp_path}",
        f"kafka.bootstrap_servers={bootstrap}",
        f"stream.topics=[{topic}]",
        f"stream.group_id={group}",
        "stream.job_name=kill-job",
        "stream.trigger_interval=1 second",
        *extra,
    ]:
        cmd += ["--set", item]  # fmt: skip
    log = (tmp_path / "killed.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    commits = tmp_path / "checkpoints" / "kill-job" / "commits"
    deadline = time.monotonic() + 240
    try:
        while len([n for n in os.listdir(commits) if n.isdigit()] if commits.exists() else []) < 3:
            assert proc.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the job did not complete 3 checkpoints in time"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole job, its Spark JVM included: a real crash
        proc.wait(30)
        log.close()

    restarted = StreamJob(spark, cfg, bootstrap, run_id="run-restarted").run(
        until_all_read(bootstrap, topic, PARTITIONS)
    )

    assert restarted.startup_mode == "checkpoint"
    sink = read(spark, cfg, "sink")
    assert duplicated_sink_coordinates(sink) == []
    assert sink.count() == 6000
    assert ledger_duplicates(spark, tables_from_config(cfg).ledger) == 0

    ledger = read(spark, cfg, "ledger")
    restored = ledger.where(
        (F.col("run_id") == "run-restarted") & (F.col("event_type") == "OFFSETS_RESTORED")
    )
    assert restarted.restored_checkpoint_id is not None
    last_done = ledger.where(
        (F.col("event_type") == "CHECKPOINT_COMPLETED")
        & (F.col("checkpoint_id") == restarted.restored_checkpoint_id)
    )
    before = {r.partition: r.offset for r in last_done.collect()}
    assert len(before) == PARTITIONS
    assert {r.partition: r.offset for r in restored.collect()} == before
    assert {
        r.detail for r in restored.select(F.get_json_object("detail", "$.source").alias("detail")).collect()
    } == {"checkpoint"}
    # Every checkpoint the killed run started is in the ledger, flushed or recovered.
    snap_ids = {r.checkpoint_id for r in ledger.where("event_type = 'CHECKPOINT_SNAPSHOT'").collect()}
    assert snap_ids == set(range(max(snap_ids) + 1))
    _, final = last_completed_offsets(ledger, "run-restarted")
    assert final == {0: 2000, 1: 2000, 2: 2000}
    assert group_offsets(bootstrap, group, topic, PARTITIONS) == final


def test_fresh_start_from_group_offsets_after_checkpoint_loss(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic, group = f"grp-{unique}", f"grp-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 300, PARTITIONS)
    cfg = job_config(tmp_path, bootstrap, topic, group, "grp-job", "stream.startup_mode=earliest")
    StreamJob(spark, cfg, bootstrap, run_id="run-1").run(until_all_read(bootstrap, topic, PARTITIONS))
    committed = group_offsets(bootstrap, group, topic, PARTITIONS)
    assert committed == {0: 100, 1: 100, 2: 100}

    subprocess.run(["rm", "-rf", str(tmp_path / "checkpoints" / "grp-job")], check=True)
    produce(bootstrap, topic, 60, PARTITIONS, start=300)
    cfg2 = job_config(tmp_path, bootstrap, topic, group, "grp-job", "stream.startup_mode=group")
    second = StreamJob(spark, cfg2, bootstrap, run_id="run-2").run(
        until_all_read(bootstrap, topic, PARTITIONS)
    )

    assert second.startup_mode == "group"
    ledger = read(spark, cfg2, "ledger").where(F.col("run_id") == "run-2")
    restored = ledger.where(F.col("event_type") == "OFFSETS_RESTORED").select(
        "partition", "offset", F.get_json_object("detail", "$.source").alias("source")
    )
    assert {(r.partition, r.offset, r.source) for r in restored.collect()} == {
        (p, committed[p], "group") for p in range(PARTITIONS)
    }
    sink = read(spark, cfg2, "sink")
    assert sink.count() == 360
    assert duplicated_sink_coordinates(sink) == []
    assert sink.where(F.col("_run_id") == "run-2").count() == 60
    assert group_offsets(bootstrap, group, topic, PARTITIONS) == {0: 120, 1: 120, 2: 120}


def test_ledger_import_of_the_reference_jobs_checkpoint_adds_nothing(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """The reference job writes its batches as an attached query does and names its query in
    RUN_STARTED, so an import of its checkpoint recognises every run of it and adds no row."""
    topic, group = f"imp-{unique}", f"imp-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 300, PARTITIONS)
    cfg = job_config(tmp_path, bootstrap, topic, group, "imp-job", "stream.max_offsets_per_trigger=150")
    StreamJob(spark, cfg, bootstrap, run_id="run-1").run(until_all_read(bootstrap, topic, PARTITIONS))
    produce(bootstrap, topic, 60, PARTITIONS, start=300)
    second = StreamJob(spark, cfg, bootstrap, run_id="run-2").run(
        until_all_read(bootstrap, topic, PARTITIONS)
    )
    assert second.startup_mode == "checkpoint"  # two runs of one query
    ledger_path = tables_from_config(cfg).ledger
    before = DeltaTable(ledger_path)
    rows_before, version_before = before.to_pyarrow_table().num_rows, before.version()
    query_id = json.loads((tmp_path / "checkpoints" / "imp-job" / "metadata").read_text())["id"]
    starts = read(spark, cfg, "ledger").where(F.col("event_type") == "RUN_STARTED")
    assert {(r.run_id, json.loads(r.detail)["query_id"]) for r in starts.collect()} == {
        ("run-1", query_id),
        ("run-2", query_id),
    }

    code = cli.main(
        [
            "ledger-import",
            "--checkpoint",
            str(tmp_path / "checkpoints" / "imp-job"),
            "--job",
            "imp-job",
            "--ledger",
            ledger_path,
            "--set",
            f"paths.data_dir={tmp_path}",
        ]
    )

    assert code == 0
    after = DeltaTable(ledger_path)
    assert (after.to_pyarrow_table().num_rows, after.version()) == (rows_before, version_before)


class _DiesInItsFirstCheckpoint(StreamJob):
    """Fails batch 0 after Spark wrote `offsets/0` and `sources/0/0` and before `commits/0`: the
    checkpoint a process killed at that moment leaves, and, like a killed run, no RUN_STOPPED."""

    def _write_sink(self, batch_df: DataFrame, batch_id: int) -> None:
        raise RuntimeError("the process dies between offsets/0 and commits/0")


def test_restart_after_a_crash_in_the_first_checkpoint_records_where_it_resumes(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic, group = f"first-{unique}", f"first-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 90, PARTITIONS)  # offsets 0..29 per partition
    starts = {p: 5 + p for p in range(PARTITIONS)}  # neither earliest nor latest: only the checkpoint knows
    specific = [f"stream.specific_offsets.{topic}:{p}={o}" for p, o in starts.items()]
    cfg = job_config(
        tmp_path, bootstrap, topic, group, "first-job", "stream.startup_mode=specific", *specific
    )

    with pytest.raises(InfrastructureError, match="streaming query failed"):
        _DiesInItsFirstCheckpoint(spark, cfg, bootstrap, run_id="run-died").run(
            until_all_read(bootstrap, topic, PARTITIONS)
        )
    checkpoint = tmp_path / "checkpoints" / "first-job"
    assert (checkpoint / "offsets" / "0").exists()
    assert not (checkpoint / "commits" / "0").exists()
    # The file the restart reads its start from, in Spark's own format.
    initial = parse_initial_offsets((checkpoint / "sources" / "0" / "0").read_text())
    assert initial == {(topic, p): o for p, o in starts.items()}

    produce(bootstrap, topic, 30, PARTITIONS, start=90)  # the log moves on while the job is down
    restarted = StreamJob(spark, cfg, bootstrap, run_id="run-restarted").run(
        until_all_read(bootstrap, topic, PARTITIONS)
    )

    assert restarted.startup_mode == "checkpoint"
    assert restarted.restored_checkpoint_id is None  # no checkpoint had completed
    ledger = read(spark, cfg, "ledger").where(F.col("run_id") == "run-restarted")
    restored = ledger.where(F.col("event_type") == "OFFSETS_RESTORED").select(
        "topic",
        "partition",
        "offset",
        F.get_json_object("detail", "$.source").alias("source"),
    )
    assert sorted(tuple(r) for r in restored.collect()) == [
        (topic, p, o, "checkpoint") for p, o in sorted(starts.items())
    ]
    (started,) = ledger.where(F.col("event_type") == "RUN_STARTED").collect()
    detail = json.loads(started.detail)
    assert (detail["startup_mode"], detail["restored_checkpoint_id"]) == ("checkpoint", None)
    # Spark really replayed batch 0 from there: the sink starts at the recorded offsets.
    sink = read(spark, cfg, "sink")
    assert duplicated_sink_coordinates(sink) == []
    first = sink.groupBy("kafka_partition").agg(F.min("kafka_offset"), F.count("*")).collect()
    assert {(r[0], r[1], r[2]) for r in first} == {(p, o, 40 - o) for p, o in starts.items()}

    # The audit of these tables: the restart is classified (exact, from the checkpoint, at the
    # offsets the killed run started from), batch 0 planned by the killed run and completed by its
    # successor is consistent, and the crash is an UNCLEAN_STOP at info, nothing at warn or above.
    now = datetime.now(UTC)
    restarts = run_forensics(spark, cfg, AuditRun(run_id="fx-first", now=now)).restarts
    assert sorted(
        (
            r["run_id"],
            r["partition"],
            r["classification"],
            r["resume_source"],
            r["previous_checkpoint_offset"],
        )
        for r in restarts
    ) == [("run-restarted", p, "exact", "checkpoint", o) for p, o in sorted(starts.items())]
    run_reconcile(spark, cfg, AuditRun(run_id="rec-first", now=now))
    findings = read(spark, cfg, "findings").collect()
    assert [(f.finding_type, f.severity, f.run_id) for f in findings] == [
        ("UNCLEAN_STOP", "info", "run-died")
    ]
    assert json.loads(findings[0].evidence)["next_run_id"] == "run-restarted"
