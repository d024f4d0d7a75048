"""Benchmark of the streaming job: records/s with ledger and committer on vs. the same job sink-only;
with --compare fetch, the first micro-batch over a wide topic with Kafka's default fetch wait vs ours.

    .venv/bin/python -m bench.stream [--records 2000000] [--partitions 4] [--per-trigger 500000] [--rounds 3]
    .venv/bin/python -m bench.stream --compare fetch --partitions 1000 --records 20000 [--rounds 3]
    .venv/bin/python -m bench.stream --compare attach --records 1500000 --per-trigger 250000 [--rounds 3]

A private broker (own data directory, stopped at the end) holds one topic with --records records of
about 100 bytes. In one Spark session the job reads it from earliest into a fresh Delta sink, in turns
A B, B A, A B ...: A = the audited job (ledger + Flink-style committer), B = the same pipeline writing only
the sink. Throughput is input records / (last batch end - first batch start), so JVM and query
startup are outside the figure. The ratio A/B is taken pair by pair, because this machine is noisy.

--compare fetch: each round runs the jobs of --jobs, KIND-WAIT with WAIT the source's fetch.max.wait.ms
(500 is Kafka's default, 10 the project's) and KIND audited, sink-only or bare (Kafka source -> noop
sink, availableNow); by default audited-500, audited-10 and bare-10, in turns A B C, C B A, ... A job's
time runs from its query's start to the end of its last batch. Every task of a micro-batch ends with a
fetch past its range, which waits the fetch wait for records it will not read: that cost grows with
the partitions, not the records. The warm-up round runs only the jobs with the shortest wait.

--compare attach: a user's own job (JSON records parsed, refunds filtered out, two columns kept, into
Spark's Delta sink, availableNow) with `app.attach.attach` (ledger + commits to a consumer group) vs
the same query unattached, in turns A B, B A, ... Throughput is input records / (end of the last
batch - start of the first), from the query's own progress reports; the attached run's close (its
last ledger events and commit) is timed apart. On a shared machine the wall-clock ratio swings with
the neighbours' load, so each run's CPU seconds are reported too, from /proc: Spark's JVM (the
query's work, and the checkpoint reads attach asks of it) and this driver process (attach's own
threads: listener, ledger writer, committer; the unattached run only waits there).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app.attach import attach
from app.config import AppConfig, SparkConfig, load_config
from app.demo.local_kafka import LocalKafka
from app.kafka.clients import spark_kafka_options
from app.runtime import jvm
from app.runtime.spark import build_spark_session
from app.stream.job import StopWhen, StreamJob
from tests.support.streaming import create_topic

TOPIC = "bench-orders"


def produce(bootstrap: str, records: int, partitions: int, payments: bool = False) -> None:
    """``records`` records of about 100 bytes; with ``payments``, JSON payments (every fourth a refund)."""
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
                value = payment(i) if payments else payload
                producer.produce(TOPIC, key=str(i).encode(), value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 100_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def payment(i: int) -> bytes:
    kind = b"refund" if i % 4 == 0 else b"payment"
    return b'{"id":%d,"amount":%d.25,"kind":"%s","note":"%s"}' % (i, i % 10_000, kind, b"n" * 30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--per-trigger", type=int, default=500_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--rounds", type=int, default=3, help="A/B pairs counted (one more pair warms up)")
    parser.add_argument(
        "--compare",
        choices=("ledger", "fetch", "attach"),
        default="ledger",
        help="ledger: audited vs sink-only (default); fetch: fetch waits, audited vs bare; "
        "attach: a user's JSON job attached (ledger + group commits) vs not",
    )
    parser.add_argument(
        "--jobs",
        type=parse_fetch_jobs,
        default="audited-500,audited-10,bare-10",
        help="--compare fetch: KIND-WAIT_MS,... with KIND audited, sink-only or bare (default: %(default)s)",
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    broker = LocalKafka(
        work / "kafka", jvm.resolve_classpath("kafka"), offsets_partitions=1, die_with_parent=True
    )
    bootstrap = broker.start().bootstrap_servers
    try:
        create_topic(bootstrap, TOPIC, args.partitions)
        produce(bootstrap, args.records, args.partitions, payments=args.compare == "attach")
        spark = build_spark_session(
            SparkConfig(master="local[*]", shuffle_partitions=2, driver_memory="6g"),
            jvm.spark_extra_jars(),
            str(work / "warehouse"),
            environ={},
        )
        print(
            f"input: {args.records:,} records in {args.partitions} partitions "
            f"({args.records / args.partitions:,.0f} per partition), {args.per_trigger:,} per micro-batch"
        )
        if args.compare == "fetch":
            compare_fetch_waits(spark, work, bootstrap, args)
        elif args.compare == "attach":
            compare_attach(spark, work, bootstrap, args)
        else:
            compare_ledger(spark, work, bootstrap, args)
        spark.stop()
    finally:
        broker.stop()


def job_config(work: Path, bootstrap: str, name: str, per_trigger: int, *extra: str) -> AppConfig:
    return load_config(
        "local",
        environ={},
        overrides=[
            f"paths.data_dir={work / name}",
            f"kafka.bootstrap_servers={bootstrap}",
            f"stream.topics=[{TOPIC}]",
            f"stream.group_id=bench-{name}",
            "stream.job_name=bench",
            "stream.startup_mode=earliest",
            f"stream.max_offsets_per_trigger={per_trigger}",
            "stream.trigger_interval=0 seconds",
            *extra,
        ],
    )


def compare_ledger(spark: SparkSession, work: Path, bootstrap: str, args: argparse.Namespace) -> None:
    """Audited vs sink-only throughput, pair by pair."""
    ratios, audited_rates, sink_rates = [], [], []
    for pair in range(args.rounds + 1):
        rates = {}
        # The order alternates (A B, B A, ...): the JVM keeps warming up for several pairs, and
        # a fixed order would hand that drift to whichever job always runs second.
        order = (("audited", True), ("sink-only", False))
        for label, audited in order if pair % 2 == 0 else order[::-1]:
            cfg = job_config(work, bootstrap, f"run-{pair}-{label}", args.per_trigger)
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


PAYMENT_SCHEMA = "id LONG, amount DOUBLE, kind STRING, note STRING"


def payments_query(
    spark: SparkSession, bootstrap: str, name: str, work: Path, per_trigger: int
) -> StreamingQuery:
    """The user-style job: JSON parsed, refunds filtered out, two columns kept, into a Delta table."""
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .load()
    )
    payments = (
        raw.select(F.from_json(F.col("value").cast("string"), PAYMENT_SCHEMA).alias("p"))
        .select("p.*")
        .where(F.col("kind") == "payment")
        .select("id", "amount")
    )
    return (
        payments.writeStream.format("delta")
        .option("checkpointLocation", str(work / name / "checkpoint"))
        .trigger(availableNow=True)
        .start(str(work / name / "sink"))
    )


def batch_window_s(query: StreamingQuery) -> tuple[int, float]:
    """(input records, seconds from the first batch's start to the last one's end) of an ended query."""
    reports = [p for p in query.recentProgress if int(p.numInputRows or 0) > 0]
    first = datetime.fromisoformat(reports[0].timestamp.replace("Z", "+00:00"))
    last = datetime.fromisoformat(reports[-1].timestamp.replace("Z", "+00:00"))
    ended = last + timedelta(milliseconds=int(reports[-1].batchDuration))
    return sum(int(p.numInputRows) for p in reports), (ended - first).total_seconds()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jvm_pid(spark: SparkSession) -> int:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return int(jvm.java.lang.ProcessHandle.current().pid())


def run_user_job(
    spark: SparkSession, work: Path, bootstrap: str, name: str, attached: bool, args: argparse.Namespace
) -> tuple[float, int, float, tuple[float, float]]:
    """(records/s, batches, seconds the attached run's close waited, (CPU seconds of the JVM, of the
    driver)) of one run of the user's job."""
    pids = (jvm_pid(spark), os.getpid())
    cpu_before = [cpu_seconds(pid) for pid in pids]
    query = payments_query(spark, bootstrap, name, work, args.per_trigger)
    audit = None
    if attached:
        audit = attach(
            query,
            job_name="bench-payments",
            ledger=str(work / name / "ledger"),
            group_id=f"bench-{name}",
            kafka_options={"bootstrap.servers": bootstrap},
        )
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    closing = time.monotonic()
    if audit is not None:
        assert audit.close(), "the attached run did not finish"
        assert audit.ledger_write_failures == 0
        assert audit.commits is not None
        assert audit.commits.committer.failed_commits == 0
    closed_s = time.monotonic() - closing
    jvm_cpu, driver_cpu = (cpu_seconds(pid) - before for pid, before in zip(pids, cpu_before, strict=True))
    rows, seconds = batch_window_s(query)
    assert rows == args.records, (rows, args.records)
    batches = sum(1 for p in query.recentProgress if int(p.numInputRows or 0) > 0)
    return rows / seconds, batches, closed_s, (jvm_cpu, driver_cpu)


