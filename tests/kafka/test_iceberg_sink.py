"""An Iceberg sink judged by its snapshots (`iceberg_snapshots`), on a user's own job (real broker,
Spark, Iceberg): job (i) of tests/kafka/user_jobs.py, Kafka payments parsed, filtered and written
with `writeStream.format("iceberg")...toTable(...)` into a Hadoop catalog's table, the audit
attached in one line.

One scenario, asserted several ways (each stream run costs tens of seconds): the job killed with
SIGKILL and restarted, then the table compacted (`rewrite_data_files`): nothing at warn or above.
Then more batches, and the table's owner damages it as owners do: a rollback to before the last
batch (that batch lost, with its snapshot id and its offsets), a retry of an earlier batch by a
writer that does not skip an epoch it committed (written twice, both snapshots named), and the
oldest snapshots expired (their batches unverifiable, never lost). `ledger-import --sink` on the
same table counts the same: held, lacked, unverifiable. Last, the job's checkpoint deleted while
records arrive and the job restarted from `latest`: RESTART_SKIP over exactly the ranges it passed
over, their records read back from the source and counted lost (the snapshots cannot show what no
batch read), and the new query's batches attributed to its own snapshots; the earlier phases'
findings stay as they were.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.attach import attach
from app.config import IcebergCatalogConfig, IcebergConfig
from app.contracts import vocabulary as vocab
from app.contracts.findings import skipped_counts
from app.incidents.incident import StoredIncident
from app.kafka.gaps import kafka_gap_confirmer
from app.kafka.times import KafkaTimes
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.runtime.spark import catalog_conf
from app.storage.handles import IcebergHandle, open_handle
from app.storage.tables import tables_from_config
from app.stream.checkpoint import CheckpointFiles
from app.stream.ledger_import import ImportResult, import_checkpoint
from tests.kafka.user_jobs import (
    JOB,
    PARTITIONS,
    PER_TRIGGER,
    at_least_warn,
    audit_config,
    batch_ranges,
    checkpoint_batches,
    kafka,
    produce_payments,
    reconcile,
    run_then_kill,
    run_to_end,
    start_job,
)
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka

TABLE = "lake.db.payments"
ADDRESS = f"iceberg:{TABLE}"


@dataclass
class Scenario:
    topic: str
    query_id: str
    checkpoint: Path  # the first query's checkpoint, as it was before the job's was deleted
    clean: list[Any]
    found: list[Any]
    last_clean_batch: int  # the last batch before the second phase
    snapshot_of: dict[int, int]  # batch id -> its snapshot, as the job committed it
    rolled_back_to: int
    retried: int  # the snapshot of the batch written again
    expired: set[int]  # the batches whose snapshots expired
    imported: ImportResult
    restarted: list[Any]  # the findings once the job restarted from `latest` on a new checkpoint
    restart_incidents: list[StoredIncident]
    skips: dict[int, tuple[int, int]]  # partition -> [from, to) the restart passed over
    skipped_in_source: dict[int, int]  # partition -> the records the source holds in that range


def snapshots_by_batch(handle: IcebergHandle, query_id: str) -> dict[int, list[int]]:
    """batch id -> the snapshots carrying it, as a user reads the summaries."""
    log = handle.snapshot_log()
    assert log is not None
    out: dict[int, list[int]] = {}
    for s in log.snapshots:
        summary = {k.lower(): v for k, v in s.summary.items()}
        if summary.get("spark.sql.streaming.queryid") == query_id:
            out.setdefault(int(summary["spark.sql.streaming.epochid"]), []).append(s.snapshot_id)
    return out


def run_attached(
    spark: SparkSession, bootstrap: str, topic: str, root: Path, starting: str = "earliest"
) -> str:
    query = start_job("i", kafka(spark, bootstrap, "subscribe", topic, starting), root / "cp", TABLE)
    run_to_end(query, attach(query, job_name=JOB, ledger=str(root / "ledger")))
    return str(query.id)


def records_in(
    spark: SparkSession, bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]]
) -> dict[int, int]:
    """partition -> the records the source holds in its [from, to), read back as a user would."""

    def bound(side: int) -> str:
        return json.dumps({topic: {str(p): r[side] for p, r in ranges.items()}})

    read = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    read = read.option("assign", json.dumps({topic: sorted(ranges)}))
    rows = read.option("startingOffsets", bound(0)).option("endingOffsets", bound(1)).load()
    return {r["partition"]: r["count"] for r in rows.groupBy("partition").count().collect()}


def at_ms(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@pytest.fixture(scope="module")
def scenario(
    spark: SparkSession, bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    root = tmp_path_factory.mktemp("iceberg-sink")
    warehouse = root / "wh"
    catalogs = IcebergConfig({"lake": IcebergCatalogConfig(type="hadoop", warehouse=str(warehouse))})
    spark_conf = catalog_conf("lake", catalogs.catalogs["lake"])
    for key, value in spark_conf.items():
        spark.conf.set(key, value)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    spark.sql(f"CREATE TABLE {TABLE} (id BIGINT, amount DOUBLE) USING iceberg")
    topic = f"ice-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, 8 * PER_TRIGGER)
    checkpoint = root / "cp"
    since = datetime.now(UTC) - timedelta(minutes=1)
    cfg = audit_config(
        root,
        bootstrap,
        Path(ADDRESS),
        root / "ledger",
        "iceberg.catalogs.lake.type=hadoop",
        f"iceberg.catalogs.lake.warehouse={warehouse}",
        mode=vocab.SINK_ICEBERG_SNAPSHOTS,
    )
    handle = open_handle("sink", ADDRESS, spark, catalogs)
    assert isinstance(handle, IcebergHandle)

    # The job as its own driver, killed with SIGKILL after two completed batches, then restarted.
    def two_batches() -> bool | None:
        return (
            True if (checkpoint / "commits").is_dir() and len(checkpoint_batches(checkpoint)) >= 2 else None
        )

    args = [bootstrap, topic, str(checkpoint), TABLE, str(root / "ledger"), JOB, str(root / "driver"), "i"]
    run_then_kill([*args, "--iceberg-warehouse", str(warehouse)], two_batches, "two completed batches")
    query_id = run_attached(spark, bootstrap, topic, root)
    # The owner's compaction while the job is between batches: a `replace` snapshot, no batch's.
    spark.sql(
        "CALL lake.system.rewrite_data_files(table => 'db.payments', options => map('min-input-files', '2'))"
    )
    clean = reconcile(spark, cfg, "rec-clean", since)
    last_clean = max(checkpoint_batches(checkpoint))

    # Three more batches, then the damage.
    produce_payments(bootstrap, topic, 3 * PER_TRIGGER, start=8 * PER_TRIGGER)
    assert run_attached(spark, bootstrap, topic, root) == query_id
    last = max(checkpoint_batches(checkpoint))
    assert last == last_clean + 3
    by_batch = snapshots_by_batch(handle, query_id)
    assert all(len(by_batch[b]) == 1 for b in range(last + 1))  # Iceberg's sink skipped every epoch it held
    snapshot_of = {b: ids[0] for b, ids in by_batch.items()}
    # A rollback to before the last batch.
    spark.sql(f"CALL lake.system.rollback_to_snapshot('db.payments', {snapshot_of[last - 1]})")
    # A retry of an earlier batch by a foreachBatch that does not skip what it committed, with the
    # snapshot properties README shows.
    retried_batch = last - 2
    rows = spark.createDataFrame([(10**6, 1.0)], "id BIGINT, amount DOUBLE").writeTo(TABLE)
    rows = rows.option("snapshot-property.spark.sql.streaming.queryId", query_id)
    rows.option("snapshot-property.spark.sql.streaming.epochId", str(retried_batch)).append()
    retried = [
        s for s in snapshots_by_batch(handle, query_id)[retried_batch] if s != snapshot_of[retried_batch]
    ]
    # The oldest snapshots expired: those of batches 0 and 1.
    log = handle.snapshot_log()
    assert log is not None
    cutoff = next(s.timestamp for s in log.snapshots if s.snapshot_id == snapshot_of[1]) + timedelta(
        milliseconds=1
    )
    spark.sql(
        "CALL lake.system.expire_snapshots(table => 'db.payments', "
        f"older_than => TIMESTAMP '{at_ms(cutoff)}', retain_last => 1)"
    )
    found = reconcile(spark, cfg, "rec-faults", since)
    imported = import_checkpoint(
        CheckpointFiles(spark, str(checkpoint)),
        str(root / "ledger-imported"),
        JOB,
        spark,
        sink=ADDRESS,
        catalogs=catalogs,
    )

    # The checkpoint deleted while records arrive, and the job restarted from `latest`: a new query
    # (batch ids from 0 again) writing into the same table, passing over what arrived in between.
    first_checkpoint = root / "cp-first"
    shutil.copytree(checkpoint, first_checkpoint)
    reached = checkpoint_batches(checkpoint)[last]
    shutil.rmtree(checkpoint)
    skipped = PER_TRIGGER
    produce_payments(bootstrap, topic, skipped, start=11 * PER_TRIGGER)
    # `latest` resolves to the log's end when the job starts: given as those offsets, since the
    # records produced next for the new query would otherwise race it.
    latest = {p: reached[(topic, p)] + skipped // PARTITIONS for p in range(PARTITIONS)}
    produce_payments(bootstrap, topic, 2 * PER_TRIGGER, start=12 * PER_TRIGGER)
    second = run_attached(
        spark, bootstrap, topic, root, json.dumps({topic: {str(p): o for p, o in latest.items()}})
    )
    assert second != query_id  # a new checkpoint is a new query
    skips = {p: (reached[(topic, p)], latest[p]) for p in range(PARTITIONS)}
    judged = run_reconcile(
        spark,
        cfg,
        AuditRun(run_id="rec-restart", now=datetime.now(UTC), since=since),
        confirmer=kafka_gap_confirmer(cfg.kafka, bootstrap, max_records=10_000, timeout_s=60),
        times=KafkaTimes(cfg.kafka, bootstrap, 60),
    )
    stored = spark.read.format("delta").load(tables_from_config(cfg).findings)
    restarted = stored.where(F.col("reconcile_run_id") == "rec-restart").collect()
    yield Scenario(
        topic=topic,
        query_id=query_id,
        checkpoint=first_checkpoint,
        clean=clean,
        found=found,
        last_clean_batch=last_clean,
        snapshot_of=snapshot_of,
        rolled_back_to=snapshot_of[last - 1],
        retried=retried[0],
        expired={0, 1},
        imported=imported,
        restarted=restarted,
        restart_incidents=[i for i in judged.incidents if i.kind == vocab.INCIDENT_RESTART],
        skips=skips,
        skipped_in_source=records_in(spark, bootstrap, topic, skips),
    )
    for key in spark_conf:
        spark.conf.unset(key)


def ev(finding: Any) -> dict[str, Any]:
    return dict(json.loads(finding.evidence))


def of_type(found: list[Any], finding_type: str, status: str | None = None) -> list[Any]:
    return [f for f in found if f.finding_type == finding_type and (status is None or f.status == status)]


def test_a_killed_and_restarted_job_and_a_compaction_leave_nothing_at_warn(scenario: Scenario) -> None:
    assert at_least_warn(scenario.clean) == []
    assert vocab.UNCLEAN_STOP in {
        f.finding_type for f in scenario.clean
    }  # the kill was seen, and judged harmless


def test_a_rollback_to_before_a_batch_loses_it_with_its_snapshot_and_offsets(scenario: Scenario) -> None:
    last = max(checkpoint_batches(scenario.checkpoint))
    lost = of_type(scenario.found, vocab.BATCH_NOT_IN_SINK, vocab.CONFIRMED)
    assert {f.checkpoint_id for f in lost} == {last}
    ranges = batch_ranges(scenario.checkpoint, scenario.topic, last)
    assert {f.partition: (f.offset_start, f.offset_end) for f in lost} == {
        p: r for p, r in ranges.items() if r[1] > r[0]
    }
    for f in lost:
        assert f.severity == vocab.CRITICAL
        assert ev(f)["snapshot_ids"] == [scenario.snapshot_of[last]]
        assert ev(f)["rolled_back_to"] == [scenario.rolled_back_to]


def test_a_batch_committed_twice_by_a_writer_that_does_not_skip_is_named(scenario: Scenario) -> None:
    twice = of_type(scenario.found, vocab.BATCH_WRITTEN_TWICE)
    batch = max(checkpoint_batches(scenario.checkpoint)) - 2
    assert {f.checkpoint_id for f in twice} == {batch}
    assert all(ev(f)["snapshot_ids"] == [scenario.snapshot_of[batch], scenario.retried] for f in twice)


def test_an_expiry_past_batches_makes_them_unverifiable_never_lost(scenario: Scenario) -> None:
    gone = of_type(scenario.found, vocab.BATCH_NOT_IN_SINK, vocab.UNVERIFIABLE)
    assert {f.checkpoint_id for f in gone} == scenario.expired
    assert {f.severity for f in gone} == {vocab.ERROR}
    assert "expired" in ev(gone[0])["meaning"]


def test_nothing_else_is_named(scenario: Scenario) -> None:
    expected = {(vocab.BATCH_NOT_IN_SINK, vocab.CRITICAL), (vocab.BATCH_WRITTEN_TWICE, vocab.ERROR)}
    expected |= {(vocab.BATCH_NOT_IN_SINK, vocab.ERROR)}
    assert set(at_least_warn(scenario.found)) == expected
    assert of_type(scenario.found, vocab.SINK_COMMIT_UNEXPLAINED) == []


def test_ledger_import_reads_the_iceberg_sink_as_a_delta_one(scenario: Scenario) -> None:
    result = scenario.imported
    completed = len(checkpoint_batches(scenario.checkpoint))
    assert (result.sink_lacks, result.sink_unverifiable) == (1, len(scenario.expired))
    assert result.sink_holds == completed - 1 - len(scenario.expired)


def test_a_restart_from_latest_names_the_skipped_ranges_and_counts_their_records(
    scenario: Scenario,
) -> None:
    skips = [f for f in scenario.restarted if f.finding_type == vocab.RESTART_SKIP]
    assert {f.partition: (f.offset_start, f.offset_end) for f in skips} == scenario.skips
    assert len(skips) == len(scenario.skips)
    assert {f.severity for f in skips} == {vocab.CRITICAL}
    # Read back from the source as a gap is: every record of the range lost, none unverifiable.
    assert sum(scenario.skipped_in_source.values()) == PER_TRIGGER
    assert {f.partition: skipped_counts(ev(f), f.record_count) for f in skips} == {
        p: (n, 0) for p, n in scenario.skipped_in_source.items()
    }
    (incident,) = scenario.restart_incidents
    effect = incident.impact
    assert (incident.severity, effect.records_lost, effect.records_unverifiable) == (
        vocab.CRITICAL,
        PER_TRIGGER,
        0,
    )


def test_a_restart_from_latest_adds_nothing_else(scenario: Scenario) -> None:
    """The new query's batches are in its own snapshots (no batch lost, none unexplained), and the
    earlier faults are named as before."""
    assert sorted(at_least_warn(scenario.restarted)) == sorted(
        at_least_warn(scenario.found) + [(vocab.RESTART_SKIP, vocab.CRITICAL)] * PARTITIONS
    )
    assert of_type(scenario.restarted, vocab.SINK_COMMIT_UNEXPLAINED) == []
