"""One builder of a checkpoint's events (`recorder.batch_events` over `EventSource.checkpoint_events`)
for the reference job, attached queries, imports and recovery.

The reference job's checkpoint events used to come from its committer. A job restarted on a ledger
written that way must write nothing twice: its writes skip what the ledger holds by event key
(`LedgerWriter.write_new`) and its recovery by checkpoint id (`LedgerFacts`), so the keys the old
path wrote and the keys the checkpoint's builder writes must be the same. Pure: stand-ins for the
checkpoint files, no JVM.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from app.contracts import vocabulary as vocab
from app.contracts.offsets import EventSource, LedgerEvent, TopicPartitionKey
from app.kafka.commit_outcome import CommitResult
from app.stream.checkpoint import COMMITS, OFFSETS, CheckpointFiles
from app.stream.committer import OffsetCommitter
from app.stream.ledger_import import imported_restored
from app.stream.recorder import batch_events, recovery_events
from app.stream.startup import ENGINE, LedgerFacts, PartitionStart, StartupPlan

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OFFSETS_0 = {("orders", 1): 7, ("orders", 0): 5}
OFFSETS_1 = {("orders", 0): 9, ("orders", 1): 12}
SOURCE = EventSource("orders-job", "run-1", ENGINE, "orders-audit")


class Files:
    """Spark wrote `offsets/<n>` at second 10n and `commits/<n>` at second 10n + 5."""

    def written_at(self, log_name: str, batch_id: int) -> datetime:
        return T0 + timedelta(seconds=10 * batch_id + (5 if log_name == COMMITS else 0))


CHECKPOINT = cast(CheckpointFiles, Files())


def old_reference_job_events() -> list[LedgerEvent]:
    """Batches 0 and 1 as the reference job recorded them before: by its committer."""
    committer = OffsetCommitter(
        job_name="orders-job",
        run_id="run-1",
        engine=ENGINE,
        group_id="orders-audit",
        commit_fn=CommitResult.ok,
        autostart=False,
    )
    for batch, offsets in ((0, OFFSETS_0), (1, OFFSETS_1)):
        committer.snapshot(batch, offsets)
        committer.notify_checkpoint_complete(batch)
    checkpoint_types = (vocab.EVENT_CHECKPOINT_SNAPSHOT, vocab.EVENT_CHECKPOINT_COMPLETED)
    return [e for e in committer.drain() if e.event_type in checkpoint_types]


def new_reference_job_events() -> list[LedgerEvent]:
    """The same batches as the reference job records them now: the snapshot in its batch, the
    completion once Spark's commit log has it."""
    events: list[LedgerEvent] = []
    for batch, offsets in ((0, OFFSETS_0), (1, OFFSETS_1)):
        events += batch_events(CHECKPOINT, SOURCE, batch, offsets, completed=False, now=T0)
        events += batch_events(CHECKPOINT, SOURCE, batch, offsets, snapshot=False, completed=True, now=T0)
    return events


def test_the_checkpoints_builder_keys_events_as_the_old_reference_job_did() -> None:
    old, new = old_reference_job_events(), new_reference_job_events()

    assert len(old) == len(new) == 8  # 2 batches x (snapshot, completion) x 2 partitions
    assert sorted(e.event_key for e in new) == sorted(e.event_key for e in old)
    # Row for row the same but for the time: the checkpoint's file time instead of the clock's.
    columns = ("job_name", "run_id", "engine", "checkpoint_id", "event_type", "group_id", "topic")
    other = ("partition", "offset", "raw_offset", "offset_semantics", "detail")

    def stable(e: LedgerEvent) -> tuple[object, ...]:
        row = e.to_row()
        return tuple(row[c] for c in (*columns, *other))

    assert sorted(map(stable, new)) == sorted(map(stable, old))