def compare_attach(spark: SparkSession, work: Path, bootstrap: str, args: argparse.Namespace) -> None:
    """The user's job attached vs not, pair by pair."""
    ratios, attached_rates, plain_rates, jvm_ratios, driver_added = [], [], [], [], []
    for pair in range(args.rounds + 1):
        rates: dict[str, float] = {}
        cpus: dict[str, tuple[float, float]] = {}
        # Alternating order (A B, B A, ...), as in compare_ledger.
        order = (("attached", True), ("plain", False))
        for label, attached in order if pair % 2 == 0 else order[::-1]:
            rate, batches, closed_s, cpus[label] = run_user_job(
                spark, work, bootstrap, f"pair-{pair}-{label}", attached, args
            )
            rates[label] = rate
            tag = "warm-up" if pair == 0 else f"pair {pair}"
            close = f", close waited {closed_s:.2f}s" if attached else ""
            print(
                f"  {tag:8} {label:8} {batches:3} batches {rate:>11,.0f} records/s, "
                f"CPU JVM {cpus[label][0]:6.1f}s driver {cpus[label][1]:5.2f}s{close}",
                flush=True,
            )
        if pair > 0:
            ratios.append(rates["attached"] / rates["plain"])
            jvm_ratios.append(cpus["plain"][0] / cpus["attached"][0])
            driver_added.append(cpus["attached"][1] - cpus["plain"][1])
            attached_rates.append(rates["attached"])
            plain_rates.append(rates["plain"])

    def spread(rates: list[float]) -> str:
        return f"{statistics.median(rates):,.0f} (min {min(rates):,.0f}, max {max(rates):,.0f})"

    print(f"median records/s: attached {spread(attached_rates)}, plain {spread(plain_rates)}")
    print(
        f"throughput ratio attached/plain: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} pairs)"
    )
    print(
        f"JVM CPU ratio plain/attached: median {statistics.median(jvm_ratios):.3f} "
        f"(min {min(jvm_ratios):.3f}, max {max(jvm_ratios):.3f}); driver CPU attach added per run: "
        f"median {statistics.median(driver_added):.2f}s (min {min(driver_added):.2f}s, "
        f"max {max(driver_added):.2f}s); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )


@dataclass(frozen=True)
class FetchJob:
    kind: str  # audited (ledger + committer), sink-only (the same job writing only the sink), bare
    wait_ms: int

    @property
    def label(self) -> str:
        return f"{self.kind}-{self.wait_ms}"


FETCH_KINDS = ("audited", "sink-only", "bare")
# Pairs whose time ratio tells something, printed when both ran: the fetch wait's cost, the
# ledger's (audited vs sink-only), the Delta sink's (sink-only vs bare), everything of ours.
FETCH_RATIOS = (
    ("audited-500", "audited-10"),
    ("bare-500", "bare-10"),
    ("audited-10", "sink-only-10"),
    ("sink-only-10", "bare-10"),
    ("audited-10", "bare-10"),
)


def parse_fetch_jobs(text: str) -> list[FetchJob]:
    jobs = []
    for item in text.split(","):
        kind, _, wait = item.strip().rpartition("-")
        if kind not in FETCH_KINDS or not wait.isdigit():
            raise argparse.ArgumentTypeError(f"{item!r}: expected KIND-WAIT_MS, KIND one of {FETCH_KINDS}")
        jobs.append(FetchJob(kind, int(wait)))
    return jobs


def run_fetch_job(
    spark: SparkSession, work: Path, bootstrap: str, job: FetchJob, name: str, args: argparse.Namespace
) -> float:
    """Seconds from the query's start to the end of its last batch, after checking it read every record."""
    cfg = job_config(work, bootstrap, name, args.per_trigger, f"kafka.java.fetch.max.wait.ms={job.wait_ms}")
    if job.kind != "bare":
        result = StreamJob(spark, cfg, bootstrap, audited=job.kind == "audited").run(StopWhen(idle_s=3))
        assert result.input_rows == args.records, result
        return result.processing_seconds
    # The bare job: the same source options, no foreachBatch, a sink that writes nothing.
    started = time.monotonic()
    query = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(cfg.kafka, bootstrap))
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.per_trigger))
        .load()
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(work / name / "checkpoint"))
        .start()
    )
    query.awaitTermination()
    seconds = time.monotonic() - started
    rows = sum(int(p.get("numInputRows") or 0) for p in query.recentProgress)
    assert rows == args.records, (rows, args.records)
    return seconds


