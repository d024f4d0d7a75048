"""Capture: how many of a running Flink job's completed checkpoints `flink-watch` gets into the ledger.

    .venv/bin/python -m bench.flink_capture [--minutes 10] [--retained 3] [--interval-ms 1000]
        [--stack 1.20] [--rate 100] [--poll-interval 1] [--work-dir DIR]

1. A private single-node broker (its own data directory, stopped at the end), a topic of 3
   partitions fed by a producer at --rate records/s, and a real Flink job reading it (the Flink test
   tier's MiniCluster program, `KafkaSource`, parallelism 2, checkpoints every --interval-ms,
   `execution.checkpointing.num-retained` --retained, commits on checkpoint).
2. `offset-audit flink-watch --job-name` as a child process beside it, started before the job (as a
   sidecar deployed with its JobManager, `--wait`ing for the REST API), writing a Delta ledger. It
   reaches the REST API through a counting proxy in this process, which timestamps every request.
3. The job's own record of its completed checkpoints: this process samples the JobManager's
   `/jobs/:id/checkpoints` every --sample-s seconds and keeps the union of the COMPLETED ids of its
   history (the last 10 checkpoints, so a sample every 2 s at a 1 s interval overlaps the previous
   one). The record is complete when the union's size equals the job's own `counts.completed` at
   the last sample; the bench says whether it is.
4. After --minutes, once the ledger reaches the record's last id (bounded wait), the sidecar is
   stopped (SIGTERM) and prints its summary (`--json`: the checkpoints it recorded, those it missed
   with the reason); then the job is cancelled. The ledger's CHECKPOINT_COMPLETED ids are compared
   with the record.

Printed: checkpoints completed, captured in the ledger (count and %), missed with their reasons (as
the sidecar recorded them; a miss it did not record is "unaccounted"), the sidecar's REST requests
per second (the proxy's count from its first request to the end of the run, and the busiest 10 s by
arrival at the proxy, where a request delayed on a loaded machine can land beside the next one), its
CPU share of one core (its process tree, from /proc), the Flink process's CPU share, and the load
average sampled over the run, which a shared machine moves.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import DeltaTable

from app.contracts import vocabulary as vocab
from app.demo.local_kafka import LocalKafka
from app.runtime import jvm
from app.runtime.child_processes import parent_death_preexec
from bench.detect import cpu_seconds
from tests.flink.harness import FlinkJob, JobSpec, compile_stack

ROOT = Path(__file__).resolve().parent.parent
TOPIC, GROUP, JOB = "bench-flink-capture", "bench-flink-capture-group", "bench-flink-capture"
PARTITIONS = 3
FLINK_JOB_NAME = "offset-audit-flink-test"  # what the test tier's job runner names its job
SIDECAR_EXIT_S = 60.0
LEDGER_CATCH_UP_S = 60.0


class CountingProxy:
    """Forwards GETs to the JobManager's REST API and keeps each request's arrival time."""

    def __init__(self, upstream: str) -> None:
        self.times: list[float] = []
        times = self.times

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                times.append(time.monotonic())
                try:
                    with urllib.request.urlopen(upstream + self.path, timeout=10) as response:
                        status, body = response.status, response.read()
                except urllib.error.HTTPError as exc:
                    status, body = exc.code, exc.read()
                except OSError:
                    status, body = 502, b"{}"
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def rates(self, until: float) -> tuple[int, float, float]:
        """(requests, per second from the first to `until`, per second in the busiest 10 s)."""
        done = [t for t in self.times if t <= until]
        if not done:
            return 0, 0.0, 0.0
        busiest = max(sum(1 for u in done if t <= u < t + 10) for t in done)
        return len(done), len(done) / max(until - done[0], 1e-9), busiest / 10


class Feeder(threading.Thread):
    """Produces about `rate` records a second, round robin over the partitions, until stopped."""

    def __init__(self, bootstrap: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        self.rate = rate
        self.sent = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopped.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due:
                self.producer.produce(TOPIC, value=str(self.sent).encode(), partition=self.sent % PARTITIONS)
                self.sent += 1
            self.producer.poll(0)
            self.stopped.wait(0.05)  # pacing, not synchronisation
        self.producer.flush(60)
        del self.producer  # no client left reconnecting to the stopped broker


class Record:
    """The job's completed checkpoint ids, from its REST history sampled often enough to overlap."""

    def __init__(self, job: FlinkJob) -> None:
        self.job = job
        self.completed: set[int] = set()
        self.counted = 0  # the job's own counts.completed at the last sample
        self.samples = 0
        self.failed_samples = 0
        self.loads: list[float] = []

    def sample(self) -> None:
        try:
            stats = self.job.checkpoints()
        except (OSError, ValueError):
            self.failed_samples += 1
            return
        self.samples += 1
        self.counted = int(stats["counts"]["completed"])
        for c in stats.get("history", []):
            if c["status"] == "COMPLETED" and not c.get("is_savepoint"):
                self.completed.add(int(c["id"]))
        self.loads.append(os.getloadavg()[0])


def ledger_completions(ledger: Path) -> set[int]:
    if not (ledger / "_delta_log").is_dir():
        return set()
    rows = DeltaTable(str(ledger)).to_pyarrow_table(columns=["event_type", "checkpoint_id"]).to_pylist()
    return {int(r["checkpoint_id"]) for r in rows if r["event_type"] == vocab.EVENT_CHECKPOINT_COMPLETED}


