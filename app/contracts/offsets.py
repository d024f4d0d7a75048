"""Offset semantics of the engines we audit, and the ledger event record.

Every engine speaks its own offset dialect (CONTRACTS.md section 3): Kafka, Spark and Flink's
``KafkaSource`` store the *next* offset to read, Flink's legacy ``FlinkKafkaConsumer`` stores the
*last processed* offset and commits it + 1, and each uses its own negative sentinels for "no offset
yet". This module translates once, at the edge, so everything downstream compares the normalized
next-offset and never has to know which engine wrote a row.

Pure Python on purpose: the streaming job's committer and the unit tests use it without a JVM.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from types import MappingProxyType
from typing import Final

from app.contracts.tables import LEDGER_SCHEMA
from app.contracts.vocabulary import (
    DETAIL_ATTEMPT,
    DETAIL_ERROR,
    DETAIL_REASON,
    ENGINE_FLINK_KAFKASOURCE,
    ENGINE_FLINK_LEGACY,
    ENGINE_SPARK,
    ENGINES,
    EVENT_COMMIT_SKIPPED,
    EVENT_TYPES,
    SEMANTICS_LAST_PROCESSED,
    SEMANTICS_NEXT,
    SKIP_REASONS,
)
from app.errors import InvalidLedgerEventError, InvalidOffsetError, UnknownEngineError

TopicPartitionKey = tuple[str, int]


# Flink legacy FlinkKafkaConsumer (KafkaTopicPartitionStateSentinel).
OFFSET_NOT_SET: Final = -915623761776
EARLIEST_OFFSET: Final = -915623761775
LATEST_OFFSET: Final = -915623761774
GROUP_OFFSET: Final = -915623761773
TIMESTAMP: Final = -915623761777

# Flink KafkaSource (KafkaPartitionSplit). -1 was LATEST_OFFSET in the connector releases before
# it was removed; old savepoints can still carry it, so it stays a sentinel here.
KAFKASOURCE_LATEST_OFFSET: Final = -1
KAFKASOURCE_EARLIEST_OFFSET: Final = -2
KAFKASOURCE_COMMITTED_OFFSET: Final = -3
# MIGRATED (connector 5.0.0+, Long.MIN_VALUE): a split whose offset the enumerator still has to
# initialise after a restore from an older connector's state; a start position, never an offset.
KAFKASOURCE_MIGRATED_OFFSET: Final = -(2**63)

# Spark's Kafka source offset JSON (startingOffsets / endingOffsets).
SPARK_LATEST_OFFSET: Final = -1
SPARK_EARLIEST_OFFSET: Final = -2

_SENTINELS: Final[Mapping[str, frozenset[int]]] = MappingProxyType(
    {
        ENGINE_SPARK: frozenset({SPARK_LATEST_OFFSET, SPARK_EARLIEST_OFFSET}),
        ENGINE_FLINK_LEGACY: frozenset(
            {OFFSET_NOT_SET, EARLIEST_OFFSET, LATEST_OFFSET, GROUP_OFFSET, TIMESTAMP}
        ),
        ENGINE_FLINK_KAFKASOURCE: frozenset(
            {
                KAFKASOURCE_LATEST_OFFSET,
                KAFKASOURCE_EARLIEST_OFFSET,
                KAFKASOURCE_COMMITTED_OFFSET,
                KAFKASOURCE_MIGRATED_OFFSET,
            }
        ),
    }
)

_SEMANTICS: Final[Mapping[str, str]] = MappingProxyType(
    {
        ENGINE_SPARK: SEMANTICS_NEXT,
        ENGINE_FLINK_LEGACY: SEMANTICS_LAST_PROCESSED,
        ENGINE_FLINK_KAFKASOURCE: SEMANTICS_NEXT,
    }
)

# A new engine in the contract must get an explicit decision here, not a silent default.
if set(_SENTINELS) != set(ENGINES) or set(_SEMANTICS) != set(ENGINES):
    raise AssertionError(f"offset rules cover {sorted(_SENTINELS)} but the contract lists {ENGINES}")


def _check_engine(engine: str) -> str:
    if engine not in _SEMANTICS:
        raise UnknownEngineError(engine, ENGINES)
    return engine


def offset_semantics_for(engine: str) -> str:
    """'next' when the engine stores the next offset to read, 'last_processed' for Flink legacy."""
    return _SEMANTICS[_check_engine(engine)]


def is_sentinel(raw_offset: int, engine: str) -> bool:
    """True when ``raw_offset`` is one of the engine's named "no offset yet" markers."""
    return raw_offset in _SENTINELS[_check_engine(engine)]


