"""Time to detect: how long after a restart from `latest` that skips records `watch` knows and tells.

    .venv/bin/python -m bench.detect [--injections 5] [--interval 30] [--idle-s 300] [--work-dir DIR]
                                     [--engine spark|flink] [--spread]

1. A private single-node broker (its own data directory, stopped at the end), a topic of 3
   partitions fed by a producer at --rate records/s, the reference job (`offset-audit stream`, its
   own process) reading it from earliest, and `offset-audit watch --interval N` (its own process)
   with its webhook pointed at a local HTTP server that records when each POST arrives.
2. Each injection stops the job (SIGTERM, a clean stop) while the producer goes on, waits
   --down-s seconds (the records produced then are what the restart skips), deletes the job's
   checkpoint and starts it again with `stream.startup_mode=latest`. From the restarted run's first
   CHECKPOINT_COMPLETED in the ledger (its event time) it measures (a) the first sight of the loss
   in the incidents table (polled every --poll-s seconds: an incident row with records lost that
   was not there before, new or changed) and (b) the first webhook POST that opens or changes an
   incident with records lost (received time). p50 / p95 over the injections.
3. Idle: the job and the producer stopped, watch's CPU time (its process and its Spark driver JVM,
   from /proc) over --idle-s seconds of wall time, as a share of one core.
4. Resident memory of watch and its JVM, sampled every cycle over the whole run: first, last,
   max and the first and last quarters' medians (their ratio says whether the level grows).

With ``--engine flink`` the job is a real Flink job instead (Flink 1.20's `KafkaSource` in a
MiniCluster JVM, checkpoints every second, 3 retained, as tests/flink/ run it), followed by the watch
itself (config `watch.flink_jobs`, no `flink-watch` beside it): each injection cancels it, waits
--down-s seconds and resubmits it without state from `latest`, and the clock starts at the resubmitted
job's first CHECKPOINT_COMPLETED in the ledger (Flink's trigger time). Its output is discarded (sink
mode `none`): the loss is read back from the source.

The figures are printed with the input (records produced, injections, interval) and the machine's
load average, which a shared machine moves.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import DeltaTable

from app.demo.local_kafka import LocalKafka
from app.runtime import jvm
from tests.flink.harness import FlinkJob, JobSpec, compile_stack
from tests.flink.watching import FLINK_JOB_NAME

TOPIC, GROUP, JOB = "orders", "bench-detect-orders", "bench-detect-job"
PARTITIONS = 3
T = TypeVar("T")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# --- processes -----------------------------------------------------------------------------------


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the Spark driver JVM is a child of the Python process)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
    tree, frontier = [pid], [pid]
    while frontier:
        children = [c for c, p in parents.items() if p in frontier]
        tree += children
        frontier = children
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the tree, in seconds."""
    total = 0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / CLOCK_TICKS


def rss_mb(pid: int) -> float:
    total = 0
    for p in process_tree(pid):
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1])
        except OSError:
            continue
    return total * PAGE / 1e6


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str, step_s: float = 0.5) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(step_s)