def test_a_restart_on_a_ledger_the_old_reference_job_wrote_recovers_nothing_again() -> None:
    old = old_reference_job_events()

    def ids(event_type: str) -> frozenset[int]:
        return frozenset(e.checkpoint_id or 0 for e in old if e.event_type == event_type)

    facts = LedgerFacts(
        snapshot_ids=ids(vocab.EVENT_CHECKPOINT_SNAPSHOT),
        completed_ids=ids(vocab.EVENT_CHECKPOINT_COMPLETED),
        open_commit_attempts={},
        last_run_id="run-1",
    )
    offset_log: dict[int, dict[TopicPartitionKey, int]] = {0: OFFSETS_0, 1: OFFSETS_1}

    recovered = recovery_events(facts, offset_log, [0, 1], "orders-job", "orders-audit", "run-2", T0)

    assert recovered == []
    # And a write of the new builder's events over those rows finds every key stored already.
    assert {e.event_key for e in new_reference_job_events()} <= {e.event_key for e in old}


def test_batch_events_are_stamped_when_spark_wrote_the_batchs_files() -> None:
    events = batch_events(CHECKPOINT, SOURCE, 1, OFFSETS_1, completed=True, now=T0)

    times = {(e.event_type, e.event_time) for e in events}
    assert times == {
        (vocab.EVENT_CHECKPOINT_SNAPSHOT, Files().written_at(OFFSETS, 1)),
        (vocab.EVENT_CHECKPOINT_COMPLETED, Files().written_at(COMMITS, 1)),
    }


def test_a_batch_of_no_partitions_is_one_checkpoint_level_event_for_every_writer() -> None:
    committer = OffsetCommitter(
        job_name="orders-job",
        run_id="run-1",
        engine=ENGINE,
        group_id="orders-audit",
        commit_fn=CommitResult.ok,
        autostart=False,
    )
    committer.snapshot(3, {})
    from_committer = [e.event_key for e in committer.drain()]

    from_checkpoint = [e.event_key for e in batch_events(CHECKPOINT, SOURCE, 3, {}, completed=False, now=T0)]
    facts = LedgerFacts(frozenset(), frozenset(), {}, "run-1")
    recovered = recovery_events(facts, {3: {}}, [], "orders-job", "orders-audit", "run-2", T0)

    assert from_checkpoint == from_committer
    assert [(e.event_type, e.checkpoint_id, e.topic) for e in recovered] == [
        (vocab.EVENT_CHECKPOINT_SNAPSHOT, 3, None)
    ]


def test_a_committer_that_does_not_record_checkpoints_records_only_its_commit_decisions() -> None:
    committer = OffsetCommitter(
        job_name="orders-job",
        run_id="run-1",
        engine=ENGINE,
        group_id="orders-audit",
        commit_fn=CommitResult.ok,
        autostart=False,
        records_checkpoints=False,
    )
    committer.snapshot(0, OFFSETS_0)
    committer.notify_checkpoint_complete(0)
    committer.notify_checkpoint_complete(5)  # unknown: still recorded as a skipped commit
    committer.run_once()

    types = [(e.event_type, e.checkpoint_id) for e in committer.drain()]
    assert types == [
        (vocab.EVENT_COMMIT_REQUESTED, 0),
        (vocab.EVENT_COMMIT_REQUESTED, 0),
        (vocab.EVENT_COMMIT_SKIPPED, 5),
        (vocab.EVENT_COMMIT_SUCCEEDED, 0),
        (vocab.EVENT_COMMIT_SUCCEEDED, 0),
    ]


def test_an_imports_offsets_restored_are_the_shared_builders_with_imported_in_detail() -> None:
    plan = StartupPlan(
        mode=vocab.RESTORE_SPECIFIC,
        starts={tp: PartitionStart(o, vocab.RESTORE_SPECIFIC) for tp, o in OFFSETS_0.items()},
    )
    source = EventSource("orders-job", "query-1", ENGINE, None)

    restored = imported_restored(source, plan, T0)

    assert [(e.event_type, e.topic, e.partition, e.offset, e.detail_json) for e in restored] == [
        (
            vocab.EVENT_OFFSETS_RESTORED,
            "orders",
            p,
            o,
            '{"imported":true,"mode":"specific","source":"specific"}',
        )
        for (_, p), o in sorted(OFFSETS_0.items())
    ]
