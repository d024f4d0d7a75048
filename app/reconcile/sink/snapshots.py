"""The ``iceberg_snapshots`` sink mode: every completed batch or checkpoint mapped to the snapshots of
an Iceberg sink that hold its output, by the snapshot summaries their writers leave (CONTRACTS.md
sections 4, 5). Pure: the snapshots come as a `storage.delta_log.SinkLog`
(`storage.iceberg.sink_log_of`), the batches as `batches.CompletedBatch`, typed findings go out;
`batches.batch_findings` judges them with the rules of the ``delta_batches`` mode.

- A Spark query: Iceberg's streaming sink writes the query's id and the epoch (the batch id) into
  each snapshot's summary, and skips an epoch the table's current history already holds; a
  ``foreachBatch`` writes them with the ``snapshot-property.<key>`` options (Spark lower-cases
  them; read either way), under its own app id (``reconcile.sink_app_id_by_job``).
- A Flink job: Iceberg's committer writes the Flink job id, the operator id and the max committed
  checkpoint id, and commits in one snapshot every checkpoint whose commit did not happen yet (an
  earlier one failed, or was empty): a snapshot of job J with max M covers J's checkpoints above
  the max of J's previous snapshot, up to M (`with_flink_txns`). A job restored from an older
  savepoint or checkpoint under a new job id commits again the checkpoints its predecessor had
  committed: the re-committed checkpoints are named (`recommitted`), BATCH_WRITTEN_TWICE.
- A rollback (a snapshot in the metadata, no longer in the current history) took a batch's output
  out: BATCH_NOT_IN_SINK, confirmed, naming the snapshot and the current one. An expiry (a batch
  older than the oldest snapshot left after expiry) is unverifiable, never lost.
- A sink none of whose snapshots names any of the job's app ids (a ``foreachBatch`` without the
  snapshot properties) cannot tie a snapshot to a batch: each batch is ``unverifiable``
  (unattributable, warn), never lost (`unattributable`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Final

from app.contracts.vocabulary import (
    BATCH_NOT_IN_SINK,
    BATCH_WRITTEN_TWICE,
    CONFIRMED,
    DETAIL_FLINK_JOB_ID,
    ERROR,
    UNVERIFIABLE,
    WARN,
)
from app.reconcile.findings import AuditWindow, Finding
from app.reconcile.sink.batches import CompletedBatch, batch_findings, in_window, per_partition
from app.storage.delta_log import SinkCommit, SinkLog, commits_by_txn, commits_since, output_kept

UNATTRIBUTABLE_MEANING: Final = (
    "no snapshot of the sink names this job's app id (a foreachBatch writing without the "
    "snapshot-property.spark.sql.streaming.queryId/epochId options): its batches cannot be tied to "
    "snapshots, so neither lost nor held can be said"
)
RECOMMIT_MEANING: Final = (
    "the checkpoint was committed again by a job restored from an older savepoint or checkpoint: "
    "its offsets' output is in the table more than once"
)


def flink_coverage(
    commits: Iterable[SinkCommit], known: Mapping[str, Collection[int]]
) -> dict[int, tuple[int, ...]]:
    """Snapshot version -> the checkpoints of its Flink job it commits: those of ``known`` (Flink
    job id -> the checkpoint ids the ledger completed) above the previous snapshot's max committed
    checkpoint id of the same job, up to its own (in the order the job committed them)."""
    by_job: dict[str, list[SinkCommit]] = defaultdict(list)
    for c in commits:
        if c.flink is not None:
            by_job[c.flink[0]].append(c)
    out: dict[int, tuple[int, ...]] = {}
    for job, snapshots in by_job.items():
        ids = sorted(known.get(job, ()))
        floor: int | None = None
        for c in sorted(snapshots, key=lambda c: (c.flink[2] if c.flink else 0, c.timestamp or 0)):
            top = c.flink[2] if c.flink else 0
            out[c.version] = tuple(i for i in ids if (floor is None or i > floor) and i <= top)
            floor = top if floor is None else max(floor, top)
    return out


def with_flink_txns(log: SinkLog, known: Mapping[str, Collection[int]]) -> SinkLog:
    """The log with each Flink snapshot carrying a txn (job id, checkpoint) per checkpoint it
    commits, and one of its max committed checkpoint (what a checkpoint the ledger lacks explains)."""
    covered = flink_coverage(log.commits, known)
    commits = []
    for c in log.commits:
        if c.flink is None:
            commits.append(c)
            continue
        job, _, top = c.flink
        ids = sorted({*covered.get(c.version, ()), top})
        commits.append(replace(c, txns=(*c.txns, *((job, i) for i in ids))))
    return replace(log, commits=tuple(commits))


def unattributable(batches: Sequence[CompletedBatch], log: SinkLog, window: AuditWindow) -> list[Finding]:
    """BATCH_NOT_IN_SINK, unverifiable (warn), for every batch completed in ``window`` when no
    snapshot of ``log`` names any of the batches' app ids; nothing when one does (the batches are
    then judged, `batches.batch_findings`)."""
    apps = {b.app_id for b in batches}
    named = log.named_apps
    if named is None:
        named = frozenset(app for c in log.commits for app, _ in c.txns)
    if not apps or apps & named:
        return []
    out: list[Finding] = []
    for b in batches:
        if in_window(b.completed_at, window):
            evidence = {
                "app_id": b.app_id,
                "batch_id": b.batch_id,
                "completed_at": b.completed_at,
                "snapshots_read": len(log.commits),
                "meaning": UNATTRIBUTABLE_MEANING,
            }
            out += per_partition(BATCH_NOT_IN_SINK, WARN, UNVERIFIABLE, b, evidence)
    return out


def recommitted(
    batches: Sequence[CompletedBatch], log: SinkLog, restored_runs: Collection[str], window: AuditWindow
) -> list[Finding]:
    """BATCH_WRITTEN_TWICE for every checkpoint completed in ``window`` by a restored run (one that
    started from a savepoint or checkpoint) whose output its own Flink job committed while another
    Flink job of the same job had committed that checkpoint id before: re-committed offsets. ``log``
    carries the Flink txns (`with_flink_txns`)."""
    by_txn = commits_by_txn(log.commits)
    undone = log.undone()
    jobs: dict[str, set[str]] = defaultdict(set)  # job name -> its Flink job ids (batch app ids)
    for b in batches:
        jobs[b.job_name].add(b.app_id)
    out: list[Finding] = []
    for b in batches:
        if b.run_id not in restored_runs or not in_window(b.completed_at, window):
            continue
        own = [c for c in by_txn.get((b.app_id, b.batch_id), []) if c.version not in undone]
        if not own or not output_kept(own, undone):
            continue
        first = min((c.timestamp for c in own if c.timestamp is not None), default=None)
        earlier = [
            c
            for other in sorted(jobs[b.job_name] - {b.app_id})
            for c in by_txn.get((other, b.batch_id), [])
            if c.version not in undone and c.rows_added and _before(c, first)
        ]
        if not earlier:
            continue
        evidence = {
            DETAIL_FLINK_JOB_ID: b.app_id,
            "checkpoint_id": b.batch_id,
            log.version_key: [c.version for c in [*earlier, *own]],
            "earlier_flink_job_ids": sorted({c.flink[0] for c in earlier if c.flink is not None}),
            "rows_added": [c.rows_added for c in [*earlier, *own]],
            "meaning": RECOMMIT_MEANING,
            "completed_at": b.completed_at,
        }
        out += per_partition(BATCH_WRITTEN_TWICE, ERROR, CONFIRMED, b, evidence)
    return out


def _before(commit: SinkCommit, when: datetime | None) -> bool:
    """Whether ``commit`` was made before ``when`` (undated ones cannot be told apart: they are)."""
    return when is None or commit.timestamp is None or commit.timestamp < when


def snapshot_findings(
    batches: Sequence[CompletedBatch],
    log: SinkLog,
    window: AuditWindow,
    since: datetime | None = None,
    flink_runs: Collection[str] = (),
    restored_runs: Collection[str] = (),
    in_flight: Mapping[str, int] | None = None,
    unsettled: Mapping[str, int] | None = None,
) -> list[Finding]:
    """Every finding of an Iceberg sink for the batches completed in ``window``: ``log`` is the
    sink's whole snapshot log, ``since`` where the snapshots worth reading start (older ones hold
    batches before the window); ``flink_runs``: the runs whose batches are Flink checkpoints (app id:
    the Flink job id); ``restored_runs``: the runs started from a savepoint or checkpoint;
    ``in_flight``/``unsettled`` as `batches.batch_findings` takes them."""
    known: dict[str, set[int]] = defaultdict(set)
    for b in batches:
        if b.run_id in flink_runs:
            known[b.app_id].add(b.batch_id)
    whole = with_flink_txns(log, known)
    none_named = unattributable(batches, whole, window)
    if none_named:
        return none_named
    recent = commits_since(whole, since)
    return [
        *batch_findings(batches, recent, window, in_flight, unsettled),
        *recommitted(batches, recent, {*restored_runs} & {*flink_runs}, window),
    ]
