"""A real Flink job's Iceberg sink, audited: Flink 1.20 (a MiniCluster JVM, the `KafkaSource`) appends
every record with its topic, partition and offset through Iceberg's `FlinkSink` (its
`IcebergFilesCommitter` commits a snapshot per checkpoint with data) to a Hadoop catalog's table, on
the real broker, `flink-watch` following the job; `reconcile` judges it in sink mode
`iceberg_snapshots`, the table addressed by its path.

One scenario, asserted several ways (each Flink process costs tens of seconds). The job checkpoints
when the test triggers it (REST), so what each checkpoint holds is known; 2 partitions:

- job A reads offsets 0..99 of each partition, checkpoints and is killed with SIGKILL; B restores
  from A's latest checkpoint, reads 100..149 and checkpoints, takes a savepoint, reads 150..199 and
  checkpoints, and is cancelled: nothing at warn or above, every offset in the table once, and every
  checkpoint with data committed by a snapshot of its own Flink job;
- C restores from the older savepoint and reads 150..199 again: Iceberg's committer skips the
  checkpoint ids B had committed and commits C's re-read with its next checkpoint, under C's job id.
  C's checkpoint holding the re-read is BATCH_WRITTEN_TWICE, naming B's snapshot and C's: the very
  snapshots that added the table's two copies of those offsets;
- the table rolled back to before C's snapshot (`rollback_to_snapshot`): C's checkpoint is lost
  (BATCH_NOT_IN_SINK, critical), naming C's snapshot and the one the table went back to.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row, SparkSession

from app.config import AppConfig, IcebergCatalogConfig
from app.contracts import vocabulary as vocab
from app.runtime.spark import catalog_conf
from app.storage.iceberg import FLINK_JOB_ID, FLINK_MAX_CHECKPOINT, IcebergTableRef, read_snapshot_log
from tests.flink.harness import ICEBERG_STACK, FlinkJob, FlinkStack, JobSpec, wait_for
from tests.flink.watching import (
    LEDGER_WAIT_S,
    audit_config,
    evidence,
    reconcile_findings,
    restart_on_same_port,
    serious,
    start_sidecar,
    stop_sidecar,
    wait_recorded,
)
from tests.support.streaming import create_topic, produce

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.spark]

JOB = "flink-iceberg-orders"
PARTITIONS = 2
CATALOG = "flinkwh"  # Spark's name for the Hadoop catalog, for the ground truth and the rollback
NAMESPACE, TABLE = "db", "orders"
# No periodic checkpoint in the test's time (Flink starts the schedule at a random delay below the
# interval): the test triggers each one.
TEN_DAYS_MS = 10 * 24 * 3600 * 1000

# (Flink job id, max committed checkpoint id) -> (snapshot id, records it added)
Snapshots = dict[tuple[str, int], tuple[int, int]]


@dataclass
class Story:
    first: str  # the Flink job ids of A, B and C
    second: str
    third: str
    data_checkpoints: dict[str, list[int]]  # Flink job id -> its checkpoints that read records
    replayed_checkpoint: int  # C's checkpoint holding the re-read offsets
    replay_committed_with: int  # the checkpoint whose commit made C's snapshot (its max committed id)
    clean: list[Row]
    clean_rows: Counter[tuple[int, int]]  # (partition, offset) -> copies in the table
    clean_snapshots: Snapshots
    replayed: list[Row]
    replayed_rows: Counter[tuple[int, int]]
    added_by: dict[tuple[int, int], list[int]]  # (partition, offset) -> the snapshots that added it
    rolled: list[Row]
    rolled_back: int  # C's snapshot, taken out by the rollback
    rolled_back_to: int


def flink_snapshots(cfg: AppConfig, table_dir: Path) -> Snapshots:
    """The table's snapshots that Flink's committer made and that are in its current history."""
    log = read_snapshot_log(cfg.storage, IcebergTableRef(str(table_dir), cfg.iceberg))
    if log is None:
        return {}
    return {
        (s.summary[FLINK_JOB_ID], int(s.summary[FLINK_MAX_CHECKPOINT])): (s.snapshot_id, s.added_records())
        for s in log.snapshots
        if FLINK_JOB_ID in s.summary and s.snapshot_id in log.ancestry
    }


def wait_committed(cfg: AppConfig, table_dir: Path, job_id: str, records: int) -> Snapshots:
    """Until the snapshots of ``job_id`` added ``records`` in all (Flink commits a checkpoint's files
    once it completed, asynchronously)."""

    def probe() -> Snapshots | None:
        found = flink_snapshots(cfg, table_dir)
        mine = [n for (job, _), (_, n) in found.items() if job == job_id]
        return found if sum(mine) >= records else None

    return wait_for(probe, LEDGER_WAIT_S, f"{records} records committed by {job_id}", 0.5)


def table_rows(spark: SparkSession, table: str) -> Counter[tuple[int, int]]:
    rows = spark.sql(f"SELECT `partition`, `offset` FROM {table}").collect()
    return Counter((r["partition"], r["offset"]) for r in rows)


def snapshots_adding(spark: SparkSession, table: str) -> dict[tuple[int, int], list[int]]:
    """(partition, offset) -> the snapshots whose data files hold it, read from the manifests."""
    rows = spark.sql(
        f"SELECT t.`partition`, t.`offset`, e.snapshot_id FROM {table} t "
        f"JOIN {table}.entries e ON t._file = e.data_file.file_path"
    ).collect()
    out: dict[tuple[int, int], list[int]] = defaultdict(list)
    for r in rows:
        out[(r["partition"], r["offset"])].append(r["snapshot_id"])
    return {k: sorted(v) for k, v in out.items()}


def offsets(start: int, end: int) -> set[tuple[int, int]]:
    return {(p, o) for p in range(PARTITIONS) for o in range(start, end)}


@pytest.fixture(scope="module")
def story(
    spark: SparkSession,
    bootstrap: str,
    flink_stacks: Callable[[str], FlinkStack],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Story]:
    root = tmp_path_factory.mktemp("flink-iceberg")
    unique = uuid.uuid4().hex[:10]
    topic, group = f"flink-iceberg-{unique}", f"flink-iceberg-{unique}-group"
    ledger, log, warehouse = root / "ledger", root / "flink-watch.log", root / "warehouse"
    table_dir = warehouse / NAMESPACE / TABLE
    # Spark reads the table afresh each time (no catalog cache): Flink commits behind its back.
    catalog = IcebergCatalogConfig("hadoop", warehouse=str(warehouse), properties={"cache-enabled": "false"})
    for key, value in catalog_conf(CATALOG, catalog).items():
        spark.conf.set(key, value)
    spark_table = f"{CATALOG}.{NAMESPACE}.{TABLE}"
    cfg = audit_config(
        root,
        bootstrap,
        ledger,
        JOB,
        [
            f"tables.sink_by_job.{JOB}={table_dir}",
            f"reconcile.sink_mode_by_job.{JOB}={vocab.SINK_ICEBERG_SNAPSHOTS}",
            "reconcile.confirm_gaps=false",
        ],
    )
    since = datetime.now(UTC) - timedelta(minutes=1)
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 200, PARTITIONS)
    spec = JobSpec(
        bootstrap,
        topic,
        group,
        interval_ms=TEN_DAYS_MS,
        iceberg=(warehouse.resolve().as_uri(), f"{NAMESPACE}.{TABLE}"),
    )
    jobs: list[FlinkJob] = []
    job = FlinkJob(flink_stacks(ICEBERG_STACK), spec, root / "flink", on_start=jobs.append)
    sidecar = start_sidecar(job, JOB, group, ledger, log)
    try:
        job.start()
        data: dict[str, list[int]] = defaultdict(list)

        def read_and_checkpoint(flink: FlinkJob, records: int) -> int:
            flink.wait_records_read(records)
            checkpoint = flink.trigger_checkpoint()
            wait_recorded(ledger, flink.job_id, {checkpoint})
            data[flink.job_id].append(checkpoint)
            return checkpoint

        # A: offsets 0..99 of each partition, then killed; B from A's latest checkpoint.
        read_and_checkpoint(job, 200)
        job.kill9()
        second = restart_on_same_port(job, job.retained()[-1])
        produce(bootstrap, topic, 100, PARTITIONS, start=200)
        read_and_checkpoint(second, 100)  # 100..149
        savepoint = second.savepoint()
        produce(bootstrap, topic, 100, PARTITIONS, start=300)
        read_and_checkpoint(second, 200)  # 150..199
        wait_committed(cfg, table_dir, job.job_id, 200)
        wait_committed(cfg, table_dir, second.job_id, 200)
        second.cancel()
        now = datetime.now(UTC)
        clean = reconcile_findings(spark, cfg, bootstrap, group, since, now, "rec-clean")
        clean_rows = table_rows(spark, spark_table)
        clean_snapshots = flink_snapshots(cfg, table_dir)

        # C from the older savepoint: 150..199 again. Its committer skips the checkpoint ids B
        # committed, so C checkpoints until it committed the re-read under its own job id.
        third = restart_on_same_port(job, savepoint)
        replayed_checkpoint = read_and_checkpoint(third, 100)

        def committed_by_third() -> Snapshots | None:
            third.trigger_checkpoint()
            found = flink_snapshots(cfg, table_dir)
            return found if any(j == third.job_id for j, _ in found) else None

        replayed_snapshots = wait_for(committed_by_third, LEDGER_WAIT_S, f"a snapshot of {third.job_id}")
        wait_recorded(ledger, third.job_id, {m for j, m in replayed_snapshots if j == third.job_id})
        third.cancel()
        stop_sidecar(sidecar, log)
        now = datetime.now(UTC)
        replayed = reconcile_findings(spark, cfg, bootstrap, group, since, now, "rec-replayed")
        replayed_rows = table_rows(spark, spark_table)
        added_by = snapshots_adding(spark, spark_table)

        # The table's owner rolls it back to before C's snapshot.
        [(committed_with, (rolled_back, _))] = [
            (m, v) for (j, m), v in replayed_snapshots.items() if j == third.job_id
        ]
        [rolled_back_to] = [
            sid for (j, m), (sid, _) in replayed_snapshots.items() if j == second.job_id and m == max(data[j])
        ]
        spark.sql(f"CALL {CATALOG}.system.rollback_to_snapshot('{NAMESPACE}.{TABLE}', {rolled_back_to})")
        now = datetime.now(UTC)
        rolled = reconcile_findings(spark, cfg, bootstrap, group, since, now, "rec-rolled")
        yield Story(
            first=job.job_id,
            second=second.job_id,
            third=third.job_id,
            data_checkpoints=dict(data),
            replayed_checkpoint=replayed_checkpoint,
            replay_committed_with=committed_with,
            clean=clean,
            clean_rows=clean_rows,
            clean_snapshots=clean_snapshots,
            replayed=replayed,
            replayed_rows=replayed_rows,
            added_by=added_by,
            rolled=rolled,
            rolled_back=rolled_back,
            rolled_back_to=rolled_back_to,
        )
    finally:
        if sidecar.poll() is None:
            sidecar.kill()
            sidecar.wait(30)
        for flink in jobs:
            flink.stop()


def of_type(found: list[Row], finding_type: str) -> list[Row]:
    return sorted((f for f in found if f.finding_type == finding_type), key=lambda f: f.partition)


def ev(finding: Row) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(finding.evidence)
    return loaded


def test_a_killed_job_restored_from_its_latest_checkpoint_leaves_nothing_at_warn(story: Story) -> None:
    assert serious(story.clean) == [], evidence(story.clean)
    # the ground truth: every offset read once, in the table once
    assert story.clean_rows == Counter(dict.fromkeys(offsets(0, 200), 1))


def test_every_checkpoint_with_data_is_committed_by_a_snapshot_of_its_own_flink_job(story: Story) -> None:
    # A's checkpoint before the kill (committed by A, or by B's committer on restore under A's id),
    # and B's two: one snapshot each, with the records each read
    assert {k: n for k, (_, n) in story.clean_snapshots.items() if n} == {
        (story.first, story.data_checkpoints[story.first][0]): 200,
        (story.second, story.data_checkpoints[story.second][0]): 100,
        (story.second, story.data_checkpoints[story.second][1]): 100,
    }
    assert vocab.BATCH_NOT_IN_SINK not in {f.finding_type for f in story.clean}
    assert vocab.SINK_COMMIT_UNEXPLAINED not in {f.finding_type for f in story.clean}


def test_a_restore_from_an_older_savepoint_names_the_checkpoint_committed_again(story: Story) -> None:
    twice = of_type(story.replayed, vocab.BATCH_WRITTEN_TWICE)
    assert [
        (f.run_id.split("-")[0], f.checkpoint_id, f.partition, f.offset_start, f.offset_end, f.severity)
        for f in twice
    ] == [(story.third, story.replayed_checkpoint, p, 150, 200, vocab.ERROR) for p in range(PARTITIONS)], (
        evidence(story.replayed)
    )
    # the ground truth: 150..199 are in the table twice, added by one snapshot of B and one of C,
    # the two snapshots the findings name
    assert {k for k, n in story.replayed_rows.items() if n == 2} == offsets(150, 200)
    assert {k for k, n in story.replayed_rows.items() if n != 1} == offsets(150, 200)
    [holders] = {tuple(story.added_by[k]) for k in offsets(150, 200)}
    assert len(holders) == 2
    assert all(sorted(ev(f)["snapshot_ids"]) == list(holders) for f in twice)
    assert all(ev(f)["earlier_flink_job_ids"] == [story.second] for f in twice)
    # Iceberg's committer skipped C's checkpoint (B had committed that id) and committed its files
    # with a later one: the mode ties them back to the checkpoint that read them
    assert story.replay_committed_with > story.replayed_checkpoint
    # beside the ledger's own word on the restart: the re-read ranges, a replay (warn)
    replays = of_type(story.replayed, vocab.RESTART_REPLAY)
    assert [(f.partition, f.offset_start, f.offset_end) for f in replays] == [
        (p, 150, 200) for p in range(PARTITIONS)
    ]
    assert {f.finding_type for f in story.replayed if vocab.severity_at_least(f.severity, vocab.ERROR)} == {
        vocab.BATCH_WRITTEN_TWICE
    }, evidence(story.replayed, vocab.ERROR)


def test_a_checkpoint_whose_snapshot_was_rolled_back_is_lost(story: Story) -> None:
    lost = of_type(story.rolled, vocab.BATCH_NOT_IN_SINK)
    assert [
        (f.run_id.split("-")[0], f.checkpoint_id, f.partition, f.offset_start, f.offset_end) for f in lost
    ] == [(story.third, story.replayed_checkpoint, p, 150, 200) for p in range(PARTITIONS)], evidence(
        story.rolled
    )
    assert {(f.status, f.severity) for f in lost} == {(vocab.CONFIRMED, vocab.CRITICAL)}
    assert all(ev(f)["snapshot_ids"] == [story.rolled_back] for f in lost)
    assert all(ev(f)["rolled_back_to"] == [story.rolled_back_to] for f in lost)
    # the earlier jobs' checkpoints keep their snapshots: nothing else is lost
    assert {f.run_id.split("-")[0] for f in story.rolled if f.finding_type == vocab.BATCH_NOT_IN_SINK} == {
        story.third
    }
