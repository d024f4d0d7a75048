"""Offset semantics per engine and the ledger event record (CONTRACTS.md sections 3 and 4)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from app.contracts.offsets import (
    EARLIEST_OFFSET,
    GROUP_OFFSET,
    LATEST_OFFSET,
    OFFSET_NOT_SET,
    TIMESTAMP,
    EventSource,
    LedgerEvent,
    commit_offset_for,
    is_sentinel,
    normalize_offset,
    offset_semantics_for,
)
from app.contracts.tables import LEDGER_SCHEMA
from app.contracts.vocabulary import (
    ENGINE_FLINK_KAFKASOURCE,
    ENGINE_FLINK_LEGACY,
    ENGINE_SPARK,
    EVENT_CHECKPOINT_SNAPSHOT,
    EVENT_COMMIT_FAILED,
    EVENT_COMMIT_REQUESTED,
    EVENT_COMMIT_SKIPPED,
)
from app.errors import InvalidLedgerEventError, InvalidOffsetError, OffsetAuditError, UnknownEngineError

pytestmark = pytest.mark.unit

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
LEGACY_SENTINELS = [OFFSET_NOT_SET, EARLIEST_OFFSET, LATEST_OFFSET, GROUP_OFFSET, TIMESTAMP]


def test_flink_legacy_sentinel_values_match_flink() -> None:
    assert (OFFSET_NOT_SET, EARLIEST_OFFSET, LATEST_OFFSET, GROUP_OFFSET, TIMESTAMP) == (
        -915623761776,
        -915623761775,
        -915623761774,
        -915623761773,
        -915623761777,
    )


@pytest.mark.parametrize(
    ("engine", "sentinels"),
    [
        (ENGINE_FLINK_LEGACY, LEGACY_SENTINELS),
        (ENGINE_FLINK_KAFKASOURCE, [-1, -2, -3, -(2**63)]),
        (ENGINE_SPARK, [-1, -2]),
    ],
)
def test_each_engines_sentinels_normalize_to_none_and_are_never_committed(
    engine: str, sentinels: list[int]
) -> None:
    for raw in sentinels:
        assert is_sentinel(raw, engine)
        assert normalize_offset(raw, engine) is None
        assert commit_offset_for(raw, engine) is None


def test_sentinels_are_engine_specific() -> None:
    assert not is_sentinel(-3, ENGINE_SPARK)
    assert not is_sentinel(GROUP_OFFSET, ENGINE_SPARK)
    assert not is_sentinel(-2, ENGINE_FLINK_LEGACY)
    assert not is_sentinel(0, ENGINE_FLINK_KAFKASOURCE)


@pytest.mark.parametrize(
    ("engine", "raw", "expected"),
    [
        (ENGINE_SPARK, 42, 42),
        (ENGINE_FLINK_KAFKASOURCE, 42, 42),
        (ENGINE_FLINK_LEGACY, 41, 42),
        (ENGINE_SPARK, 0, 0),
        (ENGINE_FLINK_LEGACY, 0, 1),
    ],
)
def test_normalize_offset_returns_next_offset_to_read(engine: str, raw: int, expected: int) -> None:
    assert normalize_offset(raw, engine) == expected


def test_normalize_offset_of_none_is_none() -> None:
    assert normalize_offset(None, ENGINE_SPARK) is None


def test_legacy_minus_one_means_nothing_processed_but_flink_never_commits_it() -> None:
    # The legacy consumer stores position - 1 when starting from group/earliest offsets.
    assert not is_sentinel(-1, ENGINE_FLINK_LEGACY)
    assert normalize_offset(-1, ENGINE_FLINK_LEGACY) == 0
    assert commit_offset_for(-1, ENGINE_FLINK_LEGACY) is None


def test_commit_offset_is_plus_one_for_legacy_and_unchanged_for_next_semantics() -> None:
    assert commit_offset_for(41, ENGINE_FLINK_LEGACY) == 42
    assert commit_offset_for(42, ENGINE_FLINK_KAFKASOURCE) == 42
    assert commit_offset_for(42, ENGINE_SPARK) == 42
    assert commit_offset_for(None, ENGINE_SPARK) is None


@pytest.mark.parametrize(
    ("engine", "raw"), [(ENGINE_SPARK, -5), (ENGINE_SPARK, GROUP_OFFSET), (ENGINE_FLINK_LEGACY, -2)]
)
def test_negative_non_sentinel_offset_is_rejected(engine: str, raw: int) -> None:
    with pytest.raises(InvalidOffsetError) as info:
        normalize_offset(raw, engine)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, OffsetAuditError)


def test_offset_semantics_per_engine() -> None:
    assert offset_semantics_for(ENGINE_SPARK) == "next"
    assert offset_semantics_for(ENGINE_FLINK_KAFKASOURCE) == "next"
    assert offset_semantics_for(ENGINE_FLINK_LEGACY) == "last_processed"


def test_unknown_engine_raises_a_value_error_of_the_app_family() -> None:
    for call in (
        lambda: is_sentinel(1, "storm"),
        lambda: normalize_offset(1, "storm"),
        lambda: commit_offset_for(1, "storm"),
        lambda: offset_semantics_for("storm"),
        lambda: normalize_offset(None, "storm"),
    ):
        with pytest.raises(UnknownEngineError, match="storm") as info:
            call()
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, OffsetAuditError)


# --- LedgerEvent -----------------------------------------------------------------------------------


def _event(**overrides: object) -> LedgerEvent:
    values: dict[str, object] = {
        "job_name": "orders",
        "run_id": "run-1",
        "engine": ENGINE_SPARK,
        "checkpoint_id": 7,
        "event_type": EVENT_COMMIT_REQUESTED,
        "event_time": T0,
        "group_id": "g",
        "topic": "t",
        "partition": 0,
        "offset": 10,
        "raw_offset": 10,
        "detail": {"attempt": 1},
    }
    values.update(overrides)
    return LedgerEvent(**values)  # type: ignore[arg-type]


def test_partition_events_keep_raw_offset_normalize_offset_and_sort_partitions() -> None:
    writer = EventSource("orders", "run-1", ENGINE_FLINK_LEGACY, "g")
    events = writer.partition_events(
        EVENT_CHECKPOINT_SNAPSHOT, T0, 3, {("t", 1): 41, ("a", 0): GROUP_OFFSET, ("t", 0): -1}, {}
    )
    assert [(e.topic, e.partition, e.raw_offset, e.offset) for e in events] == [
        ("a", 0, GROUP_OFFSET, None),
        ("t", 0, -1, 0),
        ("t", 1, 41, 42),
    ]
    assert {e.offset_semantics for e in events} == {"last_processed"}
    assert {e.checkpoint_id for e in events} == {3}


def test_detail_json_has_sorted_keys_and_is_frozen_at_construction() -> None:
    detail: dict[str, object] = {"b": 1, "a": [1, 2]}
    event = _event(detail=detail)
    detail["c"] = 3
    assert event.detail_json == '{"a":[1,2],"b":1}'
    assert json.loads(event.detail_json) == {"a": [1, 2], "b": 1}


def test_event_time_is_converted_to_utc_and_event_date_derives_from_it() -> None:
    plus_two = timezone(timedelta(hours=2))
    event = _event(event_time=datetime(2024, 1, 1, 1, 30, tzinfo=plus_two))
    assert event.event_time == datetime(2023, 12, 31, 23, 30, tzinfo=UTC)
    assert event.event_time.utcoffset() == timedelta(0)
    assert event.event_date == date(2023, 12, 31)


@pytest.mark.parametrize(
    "overrides",
    [
        {"event_time": datetime(2024, 5, 1, 12, 0)},  # naive
        {"event_type": "COMMITTED"},
        {"event_type": EVENT_COMMIT_SKIPPED, "detail": {}},
        {"event_type": EVENT_COMMIT_SKIPPED, "detail": {"reason": "because"}},
        {"offset_semantics": "last_processed"},  # contradicts engine spark
        {"topic": None},  # partition without topic
        {"detail": {"when": T0}},  # not JSON-serializable
    ],
)
def test_invalid_ledger_events_are_rejected_at_construction(overrides: dict[str, object]) -> None:
    with pytest.raises(InvalidLedgerEventError):
        _event(**overrides)


def test_unknown_engine_is_rejected_by_ledger_event() -> None:
    with pytest.raises(UnknownEngineError):
        _event(engine="storm")


def test_offset_semantics_is_derived_from_engine_when_omitted() -> None:
    assert _event().offset_semantics == "next"
    assert _event(engine=ENGINE_FLINK_LEGACY, offset_semantics="last_processed").offset_semantics == (
        "last_processed"
    )


def test_event_key_ignores_event_time_so_a_retried_write_has_the_same_key() -> None:
    first = _event()
    retried = _event(event_time=T0 + timedelta(minutes=5))
    assert first.event_key == retried.event_key
    assert first.attempt == 1


@pytest.mark.parametrize(
    "overrides",
    [
        {"job_name": "other"},
        {"run_id": "run-2"},
        {"checkpoint_id": 8},
        {"event_type": EVENT_COMMIT_FAILED, "detail": {"attempt": 1, "error": "X"}},
        {"topic": "u"},
        {"partition": 1},
        {"detail": {"attempt": 2}},
    ],
)
def test_event_key_distinguishes_identity_fields(overrides: dict[str, object]) -> None:
    assert _event(**overrides).event_key != _event().event_key


def test_event_key_distinguishes_skip_reasons_and_failure_errors_of_one_checkpoint() -> None:
    evicted = _event(event_type=EVENT_COMMIT_SKIPPED, detail={"reason": "pending_evicted"})
    unknown = _event(event_type=EVENT_COMMIT_SKIPPED, detail={"reason": "unknown_checkpoint"})
    outcome_unknown = _event(
        event_type=EVENT_COMMIT_FAILED, detail={"attempt": 1, "error": "OUTCOME_UNKNOWN"}
    )
    fenced = _event(event_type=EVENT_COMMIT_FAILED, detail={"attempt": 1, "error": "ILLEGAL_GENERATION"})
    assert evicted.event_key != unknown.event_key
    assert outcome_unknown.event_key != fenced.event_key


def test_to_row_yields_the_ledger_contract_columns_in_order() -> None:
    row = _event().to_row()
    assert list(row) == LEDGER_SCHEMA.fieldNames()
    assert row["detail"] == '{"attempt":1}'
    assert row["event_date"] == date(2024, 5, 1)
    assert row["offset_semantics"] == "next"


def test_ledger_event_is_hashable_and_compares_by_value() -> None:
    assert _event() == _event()
    assert len({_event(), _event()}) == 1
