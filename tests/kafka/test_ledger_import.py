"""`offset-audit ledger-import` over the checkpoint of a user's own query (real broker, Spark and
Delta): it rebuilds what attaching the query recorded, and never writes anything twice; with the
query's Delta sink (`--sink`) it names each batch's sink commit and counts what the sink holds.

One attached run of job (a) is shared by the module; the last test deletes its checkpoint."""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app import cli
from app.audit import attach
from app.contracts.offsets import TopicPartitionKey
from tests.kafka.user_jobs import (
    PARTITIONS,
    QUERY_TIMEOUT_S,
    checkpoint_batches,
    duplicate_keys,
    events_by_batch,
    kafka,
    payments_query,
    produce_payments,
    run_events,
    run_to_end,
)
from tests.support.config import set_options
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka

SNAPSHOT, COMPLETED = "CHECKPOINT_SNAPSHOT", "CHECKPOINT_COMPLETED"


def import_checkpoint(checkpoint: Path, ledger: Path, tmp_path: Path, *extra: str) -> int:
    return cli.main(
        [
            "ledger-import",
            "--checkpoint",
            str(checkpoint),
            "--job",
            "payments",
            "--ledger",
            str(ledger),
            *set_options(data_dir=tmp_path / "data"),
            *extra,
        ]
    )


def import_json(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, ledger: Path, tmp_path: Path, *extra: str
) -> dict[str, Any]:
    """An import with --json that must succeed; its summary."""
    capsys.readouterr()
    assert import_checkpoint(checkpoint, ledger, tmp_path, "--json", *extra) == 0
    summary: dict[str, Any] = json.loads(capsys.readouterr().out)
    return summary


