"""A `coordinates` sink in Iceberg, against a real broker, Spark, Delta and Iceberg: the same records
written once to a Delta sink and once to an Iceberg sink (a Hadoop catalog's table) are judged alike
(GAP, DUPLICATE, incidents, completeness windows and their latencies), each read through filters
Iceberg's scan prunes with; `repair --execute` replays the gap and removes the second copy in one
snapshot each, a rerun writes nothing, and the printed rollback takes the table back; the owner's
compaction and snapshot expiry then bring no finding.

One story (module fixture) serves every assertion: 20 records over four 10-minute windows, the
sink lacking offset 7 and holding offset 12 twice (the second copy by another writer)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app import cli
from app.config import AppConfig, IcebergCatalogConfig, KafkaConfig
from app.contracts.offsets import EventSource, LedgerEvent
from app.contracts.tables import LEDGER_SCHEMA
from app.incidents.incident import StoredIncident
from app.kafka.clients import plain_conf, spark_kafka_options
from app.kafka.gaps import kafka_gap_confirmer
from app.kafka.times import KafkaTimes
from app.reconcile.completeness.windows import window_of
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.reconcile.sink.coordinates import SinkReader, sink_columns
from app.runtime.spark import catalog_conf
from app.storage.handles import AuditTables, IcebergHandle
from app.storage.tables import tables_from_config
from app.stream.startup import to_sink_rows
from tests.support.config import build_config
from tests.support.ledger_data import contract_table
from tests.support.reconcile import read, save
from tests.support.streaming import deliver

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

JOB, GROUP, RUN = "orders-job", "orders-group", "run-1"
WINDOW = timedelta(minutes=10)
RECORDS = 20
SECOND_WRITER = "second-writer"
NAMESPACE, TABLE = "sales", "orders"

# Columns that differ between two runs by nature (their ids and clocks), not by what was judged.
RUN_COLUMNS = ("reconcile_run_id", "detected_at", "computed_at")


@dataclass
class Story:
    topic: str
    base: datetime
    delta: AppConfig
    iceberg: AppConfig
    catalog: str  # the audit's catalog (iceberg.catalogs)
    sink_name: str  # <catalog>.<ns>.<table>, as Spark SQL names it
    job_table: str  # the same table through the user's own catalog, as another process sees it
    bootstrap: str
    incidents: dict[str, dict[str, StoredIncident]]  # per format, by kind


def ledger(topic: str, started: datetime) -> list[dict[str, Any]]:
    """A run restored at offset 0; checkpoint 1 completes at 21:00 (offset 10), 2 at 40:30 (20),
    and the run stops at 41:00."""
    src = EventSource(JOB, RUN, "spark", GROUP)
    events: list[LedgerEvent] = [src.event("RUN_STARTED", started, None, {})]
    events += src.partition_events("OFFSETS_RESTORED", started, None, {(topic, 0): 0}, {"source": "earliest"})
    for cp, end, at in ((1, 10, timedelta(minutes=21)), (2, RECORDS, timedelta(minutes=40, seconds=30))):
        done = started + at
        events += src.partition_events(
            "CHECKPOINT_SNAPSHOT", done - timedelta(seconds=1), cp, {(topic, 0): end}, {}
        )
        events += src.partition_events("CHECKPOINT_COMPLETED", done, cp, {(topic, 0): end}, {})
    events.append(src.event("RUN_STOPPED", started + timedelta(minutes=41), None, {}))
    return [e.to_row() for e in events]


def source_rows(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    kafka = KafkaConfig(bootstrap_servers=bootstrap)
    source = (
        spark.read.format("kafka").options(**spark_kafka_options(kafka, bootstrap)).option("subscribe", topic)
    )
    return to_sink_rows(source.load(), 1, RUN)


def reconcile(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    run_id: str,
    now: datetime,
    since: datetime | None = None,
) -> Any:
    """A run up to ``now``, from ``since`` (None: where the last run stopped)."""
    kafka = KafkaConfig(bootstrap_servers=bootstrap)
    return run_reconcile(
        spark,
        cfg,
        AuditRun(run_id=run_id, now=now, since=since, until=now),
        confirmer=kafka_gap_confirmer(kafka, bootstrap, max_records=1000, timeout_s=60),
        times=KafkaTimes(kafka, bootstrap, 60),
    )


@pytest.fixture(scope="module")
def story(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, bootstrap: str) -> Story:
    tag = uuid.uuid4().hex[:10]
    topic, catalog = f"iceberg-coords-{tag}", f"ice_{tag}"
    admin = AdminClient(plain_conf(bootstrap))
    new = NewTopic(topic, num_partitions=1, replication_factor=1, config={"retention.ms": "-1"})
    admin.create_topics([new])[topic].result(30)
    base = window_of(datetime.now(UTC) - timedelta(minutes=100), 10).start
    times = [base + w * WINDOW + timedelta(seconds=30 + 60 * i) for w in range(4) for i in range(5)]
    producer = Producer(plain_conf(bootstrap, **{"enable.idempotence": True}))
    for i, t in enumerate(times):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            partition=0,
            timestamp=int(t.timestamp() * 1000),
        )
    deliver(producer)

    root = tmp_path_factory.mktemp("iceberg-coords")
    delta = build_config(data_dir=root / "delta")
    lake = IcebergCatalogConfig(type="hadoop", warehouse=str(root / "warehouse"))
    sink_name = f"{catalog}.{NAMESPACE}.{TABLE}"
    iceberg = build_config(
        f"iceberg.catalogs.{catalog}.type={lake.type}",
        f"iceberg.catalogs.{catalog}.warehouse={lake.warehouse}",
        f"tables.sink=iceberg:{sink_name}",
        data_dir=root / "iceberg",
    )
    # The audit's catalog, as every session of the application registers it, and the user's job's
    # own (another instance over the same warehouse, with its own cache, as another process has).
    job_table = f"{catalog}_job.{NAMESPACE}.{TABLE}"
    for name in (catalog, f"{catalog}_job"):
        for key, value in catalog_conf(name, lake).items():
            spark.conf.set(key, value)

    rows = source_rows(spark, bootstrap, topic)
    first = rows.where(F.col("kafka_offset") != 7)
    second = rows.where(F.col("kafka_offset") == 12).withColumn("_run_id", F.lit(SECOND_WRITER))
    first.write.format("delta").save(tables_from_config(delta).sink)
    second.write.format("delta").mode("append").save(tables_from_config(delta).sink)
    first.writeTo(job_table).partitionedBy(F.col("kafka_partition")).create()
    second.writeTo(job_table).append()
    for cfg in (delta, iceberg):
        save(contract_table(LEDGER_SCHEMA, ledger(topic, base)), cfg, "ledger")

    incidents = {}
    now = datetime.now(UTC)
    for name, cfg in (("delta", delta), ("iceberg", iceberg)):
        result = reconcile(spark, cfg, bootstrap, "rec-1", now)
        incidents[name] = {i.kind: i for i in result.incidents}
    return Story(topic, base, delta, iceberg, catalog, sink_name, job_table, bootstrap, incidents)


def stored(spark: SparkSession, cfg: AppConfig, table: str) -> list[dict[str, Any]]:
    """The rows of an audit table, without what differs between runs by nature, in a stable order."""
    df = read(spark, cfg, table)
    rows = [{k: v for k, v in r.asDict().items() if k not in RUN_COLUMNS} for r in df.collect()]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def judged(incidents: dict[str, StoredIncident]) -> dict[str, tuple[Any, ...]]:
    return {
        kind: (
            i.severity,
            i.impact.records_lost,
            i.impact.records_duplicated,
            i.remedy.to_json_object()["steps"],
        )
        for kind, i in incidents.items()
    }


def test_the_same_records_in_delta_and_in_iceberg_give_the_same_findings_incidents_and_windows(
    spark: SparkSession, story: Story
) -> None:
    findings = stored(spark, story.iceberg, "findings")
    assert findings == stored(spark, story.delta, "findings")
    assert {(f["finding_type"], f["offset_start"], f["offset_end"], f["record_count"]) for f in findings} >= {
        ("GAP", 7, 8, 1),
        ("DUPLICATE", 12, 13, 1),
    }
    assert judged(story.incidents["iceberg"]) == judged(story.incidents["delta"])
    assert {k: v[:3] for k, v in judged(story.incidents["iceberg"]).items()} == {
        "gap": ("critical", 1, 0),
        "second_writer": ("error", 0, 1),
    }

    windows = stored(spark, story.iceberg, "completeness")
    assert windows == stored(spark, story.delta, "completeness")
    by_start = sorted(windows, key=lambda w: w["window_start"])
    cols = ("offset_start", "offset_end", "expected", "landed", "lost", "duplicated", "final", "sink_mode")
    assert [tuple(w[c] for c in cols) for w in by_start] == [
        (0, 5, 5, 5, 0, 0, True, "coordinates"),
        (5, 10, 5, 4, 1, 0, True, "coordinates"),  # offset 7 lost
        (10, 15, 5, 5, 0, 1, True, "coordinates"),  # offset 12 twice
        (15, 20, 5, 5, 0, 0, True, "coordinates"),
    ]
    # Window 0's records (0:30 .. 4:30) completed with checkpoint 1 at 21:00: the same latencies.
    assert (by_start[0]["latency_p50_ms"], by_start[0]["latency_p95_ms"]) == (1_110_000, 1_230_000)


def test_a_window_read_is_pushed_into_the_iceberg_scan(spark: SparkSession, story: Story) -> None:
    """The coordinates reads filter the table's own columns before anything else, so Spark hands
    the filter to Iceberg's scan (which skips manifests and files by partition and statistics)."""
    tables = AuditTables.from_config(story.iceberg, spark)
    sink = tables.sink_for(JOB)
    assert isinstance(sink, IcebergHandle)
    df = sink.scan()
    assert df is not None
    window = SinkReader(df, sink_columns(story.iceberg)).where([(story.topic, 0, 15, 20)])
    plan = window._jdf.queryExecution().executedPlan().toString()
    (scan,) = [line for line in plan.splitlines() if "IcebergScan" in line]
    assert f"kafka_topic = '{story.topic}'" in scan
    assert "kafka_partition = 0" in scan
    assert "kafka_offset >= 15" in scan
    assert "kafka_offset < 20" in scan
    assert sorted(r["offset"] for r in window.collect()) == list(range(15, 20))


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = cli.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def options(story: Story) -> list[str]:
    cfg, lake = story.iceberg, story.iceberg.iceberg.catalogs[story.catalog]
    pairs = [
        f"paths.data_dir={cfg.paths.data_dir}",
        f"kafka.bootstrap_servers={story.bootstrap}",
        f"iceberg.catalogs.{story.catalog}.type={lake.type}",
        f"iceberg.catalogs.{story.catalog}.warehouse={lake.warehouse}",
        f"tables.sink={cfg.tables.sink}",
    ]
    return [arg for pair in pairs for arg in ("--set", pair)]


