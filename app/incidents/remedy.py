"""An incident's remedy plan and what executing it did, typed, and the one place that writes and
reads them as JSON: the incidents table's ``remedy`` column and `repair --json`.

A plan is steps, each one action of ``vocabulary.REMEDY_ACTIONS``: ``ReplayStep`` (ranges to read
again from Kafka into the sink), ``DeleteDuplicatesStep`` (ranges whose extra copies go) and
``ResetOffsetsStep`` (group offsets to set). A plan with no step says why in ``note``. What
`repair --execute` did is a ``RepairOutcome`` of one result per step, recorded in the plan as
``executed``.

The JSON keeps the shape earlier versions stored (keys sorted; a replay's Spark options and reset
CSV, derived from its ranges, written out for people and tools), so stored plans read back equal
and are written back byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, TypeAlias

from app.contracts.json_values import JsonObject, JsonValue
from app.contracts.vocabulary import (
    REMEDY_ACTIONS,
    REMEDY_DELETE_DUPLICATES,
    REMEDY_REPLAY,
    REMEDY_RESET_OFFSETS,
)
from app.errors import SchemaMismatchError

# Which copy of a duplicated offset stays: what ``incidents.repair.delete_duplicates`` keeps.
KEEP_FIRST_WRITTEN: Final = "the copy written first (ties: the lowest checkpoint, then run id)"
RESET_WHY: Final = "group offsets at the latest completed checkpoint make a restart from them exact"
NOTHING_TO_REPAIR: Final = "nothing to repair: no records were lost or duplicated"


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    def to_json(self) -> JsonObject:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end}

    @classmethod
    def from_json(cls, value: JsonValue) -> OffsetRange:
        o = _object(value, "range")
        return cls(_text(o, "topic"), _int(o, "partition"), _int(o, "start"), _int(o, "end"))


@dataclass(frozen=True)
class PartitionOffset:
    """The offset a group should hold for one partition."""

    topic: str
    partition: int
    offset: int

    def to_json(self) -> JsonObject:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}

    @classmethod
    def from_json(cls, value: JsonValue) -> PartitionOffset:
        o = _object(value, "offset")
        return cls(_text(o, "topic"), _int(o, "partition"), _int(o, "offset"))


def reset_offsets_csv(offsets: Iterable[tuple[str, int, int]]) -> str:
    """The file of ``kafka-consumer-groups --reset-offsets --from-file``: topic,partition,offset."""
    return "".join(f"{t},{p},{o}\n" for t, p, o in offsets)


# --- the plan's steps --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayStep:
    """Read ``ranges`` again from Kafka into the sink."""

    action: ClassVar[str] = REMEDY_REPLAY
    ranges: tuple[OffsetRange, ...]

    def spark_options(self) -> list[dict[str, str]]:
        """Spark Kafka-source options that read each range, one dict per range."""
        return [
            {
                "startingOffsets": json.dumps({r.topic: {str(r.partition): r.start}}),
                "endingOffsets": json.dumps({r.topic: {str(r.partition): r.end}}),
            }
            for r in self.ranges
        ]

    def reset_offsets_csv(self) -> str:
        """Group offsets at the start of each partition's first range: a restart from them reads
        the ranges again."""
        first: dict[tuple[str, int], int] = {}
        for r in self.ranges:
            first[(r.topic, r.partition)] = min(r.start, first.get((r.topic, r.partition), r.start))
        return reset_offsets_csv((t, p, o) for (t, p), o in sorted(first.items()))

    def to_json(self) -> JsonObject:
        return {
            "action": self.action,
            "ranges": [r.to_json() for r in self.ranges],
            "spark_options": [dict[str, JsonValue](o) for o in self.spark_options()],
            "reset_offsets_csv": self.reset_offsets_csv(),
        }


@dataclass(frozen=True)
class DeleteDuplicatesStep:
    """Keep one copy (``keep`` says which) of every offset in ``ranges``."""

    action: ClassVar[str] = REMEDY_DELETE_DUPLICATES
    ranges: tuple[OffsetRange, ...]
    keep: str = KEEP_FIRST_WRITTEN

    def to_json(self) -> JsonObject:
        return {"action": self.action, "keep": self.keep, "ranges": [r.to_json() for r in self.ranges]}


@dataclass(frozen=True)
class ResetOffsetsStep:
    """Set the offsets of ``group_id`` (None: the incident names no group)."""

    action: ClassVar[str] = REMEDY_RESET_OFFSETS
    group_id: str | None
    offsets: tuple[PartitionOffset, ...]
    why: str = RESET_WHY

    def reset_offsets_csv(self) -> str:
        return reset_offsets_csv((o.topic, o.partition, o.offset) for o in self.offsets)

    def to_json(self) -> JsonObject:
        return {
            "action": self.action,
            "group_id": self.group_id,
            "why": self.why,
            "offsets": [o.to_json() for o in self.offsets],
            "reset_offsets_csv": self.reset_offsets_csv(),
        }


RemedyStep: TypeAlias = ReplayStep | DeleteDuplicatesStep | ResetOffsetsStep


def step_from_json(value: JsonValue) -> RemedyStep:
    o = _object(value, "remedy step")
    action = o.get("action")
    if action == REMEDY_REPLAY:
        return ReplayStep(_ranges(o))
    if action == REMEDY_DELETE_DUPLICATES:
        return DeleteDuplicatesStep(_ranges(o), _text(o, "keep"))
    if action == REMEDY_RESET_OFFSETS:
        group = o.get("group_id")
        offsets = tuple(PartitionOffset.from_json(v) for v in _list(o, "offsets"))
        return ResetOffsetsStep(None if group is None else str(group), offsets, _text(o, "why"))
    raise SchemaMismatchError(f"remedy step action {action!r} is not one of {list(REMEDY_ACTIONS)}")


# --- what executing the steps did -----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SinkCommitted:
    """A step that commits to the sink: the sink's table versions around its commit (equal when the
    step found nothing to write). Keyword-only, so a subclass's own count comes first."""

    version_before: int
    version_after: int

    @property
    def changed(self) -> bool:
        return self.version_after != self.version_before

    def versions_json(self) -> JsonObject:
        return {"version_before": self.version_before, "version_after": self.version_after}


