"""A time without a zone is a UTC wall time wherever the application meets one, whatever the
machine's zone: written to a table, read back from DuckDB, or given on the command line."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from app.commands.options import parse_time
from app.contracts.instants import instant
from app.reconcile.ledger.sql import aware_rows
from app.storage import delta_rows

pytestmark = pytest.mark.unit

NAIVE = datetime(2026, 3, 1, 12, 30)
AT = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)


@pytest.fixture
def far_from_utc() -> Iterator[None]:
    """The process in a zone nine hours from UTC, as a machine outside UTC would be."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_a_naive_time_is_utc_and_an_aware_one_is_kept(far_from_utc: None) -> None:
    assert instant(NAIVE) == AT
    tokyo = AT.astimezone()
    assert instant(tokyo) is tokyo
    assert instant("2026-03-01") == "2026-03-01"


def test_a_naive_time_written_to_a_table_is_read_back_as_the_same_utc_instant(
    far_from_utc: None, tmp_path: Path
) -> None:
    schema = StructType([StructField("run_id", StringType()), StructField("finished_at", TimestampType())])
    path = str(tmp_path / "runs")
    delta_rows.append_rows(None, path, schema, [{"run_id": "naive", "finished_at": NAIVE}])
    delta_rows.append_rows(None, path, schema, [{"run_id": "aware", "finished_at": AT}])
    rows = delta_rows.read_columns(None, path, ["run_id", "finished_at"]) or []
    assert {r["run_id"]: r["finished_at"] for r in rows} == {"naive": AT, "aware": AT}


def test_duckdbs_wall_times_and_the_command_lines_are_utc(far_from_utc: None) -> None:
    row = duckdb.connect().execute("SELECT TIMESTAMP '2026-03-01 12:30:00' AS t").fetchall()[0]
    assert aware_rows([{"t": row[0]}]) == [{"t": AT}]
    assert parse_time("2026-03-01T12:30:00") == AT
    assert parse_time("2026-03-01T21:30:00+09:00") == AT