def normalize_offset(raw_offset: int | None, engine: str) -> int | None:
    """The next offset to read that ``raw_offset`` stands for; None for a sentinel or no offset.

    Flink legacy's last-processed -1 is not a sentinel: the consumer stores ``position - 1`` when
    it starts from the group offset or from earliest, so -1 means "nothing processed, next is 0".
    Any other negative value is corrupt input and raises rather than being guessed at.
    """
    _check_engine(engine)
    if raw_offset is None or is_sentinel(raw_offset, engine):
        return None
    if engine == ENGINE_FLINK_LEGACY:
        if raw_offset < -1:
            raise InvalidOffsetError(f"offset {raw_offset} is neither valid nor a sentinel for {engine}")
        return raw_offset + 1
    if raw_offset < 0:
        raise InvalidOffsetError(f"offset {raw_offset} is neither valid nor a sentinel for {engine}")
    return raw_offset


def commit_offset_for(raw_offset: int | None, engine: str) -> int | None:
    """The offset a Flink-style committer sends to Kafka for ``raw_offset``; None if it sends none.

    Flink filters every negative raw offset before committing (``isSentinel`` is ``offset < 0``
    in the legacy consumer; ``KafkaSourceReader`` only snapshots ``startingOffset >= 0``), so the
    legacy -1 is not committed even though it normalizes to 0. Legacy commits last processed + 1,
    which is always equal to the normalized offset.
    """
    normalized = normalize_offset(raw_offset, engine)
    if raw_offset is None or normalized is None or raw_offset < 0:
        return None
    return normalized


def _serialize_detail(detail: Mapping[str, object]) -> str:
    # Sorted keys and fixed separators: identical events serialize to identical strings.
    return json.dumps(dict(detail), sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True, kw_only=True)
class LedgerEvent:
    """One ledger row (CONTRACTS.md section 4), before it becomes a Spark row.

    ``offset_semantics`` may be omitted and is then derived from ``engine``; ``event_date``
    derives from ``event_time``. ``detail`` is copied and frozen so an event cannot change after
    it was recorded (the committer hands events across threads).
    """

    job_name: str
    run_id: str
    engine: str
    checkpoint_id: int | None
    event_type: str
    event_time: datetime
    group_id: str | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    raw_offset: int | None = None
    offset_semantics: str | None = None
    detail: Mapping[str, object] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        semantics = offset_semantics_for(self.engine)
        if self.offset_semantics is None:
            object.__setattr__(self, "offset_semantics", semantics)
        elif self.offset_semantics != semantics:
            raise InvalidLedgerEventError(
                f"offset_semantics {self.offset_semantics!r} contradicts engine {self.engine!r}"
            )
        if self.event_type not in EVENT_TYPES:
            raise InvalidLedgerEventError(f"unknown event type {self.event_type!r}")
        if self.event_time.tzinfo is None or self.event_time.utcoffset() is None:
            # A naive time would be read in the session time zone by Spark: refuse to guess.
            raise InvalidLedgerEventError(f"event_time must be timezone-aware, got {self.event_time!r}")
        object.__setattr__(self, "event_time", self.event_time.astimezone(UTC))
        if (self.topic is None) != (self.partition is None):
            raise InvalidLedgerEventError("topic and partition are set together or not at all")
        frozen = MappingProxyType(dict(self.detail))
        object.__setattr__(self, "detail", frozen)
        if self.event_type == EVENT_COMMIT_SKIPPED and frozen.get(DETAIL_REASON) not in SKIP_REASONS:
            raise InvalidLedgerEventError(
                f"COMMIT_SKIPPED needs detail.reason in {list(SKIP_REASONS)}, got {frozen.get('reason')!r}"
            )
        try:
            # Fail here, where the bad detail is made, not later inside the writer's batch.
            _serialize_detail(frozen)
        except (TypeError, ValueError) as exc:
            raise InvalidLedgerEventError(f"detail is not JSON-serializable: {exc}") from exc

    @property
    def event_date(self) -> date:
        return self.event_time.date()

    @property
    def detail_json(self) -> str:
        return _serialize_detail(self.detail)

    @property
    def attempt(self) -> int | None:
        """The commit attempt sequence number the committer put in ``detail``, if any."""
        value = self.detail.get(DETAIL_ATTEMPT)
        return value if isinstance(value, int) else None

    @property
    def event_key(self) -> str:
        """A stable identity for idempotent appends: a retried write yields the same key.

        Built only from values that are also in the written row (``detail`` included), so the
        writer can derive it from either side of a merge. ``event_time`` is left out on purpose:
        a retried micro-batch records the same event at a later time. ``reason``, ``error`` and
        ``attempt`` tell apart events that legitimately share a checkpoint and partition (a
        checkpoint evicted and later reported unknown; a commit abandoned as outcome-unknown
        whose real failure arrives afterwards; two commit attempts of one checkpoint).
        """
        parts: list[object] = [
            self.job_name,
            self.run_id,
            self.checkpoint_id,
            self.event_type,
            self.topic,
            self.partition,
            self.detail.get(DETAIL_REASON),
            self.detail.get(DETAIL_ERROR),
            self.detail.get(DETAIL_ATTEMPT),
        ]
        return json.dumps(parts, separators=(",", ":"))

    def to_row(self) -> dict[str, object]:
        """The ledger columns in contract order, ready for ``createDataFrame(rows, LEDGER_SCHEMA)``."""
        values: dict[str, object] = {
            "job_name": self.job_name,
            "run_id": self.run_id,
            "engine": self.engine,
            "checkpoint_id": self.checkpoint_id,
            "event_type": self.event_type,
            "event_time": self.event_time,
            "group_id": self.group_id,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "raw_offset": self.raw_offset,
            "offset_semantics": self.offset_semantics,
            "detail": self.detail_json,
            "event_date": self.event_date,
        }
        return {name: values[name] for name in LEDGER_SCHEMA.fieldNames()}


