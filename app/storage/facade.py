"""Which engine writes a table (`engine_for`, by the table's role) and the Delta operations by
location: `ensure`, `append_once`, `append`, `merge`, `delete`, `replace_where`, `scan` and `load`
(Spark), `rows`, `rows_with`, `dataset` and `read_columns` (Arrow on the driver), `commit_metadata`,
`version`. Modules outside `storage` reach a table through its handle (`storage.handles`), which
binds its location, contract, engine and storage settings once and checks a write's row form
against its engine; what remains here for them is `engine_for`.

Two engines write the same Delta protocol. Spark writes a DataFrame where the rows scale with the
data (the sink, the decoded `__consumer_offsets` of the Spark route); delta-rs (through
`delta_rows`) writes Arrow rows from the driver, in milliseconds and without a task slot, where
they are few (the ledger, positions and every audit table). An operation runs the engine whose
form its rows come in (a DataFrame: Spark; Arrow batches or dicts: delta-rs); the handle refuses a
form that is not its table's engine's. Ingest takes the decoded tables' handles on its route's
engine; snapshot mode appends its few Admin API rows to group_commits through Spark whatever the
route, on the handle it asks for the Spark engine. A module never picks a Delta writer of
its own. Only this package imports `deltalake` or calls Spark's Delta reader or writer
(`tests/unit/test_storage_facade.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from app.contracts.tables import layout_of
from app.errors import InfrastructureError
from app.routes import DRIVER, ROUTES, SPARK
from app.storage import backend, delta_log, delta_rows
from app.storage.tables import TABLE_NAMES, read_delta

# Tables whose every write scales with the data: Spark writes them on every storage.
SPARK_TABLES: Final = frozenset({"sink"})
# The tables `ingest-offsets` decodes into: written by the engine of its decode route
# (`routes.decode_route`: the driver with a local master, Spark on a cluster).
ROUTED_TABLES: Final = frozenset({"group_commits", "group_events", "decode_errors"})


def engine_for(table: str, route: str | None = None) -> str:
    """The engine that writes ``table`` (one of `storage.tables.TABLE_NAMES`): Spark for what scales
    with the data, the ``route`` a size policy of `routes` chose for a routed table, else the driver.
    """
    if table not in TABLE_NAMES:
        raise ValueError(f"no table called {table!r}; known: {', '.join(TABLE_NAMES)}")
    if table in SPARK_TABLES:
        return SPARK
    if table in ROUTED_TABLES and route is not None:
        if route not in ROUTES:
            raise ValueError(f"unknown route {route!r}; expected one of {list(ROUTES)}")
        return route
    return DRIVER


def ensure(storage: backend.StorageSettings, path: str, schema: StructType) -> None:
    """Create the table at ``path`` empty, with its contract's schema and layout (partitioning,
    append-only), unless one exists. One creation for both engines: Spark appends to it as to its own.
    """
    delta_rows.ensure_table(storage, path, schema, layout_of(schema))


def append_once(
    storage: backend.StorageSettings,
    path: str,
    schema: StructType,
    rows: DataFrame | Iterable[pa.RecordBatch],
    app_id: str,
    version: int,
    user_metadata: str | None = None,
    create: bool = True,
) -> bool:
    """Append ``rows`` in one Delta commit under the idempotent transaction id (``app_id``,
    ``version``), creating the table if needed (unless not ``create``: then a missing table is an
    InfrastructureError): a retry of a committed version writes nothing.

    A DataFrame is written by Spark (``txnAppId``/``txnVersion``, which Delta skips when the table
    holds that version of the app id or a later one; True is returned, as Spark does not say which);
    Arrow batches by delta-rs with the same transaction action, False when skipped."""
    if isinstance(rows, DataFrame):
        # Spark's writer creates a missing table itself (no table here has a layout and Spark rows).
        writer = rows.write.format("delta").mode("append")
        writer = writer.option("txnAppId", app_id).option("txnVersion", str(version))
        if user_metadata is not None:
            writer = writer.option("userMetadata", user_metadata)
        writer.save(path)
        return True
    return delta_rows.append_once(storage, path, schema, rows, app_id, version, user_metadata, create)


def append(
    storage: backend.StorageSettings, path: str, schema: StructType, rows: DataFrame | Sequence[Any]
) -> None:
    """Append ``rows`` (a DataFrame by Spark, dicts keyed by the schema's names by delta-rs) in one
    Delta commit, creating the table if needed. Not idempotent: for writes that are once by nature."""
    if isinstance(rows, DataFrame):
        rows.write.format("delta").mode("append").save(path)
        return
    delta_rows.append_rows(storage, path, schema, rows)


def replace_where(
    storage: backend.StorageSettings,
    path: str,
    schema: StructType,
    rows: DataFrame | Sequence[Mapping[str, Any]],
    predicate: str,
) -> None:
    """Replace the rows matching the SQL ``predicate`` by ``rows`` (a DataFrame by Spark, dicts by
    delta-rs, creating the table if needed) in one Delta commit: a re-run never doubles its rows."""
    if isinstance(rows, DataFrame):
        rows.write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(path)
        return
    delta_rows.replace_rows(storage, path, schema, rows, predicate)


def merge(
    storage: backend.StorageSettings,
    path: str,
    schema: StructType,
    rows: Sequence[Mapping[str, Any]],
    key: str | Sequence[str],
    keep: Sequence[str] = (),
    user_metadata: str | None = None,
) -> None:
    """Upsert ``rows`` by ``key`` from the driver (see `delta_rows.merge_rows`)."""
    delta_rows.merge_rows(storage, path, schema, rows, key, keep, user_metadata)


def delete(storage: backend.StorageSettings, path: str, column: str, values: Iterable[str]) -> int:
    """Delete the rows whose string ``column`` is one of ``values``, in one Delta commit (none when
    there are no values); how many."""
    return delta_rows.delete_where_in(storage, path, column, values)


def scan(spark: SparkSession, path: str) -> DataFrame | None:
    """The table at ``path`` as a Spark DataFrame, or None when there is none yet."""
    return read_delta(spark, path)


def load(spark: SparkSession, path: str) -> DataFrame:
    """The table at ``path`` as a Spark DataFrame, where the caller knows that it exists."""
    return spark.read.format("delta").load(path)


def dataset(storage: backend.StorageSettings, path: str) -> pa.dataset.Dataset | None:
    """The table's current files as an Arrow dataset (delta-rs), or None when there is none."""
    return delta_rows.dataset(storage, path)


def read_columns(
    storage: backend.StorageSettings, path: str, columns: Sequence[str]
) -> list[dict[str, Any]] | None:
    """``columns`` of every row of a small table, or None when there is no table yet."""
    return delta_rows.read_columns(storage, path, columns)


def commit_metadata(storage: backend.StorageSettings, path: str, depth: int) -> list[tuple[int, str | None]]:
    """(version, userMetadata) of the table's ``depth`` newest commits, from its log alone."""
    return delta_rows.commit_metadata(storage, path, depth)


def rows(
    storage: backend.StorageSettings,
    path: str,
    where: pc.Expression,
    prune: pc.Expression | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table | None:
    """The rows matching ``where`` as Arrow on the driver, or None when there is no table (see
    `delta_rows.rows_where` for the string_view workaround it carries)."""
    return delta_rows.rows_where(storage, path, where, prune, columns)


def rows_with(storage: backend.StorageSettings, path: str, column: str, value: str) -> pa.Table | None:
    """The rows whose string ``column`` is ``value`` as Arrow on the driver, opening only the files
    whose log statistics admit it (`delta_rows.rows_with`), or None when there is no table."""
    return delta_rows.rows_with(storage, path, column, value)


def exists(storage: backend.StorageSettings, path: str) -> bool:
    """Whether a Delta table is at ``path`` (read from its log alone)."""
    return backend.open_table(backend.location(storage, path)) is not None


def version(storage: backend.StorageSettings, path: str) -> int:
    """The table's current version, read from its log alone."""
    table = backend.open_table(backend.location(storage, path))
    if table is None:
        raise InfrastructureError(f"no Delta table at {path}")
    return int(table.version())


def sink_log(
    storage: backend.StorageSettings, path: str, modified_since: datetime | None = None
) -> delta_log.SinkLog | None:
    """The sink's commits from its transaction log (see `delta_log.read_sink_log`), or None when
    there is no table."""
    return delta_log.read_sink_log(storage, path, modified_since)


def sink_holds_txn_of(storage: backend.StorageSettings, path: str, app_id: str) -> bool | None:
    """Whether the sink's log holds a commit of txn app id ``app_id`` (see `delta_log.holds_txn_of`),
    None when there is no table."""
    return delta_log.holds_txn_of(storage, path, app_id)
