"""The ledger events of a Flink job, built from recorded REST documents and decoded offsets."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.contracts import vocabulary as vocab
from app.contracts.offsets import EARLIEST_OFFSET, KAFKASOURCE_COMMITTED_OFFSET, EventSource
from app.flink import events as ev
from app.flink.metadata import FlinkCheckpointOffsets, SplitOffset
from app.flink.rest import Restore, parse_checkpoints

pytestmark = pytest.mark.unit

SAMPLES = Path(__file__).parent / "flink_rest"
JOB_ID = "4f2c7d1e9a6b40c8b1d3e5f7a9c0b2d4"


def sample(name: str) -> Any:
    return json.loads((SAMPLES / name).read_text())


def decoded(checkpoint_id: int, engine: str, offsets: dict[tuple[str, int], int]) -> FlinkCheckpointOffsets:
    splits = tuple(SplitOffset(t, p, o, None) for (t, p), o in offsets.items())
    return FlinkCheckpointOffsets(
        checkpoint_id, engine, "bc764cd8ddf7a0cff126f51c16239658", f"/cp/chk-{checkpoint_id}", splits
    )


def source(engine: str = vocab.ENGINE_FLINK_KAFKASOURCE, group: str | None = "payments-group") -> EventSource:
    return EventSource("payments", "run-1", engine, group)


def ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, UTC)


def test_each_attempt_is_a_run_named_by_rest_facts_alone() -> None:
    restore = parse_checkpoints(sample("checkpoints-1.20.json")).restored

    assert ev.run_id_of(JOB_ID, None) == JOB_ID
    assert ev.run_id_of(JOB_ID, restore) == f"{JOB_ID}-restore-3-1764237603500"
    # The same checkpoint restored by a second failover is another run.
    again = Restore(3, 1764237699000, False, None)
    assert ev.run_id_of(JOB_ID, again) != ev.run_id_of(JOB_ID, restore)


def test_a_restored_attempt_starts_at_its_restore_with_the_restored_offsets() -> None:
    checkpoints = parse_checkpoints(sample("checkpoints-1.20.json"))
    attempt = ev.Attempt(JOB_ID, 1764237600000, checkpoints.restored)
    src = EventSource("payments", attempt.run_id, vocab.ENGINE_FLINK_KAFKASOURCE, "payments-group")

    started = ev.run_started(src, attempt)
    restored = ev.offsets_restored(src, attempt, {("orders", 1): 70, ("orders", 0): 42})

    assert started.event_type == vocab.EVENT_RUN_STARTED
    assert started.event_time == ms(1764237603500)
    assert started.checkpoint_id == 3
    assert started.detail["startup_mode"] == vocab.RESTORE_CHECKPOINT
    assert started.detail[vocab.DETAIL_FLINK_JOB_ID] == JOB_ID
    assert str(started.detail[vocab.DETAIL_EXTERNAL_PATH]).endswith("/chk-3")
    assert [(e.topic, e.partition, e.offset, e.checkpoint_id) for e in restored] == [
        ("orders", 0, 42, 3),
        ("orders", 1, 70, 3),
    ]
    assert {e.detail[vocab.DETAIL_SOURCE] for e in restored} == {vocab.RESTORE_CHECKPOINT}
    assert all(e.event_time == ms(1764237603500) for e in restored)


def test_a_savepoint_restore_says_savepoint() -> None:
    attempt = ev.Attempt(
        JOB_ID, 1764237600000, Restore(8, 1764237700000, True, "file:/sp/savepoint-4f2c7d-aa")
    )
    src = source()

    assert ev.run_started(src, attempt).detail["startup_mode"] == vocab.RESTORE_SAVEPOINT
    restored = ev.offsets_restored(src, attempt, {("orders", 0): 40})
    assert restored[0].detail[vocab.DETAIL_SOURCE] == vocab.RESTORE_SAVEPOINT


def test_a_job_started_without_state_has_no_restored_offsets_and_says_what_the_user_told() -> None:
    attempt = ev.Attempt(JOB_ID, 1764237600000, None)

    started = ev.run_started(source(), attempt, startup_mode=vocab.RESTORE_LATEST)

    assert started.event_time == ms(1764237600000)
    assert started.checkpoint_id is None
    assert started.detail["startup_mode"] == vocab.RESTORE_LATEST
    assert ev.offsets_restored(source(), attempt, {("orders", 0): 5}) == []


def test_a_completed_checkpoint_is_a_snapshot_at_its_trigger_and_a_completion_at_its_last_ack() -> None:
    stat = next(
        s for s in parse_checkpoints(sample("checkpoints-1.20.json")).history if s.checkpoint_id == 11
    )
    offsets = decoded(11, vocab.ENGINE_FLINK_KAFKASOURCE, {("orders", 0): 120, ("orders", 1): 97})

    events = ev.checkpoint_events(source(group=None), stat, offsets)

    snapshots = [e for e in events if e.event_type == vocab.EVENT_CHECKPOINT_SNAPSHOT]
    completions = [e for e in events if e.event_type == vocab.EVENT_CHECKPOINT_COMPLETED]
    assert [(e.partition, e.offset, e.raw_offset) for e in completions] == [(0, 120, 120), (1, 97, 97)]
    assert {e.checkpoint_id for e in events} == {11}
    assert {e.event_time for e in snapshots} == {ms(1764237611000)}
    assert {e.event_time for e in completions} == {ms(1764237611057)}
    assert {e.engine for e in events} == {vocab.ENGINE_FLINK_KAFKASOURCE}
    assert {e.offset_semantics for e in events} == {vocab.SEMANTICS_NEXT}
    assert completions[0].detail[vocab.DETAIL_EXTERNAL_PATH] == stat.external_path
    assert completions[0].detail[vocab.DETAIL_OPERATOR_ID] == "bc764cd8ddf7a0cff126f51c16239658"
    assert not any(e.event_type == vocab.EVENT_COMMIT_REQUESTED for e in events)  # no group


def test_the_legacy_consumers_last_processed_offsets_are_normalised_and_its_sentinels_are_not_offsets() -> (
    None
):
    stat = next(
        s for s in parse_checkpoints(sample("checkpoints-1.20.json")).history if s.checkpoint_id == 10
    )
    offsets = decoded(10, vocab.ENGINE_FLINK_LEGACY, {("orders", 0): 119, ("orders", 1): EARLIEST_OFFSET})

    # The run's source was made before the engine was known: the state's engine wins.
    events = ev.checkpoint_events(source(vocab.ENGINE_FLINK_KAFKASOURCE), stat, offsets)

    completed = {e.partition: e for e in events if e.event_type == vocab.EVENT_CHECKPOINT_COMPLETED}
    assert (completed[0].raw_offset, completed[0].offset) == (119, 120)
    assert (completed[1].raw_offset, completed[1].offset) == (EARLIEST_OFFSET, None)
    assert {e.engine for e in events} == {vocab.ENGINE_FLINK_LEGACY}
    requested = [e for e in events if e.event_type == vocab.EVENT_COMMIT_REQUESTED]
    # Flink commits only real offsets: the partition still at its sentinel is not committed.
    assert [(e.partition, e.offset) for e in requested] == [(0, 120)]
    assert requested[0].detail[vocab.DETAIL_INFERRED] is True
    assert requested[0].event_time == ms(1764237610031)
    assert requested[0].group_id == "payments-group"


def test_kafkasource_sentinels_are_recorded_raw_and_never_requested() -> None:
    stat = next(
        s for s in parse_checkpoints(sample("checkpoints-1.20.json")).history if s.checkpoint_id == 10
    )
    offsets = decoded(10, vocab.ENGINE_FLINK_KAFKASOURCE, {("orders", 0): KAFKASOURCE_COMMITTED_OFFSET})

    events = ev.checkpoint_events(source(), stat, offsets)

    assert [(e.event_type, e.offset) for e in events] == [
        (vocab.EVENT_CHECKPOINT_SNAPSHOT, None),
        (vocab.EVENT_CHECKPOINT_COMPLETED, None),
    ]


def test_missed_checkpoints_are_named_on_the_next_completion_only() -> None:
    stat = next(
        s for s in parse_checkpoints(sample("checkpoints-1.20.json")).history if s.checkpoint_id == 11
    )
    missed = [
        ev.Missed(10, vocab.MISSED_FILES_GONE, "no _metadata"),
        ev.Missed(9, vocab.MISSED_NOT_IN_HISTORY),
    ]

    events = ev.checkpoint_events(
        source(), stat, decoded(11, vocab.ENGINE_FLINK_KAFKASOURCE, {("t", 0): 5}), missed=missed
    )

    by_type = {e.event_type: e for e in events}
    assert by_type[vocab.EVENT_CHECKPOINT_COMPLETED].detail[vocab.DETAIL_MISSED_CHECKPOINTS] == [
        {"id": 10, vocab.DETAIL_REASON: vocab.MISSED_FILES_GONE, vocab.DETAIL_MESSAGE: "no _metadata"},
        {"id": 9, vocab.DETAIL_REASON: vocab.MISSED_NOT_IN_HISTORY},
    ]
    assert vocab.DETAIL_MISSED_CHECKPOINTS not in by_type[vocab.EVENT_CHECKPOINT_SNAPSHOT].detail


def test_an_attempt_owns_the_checkpoints_triggered_from_its_restore_on() -> None:
    checkpoints = parse_checkpoints(sample("checkpoints-1.20.json"))
    attempt = ev.Attempt(JOB_ID, 1764237600000, checkpoints.restored)

    owned = [s.checkpoint_id for s in checkpoints.history if attempt.owns(s)]

    assert owned == [8, 9, 10, 11, 12]  # checkpoint 2 was the attempt before the restore


def test_a_stopped_run_says_how_it_ended_and_what_it_missed() -> None:
    counts = ev.RunCounts(recorded=7, failed=1, missed=[ev.Missed(4, vocab.MISSED_UNREADABLE, "bad magic")])

    stopped = ev.run_stopped(source(), ms(1764237700000), "CANCELED", counts)

    assert stopped.event_type == vocab.EVENT_RUN_STOPPED
    assert stopped.topic is None
    assert stopped.detail[vocab.DETAIL_REASON] == "canceled"
    assert stopped.detail["checkpoints_recorded"] == 7
    assert stopped.detail[vocab.DETAIL_FAILED_CHECKPOINTS] == 1
    assert stopped.detail[vocab.DETAIL_MISSED_CHECKPOINTS] == [
        {"id": 4, vocab.DETAIL_REASON: vocab.MISSED_UNREADABLE, vocab.DETAIL_MESSAGE: "bad magic"}
    ]


def test_a_restore_from_a_retained_checkpoint_is_a_checkpoint_restore_though_flink_2_says_savepoint() -> None:
    restore = Restore(6, 1764237700000, True, f"file:/cp/{JOB_ID}/chk-6")
    attempt = ev.Attempt(JOB_ID, 1764237600000, restore)

    assert ev.run_started(source(), attempt).detail["startup_mode"] == vocab.RESTORE_CHECKPOINT
    restored = ev.offsets_restored(source(), attempt, {("orders", 0): 40})
    assert restored[0].detail[vocab.DETAIL_SOURCE] == vocab.RESTORE_CHECKPOINT
    assert ev.run_started(source(), attempt).detail[vocab.DETAIL_SAVEPOINT] is True  # Flink's own word, kept


def test_a_start_without_state_is_the_brokers_position_lowered_to_the_first_checkpoint() -> None:
    first = decoded(
        4,
        vocab.ENGINE_FLINK_KAFKASOURCE,
        {
            ("orders", 0): 120,
            ("orders", 1): 95,
            ("orders", 2): KAFKASOURCE_COMMITTED_OFFSET,
            ("orders", 3): 7,
        },
    )
    asked = {("orders", 0): 130, ("orders", 1): 80, ("orders", 2): 40}

    # 0: read already, its checkpoint is the lower bound; 1: the broker's; 2: not read yet (a marker):
    # the broker's; 3: the broker gave nothing, so nothing is claimed.
    assert ev.stateless_start(asked, first) == {("orders", 0): 120, ("orders", 1): 80, ("orders", 2): 40}


def test_a_start_without_state_is_written_in_the_dialect_of_the_state_at_the_attempts_start() -> None:
    attempt = ev.Attempt(JOB_ID, 1764237600000, None)

    events = ev.offsets_started(
        source(vocab.ENGINE_FLINK_LEGACY), attempt, vocab.RESTORE_LATEST, {("orders", 0): 150}, 3
    )

    assert [(e.event_type, e.offset, e.raw_offset, e.checkpoint_id) for e in events] == [
        (vocab.EVENT_OFFSETS_RESTORED, 150, 149, None)
    ]
    assert events[0].event_time == ms(1764237600000)
    assert events[0].detail == {vocab.DETAIL_SOURCE: vocab.RESTORE_LATEST, vocab.DETAIL_STARTUP_CHECKPOINT: 3}


def test_the_startup_mode_is_named_by_a_job_parameter_or_by_the_markers_of_unread_partitions() -> None:
    assert ev.startup_mode_named(" Latest-Offset ") == vocab.RESTORE_LATEST
    assert ev.startup_mode_named("committed") == vocab.RESTORE_GROUP
    assert ev.startup_mode_named("timestamp") is None
    assert ev.startup_mode_named(None) is None
    marked = decoded(1, vocab.ENGINE_FLINK_KAFKASOURCE, {("orders", 0): -2, ("orders", 1): 17})
    assert ev.marked_mode(marked) == vocab.RESTORE_EARLIEST
    legacy = decoded(1, vocab.ENGINE_FLINK_LEGACY, {("orders", 0): EARLIEST_OFFSET})
    assert ev.marked_mode(legacy) == vocab.RESTORE_EARLIEST
    mixed = decoded(1, vocab.ENGINE_FLINK_KAFKASOURCE, {("orders", 0): -2, ("orders", 1): -3})
    assert ev.marked_mode(mixed) is None
    assert ev.marked_mode(decoded(1, vocab.ENGINE_FLINK_KAFKASOURCE, {("orders", 0): 5})) is None