@dataclass(frozen=True)
class EventSource:
    """Who writes ledger events: one run of a job, its engine and the group it commits to. Every
    writer (the committer, the job's start and stop, crash recovery) stamps its events with it."""

    job_name: str
    run_id: str
    engine: str
    group_id: str | None

    def event(
        self,
        event_type: str,
        event_time: datetime,
        checkpoint_id: int | None,
        detail: Mapping[str, object],
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        raw_offset: int | None = None,
    ) -> LedgerEvent:
        """One event; a checkpoint- or run-level one unless a partition is given."""
        return LedgerEvent(
            job_name=self.job_name,
            run_id=self.run_id,
            engine=self.engine,
            checkpoint_id=checkpoint_id,
            event_type=event_type,
            event_time=event_time,
            group_id=self.group_id,
            topic=topic,
            partition=partition,
            offset=offset,
            raw_offset=raw_offset,
            detail=detail,
        )

    def partition_events(
        self,
        event_type: str,
        event_time: datetime,
        checkpoint_id: int | None,
        offsets: Mapping[TopicPartitionKey, int | None],
        detail: Mapping[str, object],
    ) -> list[LedgerEvent]:
        """One event per partition, ``raw_offset`` as given and ``offset`` normalized.

        Sorted by (topic, partition) so that the same input always yields the same rows in the
        same order, whatever the mapping's insertion order was.
        """
        return [
            self.event(
                event_type,
                event_time,
                checkpoint_id,
                detail,
                topic=topic,
                partition=partition,
                offset=normalize_offset(raw, self.engine),
                raw_offset=raw,
            )
            for (topic, partition), raw in sorted(offsets.items())
        ]

    def checkpoint_events(
        self,
        event_type: str,
        event_time: datetime,
        checkpoint_id: int,
        offsets: Mapping[TopicPartitionKey, int],
        detail: Mapping[str, object],
    ) -> list[LedgerEvent]:
        """One checkpoint's events of ``event_type`` (its CHECKPOINT_SNAPSHOT, CHECKPOINT_COMPLETED or
        a commit decision about it): one per partition of ``offsets``, the rule every writer of
        checkpoint events follows (the reference job, an attached query, an import, recovery).

        A checkpoint of no partitions still happened: one checkpoint-level event keeps it visible
        (without it, a later completion would look like "completed without snapshot")."""
        if not offsets:
            return [self.event(event_type, event_time, checkpoint_id, detail)]
        return self.partition_events(event_type, event_time, checkpoint_id, offsets, detail)