def snapshots(spark: SparkSession, story: Story) -> list[int]:
    """The snapshot ids of the Iceberg sink's current history, oldest first (from its metadata)."""
    sink = AuditTables.from_config(story.iceberg, spark).sink
    assert isinstance(sink, IcebergHandle)
    log = sink.snapshot_log()
    assert log is not None
    return [s.snapshot_id for s in log.snapshots if s.snapshot_id in log.ancestry]


def incidents_version(cfg: AppConfig) -> int:
    return int(DeltaTable(tables_from_config(cfg).incidents).version())


def sink_rows(spark: SparkSession, story: Story) -> list[tuple[Any, ...]]:
    columns = ("kafka_topic", "kafka_partition", "kafka_offset", "_run_id", "_checkpoint_id", "value")
    return sorted(tuple(r) for r in spark.table(story.sink_name).select(*columns).collect())


def test_repair_replays_the_gap_and_removes_the_copy_in_one_snapshot_each_once_and_rolls_back(
    spark: SparkSession, story: Story, capsys: pytest.CaptureFixture[str]
) -> None:
    common = options(story)
    gap = story.incidents["iceberg"]["gap"].incident_id
    history = snapshots(spark, story)
    code, done = cli_json(capsys, "repair", "--incident", gap, "--execute", *common)
    (replayed,) = done["actions"]
    assert (code, done["incident_updated"], replayed["records_appended"]) == (0, True, 1)
    after_replay = snapshots(spark, story)
    assert after_replay[:-1] == history  # one snapshot
    assert replayed["version_after"] == replayed["version_before"] + 1
    assert done["undo"] == [
        f"CALL {story.catalog}.system.rollback_to_snapshot('{NAMESPACE}.{TABLE}', {history[-1]})"
    ]
    value = (
        spark.table(story.sink_name).where(F.col("kafka_offset") == 7).select("value", "_run_id").collect()
    )
    assert [(r.value, r._run_id) for r in value] == [(b"v7", f"repair-{gap}")]
    stored_incidents = incidents_version(story.iceberg)
    code, again = cli_json(capsys, "repair", "--incident", gap, "--execute", *common)
    assert (code, again["actions"][0]["records_appended"], again["undo"]) == (0, 0, [])
    assert (snapshots(spark, story), incidents_version(story.iceberg)) == (after_replay, stored_incidents)

    dup = story.incidents["iceberg"]["second_writer"].incident_id
    before = sink_rows(spark, story)
    code, removed = cli_json(capsys, "repair", "--incident", dup, "--execute", *common)
    (deleted,) = removed["actions"]
    assert (code, deleted["copies_deleted"]) == (0, 1)
    after_removal = snapshots(spark, story)
    assert after_removal[:-1] == after_replay  # one snapshot
    rows = sink_rows(spark, story)
    assert len(rows) == len(before) - 1 == RECORDS
    assert [r for r in rows if r[3] == SECOND_WRITER] == []  # the first writer's copy stays
    code, twice = cli_json(capsys, "repair", "--incident", dup, "--execute", *common)
    assert (code, twice["actions"][0]["copies_deleted"], twice["undo"]) == (0, 0, [])
    assert snapshots(spark, story) == after_removal

    # Both incidents resolved: the same window judged again holds neither gap nor copy.
    result = reconcile(spark, story.iceberg, story.bootstrap, "rec-2", datetime.now(UTC), story.base)
    assert result.partitions == 1  # the whole story was judged again
    assert {t for t, _ in result.counts} & {"GAP", "DUPLICATE"} == set()

    # The printed rollback takes the table back to before the removal: the copy is there again.
    spark.sql(removed["undo"][0])
    assert sink_rows(spark, story) == before
    spark.sql(f"CALL {story.catalog}.system.set_current_snapshot('{NAMESPACE}.{TABLE}', {after_removal[-1]})")
    assert len(sink_rows(spark, story)) == RECORDS


