"""What a run read, per partition: the counts of decoded records by kind (read, decoded, skipped by
type, of other groups, quarantined, with a time out of range), taken from the decoded batches by one
Arrow function that both routes run, and the run's summary and warning built from them."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from app.contracts.tables import schema
from app.offsets_topic.decoded import (
    KIND_ERROR,
    KIND_OTHER_GROUP,
    KIND_SKIPPED,
    TIME_MS_FIELDS,
    TIMESTAMP_MAX_MS,
    TIMESTAMP_MIN_MS,
)
from app.offsets_topic.table_rows import all_in_time_range, in_time_range

# One row of the counts: records of one (log_partition, kind, record_type) in a batch, and of them
# those with a time their table stores as null (`decoded.TIMESTAMP_MAX_MS`). A key comes once per
# batch counted; `summarize_progress` adds them up.
PROGRESS_SCHEMA: Final[StructType] = schema(
    "log_partition INT NOT NULL, kind STRING NOT NULL, record_type INT, records BIGINT NOT NULL, "
    "times_out_of_range BIGINT NOT NULL"
)
ARROW_PROGRESS_SCHEMA: Final = to_arrow_schema(PROGRESS_SCHEMA)
ProgressRow = tuple[int, str, int | None, int, int]


def progress_counts(decoded: pa.RecordBatch | pa.Table) -> pa.Table:
    """The PROGRESS_SCHEMA counts of a batch of decoded rows; it needs only their log_partition, kind,
    record_type and TIME_MS_FIELDS columns."""
    table = decoded if isinstance(decoded, pa.Table) else pa.Table.from_batches([decoded])
    aggregates = [("log_partition", "count")]
    odd_fields = [c for c in TIME_MS_FIELDS if not all_in_time_range(table.column(c))]
    if odd_fields:
        odd = functools.reduce(
            pc.or_, (pc.invert(pc.fill_null(in_time_range(table.column(c)), True)) for c in odd_fields)
        )
        table = table.append_column("odd_time", odd.cast(pa.int64()))
        aggregates.append(("odd_time", "sum"))
    counts = table.group_by(["log_partition", "kind", "record_type"], use_threads=False).aggregate(aggregates)
    odd_times = counts.column("odd_time_sum") if odd_fields else pa.repeat(0, counts.num_rows)
    columns = [
        *(counts.column(c) for c in ("log_partition", "kind", "record_type", "log_partition_count")),
        odd_times,
    ]
    return pa.Table.from_arrays(
        [c.cast(f.type) for c, f in zip(columns, ARROW_PROGRESS_SCHEMA, strict=True)],
        schema=ARROW_PROGRESS_SCHEMA,
    )


def progress_rows(decoded: pa.RecordBatch | pa.Table) -> list[ProgressRow]:
    """`progress_counts` of a batch of decoded rows, as (log_partition, kind, record_type, records,
    times_out_of_range) tuples."""
    counts = progress_counts(decoded).to_pydict()
    return list(zip(*(counts[name] for name in ARROW_PROGRESS_SCHEMA.names), strict=True))


@dataclass(frozen=True)
class PartitionProgress:
    partition: int
    read: int = 0
    decoded: int = 0  # commits + tombstones + group metadata + group tombstones of audited groups
    other_groups: int = 0
    quarantined: int = 0
    skipped_by_type: tuple[tuple[int, int], ...] = ()
    # Decoded records (already counted in `decoded`) with a time stored as null, as out of range.
    times_out_of_range: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "read": self.read,
            "decoded": self.decoded,
            "other_groups": self.other_groups,
            "quarantined": self.quarantined,
            "skipped_by_type": {str(t): n for t, n in self.skipped_by_type},
            "times_out_of_range": self.times_out_of_range,
        }


def summarize_progress(rows: Iterable[ProgressRow]) -> list[PartitionProgress]:
    """`progress_counts` rows -> one PartitionProgress per partition."""
    acc: dict[int, dict[str, Any]] = {}
    for partition, kind, record_type, n, odd_times in rows:
        a = acc.setdefault(
            partition, {"read": 0, "decoded": 0, "other": 0, "bad": 0, "skipped": {}, "odd_times": 0}
        )
        a["read"] += n
        a["odd_times"] += odd_times
        if kind == KIND_SKIPPED:
            key = -1 if record_type is None else record_type
            a["skipped"][key] = a["skipped"].get(key, 0) + n
        elif kind == KIND_OTHER_GROUP:
            a["other"] += n
        elif kind == KIND_ERROR:
            a["bad"] += n
        else:
            a["decoded"] += n
    return [
        PartitionProgress(
            partition=p,
            read=a["read"],
            decoded=a["decoded"],
            other_groups=a["other"],
            quarantined=a["bad"],
            skipped_by_type=tuple(sorted(a["skipped"].items())),
            times_out_of_range=a["odd_times"],
        )
        for p, a in sorted(acc.items())
    ]


def total_progress(parts: Iterable[PartitionProgress]) -> PartitionProgress:
    """All partitions added up; partition -1 marks the total."""
    read = decoded = other = bad = odd_times = 0
    skipped: dict[int, int] = {}
    for p in parts:
        read, decoded, other, bad, odd_times = (
            read + p.read,
            decoded + p.decoded,
            other + p.other_groups,
            bad + p.quarantined,
            odd_times + p.times_out_of_range,
        )
        for t, n in p.skipped_by_type:
            skipped[t] = skipped.get(t, 0) + n
    return PartitionProgress(-1, read, decoded, other, bad, tuple(sorted(skipped.items())), odd_times)


def times_out_of_range_warning(topic: str, parts: Iterable[PartitionProgress]) -> str | None:
    """The run's warning about times stored as null (TIMESTAMP_MAX_MS), None when there is none."""
    odd = {p.partition: p.times_out_of_range for p in parts if p.times_out_of_range}
    if not odd:
        return None
    where = ", ".join(f"{topic}-{p}: {n}" for p, n in sorted(odd.items()))
    return (
        f"{sum(odd.values())} decoded records ({where}) carry a commit, expire or group state time "
        f"outside what the tables' TIMESTAMP columns hold ({TIMESTAMP_MIN_MS} to {TIMESTAMP_MAX_MS} ms "
        "since the epoch, 1677-09-21 to 2262-04-11 UTC): their rows are kept with that time null"
    )
