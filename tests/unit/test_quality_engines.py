"""One SQL text for both engines: the driver's DuckDB takes the text as Spark would (named
parameters, get_json_object, backquoted keywords, CAST AS STRING), so a rule needs no second spelling."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from app.errors import SchemaMismatchError
from app.quality import engines

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def events() -> pa.Table:
    return pa.table(
        {
            "offset": pa.array([5, None], pa.int64()),
            "partition": pa.array([0, 1], pa.int32()),
            "detail": ['{"reason": "timeout", "attempt": 2, "nested": {"a": 1}}', "{not json"],
            "event_time": pa.array([T0, T0 + timedelta(hours=1)], pa.timestamp("us", tz="UTC")),
        }
    )


def test_parameters_are_written_as_spark_names_them_and_bound_by_duckdb() -> None:
    out = engines.on_driver(
        "SELECT `partition`, CAST(`offset` AS STRING) AS o FROM t WHERE `partition` = :p OR :everything",
        {"t": events()},
        {"p": 1, "everything": False, "unused": "not passed on"},
    )

    assert out.to_pylist() == [{"partition": 1, "o": None}]


def test_a_timestamp_parameter_compares_as_the_same_instant_whatever_its_zone() -> None:
    east = timezone(timedelta(hours=2))
    sql = "SELECT count(*) AS n FROM t WHERE event_time >= CAST(:since AS TIMESTAMP)"

    at_noon_utc = engines.on_driver(sql, {"t": events()}, {"since": T0.astimezone(east)})
    after_noon = engines.on_driver(sql, {"t": events()}, {"since": T0 + timedelta(seconds=1)})
    no_since = engines.on_driver(
        "SELECT CAST(:since AS TIMESTAMP) IS NULL AS whole FROM t LIMIT 1", {"t": events()}, {"since": None}
    )

    assert at_noon_utc.to_pylist() == [{"n": 2}]
    assert after_noon.to_pylist() == [{"n": 1}]
    assert no_since.to_pylist() == [{"whole": True}]


def test_get_json_object_gives_the_value_as_text_and_null_for_text_that_is_not_json() -> None:
    fields = ("reason", "attempt", "nested", "none")
    sql = "SELECT " + ", ".join(f"get_json_object(detail, '$.{f}') AS {f}" for f in fields) + " FROM t"

    out = engines.on_driver(sql, {"t": events()}, {})

    assert out.to_pylist() == [
        {"reason": "timeout", "attempt": "2", "nested": '{"a":1}', "none": None},
        {"reason": None, "attempt": None, "nested": None, "none": None},
    ]


def test_a_missing_parameter_is_named_instead_of_read_as_null() -> None:
    with pytest.raises(ValueError, match=r"\['since'\]"):
        engines.on_driver(
            "SELECT * FROM t WHERE event_time >= CAST(:since AS TIMESTAMP)", {"t": events()}, {}
        )


def test_markers_are_neither_casts_nor_text_in_string_literals() -> None:
    sql = "SELECT x::BIGINT, '12:30 :quoted' AS t, :run_id AS r, 'it\\'s :too' AS s"

    assert engines.markers(sql) == {"run_id"}
    assert (
        engines.duckdb_text(sql) == "SELECT x::BIGINT, '12:30 :quoted' AS t, $run_id AS r, 'it\\'s :too' AS s"
    )


def test_required_columns_are_named_for_arrow_tables() -> None:
    with pytest.raises(SchemaMismatchError, match=r"ledger lacks required columns \['run_id'\]"):
        engines.require(events(), ["partition", "run_id"], "ledger")
