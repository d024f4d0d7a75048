"""The ``delta_batches`` sink mode: every completed checkpoint mapped to the sink commits that hold
its output, by the ``txn`` (app id, version) of the sink's commit files (CONTRACTS.md sections 4, 5).
The ``iceberg_snapshots`` mode runs the same rules over an Iceberg sink's snapshots
(`reconcile.sink.snapshots` turns them into the same log): a snapshot id for a version, a rollback
for a RESTORE, an expiry for log cleanup.

Pure: the ledger's completed batches (``batches_of``) and the sink's commits
(``app.storage.delta_log``) come in, typed ``Finding``s go out.

- BATCH_NOT_IN_SINK (critical): a completed batch with no commit of its (app id, batch id) in the
  sink made by its own query, or whose only commits with data a RESTORE took back. A ``foreachBatch``
  whose fixed txn app id outlives its checkpoint starts a new query at batch 0 again: Delta skips
  its writes as already applied, and the commits of those batch ids are the earlier query's (made
  before the new query first started), not its output. Spark's Delta sink and a MERGE with
  txn ids commit an empty batch too (an empty commit carrying the txn), so a missing commit is a
  lost one. Beyond log retention the commit files are gone: a batch older than the oldest commit
  file left is ``unverifiable`` (error), never "lost".
- BATCH_WRITTEN_TWICE (error): one (app id, batch id) in two or more commits that added rows, are
  still in the table and were made by the batch's own query. Rows cannot be tied to offsets in this
  mode: the batch's offsets were processed twice; whether rows doubled depends on the writer.
- SINK_COMMIT_UNEXPLAINED (warn): a commit in the window carrying one of the job's app ids whose
  version no completed checkpoint of that app id explains (a batch that never completed, another
  writer reusing the id). A batch of a running job whose completion is still in flight is not one.

A batch's offset ranges are [the previous batch's offsets, its own) per partition; the previous
batch of the same app id, else where its run started (OFFSETS_RESTORED).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from app.contracts.vocabulary import (
    BATCH_NOT_IN_SINK,
    BATCH_WRITTEN_TWICE,
    CONFIRMED,
    CRITICAL,
    DETAIL_QUERY_ID,
    ERROR,
    OPEN,
    SINK_COMMIT_UNEXPLAINED,
    UNVERIFIABLE,
    WARN,
)
from app.reconcile.findings import AuditWindow, Finding
from app.storage.delta_log import SinkCommit, SinkLog, commits_by_txn, output_kept

_WHERE: Final = ("job_name", "group_id", "topic", "partition", "run_id", "checkpoint_id")


@dataclass(frozen=True)
class BatchRange:
    """The offsets [start, end) one batch read from a partition; start unknown (None) for a first
    batch whose run recorded no start."""

    topic: str
    partition: int
    start: int | None
    end: int

    @property
    def offsets(self) -> int | None:
        return None if self.start is None else self.end - self.start


@dataclass(frozen=True)
class CompletedBatch:
    """A checkpoint the ledger says completed, under the txn app id its sink commit must carry.

    ``query_started_at``: when its query (every run of one checkpoint) first started, where the app
    id is shared by queries (a fixed ``txnAppId``): the sink commits older than that are an earlier
    query's. None for Spark's own sink (app id = query id): every commit of the id is the query's."""

    job_name: str
    group_id: str | None
    run_id: str
    app_id: str
    batch_id: int
    completed_at: datetime
    ranges: tuple[BatchRange, ...]
    query_id: str | None = None
    query_started_at: datetime | None = None


