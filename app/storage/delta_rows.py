"""Small Delta reads and writes of rows on the driver: findings, incidents, restarts, partition
summaries, run records, and the ledger window read into Arrow.

A reconciliation ends with a few hundred rows to store. Through Spark each such write is a job, a
snapshot reconstruction and, for the findings, a MERGE plan: about ten seconds of a nightly run,
more than the rest of the run spends outside the sink scan. delta-rs (the ``deltalake`` package,
as the ledger's micro-batch appends) commits them in milliseconds and without a task slot, on
local and object storage alike (see ``backend``). It writes the same Delta protocol, so Spark
reads these tables as its own.

Each function takes the storage settings of ``backend.location`` first: the running session where
there is one, else the config's storage options (a local table needs neither).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from app.contracts.instants import instant
from app.contracts.tables import TableLayout, layout_of
from app.errors import InfrastructureError
from app.storage import backend

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

# A failed commit writes nothing, so a write that lost a race to a concurrent commit Delta's conflict
# check rejects (a maintenance's compaction, property change or deletion of old rows beside a watch's
# MERGEs and appends, or the other way round: see `storage.maintenance`) is tried again on the newer
# version, this often in all.
CONFLICT_ATTEMPTS: Final = 5

T = TypeVar("T")


def is_commit_conflict(exc: InfrastructureError) -> bool:
    """Whether ``exc`` is a commit that delta-rs's conflict check rejected (nothing was written)."""
    from deltalake.exceptions import CommitFailedError

    # storage_errors chains the cause, or only the context where the text named a credential.
    return isinstance(exc.__cause__ or exc.__context__, CommitFailedError)


def retrying_conflicts(doing: str, path: str, attempt: Callable[[], T], replayable: bool = True) -> T:
    """``attempt()``, run again (up to CONFLICT_ATTEMPTS in all) while its commit loses a race that
    delta-rs's conflict check rejects; any other error, or the last conflict, is raised.

    ``attempt`` must load the table afresh and be idempotent (an append under a transaction id, a
    MERGE by key, a delete of a set, a compaction): the retry then decides again on the version the
    winner committed. Without ``replayable`` (its input was streamed once) a conflict is raised.
    """
    for n in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            return attempt()
        except InfrastructureError as exc:
            if not (replayable and n < CONFLICT_ATTEMPTS and is_commit_conflict(exc)):
                raise
            # The error's own text: credentials scrubbed, where its cause may be cut for holding one.
            log.info("%s %s lost a commit race (attempt %d), retrying: %s", doing, path, n, exc)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _arrow_rows(schema: StructType, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{f.name: instant(r.get(f.name)) for f in schema.fields} for r in rows],
        schema=to_arrow_schema(schema),
    )


def dataset(
    storage: backend.StorageSettings, path: str, files: str | None = None, version: int | None = None
) -> pa.dataset.Dataset | None:
    """The table at ``path`` (as of ``version``, else its newest) as an Arrow dataset, or None when
    there is none. ``storage`` carries the settings of a table on object storage; a local table
    needs none. ``files``: a SQL predicate that drops the files whose log statistics rule it out
    (`backend.arrow_dataset`)."""
    where = backend.location(storage, path)
    table = backend.open_table(where, version)
    if table is None:
        return None
    return backend.arrow_dataset(table, where, files)


