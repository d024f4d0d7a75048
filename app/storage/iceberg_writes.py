"""The only writes the audit makes to a user's Iceberg sink: what `repair --execute` commits, through
Spark's Iceberg catalog, each as one snapshot, and the statement that takes it back.

- An idempotent append (a gap's replay) carries the repair's transaction id in its snapshot's
  summary (the write options ``snapshot-property.<key>``, the counterpart of Delta's
  ``txnAppId``/``txnVersion``); before writing, the table's current history is read for a snapshot
  carrying it (`committed_txn`), so a rerun writes nothing.
- A replacement of the rows a predicate selects (the removal of duplicate copies) is one ``MERGE``:
  Iceberg's overwrite by filter refuses a data file that holds rows on both sides of the filter,
  which a range of offsets inside a batch's file always does, and a DELETE then an INSERT would be
  two snapshots (`replace_sql`).
- The undo of both is ``CALL <catalog>.system.rollback_to_snapshot('<ns>.<table>', <id>)``: the
  snapshot the table was at before (`rollback_statement`).

Only a table addressed through a catalog (``iceberg:<catalog>.<ns>.<table>``) is written: SQL names
no Iceberg table by path, so a path-addressed sink gets the plan only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.storage.iceberg import SnapshotLog

# The repair's transaction id in a snapshot's summary: lower-case, as Spark hands write options on.
TXN_APP_ID: Final = "offset-audit.txn-app-id"
TXN_VERSION: Final = "offset-audit.txn-version"
SNAPSHOT_PROPERTY: Final = "snapshot-property."

# The source rows of the replacing MERGE (`replace_sql`): their columns prefixed, so that the
# predicate's bare column names can only mean the table's, and which side of the MERGE each row is.
SOURCE_PREFIX: Final = "__src_"
SOURCE_ROLE: Final = "__role"
ROLE_DELETE: Final = "delete"
ROLE_INSERT: Final = "insert"

# The metadata column naming the data file of a row, and the metadata table giving each live data
# file's data sequence number: which copy of an offset was written first.
FILE_COLUMN: Final = "_file"
LIVE_ENTRY_MAX_STATUS: Final = 2  # a manifest entry's status: 0 existing, 1 added, 2 deleted


def txn_options(app_id: str, version: int) -> dict[str, str]:
    """The write options that put the transaction id into the snapshot's summary."""
    return {SNAPSHOT_PROPERTY + TXN_APP_ID: app_id, SNAPSHOT_PROPERTY + TXN_VERSION: str(version)}


def committed_txn(log: SnapshotLog, app_id: str, version: int) -> int | None:
    """The snapshot of the current history whose summary carries ``app_id`` at ``version`` or later
    (Delta's rule for a transaction id), None when there is none: a rollback took it out, or it was
    never written. Keys are compared lower-cased, as Spark may hand them on."""
    for snapshot in log.snapshots:
        if snapshot.snapshot_id not in log.ancestry:
            continue
        summary = {k.lower(): v for k, v in snapshot.summary.items()}
        if summary.get(TXN_APP_ID) != app_id:
            continue
        try:
            if int(summary.get(TXN_VERSION, "")) >= version:
                return snapshot.snapshot_id
        except ValueError:
            continue
    return None


def append(rows: DataFrame, table: str, app_id: str, version: int) -> None:
    """Append ``rows`` to the catalog table ``table`` in one snapshot carrying the transaction id."""
    writer = rows.writeTo(table)
    for key, value in txn_options(app_id, version).items():
        writer = writer.option(key, value)
    writer.append()


def replace_sql(table: str, columns: Sequence[str], predicate: str, source_view: str) -> str:
    """One MERGE that removes the rows of ``table`` matching ``predicate`` and inserts the rows of
    ``source_view`` (`merge_source`): the one ``delete`` row matches every row of the predicate (one
    source row may match many target rows), the ``insert`` rows match none and are inserted."""
    names = ", ".join(f"`{c}`" for c in columns)
    values = ", ".join(f"s.`{SOURCE_PREFIX}{c}`" for c in columns)
    return (
        f"MERGE INTO {table} t USING {source_view} s "
        f"ON s.{SOURCE_ROLE} = '{ROLE_DELETE}' AND ({predicate}) "
        "WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
    )


def merge_source(spark: SparkSession, rows: DataFrame) -> DataFrame:
    """``rows`` renamed for `replace_sql`, plus the single row that matches what is replaced."""
    fields = rows.schema.fields
    inserted = rows.select(
        *[F.col(f"`{f.name}`").alias(SOURCE_PREFIX + f.name) for f in fields],
        F.lit(ROLE_INSERT).alias(SOURCE_ROLE),
    )
    deleter = spark.range(1).select(
        *[F.lit(None).cast(f.dataType).alias(SOURCE_PREFIX + f.name) for f in fields],
        F.lit(ROLE_DELETE).alias(SOURCE_ROLE),
    )
    return inserted.unionByName(deleter)


def replace_where(spark: SparkSession, table: str, rows: DataFrame, predicate: str) -> None:
    """Replace the rows of ``table`` matching the SQL ``predicate`` by ``rows``, in one snapshot."""
    view = "offset_audit_replacement"
    merge_source(spark, rows).createOrReplaceTempView(view)
    try:
        spark.sql(replace_sql(table, rows.columns, predicate, view))
    finally:
        spark.catalog.dropTempView(view)


def with_write_order(df: DataFrame, entries: DataFrame, alias: str) -> DataFrame:
    """``df`` (the table's rows) with ``alias``: the data sequence number of the file holding each
    row (from ``entries``, the table's metadata table of that name), which orders the copies of an
    offset as they were committed (a compaction keeps the data sequence numbers it started from)."""
    live = entries.where(F.col("status") < F.lit(LIVE_ENTRY_MAX_STATUS)).select(
        F.col("data_file.file_path").alias("_entry_file"),
        F.col("sequence_number").alias(alias),
    )
    rows = df.select("*", F.col(FILE_COLUMN).alias("_row_file"))
    joined = rows.join(live, on=F.col("_row_file") == F.col("_entry_file"), how="left")
    return joined.drop("_row_file", "_entry_file")


def rollback_statement(catalog: str, namespace: str, table: str, snapshot_id: int) -> str:
    """The Spark SQL that makes ``snapshot_id`` the table's current snapshot again."""
    return f"CALL {catalog}.system.rollback_to_snapshot('{namespace}.{table}', {snapshot_id})"
