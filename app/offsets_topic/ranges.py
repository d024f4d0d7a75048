"""Which `__consumer_offsets` ranges a run reads, and where the partitions stand after it: pure
planning over the log's bounds and the stored positions, the same for both routes."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from app.errors import OffsetAuditError
from app.offsets_topic.decoder import partition_for_group


def select_partitions(groups: Collection[str], partition_count: int) -> list[int]:
    """The `__consumer_offsets` partitions holding `groups`; every partition when no group is given."""
    if partition_count <= 0:
        raise OffsetAuditError(f"__consumer_offsets partition count must be positive, got {partition_count}")
    if not groups:
        return list(range(partition_count))
    return sorted({partition_for_group(g, partition_count) for g in groups})


@dataclass(frozen=True)
class PartitionRange:
    """One partition's read for this run: [start, end), plus why start moved, if it did."""

    partition: int
    start: int
    end: int
    stored: int | None  # the position remembered by the previous run, None on the first run
    note: str | None = None  # 'retention' (stored < log start) or 'ahead' (stored > end), for the log

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(
    partitions: Iterable[int],
    stored: Mapping[int, int],
    log_start: Mapping[int, int],
    log_end: Mapping[int, int],
    max_records_per_partition: int = 0,
) -> list[PartitionRange]:
    """Per partition, read from the stored position (or the log start) to `log_end`, capped.

    `log_end` is the last stable offset (read_committed): everything below it is decided, so a run never
    stops inside an open transaction and the next run cannot see a commit that this one already missed.
    """
    ranges = []
    for p in sorted(set(partitions)):
        lo, hi = log_start[p], log_end[p]
        position = stored.get(p)
        note = None
        start = lo if position is None else position
        if position is not None and position < lo:
            # Compaction/retention removed records we never read: continue at what exists, and say so.
            start, note = lo, "retention"
        if start > hi:
            # Stored position beyond the log end: the topic was recreated or a different cluster is
            # configured. Reading nothing and keeping the position is the safe choice; the log says why.
            ranges.append(PartitionRange(p, start, start, position, "ahead"))
            continue
        end = hi if max_records_per_partition <= 0 else min(hi, start + max_records_per_partition)
        ranges.append(PartitionRange(p, start, end, position, note))
    return ranges


def kafka_read_options(topic: str, ranges: Iterable[PartitionRange]) -> dict[str, str]:
    """`assign` plus explicit starting/ending offsets for the non-empty ranges, as the Kafka source wants."""
    todo = [r for r in ranges if r.size > 0]
    if not todo:
        raise OffsetAuditError("no partition has new records; nothing to read")
    return {
        "assign": json.dumps({topic: [r.partition for r in todo]}),
        "startingOffsets": json.dumps({topic: {str(r.partition): r.start for r in todo}}),
        "endingOffsets": json.dumps({topic: {str(r.partition): r.end for r in todo}}),
    }


def merge_positions(stored: Mapping[int, int], ranges: Iterable[PartitionRange]) -> dict[int, int]:
    """Positions after this run: each read partition moves to the end of its range; others stay."""
    merged = dict(stored)
    for r in ranges:
        if r.note == "ahead":
            continue
        merged[r.partition] = r.end
    return merged


def positions_rows(
    positions: Mapping[int, int], partitions: Collection[int], run_id: str, now_ms: int
) -> list[tuple[int, int, str, int]]:
    """Rows (log_partition, next_offset, ingest_run_id, updated_at ms) for the partitions this run read."""
    return [(p, positions[p], run_id, now_ms) for p in sorted(partitions) if p in positions]
