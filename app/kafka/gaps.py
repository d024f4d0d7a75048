"""Confirmation of suspected gaps against the source topic: a hole the broker no longer or never held
(retention, compaction, aborted transactions) is benign; one it still holds is a lost record."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.config import KafkaConfig
from app.contracts import vocabulary as vocab
from app.errors import (
    KafkaUnavailableError,
)


@dataclass(frozen=True)
class SuspectedGap:
    topic: str
    partition: int
    start: int
    end: int  # exclusive


GapConfirmer = Callable[[Sequence[SuspectedGap]], list[dict[str, Any]]]


def kafka_gap_confirmer(
    kafka: KafkaConfig, bootstrap: str, *, max_records: int, timeout_s: float
) -> GapConfirmer:
    """A confirmer that reads exactly the suspected ranges back with a read_committed consumer.

    read_committed never returns transaction markers or aborted records, and compacted-away offsets
    simply do not exist any more, so a range that returns no record while it lies at or above the
    log start offset is benign. Below the log start offset retention has deleted the evidence:
    unverifiable. The cost is one seek and a few fetches per gap, whatever the topic's size.
    """

    def confirm(gaps: Sequence[SuspectedGap]) -> list[dict[str, Any]]:
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        from app.kafka.clients import is_retriable, librdkafka_conf
        from app.kafka.commit import watermarks

        if not gaps:
            return []
        conf = librdkafka_conf(
            kafka,
            bootstrap,
            **{
                "group.id": f"offset-audit-confirm-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            },
        )
        consumer = Consumer(conf)
        verdicts: list[dict[str, Any]] = []
        try:
            for gap in gaps:
                # Retries retriable errors (a leader moving) within timeout_s, then KafkaUnavailableError.
                tp = (gap.topic, gap.partition)
                low, high = watermarks(consumer, [tp], timeout_s)[tp]
                verdict: dict[str, Any] = {"log_start_offset": low, "high_watermark": high}
                below = max(0, min(gap.end, low) - gap.start)
                start, end = max(gap.start, low), min(gap.end, high)
                sample: list[int] = []
                found, capped, finished = 0, False, True
                if start < end:
                    consumer.assign([TopicPartition(gap.topic, gap.partition, start)])
                    deadline = time.monotonic() + timeout_s
                    finished = False
                    while time.monotonic() < deadline:
                        msg = consumer.poll(min(1.0, max(0.0, deadline - time.monotonic())))
                        if msg is None:
                            continue
                        err = msg.error()
                        if err is not None:
                            if err.code() == KafkaError._PARTITION_EOF:
                                finished = True
                                break
                            if is_retriable(err):
                                continue  # librdkafka fetches again by itself; the deadline bounds it
                            raise KafkaUnavailableError(f"reading {gap.topic}/{gap.partition}: {err.str()}")
                        offset = msg.offset()
                        if offset is None or offset >= end:
                            finished = True
                            break
                        if offset >= start:
                            found += 1
                            if len(sample) < 10:
                                sample.append(offset)
                            if found >= max_records:
                                capped = finished = True
                                break
                    consumer.unassign()
                verdict.update(
                    {
                        "data_records": found,
                        "data_records_capped": capped,
                        "sample_offsets": sample,
                        "offsets_below_log_start": below,
                        "offsets_beyond_high_watermark": max(0, gap.end - max(high, gap.start)),
                    }
                )
                if found:
                    verdict["status"] = vocab.CONFIRMED
                elif not finished:
                    # Could not see the range in time: an audit failure, not a verdict on the data.
                    raise KafkaUnavailableError(
                        f"reading {gap.topic}/{gap.partition} [{start}, {end}) from {bootstrap} "
                        f"did not finish within {timeout_s:.0f}s"
                    )
                elif below:
                    verdict["status"] = vocab.UNVERIFIABLE
                else:
                    verdict["status"] = vocab.BENIGN
                    verdict["explanation"] = (
                        "no committed data records: transaction markers, aborted or compacted"
                    )
                verdicts.append(verdict)
        finally:
            consumer.close()
        return verdicts

    return confirm


def unavailable_confirmer(reason: KafkaUnavailableError) -> GapConfirmer:
    """A confirmer for when Kafka could not even be located: fails the run if there are gaps."""

    def confirm(gaps: Sequence[SuspectedGap]) -> list[dict[str, Any]]:
        if not gaps:
            return []
        raise KafkaUnavailableError(f"cannot confirm {len(gaps)} suspected gap(s): {reason}") from reason

    return confirm
