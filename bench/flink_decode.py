"""Benchmark: decoding Flink checkpoints in Python against Flink's State Processor API in a JVM.

    .venv/bin/python -m bench.flink_decode [--partitions 100,1000] [--stack 1.20] [--reads 200] [--passes 3]

1. A private single-node broker (its own data directory, stopped at the end) and, per size in
   --partitions, a topic of that many partitions with a few records each, read by a real Flink job
   (the Flink test tier's MiniCluster program, `KafkaSource`, parallelism 2, checkpoints every second,
   3 retained) until it has 3 completed checkpoints; a savepoint; the job cancelled (its checkpoints
   retained). The files: those checkpoints and the savepoint.
2. Python, warm: `read_checkpoint` over every file, --reads times each, in this process: files/s.
   Python, cold: a new interpreter that imports the decoder and reads one file (median of 3).
3. JVM: the State Processor API oracle (`SavepointReader`, the connector's own serializers) over the
   same files in one JVM, --passes times (`OracleLoop`): its first read (start-up included, whole
   process time for one file), and its steady pace (median read of the later passes), as files/s.
4. Both read the same files and must agree (on the last checkpoint and the savepoint).

Printed per size: the files' bytes, Python warm files/s and cold s, JVM cold s and warm files/s,
and the ratios, with the machine's load average, which a shared machine moves.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from app.demo.local_kafka import LocalKafka
from app.flink.metadata import read_checkpoint
from app.runtime import jvm
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec, compile_stack, oracle

LOOP_MAIN = "offsetaudit.flinktest.OracleLoop"
COLD_SCRIPT = "import sys; from app.flink.metadata import read_checkpoint; read_checkpoint(sys.argv[1])"


def produce(bootstrap: str, topic: str, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for i in range(1 + partition % 3):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    if producer.flush(60) != 0:
        raise RuntimeError("records were not delivered")


def checkpoint_files(stack: FlinkStack, bootstrap: str, partitions: int, work: Path) -> list[Path]:
    """A real job's 3 retained checkpoints and a savepoint of a `partitions`-partition topic."""
    topic = f"bench-flink-decode-{partitions}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(120)
    produce(bootstrap, topic, partitions)
    job = FlinkJob(stack, JobSpec(bootstrap, topic, f"{topic}-group"), work / f"job-{partitions}").start()
    try:
        job.wait_checkpoints(3)
        savepoint = job.savepoint()
        job.cancel()
    finally:
        job.stop()
    return [*job.retained()[-3:], savepoint]


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir())


def python_warm(files: list[Path], reads: int) -> float:
    """Files per second, in this process."""
    for f in files:
        read_checkpoint(str(f))
    start = time.perf_counter()
    for _ in range(reads):
        for f in files:
            read_checkpoint(str(f))
    return reads * len(files) / (time.perf_counter() - start)


def python_cold(path: Path) -> float:
    """Seconds for a new interpreter to import the decoder and read one file (median of 3)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    times = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", COLD_SCRIPT, str(path)], check=True, env=env)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def jvm_reads(stack: FlinkStack, files: list[Path], passes: int) -> tuple[float, float]:
    """(seconds of a JVM reading one file, start-up included; the JVM's warm files/s)."""
    start = time.perf_counter()
    subprocess.run(stack.java_cmd(LOOP_MAIN, ["1", str(files[0])]), check=True, capture_output=True)
    cold = time.perf_counter() - start
    proc = subprocess.run(
        stack.java_cmd(LOOP_MAIN, [str(passes), *map(str, files)]), check=True, capture_output=True, text=True
    )
    reads = [line.split() for line in proc.stdout.splitlines() if line.startswith("read ")]
    warm_ms = [float(r[3]) for r in reads if int(r[1]) > 0]
    return cold, 1000.0 / statistics.median(warm_ms)


def check_agreement(stack: FlinkStack, files: list[Path]) -> None:
    for f in files[-2:]:  # the last checkpoint and the savepoint
        got = read_checkpoint(str(f))
        read = oracle(stack, f)
        mine = sorted((o.topic, o.partition, o.raw_offset) for o in got.offsets)
        theirs = sorted((o["topic"], o["partition"], o["raw_offset"]) for o in read["offsets"])
        if mine != theirs or got.checkpoint_id != read["checkpoint_id"]:
            raise AssertionError(f"the decoder and the State Processor API disagree on {f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="100,1000", help="comma-separated source sizes")
    parser.add_argument("--stack", default="1.20", choices=("1.20", "2.2"))
    parser.add_argument("--reads", type=int, default=200, help="Python reads of each file")
    parser.add_argument("--passes", type=int, default=3, help="JVM passes over the files")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-flink-decode-"))
    work.mkdir(parents=True, exist_ok=True)
    stack = compile_stack(args.stack, jvm.default_cache_dir())
    broker = LocalKafka(work / "kafka", jvm.resolve_classpath("kafka"), heap="512m", die_with_parent=True)
    shutil.rmtree(broker.data_dir, ignore_errors=True)
    bootstrap = broker.start().bootstrap_servers
    rows = []
    try:
        for partitions in (int(p) for p in args.partitions.split(",")):
            files = checkpoint_files(stack, bootstrap, partitions, work)
            check_agreement(stack, files)
            warm = python_warm(files, args.reads)
            cold = python_cold(files[-1])
            jvm_cold, jvm_warm = jvm_reads(stack, files, args.passes)
            rows.append(
                (
                    partitions,
                    len(files),
                    statistics.median(map(size_of, files)),
                    warm,
                    cold,
                    jvm_cold,
                    jvm_warm,
                )
            )
    finally:
        broker.stop()
    print(f"Flink {args.stack}, KafkaSource, parallelism 2; load average {os.getloadavg()}")
    print("partitions files  bytes/file  py warm f/s  py cold s  jvm cold s  jvm warm f/s  warm x  cold x")
    for n, k, size, warm, cold, jvm_cold, jvm_warm in rows:
        print(
            f"{n:>10} {k:>5} {size:>11.0f} {warm:>12.1f} {cold:>10.3f} {jvm_cold:>11.2f}"
            f" {jvm_warm:>13.2f} {warm / jvm_warm:>7.1f} {jvm_cold / cold:>7.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