@dataclass(frozen=True)
class Replayed(SinkCommitted):
    """A replay: records appended to the sink."""

    action: ClassVar[str] = REMEDY_REPLAY
    records_appended: int

    def to_json(self) -> JsonObject:
        return {"action": self.action, "records_appended": self.records_appended, **self.versions_json()}


@dataclass(frozen=True)
class DuplicatesDeleted(SinkCommitted):
    """A deletion of extra copies: how many."""

    action: ClassVar[str] = REMEDY_DELETE_DUPLICATES
    copies_deleted: int

    def to_json(self) -> JsonObject:
        return {"action": self.action, "copies_deleted": self.copies_deleted, **self.versions_json()}


@dataclass(frozen=True)
class OffsetsReset:
    """A reset of the group's offsets: those of the plan, and how many differed and were set."""

    action: ClassVar[str] = REMEDY_RESET_OFFSETS
    group_id: str
    offsets: tuple[PartitionOffset, ...]
    offsets_changed: int

    @property
    def changed(self) -> bool:
        return self.offsets_changed > 0

    def to_json(self) -> JsonObject:
        return {
            "action": self.action,
            "group_id": self.group_id,
            "offsets": [o.to_json() for o in self.offsets],
            "offsets_changed": self.offsets_changed,
        }


StepResult: TypeAlias = Replayed | DuplicatesDeleted | OffsetsReset


def _versions(o: Mapping[str, JsonValue]) -> dict[str, int]:
    return {"version_before": _int(o, "version_before"), "version_after": _int(o, "version_after")}


