"""Benchmark of the streaming job: records/s with ledger and committer on vs. the same job sink-only.

    .venv/bin/python -m bench.stream [--records 2000000] [--partitions 4] [--per-trigger 500000] [--rounds 3]

A private broker (own data directory, stopped at the end) holds one topic with --records records of
about 100 bytes. In one Spark session the job reads it from earliest into a fresh Delta sink, in turns
A B, B A, A B ...: A = the audited job (ledger + Flink-style committer), B = the same pipeline writing only
the sink. Throughput is input records / (last batch end - first batch start), so JVM and query
startup are outside the figure. The ratio A/B is taken pair by pair, because this machine is noisy.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from confluent_kafka import Producer

from app.config import SparkConfig, load_config
from app.demo.local_kafka import LocalKafka
from app.runtime import jvm
from app.runtime.spark import build_spark_session
from app.stream.job import StopWhen, StreamJob
from tests.kafka.streaming import create_topic

TOPIC = "bench-orders"


def produce(bootstrap: str, records: int, partitions: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    payload = b"x" * 90
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, key=str(i).encode(), value=payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 100_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--per-trigger", type=int, default=500_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--rounds", type=int, default=3, help="A/B pairs counted (one more pair warms up)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    broker = LocalKafka(
        work / "kafka", jvm.resolve_classpath("kafka"), offsets_partitions=1, die_with_parent=True
    )
    bootstrap = broker.start().bootstrap_servers
    try:
        create_topic(bootstrap, TOPIC, args.partitions)
        produce(bootstrap, args.records, args.partitions)
        spark = build_spark_session(
            SparkConfig(master="local[*]", shuffle_partitions=2, driver_memory="6g"),
            jvm.spark_extra_jars(),
            str(work / "warehouse"),
            environ={},
        )
        print(
            f"input: {args.records:,} records in {args.partitions} partitions, "
            f"{args.per_trigger:,} per micro-batch"
        )
        ratios, audited_rates, sink_rates = [], [], []
        for pair in range(args.rounds + 1):
            rates = {}
            # The order alternates (A B, B A, ...): the JVM keeps warming up for several pairs, and
            # a fixed order would hand that drift to whichever job always runs second.
            order = (("audited", True), ("sink-only", False))
            for label, audited in order if pair % 2 == 0 else order[::-1]:
                cfg = load_config(
                    "local",
                    environ={},
                    overrides=[
                        f"paths.data_dir={work / f'run-{pair}-{label}'}",
                        f"kafka.bootstrap_servers={bootstrap}",
                        f"stream.topics=[{TOPIC}]",
                        f"stream.group_id=bench-{pair}-{label}",
                        "stream.job_name=bench",
                        "stream.startup_mode=earliest",
                        f"stream.max_offsets_per_trigger={args.per_trigger}",
                        "stream.trigger_interval=0 seconds",
                    ],
                )
                result = StreamJob(spark, cfg, bootstrap, audited=audited).run(StopWhen(idle_s=3))
                assert result.input_rows == args.records, result
                rates[label] = result.input_rows / result.processing_seconds
                tag = "warm-up" if pair == 0 else f"pair {pair}"
                print(
                    f"  {tag:8} {label:9} {result.batches:3} batches {result.processing_seconds:7.2f}s "
                    f"{rates[label]:>11,.0f} records/s"
                )
            if pair > 0:
                ratios.append(rates["audited"] / rates["sink-only"])
                audited_rates.append(rates["audited"])
                sink_rates.append(rates["sink-only"])
        print(
            f"median records/s: audited {statistics.median(audited_rates):,.0f}, "
            f"sink-only {statistics.median(sink_rates):,.0f}"
        )
        print(
            f"throughput ratio audited/sink-only: median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} pairs)"
        )
        # The ledger and committer cost a roughly fixed time per checkpoint, so the ratio depends
        # on how much work a micro-batch holds; this is that fixed time.
        audited_rate, sink_rate = statistics.median(audited_rates), statistics.median(sink_rates)
        overhead = args.per_trigger * (1 / audited_rate - 1 / sink_rate)
        print(f"added time per checkpoint (micro-batch of {args.per_trigger:,} records): {overhead:.2f}s")
        spark.stop()
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
