"""Driver-side Delta writes (findings MERGE, appends, deletes) through delta-rs: Spark must read
what they leave as its own rows, and they must work on a table Spark created (deployments whose
audit tables Spark wrote before)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from app.contracts.tables import AUDIT_RUNS_SCHEMA, FINDINGS_SCHEMA
from app.storage import delta_rows
from tests.support.ledger_data import finding_row

pytestmark = pytest.mark.spark

T1 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T2 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def read(spark: SparkSession, path: str) -> dict[str, tuple[Any, ...]]:
    """finding_id -> (run, detected_at in UTC as text, status, record_count), as Spark reads them."""
    rows = (
        spark.read.format("delta")
        .load(path)
        .selectExpr(
            "finding_id", "reconcile_run_id", "cast(detected_at as string) d", "status", "record_count"
        )
        .collect()
    )
    return {r.finding_id: (r.reconcile_run_id, r.d, r.status, r.record_count) for r in rows}


@pytest.mark.parametrize("created_by", ["delta-rs", "spark"])
def test_merge_keeps_the_first_detection_and_updates_the_rest(
    spark: SparkSession, tmp_path: Path, created_by: str
) -> None:
    path = str(tmp_path / "findings")
    if created_by == "spark":
        spark.createDataFrame([], FINDINGS_SCHEMA).write.format("delta").save(path)

    def write(rows: list[dict[str, Any]]) -> None:
        delta_rows.merge_rows(spark, path, FINDINGS_SCHEMA, rows, "finding_id", keep=("detected_at",))

    write([finding_row("a", "rec-1", T1), finding_row("b", "rec-1", T1)])
    write([finding_row("a", "rec-2", T2, status="confirmed", record_count=6), finding_row("c", "rec-2", T2)])
    write([])  # nothing to merge: no commit

    assert read(spark, path) == {
        "a": ("rec-2", "2026-03-01 12:00:00", "confirmed", 6),
        "b": ("rec-1", "2026-03-01 12:00:00", "open", 5),
        "c": ("rec-2", "2026-03-02 12:00:00", "open", 5),
    }
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert len(history) == 3  # creation and two merges; the empty merge commits nothing
    schema = spark.read.format("delta").load(path).schema
    assert [(f.name, f.dataType) for f in schema] == [(f.name, f.dataType) for f in FINDINGS_SCHEMA]


def test_append_rows_places_naive_spark_times_in_local_time(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "audit_runs")
    # What a Spark collect hands back for T1: a naive local time.
    naive = spark.createDataFrame([(T1,)], "t timestamp").collect()[0].t
    row = dict(
        run_id="rec-1",
        command="reconcile",
        jobs="[]",
        window_start=naive,
        window_end=T2,
        started_at=T2,
        finished_at=T2,
        status="succeeded",
        ledger_version=3,
    )
    assert set(row) == set(AUDIT_RUNS_SCHEMA.fieldNames())
    delta_rows.append_rows(spark, path, AUDIT_RUNS_SCHEMA, [row])
    back = spark.read.format("delta").load(path).selectExpr("cast(window_start as string) s").collect()
    assert [r.s for r in back] == ["2026-03-01 12:00:00"]


def test_read_columns_and_delete_where_in(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "findings")
    assert delta_rows.read_columns(spark, path, ["finding_id"]) is None  # no table yet
    rows = [finding_row(i, f"rec-{i}", T1) for i in ("a", "b", "c'd")]
    delta_rows.merge_rows(spark, path, FINDINGS_SCHEMA, rows, "finding_id")
    delta_rows.delete_where_in(spark, path, "reconcile_run_id", ["rec-b", "rec-c'd", "rec-none"])
    delta_rows.delete_where_in(spark, path, "reconcile_run_id", [])  # nothing to delete: no commit
    got = delta_rows.read_columns(spark, path, ["finding_id", "reconcile_run_id"])
    assert got == [{"finding_id": "a", "reconcile_run_id": "rec-a"}]
    assert len(spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()) == 3
