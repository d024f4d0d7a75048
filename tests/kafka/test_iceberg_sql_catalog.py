"""An Iceberg sink in a SQL catalog (a sqlite database), audited through the application's own Spark
session, against a real broker: Spark reaches such a catalog only through its JDBC driver, which
must be on the audit's classpath (conf/jvm/spark/pom.xml).

The table is created and written through the catalog by Spark, as a user's Spark job does, lacking
offset 3 and holding offset 6 twice; `coordinates` mode finds both at their offsets, and `repair
--execute` replays the gap in one snapshot that the catalog then lists. Beside it, a catalog
database that pyiceberg created (the driver-side reader's library, which creates it in the
schema-version V1 layout while Iceberg's JDBC catalog creates V0) is read by Spark the same way."""

from __future__ import annotations

import json
import sqlite3
import uuid
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app import cli
from app.config import AppConfig
from app.contracts.offsets import EventSource, LedgerEvent
from app.contracts.tables import LEDGER_SCHEMA
from app.kafka.clients import spark_kafka_options
from app.kafka.gaps import kafka_gap_confirmer
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.runtime.spark import catalog_conf
from app.stream.startup import to_sink_rows
from tests.support.config import build_config, set_options
from tests.support.ledger_data import contract_table
from tests.support.reconcile import read, save
from tests.support.streaming import create_topic, produce

# A broker (the sink's records), Spark reading and repairing the sink through the SQL catalog.
pytestmark = [pytest.mark.kafka, pytest.mark.spark]

JOB, GROUP, RUN = "orders-job", "orders-group", "run-1"
RECORDS, MISSING, TWICE = 10, 3, 6
NAMESPACE, TABLE = "sales", "orders"


@dataclass
class Story:
    cfg: AppConfig
    options: list[str]  # the same configuration as a command line's --set options
    catalog: str
    sink_name: str  # <catalog>.<ns>.<table>, as Spark SQL names it
    incidents: dict[str, str]  # incident id by kind


def catalog_settings(name: str, root: Path) -> list[str]:
    """Catalog ``name``: a sqlite database and a warehouse under ``root``."""
    return [
        f"iceberg.catalogs.{name}.type=sql",
        f"iceberg.catalogs.{name}.uri=sqlite:///{root / 'catalog.db'}",
        f"iceberg.catalogs.{name}.warehouse={root / 'warehouse'}",
    ]


def register(spark: SparkSession, cfg: AppConfig) -> None:
    """The configured catalogs in the running session, as every session the application starts has them."""
    for name, catalog in cfg.iceberg.catalogs.items():
        for key, value in catalog_conf(name, catalog).items():
            spark.conf.set(key, value)


def ledger(topic: str, started: datetime) -> list[dict[str, Any]]:
    """A run restored at offset 0 whose checkpoint 1 completes at offset RECORDS."""
    src = EventSource(JOB, RUN, "spark", GROUP)
    done = started + timedelta(minutes=5)
    events: list[LedgerEvent] = [src.event("RUN_STARTED", started, None, {})]
    events += src.partition_events("OFFSETS_RESTORED", started, None, {(topic, 0): 0}, {"source": "earliest"})
    events += src.partition_events(
        "CHECKPOINT_SNAPSHOT", done - timedelta(seconds=1), 1, {(topic, 0): RECORDS}, {}
    )
    events += src.partition_events("CHECKPOINT_COMPLETED", done, 1, {(topic, 0): RECORDS}, {})
    events.append(src.event("RUN_STOPPED", done + timedelta(seconds=30), None, {}))
    return [e.to_row() for e in events]


