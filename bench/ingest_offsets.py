"""Benchmark of `ingest-offsets` against Kafka's own OffsetsMessageFormatter, on the same records.

    .venv/bin/python -m bench.ingest_offsets [--records 3000000] [--offsets-partitions 10]

1. Starts a private single-node broker (its own data directory, stopped at the end) whose
   `__consumer_offsets` has --offsets-partitions partitions.
2. Produces real offset commits, never hand-made bytes: one group per `__consumer_offsets` partition,
   each committing all partitions of a wide topic per request (one record per topic partition), from
   several processes in parallel.
3. Times, on the same records: the full ingest into Delta as the CLI runs it (`ingest.decode_on`
   auto: with a local master, one Kafka consumer and the decoder in the driver process, delta-rs
   appends and positions), the same ingest forced onto the Spark path (Spark's Kafka source, decode
   on the executors, Delta appends through Spark: what a cluster runs), Spark's Kafka source alone
   (every column into a no-op sink: the floor of any Spark reader), Kafka's console consumer with
   OffsetsMessageFormatter, and selective ingests of 1 and of half the partitions on the CLI's path
   (cost should follow the partitions read).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from app.config import AppConfig, IngestConfig, KafkaConfig, PathsConfig, SparkConfig, load_config
from app.demo.local_kafka import LocalKafka
from app.offsets_topic.bounds import log_bounds
from app.offsets_topic.decoder import partition_for_group
from app.offsets_topic.ranges import PartitionRange
from app.offsets_topic.run import ingest_offsets
from app.offsets_topic.spark_route import read_offsets_topic
from app.routes import SPARK, decode_route
from app.runtime import jvm
from app.runtime.spark import build_spark_session

OFFSETS_TOPIC = "__consumer_offsets"


def groups_one_per_partition(count: int) -> list[str]:
    """A group name for each `__consumer_offsets` partition, found by the coordinator's own rule."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < count:
        name = f"bench-group-{i}"
        found.setdefault(partition_for_group(name, count), name)
        i += 1
    return [found[p] for p in range(count)]


def commit_loop(args: tuple[str, str, str, int, int]) -> int:
    """One process: `commits` async commits of every partition of `topic` for `group`."""
    bootstrap, group, topic, partitions, commits = args
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for c in range(commits):
            consumer.commit(
                offsets=[TopicPartition(topic, p, c + 1) for p in range(partitions)], asynchronous=True
            )
            consumer.poll(0)  # serves commit callbacks, keeps librdkafka's queue short
        consumer.commit(offsets=[TopicPartition(topic, 0, commits + 1)], asynchronous=False)
    finally:
        consumer.close()
    return commits * partitions + 1


