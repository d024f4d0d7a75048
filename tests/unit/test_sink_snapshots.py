"""The iceberg_snapshots mode's pure parts: an Iceberg sink's snapshots (as its metadata records
them) against the ledger's completed Spark batches and Flink checkpoints (app.storage.iceberg,
app.reconcile.sink.snapshots)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.contracts.vocabulary import (
    BATCH_NOT_IN_SINK,
    BATCH_WRITTEN_TWICE,
    CONFIRMED,
    CRITICAL,
    ERROR,
    SINK_COMMIT_UNEXPLAINED,
    UNVERIFIABLE,
    WARN,
)
from app.reconcile.findings import AuditWindow, Finding
from app.reconcile.sink.batches import BatchRange, CompletedBatch
from app.reconcile.sink.snapshots import flink_coverage, snapshot_findings
from app.storage.iceberg import parse_snapshot_log, sink_log_of

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = AuditWindow(until=T0 + timedelta(hours=1), since=T0)
QUERY = "query-1"


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def snapshot(sid: int, parent: int | None, second: int, rows: int = 10, **summary: str) -> dict[str, Any]:
    return {
        "snapshot-id": sid,
        "parent-snapshot-id": parent,
        "sequence-number": second,
        "timestamp-ms": int(at(second).timestamp() * 1000),
        "summary": {"operation": "append", "added-records": str(rows), **summary},
    }


def spark(sid: int, parent: int | None, epoch: int, rows: int = 10, query: str = QUERY) -> dict[str, Any]:
    """The snapshot Iceberg's streaming sink commits for ``epoch``, at second ``epoch * 10 + 1``."""
    keys = {"spark.sql.streaming.queryId": query, "spark.sql.streaming.epochId": str(epoch)}
    return snapshot(sid, parent, epoch * 10 + 1, rows, **keys)


def flink(
    sid: int, parent: int | None, second: int, job: str, checkpoint: int, rows: int = 10
) -> dict[str, Any]:
    keys = {
        "flink.job-id": job,
        "flink.operator-id": "op",
        "flink.max-committed-checkpoint-id": str(checkpoint),
    }
    return snapshot(sid, parent, second, rows, **keys)


def log_of(snapshots: list[dict[str, Any]], current: int) -> Any:
    doc = {"format-version": 2, "current-snapshot-id": current, "snapshots": snapshots, "snapshot-log": []}
    return sink_log_of(parse_snapshot_log(json.dumps(doc), "m.json"))


def batch(
    batch_id: int, start: int, end: int, app: str = QUERY, run: str = "run-1", second: int | None = None
) -> CompletedBatch:
    completed = at(batch_id * 10 + 5 if second is None else second)
    return CompletedBatch(
        "orders", "g", run, app, batch_id, completed, (BatchRange("orders", 0, start, end),)
    )


def kinds(found: list[Finding]) -> list[tuple[str, int | None, str, str]]:
    return sorted((f.finding_type, f.checkpoint_id, f.status, f.severity) for f in found)


def evidence(f: Finding) -> dict[str, Any]:
    return dict(f.evidence)


def test_every_batch_in_its_own_snapshot_and_a_compaction_are_nothing() -> None:
    snaps = [spark(1, None, 0), spark(2, 1, 1), spark(3, 2, 2), snapshot(4, 3, 25, 0, operation="replace")]
    snaps[-1]["summary"]["operation"] = "replace"
    batches = [batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 12)]
    assert snapshot_findings(batches, log_of(snaps, 4), WINDOW) == []


def test_a_completed_batch_without_its_snapshot_is_lost_with_its_offsets() -> None:
    log = log_of([spark(1, None, 0), spark(3, 1, 2)], 3)
    [lost] = snapshot_findings([batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 12)], log, WINDOW)
    assert (lost.finding_type, lost.checkpoint_id, lost.status, lost.severity) == (
        BATCH_NOT_IN_SINK,
        1,
        CONFIRMED,
        CRITICAL,
    )
    assert (lost.offset_start, lost.offset_end, lost.record_count) == (5, 9, 4)


def test_a_rollback_to_before_a_batch_loses_it_naming_its_snapshot_and_the_current_one() -> None:
    # Rolled back to snapshot 1 after batch 2, then batch 3 committed on top of 1.
    snaps = [spark(1, None, 0), spark(2, 1, 1), spark(3, 2, 2), spark(4, 1, 3)]
    batches = [batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 12), batch(3, 12, 14)]
    found = snapshot_findings(batches, log_of(snaps, 4), WINDOW)
    assert kinds(found) == [
        (BATCH_NOT_IN_SINK, 1, CONFIRMED, CRITICAL),
        (BATCH_NOT_IN_SINK, 2, CONFIRMED, CRITICAL),
    ]
    assert [(evidence(f)["snapshot_ids"], evidence(f)["rolled_back_to"]) for f in found] == [
        ([2], [4]),
        ([3], [4]),
    ]


def test_a_batch_whose_snapshot_expired_is_unverifiable_never_lost() -> None:
    # Snapshots 1 and 2 expired: the oldest left (3) has a parent that is gone.
    snaps = [spark(3, 2, 2), spark(4, 3, 3)]
    batches = [batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 12), batch(3, 12, 14)]
    found = snapshot_findings(batches, log_of(snaps, 4), WINDOW)
    assert kinds(found) == [
        (BATCH_NOT_IN_SINK, 0, UNVERIFIABLE, ERROR),
        (BATCH_NOT_IN_SINK, 1, UNVERIFIABLE, ERROR),
    ]
    assert "expired" in evidence(found[0])["meaning"]