def compare_fetch_waits(spark: SparkSession, work: Path, bootstrap: str, args: argparse.Namespace) -> None:
    """The jobs of --jobs in turns, round by round, and the time ratios of FETCH_RATIOS."""
    jobs: list[FetchJob] = args.jobs
    shortest = min(job.wait_ms for job in jobs)
    seconds: dict[str, list[float]] = {job.label: [] for job in jobs}
    for round_ in range(args.rounds + 1):
        # The warm-up round runs only the shortest-wait jobs: the JVM warms up the same for the others.
        todo = [job for job in jobs if job.wait_ms == shortest] if round_ == 0 else jobs
        # The order alternates (A B C, C B A, ...), so no job always profits from the JVM's warming up.
        for job in todo if round_ % 2 == 1 else todo[::-1]:
            took = run_fetch_job(spark, work, bootstrap, job, f"round-{round_}-{job.label}", args)
            tag = "warm-up" if round_ == 0 else f"round {round_}"
            print(f"  {tag:8} {job.label:14} {took:8.2f}s {args.records / took:>9,.0f} records/s", flush=True)
            if round_ > 0:
                seconds[job.label].append(took)

    def spread(values: list[float]) -> str:
        return f"median {statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"

    print(
        f"seconds for {args.records:,} records in {args.partitions} partitions, {args.rounds} rounds "
        "(KIND-WAIT: the source's fetch.max.wait.ms in ms):"
    )
    for job in jobs:
        print(f"  {job.label:14} {spread(seconds[job.label])}")
    for slow, fast in FETCH_RATIOS:
        if slow in seconds and fast in seconds:
            # Round by round, as the rounds ran in turns on a noisy machine.
            ratios = [a / b for a, b in zip(seconds[slow], seconds[fast], strict=True)]
            print(f"time ratio {slow} / {fast}: {spread(ratios)}")


if __name__ == "__main__":
    main()