def unseen_rows(
    storage: backend.StorageSettings,
    path: str,
    seen: int,
    current: int,
    column: str,
    before: datetime,
    keep: pc.Expression | None = None,
) -> pa.Table | None:
    """The rows of version ``current`` dated before ``before`` by the timestamp ``column`` (and
    matching ``keep``) that version ``seen`` did not hold, counted as a multiset (a second copy
    appended later is unseen); None when ``seen`` cannot be read any more (its log entries were
    cleaned up, or the files it held were rewritten and then vacuumed) or there is no table; any
    other storage failure raises InfrastructureError.

    A reader that read version ``seen`` and judged everything dated before ``before`` never saw
    these rows: they were written late, or recovered. Only the files added after ``seen`` whose log
    statistics reach below ``before`` are a question; when none does (a table only appended to by
    writers on time) no row is read. Otherwise both versions' rows from the earliest such file's
    first time on are compared, so a compaction's rewritten files (the same rows) are no news.
    """
    where = backend.location(storage, path)
    now = backend.open_table(where, current)
    try:
        then = backend.open_table(where, seen)
    except InfrastructureError:
        return None
    if now is None or then is None:
        return None
    with backend.storage_errors(where, "list the files of"):
        held = set(pa.table(then.get_add_actions(flatten=True)).column("path").to_pylist())
        files = pa.table(now.get_add_actions(flatten=True))
    low_column = f"min.{column}"  # absent when no file has statistics of the column
    firsts = (
        files.column(low_column).to_pylist() if low_column in files.column_names else [None] * files.num_rows
    )
    # the first times of the files added since ``seen`` that reach below ``before`` (None: unknown)
    reach = [
        first
        for path_, first in zip(files.column("path").to_pylist(), firsts, strict=True)
        if path_ not in held and (first is None or instant(first) < before)
    ]
    if not reach:
        return backend.arrow_dataset(now, where).schema.empty_table()
    # when every such file's statistics say where it starts, no older row is a question
    low = None if None in reach else min(instant(first) for first in reach)
    rows = _rows_dated(now, where, column, low, before, keep)
    try:
        then_rows = _rows_dated(then, where, column, low, before, keep)
    except InfrastructureError as exc:
        # Only a missing file (one a compaction replaced, since vacuumed) means ``seen`` is gone;
        # any other failure is the storage's, and the run fails rather than skip the question.
        if isinstance(exc.__cause__, FileNotFoundError):
            return None
        raise
    return _except_all(rows, then_rows)


def _rows_dated(
    table: DeltaTable,
    where: backend.Location,
    column: str,
    low: datetime | None,
    before: datetime,
    keep: pc.Expression | None,
) -> pa.Table:
    """The rows of ``table`` dated in [low, before) by ``column`` (from the first when ``low`` is
    None) and matching ``keep``."""
    dataset = backend.arrow_dataset(table, where)
    kind = dataset.schema.field(column).type
    dated = pc.field(column) < pa.scalar(before, type=kind)
    if low is not None:
        dated = dated & (pc.field(column) >= pa.scalar(low, type=kind))
    with backend.storage_errors(where, "read"):
        return dataset.to_table(filter=dated if keep is None else dated & keep)


def _except_all(rows: pa.Table, known: pa.Table) -> pa.Table:
    """``rows`` less ``known``, copy by copy (SQL's EXCEPT ALL)."""
    import duckdb

    with duckdb.connect(":memory:") as db:
        db.register("rows_now", rows)
        db.register("rows_then", known.select(rows.column_names).cast(rows.schema))
        out: pa.Table = db.sql("SELECT * FROM rows_now EXCEPT ALL SELECT * FROM rows_then").to_arrow_table()
        return out


def rows_where(
    storage: backend.StorageSettings,
    path: str,
    where: pc.Expression,
    prune: pc.Expression | None = None,
    columns: Sequence[str] | None = None,
    files: str | None = None,
) -> pa.Table | None:
    """The rows of the table at ``path`` that match ``where``, or None when there is no table.

    ``where`` is applied after the scan, batch by batch: pyarrow (26) cannot push a comparison of a
    string column into files whose Parquet schema says string_view, which is what delta-rs's MERGE
    writes (every small audit table is MERGEd), and fails with "no kernel matching input types
    (string, string_view)". ``prune`` is pushed into the scan to skip files and partitions: give it
    conditions on partition, numeric or time columns only (e.g. the ledger's event_date).
    ``columns`` (every one ``where`` names among them) are read alone when given. ``files``, a SQL
    predicate, skips the files whose log statistics rule it out before any is opened (delta-rs
    reads them from the Delta log, not from the files: no string_view question arises).
    """
    data = dataset(storage, path, files)
    if data is None:
        return None
    wanted = None if columns is None else list(columns)
    batches = data.to_batches(columns=wanted, filter=prune)
    parts = [pa.Table.from_batches([b]).filter(where) for b in batches if b.num_rows]
    if parts:
        return pa.concat_tables(parts)
    schema = data.schema if wanted is None else pa.schema([data.schema.field(c) for c in wanted])
    return schema.empty_table()


