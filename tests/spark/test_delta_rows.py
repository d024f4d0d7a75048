"""Driver-side Delta writes (findings MERGE, appends): delta-rs on local paths, Spark elsewhere.
Both writers must leave the same rows in the same table, and each must work on a table the other
created."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from app.contracts.tables import AUDIT_RUNS_SCHEMA, FINDINGS_SCHEMA
from app.storage import backend, delta_rows

pytestmark = pytest.mark.spark

T1 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T2 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def finding(finding_id: str, run: str, detected_at: datetime, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {f.name: None for f in FINDINGS_SCHEMA.fields}
    row.update(
        finding_id=finding_id,
        reconcile_run_id=run,
        detected_at=detected_at,
        finding_type="GAP",
        severity="critical",
        status="open",
        topic="orders",
        partition=0,
        offset_start=10,
        record_count=5,
        evidence="{}",
    )
    row.update(kw)
    return row


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


@pytest.mark.parametrize("first_local", [True, False])
def test_merge_keeps_the_first_detection_and_updates_the_rest_whichever_writer(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_local: bool
) -> None:
    path = str(tmp_path / "findings")

    def write(local: bool, rows: list[dict[str, Any]]) -> None:
        # Which writer runs is chosen by the path's scheme; a local path stands in for remote
        # storage here by flipping that choice, so both writers meet on one real table.
        monkeypatch.setattr(backend, "is_local_path", lambda _p: local)
        delta_rows.merge_rows(spark, path, FINDINGS_SCHEMA, rows, "finding_id", keep=("detected_at",))

    write(first_local, [finding("a", "rec-1", T1), finding("b", "rec-1", T1)])
    write(
        not first_local,
        [finding("a", "rec-2", T2, status="confirmed", record_count=6), finding("c", "rec-2", T2)],
    )
    write(first_local, [])  # nothing to merge: no commit

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
    )
    assert set(row) == set(AUDIT_RUNS_SCHEMA.fieldNames())
    delta_rows.append_rows(spark, path, AUDIT_RUNS_SCHEMA, [row])
    back = spark.read.format("delta").load(path).selectExpr("cast(window_start as string) s").collect()
    assert [r.s for r in back] == ["2026-03-01 12:00:00"]


@pytest.mark.parametrize("local", [True, False])
def test_read_columns_and_delete_where_in_work_on_either_writer(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local: bool
) -> None:
    path = str(tmp_path / "findings")
    monkeypatch.setattr(backend, "is_local_path", lambda _p: local)
    assert delta_rows.read_columns(spark, path, ["finding_id"]) is None  # no table yet
    rows = [finding(i, f"rec-{i}", T1) for i in ("a", "b", "c'd")]
    delta_rows.merge_rows(spark, path, FINDINGS_SCHEMA, rows, "finding_id")
    delta_rows.delete_where_in(spark, path, "reconcile_run_id", ["rec-b", "rec-c'd", "rec-none"])
    delta_rows.delete_where_in(spark, path, "reconcile_run_id", [])  # nothing to delete: no commit
    got = delta_rows.read_columns(spark, path, ["finding_id", "reconcile_run_id"])
    assert got == [{"finding_id": "a", "reconcile_run_id": "rec-a"}]
    assert len(spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()) == 3
