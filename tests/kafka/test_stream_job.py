"""The reference streaming job on the real broker and real Spark/Delta.

Covers the job's guarantees (README, CONTRACTS.md section 4) end to end. One job lives one life
per module (`life`), and each test asserts one claim on what a phase of it left:

1. a first run reads 900 records (300 a checkpoint): every record in the sink exactly once, a
   snapshot and a completion for every checkpoint, the group's offsets those of the last one;
2. a second run of the same query after 60 more: `ledger-import` of its checkpoint adds nothing;
3. a run as its own process (the `stream` command) killed with SIGKILL after three checkpoints, and
   a restart: nothing duplicated, nothing lost, the restart restores the last completed checkpoint;
4. its checkpoint deleted and 60 more: a start from the group's committed offsets.

The tables are read as each phase left them (Delta time travel), so a later phase cannot change
what an earlier claim sees. A crash inside the very first checkpoint needs a job of its own and is
the last test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app import cli
from app.config import AppConfig
from app.errors import InfrastructureError
from app.reconcile.forensics.run import run_forensics
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.storage.tables import tables_from_config
from app.stream.job import StreamJob, StreamResult
from app.stream.ledger import event_key_column
from app.stream.startup import parse_initial_offsets
from tests.kafka.processes import cli as cli_argv
from tests.kafka.processes import wait_for
from tests.support.config import set_options
from tests.support.streaming import (
    create_topic,
    duplicated_sink_coordinates,
    group_offsets,
    job_config,
    produce,
    read,
    until_all_read,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 3
JOB = "orders-job"
PER_CHECKPOINT = 300
FIRST, SECOND, KILLED, REGROUPED = 900, 60, 6000, 60  # records produced before each phase
# The in-process runs read records produced beforehand and stop on offsets, so their trigger only
# paces them; the killed run keeps the 1 s trigger so that the kill lands between checkpoints.
IN_PROCESS = ("stream.trigger_interval=100 milliseconds", f"stream.max_offsets_per_trigger={PER_CHECKPOINT}")
KILL_WAIT_S = 240


@dataclass(frozen=True)
class Phase:
    """What one run left: its result, the tables' versions after it, the group's offsets."""

    result: StreamResult
    ledger_version: int
    sink_version: int
    group: dict[int, int]


@dataclass(frozen=True)
class Life:
    cfg: AppConfig
    topic: str
    checkpoint: Path
    first: Phase
    second: Phase
    restarted: Phase
    regrouped: Phase
    query_id: str  # the first checkpoint's query, from its metadata file
    import_code: int
    ledger_before_import: tuple[int, int]  # (rows, version)
    ledger_after_import: tuple[int, int]


def ledger_state(path: str) -> tuple[int, int]:
    table = DeltaTable(path)
    return table.to_pyarrow_table().num_rows, table.version()


def run_phase(spark: SparkSession, cfg: AppConfig, bootstrap: str, run_id: str) -> Phase:
    topic = cfg.stream.topics[0]
    result = StreamJob(spark, cfg, bootstrap, run_id=run_id).run(until_all_read(bootstrap, topic, PARTITIONS))
    tables = tables_from_config(cfg)
    return Phase(
        result,
        DeltaTable(tables.ledger).version(),
        DeltaTable(tables.sink).version(),
        group_offsets(bootstrap, cfg.stream.group_id, topic, PARTITIONS),
    )


def completed_checkpoints(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return len([n for n in commits.iterdir() if n.name.isdigit()]) if commits.exists() else 0


def kill_after_three_checkpoints(data_dir: Path, cfg: AppConfig, checkpoint: Path) -> None:
    """The `stream` command as its own process, killed with SIGKILL (its Spark JVM included: a real
    crash) once it completed three checkpoints of its own."""
    scfg = cfg.stream
    argv = cli_argv(
        "stream",
        data_dir,
        f"kafka.bootstrap_servers={cfg.kafka.bootstrap_servers}",
        f"stream.topics=[{scfg.topics[0]}]",
        f"stream.group_id={scfg.group_id}",
        f"stream.job_name={scfg.job_name}",
        "stream.trigger_interval=1 second",
        f"stream.max_offsets_per_trigger={PER_CHECKPOINT}",
        args=("--idle-seconds", "120", "--run-id", "run-killed"),
    )
    before = completed_checkpoints(checkpoint)
    log_path = data_dir / "killed.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def three_more() -> bool | None:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            return True if completed_checkpoints(checkpoint) >= before + 3 else None

        try:
            wait_for(three_more, KILL_WAIT_S, "the job to complete 3 checkpoints", step_s=0.2)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


@pytest.fixture(scope="module")
def life(spark: SparkSession, bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Life:
    unique = uuid.uuid4().hex[:10]
    data_dir = tmp_path_factory.mktemp("reference-job")
    topic, group = f"orders-{unique}", f"job-{unique}"
    checkpoint = data_dir / "checkpoints" / JOB
    create_topic(bootstrap, topic, PARTITIONS)
    cfg = job_config(data_dir, bootstrap, topic, group, JOB, *IN_PROCESS)
    ledger_path = tables_from_config(cfg).ledger

    produce(bootstrap, topic, FIRST, PARTITIONS)
    first = run_phase(spark, cfg, bootstrap, "run-1")
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]

    produce(bootstrap, topic, SECOND, PARTITIONS, start=FIRST)
    second = run_phase(spark, cfg, bootstrap, "run-2")
    before_import = ledger_state(ledger_path)
    import_code = cli.main(
        [
            "ledger-import",
            "--checkpoint",
            str(checkpoint),
            "--job",
            JOB,
            "--ledger",
            ledger_path,
            *set_options(data_dir=data_dir),
        ]
    )
    after_import = ledger_state(ledger_path)

    produce(bootstrap, topic, KILLED, PARTITIONS, start=FIRST + SECOND)
    kill_after_three_checkpoints(data_dir, cfg, checkpoint)
    # The rest in as few checkpoints as it takes: how many is not what this phase is about.
    unlimited = job_config(
        data_dir, bootstrap, topic, group, JOB, *IN_PROCESS, "stream.max_offsets_per_trigger=0"
    )
    restarted = run_phase(spark, unlimited, bootstrap, "run-restarted")

    shutil.rmtree(checkpoint)
    produce(bootstrap, topic, REGROUPED, PARTITIONS, start=FIRST + SECOND + KILLED)
    regrouped_cfg = job_config(
        data_dir, bootstrap, topic, group, JOB, *IN_PROCESS, "stream.startup_mode=group"
    )
    regrouped = run_phase(spark, regrouped_cfg, bootstrap, "run-group")

    return Life(
        cfg,
        topic,
        checkpoint,
        first,
        second,
        restarted,
        regrouped,
        query_id,
        import_code,
        before_import,
        after_import,
    )


def rows_after(life: Life, table: str, phase: Phase, *columns: str) -> list[dict[str, Any]]:
    """``table`` as ``phase`` left it, read with delta-rs: these claims need rows, not a Spark job."""
    version = phase.ledger_version if table == "ledger" else phase.sink_version
    read_table = DeltaTable(tables_from_config(life.cfg).named(table), version=version)
    rows: list[dict[str, Any]] = read_table.to_pyarrow_table(columns=list(columns) or None).to_pylist()
    return rows


def ledger_after(life: Life, phase: Phase) -> list[dict[str, Any]]:
    return rows_after(life, "ledger", phase)


def coordinates(sink: list[dict[str, Any]]) -> Counter[tuple[int, int]]:
    return Counter((r["kafka_partition"], r["kafka_offset"]) for r in sink)


def sink_after(life: Life, phase: Phase) -> list[dict[str, Any]]:
    return rows_after(life, "sink", phase, "kafka_partition", "kafka_offset", "_run_id")


def events(ledger: list[dict[str, Any]], event_type: str, run_id: str | None = None) -> list[dict[str, Any]]:
    return [r for r in ledger if r["event_type"] == event_type and run_id in (None, r["run_id"])]


def completed_offsets(ledger: list[dict[str, Any]], checkpoint_id: int) -> dict[int, int]:
    done = events(ledger, "CHECKPOINT_COMPLETED")
    return {r["partition"]: r["offset"] for r in done if r["checkpoint_id"] == checkpoint_id}


def last_completed(ledger: list[dict[str, Any]], run_id: str) -> tuple[int, dict[int, int]]:
    last = max(r["checkpoint_id"] for r in events(ledger, "CHECKPOINT_COMPLETED", run_id))
    return last, completed_offsets(ledger, last)


def restored(ledger: list[dict[str, Any]], run_id: str) -> set[tuple[int, int, str]]:
    """(partition, offset, source) of the run's OFFSETS_RESTORED events."""
    return {
        (r["partition"], r["offset"], json.loads(r["detail"])["source"])
        for r in events(ledger, "OFFSETS_RESTORED", run_id)
    }


