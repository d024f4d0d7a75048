"""Table handles: a table as one object, its operations as methods.

A handle binds what a write used to assemble by hand at every call site: the table's name, its
location, its contract (schema, key, layout), the engine that writes it (`facade.engine_for`) and
the storage settings that reach it. `TableHandle` is the protocol callers see; `DeltaHandle` is
its Delta implementation (delta-rs on the driver, Spark for DataFrames); `IcebergHandle` its
Iceberg one, for a sink only (a user's table: the audit reads its snapshot log with pyiceberg and
its rows with Spark's Iceberg catalog, and writes to it only what a repair commits).
`open_handle` chooses between them, by the sink's address: callers ask `AuditTables` for a handle
and never name the format.

The engine is checked, not commented: a write whose rows come in a form the handle's engine does
not write (a DataFrame to a driver-written table, dicts or Arrow to a Spark-written one) raises
`WrongEngineError`, and so does a Spark read of a handle bound to no session. A routed table
(`facade.ROUTED_TABLES`) takes the engine of its route with `on(route)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from app.config import ICEBERG_PREFIX, AppConfig, IcebergConfig, iceberg_address
from app.contracts.tables import TABLE_CONTRACTS, TableContract, TableLayout
from app.errors import ConfigError, InfrastructureError
from app.routes import DRIVER, SPARK
from app.storage import backend, delta_log, delta_rows, iceberg, iceberg_writes, maintenance
from app.storage.facade import engine_for
from app.storage.tables import Tables, read_delta, tables_from_config


class WrongEngineError(TypeError):
    """An operation asked of a table handle in a form its engine does not run: a bug, not a state
    of the world (exit code 3, like every internal error)."""


class TableHandle(Protocol):
    """One table: where it is, what it holds, who writes it, and what can be done with it."""

    @property
    def name(self) -> str: ...
    @property
    def location(self) -> str: ...
    @property
    def schema(self) -> StructType: ...
    @property
    def key(self) -> tuple[str, ...]: ...
    @property
    def layout(self) -> TableLayout: ...
    @property
    def engine(self) -> str: ...
    @property
    def storage(self) -> backend.StorageSettings: ...
    @property
    def table_format(self) -> str: ...

    def on(self, route: str) -> TableHandle:
        """This table written by the engine of ``route`` (a routed table; the others keep theirs)."""
        ...

    def at(self, location: str) -> TableHandle:
        """The same table's contract at another location (a job's own sink, ``--sink``)."""
        ...

    def exists(self) -> bool: ...
    def version(self) -> int: ...
    def ensure(self) -> None: ...
    def append_once(
        self,
        rows: DataFrame | Iterable[pa.RecordBatch],
        app_id: str,
        version: int,
        user_metadata: str | None = None,
        create: bool = True,
    ) -> bool: ...
    def append(self, rows: DataFrame | Sequence[Any]) -> None: ...
    def replace_where(self, rows: DataFrame | Sequence[Mapping[str, Any]], predicate: str) -> None: ...
    def merge(
        self, rows: Sequence[Mapping[str, Any]], keep: Sequence[str] = (), user_metadata: str | None = None
    ) -> None: ...
    def delete(self, column: str, values: Iterable[str]) -> int: ...
    def scan(self) -> DataFrame | None: ...
    def load(self) -> DataFrame: ...
    def dataset(self, version: int | None = None) -> pa.dataset.Dataset | None: ...
    def unseen_rows(
        self, seen: int, current: int, column: str, before: datetime, keep: pc.Expression | None = None
    ) -> pa.Table | None: ...
    def read_columns(
        self, columns: Sequence[str], optional: Sequence[str] = ()
    ) -> list[dict[str, Any]] | None: ...
    def rows(
        self, where: pc.Expression, prune: pc.Expression | None = None, columns: Sequence[str] | None = None
    ) -> pa.Table | None: ...
    def rows_with(self, column: str, value: str) -> pa.Table | None: ...
    def commit_metadata(self, depth: int) -> list[tuple[int, str | None]]: ...
    def sink_log(self, modified_since: datetime | None = None) -> delta_log.SinkLog | None: ...
    def holds_txn_of(self, app_id: str) -> bool | None: ...

    # what `repair --execute` needs of a sink: whether it may write, the order copies were written
    # in, and the statement that takes the table back to a version
    def repair_refusal(self) -> str | None: ...
    def load_with_write_order(self, alias: str) -> DataFrame: ...
    def undo_statement(self, version: int) -> str: ...

    # upkeep (`maintain`): the format's own compaction, log checkpoint, file cleanup and retention
    def files_by_partition(self) -> dict[str, int] | None: ...
    def partition_column(self) -> str | None: ...
    def compact(self, partition: Mapping[str, str] | None = None) -> maintenance.Compaction: ...
    def checkpoint(self) -> None: ...
    def vacuum(self, retention: timedelta) -> int: ...
    def restore_append_only(self) -> bool: ...
    def delete_rows(self, predicate: str, append_only: bool) -> int: ...


# The table formats a handle reads (`TableHandle.table_format`).
DELTA: Final = "delta"
ICEBERG: Final = "iceberg"
# How a message names each format ("no Iceberg table at ...").
FORMAT_NAMES: Final = {DELTA: "Delta", ICEBERG: "Iceberg"}


def require_engine(handle: TableHandle, engine: str, doing: str) -> None:
    """Fail unless ``handle`` is written by ``engine`` (a row form's engine: DataFrame is Spark)."""
    if handle.engine != engine:
        raise WrongEngineError(
            f"{doing} of table {handle.name} needs the {engine} engine; the table is written by the "
            f"{handle.engine} engine"
        )


def form_engine(rows: object) -> str:
    """The engine that writes rows of this form: Spark for a DataFrame, the driver for the rest."""
    return SPARK if isinstance(rows, DataFrame) else DRIVER


class _ContractBound:
    """What a handle's contract says of it, the same for every format."""

    contract: TableContract

    @property
    def name(self) -> str:
        return self.contract.name

    @property
    def schema(self) -> StructType:
        return self.contract.schema

    @property
    def key(self) -> tuple[str, ...]:
        return self.contract.key

    @property
    def layout(self) -> TableLayout:
        return self.contract.layout


@dataclass(frozen=True)
class DeltaHandle(_ContractBound):
    """A Delta table: delta-rs writes its driver-side rows, Spark its DataFrames."""

    contract: TableContract
    location: str
    storage: backend.StorageSettings
    engine: str

    @property
    def table_format(self) -> str:
        return DELTA

    def __repr__(self) -> str:  # the storage settings may hold credentials: name and place only
        return f"DeltaHandle({self.name!r}, {self.location!r}, engine={self.engine!r})"

    def on(self, route: str) -> DeltaHandle:
        return replace(self, engine=engine_for(self.name, route))

    def at(self, location: str) -> DeltaHandle:
        return replace(self, location=location)

    # --- its log ---------------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether a Delta table is at the location (read from its log alone)."""
        return backend.open_table(backend.location(self.storage, self.location)) is not None

    def version(self) -> int:
        """The table's current version, read from its log alone."""
        table = backend.open_table(backend.location(self.storage, self.location))
        if table is None:
            raise InfrastructureError(f"no Delta table at {self.location}")
        return int(table.version())

    def commit_metadata(self, depth: int) -> list[tuple[int, str | None]]:
        """(version, userMetadata) of the table's ``depth`` newest commits, from its log alone."""
        return delta_rows.commit_metadata(self.storage, self.location, depth)

    def sink_log(self, modified_since: datetime | None = None) -> delta_log.SinkLog | None:
        """The table's commits from its transaction log (see `delta_log.read_sink_log`), or None."""
        return delta_log.read_sink_log(self.storage, self.location, modified_since)

    def holds_txn_of(self, app_id: str) -> bool | None:
        """Whether the log holds a commit of txn app id ``app_id`` (`delta_log.holds_txn_of`)."""
        return delta_log.holds_txn_of(self.storage, self.location, app_id)

    # --- repair ----------------------------------------------------------------------------------

    def repair_refusal(self) -> str | None:
        return None  # a Delta sink is written by path

    def load_with_write_order(self, alias: str) -> DataFrame:
        """The table with ``alias``: when the file holding each row was written (Delta rewrites no
        file it keeps, so the oldest file holds the first copy)."""
        return self.load().select("*", F.col("_metadata.file_modification_time").alias(alias))

    def undo_statement(self, version: int) -> str:
        """The Spark SQL that takes the table back to ``version`` (Delta time travel)."""
        return f"RESTORE TABLE delta.`{self.location}` TO VERSION AS OF {version}"

    # --- upkeep (see `storage.maintenance`) --------------------------------------------------------

    def files_by_partition(self) -> dict[str, int] | None:
        return maintenance.files_by_partition(self.storage, self.location)

    def partition_column(self) -> str | None:
        return maintenance.partition_column(self.storage, self.location)

    def compact(self, partition: Mapping[str, str] | None = None) -> maintenance.Compaction:
        return maintenance.compact(self.storage, self.location, partition)

    def checkpoint(self) -> None:
        maintenance.checkpoint(self.storage, self.location)

    def vacuum(self, retention: timedelta) -> int:
        return maintenance.vacuum(self.storage, self.location, retention)

    def restore_append_only(self) -> bool:
        return maintenance.restore_append_only(self.storage, self.location)

    def delete_rows(self, predicate: str, append_only: bool) -> int:
        return maintenance.delete_rows(self.storage, self.location, predicate, append_only)

    # --- writes ----------------------------------------------------------------------------------

    def ensure(self) -> None:
        """Create the table empty, with its contract's schema and layout, unless one exists. One
        creation for both engines: Spark appends to it as to its own."""
        delta_rows.ensure_table(self.storage, self.location, self.schema, self.layout)

    def append_once(
        self,
        rows: DataFrame | Iterable[pa.RecordBatch],
        app_id: str,
        version: int,
        user_metadata: str | None = None,
        create: bool = True,
    ) -> bool:
        """Append ``rows`` in one Delta commit under the idempotent transaction id (``app_id``,
        ``version``), creating the table if needed (unless not ``create``: then a missing table is
        an InfrastructureError): a retry of a committed version writes nothing.

        A DataFrame is written by Spark (``txnAppId``/``txnVersion``, which Delta skips when the
        table holds that version of the app id or a later one; True is returned, as Spark does not
        say which); Arrow batches by delta-rs with the same transaction action, False when skipped."""
        require_engine(self, form_engine(rows), "an idempotent append")
        if isinstance(rows, DataFrame):
            # Spark's writer creates a missing table itself (no table here has a layout and Spark rows).
            writer = rows.write.format("delta").mode("append")
            writer = writer.option("txnAppId", app_id).option("txnVersion", str(version))
            if user_metadata is not None:
                writer = writer.option("userMetadata", user_metadata)
            writer.save(self.location)
            return True
        return delta_rows.append_once(
            self.storage, self.location, self.schema, rows, app_id, version, user_metadata, create
        )

    def append(self, rows: DataFrame | Sequence[Any]) -> None:
        """Append ``rows`` (a DataFrame by Spark, dicts keyed by the schema's names by delta-rs) in
        one Delta commit, creating the table if needed. Not idempotent: for writes once by nature."""
        require_engine(self, form_engine(rows), "an append")
        if isinstance(rows, DataFrame):
            rows.write.format("delta").mode("append").save(self.location)
            return
        delta_rows.append_rows(self.storage, self.location, self.schema, rows)

    def replace_where(self, rows: DataFrame | Sequence[Mapping[str, Any]], predicate: str) -> None:
        """Replace the rows matching the SQL ``predicate`` by ``rows`` in one Delta commit (creating
        the table if needed): a re-run never doubles its rows."""
        require_engine(self, form_engine(rows), "a replace")
        if isinstance(rows, DataFrame):
            rows.write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(self.location)
            return
        delta_rows.replace_rows(self.storage, self.location, self.schema, rows, predicate)

    def merge(
        self, rows: Sequence[Mapping[str, Any]], keep: Sequence[str] = (), user_metadata: str | None = None
    ) -> None:
        """Upsert ``rows`` by the contract's key from the driver (see `delta_rows.merge_rows`)."""
        require_engine(self, DRIVER, "a merge")
        if not self.key:
            raise WrongEngineError(f"table {self.name} has no key to merge by")
        delta_rows.merge_rows(self.storage, self.location, self.schema, rows, self.key, keep, user_metadata)

    def delete(self, column: str, values: Iterable[str]) -> int:
        """Delete the rows whose string ``column`` is one of ``values``, in one Delta commit (none
        when there are no values); how many."""
        require_engine(self, DRIVER, "a delete")
        return delta_rows.delete_where_in(self.storage, self.location, column, values)

    # --- reads -----------------------------------------------------------------------------------

    def _session(self, doing: str) -> SparkSession:
        if not isinstance(self.storage, SparkSession):
            raise WrongEngineError(f"{doing} of table {self.name} needs a Spark session; the handle has none")
        return self.storage

    def scan(self) -> DataFrame | None:
        """The table as a Spark DataFrame, or None when there is none yet."""
        return read_delta(self._session("a Spark scan"), self.location)

    def load(self) -> DataFrame:
        """The table as a Spark DataFrame, where the caller knows that it exists."""
        return self._session("a Spark load").read.format("delta").load(self.location)

    def dataset(self, version: int | None = None) -> pa.dataset.Dataset | None:
        """The table's files (as of ``version``, else its newest) as an Arrow dataset (delta-rs),
        or None when there is none."""
        return delta_rows.dataset(self.storage, self.location, version=version)

    def unseen_rows(
        self, seen: int, current: int, column: str, before: datetime, keep: pc.Expression | None = None
    ) -> pa.Table | None:
        """The rows of version ``current`` dated before ``before`` that version ``seen`` did not
        hold (`delta_rows.unseen_rows`); None when ``seen`` cannot be read any more."""
        return delta_rows.unseen_rows(self.storage, self.location, seen, current, column, before, keep)

    def read_columns(
        self, columns: Sequence[str], optional: Sequence[str] = ()
    ) -> list[dict[str, Any]] | None:
        """``columns`` of every row of a small table, or None when there is no table yet; a column
        in ``optional`` the table lacks (added to its contract later) reads as null."""
        return delta_rows.read_columns(self.storage, self.location, columns, optional)

    def rows(
        self, where: pc.Expression, prune: pc.Expression | None = None, columns: Sequence[str] | None = None
    ) -> pa.Table | None:
        """The rows matching ``where`` as Arrow on the driver, or None when there is no table (see
        `delta_rows.rows_where` for the string_view workaround it carries)."""
        return delta_rows.rows_where(self.storage, self.location, where, prune, columns)

    def rows_with(self, column: str, value: str) -> pa.Table | None:
        """The rows whose string ``column`` is ``value`` as Arrow on the driver, opening only the
        files whose log statistics admit it (`delta_rows.rows_with`), or None when there is none."""
        return delta_rows.rows_with(self.storage, self.location, column, value)


class ReadOnlySinkError(ConfigError):
    """An operation the audit never runs on a user's Iceberg sink (a write other than a repair's, a
    repair's write to a table addressed by path, or the upkeep that stays the user's): a
    configuration that asks for one is wrong (exit 2). `maintain` never gets here:
    the sink's listing (``files_by_partition``) says there is nothing of the audit's to maintain."""


@dataclass(frozen=True)
class IcebergHandle(_ContractBound):
    """A user's Iceberg table as a sink: its snapshot log read on the driver (`storage.iceberg`),
    its rows through Spark's Iceberg catalog of the same name (`runtime.spark` registers every
    catalog of `iceberg.catalogs`), or by path; Spark pushes a read's filters on its columns into
    Iceberg's scan, which skips manifests and data files by partition and column statistics. The
    audit writes to it only what `repair --execute` commits (an idempotent append, a replacement,
    each one snapshot, through its catalog: `storage.iceberg_writes`) and leaves its upkeep
    (snapshot expiry, compaction) to its owner: the other writes and the upkeep raise
    ``ReadOnlySinkError``, the upkeep's listing answers that there is nothing to do."""

    contract: TableContract
    location: str
    storage: backend.StorageSettings
    engine: str
    catalogs: IcebergConfig

    @property
    def table_format(self) -> str:
        return ICEBERG

    def __repr__(self) -> str:  # the storage settings may hold credentials: name and place only
        return f"IcebergHandle({self.name!r}, {self.location!r})"

    @property
    def ref(self) -> iceberg.IcebergTableRef:
        return iceberg.IcebergTableRef(self.location, self.catalogs)

    def on(self, route: str) -> IcebergHandle:
        return self

    def at(self, location: str) -> IcebergHandle:
        return replace(self, location=location)

    def _refused(self, doing: str) -> ReadOnlySinkError:
        return ReadOnlySinkError(
            self.location,
            f"{doing}: the audit writes to an Iceberg sink only a repair's commits, through its "
            "catalog, and never maintains it",
        )

    # --- its log ---------------------------------------------------------------------------------

    def snapshot_log(self, since: datetime | None = None) -> iceberg.SnapshotLog | None:
        """The table's snapshots and current history (`storage.iceberg.read_snapshot_log`)."""
        return iceberg.read_snapshot_log(self.storage, self.ref, since)

    def exists(self) -> bool:
        return self.snapshot_log() is not None

    def version(self) -> int:
        """The sequence number of the current snapshot (0 for a table without one)."""
        log_ = self.snapshot_log()
        if log_ is None:
            raise InfrastructureError(f"no Iceberg table at {self.location}")
        return max((s.sequence_number for s in log_.snapshots if s.snapshot_id == log_.current), default=0)

    def commit_metadata(self, depth: int) -> list[tuple[int, str | None]]:
        return []  # an Iceberg snapshot has no user metadata of Delta's kind: its summary is the log

    def sink_log(self, modified_since: datetime | None = None) -> delta_log.SinkLog | None:
        """The snapshots as a batch sink's commits (`storage.iceberg.sink_log_of`), or None."""
        log_ = self.snapshot_log(modified_since)
        return None if log_ is None else iceberg.sink_log_of(log_, modified_since)

    def holds_txn_of(self, app_id: str) -> bool | None:
        log_ = self.sink_log()
        if log_ is None:
            return None
        return any(a == app_id for c in log_.commits for a, _ in c.txns)

    # --- upkeep: the owner's ---------------------------------------------------------------------

    def files_by_partition(self) -> dict[str, int] | None:
        return None

    def partition_column(self) -> str | None:
        return None

    def compact(self, partition: Mapping[str, str] | None = None) -> maintenance.Compaction:
        raise self._refused("compaction")

    def checkpoint(self) -> None:
        raise self._refused("a log checkpoint")

    def vacuum(self, retention: timedelta) -> int:
        raise self._refused("a vacuum")

    def restore_append_only(self) -> bool:
        return False

    def delete_rows(self, predicate: str, append_only: bool) -> int:
        raise self._refused("a deletion")

    # --- writes: a repair's only (`storage.iceberg_writes`) -------------------------------------------

    def _sql_name(self, doing: str) -> str:
        """The catalog name Spark SQL writes the table by (``<catalog>.<ns>.<table>``)."""
        if iceberg_address(self.location) is None:
            raise self._refused(f"{doing} by path")
        return self.location.removeprefix(ICEBERG_PREFIX)

    def repair_refusal(self) -> str | None:
        """Why a repair cannot write this sink (SQL names no Iceberg table by path), else None."""
        if iceberg_address(self.location) is None:
            return (
                f"a repair writes an Iceberg sink through its catalog; {self.location} is a path: "
                f"address it as {ICEBERG_PREFIX}<catalog>.<namespace>.<table> (iceberg.catalogs)"
            )
        return None

    def ensure(self) -> None:
        raise self._refused("a creation")

    def append_once(
        self,
        rows: DataFrame | Iterable[pa.RecordBatch],
        app_id: str,
        version: int,
        user_metadata: str | None = None,
        create: bool = True,
    ) -> bool:
        """Append a DataFrame in one snapshot carrying the transaction id (``app_id``, ``version``)
        in its summary, unless the current history holds one carrying it (a rerun): False then.
        The table must exist (a repair never creates a user's sink)."""
        table = self._sql_name("an append")
        if not isinstance(rows, DataFrame):
            raise WrongEngineError(f"an idempotent append to Iceberg sink {self.location} takes Spark rows")
        log_ = self.snapshot_log()
        if log_ is None:
            raise InfrastructureError(f"no Iceberg table at {self.location}")
        if iceberg_writes.committed_txn(log_, app_id, version) is not None:
            return False
        iceberg_writes.append(rows, table, app_id, version)
        return True

    def replace_where(self, rows: DataFrame | Sequence[Mapping[str, Any]], predicate: str) -> None:
        """Replace the rows matching the SQL ``predicate`` by ``rows`` (a DataFrame) in one snapshot."""
        table = self._sql_name("a replace")
        if not isinstance(rows, DataFrame):
            raise WrongEngineError(f"a replace in the Iceberg sink {self.location} takes a DataFrame")
        iceberg_writes.replace_where(self._session("a replace"), table, rows, predicate)

    def load_with_write_order(self, alias: str) -> DataFrame:
        """The table with ``alias``: the data sequence number of the file holding each row (its
        ``entries`` metadata table), the order its copies were committed in."""
        reader = self._session("a Spark load").read.format("iceberg")
        name = self.spark_name()
        entries = reader.load(f"{name}.entries" if iceberg_address(self.location) else f"{name}#entries")
        return iceberg_writes.with_write_order(self.load(), entries, alias)

    def undo_statement(self, version: int) -> str:
        """The rollback to the snapshot of sequence number ``version`` in the current history."""
        log_ = self.snapshot_log()
        snapshots = [] if log_ is None else [s for s in log_.snapshots if s.snapshot_id in log_.ancestry]
        found = [s.snapshot_id for s in snapshots if s.sequence_number == version]
        address = iceberg_address(self.location)
        if not found or address is None:
            where = f"in the history of {self.location}"
            raise InfrastructureError(f"no snapshot of sequence number {version} {where}")
        return iceberg_writes.rollback_statement(*address, found[0])

    def append(self, rows: DataFrame | Sequence[Any]) -> None:
        raise self._refused("an append")

    def merge(
        self, rows: Sequence[Mapping[str, Any]], keep: Sequence[str] = (), user_metadata: str | None = None
    ) -> None:
        raise self._refused("a merge")

    def delete(self, column: str, values: Iterable[str]) -> int:
        raise self._refused("a delete")

    # --- reads -----------------------------------------------------------------------------------

    def _session(self, doing: str) -> SparkSession:
        if not isinstance(self.storage, SparkSession):
            raise WrongEngineError(f"{doing} of table {self.name} needs a Spark session; the handle has none")
        return self.storage

    def spark_name(self) -> str:
        """What Spark's ``format("iceberg").load`` takes: the catalog's table name, or the path."""
        return self.location.removeprefix(ICEBERG_PREFIX)

    def scan(self) -> DataFrame | None:
        self._session("a Spark scan")
        return self.load() if self.exists() else None

    def load(self) -> DataFrame:
        """The table's current snapshot as a Spark DataFrame. Iceberg's Spark catalog caches a table
        it loaded (``cache-enabled``, for 30 s by default) and serves later reads from that copy
        unrefreshed: a snapshot the user's job committed since (another process) would be unseen,
        a completed batch's rows read as missing, and the files a user's compaction and expiry
        removed still asked for. So a catalog table's cached copy is dropped first (a table read
        by path is not cached)."""
        spark = self._session("a Spark load")
        if iceberg_address(self.location) is not None:
            spark.catalog.refreshTable(self.spark_name())
        return spark.read.format("iceberg").load(self.spark_name())

    def dataset(self, version: int | None = None) -> pa.dataset.Dataset | None:
        raise self._refused("an Arrow read (Spark reads an Iceberg sink)")

    def unseen_rows(
        self, seen: int, current: int, column: str, before: datetime, keep: pc.Expression | None = None
    ) -> pa.Table | None:
        raise self._refused("a driver read (Spark reads an Iceberg sink)")

    def read_columns(
        self, columns: Sequence[str], optional: Sequence[str] = ()
    ) -> list[dict[str, Any]] | None:
        raise self._refused("a driver read (Spark reads an Iceberg sink)")

    def rows(
        self, where: pc.Expression, prune: pc.Expression | None = None, columns: Sequence[str] | None = None
    ) -> pa.Table | None:
        raise self._refused("a driver read (Spark reads an Iceberg sink)")

    def rows_with(self, column: str, value: str) -> pa.Table | None:
        raise self._refused("a driver read (Spark reads an Iceberg sink)")


def is_iceberg_sink(location: str, storage: backend.StorageSettings) -> bool:
    """Whether the sink at ``location`` is an Iceberg table: an ``iceberg:`` catalog address, or
    the path of a directory whose ``metadata/`` holds a metadata file."""
    if location.startswith(ICEBERG_PREFIX):
        return True
    return iceberg.is_table_directory(storage, location)


def open_handle(
    name: str, location: str, storage: backend.StorageSettings, catalogs: IcebergConfig | None = None
) -> TableHandle:
    """The handle of table ``name`` at ``location``: the one place a table format is chosen. Every
    table the audit writes is Delta; a sink is Iceberg when its address says so (`is_iceberg_sink`),
    its ``iceberg:`` address resolved through ``catalogs`` (`iceberg.catalogs`)."""
    if name == "sink" and is_iceberg_sink(location, storage):
        return IcebergHandle(
            TABLE_CONTRACTS[name], location, storage, engine_for(name), catalogs or IcebergConfig()
        )
    return DeltaHandle(TABLE_CONTRACTS[name], location, storage, engine_for(name))


@dataclass(frozen=True)
class AuditTables:
    """Every table's handle, from one resolution of `tables:` (`Tables`) and one storage binding."""

    locations: Tables
    storage: backend.StorageSettings

    @classmethod
    def from_config(
        cls, cfg: AppConfig, storage: backend.StorageSettings, sink_override: str | None = None
    ) -> AuditTables:
        """Every table of `tables:` (``sink_override``, ``--sink``, replacing every job's sink),
        reached with ``storage``: built once per command or run and passed down."""
        return cls(tables_from_config(cfg, sink_override), storage)

    def named(self, name: str) -> TableHandle:
        """The handle of the table called ``name`` (one of `storage.tables.TABLE_NAMES`)."""
        return open_handle(name, self.locations.named(name), self.storage, self.locations.iceberg)

    def sink_for(self, job: str) -> TableHandle:
        """``job``'s sink: its own (`tables.sink_by_job`), else the sink (or ``--sink``)."""
        return open_handle("sink", self.locations.sink_for(job), self.storage, self.locations.iceberg)

    def sink_key_for(self, job: str) -> str:
        """The setting that names ``job``'s sink, for error messages."""
        return self.locations.sink_key_for(job)

    def bound(self, storage: backend.StorageSettings) -> AuditTables:
        """The same tables reached with other storage settings (a session started later)."""
        return replace(self, storage=storage)

    @property
    def sink(self) -> TableHandle:
        return self.named("sink")

    @property
    def ledger(self) -> TableHandle:
        return self.named("ledger")

    @property
    def group_commits(self) -> TableHandle:
        return self.named("group_commits")

    @property
    def group_events(self) -> TableHandle:
        return self.named("group_events")

    @property
    def decode_errors(self) -> TableHandle:
        return self.named("decode_errors")

    @property
    def ingest_positions(self) -> TableHandle:
        return self.named("ingest_positions")

    @property
    def findings(self) -> TableHandle:
        return self.named("findings")

    @property
    def partition_summary(self) -> TableHandle:
        return self.named("partition_summary")

    @property
    def restarts(self) -> TableHandle:
        return self.named("restarts")

    @property
    def incidents(self) -> TableHandle:
        return self.named("incidents")

    @property
    def audit_runs(self) -> TableHandle:
        return self.named("audit_runs")

    @property
    def validation_results(self) -> TableHandle:
        return self.named("validation_results")

    @property
    def alert_state(self) -> TableHandle:
        return self.named("alert_state")

    @property
    def completeness(self) -> TableHandle:
        return self.named("completeness")