def produce_commits(bootstrap: str, groups: list[str], topic: str, partitions: int, per_group: int) -> int:
    commits = max(1, per_group // partitions)
    jobs = [(bootstrap, g, topic, partitions, commits) for g in groups]
    with multiprocessing.get_context("spawn").Pool(min(len(groups), 4)) as pool:
        return sum(pool.map(commit_loop, jobs))


def formatter_seconds(bootstrap: str, per_partition: dict[int, int]) -> tuple[float, int]:
    """Kafka's console consumer + OffsetsMessageFormatter over the same partitions, output discarded.

    Reads each partition in its own process, all at once (the tool reads one partition or a whole topic),
    and stops at --max-messages, so no idle timeout is timed. JVM start-up is included in the figure.
    """
    classpath = ":".join(str(j) for j in jvm.resolve_classpath("kafka"))

    def command(partition: int, n: int) -> list[str]:
        return [
            "java", "-Xmx1g", "-cp", classpath, "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "--bootstrap-server", bootstrap, "--topic", OFFSETS_TOPIC, "--partition", str(partition),
            "--offset", "earliest", "--max-messages", str(n), "--timeout-ms", "20000",
            "--formatter", "org.apache.kafka.tools.consumer.OffsetsMessageFormatter",
            "--consumer-property", "exclude.internal.topics=false",
            "--isolation-level", "read_committed",
        ]  # fmt: skip

    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(command(p, n), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        for p, n in per_partition.items()
    ]
    printed = 0
    for proc in procs:
        out, _ = proc.communicate()
        printed += out.count(b'{"key"')
    return time.perf_counter() - t0, printed


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(label: str, values: list[float], unit: str) -> str:
    return (f"  {label:58s} median {median(values):>10,.2f}{unit}  min {min(values):>10,.2f}{unit}  "
            f"max {max(values):>10,.2f}{unit}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=3_000_000, help="offset commit records to produce")
    ap.add_argument("--offsets-partitions", type=int, default=10)
    ap.add_argument("--topic-partitions", type=int, default=500, help="records per commit request")
    ap.add_argument("--runs", type=int, default=3, help="timed runs over the same records (0: produce only)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--spark-runs", type=int, default=None,
        help="of the runs, how many also time the spark path (default: all; it is the slow one)",
    )  # fmt: skip
    ap.add_argument(
        "--work-dir", type=Path, default=None,
        help="keep the broker's data here; a later call with the same directory reuses the records",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.spark_runs is None:
        args.spark_runs = args.runs

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    base: AppConfig = load_config("local", [f"paths.data_dir={work / 'data'}"], environ={})
    broker = LocalKafka(
        work / "kafka", jvm.resolve_classpath("kafka"), offsets_partitions=args.offsets_partitions, heap="1g"
    )
    state = broker.start()
    bootstrap = state.bootstrap_servers
    try:
        topic = "bench-wide"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        groups = groups_one_per_partition(args.offsets_partitions)
        all_parts = list(range(args.offsets_partitions))
        in_log = 0
        if OFFSETS_TOPIC in admin.list_topics(timeout=60).topics:  # created by the first commit
            start, end = log_bounds(admin, bootstrap, OFFSETS_TOPIC, all_parts, 60)
            in_log = sum(end[p] - start[p] for p in all_parts)
        if in_log < args.records:
            if topic not in admin.list_topics(timeout=60).topics:
                admin.create_topics([NewTopic(topic, args.topic_partitions, 1)])[topic].result(120)
            t0 = time.perf_counter()
            produced = produce_commits(
                bootstrap, groups, topic, args.topic_partitions, (args.records - in_log) // len(groups)
            )
            produce_s = time.perf_counter() - t0
            print(f"produced {produced:,} offset commits with {len(groups)} groups in {produce_s:.1f}s "
                  f"({produced / produce_s:,.0f}/s)")  # fmt: skip
            start, end = log_bounds(admin, bootstrap, OFFSETS_TOPIC, all_parts, 60)
            in_log = sum(end[p] - start[p] for p in all_parts)
        print(f"__consumer_offsets holds {in_log:,} offsets in {args.offsets_partitions} partitions")
        if args.runs <= 0:
            return 0

        spark = build_spark_session(
            SparkConfig(mode="local", master=args.master, shuffle_partitions=2, driver_memory="3g"),
            jvm.spark_extra_jars(base.paths.cache_dir),
            str(work / "warehouse"),
        )

        def cfg_for(name: str, groups_: list[str], decode_on: str = "auto") -> AppConfig:
            return dataclasses.replace(
                base,
                paths=PathsConfig(data_dir=str(work / "runs" / name), cache_dir=base.paths.cache_dir),
                kafka=KafkaConfig(bootstrap_servers=bootstrap),
                ingest=IngestConfig(groups=groups_, decode_on=decode_on),
            )

        def read_kafka(ranges: list[PartitionRange]) -> None:
            spark.conf.set("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "true")
            try:
                kafka_df = read_offsets_topic(spark, cfg_for("noop", []), bootstrap, ranges)
                kafka_df.write.format("noop").mode("overwrite").save()
            finally:
                spark.conf.unset("spark.sql.streaming.kafka.useDeprecatedOffsetFetching")

        cli_path = decode_route(base.ingest.decode_on, spark.sparkContext.master or "")
        # Warm-up of both paths: JVM, the Kafka connector's classes, a Delta write, the consumer.
        read_kafka([PartitionRange(0, start[0], min(end[0], start[0] + 1000), None)])
        for path in ("auto", SPARK):
            ingest_offsets(
                spark, cfg_for(f"warm-{path}", groups[:1], path), bootstrap, groups[:1], "bench-warm"
            )

        ranges = [PartitionRange(p, start[p], end[p], None) for p in all_parts]
        half = max(1, args.offsets_partitions // 2)
        runs: list[dict[str, float]] = []
        for i in range(args.runs):
            shutil.rmtree(work / "runs", ignore_errors=True)
            t0 = time.perf_counter()
            read_kafka(ranges)
            read_s = time.perf_counter() - t0

            t0 = time.perf_counter()
            full = ingest_offsets(spark, cfg_for("full", []), bootstrap, run_id=f"bench-full-{i}")
            full_s = time.perf_counter() - t0
            records = full.total["read"]

            spark_s = float("nan")
            if i < args.spark_runs:
                t0 = time.perf_counter()
                on_spark = ingest_offsets(
                    spark, cfg_for("spark", [], SPARK), bootstrap, run_id=f"bench-spark-{i}"
                )
                spark_s = time.perf_counter() - t0
                assert on_spark.total == full.total, (on_spark.total, full.total)

            kafka_s, printed = formatter_seconds(
                bootstrap, {p["partition"]: p["read"] for p in full.partitions}
            )
            formatter_rate = printed / kafka_s
            run = {
                "records": records,
                "read_rate": records / read_s,
                "full_s": full_s,
                "full_rate": records / full_s,
                "spark_rate": records / spark_s,
                "formatter_rate": formatter_rate,
                "ratio": (records / full_s) / formatter_rate,
                "spark_ratio": (records / spark_s) / formatter_rate,
            }
            for k in (1, half):
                t0 = time.perf_counter()
                res = ingest_offsets(
                    spark, cfg_for(f"sel{k}", groups[:k]), bootstrap, groups[:k], run_id=f"bench-{k}-{i}"
                )
                run[f"sel{k}_time_share"] = (time.perf_counter() - t0) / full_s
                run[f"sel{k}_record_share"] = res.total["read"] / records
            runs.append(run)
            print(f"run {i + 1}: {records:,} records; ingest ({cli_path} path) {full_s:.1f}s = "
                  f"{run['full_rate']:,.0f} rec/s; "
                  f"spark path {spark_s:.1f}s = {run['spark_rate']:,.0f} rec/s; "
                  f"formatter {kafka_s:.1f}s for {printed:,} = {formatter_rate:,.0f} rec/s; "
                  f"ratio {run['ratio']:.2f}x; Kafka source only {run['read_rate']:,.0f} rec/s; "
                  f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip

        print()
        print(f"input: {in_log:,} offset commit records in {args.offsets_partitions} __consumer_offsets "
              f"partitions; Spark {args.master}, {os.cpu_count()} shared cores; {len(runs)} runs "
              f"({args.spark_runs} with the spark path)")  # fmt: skip

        def col(name: str) -> list[float]:
            return [r[name] for r in runs]

        def measured(name: str) -> list[float]:
            return [x for x in col(name) if not math.isnan(x)] or [math.nan]  # nan: not measured

        print(spread(f"ingest-offsets as the CLI runs it ({cli_path} path), rec/s", col("full_rate"), ""))
        print(spread("ingest-offsets on the spark path (decode_on=spark), rec/s", measured("spark_rate"), ""))
        print(spread("spark Kafka source only (-> noop), rec/s", col("read_rate"), ""))
        print(spread("kafka OffsetsMessageFormatter (1 JVM per partition), rec/s", col("formatter_rate"), ""))
        print(spread(f"ratio ingest ({cli_path} path) / formatter (same run)", col("ratio"), "x"))
        print(spread("ratio ingest (spark path) / formatter (same run)", measured("spark_ratio"), "x"))
        print("selective ingest (only the audited groups' partitions), share of the full time:")
        for k in (1, half):
            share = median(col(f"sel{k}_record_share"))
            print(spread(f"{k} of {args.offsets_partitions} partitions ({share:.0%} of the records)",
                         [100 * x for x in col(f"sel{k}_time_share")], "%"))  # fmt: skip
        spark.stop()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