def per_partition(total: int) -> dict[int, int]:
    return {p: total // PARTITIONS for p in range(PARTITIONS)}


# --- 1. a first run of 900 records ---------------------------------------------------------------


def test_first_run_stops_once_every_record_is_read(life: Life) -> None:
    result = life.first.result
    assert (result.stop_reason, result.input_rows) == ("every partition read up to its stop offset", FIRST)


def test_first_run_writes_every_record_to_the_sink_once(life: Life) -> None:
    found = coordinates(sink_after(life, life.first))
    assert sum(found.values()) == FIRST
    assert [c for c, n in found.items() if n > 1] == []
    assert dict(Counter(p for p, _ in found)) == per_partition(FIRST)


def test_first_run_records_a_snapshot_and_a_completion_for_every_checkpoint(life: Life) -> None:
    result = life.first.result
    kinds: dict[str, set[int]] = {}
    for r in ledger_after(life, life.first):
        if r["run_id"] == "run-1":
            kinds.setdefault(r["event_type"], set()).add(r["checkpoint_id"])
    assert result.batches >= FIRST // PER_CHECKPOINT  # at most 300 records per checkpoint
    assert kinds["CHECKPOINT_SNAPSHOT"] == kinds["CHECKPOINT_COMPLETED"] == set(range(result.batches))
    assert {"RUN_STARTED", "OFFSETS_RESTORED", "COMMIT_REQUESTED", "COMMIT_SUCCEEDED", "RUN_STOPPED"} <= set(
        kinds
    )


def test_first_run_commits_the_last_completed_checkpoint_to_the_group(life: Life) -> None:
    result = life.first.result
    last_id, last_offsets = last_completed(ledger_after(life, life.first), "run-1")
    assert last_id == result.last_batch_id
    assert last_offsets == per_partition(FIRST)
    assert life.first.group == last_offsets
    assert result.failed_commits == 0


@pytest.mark.parametrize("phase", ["first", "second", "restarted", "regrouped"])
def test_the_ledger_never_holds_an_event_twice(spark: SparkSession, life: Life, phase: str) -> None:
    version = getattr(life, phase).ledger_version
    ledger = (
        spark.read.format("delta").option("versionAsOf", version).load(tables_from_config(life.cfg).ledger)
    )
    assert ledger.groupBy(event_key_column().alias("k")).count().where("count > 1").count() == 0


# --- 2. a second run of the same query; ledger-import of its checkpoint ---------------------------


def test_second_run_resumes_from_the_checkpoint(life: Life) -> None:
    assert life.second.result.startup_mode == "checkpoint"


def test_both_runs_name_the_checkpoints_query_in_run_started(life: Life) -> None:
    """The reference job names its query in RUN_STARTED, as an attached query does."""
    starts = events(ledger_after(life, life.second), "RUN_STARTED")
    assert {(r["run_id"], json.loads(r["detail"])["query_id"]) for r in starts} == {
        ("run-1", life.query_id),
        ("run-2", life.query_id),
    }


def test_ledger_import_of_the_reference_jobs_checkpoint_adds_nothing(life: Life) -> None:
    """An import recognises every run of the reference job's query and adds no row, no version."""
    assert life.import_code == 0
    assert life.ledger_after_import == life.ledger_before_import


# --- 3. a run killed with SIGKILL, then restarted ------------------------------------------------

UP_TO_KILLED = FIRST + SECOND + KILLED


def test_restart_after_a_hard_kill_resumes_from_the_checkpoint(life: Life) -> None:
    assert life.restarted.result.startup_mode == "checkpoint"
    assert life.restarted.result.restored_checkpoint_id is not None


def test_restart_after_a_hard_kill_neither_duplicates_nor_loses(life: Life) -> None:
    found = coordinates(sink_after(life, life.restarted))
    assert [c for c, n in found.items() if n > 1] == []
    assert set(found) == {(p, o) for p in range(PARTITIONS) for o in range(UP_TO_KILLED // PARTITIONS)}


def test_restart_restores_the_offsets_of_the_last_completed_checkpoint(life: Life) -> None:
    ledger = ledger_after(life, life.restarted)
    restored_id = life.restarted.result.restored_checkpoint_id
    assert restored_id is not None
    before = completed_offsets(ledger, restored_id)
    assert len(before) == PARTITIONS
    assert restored(ledger, "run-restarted") == {(p, o, "checkpoint") for p, o in before.items()}


def test_every_checkpoint_the_killed_run_started_is_in_the_ledger(life: Life) -> None:
    """Flushed by the killed run or recovered by its successor: no checkpoint id is missing."""
    ledger = ledger_after(life, life.restarted)
    assert events(ledger, "RUN_STARTED", "run-killed")  # the killed run was there
    snap_ids = {r["checkpoint_id"] for r in events(ledger, "CHECKPOINT_SNAPSHOT")}
    assert snap_ids == set(range(max(snap_ids) + 1))


def test_restart_reads_to_the_end_and_commits_it_to_the_group(life: Life) -> None:
    _, final = last_completed(ledger_after(life, life.restarted), "run-restarted")
    assert final == per_partition(UP_TO_KILLED)
    assert life.restarted.group == final


# --- 4. the checkpoint deleted: a start from the group's offsets -------------------------------


def test_start_after_checkpoint_loss_is_from_the_group(life: Life) -> None:
    assert life.regrouped.result.startup_mode == "group"


def test_start_after_checkpoint_loss_restores_the_groups_committed_offsets(life: Life) -> None:
    committed = life.restarted.group
    assert restored(ledger_after(life, life.regrouped), "run-group") == {
        (p, committed[p], "group") for p in range(PARTITIONS)
    }


def test_start_after_checkpoint_loss_reads_only_what_is_new(life: Life) -> None:
    sink = sink_after(life, life.regrouped)
    found = coordinates(sink)
    assert sum(found.values()) == UP_TO_KILLED + REGROUPED
    assert [c for c, n in found.items() if n > 1] == []
    assert len([r for r in sink if r["_run_id"] == "run-group"]) == REGROUPED
    assert life.regrouped.group == per_partition(UP_TO_KILLED + REGROUPED)


# --- a crash inside the first checkpoint (a job of its own) --------------------------------------


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
