"""Small Delta writes of rows computed on the driver: findings, partition summaries, run records.

A reconciliation ends with a few hundred rows to store. Through Spark each such write is a job, a
snapshot reconstruction and, for the findings, a MERGE plan: about ten seconds of a nightly run,
more than the rest of the run spends outside the sink scan. On local storage they are committed by
delta-rs (the ``deltalake`` package, as the ledger's micro-batch appends are), in milliseconds and
without a task slot; on other storage (s3a://, abfss://, ...) by Spark, whose Hadoop configuration
holds the credentials. Both write the same Delta protocol, so either reads the other's tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.dataset
from delta.tables import DeltaTable as SparkDeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from app.errors import InfrastructureError
from app.storage import backend


def _local(path: str) -> str:
    return urlparse(path).path


def instant(value: Any) -> Any:
    """Spark hands timestamps to Python as naive local times and reads naive ones back the same
    way; Arrow reads a naive time as UTC. Naive values are therefore placed in local time here."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone(UTC)
    return value


def _arrow_rows(schema: StructType, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{f.name: instant(r.get(f.name)) for f in schema.fields} for r in rows],
        schema=to_arrow_schema(schema),
    )


def local_dataset(path: str) -> pa.dataset.Dataset | None:
    """The table at a local ``path`` as an Arrow dataset (delta-rs), or None when there is none."""
    from deltalake import DeltaTable

    try:
        if not DeltaTable.is_deltatable(_local(path)):
            return None
        return DeltaTable(_local(path)).to_pyarrow_dataset()
    except OSError as exc:
        raise InfrastructureError(f"cannot access table storage at {path}: {exc}") from exc


def read_columns(spark: SparkSession, path: str, columns: Sequence[str]) -> list[dict[str, Any]] | None:
    """``columns`` of every row of a small table, or None when there is no table yet."""
    if backend.is_local_path(path):
        dataset = local_dataset(path)
        if dataset is None:
            return None
        rows: list[dict[str, Any]] = dataset.to_table(columns=list(columns)).to_pylist()
        return rows
    if not SparkDeltaTable.isDeltaTable(spark, path):
        return None
    return [r.asDict() for r in spark.read.format("delta").load(path).select(*columns).collect()]


def delete_where_in(spark: SparkSession, path: str, column: str, values: Iterable[str]) -> None:
    """Delete the rows whose string ``column`` is one of ``values``, in one Delta commit."""
    wanted = sorted(set(values))
    if not wanted:
        return
    if backend.is_local_path(path):
        from deltalake import DeltaTable

        quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in wanted)
        DeltaTable(_local(path)).delete(f'"{column}" IN ({quoted})')
        return
    SparkDeltaTable.forPath(spark, path).delete(F.col(column).isin(wanted))


def ensure_table(spark: SparkSession, path: str, schema: StructType) -> None:
    """Create an empty table with ``schema`` unless one exists."""
    if backend.is_local_path(path):
        from deltalake import DeltaTable

        DeltaTable.create(_local(path), to_arrow_schema(schema), mode="ignore")
        return
    if not SparkDeltaTable.isDeltaTable(spark, path):
        # An empty append rather than DeltaTable.createIfNotExists().location(): the builder
        # rejects relative paths such as the default ./data.
        spark.createDataFrame([], schema).write.format("delta").mode("append").save(path)


def append_rows(
    spark: SparkSession, path: str, schema: StructType, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Append ``rows`` (dicts keyed by the schema's names) in one Delta commit, creating the table
    if needed. No rows, no commit."""
    ensure_table(spark, path, schema)
    if not rows:
        return
    if backend.is_local_path(path):
        from deltalake import write_deltalake

        write_deltalake(_local(path), _arrow_rows(schema, rows), mode="append")
        return
    frame = spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows], schema)
    frame.write.format("delta").mode("append").save(path)


def merge_rows(
    spark: SparkSession,
    path: str,
    schema: StructType,
    rows: Sequence[Mapping[str, Any]],
    key: str | Sequence[str],
    keep: Sequence[str] = (),
) -> None:
    """Upsert ``rows`` by ``key`` (one column or several) in one Delta commit: matched rows take
    every column but the key and ``keep``; new rows are inserted whole. No rows, no commit."""
    ensure_table(spark, path, schema)
    if not rows:
        return
    keys = [key] if isinstance(key, str) else list(key)
    updated = [f.name for f in schema.fields if f.name not in keys and f.name not in keep]
    if backend.is_local_path(path):
        from deltalake import DeltaTable

        (
            DeltaTable(_local(path))
            .merge(
                _arrow_rows(schema, rows),
                predicate=" AND ".join(f't."{k}" = s."{k}"' for k in keys),
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update(updates={f'"{c}"': f's."{c}"' for c in updated})
            .when_not_matched_insert_all()
            .execute()
        )
        return
    frame = spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows], schema)
    (
        SparkDeltaTable.forPath(spark, path)
        .alias("t")
        .merge(frame.alias("s"), " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys))
        .whenMatchedUpdate(set={f"`{c}`": f"s.`{c}`" for c in updated})
        .whenNotMatchedInsertAll()
        .execute()
    )
