"""What a Delta sink's transaction log adds to a checkpoint's import (`ledger-import --sink`).

A checkpoint says which batches Spark planned and committed; the sink's commit files say which of
them reached the table, in which Delta version and when (`app.storage.delta_log`). Pure: the sink's
commits come in, the detail of imported events and the import's sink counts go out.

A batch is held when one of its commits (its txn: the app id, version = the batch id) is in the
table, lacked when none is (never committed, or taken back by a RESTORE: reconcile's
BATCH_NOT_IN_SINK names it), and unverifiable when it completed before the oldest commit file
left: log cleanup (`delta.logRetentionDuration`, 30 days by default) deleted what would say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from app.contracts import vocabulary as vocab
from app.errors import UsageError
from app.storage.delta_log import SinkCommit, SinkLog, commits_by_txn, output_kept

# A batch's status in the sink and the detail keys imported events carry: words of the vocabulary.
HELD: Final = vocab.SINK_HELD
LACKED: Final = vocab.SINK_LACKED
UNVERIFIABLE: Final = vocab.SINK_UNVERIFIABLE
DETAIL_SINK: Final = vocab.DETAIL_SINK
DETAIL_SINK_APP_ID: Final = vocab.DETAIL_SINK_APP_ID
DETAIL_SINK_VERSIONS: Final = vocab.DETAIL_SINK_VERSIONS
DETAIL_SINK_COMMITTED_AT: Final = vocab.DETAIL_SINK_COMMITTED_AT
DETAIL_SINK_STATUS: Final = vocab.DETAIL_SINK_STATUS


@dataclass(frozen=True)
class SinkEvidence:
    """The sink's log as seen by one import: the commits of ``app_id``, by batch id."""

    path: str
    app_id: str
    log: SinkLog
    batches: Mapping[int, tuple[SinkCommit, ...]] = field(default_factory=dict)
    undone: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, path: str, app_id: str, log: SinkLog) -> SinkEvidence:
        by_txn = commits_by_txn(log.commits)
        batches = {v: tuple(cs) for (a, v), cs in by_txn.items() if a == app_id}
        return cls(path, app_id, log, batches, log.undone())

    def committed_at(self, batch: int) -> datetime | None:
        """When the sink first committed ``batch``'s output: Spark's Delta sink commits it just
        before it writes `commits/<n>`, so it stands in for a completion whose file time is gone."""
        times = [c.timestamp for c in self.batches.get(batch, ()) if c.timestamp is not None]
        return min(times, default=None)

    def status(self, batch: int, completed_at: datetime | None) -> str:
        """HELD, LACKED or UNVERIFIABLE (completed before the log's oldest commit file)."""
        commits = self.batches.get(batch, ())
        if commits and output_kept(commits, self.undone):
            return HELD
        starts = self.log.starts_at
        if not commits and starts is not None and (completed_at is None or completed_at < starts):
            return UNVERIFIABLE
        return LACKED

    def completion_detail(self, batch: int, completed_at: datetime | None) -> dict[str, object]:
        """What an imported CHECKPOINT_COMPLETED of ``batch`` says of the sink."""
        at = self.committed_at(batch)
        return {
            DETAIL_SINK_VERSIONS: [c.version for c in self.batches.get(batch, ())],
            DETAIL_SINK_COMMITTED_AT: None if at is None else at.isoformat(),
            DETAIL_SINK_STATUS: self.status(batch, completed_at),
        }

    def run_detail(self) -> dict[str, object]:
        """What the imported RUN_STARTED says of the sink."""
        return {DETAIL_SINK: self.path, DETAIL_SINK_APP_ID: self.app_id}


def require_commits(evidence: SinkEvidence, completed: Iterable[int], app_id_given: bool) -> None:
    """A UsageError when the checkpoint has completed batches and the sink holds no commit of the
    app id at all: the wrong sink, or a foreachBatch writing under its own txn app id."""
    if evidence.batches or not list(completed):
        return
    raise no_commits_of(evidence.path, evidence.app_id, app_id_given)


def no_commits_of(path: str, app_id: str, app_id_given: bool) -> UsageError:
    """The error of a sink whose log holds no commit of the app id (`require_commits`)."""
    hint = (
        "is --sink-app-id the txnAppId the job's foreachBatch writes with?"
        if app_id_given
        else "Spark's Delta sink writes the query's id; a foreachBatch names its own (--sink-app-id)"
    )
    return UsageError(
        f"--sink {path}: its transaction log holds no commit of app id {app_id} "
        f"(the checkpoint's completed batches would be there): the wrong sink? {hint}"
    )


@dataclass(frozen=True)
class SinkCounts:
    """The imported completions the sink holds, lacks and can no longer say about, and from which
    batch on the sink's log can still verify them."""

    held: int
    lacked: int
    unverifiable: int
    log_first_version: int | None
    oldest_verifiable_batch: int | None


def sink_counts(
    statuses: Iterable[str], first_version: int | None, oldest_verifiable_batch: int | None
) -> SinkCounts:
    seen = list(statuses)
    return SinkCounts(
        held=seen.count(HELD),
        lacked=seen.count(LACKED),
        unverifiable=seen.count(UNVERIFIABLE),
        log_first_version=first_version,
        oldest_verifiable_batch=oldest_verifiable_batch,
    )
