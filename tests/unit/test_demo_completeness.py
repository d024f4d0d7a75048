"""The demo's completeness verdict: each injected loss in the windows its records were produced in."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.demo.story import completeness_errors

pytestmark = pytest.mark.unit

T = datetime(2026, 11, 25, 6, 0, 30, tzinfo=UTC)


def at(minute: int) -> datetime:
    return datetime(2026, 11, 25, 6, minute, tzinfo=UTC)


def test_a_loss_in_the_windows_it_was_produced_in_is_right() -> None:
    produced = (T, T.replace(minute=1, second=10))  # 06:00:30 .. 06:01:10: windows 06:00 and 06:01
    lost = {("orders", 0): {at(0): 30, at(1): 20}}
    assert completeness_errors(lost, {("orders", 0): (50, produced)}, 1) == []


def test_a_wrong_count_a_wrong_window_and_an_uninjected_loss_are_each_named() -> None:
    produced = (T, T.replace(second=50))
    lost = {("orders", 0): {at(0): 40}, ("orders", 1): {at(0): 10, at(3): 40}, ("other", 0): {at(0): 1}}
    injected = {("orders", 0): (50, produced), ("orders", 1): (50, produced)}
    errors = completeness_errors(lost, injected, 1)
    assert errors == [
        "other partition 0: 1 records lost, none injected",
        "orders partition 0: 40 records lost, 50 injected",
        "orders partition 1: loss in window 06:03, outside the injection",
    ]


def test_an_injected_loss_the_table_does_not_hold_is_named() -> None:
    assert completeness_errors({}, {("orders", 2): (50, (T, T))}, 10) == [
        "orders partition 2: 0 records lost, 50 injected"
    ]