def rows_with(storage: backend.StorageSettings, path: str, column: str, value: str) -> pa.Table | None:
    """The rows whose string ``column`` is ``value``, or None when there is no table. Only the
    files whose min/max of ``column`` in the log admit ``value`` are read: a table appended a file
    per key (a run's rows) reads that key's file, not its history."""
    quoted = "'" + value.replace("'", "''") + "'"
    return rows_where(storage, path, pc.field(column) == value, files=f'"{column}" = {quoted}')


def read_columns(
    storage: backend.StorageSettings, path: str, columns: Sequence[str], optional: Sequence[str] = ()
) -> list[dict[str, Any]] | None:
    """``columns`` of every row of a small table, or None when there is no table yet. A column in
    ``optional`` that the table does not have (a contract column added after it was written) reads
    as null."""
    where = backend.location(storage, path)
    table = backend.open_table(where)
    if table is None:
        return None
    data = backend.arrow_dataset(table, where)
    absent = [c for c in columns if c in optional and c not in data.schema.names]
    with backend.storage_errors(where, "read"):
        rows: list[dict[str, Any]] = data.to_table(
            columns=[c for c in columns if c not in absent]
        ).to_pylist()
    return [{**r, **dict.fromkeys(absent)} for r in rows] if absent else rows


def delete_where_in(storage: backend.StorageSettings, path: str, column: str, values: Iterable[str]) -> int:
    """Delete the rows whose string ``column`` is one of ``values``, in one Delta commit; how many."""
    wanted = sorted(set(values))
    if not wanted:
        return 0
    where = backend.location(storage, path)
    quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in wanted)

    def delete() -> int:
        table = backend.open_table(where)
        if table is None:
            return 0
        with backend.storage_errors(where, "delete from"):
            metrics = table.delete(f'"{column}" IN ({quoted})')
        return int(metrics.get("num_deleted_rows", 0))

    return retrying_conflicts("delete from", path, delete)


def _ensure(where: backend.Location, schema: StructType, layout: TableLayout | None = None) -> DeltaTable:
    """The table at ``where``, created empty with ``schema`` and its contract's layout unless one exists."""
    from deltalake import DeltaTable

    chosen = layout_of(schema) if layout is None else layout
    with backend.storage_errors(where, "create"):
        return DeltaTable.create(
            where.uri,
            to_arrow_schema(schema),
            mode="ignore",
            partition_by=list(chosen.partition_by) or None,
            configuration={"delta.appendOnly": "true"} if chosen.append_only else None,
            storage_options=dict(where.options),
        )


def ensure_table(
    storage: backend.StorageSettings, path: str, schema: StructType, layout: TableLayout | None = None
) -> None:
    """Create an empty table with ``schema`` (laid out as its contract says) unless one exists."""
    _ensure(backend.location(storage, path), schema, layout)