class Webhook:
    """A local HTTP server that keeps each POST's JSON body with the wall time it arrived."""

    def __init__(self) -> None:
        self.received: list[tuple[float, dict[str, Any]]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"


class Feed:
    """A producer at a steady rate on its own thread, until stopped."""

    def __init__(self, bootstrap: str, rate: float) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.rate = rate
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            for _ in range(int(self.rate)):
                self.producer.produce(
                    TOPIC, value=f"record-{self.sent}".encode(), partition=self.sent % PARTITIONS
                )
                self.sent += 1
            self.producer.poll(0)
        self.producer.flush(30)


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, bootstrap: str, webhook: Webhook) -> None:
        self.args = args
        self.work = work
        self.data = work / "data"
        self.bootstrap = bootstrap
        self.webhook = webhook
        self.settings = [
            f"paths.data_dir={self.data}",
            f"kafka.bootstrap_servers={bootstrap}",
            f"stream.topics=[{TOPIC}]",
            f"stream.group_id={GROUP}",
            f"stream.job_name={JOB}",
            "stream.trigger_interval=1 second",
            f"ingest.groups=[{GROUP}]",
        ]
        self.rss: list[tuple[float, float]] = []  # (seconds since watch started, MB)

    def start(
        self, command: str, args: list[str], settings: list[str], log_name: str
    ) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "app.cli", command, *args]
        for item in settings:
            argv += ["--set", item]
        with (self.work / log_name).open("ab") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def start_job(self, run_id: str, mode: str) -> subprocess.Popen[bytes]:
        settings = [*self.settings, f"stream.startup_mode={mode}"]
        return self.start("stream", ["--run-id", run_id], settings, "job.log")

    def first_completion(self, run_id: str) -> datetime | None:
        done = self.completions(run_id)
        return done[0] if done else None

    def completions(self, run_id: str) -> list[datetime]:
        path = self.data / "tables" / "ledger"
        if not (path / "_delta_log").exists():
            return []
        rows = DeltaTable(str(path)).to_pyarrow_table(
            columns=["event_time"],
            filters=[("run_id", "=", run_id), ("event_type", "=", "CHECKPOINT_COMPLETED")],
        )
        return sorted(rows.column("event_time").to_pylist())

    def loss_incidents(self) -> set[tuple[str, int, tuple[str, ...]]]:
        """Each incident with records lost, as (id, records lost, finding ids). A later loss may
        land in an incident that exists already (its impact and findings change), so a new loss is
        a new member of this set, not only a new incident id."""
        path = self.data / "tables" / "incidents"
        if not (path / "_delta_log").exists():
            return set()
        columns = ["incident_id", "records_lost", "finding_ids"]
        rows = DeltaTable(str(path)).to_pyarrow_table(columns=columns).to_pylist()
        return {
            (r["incident_id"], int(r["records_lost"]), tuple(sorted(r["finding_ids"] or ())))
            for r in rows
            if r["records_lost"]
        }

    def stop_job(self, job: subprocess.Popen[bytes]) -> None:
        job.send_signal(signal.SIGTERM)
        if job.wait(300) != 0:
            raise RuntimeError(f"the job exited {job.returncode}; see {self.work / 'job.log'}")

    def sample_rss(self, watch: subprocess.Popen[bytes], started: float) -> None:
        self.rss.append((time.monotonic() - started, rss_mb(watch.pid)))

    def inject(
        self, number: int, engine: SparkEngine | FlinkEngine, watch: subprocess.Popen[bytes], started: float
    ) -> tuple[float, float]:
        """One restart from latest; (seconds to the incident row, seconds to the POST)."""
        if self.args.spread:
            # Each injection follows the previous one's detection, which a cycle made: without a
            # random wait every restart lands at the same moment of a cycle.
            time.sleep(random.uniform(0.0, self.args.interval))
        known = self.loss_incidents()
        posts_before = len(self.webhook.received)
        run_id = engine.restart_from_latest(number)
        first = wait_for(lambda: self.first_completion(run_id), 600, f"a checkpoint of {run_id}")
        t0 = first.timestamp()
        row_at: float | None = None
        post_at: float | None = None
        deadline = time.monotonic() + 600
        while row_at is None or post_at is None:
            if watch.poll() is not None:
                raise RuntimeError(f"watch ended ({watch.returncode}); see {self.work / 'watch.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"injection {number}: not detected within 600s")
            now = time.time()
            if row_at is None and self.loss_incidents() - known:
                row_at = now
            if post_at is None:
                for at, body in self.webhook.received[posts_before:]:
                    if any(i["impact"]["records_lost"] for i in body["opened"] + body["changed"]):
                        post_at = at
                        break
            if not self.rss or time.monotonic() - started - self.rss[-1][0] >= self.args.interval:
                self.sample_rss(watch, started)
            time.sleep(self.args.poll_s)
        return row_at - t0, post_at - t0


class SparkEngine:
    """The reference job (`offset-audit stream`), restarted from `latest` without its checkpoint."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.job: subprocess.Popen[bytes] | None = None

    def settings(self) -> list[str]:
        return []

    def start(self) -> str:
        self.job = self.bench.start_job("initial", "earliest")
        return "initial"

    def stop(self) -> None:
        if self.job is not None:
            self.bench.stop_job(self.job)
            self.job = None

    def restart_from_latest(self, number: int) -> str:
        self.stop()
        time.sleep(self.bench.args.down_s)  # downtime on purpose: the records produced now are skipped
        shutil.rmtree(self.bench.data / "checkpoints" / JOB)
        run_id = f"inject-{number}"
        self.job = self.bench.start_job(run_id, "latest")
        return run_id

    def kill(self) -> None:
        if self.job is not None and self.job.poll() is None:
            self.job.send_signal(signal.SIGTERM)
            try:
                self.job.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.job.pid, signal.SIGKILL)


class FlinkEngine:
    """A Flink 1.20 `KafkaSource` job that the watch follows (`watch.flink_jobs`), cancelled and
    resubmitted without state from `latest`, its REST API on the same port each time."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.stack = compile_stack("1.20", jvm.default_cache_dir())
        self.spec = JobSpec(bench.bootstrap, TOPIC, GROUP, start="earliest")
        self.job = FlinkJob(self.stack, self.spec, bench.work / "flink")

    def settings(self) -> list[str]:
        followed = {
            "rest": self.job.rest_url,
            "job_name": FLINK_JOB_NAME,
            "job": JOB,
            "group_id": GROUP,
            "starting_offsets_key": "start",
        }
        return [
            f"watch.flink_jobs=[{json.dumps(followed)}]",
            f"reconcile.jobs=[{JOB}]",
            f"reconcile.sink_mode_by_job.{JOB}=none",
        ]

    def start(self) -> str:
        self.job.start()
        return self.job.job_id

    def stop(self) -> None:
        self.job.cancel()

    def restart_from_latest(self, _number: int) -> str:
        self.job.cancel()
        time.sleep(self.bench.args.down_s)  # downtime on purpose: the records produced now are skipped
        again = FlinkJob(self.stack, replace(self.spec, start="latest"), self.job.work_dir)
        again.port, again.rest_url = self.job.port, self.job.rest_url  # where the watch asks
        self.job = again.start()
        return self.job.job_id

    def kill(self) -> None:
        self.job.stop()


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` of the values at or below it (of 5
    values, p95 is the largest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def rss_trend(samples: list[tuple[float, float]]) -> dict[str, float]:
    """Whether memory grows, as a figure: the median RSS of the first and of the last quarter of the
    samples (time order) and their ratio. A JVM's heap grows and is collected in a sawtooth, so a
    single first/last pair says little; quarter medians over an hour say whether the level moves."""
    values = [mb for _, mb in samples]
    quarter = max(1, len(values) // 4)
    first, last = statistics.median(values[:quarter]), statistics.median(values[-quarter:])
    return {
        "first_quarter_median": round(first),
        "last_quarter_median": round(last),
        "last_over_first": round(last / first, 3) if first else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--injections", type=int, default=5)
    parser.add_argument("--interval", type=float, default=30.0, help="watch --interval")
    parser.add_argument("--idle-s", type=float, default=300.0, help="idle wall time for the CPU figure")
    parser.add_argument("--rate", type=float, default=30.0, help="records per second produced")
    parser.add_argument("--down-s", type=float, default=5.0, help="job downtime per injection")
    parser.add_argument("--poll-s", type=float, default=1.0, help="how often the incidents table is polled")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument(
        "--spread",
        action="store_true",
        help="wait a random 0..--interval seconds before each injection: restarts land anywhere in a cycle",
    )
    parser.add_argument(
        "--engine", choices=("spark", "flink"), default="spark", help="the job restarted: Spark's or Flink's"
    )
    args = parser.parse_args(argv)

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-detect-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = LocalKafka(work / "kafka", jvm.resolve_classpath("kafka"), heap="512m", die_with_parent=True)
    shutil.rmtree(broker.data_dir, ignore_errors=True)
    bootstrap = broker.start().bootstrap_servers
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    engine: SparkEngine | FlinkEngine | None = None
    watch = None
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a collected client fails its futures
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(120)
        webhook = Webhook()
        bench = Bench(args, work, bootstrap, webhook)
        feed = Feed(bootstrap, args.rate)
        feed.thread.start()
        engine = FlinkEngine(bench) if args.engine == "flink" else SparkEngine(bench)
        watch_settings = [*bench.settings, *engine.settings(), f"alerts.webhook_url={webhook.url}"]
        if args.engine == "flink":
            # The watch first, so its follower reads the job's checkpoints from the first one on.
            watch = bench.start("watch", ["--interval", str(args.interval)], watch_settings, "watch.log")
        initial = engine.start()
        wait_for(lambda: bench.first_completion(initial), 600, "the job's first checkpoint")
        if watch is None:
            watch = bench.start("watch", ["--interval", str(args.interval)], watch_settings, "watch.log")
        started = time.monotonic()
        wait_for(
            lambda: True if re.search(r"^cycle 1 \S+ ok: ", (work / "watch.log").read_text(), re.M) else None,
            600,
            "watch's first cycle",
        )
        bench.sample_rss(watch, started)
        to_row, to_post = [], []
        for number in range(1, args.injections + 1):
            row_s, post_s = bench.inject(number, engine, watch, started)
            to_row.append(row_s)
            to_post.append(post_s)
            print(f"injection {number}: incident row {row_s:.1f}s, webhook POST {post_s:.1f}s", flush=True)
        engine.stop()
        engine = None
        feed.stop.set()
        feed.thread.join(60)
        # Idle: nothing new arrives; watch keeps cycling.
        cpu_before, wall_before = cpu_seconds(watch.pid), time.monotonic()
        while time.monotonic() - wall_before < args.idle_s:
            time.sleep(min(args.interval, args.idle_s - (time.monotonic() - wall_before)))
            bench.sample_rss(watch, started)
        idle_cpu = (cpu_seconds(watch.pid) - cpu_before) / (time.monotonic() - wall_before)
        cycles = len(re.findall(r"^cycle \d+ \S+ ok: ", (work / "watch.log").read_text(), re.M))
        result = {
            "input": {
                "records_produced": feed.sent,
                "partitions": PARTITIONS,
                "rate_per_s": args.rate,
                "engine": args.engine,
                "injections": args.injections,
                "interval_s": args.interval,
                "down_s": args.down_s,
                "spread": args.spread,
                "watch_cycles_ok": cycles,
            },
            "to_incident_row_s": {
                "each": [round(v, 1) for v in to_row],
                "p50": round(statistics.median(to_row), 1),
                "p95": round(percentile(to_row, 0.95), 1),
            },
            "to_webhook_post_s": {
                "each": [round(v, 1) for v in to_post],
                "p50": round(statistics.median(to_post), 1),
                "p95": round(percentile(to_post, 0.95), 1),
            },
            "p95_target_s": 90,
            "p95_post_over_interval": round(percentile(to_post, 0.95) / args.interval, 2),
            "idle_cpu_share_of_one_core": round(idle_cpu, 4),
            "idle_s": args.idle_s,
            "rss_mb": {
                "first": round(bench.rss[0][1]),
                "last": round(bench.rss[-1][1]),
                "samples": len(bench.rss),
                "over_s": round(bench.rss[-1][0]),
                "max": round(max(m for _, m in bench.rss)),
                **rss_trend(bench.rss),
            },
            "load_average": os.getloadavg(),
            "cpus": os.cpu_count(),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        print(json.dumps(result, indent=2))
        return 0
    finally:
        if engine is not None:
            engine.kill()
        if watch is not None and watch.poll() is None:
            watch.send_signal(signal.SIGTERM)
            try:
                watch.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(watch.pid, signal.SIGKILL)
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
