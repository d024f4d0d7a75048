"""Commit outage: what a real Flink job's Kafka source counts while its broker is away, and what
`flink-watch` writes of it.

    .venv/bin/python -m bench.flink_commit_outage [--down-s 40] [--stack 1.20] [--work-dir DIR]

1. A private single-node broker (its own data directory, stopped at the end), a topic of 2
   partitions with 100 records, and a real Flink job reading it (the Flink test tier's MiniCluster
   program, `KafkaSource`, parallelism 2, checkpoints every second, commits on checkpoint).
2. `offset-audit flink-watch --job-name ... --group-id ...` as a child process beside it, writing a
   Delta ledger.
3. Once the job read the records and completed 3 checkpoints, the broker is killed (SIGKILL) for
   --down-s seconds, then started again on the same ports and storage; the run ends when the
   source's commitsSucceeded rose after the outage (bounded wait).

Printed, every 4 s: the source's commitsFailed and commitsSucceeded (summed over subtasks, from
REST) and the job's completed checkpoints; then the sidecar's COMMIT_FAILED rows (the checkpoints
they were put on, the failures they count) and the COMMIT_FAILURE findings reconcile's rule makes
of the ledger (`commit_rules.commit_failures`).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from app.contracts import vocabulary as vocab
from app.demo.local_kafka import LocalKafka
from app.flink.rest import FlinkRest
from app.reconcile import findings as rc
from app.reconcile.ledger import audit as la
from app.reconcile.ledger import commit_rules
from app.runtime import jvm
from app.runtime.child_processes import parent_death_preexec
from tests.flink.harness import FlinkJob, JobSpec, compile_stack, wait_for
from tests.support.ledger_data import commits_table
from tests.support.streaming import create_topic, produce

ROOT = Path(__file__).resolve().parents[1]
JOB_NAME = "offset-audit-flink-test"  # what the test job runner names its job
GROUP = "outage-group"
SAMPLE_S = 4.0
RECOVERY_S = 180.0


def counters(rest: FlinkRest, job_id: str) -> tuple[int | None, int | None, int]:
    """(commitsFailed, commitsSucceeded, completed checkpoints) now."""
    completed = rest.checkpoints(job_id).completed_count
    metrics = rest.commit_metrics(job_id)
    counts = None if metrics is None else rest.commit_counts(job_id, metrics)
    if counts is None:
        return None, None, completed
    return counts.failed, counts.succeeded, completed


def sample_for(rest: FlinkRest, job_id: str, label: str, seconds: float) -> tuple[int | None, int | None]:
    started = time.monotonic()
    failed = succeeded = None
    while time.monotonic() - started < seconds:
        time.sleep(SAMPLE_S)
        failed, succeeded, completed = counters(rest, job_id)
        print(
            f"{label} {time.monotonic() - started:4.0f}s  commitsFailed {failed}  "
            f"commitsSucceeded {succeeded}  checkpoints completed {completed}",
            flush=True,
        )
    return failed, succeeded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--down-s", type=float, default=40.0)
    parser.add_argument("--stack", default="1.20", choices=("1.20", "2.2"))
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="flink-commit-outage-"))
    cache = Path("~/.cache/offset-audit").expanduser()
    broker = LocalKafka(
        work / "kafka", jvm.resolve_classpath("kafka"), offsets_partitions=1, die_with_parent=True
    )
    bootstrap = broker.start().bootstrap_servers
    job = FlinkJob(compile_stack(args.stack, cache), JobSpec(bootstrap, "orders", GROUP), work / "flink")
    ledger = work / "ledger"
    sidecar: subprocess.Popen[bytes] | None = None
    try:
        create_topic(bootstrap, "orders", 2)
        produce(bootstrap, "orders", 100, 2)
        argv_watch = [
            sys.executable, "-m", "app.cli", "flink-watch", "--rest", job.rest_url, "--job-name", JOB_NAME,
            "--job", "outage", "--group-id", GROUP, "--ledger", str(ledger), "--poll-interval", "0.5",
            "--wait", "300", "--json", "--set", f"kafka.bootstrap_servers={bootstrap}",
        ]  # fmt: skip
        with (work / "flink-watch.log").open("wb") as err:
            sidecar = subprocess.Popen(
                argv_watch, stdout=subprocess.PIPE, stderr=err, cwd=ROOT,
                preexec_fn=parent_death_preexec(signal.SIGKILL),
            )  # fmt: skip
        job.start()
        rest = FlinkRest(job.rest_url)
        job.wait_records_read(100)
        job.wait_checkpoints(3)
        print("before", counters(rest, job.job_id), flush=True)
        broker.kill()
        sample_for(rest, job.job_id, "down", args.down_s)
        broker.start()
        _, succeeded_after = sample_for(rest, job.job_id, "up", SAMPLE_S)

        def recovered() -> bool | None:
            failed, succeeded, _ = counters(rest, job.job_id)
            print(f"up  commitsFailed {failed}  commitsSucceeded {succeeded}", flush=True)
            return True if (succeeded or 0) > (succeeded_after or 0) else None

        wait_for(recovered, RECOVERY_S, "a commit succeeding after the outage", SAMPLE_S)
        sidecar.send_signal(signal.SIGTERM)
        summary = json.loads(sidecar.communicate(timeout=120)[0])
        job.cancel()
        report(ledger, summary)
    finally:
        if sidecar is not None and sidecar.poll() is None:
            sidecar.kill()
        job.stop()
        broker.stop()
    print(f"work dir: {work}")
    return 0


def report(ledger: Path, summary: dict[str, Any]) -> None:
    table = DeltaTable(str(ledger)).to_pyarrow_table()
    failed = [r for r in table.to_pylist() if r["event_type"] == vocab.EVENT_COMMIT_FAILED]
    by_checkpoint: dict[int, int] = {}
    for r in failed:
        by_checkpoint[r["checkpoint_id"]] = json.loads(r["detail"])[vocab.DETAIL_COMMITS_FAILED]
    recorded, missed = summary["checkpoints_recorded"], len(summary["missed"])
    print(
        f"sidecar: {recorded} checkpoints recorded, {missed} missed, {summary['failed_commits']} failed "
        f"commits counted, {summary['rest_requests']} REST requests"
    )
    counted = dict(sorted(by_checkpoint.items()))
    print(f"COMMIT_FAILED rows: {len(failed)}; checkpoint -> failures counted: {counted}")
    window = rc.AuditWindow(until=datetime.now(UTC) + timedelta(hours=1))
    found = commit_rules.commit_failures(
        la.LedgerAudit(
            table, commits_table(), window, rc.MatchRules(commit_match_window_s=60, clock_skew_s=1)
        )
    )
    for f in found:
        print(f"{f.finding_type} {f.severity} job {f.job_name} run {f.run_id} partition {f.partition}: "
              f"{f.record_count} events, error {f.evidence['error']}")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
