"""An Iceberg sink in a SQL catalog (sqlite, through pyiceberg, no JVM) is found by its catalog
address and by its directory's path alike, and its snapshots read as the batches they carry."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from app.storage.handles import AuditTables
from app.storage.tables import tables_from_config
from tests.support.config import build_config

pytestmark = pytest.mark.unit


def test_a_sql_catalog_table_reads_by_address_and_by_path(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    uri, warehouse = f"sqlite:///{tmp_path / 'catalog.db'}", str(tmp_path / "wh")
    catalog = SqlCatalog("meta", uri=uri, warehouse=f"file://{warehouse}")
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.orders", schema=pa.schema([("id", pa.int64())]))
    for epoch in (0, 1):
        table.append(
            pa.table({"id": [epoch]}),
            snapshot_properties={
                "spark.sql.streaming.queryId": "q",
                "spark.sql.streaming.epochId": str(epoch),
            },
        )
    cfg = build_config(
        "iceberg.catalogs.meta.type=sql",
        f"iceberg.catalogs.meta.uri={uri}",
        f"iceberg.catalogs.meta.warehouse=file://{warehouse}",
        "tables.sink=iceberg:meta.sales.orders",
        f"tables.sink_by_job.by_path={table.location().removeprefix('file://')}",
        data_dir=tmp_path,
    )
    audit = AuditTables(tables_from_config(cfg), None)
    for handle in (audit.sink, audit.sink_for("by_path")):
        log = handle.sink_log()
        assert log is not None
        assert [c.txns for c in log.commits] == [(("q", 0),), (("q", 1),)]
        assert [c.rows_added for c in log.commits] == [1, 1]
        assert handle.holds_txn_of("q") is True
        assert handle.version() == 2
