"""The offsets of a Flink checkpoint's or savepoint's Kafka source, decoded from its `_metadata`.

The interface the ledger side codes against; the decoder itself replaces this module."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.errors import FlinkStateError


@dataclass(frozen=True)
class SplitOffset:
    topic: str
    partition: int
    raw_offset: int
    stopping_offset: int | None


@dataclass(frozen=True)
class FlinkCheckpointOffsets:
    checkpoint_id: int
    engine: str  # the vocabulary's flink-kafkasource | flink-legacy
    operator_id: str
    path: str
    offsets: tuple[SplitOffset, ...]  # one per partition


def read_checkpoint(path: str, storage_options: Mapping[str, str] | None = None) -> FlinkCheckpointOffsets:
    raise FlinkStateError(f"{path}/_metadata: no decoder in this build")