def test_the_owners_compaction_and_snapshot_expiry_bring_no_finding(
    spark: SparkSession, story: Story
) -> None:
    now = datetime.now(UTC)
    before = reconcile(spark, story.iceberg, story.bootstrap, "rec-3", now, story.base)
    table, every_file = f"{NAMESPACE}.{TABLE}", "map('min-input-files', '2')"
    (compacted,) = spark.sql(
        f"CALL {story.catalog}.system.rewrite_data_files(table => '{table}', options => {every_file})"
    ).collect()
    assert compacted.rewritten_data_files_count > 1
    spark.sql(
        f"CALL {story.catalog}.system.expire_snapshots(table => '{table}', "
        f"older_than => TIMESTAMP '{datetime.now(UTC):%Y-%m-%d %H:%M:%S.%f}', retain_last => 1)"
    )
    assert len(snapshots(spark, story)) == 1
    after = reconcile(spark, story.iceberg, story.bootstrap, "rec-4", now + timedelta(seconds=1), story.base)
    assert after.partitions == before.partitions == 1
    assert after.counts == before.counts
    assert {t for t, _ in after.counts} & {"GAP", "DUPLICATE", "SINK_BEYOND_CHECKPOINT"} == set()


def test_a_snapshot_the_users_job_commits_is_read_at_once(spark: SparkSession, story: Story) -> None:
    """The user's job commits through its own catalog (another process); the audit's session has
    read the table before: its next read sees the new snapshot, not the table its catalog cached
    (a completed batch read from a stale snapshot would be a false GAP)."""
    sink = AuditTables.from_config(story.iceberg, spark).sink
    before = sink.load().count()
    spark.catalog.refreshTable(story.job_table)
    late = spark.table(story.job_table).where(F.col("kafka_offset") == 0)
    late.withColumn("_run_id", F.lit("the-job")).writeTo(story.job_table).append()
    assert sink.load().count() == before + 1
