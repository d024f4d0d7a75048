"""One SQL text, run by either engine: DuckDB over Arrow in the driver, or Spark SQL over DataFrames.

Every rule of the check (which rows a night reads, and the frames the suites validate) is written
once, as SQL that Spark 4.1 and DuckDB 2.0 both accept, and ``run`` executes it wherever its tables
are: Arrow tables or datasets (read by delta-rs) go to an in-process DuckDB, Spark DataFrames to
``spark.sql`` on their session. Which engine a table gets is ``app.routes.check_route``'s choice; the
rule cannot differ between them. The dialects' few differences are bridged here, once:

- parameters are written ``:name`` (Spark's named markers); DuckDB is handed them as ``$name``.
  Spark binds them in its analyzer (``spark.sql.legacy.parameterSubstitution.constantsOnly``, set
  where the session is made, ``app.runtime.spark``), since Delta's SQL parser drops the markers
  Spark 4.1 binds while parsing;
- ``get_json_object(json, path)`` is Spark's function; DuckDB gets a macro of that name that, like
  Spark, yields null for text that is not JSON (DuckDB's own ``json_extract_string`` would raise);
- identifiers that are keywords (``offset``, ``partition``) are quoted with backticks, which both
  accept, and ``CAST(x AS STRING)`` is DuckDB's VARCHAR;
- a timestamp parameter is compared as ``CAST(:name AS TIMESTAMP)``: both sessions run in UTC,
  where Spark's TIMESTAMP (an instant) and DuckDB's (a UTC wall time, compared with a
  TIMESTAMPTZ column through the session's zone) name the same instant;
- a table is named in the text; on Spark each DataFrame is a temporary view of that name while the
  text is analysed (the resulting DataFrame keeps the analysed plan, so the view is dropped at once).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

import pyarrow as pa
import pyarrow.dataset
from pyspark.sql import DataFrame

from app.errors import SchemaMismatchError

# What the driver's engine reads: a table in memory, or a dataset it scans with the filters pushed
# down (a Delta table's partitions and row groups).
ArrowInput: TypeAlias = pa.Table | pyarrow.dataset.Dataset
# A table either engine runs a query over; a query's result is Arrow or a DataFrame, by engine.
Relation: TypeAlias = ArrowInput | DataFrame

# `:name`, not a `::` cast; looked for outside string literals only ('12:30' names nothing).
_MARKER: Final = re.compile(r"(?<![\w:]):([A-Za-z_]\w*)")
_STRING_LITERAL: Final = re.compile(r"'(?:[^'\\]|\\.)*'")

# Spark's get_json_object on DuckDB: null for invalid JSON, the value's text otherwise (a nested
# object or array as its JSON), like Spark's.
_DUCKDB_MACROS: Final = (
    "CREATE MACRO get_json_object(j, p) AS CASE WHEN json_valid(j) THEN json_extract_string(j, p) END",
)


def column_list(columns: tuple[str, ...] | list[str]) -> str:
    """Columns for a select list, each quoted so a keyword (``offset``) is a name in both dialects."""
    return ", ".join(f"`{c}`" for c in columns)


def _outside_literals(sql: str) -> list[tuple[str, bool]]:
    """``sql`` cut into (text, is_literal) pieces."""
    pieces, start = [], 0
    for literal in _STRING_LITERAL.finditer(sql):
        pieces += [(sql[start : literal.start()], False), (literal.group(), True)]
        start = literal.end()
    return [*pieces, (sql[start:], False)]


def markers(sql: str) -> set[str]:
    """The parameter names ``sql`` uses."""
    return {name for text, literal in _outside_literals(sql) if not literal for name in _MARKER.findall(text)}


def duckdb_text(sql: str) -> str:
    """``sql`` with DuckDB's parameter markers (``$name``) for Spark's (``:name``)."""
    return "".join(
        text if literal else _MARKER.sub(lambda m: f"${m.group(1)}", text)
        for text, literal in _outside_literals(sql)
    )


def _params(sql: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters ``sql`` names, every one of them given: a missing one is a bug here, not a
    null, and neither engine accepts values for markers the text lacks."""
    names = markers(sql)
    missing = names - params.keys()
    if missing:
        raise ValueError(f"no value for the parameters {sorted(missing)} of: {sql.strip()[:200]}")
    return {n: params[n] for n in names}


def require(table: Relation, columns: Iterable[str], name: str) -> None:
    """Fail early, naming the table and the missing columns, instead of deep inside a query."""
    have = list(table.columns) if isinstance(table, DataFrame) else list(table.schema.names)
    missing = [c for c in columns if c not in have]
    if missing:
        raise SchemaMismatchError(f"{name} lacks required columns {missing}; has {have}")


def _duckdb() -> Any:
    import duckdb

    db = duckdb.connect(":memory:")
    db.execute("SET TimeZone = 'UTC'")  # timestamps compare and come back as in Spark's UTC session
    for macro in _DUCKDB_MACROS:
        db.execute(macro)
    return db


def on_driver(sql: str, tables: Mapping[str, ArrowInput], params: Mapping[str, Any]) -> pa.Table:
    """``sql`` in an in-process DuckDB over Arrow ``tables`` (by name); Arrow back."""
    db = _duckdb()
    try:
        for name, table in tables.items():
            db.register(name, table)
        out: pa.Table = db.sql(duckdb_text(sql), params=_params(sql, params)).to_arrow_table()
        return out
    finally:
        db.close()


def on_spark(sql: str, tables: Mapping[str, DataFrame], params: Mapping[str, Any]) -> DataFrame:
    """``sql`` on the session of the DataFrames ``tables`` (by name); a DataFrame back, not run yet."""
    spark = next(iter(tables.values())).sparkSession
    for name, df in tables.items():
        df.createOrReplaceTempView(name)
    try:
        return spark.sql(sql, args=_params(sql, params))
    finally:
        for name in tables:
            spark.catalog.dropTempView(name)


def run(sql: str, tables: Mapping[str, Relation], params: Mapping[str, Any] | None = None) -> Relation:
    """``sql`` on the engine its tables belong to: DuckDB for Arrow, Spark for DataFrames."""
    values = params or {}
    frames = {name: t for name, t in tables.items() if isinstance(t, DataFrame)}
    if not frames:
        return on_driver(sql, tables, values)
    if len(frames) < len(tables):
        raise ValueError(f"one engine per query: the tables {sorted(tables)} mix Arrow and Spark")
    return on_spark(sql, frames, values)
