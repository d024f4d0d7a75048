"""Iceberg sinks, configured once and read on the driver: the catalogs of `iceberg.catalogs`, an
address that names no catalog failing at start, the Spark catalogs of the same names, a table's
current metadata file, and its snapshot log (ancestry, rollbacks, expiry) from the metadata's JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.config import IcebergCatalogConfig, IcebergConfig, iceberg_address
from app.errors import ConfigError
from app.runtime.spark import ICEBERG_EXTENSION, catalog_conf, jdbc_uri, local_conf
from app.storage.handles import AuditTables
from app.storage.iceberg import as_sink_commit, newest_metadata, parse_snapshot_log, sink_log_of
from app.storage.tables import tables_from_config
from tests.support.config import build_config

pytestmark = pytest.mark.unit

HADOOP = ["iceberg.catalogs.lake.type=hadoop", "iceberg.catalogs.lake.warehouse=/wh"]


def config(tmp_path: Path, *overrides: str, environ: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return build_config(*overrides, data_dir=tmp_path, environ=environ)


def test_catalogs_load_once_and_a_sink_address_keeps_its_catalog(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        *HADOOP,
        "iceberg.catalogs.meta.type=sql",
        "iceberg.catalogs.meta.uri=sqlite:////tmp/catalog.db",
        "iceberg.catalogs.meta.warehouse=/wh2",
        "tables.sink=iceberg:lake.sales.orders",
        "tables.sink_by_job.pay=iceberg:meta.a.b.payments",
    )
    assert cfg.iceberg.catalogs["lake"] == IcebergCatalogConfig(type="hadoop", warehouse="/wh")
    located = tables_from_config(cfg)
    assert located.sink == "iceberg:lake.sales.orders"  # not a name under <data_dir>/tables
    assert located.sink_for("pay") == "iceberg:meta.a.b.payments"
    assert iceberg_address("iceberg:meta.a.b.payments") == ("meta", "a.b", "payments")


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["iceberg.catalogs.lake.type=hive"], "iceberg.catalogs.lake.type"),
        (["iceberg.catalogs.lake.type=hadoop"], "iceberg.catalogs.lake.warehouse"),
        (
            ["iceberg.catalogs.lake.type=sql", "iceberg.catalogs.lake.warehouse=/w"],
            "iceberg.catalogs.lake.uri",
        ),
        ([*HADOOP, "tables.sink=iceberg:other.db.t"], "tables.sink"),
        ([*HADOOP, "tables.sink_by_job.pay=iceberg:lake.t"], "tables.sink_by_job.pay"),
    ],
)
def test_a_bad_catalog_or_an_address_of_no_catalog_fails_at_start_naming_the_key(
    tmp_path: Path, overrides: list[str], key: str
) -> None:
    with pytest.raises(ConfigError) as err:
        config(tmp_path, *overrides)
    assert err.value.key == key


def test_sink_override_of_no_catalog_fails_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        tables_from_config(config(tmp_path, *HADOOP), "iceberg:nope.db.t")
    assert err.value.key == "--sink"


def test_catalog_credentials_come_from_env_and_are_never_printed(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        "iceberg.catalogs.rest.type=rest",
        "iceberg.catalogs.rest.uri=https://catalog.example",
        "iceberg.catalogs.rest.properties.token=${CATALOG_TOKEN}",
        environ={"CATALOG_TOKEN": "s3cr3t"},
    )
    assert cfg.iceberg.catalogs["rest"].properties["token"] == "s3cr3t"
    assert "s3cr3t" not in repr(cfg.iceberg)
    assert "s3cr3t" not in json.dumps(cfg.to_display(), default=str)
    in_uri = config(
        tmp_path,
        "iceberg.catalogs.pg.type=sql",
        "iceberg.catalogs.pg.uri=postgresql://audit:${PG_PASSWORD}@db:5432/catalog",
        "iceberg.catalogs.pg.warehouse=/w",
        environ={"PG_PASSWORD": "pw-123"},
    )
    assert "pw-123" not in json.dumps(in_uri.to_display(), default=str)
    assert "postgresql://audit:***@db:5432/catalog" in repr(in_uri.iceberg)


def test_every_catalog_is_a_spark_catalog_of_the_same_name_beside_delta() -> None:
    iceberg = IcebergConfig(
        {
            "lake": IcebergCatalogConfig(type="hadoop", warehouse="/wh"),
            "meta": IcebergCatalogConfig(type="sql", uri="sqlite:////var/cat.db", warehouse="/w2"),
        }
    )
    from app.config import SparkConfig

    conf = local_conf(SparkConfig(), [], "/wh", iceberg=iceberg)
    assert conf["spark.sql.extensions"].split(",") == [
        "io.delta.sql.DeltaSparkSessionExtension",
        ICEBERG_EXTENSION,
    ]
    assert conf["spark.sql.catalog.spark_catalog"].endswith("DeltaCatalog")  # Delta stays the default
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert (conf["spark.sql.catalog.lake.type"], conf["spark.sql.catalog.lake.warehouse"]) == (
        "hadoop",
        "/wh",
    )
    assert (conf["spark.sql.catalog.meta.type"], conf["spark.sql.catalog.meta.uri"]) == (
        "jdbc",
        "jdbc:sqlite:/var/cat.db",
    )
    rest = catalog_conf(
        "r", IcebergCatalogConfig(type="rest", uri="https://c", properties={"credential": "x"})
    )
    assert rest["spark.sql.catalog.r.type"] == "rest"
    assert rest["spark.sql.catalog.r.credential"] == "x"
    assert jdbc_uri("postgresql+psycopg://db:5432/cat") == "jdbc:postgresql://db:5432/cat"


def test_an_iceberg_address_opens_an_iceberg_handle_and_a_table_path_too(tmp_path: Path) -> None:
    table = tmp_path / "orders"
    (table / "metadata").mkdir(parents=True)
    (table / "metadata" / "v1.metadata.json").write_text(json.dumps(metadata([])))
    cfg = config(tmp_path, *HADOOP, "tables.sink=iceberg:lake.db.t", f"tables.sink_by_job.pay={table}")
    audit = AuditTables(tables_from_config(cfg), None)
    assert audit.sink.table_format == "iceberg"
    assert audit.sink_for("pay").table_format == "iceberg"
    assert audit.ledger.table_format == "delta"  # the audit's own tables stay Delta
    assert audit.sink_for("pay").sink_log() is not None


def test_the_current_metadata_is_the_hinted_one_else_the_newest_version() -> None:
    names = ["v1.metadata.json", "v2.metadata.json", "v3.metadata.json", "version-hint.text", "snap-1.avro"]
    assert newest_metadata(names, "2") == "v2.metadata.json"
    assert newest_metadata(names, None) == "v3.metadata.json"
    catalog_names = ["00001-aa.metadata.json", "00012-bb.metadata.json", "00003-cc.metadata.json"]
    assert newest_metadata(catalog_names, None) == "00012-bb.metadata.json"
    assert newest_metadata(["snap-1.avro"], None) is None


def ms(second: int) -> int:
    return int(datetime(2026, 3, 1, 12, 0, second, tzinfo=UTC).timestamp() * 1000)


def snap(sid: int, parent: int | None, seq: int, **summary: str) -> dict[str, object]:
    return {
        "snapshot-id": sid,
        "parent-snapshot-id": parent,
        "sequence-number": seq,
        "timestamp-ms": ms(seq),
        "summary": {"operation": "append", **summary},
    }


def metadata(snapshots: list[dict[str, object]], current: int | None = None) -> dict[str, object]:
    return {
        "format-version": 2,
        "current-snapshot-id": current if current is not None else -1,
        "snapshots": snapshots,
        "snapshot-log": [
            {"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]} for s in snapshots
        ],
    }


def test_a_rollback_takes_snapshots_out_of_the_current_history_and_keeps_them_in_the_metadata() -> None:
    snaps = [
        snap(10, None, 1),
        snap(20, 10, 2),
        snap(30, 20, 3),
        snap(40, 10, 4),
    ]  # rolled back to 10, then 40
    log = parse_snapshot_log(json.dumps(metadata(snaps, current=40)), "m.json")
    assert log.ancestry == {10, 40}
    assert log.rolled_back() == {20: 40, 30: 40}
    assert log.starts_at is None  # nothing expired: the history is complete


def test_an_expiry_dates_the_histories_start_and_is_no_rollback() -> None:
    snaps = [snap(30, 20, 3), snap(40, 30, 4)]  # 10 and 20 expired
    log = parse_snapshot_log(json.dumps(metadata(snaps, current=40)), "m.json")
    assert log.rolled_back() == {}
    assert log.starts_at == datetime(2026, 3, 1, 12, 0, 3, tzinfo=UTC)
    assert sink_log_of(log).starts_at == log.starts_at


def test_a_snapshots_summary_names_its_spark_batch_or_its_flink_checkpoint() -> None:
    streaming = snap(1, None, 1, **{"spark.sql.streaming.queryId": "q", "spark.sql.streaming.epochId": "7"})
    # A foreachBatch's snapshot-property.<key> options arrive lower-cased by Spark.
    foreach = snap(2, 1, 2, **{"spark.sql.streaming.queryid": "app", "spark.sql.streaming.epochid": "3"})
    flink = snap(
        3, 2, 3, **{"flink.job-id": "j1", "flink.operator-id": "op", "flink.max-committed-checkpoint-id": "9"}
    )
    log = parse_snapshot_log(json.dumps(metadata([streaming, foreach, flink], current=3)), "m.json")
    commits = [as_sink_commit(s) for s in log.snapshots]
    assert [c.txns for c in commits] == [(("q", 7),), (("app", 3),), ()]
    assert commits[2].flink == ("j1", "op", 9)
    assert [c.version for c in commits] == [1, 2, 3]
