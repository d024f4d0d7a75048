"""The ledger writer: every write of a job's ledger events, and what a job asks of its ledger at start.

One component, usable wherever ledger events are produced: the reference job (`stream.job`), or a
listener in someone else's Spark job that has none of this application's queries. It needs only the
storage settings, the table's location, the job's name and its run id:

    writer = LedgerWriter(spark, location, job_name, run_id, scope=query_id)
    writer.ensure()
    writer.write(events, batch_id)  # a retry of batch_id writes nothing

The ledger is append-only (delta.appendOnly) and partitioned by event_date (its contract's layout,
`contracts.tables.LEDGER_LAYOUT`). A micro-batch's events are appended in one Delta commit under
a Delta transaction id (app id + version = batch id), so a retried batch appends nothing; events
outside micro-batches (run start, recovery, stop) go through `write_new`, which first drops the
events whose key the ledger already holds.

A start's questions (`facts`) read only the event_date partitions of the batches its checkpoint
still holds (from the day before Spark wrote the oldest one, `checkpoint.ledger_since`), not the
job's whole history: with 30 days retained that history is tens of millions of rows.

Every write and read goes through delta-rs on the driver (`storage.facade.engine_for` names it
for the ledger, whose handle this writer holds): a Spark append of a few rows is a Spark job plus a
snapshot reconstruction, about a second on a small machine, waiting for a task slot behind the
sink's write; delta-rs writes the same Delta protocol (the same `txn` action, which Spark's
idempotent writes honour too) in milliseconds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from app.contracts import vocabulary as vocab
from app.contracts.offsets import LedgerEvent, TopicPartitionKey
from app.contracts.tables import LEDGER_SCHEMA
from app.storage import backend
from app.storage.handles import open_handle
from app.stream.startup import LedgerFacts

log = logging.getLogger(__name__)

# The columns of a stored row its event key is made of (LedgerEvent.event_key's parts).
KEY_COLUMNS: Final = ("job_name", "run_id", "checkpoint_id", "event_type", "topic", "partition", "detail")
# The detail fields of the key, in LedgerEvent.event_key's order.
KEY_DETAILS: Final = (vocab.DETAIL_REASON, vocab.DETAIL_ERROR, vocab.DETAIL_ATTEMPT)
# The events the start of a run reads from its job's ledger to recover what the last run left.
FACT_EVENTS: Final = (
    vocab.EVENT_CHECKPOINT_SNAPSHOT,
    vocab.EVENT_CHECKPOINT_COMPLETED,
    vocab.EVENT_COMMIT_REQUESTED,
    vocab.EVENT_COMMIT_SUCCEEDED,
    vocab.EVENT_COMMIT_FAILED,
    vocab.EVENT_COMMIT_SKIPPED,
    vocab.EVENT_RUN_STARTED,
)
_ANSWERS: Final = (vocab.EVENT_COMMIT_SUCCEEDED, vocab.EVENT_COMMIT_FAILED, vocab.EVENT_COMMIT_SKIPPED)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def row_key(row: Mapping[str, Any]) -> str:
    """The identity of a ledger row (LedgerEvent.event_key's parts, every one as text): computed the
    same way from an event about to be written (its `to_row`) and from a stored row."""
    detail = json.loads(row["detail"]) if row.get("detail") else {}
    parts = [_text(row.get(c)) for c in KEY_COLUMNS[:-1]] + [_text(detail.get(d)) for d in KEY_DETAILS]
    return json.dumps(parts, separators=(",", ":"))


def event_key_column() -> Column:
    """The identity of LedgerEvent.event_key as a Spark column over stored rows (for Spark readers)."""
    detail = F.col("detail")
    return F.to_json(
        F.array(
            *[F.col(c).cast("string") for c in KEY_COLUMNS[:-1]],
            *[F.get_json_object(detail, f"$.{d}") for d in KEY_DETAILS],
        )
    )


@dataclass(frozen=True)
class QueryRecord:
    """What a job's ledger holds of one streaming query (one checkpoint): the runs that recorded it
    and the batches they snapshotted and completed."""

    run_ids: frozenset[str]
    snapshot_ids: frozenset[int]
    completed_ids: frozenset[int]


def ledger_app_id(job_name: str, scope: str) -> str:
    """The Delta transaction app id of a job's micro-batch appends within ``scope`` (the streaming
    query's id: batch ids restart at 0 with a new checkpoint, and so does a new app id)."""
    return f"offset-audit/{job_name}/{scope}/ledger"


class LedgerWriter:
    """Writes one run's ledger events and answers the ledger questions of the job's start."""

    def __init__(
        self,
        storage: backend.StorageSettings,
        location: str,
        job_name: str,
        run_id: str,
        scope: str | None = None,
    ) -> None:
        self.storage = storage
        self.location = location
        self.table = open_handle("ledger", location, storage)
        self.job_name = job_name
        self.run_id = run_id
        self.scope = scope or run_id

    @property
    def app_id(self) -> str:
        return ledger_app_id(self.job_name, self.scope)

    def ensure(self) -> None:
        """Create the ledger with its contract (schema, event_date partitions, append-only) if missing."""
        self.table.ensure()

    def write(self, events: Sequence[LedgerEvent], batch_id: int) -> bool:
        """One Delta commit for a micro-batch's events; a retry of the same batch id writes nothing
        (False). The ledger must exist (`ensure` at the run's start): a missing one is lost storage."""
        if not events:
            return False
        batch = pa.RecordBatch.from_pylist(
            [e.to_row() for e in events], schema=to_arrow_schema(LEDGER_SCHEMA)
        )
        written = self.table.append_once([batch], self.app_id, batch_id, create=False)
        if not written:
            log.info("ledger already holds batch %d of %s: retry writes nothing", batch_id, self.app_id)
        return written

    def write_new(self, events: Sequence[LedgerEvent]) -> int:
        """Append the events the ledger does not hold yet (by event key); returns how many were new.

        For the few writes outside micro-batches, where no batch id can make the write idempotent."""
        if not events:
            return 0
        runs = sorted({e.run_id for e in events})
        where = (pc.field("job_name") == self.job_name) & pc.field("run_id").isin(runs)
        stored = self.table.rows(where, columns=KEY_COLUMNS)
        held = {row_key(r) for r in stored.to_pylist()} if stored is not None else set()
        fresh = [e for e in events if row_key(e.to_row()) not in held]
        if fresh:
            self.table.append([e.to_row() for e in fresh])
        return len(fresh)

    # --- what a start asks of the job's earlier runs -------------------------------------------

    def _job_rows(
        self, event_types: Iterable[str], columns: Sequence[str], since: date | None = None
    ) -> pa.Table | None:
        where = (pc.field("job_name") == self.job_name) & pc.field("event_type").isin(list(event_types))
        # event_date is the partition column: the days before ``since`` are never opened.
        prune = None if since is None else pc.field("event_date") >= since
        return self.table.rows(where, prune, columns=["job_name", *columns])

    def facts(self, since: date | None = None, oldest_batch: int | None = None) -> LedgerFacts:
        """What the ledger says about the job's checkpoints: recorded snapshots and completions,
        commit attempts never answered, and the last run.

        ``since`` (an event_date, `checkpoint.ledger_since`) reads only the days from it on: those
        of the checkpoint's retained batches, from ``oldest_batch`` (the oldest the start recovers)
        on. When that read holds nothing of the job, or no snapshot of ``oldest_batch``, every day
        is read (see `_covers`)."""
        columns = ["event_type", "run_id", "checkpoint_id", "event_time", "detail"]
        rows = self._job_rows(FACT_EVENTS, columns, since)
        if since is not None and rows is not None and not self._covers(rows, oldest_batch):
            # Correctness first: the checkpoint's file times may not be the times its events carry
            # (a checkpoint directory copied later has new ones), and a recovery that misses what
            # the ledger holds writes its batches twice. A bounded read that holds the oldest
            # batch's snapshot holds the later ones too: their files were written after it.
            log.info(
                "the ledger of %s holds no snapshot of batch %s since %s: reading every day",
                self.job_name,
                oldest_batch,
                since,
            )
            rows = self._job_rows(FACT_EVENTS, columns)
            since = None
        if rows is None:
            return LedgerFacts(frozenset(), frozenset(), {}, None)

        def checkpoints(event_type: str) -> frozenset[int]:
            ids = rows.filter(pc.field("event_type") == event_type).column("checkpoint_id")
            return frozenset(int(i) for i in pc.unique(ids).to_pylist() if i is not None)

        commits = rows.filter(pc.field("event_type").isin([vocab.EVENT_COMMIT_REQUESTED, *_ANSWERS]))
        distinct = commits.group_by(["event_type", "run_id", "checkpoint_id", "detail"]).aggregate([])
        requested: dict[tuple[str, int], int] = {}
        answered: set[tuple[str, int]] = set()
        for r in distinct.to_pylist():
            attempt = json.loads(r["detail"] or "{}").get(vocab.DETAIL_ATTEMPT)
            if attempt is None:
                continue
            if r["event_type"] == vocab.EVENT_COMMIT_REQUESTED:
                requested[(r["run_id"], int(attempt))] = r["checkpoint_id"]
            else:
                answered.add((r["run_id"], int(attempt)))
        last_run = self._last_run(rows)
        if last_run is None and since is not None:
            # The last run started before the bound (it ran longer than the checkpoint's span):
            # the run that wrote the latest of the bounded events is the one that was running.
            last_run = self._latest_writer(rows)
        return LedgerFacts(
            snapshot_ids=checkpoints(vocab.EVENT_CHECKPOINT_SNAPSHOT),
            completed_ids=checkpoints(vocab.EVENT_CHECKPOINT_COMPLETED),
            open_commit_attempts={k: v for k, v in requested.items() if k not in answered},
            last_run_id=last_run,
        )

    @staticmethod
    def _covers(rows: pa.Table, oldest_batch: int | None) -> bool:
        """Whether bounded ``rows`` hold the job's events of the checkpoint: any at all, and the
        snapshot of ``oldest_batch`` when one is named."""
        if rows.num_rows == 0:
            return False
        if oldest_batch is None:
            return True
        snapshots = rows.filter(
            (pc.field("event_type") == vocab.EVENT_CHECKPOINT_SNAPSHOT)
            & (pc.field("checkpoint_id") == oldest_batch)
        )
        return bool(snapshots.num_rows > 0)

    @staticmethod
    def _last_run(rows: pa.Table) -> str | None:
        """The run id of the latest RUN_STARTED (by time, then run id) among ``rows``."""
        return LedgerWriter._latest_writer(rows.filter(pc.field("event_type") == vocab.EVENT_RUN_STARTED))

    @staticmethod
    def _latest_writer(rows: pa.Table) -> str | None:
        """The run id of the latest event (by time, then run id) among ``rows``. Arrow kernels, not
        Python rows: under a bound it runs over every fact of the checkpoint's days."""
        times = rows.column("event_time")
        if times.null_count == len(times):
            return None
        at_latest = rows.filter(pc.field("event_time") == pc.max(times))
        run_id = pc.max(at_latest.column("run_id")).as_py()
        return None if run_id is None else str(run_id)

    def previous_run_starts(self) -> dict[TopicPartitionKey, int]:
        """The OFFSETS_RESTORED offsets of the job's last run (empty if none)."""
        types = (vocab.EVENT_RUN_STARTED, vocab.EVENT_OFFSETS_RESTORED)
        rows = self._job_rows(types, ["event_type", "run_id", "event_time", "topic", "partition", "offset"])
        if rows is None:
            return {}
        last = self._last_run(rows)
        if last is None:
            return {}
        restored = rows.filter(
            (pc.field("event_type") == vocab.EVENT_OFFSETS_RESTORED)
            & (pc.field("run_id") == last)
            & pc.field("offset").is_valid()
        )
        return {(r["topic"], int(r["partition"])): int(r["offset"]) for r in restored.to_pylist()}

    def query_record(self, query_id: str) -> QueryRecord:
        """The runs of the job that recorded streaming query ``query_id`` (their RUN_STARTED's
        `query_id`: attached and imported runs say it) and the batches those runs recorded.

        Scoped to the query because batch ids restart at 0 with a new checkpoint: the job's other
        queries' batch 0 is not this one's."""
        types = (vocab.EVENT_RUN_STARTED, vocab.EVENT_CHECKPOINT_SNAPSHOT, vocab.EVENT_CHECKPOINT_COMPLETED)
        rows = self._job_rows(types, ["event_type", "run_id", "checkpoint_id", "detail"])
        if rows is None:
            return QueryRecord(frozenset(), frozenset(), frozenset())
        runs = frozenset(
            str(r["run_id"])
            for r in rows.filter(pc.field("event_type") == vocab.EVENT_RUN_STARTED).to_pylist()
            if json.loads(r["detail"] or "{}").get(vocab.DETAIL_QUERY_ID) == query_id
        )
        if not runs:
            return QueryRecord(frozenset(), frozenset(), frozenset())
        of_query = rows.filter(pc.field("run_id").isin(sorted(runs)))

        def checkpoints(event_type: str) -> frozenset[int]:
            ids = of_query.filter(pc.field("event_type") == event_type).column("checkpoint_id")
            return frozenset(int(i) for i in pc.unique(ids).to_pylist() if i is not None)

        return QueryRecord(
            run_ids=runs,
            snapshot_ids=checkpoints(vocab.EVENT_CHECKPOINT_SNAPSHOT),
            completed_ids=checkpoints(vocab.EVENT_CHECKPOINT_COMPLETED),
        )
