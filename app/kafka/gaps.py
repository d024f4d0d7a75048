"""Confirmation of suspected gaps against the source topic: a hole the broker no longer or never held
(retention, compaction, aborted transactions) is benign; one it still holds is a lost record."""

from __future__ import annotations

import concurrent.futures
import time
import typing
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.config import KafkaConfig
from app.contracts import vocabulary as vocab
from app.errors import (
    KafkaUnavailableError,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

PartitionKey = tuple[str, int]

# A partition whose next gap starts this many offsets beyond the record just read is sought to that
# gap rather than read through: reading a few hundred records between two gaps costs less than a
# fresh fetch, reading millions costs more.
SEEK_AHEAD = 1000
CONSUME_BATCH = 1000
SAMPLE_SIZE = 10


@dataclass(frozen=True)
class SuspectedGap:
    topic: str
    partition: int
    start: int
    end: int  # exclusive


GapConfirmer = Callable[[Sequence[SuspectedGap]], list[dict[str, Any]]]


@dataclass
class GapRead:
    """What reading one gap's range [start, end) back has shown so far (the range already clipped
    to the log start offset and the high watermark)."""

    gap: SuspectedGap
    start: int
    end: int
    found: int = 0
    sample: list[int] = field(default_factory=list)
    capped: bool = False
    finished: bool = False


class PartitionRead:
    """The gaps of one partition, read in offset order by one pass of a consumer over it.

    Gaps may touch or overlap: a record counts for every gap whose range holds it. A gap is finished
    by the first record at or beyond its end, by the end of the partition, or by reaching
    `max_records`, exactly as a read of that gap alone would be.
    """

    def __init__(self, reads: Iterable[GapRead], max_records: int) -> None:
        self.pending = deque(sorted(reads, key=lambda r: (r.start, r.end)))
        self.active: list[GapRead] = []
        self.max_records = max_records
        self.sought: int | None = None

    @property
    def first_offset(self) -> int:
        return self.pending[0].start

    def is_done(self) -> bool:
        return not self.active and not self.pending

    def record(self, offset: int) -> None:
        while self.pending and self.pending[0].start <= offset:
            self.active.append(self.pending.popleft())
        for read in self.active:
            if offset >= read.end:
                read.finished = True
                continue
            read.found += 1
            if len(read.sample) < SAMPLE_SIZE:
                read.sample.append(offset)
            if read.found >= self.max_records:
                read.capped = read.finished = True
        self.active = [r for r in self.active if not r.finished]

    def end_of_partition(self) -> None:
        """Nothing committed is left up to the high watermark, which every range ends at or below."""
        for read in [*self.active, *self.pending]:
            read.finished = True
        self.active, self.pending = [], deque()

    def seek_target(self, offset: int) -> int | None:
        """The next gap's start when it lies far beyond `offset` and no gap is being read."""
        if self.active or not self.pending:
            return None
        target = self.pending[0].start
        if target - offset <= SEEK_AHEAD or target == self.sought:
            return None
        self.sought = target
        return target


def kafka_gap_confirmer(
    kafka: KafkaConfig, bootstrap: str, *, max_records: int, timeout_s: float
) -> GapConfirmer:
    """A confirmer that reads exactly the suspected ranges back with a read_committed consumer.

    read_committed never returns transaction markers or aborted records, and compacted-away offsets
    simply do not exist any more, so a range that returns no record while it lies at or above the
    log start offset is benign. Below the log start offset retention has deleted the evidence:
    unverifiable.

    All gaps are read together: the log start offsets and high watermarks of their partitions in
    one batch of ListOffsets requests, then one consumer assigned to every partition at its first
    gap, reading the gaps of a partition in offset order. The cost follows the records read back,
    not the number of gaps. `max_records` caps the count per gap; `timeout_s` bounds the offsets
    request and every wait for the broker during the read: a read that makes no progress for
    `timeout_s` fails the run (KafkaUnavailableError) rather than judge a range it has not seen.
    """

    def confirm(gaps: Sequence[SuspectedGap]) -> list[dict[str, Any]]:
        from confluent_kafka import Consumer

        from app.kafka.clients import admin_client, range_reader_conf

        if not gaps:
            return []
        partitions = list(dict.fromkeys((g.topic, g.partition) for g in gaps))
        bounds = log_bounds(admin_client(kafka, bootstrap), partitions, timeout_s)
        reads = []
        for gap in gaps:
            low, high = bounds[(gap.topic, gap.partition)]
            start, end = max(gap.start, low), min(gap.end, high)
            reads.append(GapRead(gap, start, end, finished=start >= end))
        conf = range_reader_conf(kafka, bootstrap, f"offset-audit-confirm-{uuid.uuid4().hex[:8]}", "earliest")
        consumer = Consumer(conf)
        try:
            read_ranges(consumer, [r for r in reads if not r.finished], max_records, timeout_s, bootstrap)
        finally:
            consumer.close()
        return [verdict(r, bounds[(r.gap.topic, r.gap.partition)]) for r in reads]

    return confirm


def log_bounds(
    admin: AdminClient, partitions: Sequence[PartitionKey], timeout_s: float
) -> dict[PartitionKey, tuple[int, int]]:
    """(log start offset, high watermark) per partition, all asked at once.

    The high watermark is the one a read_committed consumer stops at (the last stable offset), as
    the consumer that reads the ranges back sees it.
    """
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from app.kafka.clients import retry_kafka

    # confluent-kafka's OffsetSpec factories carry no annotations; the casts only name what they return.
    first = typing.cast(Callable[[], OffsetSpec], OffsetSpec.earliest)()
    last = typing.cast(Callable[[], OffsetSpec], OffsetSpec.latest)()

    def ask(left: float) -> dict[PartitionKey, tuple[int, int]]:
        deadline = time.monotonic() + left
        tps = [TopicPartition(t, p) for t, p in partitions]
        options: dict[str, Any] = {
            "isolation_level": IsolationLevel.READ_COMMITTED,
            "request_timeout": max(left, 0.01),
        }
        earliest = admin.list_offsets({tp: first for tp in tps}, **options)
        latest = admin.list_offsets({tp: last for tp in tps}, **options)
        futures = [*earliest.values(), *latest.values()]
        concurrent.futures.wait(futures, timeout=max(deadline - time.monotonic(), 0.001))
        # A per-partition error raises KafkaException here: retried when retriable.
        low = {(tp.topic, tp.partition): f.result(timeout=0) for tp, f in earliest.items()}
        high = {(tp.topic, tp.partition): f.result(timeout=0) for tp, f in latest.items()}
        return {key: (int(low[key].offset), int(high[key].offset)) for key in low}

    return retry_kafka(ask, f"reading the offsets of {len(partitions)} partition(s)", timeout_s)


def read_ranges(
    consumer: Consumer, reads: Sequence[GapRead], max_records: int, timeout_s: float, bootstrap: str
) -> None:
    """Reads every range back with one consumer, recording what each GapRead saw.

    Raises KafkaUnavailableError on a non-retriable error, or when the broker has shown nothing new
    for `timeout_s` while a range without any record found is not finished.
    """
    from confluent_kafka import KafkaError, TopicPartition

    from app.kafka.clients import CONSUME_WAIT_S, is_retriable

    by_partition: dict[PartitionKey, list[GapRead]] = {}
    for read in reads:
        by_partition.setdefault((read.gap.topic, read.gap.partition), []).append(read)
    open_parts = {key: PartitionRead(rs, max_records) for key, rs in by_partition.items()}
    if not open_parts:
        return
    consumer.assign([TopicPartition(t, p, part.first_offset) for (t, p), part in open_parts.items()])
    deadline = time.monotonic() + timeout_s
    while open_parts:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        progressed = False
        for msg in consumer.consume(CONSUME_BATCH, min(CONSUME_WAIT_S, left)):
            topic, partition, offset, err = msg.topic(), msg.partition(), msg.offset(), msg.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                if is_retriable(err):
                    continue  # librdkafka fetches again by itself; the deadline bounds it
                raise KafkaUnavailableError(f"reading {topic}/{partition}: {err.str()}")
            if topic is None or partition is None:
                continue
            part = open_parts.get((topic, partition))
            if part is None:
                continue  # a partition already done, paused while its last fetch was on the way
            progressed = True
            if err is not None:
                part.end_of_partition()
            elif offset is not None:
                part.record(offset)
                target = part.seek_target(offset)
                if target is not None:
                    consumer.seek(TopicPartition(topic, partition, target))
            if part.is_done():
                consumer.pause([TopicPartition(topic, partition)])
                del open_parts[(topic, partition)]
        if progressed:
            deadline = time.monotonic() + timeout_s
    blind = [r for r in reads if not r.finished and not r.found]
    if blind:
        # Could not see a range in time: an audit failure, not a verdict on the data.
        first = blind[0]
        raise KafkaUnavailableError(
            f"reading {first.gap.topic}/{first.gap.partition} [{first.start}, {first.end}) "
            f"and {len(blind) - 1} other suspected gap(s) from {bootstrap} "
            f"did not finish: no progress within {timeout_s:.0f}s"
        )


def verdict(read: GapRead, bounds: tuple[int, int]) -> dict[str, Any]:
    low, high = bounds
    gap = read.gap
    below = max(0, min(gap.end, low) - gap.start)
    out: dict[str, Any] = {
        "log_start_offset": low,
        "high_watermark": high,
        "data_records": read.found,
        "data_records_capped": read.capped,
        "sample_offsets": list(read.sample),
        "offsets_below_log_start": below,
        "offsets_beyond_high_watermark": max(0, gap.end - max(high, gap.start)),
    }
    if read.found:
        out["status"] = vocab.CONFIRMED
    elif below:
        out["status"] = vocab.UNVERIFIABLE
    else:
        out["status"] = vocab.BENIGN
        out["explanation"] = "no committed data records: transaction markers, aborted or compacted"
    return out


def unavailable_confirmer(reason: KafkaUnavailableError) -> GapConfirmer:
    """A confirmer for when Kafka could not even be located: fails the run if there are gaps."""

    def confirm(gaps: Sequence[SuspectedGap]) -> list[dict[str, Any]]:
        if not gaps:
            return []
        raise KafkaUnavailableError(f"cannot confirm {len(gaps)} suspected gap(s): {reason}") from reason

    return confirm