def result_from_json(value: JsonValue) -> StepResult:
    o = _object(value, "repair action")
    action = o.get("action")
    if action == REMEDY_REPLAY:
        return Replayed(_int(o, "records_appended"), **_versions(o))
    if action == REMEDY_DELETE_DUPLICATES:
        return DuplicatesDeleted(_int(o, "copies_deleted"), **_versions(o))
    if action == REMEDY_RESET_OFFSETS:
        offsets = tuple(PartitionOffset.from_json(v) for v in _list(o, "offsets"))
        return OffsetsReset(_text(o, "group_id"), offsets, _int(o, "offsets_changed"))
    raise SchemaMismatchError(f"repair action {action!r} is not one of {list(REMEDY_ACTIONS)}")


@dataclass(frozen=True)
class RepairOutcome:
    """What one `repair --execute` did: a result per step, and the statement that undoes the sink's
    changes (Delta time travel), when it changed the sink."""

    actions: tuple[StepResult, ...] = ()
    undo: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether any step changed the sink (a new table version) or the group's offsets."""
        return any(a.changed for a in self.actions)

    def to_json(self) -> JsonObject:
        return {"actions": [a.to_json() for a in self.actions], "undo": list(self.undo)}

    @classmethod
    def from_json(cls, value: JsonValue) -> RepairOutcome:
        o = _object(value, "repair outcome")
        return cls(
            tuple(result_from_json(a) for a in _list(o, "actions")),
            tuple(str(u) for u in _list(o, "undo")),
        )


# --- the plan ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemedyPlan:
    """The plan of one incident: its steps (none: ``note`` says why), the command that carries it
    out, and, once carried out, what that did."""

    steps: tuple[RemedyStep, ...] = ()
    note: str | None = None
    command: str | None = None
    executed: RepairOutcome | None = None

    def to_json_object(self) -> JsonObject:
        """The plan as a JSON object (`repair --json` prints it): keys only for what is set."""
        plan: JsonObject = {"steps": [s.to_json() for s in self.steps]}
        if self.note is not None:
            plan["note"] = self.note
        if self.command is not None:
            plan["command"] = self.command
        if self.executed is not None:
            plan["executed"] = self.executed.to_json()
        return plan

    def to_json(self) -> str:
        """The text of the incidents table's ``remedy`` column."""
        return json.dumps(self.to_json_object(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> RemedyPlan:
        """The ``remedy`` column's text read back (none: an empty plan)."""
        o = _object(json.loads(text or "{}"), "remedy plan")
        note, command, executed = o.get("note"), o.get("command"), o.get("executed")
        return cls(
            steps=tuple(step_from_json(s) for s in _list(o, "steps")),
            note=None if note is None else str(note),
            command=None if command is None else str(command),
            executed=None if executed is None else RepairOutcome.from_json(executed),
        )

    @property
    def ranges(self) -> list[OffsetRange]:
        """Every range the steps name (replays' and deletions'), in step order."""
        return [r for s in self.steps if not isinstance(s, ResetOffsetsStep) for r in s.ranges]

    @property
    def repair_command(self) -> str | None:
        """The command to run, when there is anything to repair."""
        return self.command if self.steps else None


def _ranges(o: Mapping[str, JsonValue]) -> tuple[OffsetRange, ...]:
    return tuple(OffsetRange.from_json(v) for v in _list(o, "ranges"))


# --- reading JSON: a stored plan names what is wrong with it ------------------------------------------


def _object(value: JsonValue, what: str) -> Mapping[str, JsonValue]:
    if not isinstance(value, dict):
        raise SchemaMismatchError(f"{what} is not a JSON object: {value!r}")
    return value


def _list(o: Mapping[str, JsonValue], key: str) -> Sequence[JsonValue]:
    value = o.get(key, [])
    if not isinstance(value, list):
        raise SchemaMismatchError(f"{key!r} of a remedy plan is not a list: {value!r}")
    return value


def _text(o: Mapping[str, JsonValue], key: str) -> str:
    value = o.get(key)
    if not isinstance(value, str):
        raise SchemaMismatchError(f"{key!r} of a remedy plan is not text: {value!r}")
    return value


def _int(o: Mapping[str, JsonValue], key: str) -> int:
    value = o.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SchemaMismatchError(f"{key!r} of a remedy plan is not an integer: {value!r}")
    return value