def start_sidecar(rest: str, ledger: Path, poll_s: float, log: Path) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "app.cli", "flink-watch", "--rest", rest, "--job-name", FLINK_JOB_NAME,
        "--job", JOB, "--group-id", GROUP, "--ledger", str(ledger), "--poll-interval", str(poll_s),
        "--wait", "300", "--json",
    ]  # fmt: skip
    with log.open("wb") as err:
        return subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=parent_death_preexec(signal.SIGKILL),
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--retained", type=int, default=3, help="execution.checkpointing.num-retained")
    parser.add_argument("--interval-ms", type=int, default=1000, help="the job's checkpoint interval")
    parser.add_argument("--stack", default="1.20", choices=("1.20", "2.2"))
    parser.add_argument("--rate", type=int, default=100, help="records produced per second")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="the sidecar's --poll-interval")
    parser.add_argument(
        "--sample-s", type=float, default=2.0, help="seconds between two samples of the record"
    )
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-flink-capture-"))
    work.mkdir(parents=True, exist_ok=True)
    ledger = work / "ledger"
    stack = compile_stack(args.stack, jvm.default_cache_dir())
    broker = LocalKafka(work / "kafka", jvm.resolve_classpath("kafka"), heap="512m", die_with_parent=True)
    shutil.rmtree(broker.data_dir, ignore_errors=True)
    bootstrap = broker.start().bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its future resolves
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(120)
    feeder = Feeder(bootstrap, args.rate)
    spec = JobSpec(bootstrap, TOPIC, GROUP, num_retained=args.retained, interval_ms=args.interval_ms)
    job = FlinkJob(stack, spec, work / "flink")
    proxy = CountingProxy(job.rest_url)  # the job's REST port is chosen before it starts
    sidecar = start_sidecar(proxy.url, ledger, args.poll_interval, work / "flink-watch.log")
    try:
        job.start()
        feeder.start()
        record = Record(job)
        started = time.monotonic()
        job_cpu0, side_cpu0 = cpu_seconds(job.pid), cpu_seconds(sidecar.pid)
        end = started + args.minutes * 60
        while time.monotonic() < end:
            if sidecar.poll() is not None:
                raise RuntimeError(f"flink-watch exited early: {(work / 'flink-watch.log').read_text()}")
            record.sample()
            time.sleep(args.sample_s)  # the sampling cadence, not synchronisation
        record.sample()
        wall = time.monotonic() - started
        side_cpu, job_cpu = cpu_seconds(sidecar.pid) - side_cpu0, cpu_seconds(job.pid) - job_cpu0
        requests, rate, busiest = proxy.rates(time.monotonic())
        # The sidecar trails the job by up to a poll: let it reach the record's last id, then stop it.
        last = max(record.completed, default=0)
        deadline = time.monotonic() + LEDGER_CATCH_UP_S
        while max(ledger_completions(ledger), default=0) < last and time.monotonic() < deadline:
            time.sleep(1.0)  # polling the ledger against a deadline
        sidecar.send_signal(signal.SIGTERM)
        out, _ = sidecar.communicate(timeout=SIDECAR_EXIT_S)
        summary: dict[str, Any] = json.loads(out)
        job.cancel()
    finally:
        feeder.stopped.set()
        if feeder.is_alive():
            feeder.join(60)
        if sidecar.poll() is None:
            sidecar.kill()
        job.stop()
        proxy.server.shutdown()
        broker.stop()

    recorded = ledger_completions(ledger)
    completed = record.completed
    captured = completed & recorded
    reasons = {int(m["id"]): str(m[vocab.DETAIL_REASON]) for m in summary["missed"]}
    missed = sorted(completed - recorded)
    why = Counter(reasons.get(i, "unaccounted") for i in missed)
    share = 100.0 * len(captured) / len(completed) if completed else 0.0
    loads = sorted(record.loads)
    print(
        f"Flink {args.stack}, KafkaSource, parallelism 2, checkpoints every {args.interval_ms} ms, "
        f"num-retained {args.retained}; {args.rate} records/s over {PARTITIONS} partitions "
        f"({feeder.sent} produced); flink-watch --poll-interval {args.poll_interval}; {wall / 60:.1f} min"
    )
    print(
        f"record: {len(completed)} completed ids from {record.samples} REST samples "
        f"({record.failed_samples} failed); the job counted {record.counted}: "
        + ("complete" if len(completed) == record.counted else "INCOMPLETE")
    )
    print(f"checkpoints completed      {len(completed)}")
    print(f"captured in the ledger     {len(captured)} ({share:.2f}%)")
    print(f"missed                     {len(missed)} {dict(why)} ids {missed[:20]}")
    print(f"ledger ids beyond record   {len(recorded - completed)} (completed after the last sample)")
    print(
        f"sidecar                    {requests} REST requests, {rate:.2f}/s (busiest 10 s: {busiest:.2f}/s; "
        f"its own count {summary['rest_requests']}); CPU {100 * side_cpu / wall:.1f}% of one core; "
        f"{summary['checkpoints_recorded']} recorded, {summary['events_written']} events"
    )
    print(f"Flink process              CPU {100 * job_cpu / wall:.1f}% of one core")
    if loads:
        print(
            f"load average (1 min)       min {loads[0]:.2f} median {loads[len(loads) // 2]:.2f} "
            f"max {loads[-1]:.2f} on {os.cpu_count()} cores"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
