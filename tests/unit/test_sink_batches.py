"""The delta_batches mode's pure parts: a commit file read into a SinkCommit, and completed
checkpoints mapped to the sink commits that hold them (app.storage.delta_log,
app.reconcile.sink.batches)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from app.reconcile.findings import AuditWindow, Finding
from app.reconcile.sink.batches import BatchRange, CompletedBatch, batch_findings, batches_of
from app.storage.delta_log import SinkCommit, SinkLog, commit_version, parse_commit, undone_versions

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
APP = "query-1"
WINDOW = AuditWindow(until=T0 + timedelta(hours=1), since=T0)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def commit(version: int, batch: int | None, rows: int = 10, app: str = APP) -> SinkCommit:
    """Sink version ``version``, written by ``batch`` of ``app`` (None: a commit with no txn)."""
    txns = () if batch is None else ((app, batch),)
    return SinkCommit(version, at(version * 10), "STREAMING UPDATE", txns, rows)


def batch(batch_id: int, start: int, end: int, app: str = APP) -> CompletedBatch:
    return CompletedBatch(
        "payments", "g", "run-1", app, batch_id, at(batch_id * 10 + 5), (BatchRange("pay", 0, start, end),)
    )


def kinds(found: list[Finding]) -> list[tuple[str, int | None, str]]:
    return sorted((f.finding_type, f.checkpoint_id, f.status) for f in found)


# --- the log reader ------------------------------------------------------------------------------


def test_a_streaming_commit_names_its_batch_and_counts_rows_from_stats() -> None:
    lines = [
        json.dumps({"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "STREAMING UPDATE"}}),
        json.dumps({"txn": {"appId": APP, "version": 7, "lastUpdated": 1}}),
        json.dumps({"add": {"path": "a", "dataChange": True, "stats": json.dumps({"numRecords": 3})}}),
        json.dumps({"add": {"path": "b", "dataChange": True, "stats": json.dumps({"numRecords": 4})}}),
    ]
    c = parse_commit(12, lines)
    assert (c.version, c.operation, c.txns, c.rows_added) == (12, "STREAMING UPDATE", ((APP, 7),), 7)
    assert c.timestamp == datetime.fromtimestamp(1_700_000_000, UTC)


def test_rows_come_from_the_metrics_without_stats_and_an_empty_commit_adds_none() -> None:
    no_stats = [
        json.dumps({"commitInfo": {"operation": "MERGE", "operationMetrics": {"numOutputRows": "5"}}}),
        json.dumps({"add": {"path": "a", "dataChange": True}}),
    ]
    assert parse_commit(1, no_stats).rows_added == 5
    empty = [
        json.dumps({"commitInfo": {"operation": "STREAMING UPDATE"}}),
        json.dumps({"txn": {"appId": APP, "version": 1}}),
    ]
    assert parse_commit(2, empty).rows_added == 0


def test_a_restore_takes_back_the_versions_after_its_target() -> None:
    restore = parse_commit(
        4, [json.dumps({"commitInfo": {"operation": "RESTORE", "operationParameters": {"version": 1}}})]
    )
    assert restore.restored_to == 1
    commits = [commit(0, 0), commit(1, 1), commit(2, 2), commit(3, 3), restore]
    assert undone_versions(commits) == {2: 4, 3: 4}


def test_only_commit_files_have_a_version() -> None:
    assert commit_version("00000000000000000042.json") == 42
    assert commit_version("00000000000000000042.checkpoint.parquet") is None
    assert commit_version(".00000000000000000042.json.tmp") is None
    assert commit_version("00000000000000000042.crc") is None


# --- the mapping ----------------------------------------------------------------------------------


def test_every_batch_committed_once_is_clean() -> None:
    log = SinkLog((commit(0, 0), commit(1, 1, rows=0), commit(2, 2)), 0)
    assert batch_findings([batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 12)], log, WINDOW) == []


def test_a_batch_without_a_commit_is_lost_with_its_offsets_and_neighbours() -> None:
    log = SinkLog((commit(0, 0), commit(1, 2)), 0)
    [lost] = batch_findings([batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 12)], log, WINDOW)
    assert (lost.finding_type, lost.severity, lost.status) == ("BATCH_NOT_IN_SINK", "critical", "confirmed")
    assert (lost.checkpoint_id, lost.topic, lost.offset_start, lost.offset_end, lost.record_count) == (
        1,
        "pay",
        5,
        9,
        4,
    )
    assert (lost.evidence["previous_batch"], lost.evidence["next_batch"]) == (0, 1)


def test_a_batch_a_restore_took_back_is_lost_naming_its_version_but_an_empty_one_is_not() -> None:
    restore = SinkCommit(3, at(30), "RESTORE", (), 0, restored_to=0)
    log = SinkLog((commit(0, 0), commit(1, 1), commit(2, 2, rows=0), restore), 0)
    # Batch 2 read an offset its filter dropped: its empty commit taken back lost nothing.
    [lost] = batch_findings([batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 10)], log, WINDOW)
    assert (lost.finding_type, lost.checkpoint_id) == ("BATCH_NOT_IN_SINK", 1)
    assert (lost.evidence["sink_versions"], lost.evidence["removed_by_restore"]) == ([1], [3])


def test_a_batch_committed_twice_with_data_is_named_as_offsets_reprocessed() -> None:
    log = SinkLog((commit(0, 0), commit(1, 1), commit(2, 1), commit(3, 2, rows=0), commit(4, 2, rows=0)), 0)
    [twice] = batch_findings([batch(0, 0, 5), batch(1, 5, 9), batch(2, 9, 9)], log, WINDOW)
    assert (twice.finding_type, twice.severity, twice.checkpoint_id) == ("BATCH_WRITTEN_TWICE", "error", 1)
    assert twice.evidence["sink_versions"] == [1, 2]
    assert "offsets re-processed" in twice.evidence["meaning"]


def test_a_commit_no_completed_batch_explains_is_unexplained_unless_in_flight() -> None:
    log = SinkLog((commit(0, 0), commit(1, 1), commit(2, 2)), 0)
    [odd] = batch_findings([batch(0, 0, 5), batch(1, 5, 9)], log, WINDOW)
    assert (odd.finding_type, odd.severity, odd.checkpoint_id, odd.evidence["sink_version"]) == (
        "SINK_COMMIT_UNEXPLAINED",
        "warn",
        2,
        2,
    )
    assert batch_findings([batch(0, 0, 5), batch(1, 5, 9)], log, WINDOW, in_flight={APP: 2}) == []


def test_other_writers_and_batches_before_the_ledger_are_not_the_jobs() -> None:
    log = SinkLog((commit(0, 0), commit(1, 1), commit(2, 0, app="other"), commit(3, 2), commit(4, None)), 0)
    assert batch_findings([batch(1, 5, 9), batch(2, 9, 12)], log, WINDOW) == []


def test_a_batch_older_than_the_log_left_by_cleanup_is_unverifiable_never_lost() -> None:
    log = SinkLog((commit(5, 5), commit(6, 6)), 5)  # versions 0-4 were cleaned
    found = batch_findings([batch(1, 5, 9), batch(5, 9, 12), batch(6, 12, 14)], log, WINDOW)
    assert kinds(found) == [("BATCH_NOT_IN_SINK", 1, "unverifiable")]
    assert found[0].severity == "error"


def test_ranges_start_where_the_previous_batch_or_the_run_started() -> None:
    rows = [
        {
            "job_name": "j",
            "run_id": "r1",
            "checkpoint_id": c,
            "topic": "t",
            "partition": 0,
            "group_id": None,
            "offset": o,
            "completed_at": at(c),
        }
        for c, o in ((0, 4), (1, 9))
    ] + [
        {
            "job_name": "j",
            "run_id": "r2",
            "checkpoint_id": 1,
            "topic": "t",
            "partition": 0,
            "group_id": None,
            "offset": 9,
            "completed_at": at(50),
        },  # the same batch recovered by the next run: once
        {
            "job_name": "j",
            "run_id": "x",
            "checkpoint_id": 2,
            "topic": "t",
            "partition": 0,
            "group_id": None,
            "offset": 9,
            "completed_at": at(60),
        },  # a run with no app id
    ]
    found = batches_of(rows, {"r1": APP, "r2": APP}, {("r1", "t", 0): 1})
    assert [(b.batch_id, b.run_id, b.ranges) for b in found] == [
        (0, "r1", (BatchRange("t", 0, 1, 4),)),
        (1, "r1", (BatchRange("t", 0, 4, 9),)),
    ]


# --- a fixed txn app id that outlives its checkpoint ----------------------------------------------

FIXED = "payments-upsert"


def of_query(batch_id: int, start: int, end: int, query: str, started: datetime, done: int) -> CompletedBatch:
    """Batch ``batch_id`` of ``query`` (first started at ``started``) under the fixed app id."""
    return CompletedBatch(
        "payments",
        "g",
        f"run-{query}",
        FIXED,
        batch_id,
        at(done),
        (BatchRange("pay", 0, start, end),),
        query,
        started,
    )


def fixed(version: int, batch_id: int, seconds: int, rows: int = 10) -> SinkCommit:
    return SinkCommit(version, at(seconds), "MERGE", ((FIXED, batch_id),), rows)


def test_a_new_query_under_an_old_app_id_whose_writes_delta_skipped_is_lost_with_its_offsets() -> None:
    # Query A wrote batches 0-2; query B (a new checkpoint, same txnAppId) started at 100s and
    # completed batches 0 and 1, which Delta skipped: the only commits of those ids are A's.
    old = [of_query(b, b * 5, b * 5 + 5, "A", at(0), b * 10 + 5) for b in range(3)]
    new = [of_query(0, 40, 46, "B", at(100), 110), of_query(1, 46, 50, "B", at(100), 120)]
    log = SinkLog((fixed(0, 0, 2), fixed(1, 1, 12), fixed(2, 2, 22)), 0)
    found = batch_findings([*old, *new], log, WINDOW)
    assert kinds(found) == [("BATCH_NOT_IN_SINK", 0, "confirmed"), ("BATCH_NOT_IN_SINK", 1, "confirmed")]
    first = found[0]
    assert (first.severity, first.run_id, first.offset_start, first.offset_end) == (
        "critical",
        "run-B",
        40,
        46,
    )
    assert (first.evidence["earlier_query_versions"], first.evidence["query_id"]) == ([0], "B")
    assert "Delta skipped" in first.evidence["meaning"]


def test_a_restart_of_the_same_query_keeps_the_commits_its_dead_run_made() -> None:
    # One query, two runs: its first start (0s) counts, not the restart's (100s).
    batches = [of_query(b, b * 5, b * 5 + 5, "A", at(0), b * 10 + 5 if b < 2 else 110) for b in range(3)]
    log = SinkLog((fixed(0, 0, 2), fixed(1, 1, 12), fixed(2, 2, 105)), 0)
    assert batch_findings(batches, log, WINDOW) == []


def test_each_query_writing_a_batch_id_once_is_not_written_twice() -> None:
    # A writer that does not skip: both queries' batch 0 are in the table, each once.
    batches = [of_query(0, 0, 5, "A", at(0), 5), of_query(0, 40, 46, "B", at(100), 110)]
    log = SinkLog((fixed(0, 0, 2), fixed(1, 0, 105)), 0)
    assert batch_findings(batches, log, WINDOW) == []


def test_a_new_query_started_seconds_after_the_old_ones_last_commit_leaves_that_commit_the_old_ones() -> None:
    batches = [of_query(0, 0, 5, "A", at(0), 99), of_query(0, 40, 46, "B", at(100), 110)]
    log = SinkLog((fixed(0, 0, 98),), 0)
    [lost] = batch_findings(batches, log, WINDOW)
    assert (lost.finding_type, lost.run_id, lost.evidence["earlier_query_versions"]) == (
        "BATCH_NOT_IN_SINK",
        "run-B",
        [0],
    )


def test_a_commit_older_than_every_query_of_its_app_id_is_the_first_ones() -> None:
    # A run attached after its query's first batch: the ledger's start is later than that commit.
    assert batch_findings([of_query(0, 0, 5, "A", at(30), 35)], SinkLog((fixed(0, 0, 2),), 0), WINDOW) == []


def test_spark_s_own_sink_is_unaffected_by_when_its_query_started() -> None:
    row = {"job_name": "j", "topic": "t", "partition": 0, "group_id": None}
    rows = [{**row, "run_id": "r1", "checkpoint_id": 0, "offset": 4, "completed_at": at(200)}]
    [own] = batches_of(rows, {"r1": APP}, {}, {"r1": (APP, at(100))})
    assert own.query_started_at is None  # a commit older than the run is still the query's
    log = SinkLog((commit(0, 0),), 0)
    assert batch_findings([own], log, WINDOW) == []


def test_a_new_query_under_a_fixed_app_id_is_its_own_batches_starting_where_it_restored() -> None:
    row = {"job_name": "j", "topic": "t", "partition": 0, "group_id": None}
    rows = [
        {**row, "run_id": "r1", "checkpoint_id": 0, "offset": 4, "completed_at": at(5)},
        {**row, "run_id": "r2", "checkpoint_id": 0, "offset": 12, "completed_at": at(105)},
    ]
    queries = {"r1": ("qa", at(0)), "r2": ("qb", at(100))}
    found = batches_of(rows, {"r1": FIXED, "r2": FIXED}, {("r1", "t", 0): 0, ("r2", "t", 0): 9}, queries)
    assert [(b.batch_id, b.run_id, b.query_id, b.query_started_at, b.ranges) for b in found] == [
        (0, "r1", "qa", at(0), (BatchRange("t", 0, 0, 4),)),
        (0, "r2", "qb", at(100), (BatchRange("t", 0, 9, 12),)),
    ]
