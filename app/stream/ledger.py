"""Delta I/O of the ledger table: create it with its contract, append events idempotently, read it back.

The ledger is append-only (delta.appendOnly) and partitioned by event_date. Appends from a
micro-batch carry a Delta transaction identifier (app id + version = batch id), so a retried
batch never appends its events twice; appends outside micro-batches (run start, recovery, stop)
go through `append_new_events`, which first drops events whose key is already in the table.

A micro-batch's append is written by delta-rs (the `deltalake` package) rather than by Spark, on
every storage (`storage.backend` decides it): a Spark append of a few rows is a Spark job plus a
snapshot reconstruction to look up the transaction version, about a second on a small machine,
and it waits for a task slot behind the sink's own write. delta-rs writes the same Delta protocol
(the same `txn` action, which Spark's idempotent writes honour too) in milliseconds, without a
task slot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from app.contracts.offsets import LedgerEvent
from app.contracts.tables import LEDGER_SCHEMA, SINK_SCHEMA
from app.errors import InfrastructureError
from app.storage import backend
from app.storage.files import table_exists

log = logging.getLogger(__name__)


def ensure_ledger(spark: SparkSession, path: str) -> None:
    (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(LEDGER_SCHEMA)
        .partitionedBy("event_date")
        .property("delta.appendOnly", "true")
        .execute()
    )


def ensure_sink(spark: SparkSession, path: str) -> None:
    DeltaTable.createIfNotExists(spark).location(path).addColumns(SINK_SCHEMA).execute()


def events_frame(spark: SparkSession, events: Sequence[LedgerEvent]) -> DataFrame:
    rows = [tuple(e.to_row().values()) for e in events]
    return spark.createDataFrame(rows, LEDGER_SCHEMA)


def append_batch_events(
    spark: SparkSession, path: str, events: Sequence[LedgerEvent], app_id: str, batch_id: int
) -> None:
    """One Delta commit for a micro-batch's events; a retry of the same batch id writes nothing."""
    if not events:
        return
    # The delta-rs append carries the same transaction identifier Spark's txnAppId/txnVersion writes.
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    where = backend.location(spark, path)
    table = backend.open_table(where)
    if table is None:
        raise InfrastructureError(f"no ledger table at {path} to append batch {batch_id} of {app_id} to")
    with backend.storage_errors(where, "append to"):
        done = table.transaction_version(app_id)
        if done is not None and done >= batch_id:
            log.info("ledger already holds batch %d of %s: retry writes nothing", batch_id, app_id)
            return
        schema = pa.schema(table.schema().to_arrow())
        rows = pa.Table.from_pylist([e.to_row() for e in events], schema=schema)
        write_deltalake(
            table,
            rows,
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]),
        )


def event_key_column() -> Column:
    """The same identity as LedgerEvent.event_key, computed from stored rows."""
    detail = F.col("detail")
    attempt = F.get_json_object(detail, "$.attempt")
    return F.to_json(
        F.array(
            F.col("job_name"),
            F.col("run_id"),
            F.col("checkpoint_id").cast("string"),
            F.col("event_type"),
            F.col("topic"),
            F.col("partition").cast("string"),
            F.get_json_object(detail, "$.reason"),
            F.get_json_object(detail, "$.error"),
            attempt,
        )
    )


def _key_of(event: LedgerEvent) -> str:
    parts = json.loads(event.event_key)
    as_text = [None if p is None else str(p) for p in parts]
    return json.dumps(as_text, separators=(",", ":"))


def append_new_events(spark: SparkSession, path: str, events: Sequence[LedgerEvent], job_name: str) -> int:
    """Append the events the ledger does not hold yet (by event key); returns how many were new.

    Used for the few writes outside micro-batches, where no batch id can make the write idempotent.
    """
    if not events:
        return 0
    existing: set[str] = set()
    if table_exists(spark, path):
        keys = (
            spark.read.format("delta")
            .load(path)
            .where(F.col("job_name") == job_name)
            .where(F.col("run_id").isin(sorted({e.run_id for e in events})))
            .select(event_key_column().alias("k"))
            .collect()
        )
        existing = {_normalize_key(r.k) for r in keys}
    fresh = [e for e in events if _key_of(e) not in existing]
    if fresh:
        events_frame(spark, fresh).write.format("delta").mode("append").save(path)
    return len(fresh)


def _normalize_key(stored: str) -> str:
    return json.dumps(json.loads(stored), separators=(",", ":"))


def read_job_ledger(spark: SparkSession, path: str, job_name: str) -> DataFrame | None:
    if not table_exists(spark, path):
        return None
    return spark.read.format("delta").load(path).where(F.col("job_name") == job_name)
