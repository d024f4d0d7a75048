"""A Flink job's Iceberg sink judged by its snapshots (`iceberg_snapshots`): a ledger written as
`flink-watch` writes it (the app's own event builders and ledger writer), and an Iceberg table in a
SQL catalog whose snapshots carry what Flink's IcebergFilesCommitter writes (`flink.job-id`,
`flink.operator-id`, `flink.max-committed-checkpoint-id`), appended with pyiceberg.

Job A commits checkpoints 1..6 one snapshot each and is cancelled; job B is restored from A's older
savepoint of checkpoint 3, re-reads [30, 60) in its checkpoints 4..6 (which Iceberg's committer skips
as already committed under A, then commits with 7), completes checkpoint 8 and stops before
committing it. `reconcile` names B's re-committed checkpoints 4..6 with both snapshots, and
checkpoint 8 as lost with its offsets."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.contracts import vocabulary as vocab
from app.contracts.offsets import LedgerEvent
from app.flink import events as fe
from app.flink.metadata import FlinkCheckpointOffsets, SplitOffset
from app.flink.rest import CheckpointStat, Restore
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.storage.tables import tables_from_config
from app.stream.ledger import LedgerWriter
from tests.support.config import build_config

pytestmark = pytest.mark.spark

JOB = "orders-flink"
JOB_A, JOB_B = "a" * 32, "b" * 32
TOPIC = "orders"
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)


def ms(second: int) -> int:
    return int((T0 + timedelta(seconds=second)).timestamp() * 1000)


def completed(source: Any, checkpoint: int, offset: int, second: int) -> list[LedgerEvent]:
    """Checkpoint ``checkpoint`` of ``source``'s run, its Kafka source at ``offset`` of partition 0."""
    stat = CheckpointStat(
        checkpoint, "COMPLETED", False, ms(second - 1), ms(second), f"/chk/chk-{checkpoint}", False
    )
    decoded = FlinkCheckpointOffsets(
        checkpoint,
        vocab.ENGINE_FLINK_KAFKASOURCE,
        "src",
        stat.external_path or "",
        (SplitOffset(TOPIC, 0, offset, None),),
    )
    return fe.checkpoint_events(source, stat, decoded)


def ledger_events() -> dict[str, list[LedgerEvent]]:
    """run id -> its events, as flink-watch writes them."""
    a = fe.Attempt(JOB_A, ms(0), None)
    src_a = fe.source_for(JOB, a.run_id, vocab.ENGINE_FLINK_KAFKASOURCE, None)
    run_a = [fe.run_started(src_a, a, startup_mode=vocab.RESTORE_EARLIEST)]
    run_a += [e for i in range(1, 7) for e in completed(src_a, i, i * 10, i * 10)]
    run_a.append(fe.run_stopped(src_a, T0 + timedelta(seconds=65), "CANCELED", fe.RunCounts(recorded=6)))
    restore = Restore(3, ms(100), True, "/savepoints/savepoint-3")
    b = fe.Attempt(JOB_B, ms(100), restore)
    src_b = fe.source_for(JOB, b.run_id, vocab.ENGINE_FLINK_KAFKASOURCE, None)
    run_b = [fe.run_started(src_b, b), *fe.offsets_restored(src_b, b, {(TOPIC, 0): 30})]
    run_b += [e for i in range(4, 9) for e in completed(src_b, i, i * 10, 100 + i * 10)]
    run_b.append(fe.run_stopped(src_b, T0 + timedelta(seconds=190), "CANCELED", fe.RunCounts(recorded=5)))
    return {a.run_id: run_a, b.run_id: run_b}


def flink_snapshot(table: Any, job: str, checkpoint: int, ids: range) -> int:
    """One commit of Flink's IcebergFilesCommitter: the rows of ``ids``, up to ``checkpoint``."""
    props = {
        "flink.job-id": job,
        "flink.operator-id": "committer",
        "flink.max-committed-checkpoint-id": str(checkpoint),
    }
    table.append(pa.table({"id": pa.array(list(ids), pa.int64())}), snapshot_properties=props)
    return int(table.current_snapshot().snapshot_id)


