"""Incidents of a delta_batches sink: the findings of app.reconcile.sink.batches, stored as reconcile
stores them, grouped by app.incidents.grouping: a lost batch is confirmed loss with a replay plan,
a batch written twice re-processed its offsets, an unexplained commit is output the ledger lacks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.contracts import vocabulary as vocab
from app.incidents import grouping as inc
from app.incidents.incident import StoredIncident
from app.incidents.remedy import OffsetRange, ReplayStep
from app.reconcile import findings as rc
from app.reconcile.sink.batches import BatchRange, CompletedBatch, batch_findings
from app.storage.delta_log import SinkCommit, SinkLog

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = rc.AuditWindow(until=T0 + timedelta(hours=1), since=T0)
APP = "query-1"


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def batch(batch_id: int, start: int, end: int) -> CompletedBatch:
    """Batch ``batch_id`` read [start, end) of partition 0 and [start + 100, end + 100) of 1."""
    ranges = (BatchRange("pay", 0, start, end), BatchRange("pay", 1, start + 100, end + 100))
    return CompletedBatch("payments", "g", "run-1", APP, batch_id, at(batch_id * 10 + 5), ranges)


def commit(version: int, batch_id: int, rows: int = 10) -> SinkCommit:
    return SinkCommit(version, at(version * 10), "STREAMING UPDATE", ((APP, batch_id),), rows)


def incidents(
    commits: list[SinkCommit], batches: list[CompletedBatch], first: int = 0
) -> list[StoredIncident]:
    found = rc.finalize_findings(
        batch_findings(batches, SinkLog(tuple(commits), first), WINDOW), "rec-1", at(999)
    )
    return inc.to_incidents(inc.group_findings(found), "rec-1", {})


def test_a_lost_batch_is_a_critical_incident_replaying_its_ranges() -> None:
    [lost] = incidents([commit(0, 0), commit(1, 2)], [batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 12)])
    assert (lost.kind, lost.severity, lost.partitions) == (vocab.INCIDENT_LOST_BATCH, vocab.CRITICAL, 2)
    assert (lost.impact.records_lost, lost.impact.records_duplicated) == (8, 0)
    assert lost.remedy.steps == (ReplayStep((OffsetRange("pay", 0, 5, 9), OffsetRange("pay", 1, 105, 109))),)
    assert "batch(es) 1 of payments" in lost.cause


def test_a_batch_beyond_log_retention_is_unverifiable_not_lost() -> None:
    [unknown] = incidents([commit(5, 5)], [batch(1, 5, 9), batch(5, 9, 12)], first=5)
    assert unknown.severity == vocab.ERROR
    assert (unknown.impact.records_lost, unknown.impact.records_unverifiable) == (0, 8)


def test_a_batch_written_twice_reprocessed_its_offsets_and_gets_a_check_not_a_deletion() -> None:
    [twice] = incidents([commit(0, 0), commit(1, 1), commit(2, 1)], [batch(0, 0, 5), batch(1, 5, 9)])
    assert (twice.kind, twice.severity) == (vocab.INCIDENT_BATCH_REPROCESSED, vocab.ERROR)
    assert (twice.impact.records_replayed, twice.impact.records_duplicated) == (8, 0)
    assert (twice.remedy.steps, twice.remedy.note) == ((), inc.REPROCESSED_NOTE)
    assert "Delta version(s) 1, 2" in twice.cause
    assert "offsets re-processed" in twice.cause


def test_an_unexplained_commit_is_output_the_ledger_does_not_account_for() -> None:
    [odd] = incidents([commit(0, 0), commit(1, 1), commit(2, 2)], [batch(0, 0, 5), batch(1, 5, 9)])
    assert (odd.kind, odd.severity) == (vocab.INCIDENT_LEDGER_GAP, vocab.WARN)
    assert vocab.SINK_COMMIT_UNEXPLAINED in odd.cause
