"""What a repair writes to an Iceberg sink, without a JVM: the transaction id its snapshot carries
and how a rerun finds it (only in the table's current history), the one MERGE that replaces the
rows of a predicate, the rollback that undoes it, and a sink addressed by path refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from app.config import IcebergCatalogConfig, IcebergConfig
from app.contracts.tables import TABLE_CONTRACTS
from app.routes import SPARK
from app.storage.handles import IcebergHandle, ReadOnlySinkError
from app.storage.iceberg import parse_snapshot_log
from app.storage.iceberg_writes import (
    ROLE_DELETE,
    SOURCE_PREFIX,
    SOURCE_ROLE,
    committed_txn,
    replace_sql,
    rollback_statement,
    txn_options,
)

pytestmark = pytest.mark.unit

APP = "offset-audit/repair/inc-1/replay"


def snap(sid: int, parent: int | None, seq: int, **summary: str) -> dict[str, object]:
    """One snapshot of a table's metadata JSON, ``seq`` seconds after noon."""
    ms = int(datetime(2026, 3, 1, 12, 0, seq, tzinfo=UTC).timestamp() * 1000)
    return {
        "snapshot-id": sid,
        "parent-snapshot-id": parent,
        "sequence-number": seq,
        "timestamp-ms": ms,
        "summary": {"operation": "append", **summary},
    }


def metadata(snapshots: list[dict[str, object]], current: int) -> dict[str, object]:
    log = [{"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]} for s in snapshots]
    return {"format-version": 2, "current-snapshot-id": current, "snapshots": snapshots, "snapshot-log": log}


def test_the_transaction_id_goes_into_the_snapshot_summary_as_lower_case_properties() -> None:
    assert txn_options(APP, 0) == {
        "snapshot-property.offset-audit.txn-app-id": APP,
        "snapshot-property.offset-audit.txn-version": "0",
    }
    assert all(k == k.lower() for k in txn_options(APP, 3))  # as Spark hands write options on


def test_a_rerun_finds_the_replay_in_the_current_history_and_not_once_rolled_back() -> None:
    replay = {"offset-audit.txn-app-id": APP, "offset-audit.txn-version": "0"}
    snaps = [snap(10, None, 1), snap(20, 10, 2, **replay), snap(30, 20, 3)]
    log = parse_snapshot_log(json.dumps(metadata(snaps, current=30)), "m.json")
    assert committed_txn(log, APP, 0) == 20
    assert committed_txn(log, APP, 1) is None  # a later version of the same id is not written
    assert committed_txn(log, "offset-audit/repair/other/replay", 0) is None
    # Spark may keep the case the writer gave: the keys are read lower-cased.
    upper = {"Offset-Audit.Txn-App-Id": APP, "Offset-Audit.Txn-Version": "2"}
    log = parse_snapshot_log(json.dumps(metadata([snap(10, None, 1, **upper)], current=10)), "m.json")
    assert committed_txn(log, APP, 2) == 10
    # Rolled back (the printed undo): the table no longer holds the replay, a rerun writes it again.
    rolled = [snap(10, None, 1), snap(20, 10, 2, **replay), snap(40, 10, 4)]
    log = parse_snapshot_log(json.dumps(metadata(rolled, current=40)), "m.json")
    assert committed_txn(log, APP, 0) is None


def test_one_merge_deletes_what_the_predicate_selects_and_inserts_the_kept_rows() -> None:
    sql = replace_sql("lake.sales.orders", ["kafka_offset", "value"], "kafka_offset >= 30", "src")
    assert sql == (
        "MERGE INTO lake.sales.orders t USING src s "
        f"ON s.{SOURCE_ROLE} = '{ROLE_DELETE}' AND (kafka_offset >= 30) "
        "WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED THEN INSERT (`kafka_offset`, `value`) "
        f"VALUES (s.`{SOURCE_PREFIX}kafka_offset`, s.`{SOURCE_PREFIX}value`)"
    )


def test_the_undo_is_a_rollback_to_the_snapshot_before() -> None:
    assert rollback_statement("lake", "sales", "orders", 42) == (
        "CALL lake.system.rollback_to_snapshot('sales.orders', 42)"
    )


def handle(location: str) -> IcebergHandle:
    catalogs = IcebergConfig({"lake": IcebergCatalogConfig(type="hadoop", warehouse="/wh")})
    return IcebergHandle(TABLE_CONTRACTS["sink"], location, None, SPARK, catalogs)


def test_a_sink_addressed_by_path_gets_the_plan_only_and_its_writes_are_refused() -> None:
    assert handle("iceberg:lake.sales.orders").repair_refusal() is None
    refusal = handle("/wh/sales/orders").repair_refusal()
    assert refusal is not None
    assert "iceberg:<catalog>.<namespace>.<table>" in refusal
    with pytest.raises(ReadOnlySinkError):
        handle("/wh/sales/orders").replace_where([], "true")