@pytest.fixture(scope="module")
def story(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, bootstrap: str) -> Story:
    tag = uuid.uuid4().hex[:10]
    topic, catalog = f"iceberg-sql-{tag}", f"sqlcat_{tag}"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, RECORDS, 1)
    sink_name = f"{catalog}.{NAMESPACE}.{TABLE}"
    root = tmp_path_factory.mktemp("iceberg-sql")
    items = [
        *catalog_settings(catalog, root),
        f"tables.sink=iceberg:{sink_name}",
        f"kafka.bootstrap_servers={bootstrap}",
    ]
    cfg = build_config(*items, data_dir=root / "data")
    register(spark, cfg)

    kafka = cfg.kafka
    source = (
        spark.read.format("kafka").options(**spark_kafka_options(kafka, bootstrap)).option("subscribe", topic)
    )
    rows = to_sink_rows(source.load(), 1, RUN)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{NAMESPACE}")
    rows.where(F.col("kafka_offset") != MISSING).writeTo(sink_name).create()
    rows.where(F.col("kafka_offset") == TWICE).withColumn("_run_id", F.lit("second-writer")).writeTo(
        sink_name
    ).append()
    now = datetime.now(UTC)
    save(contract_table(LEDGER_SCHEMA, ledger(topic, now - timedelta(minutes=30))), cfg, "ledger")

    result = run_reconcile(
        spark,
        cfg,
        AuditRun(run_id="rec-1", now=now, since=None, until=now),
        confirmer=kafka_gap_confirmer(kafka, bootstrap, max_records=1000, timeout_s=60),
    )
    options = set_options(*items, data_dir=root / "data")
    return Story(cfg, options, catalog, sink_name, {i.kind: i.incident_id for i in result.incidents})


def catalog_snapshots(story: Story) -> list[int]:
    """The table's snapshot ids, oldest first, as the catalog lists them to another client (pyiceberg)."""
    from pyiceberg.catalog.sql import SqlCatalog

    config = story.cfg.iceberg.catalogs[story.catalog]
    catalog = SqlCatalog(story.catalog, uri=config.uri, warehouse=config.warehouse)
    return [s.snapshot_id for s in catalog.load_table(f"{NAMESPACE}.{TABLE}").snapshots()]


def catalog_columns(cfg: AppConfig, name: str) -> set[str]:
    """The columns of the catalog database's table of tables: `iceberg_type` is the V1 layout's."""
    path = cfg.iceberg.catalogs[name].uri.removeprefix("sqlite:///")
    with closing(sqlite3.connect(path)) as db:
        return {row[1] for row in db.execute("PRAGMA table_info(iceberg_tables)")}


def test_a_sql_catalog_sink_is_reconciled_and_repaired_through_the_audits_spark_session(
    spark: SparkSession, story: Story, capsys: pytest.CaptureFixture[str]
) -> None:
    findings = read(spark, story.cfg, "findings").collect()
    assert {(f.finding_type, f.offset_start, f.offset_end, f.record_count) for f in findings} >= {
        ("GAP", MISSING, MISSING + 1, 1),
        ("DUPLICATE", TWICE, TWICE + 1, 1),
    }

    history = catalog_snapshots(story)
    gap = story.incidents["gap"]
    code = cli.main(["repair", "--incident", gap, "--execute", *story.options, "--json"])
    done = json.loads(capsys.readouterr().out)
    assert (code, [a["records_appended"] for a in done["actions"]]) == (0, [1])
    assert catalog_snapshots(story)[:-1] == history  # one snapshot more
    replayed = spark.table(story.sink_name).where(F.col("kafka_offset") == MISSING).select("value", "_run_id")
    assert [(r.value, r._run_id) for r in replayed.collect()] == [
        (f"record-{MISSING}".encode(), f"repair-{gap}")
    ]
    # The job's catalog created the V0 layout; the audit read and wrote it as it is, never migrating it.
    assert "iceberg_type" not in catalog_columns(story.cfg, story.catalog)


def test_a_catalog_database_pyiceberg_created_is_read_by_spark(spark: SparkSession, tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    name = f"pycat_{uuid.uuid4().hex[:10]}"
    cfg = build_config(*catalog_settings(name, tmp_path), data_dir=tmp_path / "data")
    config = cfg.iceberg.catalogs[name]
    catalog = SqlCatalog(name, uri=config.uri, warehouse=config.warehouse)
    catalog.create_namespace(NAMESPACE)
    table = catalog.create_table(f"{NAMESPACE}.{TABLE}", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    assert "iceberg_type" in catalog_columns(cfg, name)  # the V1 layout
    register(spark, cfg)
    assert sorted(r.id for r in spark.table(f"{name}.{NAMESPACE}.{TABLE}").collect()) == [1, 2]