@dataclasses.dataclass
class Found:
    findings: list[Any]
    snapshots_a: dict[int, int]  # checkpoint -> A's snapshot
    snapshot_b: int
    run_b: str


@pytest.fixture(scope="module")
def found(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Found:
    from pyiceberg.catalog.sql import SqlCatalog

    root = tmp_path_factory.mktemp("iceberg-flink")
    uri, warehouse = f"sqlite:///{root / 'catalog.db'}", f"file://{root / 'wh'}"
    catalog = SqlCatalog("meta", uri=uri, warehouse=warehouse)
    catalog.create_namespace("db")
    table = catalog.create_table("db.orders", schema=pa.schema([("id", pa.int64())]))
    snapshots_a = {i: flink_snapshot(table, JOB_A, i, range((i - 1) * 10, i * 10)) for i in range(1, 7)}
    snapshot_b = flink_snapshot(table, JOB_B, 7, range(30, 70))  # B's 4..7: [30, 70) again
    cfg = build_config(
        f"tables.ledger={root / 'ledger'}",
        "iceberg.catalogs.meta.type=sql",
        f"iceberg.catalogs.meta.uri={uri}",
        f"iceberg.catalogs.meta.warehouse={warehouse}",
        f"tables.sink_by_job.{JOB}=iceberg:meta.db.orders",
        f"reconcile.jobs=[{JOB}]",
        f"reconcile.sink_mode_by_job.{JOB}={vocab.SINK_ICEBERG_SNAPSHOTS}",
        "reconcile.confirm_gaps=false",
        data_dir=root / "audit",
    )
    runs = ledger_events()
    for run_id, events in runs.items():
        writer = LedgerWriter(cfg.storage, str(root / "ledger"), JOB, run_id=run_id)
        writer.ensure()
        writer.write_new(events)
    now = datetime.now(UTC)
    run_reconcile(
        spark, cfg, AuditRun(run_id="rec-flink", now=now, since=T0 - timedelta(minutes=1), until=now)
    )
    stored = spark.read.format("delta").load(tables_from_config(cfg).findings)
    rows = stored.where(F.col("reconcile_run_id") == "rec-flink").collect()
    return Found(rows, snapshots_a, snapshot_b, list(runs)[1])


def sink_findings(found: Found, finding_type: str) -> list[Any]:
    return sorted(
        (f for f in found.findings if f.finding_type == finding_type), key=lambda f: f.checkpoint_id
    )


def test_a_restore_from_an_older_savepoint_names_the_checkpoints_committed_again(found: Found) -> None:
    twice = sink_findings(found, vocab.BATCH_WRITTEN_TWICE)
    assert [(f.checkpoint_id, f.run_id, f.offset_start, f.offset_end) for f in twice] == [
        (4, found.run_b, 30, 40),
        (5, found.run_b, 40, 50),
        (6, found.run_b, 50, 60),
    ]
    assert [json.loads(f.evidence)["snapshot_ids"] for f in twice] == [
        [found.snapshots_a[i], found.snapshot_b] for i in (4, 5, 6)
    ]
    assert {f.severity for f in twice} == {vocab.ERROR}


def test_a_completed_checkpoint_no_snapshot_covers_is_lost(found: Found) -> None:
    [lost] = sink_findings(found, vocab.BATCH_NOT_IN_SINK)
    assert (lost.checkpoint_id, lost.run_id, lost.offset_start, lost.offset_end) == (8, found.run_b, 70, 80)
    assert (lost.status, lost.severity) == (vocab.CONFIRMED, vocab.CRITICAL)
    assert sink_findings(found, vocab.SINK_COMMIT_UNEXPLAINED) == []
