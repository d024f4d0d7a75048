"""Benchmark of gap confirmation: all suspected gaps of a run read back together vs. one after another.

    .venv/bin/python -m bench.confirm --gaps 1000                    # 1,000 partitions, one gap each
    .venv/bin/python -m bench.confirm --gaps 1000 --partitions 100   # 10 gaps per partition
    .venv/bin/python -m bench.confirm --gaps 1000 --baseline-gaps 200

A private broker (own data directory, stopped at the end) holds one topic of --partitions partitions
(default: one per gap). Each gap is --per-gap committed records with one record before and one after
it, so every gap is a confirmed loss whose range is read to its end. In turns, A B A B ...: A = the
one-by-one confirmer as it was before reads were batched (one watermark request, assign, read and
unassign per gap), B = kafka_gap_confirmer, which reads all gaps together. Both get the same gaps and
must give the same verdicts. The ratio A/B is taken round by round, because this machine is noisy.
--baseline-gaps runs A on only the first N gaps (it costs a fixed time per gap) and scales its time
to all gaps; the printout says when it does.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from app.config import KafkaConfig
from app.contracts import vocabulary as vocab
from app.demo.local_kafka import LocalKafka
from app.errors import KafkaUnavailableError
from app.kafka.clients import is_retriable, librdkafka_conf
from app.kafka.commit import watermarks
from app.kafka.gaps import GapConfirmer, SuspectedGap, kafka_gap_confirmer
from app.runtime import jvm
from tests.support.streaming import create_topic

TOPIC = "bench-gaps"
MAX_RECORDS, TIMEOUT_S = 10_000, 30.0


def one_by_one_confirmer(
    kafka: KafkaConfig, bootstrap: str, *, max_records: int, timeout_s: float
) -> GapConfirmer:
    """The baseline: the confirmer as it was before reads were batched, one gap after another."""

    def confirm(gaps: Sequence[SuspectedGap]) -> list[dict[str, Any]]:
        if not gaps:
            return []
        reader: dict[str, Any] = {
            "group.id": f"offset-audit-confirm-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
        conf = librdkafka_conf(kafka, bootstrap, **reader)
        consumer = Consumer(conf)
        verdicts: list[dict[str, Any]] = []
        try:
            for gap in gaps:
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
                                continue
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
                    raise KafkaUnavailableError(f"reading {gap.topic}/{gap.partition} did not finish")
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


def layout(gaps: int, partitions: int, per_gap: int) -> tuple[list[SuspectedGap], dict[int, int]]:
    """The suspected gaps, spread round-robin over the partitions, and the records each partition
    needs: per gap, one record before it, the gap's own records and one after it."""
    stride = per_gap + 2
    suspected, records = [], dict.fromkeys(range(partitions), 0)
    for i in range(gaps):
        p, k = i % partitions, i // partitions
        suspected.append(SuspectedGap(TOPIC, p, k * stride + 1, k * stride + 1 + per_gap))
        records[p] += stride
    return suspected, records


def produce(bootstrap: str, records: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for p, n in records.items():
        for i in range(n):
            while True:
                try:
                    producer.produce(TOPIC, value=f"{p}-{i}".encode(), partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0


def timed(confirm: GapConfirmer, gaps: Sequence[SuspectedGap]) -> tuple[float, list[dict[str, Any]]]:
    t0 = time.perf_counter()
    verdicts = confirm(gaps)
    return time.perf_counter() - t0, verdicts


def spread(values: Sequence[float], fmt: str) -> str:
    return (
        f"median {statistics.median(values):{fmt}} (min {min(values):{fmt}}, max {max(values):{fmt}}, "
        f"{len(values)} runs)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gaps", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=0, help="default: one partition per gap")
    parser.add_argument("--per-gap", type=int, default=3, help="committed records inside each gap")
    parser.add_argument("--runs", type=int, default=3, help="A/B rounds counted")
    parser.add_argument("--baseline-gaps", type=int, default=0, help="run A on the first N gaps only")
    args = parser.parse_args(argv)
    partitions = args.partitions or args.gaps
    sample = min(args.baseline_gaps or args.gaps, args.gaps)

    work = Path(tempfile.mkdtemp(prefix="bench-confirm-"))
    broker = LocalKafka(
        work / "kafka", jvm.resolve_classpath("kafka"), offsets_partitions=1, heap="1g", die_with_parent=True
    )
    bootstrap = broker.start().bootstrap_servers
    try:
        gaps, records = layout(args.gaps, partitions, args.per_gap)
        create_topic(bootstrap, TOPIC, partitions)
        produce(bootstrap, records)
        kafka = KafkaConfig(bootstrap_servers=bootstrap)
        batched = kafka_gap_confirmer(kafka, bootstrap, max_records=MAX_RECORDS, timeout_s=TIMEOUT_S)
        one_by_one = one_by_one_confirmer(kafka, bootstrap, max_records=MAX_RECORDS, timeout_s=TIMEOUT_S)
        print(
            f"input: {args.gaps:,} gaps of {args.per_gap} records in {partitions:,} partitions "
            f"({sum(records.values()):,} records); baseline on "
            + (f"all {args.gaps:,} gaps" if sample == args.gaps else f"the first {sample:,} gaps, scaled")
        )
        timed(batched, gaps[:10])  # warm-up: connections and metadata, outside the figures
        base_times, batch_times, ratios = [], [], []
        for run in range(1, args.runs + 1):
            base_s, base_verdicts = timed(one_by_one, gaps[:sample])
            batch_s, verdicts = timed(batched, gaps)
            if verdicts[:sample] != base_verdicts:
                raise SystemExit(f"run {run}: the batched verdicts differ from the one-by-one verdicts")
            if any(v["status"] != vocab.CONFIRMED or v["data_records"] != args.per_gap for v in verdicts):
                raise SystemExit(f"run {run}: a gap was not confirmed with {args.per_gap} records")
            base_all = base_s * args.gaps / sample
            base_times.append(base_all)
            batch_times.append(batch_s)
            ratios.append(base_all / batch_s)
            print(
                f"  run {run}: one-by-one {base_all:8.2f}s ({base_s / sample * 1000:6.1f} ms/gap)  "
                f"batched {batch_s:6.2f}s  ratio {base_all / batch_s:6.1f}  same verdicts: yes"
            )
        print(f"one-by-one seconds: {spread(base_times, '.2f')}")
        print(f"batched seconds:    {spread(batch_times, '.2f')}")
        print(f"ratio one-by-one/batched: {spread(ratios, '.1f')}")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
