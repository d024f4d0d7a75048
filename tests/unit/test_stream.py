"""Pure parts of the streaming job: Spark checkpoint files, startup plans, crash recovery."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from app.contracts.vocabulary import (
    EVENT_CHECKPOINT_COMPLETED,
    EVENT_CHECKPOINT_SNAPSHOT,
    EVENT_COMMIT_FAILED,
)
from app.errors import CheckpointFormatError, OffsetAuditError
from app.stream.job import StopWhen, add_progress, progress_end_offsets
from app.stream.recorder import recovery_events
from app.stream.startup import (
    LedgerFacts,
    PartitionStart,
    StartupPlan,
    batch_ids,
    parse_initial_offsets,
    parse_offset_log,
    plan_checkpoint_resume,
    plan_fresh_start,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

# Exactly what Spark 4.1 writes to <checkpoint>/offsets/<batch> for one Kafka source.
OFFSET_LOG = (
    "v1\n"
    '{"batchWatermarkMs":0,"batchTimestampMs":1795300000000,"conf":{"spark.sql.shuffle.partitions":"2"}}\n'
    '{"orders":{"2":340,"1":333,"0":327}}'
)


def test_offset_log_gives_end_offsets_per_partition() -> None:
    assert parse_offset_log(OFFSET_LOG) == {("orders", 0): 327, ("orders", 1): 333, ("orders", 2): 340}


def test_offset_log_with_two_topics() -> None:
    text = 'v1\n{}\n{"a":{"0":5},"b":{"0":7,"1":0}}\n'
    assert parse_offset_log(text) == {("a", 0): 5, ("b", 0): 7, ("b", 1): 0}


@pytest.mark.parametrize("text", ["", "v1\n{}\n", "garbage\n{}\n{}", 'v1\n{}\n{"a": {"0": 1}'])
def test_malformed_offset_log_is_a_clear_error(text: str) -> None:
    with pytest.raises(CheckpointFormatError):
        parse_offset_log(text)


def test_batch_ids_skip_crc_and_temp_files() -> None:
    assert batch_ids(["0", "1", ".1.crc", "10", "2.tmp", "_spark_metadata"]) == [0, 1, 10]


TPS = [("orders", 0), ("orders", 1)]
MARKS = {("orders", 0): (10, 100), ("orders", 1): (0, 50)}


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            "earliest",
            {("orders", 0): PartitionStart(10, "earliest"), ("orders", 1): PartitionStart(0, "earliest")},
        ),
        (
            "latest",
            {("orders", 0): PartitionStart(100, "latest"), ("orders", 1): PartitionStart(50, "latest")},
        ),
    ],
)
def test_fresh_start_earliest_and_latest(mode: str, expected: dict[tuple[str, int], PartitionStart]) -> None:
    assert plan_fresh_start(mode, TPS, MARKS).starts == expected


def test_group_mode_uses_commits_and_resets_partitions_without_one() -> None:
    plan = plan_fresh_start("group", TPS, MARKS, committed={("orders", 0): 42}, reset="latest")
    assert plan.starts == {
        ("orders", 0): PartitionStart(42, "group"),
        ("orders", 1): PartitionStart(50, "latest"),
    }


def test_out_of_range_commit_is_clamped_and_noted() -> None:
    plan = plan_fresh_start("group", TPS, MARKS, committed={("orders", 0): 3, ("orders", 1): 7})
    assert plan.starts[("orders", 0)] == PartitionStart(10, "group")
    assert plan.notes == ("orders-0: group offset 3 outside [10, 100], clamped",)


def test_timestamp_and_specific_modes() -> None:
    by_ts = plan_fresh_start("timestamp", TPS, MARKS, by_timestamp={("orders", 1): 20})
    assert by_ts.starts[("orders", 1)] == PartitionStart(20, "timestamp")
    assert by_ts.starts[("orders", 0)] == PartitionStart(10, "earliest")  # no record after the timestamp
    specific = plan_fresh_start("specific", TPS, MARKS, specific={("orders", 0): 55, ("orders", 1): 1})
    assert specific.starting_offsets_json() == '{"orders": {"0": 55, "1": 1}}'


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(OffsetAuditError, match="unknown startup mode 'checkpoint'"):
        plan_fresh_start("checkpoint", TPS, MARKS)


def test_starting_offsets_need_resolved_numbers() -> None:
    with pytest.raises(OffsetAuditError, match="orders-0"):
        StartupPlan("group", {("orders", 0): PartitionStart(None, "group")}).starting_offsets_json()


def test_checkpoint_resume_starts_at_last_committed_batch() -> None:
    offsets = {0: {("orders", 0): 5}, 1: {("orders", 0): 9}, 2: {("orders", 0): 12}}
    plan = plan_checkpoint_resume(offsets, committed_batches=[0, 1])  # batch 2 planned, never committed
    assert plan.restored_checkpoint_id == 1
    assert plan.starts == {("orders", 0): PartitionStart(9, "checkpoint")}


# Exactly what Spark 4.1's Kafka source writes to <checkpoint>/sources/0/0 before its first batch,
# leading zero byte included.
INITIAL_OFFSETS = '\x00v1\n{"orders":{"2":11,"1":7,"0":5}}'


def test_initial_offsets_give_where_the_source_started() -> None:
    expected = {("orders", 0): 5, ("orders", 1): 7, ("orders", 2): 11}
    assert parse_initial_offsets(INITIAL_OFFSETS) == expected
    assert parse_initial_offsets(INITIAL_OFFSETS[1:]) == expected  # without the zero byte too


@pytest.mark.parametrize("text", ["", '{"orders":{"0":5}}', "v1\n[1, 2]", 'v1\n{"orders": 5}', "v1\n{"])
def test_malformed_initial_offsets_are_a_clear_error(text: str) -> None:
    with pytest.raises(CheckpointFormatError):
        parse_initial_offsets(text)


def test_first_checkpoint_never_committed_replays_from_the_sources_initial_offsets() -> None:
    # Killed between offsets/0 and commits/0: Spark runs batch 0 again from sources/0/0.
    initial = parse_initial_offsets(INITIAL_OFFSETS)
    plan = plan_checkpoint_resume(
        {0: {("orders", 0): 50, ("orders", 1): 70, ("orders", 2): 110}},
        committed_batches=[],
        initial_offsets=initial,
    )
    assert plan.mode == "checkpoint"
    assert plan.restored_checkpoint_id is None  # no completed checkpoint to restore
    assert plan.starts == {
        ("orders", 0): PartitionStart(5, "checkpoint"),
        ("orders", 1): PartitionStart(7, "checkpoint"),
        ("orders", 2): PartitionStart(11, "checkpoint"),
    }
    assert plan.notes == ("checkpoint 0 was planned but never committed: Spark replays it",)


def test_killed_before_the_first_offset_log_entry_still_starts_at_the_initial_offsets() -> None:
    plan = plan_checkpoint_resume({}, committed_batches=[], initial_offsets={("orders", 0): 5})
    assert plan.starts == {("orders", 0): PartitionStart(5, "checkpoint")}
    assert plan.notes == ()


def test_without_initial_offsets_the_previous_runs_starts_fill_in() -> None:
    plan = plan_checkpoint_resume(
        {0: {("orders", 0): 50, ("orders", 1): 70}},
        committed_batches=[],
        initial_offsets={("orders", 0): 5, ("orders", 1): -2},  # a sentinel is no position
        previous_starts={("orders", 1): 6},
    )
    assert plan.starts == {
        ("orders", 0): PartitionStart(5, "checkpoint"),
        ("orders", 1): PartitionStart(6, "checkpoint"),
    }
    assert "orders-1 taken from the previous run's OFFSETS_RESTORED" in plan.notes[1]


def test_a_partition_nobody_knows_the_start_of_is_still_recorded() -> None:
    plan = plan_checkpoint_resume({0: {("orders", 0): 50}}, committed_batches=[])
    assert plan.starts == {("orders", 0): PartitionStart(None, "checkpoint")}


def test_a_committed_batch_wins_over_initial_offsets() -> None:
    plan = plan_checkpoint_resume(
        {0: {("orders", 0): 50}, 1: {("orders", 0): 60}},
        committed_batches=[0],
        initial_offsets={("orders", 0): 5},
    )
    assert (plan.restored_checkpoint_id, plan.starts) == (
        0,
        {("orders", 0): PartitionStart(50, "checkpoint")},
    )


def test_recovery_rebuilds_unflushed_snapshots_completions_and_open_commits() -> None:
    facts = LedgerFacts(
        snapshot_ids=frozenset({0, 1}),
        completed_ids=frozenset({0}),
        open_commit_attempts={("run-a", 2): 1},
        last_run_id="run-a",
    )
    offset_log = {0: {("t", 0): 3}, 1: {("t", 0): 6}, 2: {("t", 0): 9}}
    events = recovery_events(facts, offset_log, [0, 1], "job", "grp", "run-b", NOW)
    got = sorted((e.event_type, e.checkpoint_id, e.run_id, e.offset) for e in events)
    assert got == [
        (EVENT_CHECKPOINT_COMPLETED, 1, "run-a", 6),
        (EVENT_CHECKPOINT_SNAPSHOT, 2, "run-a", 9),
        (EVENT_COMMIT_FAILED, 1, "run-a", None),
    ]
    failed = next(e for e in events if e.event_type == EVENT_COMMIT_FAILED)
    assert failed.detail["error"] == "OUTCOME_UNKNOWN"
    assert failed.detail["attempt"] == 2
    assert all(e.detail["recovered"] is True and e.detail["recovered_by"] == "run-b" for e in events)


def test_recovery_with_a_complete_ledger_adds_nothing() -> None:
    facts = LedgerFacts(frozenset({0}), frozenset({0}), {}, "run-a")
    assert recovery_events(facts, {0: {("t", 0): 3}}, [0], "job", "grp", "run-b", NOW) == []


def test_recovered_events_carry_the_time_spark_wrote_the_checkpoint_file() -> None:
    facts = LedgerFacts(frozenset(), frozenset(), {}, "run-a")
    planned = datetime(2026, 11, 1, 11, 0, 1, tzinfo=UTC)
    committed = datetime(2026, 11, 1, 11, 0, 4, tzinfo=UTC)
    events = recovery_events(
        facts,
        {0: {("t", 0): 3}},
        [0],
        "job",
        "grp",
        "run-b",
        NOW,
        written_at={("offsets", 0): planned, ("commits", 0): committed},
    )
    assert {(e.event_type, e.event_time) for e in events} == {
        (EVENT_CHECKPOINT_SNAPSHOT, planned),
        (EVENT_CHECKPOINT_COMPLETED, committed),
    }


def test_progress_reports_count_each_batch_once_and_an_empty_report_hides_nothing() -> None:
    rows: dict[int, int] = {}
    for progress in (
        {"batchId": 0, "numInputRows": 150},
        {"batchId": 1, "numInputRows": 150},
        {"batchId": 1, "numInputRows": 150},  # the same batch, from the query's recent progress
        {"batchId": 2, "numInputRows": 0},  # no data yet for the next batch id
        {"batchId": 1, "numInputRows": 0},
        {"numInputRows": 7},  # no batch id: nothing to attribute it to
    ):
        add_progress(rows, progress)
    assert rows == {0: 150, 1: 150, 2: 0}
    add_progress(rows, {"batchId": 2, "numInputRows": 40})
    assert sum(rows.values()) == 340


# Spark's progress report of a trigger over two Kafka partitions, as StreamingQueryProgress.json gives it.
PROGRESS = json.dumps(
    {
        "batchId": 4,
        "numInputRows": 60,
        "sources": [
            {
                "description": "KafkaV2[Subscribe[orders]]",
                "startOffset": {"orders": {"0": 270, "1": 270}},
                "endOffset": {"orders": {"1": 300, "0": 300}},
                "latestOffset": {"orders": {"1": 300, "0": 300}},
                "numInputRows": 60,
            }
        ],
    }
)


def test_the_end_offsets_of_a_trigger_come_from_its_kafka_sources() -> None:
    assert progress_end_offsets(PROGRESS) == {("orders", 0): 300, ("orders", 1): 300}
    assert progress_end_offsets(None) == {}
    not_kafka = json.dumps({"sources": [{"endOffset": "1699999999"}]})
    assert progress_end_offsets(not_kafka) == {}


def test_a_run_stops_on_offsets_only_once_every_listed_partition_reached_them() -> None:
    stop = StopWhen(offsets={("orders", 0): 300, ("orders", 1): 300})
    assert stop.offsets_reached({("orders", 0): 300, ("orders", 1): 310})
    assert not stop.offsets_reached({("orders", 0): 300, ("orders", 1): 299})
    assert not stop.offsets_reached({("orders", 0): 300})  # a partition not read yet
    assert not StopWhen().offsets_reached({("orders", 0): 300})  # no offsets: never this way