def batches_of(
    checkpoints: Iterable[Mapping[str, Any]],
    app_ids: Mapping[str, str],
    restored: Mapping[tuple[str, str, int], int],
    queries: Mapping[str, tuple[str, datetime | None]] | None = None,
) -> list[CompletedBatch]:
    """One job's completed batches, each once (its first completion), with their offset ranges.

    ``checkpoints``: the ledger's completed checkpoints per partition (``LedgerAudit.checkpoints``
    columns); ``app_ids``: run id -> the txn app id its batches commit under (runs without one are
    left out: nothing in the sink can be tied to them); ``restored``: (run id, topic, partition) ->
    the offset the run started from; ``queries``: run id -> its query's id and when that query
    first started (None: unknown). Batches of one id in two queries (a new checkpoint under the same
    app id) are two batches."""
    queries = queries or {}
    by_batch: dict[tuple[str, str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for row in checkpoints:
        app_id = app_ids.get(str(row["run_id"]))
        if app_id is not None and row["offset"] is not None:
            query = queries.get(str(row["run_id"]), ("", None))[0]
            by_batch[(app_id, query, int(row["checkpoint_id"]))].append(row)
    out: list[CompletedBatch] = []
    previous: dict[tuple[str, str, str, int], int] = {}  # (app id, query, topic, partition) -> last end
    for app_id, query, batch_id in sorted(by_batch):
        rows = by_batch[(app_id, query, batch_id)]
        first = min(rows, key=lambda r: (r["completed_at"], str(r["run_id"])))
        mine = [r for r in rows if r["run_id"] == first["run_id"]]
        ranges = []
        for r in sorted(mine, key=lambda r: (str(r["topic"]), int(r["partition"]))):
            key = (app_id, query, str(r["topic"]), int(r["partition"]))
            start = previous.get(key, restored.get((str(first["run_id"]), key[2], key[3])))
            ranges.append(BatchRange(key[2], key[3], start, int(r["offset"])))
            previous[key] = int(r["offset"])
        started = queries.get(str(first["run_id"]), ("", None))[1]
        out.append(
            CompletedBatch(
                job_name=str(first["job_name"]),
                group_id=first["group_id"],
                run_id=str(first["run_id"]),
                app_id=app_id,
                batch_id=batch_id,
                completed_at=first["completed_at"],
                ranges=tuple(ranges),
                query_id=query or None,
                # Spark's own sink names the query itself: no other query's commit carries its id.
                query_started_at=None if query in ("", app_id) else started,
            )
        )
    return out


def in_window(when: datetime | None, window: AuditWindow) -> bool:
    return when is not None and when < window.until and (window.since is None or when >= window.since)


def _where(batch: CompletedBatch, r: BatchRange | None) -> dict[str, Any]:
    return {
        "job_name": batch.job_name,
        "group_id": batch.group_id,
        "topic": None if r is None else r.topic,
        "partition": None if r is None else r.partition,
        "run_id": batch.run_id,
        "checkpoint_id": batch.batch_id,
    }


def per_partition(
    finding_type: str, severity: str, status: str, batch: CompletedBatch, evidence: Mapping[str, Any]
) -> list[Finding]:
    """One finding per partition the batch read offsets of (the ranges a replay names)."""
    ranges = [r for r in batch.ranges if r.offsets is None or r.offsets > 0]
    return [
        Finding.of(
            finding_type,
            severity,
            status,
            _where(batch, r),
            {**evidence, "offset_range": [r.start, r.end]},
            identity=batch.app_id,
            cols=_WHERE,
            offset_start=r.start,
            offset_end=r.end,
            record_count=r.offsets,
        )
        for r in ranges
    ]


@dataclass(frozen=True)
class _Owners:
    """Which query of a shared app id made a commit: the one that started last at or before it, and
    the earliest one for a commit older than all (a run attached after its query's first batches).
    No clock tolerance: a query's start and its sink commits are both stamped by the job's driver,
    and a new query may start within seconds of the old one's last commit."""

    starts: Mapping[str, Sequence[datetime]]  # app id -> its queries' first starts, ascending

    @classmethod
    def of(cls, batches: Sequence[CompletedBatch]) -> _Owners:
        starts: dict[str, set[datetime]] = defaultdict(set)
        for b in batches:
            if b.query_started_at is not None:
                starts[b.app_id].add(b.query_started_at)
        return cls({app: sorted(s) for app, s in starts.items()})

    def split(
        self, batch: CompletedBatch, commits: Sequence[SinkCommit]
    ) -> tuple[list[SinkCommit], list[SinkCommit]]:
        """``commits`` of the batch's (app id, batch id) split into its own query's and an earlier
        query's; a later query's are neither (they are that query's batch)."""
        mine = batch.query_started_at
        if mine is None:
            return list(commits), []
        starts = self.starts[batch.app_id]
        own, earlier = [], []
        for c in commits:
            if c.timestamp is None:
                own.append(c)  # undated: cannot be told apart, so not called someone else's
                continue
            owner = max((s for s in starts if s <= c.timestamp), default=starts[0])
            if owner < mine:
                earlier.append(c)
            elif owner == mine:
                own.append(c)
        return own, earlier


def _neighbours(
    batch: CompletedBatch, live: Mapping[tuple[str, int], Sequence[SinkCommit]], owners: _Owners
) -> dict[str, int | None]:
    """The sink versions of the batches before and after it, to find it between them."""

    def version(batch_id: int) -> int | None:
        commits = owners.split(batch, live.get((batch.app_id, batch_id), ()))[0]
        return commits[0].version if commits else None

    return {"previous_batch": version(batch.batch_id - 1), "next_batch": version(batch.batch_id + 1)}


def batch_findings(
    batches: Sequence[CompletedBatch],
    log: SinkLog,
    window: AuditWindow,
    in_flight: Mapping[str, int] | None = None,
    unsettled: Mapping[str, int] | None = None,
) -> list[Finding]:
    """BATCH_NOT_IN_SINK and BATCH_WRITTEN_TWICE for the batches completed in ``window``, and
    SINK_COMMIT_UNEXPLAINED for the window's commits of their app ids that no completed batch
    explains. ``batches`` may reach before the window (they explain older commits);
    ``in_flight``: app id -> the batch a running job may have committed but not yet completed;
    ``unsettled``: app id -> the first batch whose commit may still follow its completion (a running
    Flink job commits a checkpoint once Flink says it completed): not called lost yet."""
    undone = log.undone()
    versions, undone_by = log.version_key, log.undone_key
    every = commits_by_txn(log.commits)
    live = {k: [c for c in v if c.version not in undone] for k, v in every.items()}
    owners = _Owners.of(batches)
    log_from = log.starts_at
    out: list[Finding] = []
    for batch in batches:
        if not in_window(batch.completed_at, window):
            continue
        key = (batch.app_id, batch.batch_id)
        mine, earlier = owners.split(batch, every.get(key, []))
        kept, taken = [c for c in mine if c.version not in undone], [c for c in mine if c.version in undone]
        around = _neighbours(batch, live, owners)
        with_rows = [c for c in kept if c.rows_added]
        if len(with_rows) > 1:
            evidence = {
                "app_id": batch.app_id,
                "batch_id": batch.batch_id,
                versions: [c.version for c in with_rows],
                "rows_added": [c.rows_added for c in with_rows],
                "meaning": "offsets re-processed: the batch's output was committed more than once",
                "completed_at": batch.completed_at,
            }
            out += per_partition(BATCH_WRITTEN_TWICE, ERROR, CONFIRMED, batch, evidence)
        if output_kept(mine, undone):
            continue  # in the table, or an empty batch a RESTORE took back: nothing was lost
        if not mine and batch.batch_id >= (unsettled or {}).get(batch.app_id, batch.batch_id + 1):
            continue  # its commit may still come
        evidence = {
            "app_id": batch.app_id,
            "batch_id": batch.batch_id,
            "completed_at": batch.completed_at,
            **around,
        }
        if earlier:
            evidence[DETAIL_QUERY_ID] = batch.query_id
            evidence["query_started_at"] = batch.query_started_at
            evidence["earlier_query_versions"] = [c.version for c in earlier]
            evidence["meaning"] = (
                "the sink holds this batch id only from an earlier query under the same txn app id: "
                "Delta skipped this query's write as already applied"
            )
        if taken:
            evidence[versions] = [c.version for c in taken]
            evidence[undone_by] = sorted({undone[c.version] for c in taken})
            out += per_partition(BATCH_NOT_IN_SINK, CRITICAL, CONFIRMED, batch, evidence)
        elif not earlier and log_from is not None and batch.completed_at < log_from:
            evidence["log_starts_at"] = log_from
            evidence["meaning"] = log.gone_meaning
            out += per_partition(BATCH_NOT_IN_SINK, ERROR, UNVERIFIABLE, batch, evidence)
        else:
            out += per_partition(BATCH_NOT_IN_SINK, CRITICAL, CONFIRMED, batch, evidence)
    out += _unexplained(batches, log, window, in_flight or {})
    return out


def _unexplained(
    batches: Sequence[CompletedBatch], log: SinkLog, window: AuditWindow, in_flight: Mapping[str, int]
) -> list[Finding]:
    known: dict[str, set[int]] = defaultdict(set)
    owner: dict[str, CompletedBatch] = {}  # app id -> its latest batch: the job and group it names
    for b in batches:
        known[b.app_id].add(b.batch_id)
        owner[b.app_id] = b
    out: list[Finding] = []
    for c in log.commits:
        if not in_window(c.timestamp, window):
            continue
        for app_id, version in c.txns:
            ids = known.get(app_id)
            # Batches before the ledger's first one of the app id are older than the audit of it.
            if not ids or version in ids or version < min(ids) or in_flight.get(app_id) == version:
                continue
            job = owner[app_id]
            out.append(
                Finding.of(
                    SINK_COMMIT_UNEXPLAINED,
                    WARN,
                    OPEN,
                    {"job_name": job.job_name, "group_id": job.group_id, "checkpoint_id": version},
                    {
                        "app_id": app_id,
                        "batch_id": version,
                        log.version_key.removesuffix("s"): c.version,
                        "operation": c.operation,
                        "rows_added": c.rows_added,
                        "committed_at": c.timestamp,
                    },
                    identity=f"{app_id}@{c.version}",
                    cols=("job_name", "group_id", "checkpoint_id"),
                )
            )
    return out
