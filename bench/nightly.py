"""Benchmark of `nightly` against its floor: one Spark session start plus one bare read of each table.

    .venv/bin/python -m bench.nightly [--runs 3] [--new-commits 100000] [--work-dir DIR]

1. Starts a private single-node broker (its own data directory, stopped at the end) and seeds the
   demo's sizes: one job on 3 partitions, 40 checkpoints of 10 records per partition (1,200 sink
   rows), every checkpoint committed to the group for real (confluent-kafka, so the commits are
   genuine `__consumer_offsets` records) and written to the ledger like the streaming job does. A
   first nightly ingests and reconciles that state (not timed).
2. Each timed run then measures, each in its own fresh process as a scheduler would start them:
   (a) nothing new since the last night: the floor, then the nightly;
   (b) a day of new work: --new-commits offset commit records (one per partition and checkpoint, with
       the ledger's snapshot/completion/commit events of every checkpoint and its sink rows), then
       the floor and the nightly over it.
   The floor is a process that starts the same Spark session as `nightly` and reads every table the
   nightly reads or writes once, in full, into Spark's no-op sink; for (b) it also reads the new
   `__consumer_offsets` records once. The ratio is nightly / floor of the same run.

"A day" is a day's volume, not a day's clock: the commits are produced as fast as the broker takes
them and the ledger's events carry the real time of each commit, so the group commits match their
checkpoints exactly as a live job's do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.pandas.types import to_arrow_schema

from app.config import load_config
from app.contracts.offsets import EventSource, LedgerEvent
from app.contracts.tables import LEDGER_SCHEMA, SINK_SCHEMA
from app.demo.local_kafka import LocalKafka
from app.offsets_topic.decoder import partition_for_group
from app.offsets_topic.ranges import PartitionRange
from app.runtime import jvm

TOPIC, GROUP, JOB, RUN = "orders", "bench-nightly-orders", "bench-nightly-job", "bench-nightly-run"
PARTITIONS = 3
PER_CHECKPOINT = 10  # records per partition and checkpoint
SEED_CHECKPOINTS = 40  # 1,200 sink rows: the demo's size
OFFSETS_PARTITIONS = 5  # the embedded broker's default
MAX_IN_FLIGHT = 200  # commit requests not yet acknowledged
COORDINATOR_NOT_READY = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)
# Every table `nightly` reads or writes (validation_results included: `report` reads it).
TABLES = (
    "ledger",
    "sink",
    "group_commits",
    "group_events",
    "decode_errors",
    "ingest_positions",
    "findings",
    "partition_summary",
    "incidents",
    "restarts",
    "audit_runs",
    "validation_results",
)


def overrides(work: Path, bootstrap: str) -> list[str]:
    return [
        f"paths.data_dir={work / 'data'}",
        f"kafka.bootstrap_servers={bootstrap}",
        f"ingest.groups=[{GROUP}]",
        f"reconcile.jobs=[{JOB}]",
        f"stream.job_name={JOB}",
        f"stream.group_id={GROUP}",
        f"stream.topics=[{TOPIC}]",
    ]


# --- the job's history ---------------------------------------------------------------------------


@dataclass
class Job:
    """The state of the simulated job: next checkpoint id; every partition's next offset is
    checkpoint * PER_CHECKPOINT, since each checkpoint covers PER_CHECKPOINT records per partition."""

    bootstrap: str
    data: Path
    checkpoint: int = 0
    partitions: int = PARTITIONS

    def __post_init__(self) -> None:
        self.source = EventSource(JOB, RUN, "spark", GROUP)

    def start(self, at: datetime | None = None) -> None:
        """RUN_STARTED (at ``at``, default now) and the tables, the way the streaming job creates them."""
        from deltalake import DeltaTable

        ledger, sink = self.data / "tables" / "ledger", self.data / "tables" / "sink"
        DeltaTable.create(
            str(ledger),
            to_arrow_schema(LEDGER_SCHEMA),
            partition_by=["event_date"],
            configuration={"delta.appendOnly": "true"},
            mode="ignore",
        )
        DeltaTable.create(str(sink), to_arrow_schema(SINK_SCHEMA), mode="ignore")
        now = at or datetime.now(UTC)
        offsets = {(TOPIC, p): 0 for p in range(self.partitions)}
        events = [self.source.event("RUN_STARTED", now, None, {"startup": "earliest"})]
        events += self.source.partition_events("OFFSETS_RESTORED", now, None, offsets, {"source": "earliest"})
        self._append(events, [])

    def run(self, checkpoints: int) -> int:
        """`checkpoints` checkpoints: each committed to Kafka for real, then its ledger events and
        sink rows appended. Returns the offset commit records produced."""
        events: list[LedgerEvent] = []
        first = self.checkpoint + 1
        self.commit(checkpoints, lambda cp, at: events.extend(self.checkpoint_events(cp, at)))
        self._append(events, self.sink_rows(first, first + checkpoints))
        return checkpoints * self.partitions

    def commit(self, checkpoints: int, each: Callable[[int, datetime], None]) -> None:
        """The next `checkpoints` checkpoints committed to the group for real (asynchronously, a
        bounded number in flight); `each(checkpoint, commit time)` runs after each commit request,
        where the job writes that checkpoint's ledger events. Raises unless every commit was
        acknowledged without error."""
        committed = 0
        errors: list[KafkaError] = []

        def on_commit(err: KafkaError | None, _: list[TopicPartition]) -> None:
            nonlocal committed
            committed += 1
            if err is not None:
                errors.append(err)

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "on_commit": on_commit,
            }
        )
        first = self.checkpoint + 1
        try:
            find_coordinator(consumer)
            for cp in range(first, first + checkpoints):
                end = cp * PER_CHECKPOINT
                at = datetime.now(UTC)
                consumer.commit(
                    offsets=[TopicPartition(TOPIC, p, end) for p in range(self.partitions)],
                    asynchronous=True,
                )
                consumer.poll(0)  # serves commit callbacks
                while cp - first + 1 - committed > MAX_IN_FLIGHT:
                    consumer.poll(0.1)  # a busy broker times out a deep queue of commit requests
                each(cp, at)
            deadline = time.monotonic() + 300
            while committed < checkpoints and time.monotonic() < deadline:
                consumer.poll(0.5)
        finally:
            consumer.close()
        if committed < checkpoints or errors:
            raise RuntimeError(f"{committed} of {checkpoints} commits acknowledged; errors: {errors[:3]}")
        self.checkpoint = first + checkpoints - 1

    def checkpoint_events(self, cp: int, commit_at: datetime) -> list[LedgerEvent]:
        """Checkpoint `cp`'s ledger events, its group commit requested at `commit_at`."""
        offsets = {(TOPIC, p): cp * PER_CHECKPOINT for p in range(self.partitions)}
        ms = timedelta(milliseconds=1)
        attempt = {"attempt": cp}
        return [
            *self.source.partition_events("CHECKPOINT_SNAPSHOT", commit_at - 2 * ms, cp, offsets, {}),
            *self.source.partition_events("CHECKPOINT_COMPLETED", commit_at - ms, cp, offsets, {}),
            *self.source.partition_events("COMMIT_REQUESTED", commit_at, cp, offsets, attempt),
            *self.source.partition_events("COMMIT_SUCCEEDED", commit_at + ms, cp, offsets, attempt),
        ]

    def sink_rows(self, first: int, stop: int) -> pa.Table:
        """The sink rows of checkpoints first .. stop - 1."""
        lo, hi = (first - 1) * PER_CHECKPOINT, (stop - 1) * PER_CHECKPOINT
        offsets = pa.array(range(lo, hi), pa.int64())
        checkpoint = pa.array([o // PER_CHECKPOINT + 1 for o in range(lo, hi)], pa.int64())
        now = datetime.now(UTC)
        parts = []
        for p in range(self.partitions):
            n = hi - lo
            parts.append(
                pa.table(
                    {
                        "kafka_topic": pa.array([TOPIC] * n),
                        "kafka_partition": pa.array([p] * n, pa.int32()),
                        "kafka_offset": offsets,
                        "kafka_timestamp": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
                        "_checkpoint_id": checkpoint,
                        "_run_id": pa.array([RUN] * n),
                        "key": pa.nulls(n, pa.binary()),
                        "value": pa.nulls(n, pa.binary()),
                    }
                )
            )
        return pa.concat_tables(parts).cast(to_arrow_schema(SINK_SCHEMA))

    def _append(self, events: Sequence[LedgerEvent], sink: pa.Table | list[Any]) -> None:
        from deltalake import DeltaTable, write_deltalake

        ledger = DeltaTable(str(self.data / "tables" / "ledger"))
        rows = pa.Table.from_pylist(
            [e.to_row() for e in events], schema=pa.schema(ledger.schema().to_arrow())
        )
        write_deltalake(ledger, rows, mode="append")
        if isinstance(sink, pa.Table) and sink.num_rows:
            write_deltalake(str(self.data / "tables" / "sink"), sink, mode="append")


def find_coordinator(consumer: Consumer, timeout_s: float = 120) -> None:
    """Looks up the group coordinator (an offset fetch) before the first commit: commits sent while
    it is still being looked up could reach it after later ones (a committed offset going back).
    Retries retriable errors and the coordinator's own (a new broker creates the offsets topic on
    the first group request and answers NOT_COORDINATOR until it has loaded it, which librdkafka
    does not flag retriable)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            consumer.committed([TopicPartition(TOPIC, 0)], timeout=30)
            return
        except KafkaException as exc:
            error = exc.args[0]
            again = isinstance(error, KafkaError) and (
                error.retriable() or error.code() in COORDINATOR_NOT_READY
            )
            if not again or time.monotonic() > deadline:
                raise
            consumer.poll(0.5)  # back-off before the next lookup; serves nothing else


# --- processes -----------------------------------------------------------------------------------


def private_broker(work: Path, partitions: int) -> tuple[LocalKafka, str]:
    """A fresh single-node broker of the bench's own under `work` (dies with this process) and
    the audited topic on it; the caller stops it. Returns the broker and its bootstrap address."""
    broker = LocalKafka(
        work / "kafka",
        jvm.resolve_classpath("kafka"),
        offsets_partitions=OFFSETS_PARTITIONS,
        heap="1g",
        die_with_parent=True,
    )
    shutil.rmtree(broker.data_dir, ignore_errors=True)
    bootstrap = broker.start().bootstrap_servers
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(120)
    except BaseException:  # no broker left running when the topic cannot be made
        broker.stop()
        raise
    return broker, bootstrap


@dataclass(frozen=True)
class Timed:
    wall_s: float
    out: dict[str, Any]


def child(args: list[str], log_file: Path) -> Timed:
    """A fresh Python process from this checkout, as a scheduler starts one; its JSON on stdout."""
    started = time.perf_counter()
    with log_file.open("a") as err:
        proc = subprocess.run(
            [sys.executable, *args], stdout=subprocess.PIPE, stderr=err, text=True, check=False
        )
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1):  # 1: findings at or above --fail-on, still a finished night
        raise RuntimeError(f"{args[:3]} exited {proc.returncode}; see {log_file}")
    return Timed(wall, json.loads(proc.stdout[proc.stdout.index("{") :]))


def nightly(work: Path, bootstrap: str, run_id: str) -> Timed:
    sets = [a for o in overrides(work, bootstrap) for a in ("--set", o)]
    return child(
        ["-m", "app.cli", "nightly", "--json", "--run-id", run_id, "--fail-on", "critical", *sets],
        work / "nightly.log",
    )


def floor(work: Path, bootstrap: str, ranges: Sequence[PartitionRange]) -> Timed:
    spans = json.dumps([[r.partition, r.start, r.end] for r in ranges if r.size > 0])
    return child(
        [
            "-m",
            "bench.nightly",
            "--floor",
            "--work-dir",
            str(work),
            "--bootstrap",
            bootstrap,
            "--ranges",
            spans,
        ],
        work / "floor.log",
    )


def floor_main(work: Path, bootstrap: str, spans: list[list[int]]) -> int:
    """Inside the floor process: the nightly's session, then each table and the new records once."""
    from app.offsets_topic.spark_route import read_offsets_topic
    from app.runtime.session import spark_session
    from app.storage.handles import AuditTables
    from app.storage.tables import read_delta

    t0 = time.perf_counter()
    cfg = load_config("local", overrides(work, bootstrap), environ={})
    spark = spark_session(cfg)
    out: dict[str, Any] = {"session_s": time.perf_counter() - t0, "reads_s": {}}
    for name in TABLES:
        t = time.perf_counter()
        df = read_delta(spark, AuditTables.from_config(cfg, None).locations.named(name))
        if df is not None:
            df.write.format("noop").mode("overwrite").save()
            out["reads_s"][name] = time.perf_counter() - t
    if spans:
        t = time.perf_counter()
        spark.conf.set("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "true")
        ranges = [PartitionRange(p, lo, hi, None) for p, lo, hi in spans]
        read_offsets_topic(spark, cfg, bootstrap, ranges).write.format("noop").mode("overwrite").save()
        out["reads_s"]["__consumer_offsets"] = time.perf_counter() - t
    print(json.dumps(out))
    return 0


def pending_ranges(work: Path, bootstrap: str) -> list[PartitionRange]:
    """The group's `__consumer_offsets` partition from its stored position to the log end."""
    from deltalake import DeltaTable

    p = partition_for_group(GROUP, OFFSETS_PARTITIONS)
    path = work / "data" / "tables" / "ingest_positions"
    stored = 0
    if DeltaTable.is_deltatable(str(path)):
        rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
        stored = next((int(r["next_offset"]) for r in rows if r["log_partition"] == p), 0)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-nightly-probe"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition("__consumer_offsets", p), timeout=60)
    finally:
        consumer.close()
    return [PartitionRange(p, stored, high, stored)]


# --- report --------------------------------------------------------------------------------------


def steps_of(t: Timed) -> dict[str, float]:
    steps = {s["step"]: float(s["seconds"]) for s in t.out["steps"]}
    failed = [s for s in t.out["steps"] if s["status"] != "done"]
    if failed:
        raise RuntimeError(f"nightly step failed: {failed}")
    steps["start-up and exit"] = t.wall_s - sum(steps.values())
    return steps


def spread(label: str, values: Sequence[float], unit: str = "s") -> str:
    return (
        f"  {label:34s} median {statistics.median(values):8.2f}{unit}  "
        f"min {min(values):8.2f}{unit}  max {max(values):8.2f}{unit}"
    )


def print_case(name: str, runs: list[tuple[Timed, Timed]]) -> None:
    print(f"({name})")
    print(spread("floor (session + bare reads)", [f.wall_s for f, _ in runs]))
    print(spread("  of which Spark session start", [f.out["session_s"] for f, _ in runs]))
    print(spread("nightly total", [n.wall_s for _, n in runs]))
    for step in steps_of(runs[0][1]):
        print(spread(f"  {step}", [steps_of(n)[step] for _, n in runs]))
    print(spread("ratio nightly / floor", [n.wall_s / f.wall_s for f, n in runs], "x"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--new-commits", type=int, default=100_000, help="offset commit records per new day")
    ap.add_argument("--work-dir", type=Path, default=None, help="default: a new temporary directory")
    ap.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)  # the floor's own process
    ap.add_argument("--bootstrap", default="", help=argparse.SUPPRESS)
    ap.add_argument("--ranges", default="[]", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.floor:
        return floor_main(args.work_dir, args.bootstrap, json.loads(args.ranges))

    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="bench-nightly-"))).resolve()
    shutil.rmtree(work / "data", ignore_errors=True)
    for log_name in ("nightly.log", "floor.log"):
        (work / log_name).unlink(missing_ok=True)
    broker, bootstrap = private_broker(work, PARTITIONS)
    try:
        job = Job(bootstrap, work / "data")
        job.start()
        job.run(SEED_CHECKPOINTS)
        nightly(work, bootstrap, "bench-seed")
        print(f"seeded: {SEED_CHECKPOINTS * PARTITIONS * PER_CHECKPOINT:,} sink rows; first nightly done")

        per_day = max(1, args.new_commits // PARTITIONS)
        new_day: list[tuple[Timed, Timed]] = []
        nothing_new: list[tuple[Timed, Timed]] = []
        for i in range(args.runs):
            floor_a = floor(work, bootstrap, [])
            night_a = nightly(work, bootstrap, f"bench-idle-{i}")
            print(
                f"run {i + 1} (a): {json.dumps({'floor': floor_a.out, 'steps': steps_of(night_a)})}",
                flush=True,
            )
            t0 = time.perf_counter()
            produced = job.run(per_day)
            made = time.perf_counter() - t0
            ranges = pending_ranges(work, bootstrap)
            floor_b = floor(work, bootstrap, ranges)
            night_b = nightly(work, bootstrap, f"bench-new-{i}")
            new_day.append((floor_b, night_b))
            nothing_new.append((floor_a, night_a))
            read = night_b.out["steps"][0]["summary"]["total"]["read"]
            print(
                f"run {i + 1}: {produced:,} commits made in {made:.0f}s, nightly read {read:,}; "
                f"(b) {night_b.wall_s:.1f}s / floor {floor_b.wall_s:.1f}s = "
                f"{night_b.wall_s / floor_b.wall_s:.2f}x; "
                f"(a) {night_a.wall_s:.1f}s / floor {floor_a.wall_s:.1f}s = "
                f"{night_a.wall_s / floor_a.wall_s:.2f}x",
                flush=True,
            )
        print()
        print(
            f"input: {PARTITIONS} partitions, seed {SEED_CHECKPOINTS} checkpoints; (b) adds "
            f"{per_day * PARTITIONS:,} offset commits, {per_day * PARTITIONS * 4:,} ledger rows and "
            f"{per_day * PARTITIONS * PER_CHECKPOINT:,} sink rows per run; {args.runs} runs, 2 shared cores"
        )
        print_case("a: nothing new since the last night", nothing_new)
        print_case(f"b: {per_day * PARTITIONS:,} new commits and a day of ledger", new_day)
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