def append_rows(
    storage: backend.StorageSettings, path: str, schema: StructType, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Append ``rows`` (dicts keyed by the schema's names) in one Delta commit, creating the table
    if needed. No rows, no commit."""
    from deltalake import write_deltalake

    where = backend.location(storage, path)
    if not rows:
        _ensure(where, schema)
        return
    data = _arrow_rows(schema, rows)

    def append() -> None:
        table = _ensure(where, schema)
        with backend.storage_errors(where, "append to"):
            write_deltalake(table, data, mode="append")

    retrying_conflicts("append to", path, append)


def replace_rows(
    storage: backend.StorageSettings,
    path: str,
    schema: StructType,
    rows: Sequence[Mapping[str, Any]],
    predicate: str,
) -> None:
    """Replace the rows matching the SQL ``predicate`` by ``rows`` in one Delta commit, creating the
    table if needed: a re-run of the same run id never doubles its rows."""
    from deltalake import write_deltalake

    where = backend.location(storage, path)
    data = _arrow_rows(schema, rows)

    def replace() -> None:
        table = _ensure(where, schema)
        with backend.storage_errors(where, "replace rows of"):
            write_deltalake(table, data, mode="overwrite", predicate=predicate)

    retrying_conflicts("replace rows of", path, replace)


def commit_metadata(storage: backend.StorageSettings, path: str, depth: int) -> list[tuple[int, str | None]]:
    """(version, userMetadata) of the table's ``depth`` newest commits; none when there is no table.
    Read from the Delta log alone: no Spark job."""
    where = backend.location(storage, path)
    table = backend.open_table(where)
    if table is None:
        return []
    with backend.storage_errors(where, "read the history of"):
        return [(int(h["version"]), h.get("userMetadata")) for h in table.history(depth)]


def merge_rows(
    storage: backend.StorageSettings,
    path: str,
    schema: StructType,
    rows: Sequence[Mapping[str, Any]],
    key: str | Sequence[str],
    keep: Sequence[str] = (),
    user_metadata: str | None = None,
) -> None:
    """Upsert ``rows`` by ``key`` (one column or several) in one Delta commit: matched rows take
    every column but the key and ``keep``; new rows are inserted whole. No rows, no commit.
    ``user_metadata`` becomes the commit's userMetadata, as Spark's writer option of that name."""
    from deltalake import CommitProperties

    where = backend.location(storage, path)
    if not rows:
        _ensure(where, schema)
        return
    keys = [key] if isinstance(key, str) else list(key)
    updated = [f.name for f in schema.fields if f.name not in keys and f.name not in keep]
    data = _arrow_rows(schema, rows)

    def merge() -> None:
        table = _ensure(where, schema)
        with backend.storage_errors(where, "merge into"):
            (
                table.merge(
                    data,
                    predicate=" AND ".join(f't."{k}" = s."{k}"' for k in keys),
                    source_alias="s",
                    target_alias="t",
                    # a table written before a contract column was added gains it (null in old rows)
                    merge_schema=True,
                    commit_properties=CommitProperties(
                        custom_metadata=None if user_metadata is None else {"userMetadata": user_metadata}
                    ),
                )
                .when_matched_update(updates={f'"{c}"': f's."{c}"' for c in updated})
                .when_not_matched_insert_all()
                .execute()
            )

    retrying_conflicts("merge into", path, merge)


def append_once(
    storage: backend.StorageSettings,
    path: str,
    schema: StructType,
    batches: Iterable[pa.RecordBatch],
    app_id: str,
    version: int,
    user_metadata: str | None = None,
    create: bool = True,
) -> bool:
    """Append ``batches`` in one Delta commit under the idempotent transaction id (``app_id``,
    ``version``), as Spark's ``txnAppId``/``txnVersion`` writer options do: nothing is written, and
    False returned, when the table has committed ``version`` of ``app_id`` or a later one. The
    batches are streamed to the Parquet writer, not collected first. ``user_metadata`` becomes the
    commit's userMetadata. Without ``create`` a missing table is an InfrastructureError (lost storage,
    where the writer created the table before)."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    where = backend.location(storage, path)

    def append() -> bool:
        table = _ensure(where, schema) if create else backend.open_table(where)
        if table is None:
            raise InfrastructureError(f"no Delta table at {path} to append version {version} of {app_id} to")
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            return False
        reader = pa.RecordBatchReader.from_batches(to_arrow_schema(schema), batches)
        with backend.storage_errors(where, "append to"):
            write_deltalake(
                table,
                reader,
                mode="append",
                commit_properties=CommitProperties(
                    custom_metadata=None if user_metadata is None else {"userMetadata": user_metadata},
                    app_transactions=[Transaction(app_id, version)],
                ),
            )
        return True

    # A list can be written again after a lost commit race; an iterator is streamed once.
    return retrying_conflicts("append to", path, append, replayable=isinstance(batches, Sequence))