def test_a_batch_committed_twice_by_a_writer_that_does_not_skip_is_named_with_both_snapshots() -> None:
    snaps = [spark(1, None, 0), spark(2, 1, 1), spark(3, 2, 2), spark(4, 3, 2)]
    snaps[-1]["timestamp-ms"] += 3000
    [twice] = snapshot_findings([batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 12)], log_of(snaps, 4), WINDOW)
    assert (twice.finding_type, twice.checkpoint_id) == (BATCH_WRITTEN_TWICE, 2)
    assert evidence(twice)["snapshot_ids"] == [3, 4]


def test_a_snapshot_of_the_query_no_completed_batch_explains_is_named() -> None:
    [odd] = snapshot_findings(
        [batch(0, 0, 5), batch(1, 5, 9)],
        log_of([spark(1, None, 0), spark(2, 1, 1), spark(3, 2, 3)], 3),
        WINDOW,
    )
    assert (odd.finding_type, odd.checkpoint_id, evidence(odd)["snapshot_id"]) == (
        SINK_COMMIT_UNEXPLAINED,
        3,
        3,
    )


def test_a_foreach_batch_without_snapshot_properties_is_unattributable_never_lost() -> None:
    snaps = [snapshot(1, None, 1), snapshot(2, 1, 11)]  # appends that name no query nor epoch
    found = snapshot_findings([batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 12)], log_of(snaps, 2), WINDOW)
    assert kinds(found) == [(BATCH_NOT_IN_SINK, i, UNVERIFIABLE, WARN) for i in range(3)]
    assert "snapshot-property" in evidence(found[0])["meaning"]


# --- Flink ---------------------------------------------------------------------------------------

JOB_A, JOB_B = "a" * 32, "b" * 32


def checkpoint(
    cid: int, start: int, end: int, job: str = JOB_A, run: str = "run-a", second: int | None = None
) -> CompletedBatch:
    return batch(cid, start, end, app=job, run=run, second=cid * 10 + 5 if second is None else second)


def test_one_snapshot_commits_every_checkpoint_since_the_previous_one_of_its_job() -> None:
    log = log_of([flink(1, None, 25, JOB_A, 2), flink(2, 1, 55, JOB_A, 5)], 2)
    assert flink_coverage(log.commits, {JOB_A: {1, 2, 3, 4, 5}}) == {1: (1, 2), 2: (3, 4, 5)}
    ckpts = [checkpoint(i, i * 10, i * 10 + 10) for i in range(1, 6)]
    assert snapshot_findings(ckpts, log, WINDOW, flink_runs={"run-a"}) == []


def test_a_completed_checkpoint_no_snapshot_covers_is_lost_unless_its_job_still_runs() -> None:
    log = log_of([flink(1, None, 25, JOB_A, 2)], 1)
    ckpts = [checkpoint(i, i * 10, i * 10 + 10) for i in range(1, 4)]
    [lost] = snapshot_findings(ckpts, log, WINDOW, flink_runs={"run-a"})
    assert (lost.finding_type, lost.checkpoint_id, lost.status, lost.offset_start, lost.offset_end) == (
        BATCH_NOT_IN_SINK, 3, CONFIRMED, 30, 40,
    )  # fmt: skip
    # Running: Flink commits a checkpoint once it completed, so the newest one is not judged yet.
    assert snapshot_findings(ckpts, log, WINDOW, flink_runs={"run-a"}, unsettled={JOB_A: 3}) == []


def test_a_restore_from_an_older_savepoint_names_the_checkpoints_committed_again() -> None:
    # Job A committed checkpoints 1..6; job B restored from A's savepoint at 3, re-read [30, 60) in
    # its checkpoints 4..6 and committed them with 7 (A's max was 6: its 4..6 were skipped then).
    a = [flink(i, i - 1 if i > 1 else None, i * 10 + 6, JOB_A, i) for i in range(1, 7)]
    b = [flink(7, 6, 200, JOB_B, 7, rows=40)]
    ckpts = [checkpoint(i, i * 10, i * 10 + 10) for i in range(1, 7)]
    ckpts += [checkpoint(i, i * 10, i * 10 + 10, JOB_B, "run-b", second=100 + i * 10) for i in range(4, 8)]
    found = snapshot_findings(
        ckpts, log_of([*a, *b], 7), WINDOW, flink_runs={"run-a", "run-b"}, restored_runs={"run-b"}
    )
    assert kinds(found) == [(BATCH_WRITTEN_TWICE, i, CONFIRMED, ERROR) for i in (4, 5, 6)]
    assert [evidence(f)["snapshot_ids"] for f in found] == [[4, 7], [5, 7], [6, 7]]
    assert [(f.run_id, f.offset_start, f.offset_end) for f in found] == [
        ("run-b", 40, 50),
        ("run-b", 50, 60),
        ("run-b", 60, 70),
    ]
    # A job started afresh (no savepoint) numbers its checkpoints from 1 again: no re-commit.
    assert snapshot_findings(ckpts, log_of([*a, *b], 7), WINDOW, flink_runs={"run-a", "run-b"}) == []
