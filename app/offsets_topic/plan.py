"""A run of `ingest-offsets`: its plan (what it reads, under which seq), the marker its commits record
so that another run can finish it, and its result. Plain values that the run, its bookkeeping and
both routes share; no I/O here."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.offsets_topic.ranges import PartitionRange

Clock = Callable[[], int]  # epoch milliseconds


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def new_run_id() -> str:
    return "ingest-" + uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class IngestPlan:
    run_id: str
    topic: str
    partition_count: int
    groups: tuple[str, ...]
    stored: Mapping[int, int]
    ranges: tuple[PartitionRange, ...]
    seq: int = 0  # the run's Delta txnVersion: larger than every seq committed before

    @property
    def to_read(self) -> tuple[PartitionRange, ...]:
        return tuple(r for r in self.ranges if r.size > 0)

    def marker(self) -> str:
        """What the run's commits record: enough to finish the run if it dies before its positions."""
        return json.dumps(
            {
                "ingest_seq": self.seq,
                "ingest_run_id": self.run_id,
                "topic": self.topic,
                "partition_count": self.partition_count,
                "groups": list(self.groups),
                "ranges": [[r.partition, r.start, r.end] for r in self.to_read],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_marker(cls, marker: Mapping[str, Any], stored: Mapping[int, int]) -> IngestPlan:
        ranges = tuple(
            PartitionRange(int(p), int(lo), int(hi), stored.get(int(p))) for p, lo, hi in marker["ranges"]
        )
        return cls(
            run_id=str(marker["ingest_run_id"]),
            topic=str(marker["topic"]),
            partition_count=int(marker["partition_count"]),
            groups=tuple(marker["groups"]),
            stored=stored,
            ranges=ranges,
            seq=int(marker["ingest_seq"]),
        )


@dataclass
class IngestResult:
    run_id: str
    mode: str
    groups: tuple[str, ...]
    partitions: list[dict[str, Any]] = field(default_factory=list)
    total: dict[str, Any] = field(default_factory=dict)
    inserted: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "mode": self.mode,
            "groups": list(self.groups),
            "partitions": self.partitions,
            "total": self.total,
            "inserted": self.inserted,
            "warnings": self.warnings,
            "decode_errors": self.total.get("quarantined", 0),
        }