def sink_commits(sink: Path, app_id: str) -> dict[int, tuple[list[int], datetime]]:
    """batch -> (the sink versions carrying its txn, the first one's commit time), read from the
    sink's commit files as a user would."""
    out: dict[int, tuple[list[int], datetime]] = {}
    for path in sorted((sink / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        for txn in (a["txn"] for a in actions if "txn" in a):
            if txn["appId"] == app_id:
                versions, first = out.get(txn["version"], ([], None))
                when = datetime.fromtimestamp(info["timestamp"] / 1000, UTC)
                out[txn["version"]] = ([*versions, int(path.stem)], first or when)
    return out


@dataclass(frozen=True)
class AttachedRun:
    """Job (a) attached and run once over 100 payments: three batches."""

    topic: str
    checkpoint: Path
    sink: Path
    ledger: Path
    query: StreamingQuery
    batches: dict[int, dict[TopicPartitionKey, int]]


@pytest.fixture(scope="module")
def attached_run(
    spark: SparkSession, bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> AttachedRun:
    root = tmp_path_factory.mktemp("attached")
    topic = f"pay-i-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, 100)
    checkpoint, sink, ledger = root / "cp", root / "payments", root / "attached-ledger"
    query = payments_query(kafka(spark, bootstrap, "subscribe", topic), checkpoint, sink)
    audit = attach(query, job_name="payments", ledger=str(ledger))
    run_to_end(query, audit)
    batches = checkpoint_batches(checkpoint)
    assert len(batches) == 3  # 50 records a partition, at most 40 a batch
    return AttachedRun(topic, checkpoint, sink, ledger, query, batches)


def test_import_with_the_sink_names_each_batchs_sink_commit_and_counts_what_it_holds(
    spark: SparkSession, attached_run: AttachedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, ledger = attached_run, tmp_path / "ledger"
    query_id = str(run.query.id)
    commits = sink_commits(run.sink, query_id)
    assert sorted(commits) == sorted(run.batches)  # Spark's Delta sink: one commit a batch

    summary = import_json(capsys, run.checkpoint, ledger, tmp_path, "--sink", str(run.sink))
    assert {k: summary[k] for k in ("sink", "sink_app_id", "sink_holds", "sink_lacks")} == {
        "sink": str(run.sink),
        "sink_app_id": query_id,
        "sink_holds": 3,
        "sink_lacks": 0,
    }
    assert (summary["sink_unverifiable"], summary["sink_log_first_version"]) == (0, 0)
    assert summary["oldest_verifiable_batch"] == 0  # a log never cleaned checks every batch
    imported = read(spark, ledger)
    [started] = run_events(imported, "RUN_STARTED")
    assert {k: json.loads(started.detail)[k] for k in ("sink", "sink_app_id")} == {
        "sink": str(run.sink),
        "sink_app_id": query_id,
    }
    completions = run_events(imported, COMPLETED)
    assert len(completions) == 3 * PARTITIONS
    for r in completions:
        detail = json.loads(r.detail)
        versions, committed_at = commits[r.checkpoint_id]
        assert (detail["sink_versions"], detail["sink_status"]) == (versions, "held")
        assert datetime.fromisoformat(detail["sink_committed_at"]) == committed_at
    # The sink's evidence rides along: the batches themselves are the checkpoint's, as without it.
    assert events_by_batch(imported, COMPLETED) == run.batches

    # Again: nothing new, and nothing imported now for the sink to hold.
    before = state(ledger)
    again = import_json(capsys, run.checkpoint, ledger, tmp_path, "--sink", str(run.sink))
    assert state(ledger) == before
    assert (again["events_written"], again["sink_holds"], again["sink_lacks"]) == (0, 0, 0)

    # The sink taken back to before batch 2: the import says the sink lacks it (reconcile names it).
    lost = commits[2][0][0]
    spark.sql(f"RESTORE TABLE delta.`{run.sink}` TO VERSION AS OF {lost - 1}")
    damaged = import_json(capsys, run.checkpoint, tmp_path / "ledger-2", tmp_path, "--sink", str(run.sink))
    assert (damaged["sink_holds"], damaged["sink_lacks"]) == (2, 1)
    statuses = {
        r.checkpoint_id: json.loads(r.detail)["sink_status"]
        for r in run_events(read(spark, tmp_path / "ledger-2"), COMPLETED)
    }
    assert statuses == {0: "held", 1: "held", 2: "lacked"}


def test_a_sink_without_the_querys_commits_exits_2_and_writes_nothing(
    attached_run: AttachedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, ledger = attached_run, tmp_path / "ledger"
    query_id = str(run.query.id)
    cases = [
        # another Delta table (the attached run's ledger: commits under other app ids)
        (["--sink", str(run.ledger)], f"--sink {run.ledger}: .*no commit of app id {query_id}"),
        # the right sink under a foreachBatch's app id it never wrote
        (
            ["--sink", str(run.sink), "--sink-app-id", "payments-upsert"],
            "no commit of app id payments-upsert",
        ),
        # no Delta table at all
        (["--sink", str(tmp_path / "nowhere")], f"--sink {tmp_path / 'nowhere'}: no Delta table there"),
    ]
    for extra, message in cases:
        capsys.readouterr()
        assert import_checkpoint(run.checkpoint, ledger, tmp_path, *extra) == 2
        assert re.search(message, capsys.readouterr().err), extra
        assert not ledger.exists()  # checked before anything is written


def read(spark: SparkSession, ledger: Path) -> DataFrame:
    return spark.read.format("delta").load(str(ledger))


def state(ledger: Path) -> tuple[int, int]:
    """The ledger's row count and Delta version."""
    table = DeltaTable(str(ledger))
    return table.to_pyarrow_table().num_rows, table.version()


def restored(ledger: DataFrame, run_id: str) -> dict[TopicPartitionKey, int]:
    rows = ledger.where((F.col("event_type") == "OFFSETS_RESTORED") & (F.col("run_id") == run_id))
    return {(r.topic, r.partition): r.offset for r in rows.collect()}


def process_to(query: StreamingQuery, checkpoint: Path, ends: dict[TopicPartitionKey, int]) -> None:
    """Until the query committed a batch ending at ``ends``. `processAllAvailable` can return after
    a trigger that looked just before the last records arrived, so the checkpoint is the judge."""
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    while not any(o == ends for o in checkpoint_batches(checkpoint).values()):
        assert time.monotonic() < deadline, f"the query did not reach {ends} in time"
        assert query.exception() is None
        query.processAllAvailable()


def test_import_rebuilds_the_attached_runs_batches_and_writes_nothing_twice(
    spark: SparkSession, bootstrap: str, attached_run: AttachedRun, tmp_path: Path
) -> None:
    """Last in the module: it deletes the shared run's checkpoint."""
    topic, checkpoint, sink, query = (
        attached_run.topic,
        attached_run.checkpoint,
        attached_run.sink,
        attached_run.query,
    )
    attached_ledger, imported_ledger = attached_run.ledger, tmp_path / "imported-ledger"
    batches = attached_run.batches

    # Into an empty ledger: the attached run's snapshots and completions, as the imported run's.
    assert import_checkpoint(checkpoint, imported_ledger, tmp_path) == 0
    attached, imported = read(spark, attached_ledger), read(spark, imported_ledger)
    for event_type in (SNAPSHOT, COMPLETED):
        assert events_by_batch(imported, event_type) == events_by_batch(attached, event_type) == batches
    query_id = str(query.id)
    assert {r.run_id for r in imported.collect()} == {query_id}
    assert all(json.loads(r.detail)["imported"] for r in imported.collect())
    [started] = run_events(imported, "RUN_STARTED")
    assert json.loads(started.detail)["query_id"] == query_id
    assert (
        restored(imported, query_id) == restored(attached, str(query.runId)) == dict.fromkeys(batches[0], 0)
    )
    assert duplicate_keys(imported) == 0

    # Again: nothing new, not even an empty Delta commit.
    before = state(imported_ledger)
    assert import_checkpoint(checkpoint, imported_ledger, tmp_path) == 0
    assert state(imported_ledger) == before

    # Into the ledger the attached run wrote: it holds all of it already.
    before = state(attached_ledger)
    assert import_checkpoint(checkpoint, attached_ledger, tmp_path) == 0
    assert state(attached_ledger) == before

    # The checkpoint deleted and the job started again from latest: a new query, a new run.
    shutil.rmtree(checkpoint)
    raw = kafka(spark, bootstrap, "subscribe", topic, starting="latest")
    second = payments_query(raw, checkpoint, sink, trigger={"processingTime": "1 second"})
    try:
        second.processAllAvailable()  # its sources resolved `latest`: the end of the first 100
        produce_payments(bootstrap, topic, 20, start=100)
        ends = {(topic, p): 60 for p in range(PARTITIONS)}
        process_to(second, checkpoint, ends)
    finally:
        second.stop()

    assert import_checkpoint(checkpoint, imported_ledger, tmp_path) == 0
    ledger = read(spark, imported_ledger)
    run_id = str(second.id)
    assert run_id != query_id
    assert {r.run_id for r in run_events(ledger, "RUN_STARTED")} == {query_id, run_id}
    assert restored(ledger, run_id) == batches[max(batches)]  # where `latest` was: no gap, no replay
    new_batches = checkpoint_batches(checkpoint)
    completed = ledger.where((F.col("event_type") == COMPLETED) & (F.col("run_id") == run_id))
    assert events_by_batch(completed, COMPLETED) == new_batches
    assert ends in new_batches.values()
    assert duplicate_keys(ledger) == 0
