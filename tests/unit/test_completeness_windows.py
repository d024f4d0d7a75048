"""Completeness per window, the pure rules (app.reconcile.completeness.windows,
app.reconcile.completeness.stats): windows aligned to the epoch, which windows a run computes,
bounds from the broker or the sink, missing offsets, verdicts, counts, finality and what the sink
holds of each window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from app.config import CompletenessConfig
from app.errors import ConfigError
from app.reconcile.completeness import windows as cw
from app.reconcile.completeness.stats import ROWS_SCHEMA, StatsPlan, window_stats

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def test_windows_are_aligned_to_the_epoch_whatever_the_clock() -> None:
    assert cw.window_of(T0 + timedelta(minutes=7, seconds=59), 10) == cw.Window(T0, T0 + minutes(10))
    assert cw.window_of(T0 + minutes(10), 10).start == T0 + minutes(10)
    assert [w.start for w in cw.windows_from(T0 + minutes(3), T0 + minutes(25), 10)] == [
        T0,
        T0 + minutes(10),
        T0 + minutes(20),
    ]


def test_lateness_is_the_configured_one_else_twice_the_trigger_plus_five_minutes() -> None:
    assert cw.lateness(CompletenessConfig(), "2 seconds") == timedelta(seconds=304)
    assert cw.lateness(CompletenessConfig(), "1 minute") == timedelta(seconds=420)
    assert cw.lateness(CompletenessConfig(lateness_seconds=60), "2 seconds") == timedelta(seconds=60)
    with pytest.raises(ConfigError, match=r"stream\.trigger_interval"):
        cw.lateness(CompletenessConfig(), "soon")


def test_a_run_computes_from_the_first_provisional_window_and_never_a_final_one_again() -> None:
    now = T0 + minutes(45)
    first_run = cw.windows_to_compute({}, T0 + minutes(12), now, 10)
    assert [w.start for w in first_run] == [T0 + minutes(m) for m in (10, 20, 30, 40)]
    # Final up to 20, provisional 30: from 30 on.
    stored = {T0: True, T0 + minutes(10): True, T0 + minutes(20): True, T0 + minutes(30): False}
    assert [w.start for w in cw.windows_to_compute(stored, T0, now, 10)] == [
        T0 + minutes(30),
        T0 + minutes(40),
    ]
    # A provisional window before a final one is computed again, the final one is not.
    stored = {T0: True, T0 + minutes(10): False, T0 + minutes(20): True}
    assert [w.start for w in cw.windows_to_compute(stored, T0, now, 10)] == [
        T0 + minutes(10),
        T0 + minutes(30),
        T0 + minutes(40),
    ]


def test_bounds_come_from_the_broker_unless_retention_deleted_the_window_then_from_the_sink() -> None:
    assert cw.resolved_offset(-1, 70) == 70
    assert cw.bound_at(T0, 40, log_start=0, sink_starts=[]) == 40
    assert cw.bound_at(T0, 55, log_start=50, sink_starts=[(T0, 10)]) == 55
    # The broker lands on the log start: the sink's timestamps place the deleted records.
    starts = [(T0, 10), (T0 + minutes(10), 25)]
    assert cw.bound_at(T0, 50, 50, starts) == 10
    assert cw.bound_at(T0 + minutes(10), 50, 50, starts) == 25
    assert cw.bound_at(T0 + minutes(20), 50, 50, starts) == 50


def test_missing_offsets_are_the_head_the_holes_and_the_tail() -> None:
    assert cw.missing_ranges((10, 20), None, None, []) == [(10, 20)]
    assert cw.missing_ranges((10, 20), 12, 17, [(14, 16)]) == [(10, 12), (14, 16), (18, 20)]
    assert cw.missing_ranges((10, 20), 10, 19, []) == []
    assert cw.clip([(10, 12), (14, 16), (18, 20)], (11, 15)) == [(11, 12), (14, 15)]


def test_each_offset_takes_the_first_checkpoint_that_completed_past_it() -> None:
    t1, t2, t3 = T0 + minutes(1), T0 + minutes(2), T0 + minutes(3)
    # A replay (checkpoint at 10 after 20) vouches for nothing new.
    assert cw.checkpoint_intervals([(20, t2), (10, t1), (10, t3), (30, t3)]) == [
        (-1, 10, t1),
        (10, 20, t2),
        (20, 30, t3),
    ]


def verdict(found: int, below: int = 0, capped: bool = False) -> dict[str, object]:
    return {
        "data_records": found,
        "offsets_below_log_start": below,
        "offsets_beyond_high_watermark": 0,
        "data_records_capped": capped,
    }


def test_verdicts_split_missing_offsets_into_lost_unverifiable_and_not_expected() -> None:
    counts = cw.verdict_counts([(0, 5), (10, 14)], [verdict(2), verdict(0, below=3)])
    assert counts == cw.Verdicts(lost=2, unverifiable=3, excluded=4)
    assert counts.known
    assert not cw.verdict_counts([(0, 5)], [None]).read
    capped = cw.verdict_counts([(0, 5)], [verdict(5, capped=True)])
    assert (capped.read, capped.capped, capped.known) == (True, True, False)
    assert cw.verdict_counts([], []).known


def facts(offsets: cw.Range, checkpoint: int | None, closed: bool = True) -> cw.WindowFacts:
    return cw.WindowFacts(cw.Window(T0, T0 + minutes(10)), offsets, checkpoint, closed)


def test_coordinates_counts_add_up_and_duplicates_are_extra_copies() -> None:
    f = facts((100, 120), checkpoint=115)
    sink = cw.SinkWindow(landed=14, rows=16, landed_pending=2)
    # Missing below the checkpoint: 3 offsets, 1 data record lost, 2 markers; beyond it 5 - 2 pending.
    counts = cw.coordinates_counts(f, sink, cw.Verdicts(lost=1, unverifiable=0, excluded=2))
    assert (counts.expected, counts.landed, counts.lost, counts.pending, counts.duplicated) == (
        18,
        14,
        1,
        3,
        2,
    )
    assert counts.completeness == pytest.approx(14 / 18)
    assert not counts.final  # offsets beyond the last completed checkpoint


def test_unknown_verdicts_leave_lost_expected_and_completeness_null_and_the_window_open() -> None:
    counts = cw.coordinates_counts(
        facts((0, 10), 10), cw.SinkWindow(landed=8, rows=8), cw.Verdicts(read=False)
    )
    assert (counts.expected, counts.lost, counts.unverifiable, counts.completeness) == (
        None,
        None,
        None,
        None,
    )
    assert not counts.final


def test_a_loss_beyond_the_confirmation_cap_stays_null_but_the_window_can_close() -> None:
    sink = cw.SinkWindow(landed=2, rows=2)
    counts = cw.coordinates_counts(facts((0, 10), 10), sink, cw.Verdicts(capped=True))
    assert (counts.expected, counts.lost, counts.completeness, counts.final) == (None, None, None, True)


def test_a_window_is_final_once_past_lateness_and_below_the_last_completed_checkpoint() -> None:
    window = cw.Window(T0, T0 + minutes(10))
    late = timedelta(seconds=304)
    assert not cw.is_closed(window, late, T0 + minutes(10) + late)
    assert cw.is_closed(window, late, T0 + minutes(10) + late + timedelta(microseconds=1))
    assert facts((0, 10), 10).is_final(True)
    assert not facts((0, 10), 9).is_final(True)
    assert not facts((0, 10), 10, closed=False).is_final(True)
    assert not facts((0, 10), None).is_final(True)
    assert cw.ratio(0, 0) is None


def test_delta_batches_counts_know_lost_batches_and_offsets_in_sink_batches_never_rows() -> None:
    f = facts((100, 120), checkpoint=118)
    counts = cw.batches_counts(f, [(95, 104)], [(110, 112)], cw.Verdicts(lost=3, excluded=1))
    assert (counts.lost, counts.unverifiable, counts.pending, counts.offsets_in_sink_batches) == (3, 2, 2, 12)
    assert (counts.expected, counts.landed, counts.duplicated, counts.completeness) == (
        None,
        None,
        None,
        None,
    )
    # A `none` window knows what no run read (a restart's skip, read back): lost whatever the sink.
    none = cw.offsets_counts(f, cw.Verdicts(lost=5, unverifiable=1))
    assert (none.pending, none.expected, none.lost, none.unverifiable, none.final) == (2, None, 5, 1, False)
    assert cw.offsets_counts(f, cw.Verdicts(read=False)).lost is None  # not read back: unknown


def stats_rows(*rows: tuple[int, int, int | None]) -> pa.Table:
    return pa.table(
        {"_w": [r[0] for r in rows], "_offset": [r[1] for r in rows], "_ts_ms": [r[2] for r in rows]},
        schema=ROWS_SCHEMA,
    )


def test_window_stats_count_distinct_offsets_copies_holes_and_latencies_per_window() -> None:
    # Window 0: offsets 10-14 with 12 missing and 13 twice (its copies at 3_000 and 2_500 ms).
    # Window 1: offsets 20, 21, the second without a timestamp, beyond its pending start 21.
    rows = stats_rows(
        (0, 10, 1_000),
        (0, 11, 2_000),
        (0, 13, 3_000),
        (0, 13, 2_500),
        (0, 14, None),
        (1, 21, None),
        (1, 20, 4_000),
    )
    intervals = ((-1, 12, 10_000), (12, 30, 20_000))
    plans = [StatsPlan(pending_from=15, intervals=intervals), StatsPlan(pending_from=21, intervals=intervals)]
    got = {r["w"]: r for r in window_stats(rows, plans).to_pylist()}
    assert (got[0]["landed"], got[0]["rows"], got[0]["landed_pending"]) == (4, 5, 0)
    assert (got[0]["lowest"], got[0]["highest"], got[0]["holes"]) == (10, 14, [{"s": 12, "e": 13}])
    # Latencies 9_000, 8_000 (checkpoint at 10 s) and 17_500 (the earliest copy, checkpoint at 20 s).
    assert (got[0]["p50"], got[0]["p95"]) == (9_000, 17_500)
    assert (got[1]["landed"], got[1]["landed_pending"], got[1]["holes"]) == (2, 1, [])
    assert (got[1]["p50"], got[1]["p95"]) == (16_000, 16_000)
    assert window_stats(stats_rows(), plans).num_rows == 0


def test_window_stats_leave_latencies_null_without_a_checkpoint_or_a_timestamp() -> None:
    rows = stats_rows((0, 5, None), (0, 40, 1_000))
    got = window_stats(rows, [StatsPlan(pending_from=50, intervals=((-1, 10, 5_000),))]).to_pylist()
    assert (got[0]["p50"], got[0]["p95"], got[0]["landed"]) == (None, None, 2)
