"""The completeness statistics of a `coordinates` sink's windows: Spark's executors, each task over
whole windows, give exactly the rows the driver gives over the same rows
(app.reconcile.completeness.stats)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from app.reconcile.completeness.stats import ROWS_SCHEMA, StatsPlan, window_stats, window_stats_by_spark

pytestmark = pytest.mark.spark


def test_the_executors_give_the_driver_rows_whatever_the_tasks(spark: SparkSession) -> None:
    # 6 windows of 50 offsets, each with a hole, two copies, and a record without timestamp.
    rows = [
        (w, o, None if o % 17 == 0 else 1_000 * o)
        for w in range(6)
        for o in range(100 * w, 100 * w + 50)
        if o % 50 != 25
    ]
    rows += [(w, 100 * w + 3, 5) for w in range(6)]
    plans = [
        StatsPlan(100 * w + 40, ((-1, 100 * w + 30, 900_000), (100 * w + 30, 10_000, 990_000)))
        for w in range(6)
    ]
    table = pa.table({n: [r[i] for r in rows] for i, n in enumerate(ROWS_SCHEMA.names)}, schema=ROWS_SCHEMA)
    on_driver = sorted(window_stats(table, plans).to_pylist(), key=lambda r: r["w"])
    frame = spark.createDataFrame(rows, "_w int, _offset long, _ts_ms long")
    for tasks in (1, 4):
        by_spark = sorted(
            window_stats_by_spark(frame, plans, tasks).toArrow().to_pylist(), key=lambda r: r["w"]
        )
        assert by_spark == on_driver
    assert [r["landed"] for r in on_driver] == [49] * 6
    assert [r["rows"] for r in on_driver] == [50] * 6
