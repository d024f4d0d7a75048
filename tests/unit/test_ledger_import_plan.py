"""Where an imported run starts and which retained batches an import still has to write."""

from __future__ import annotations

import pytest

from app.stream.ledger import QueryRecord
from app.stream.ledger_import import batches_to_import, imported_start
from app.stream.startup import PartitionStart

pytestmark = pytest.mark.unit

A0, A1 = ("a", 0), ("a", 1)


def test_with_batch_0_retained_the_run_starts_where_the_sources_started() -> None:
    plan = imported_start({0: {A0: 10}, 1: {A0: 20}}, {A0: 3, A1: 0})
    assert plan is not None
    assert (plan.mode, plan.restored_checkpoint_id) == ("specific", None)
    assert plan.starts == {A0: PartitionStart(3, "specific"), A1: PartitionStart(0, "specific")}


def test_with_batch_0_purged_the_run_starts_at_the_end_of_the_oldest_retained_batch() -> None:
    plan = imported_start({5: {A0: 50}, 6: {A0: 60}}, {A0: 0})
    assert plan is not None
    assert (plan.mode, plan.restored_checkpoint_id) == ("checkpoint", 5)
    assert plan.starts == {A0: PartitionStart(50, "checkpoint")}
    assert "batches before 5" in plan.notes[0]


def test_a_checkpoint_without_batches_or_initial_offsets_has_no_known_start() -> None:
    assert imported_start({}, None) is None
    assert imported_start({0: {A0: 1}}, None) is None
    started = imported_start({}, {A0: 7})
    assert started is not None
    assert started.starts == {A0: PartitionStart(7, "specific")}


def test_batches_recorded_by_a_run_of_the_query_are_left_out() -> None:
    offset_log = {b: {A0: 10 * b} for b in range(4)}
    record = QueryRecord(frozenset({"run"}), snapshot_ids=frozenset({0, 1, 2}), completed_ids=frozenset({0}))
    # 1: recorded as planned, committed since: its completion alone; 2: recorded as planned and
    # still not committed: nothing; 3: planned, not recorded, not committed: its snapshot alone.
    assert batches_to_import(offset_log, {0, 1}, record) == [(1, False, True), (3, True, False)]
