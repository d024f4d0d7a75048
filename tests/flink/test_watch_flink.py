"""`offset-audit watch` following a real Flink job (a MiniCluster JVM, `KafkaSource`) on the real
broker: no `flink-watch` beside it, the watch's own follower brings the job's checkpoints into the
ledger. The job reads what is there, is cancelled while more records arrive and is started again
without state from `latest`: a cycle finds the restart skip, the incidents table holds it with its
records lost and the webhook is POSTed it once; SIGTERM stops the watch and its follower, exit 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from app.config import load_config
from app.contracts.tables import INCIDENTS_SCHEMA
from app.incidents.incident import StoredIncident
from app.storage.tables import tables_from_config
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec, wait_for
from tests.flink.watching import (
    FLINK_JOB_NAME,
    Processes,
    completions,
    processes,  # noqa: F401 (a fixture)
    restart_on_same_port,
    wait_recorded,
)
from tests.kafka.processes import cli
from tests.support.http_server import Request, recording_server
from tests.support.streaming import create_topic, produce
from tests.support.watch_cycles import CYCLE_TIMEOUT_S, lost_posts, ok_cycles, wait_cycles

pytestmark = [pytest.mark.flink, pytest.mark.kafka]

JOB = "flink-watched"
PARTITIONS = 2
BEFORE, DOWN = 50, 25  # per partition: read by the first run, skipped by the restart from latest


def settings(bootstrap: str, job: FlinkJob, group: str, url: str) -> list[str]:
    """The watch's `--set`s: the Flink job followed by name, its startup mode from the job parameter
    `start` (what the test job publishes), its group ingested, its output in no table (sink mode
    `none`), the webhook."""
    followed = {
        "rest": job.rest_url,
        "job_name": FLINK_JOB_NAME,
        "job": JOB,
        "group_id": group,
        "poll_s": 0.5,
        "starting_offsets_key": "start",
    }
    return [
        f"kafka.bootstrap_servers={bootstrap}",
        f"watch.flink_jobs=[{json.dumps(followed)}]",
        f"ingest.groups=[{group}]",
        f"reconcile.jobs=[{JOB}]",
        f"reconcile.sink_mode_by_job.{JOB}=none",
        f"alerts.webhook_url={url}/hook",
    ]


@pytest.fixture
def watch_process() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)


def start_watch(data_dir: Path, overrides: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    argv = cli("watch", data_dir, *overrides, args=("--interval", "5", "--log-level", "INFO"))
    with log_path.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def incidents(path: str) -> list[StoredIncident]:
    if not (Path(path) / "_delta_log").is_dir():
        return []
    rows = DeltaTable(path).to_pyarrow_table(columns=INCIDENTS_SCHEMA.fieldNames()).to_pylist()
    return [StoredIncident.from_row(r) for r in rows]


def test_watch_follows_a_flink_job_and_alerts_a_restart_from_latest_that_skipped_records(
    bootstrap: str,
    unique: str,
    tmp_path: Path,
    flink_stacks: Callable[[str], FlinkStack],
    processes: Processes,  # noqa: F811
    watch_process: list[subprocess.Popen[bytes]],
) -> None:
    jobs, _ = processes
    topic, group = f"flink-watched-{unique}", f"flink-watched-{unique}-group"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, BEFORE * PARTITIONS, PARTITIONS)
    spec = JobSpec(bootstrap, topic, group)
    job = FlinkJob(flink_stacks("1.20"), spec, tmp_path / "flink", on_start=jobs.append)
    log = tmp_path / "watch.log"

    with recording_server() as (url, received):
        overrides = settings(bootstrap, job, group, url)
        cfg = load_config("local", overrides=[f"paths.data_dir={tmp_path}", *overrides], environ={})
        tables = tables_from_config(cfg)
        ledger = Path(tables.ledger)
        watch = start_watch(tmp_path, overrides, log)
        watch_process.append(watch)
        job.start()

        # The watch alone brings the job's checkpoints into the ledger (nothing else follows it).
        job.wait_records_read(BEFORE * PARTITIONS)
        reached = job.checkpoint_after_now()
        wait_recorded(ledger, job.job_id, {int(reached["id"])})
        assert completions(ledger)[str(job.checkpoint_path(reached))] == {0: BEFORE, 1: BEFORE}
        wait_cycles(watch, log, ok_cycles(log) + 1)
        job.cancel()

        # Records arrive while the job is down; it starts again from the end of the log.
        produce(bootstrap, topic, DOWN * PARTITIONS, PARTITIONS, start=BEFORE * PARTITIONS)
        second = restart_on_same_port(job, None, replace(spec, start="latest"))

        def loss_alert() -> dict[str, Any] | None:
            assert watch.poll() is None, log.read_text()[-4000:]
            for payload in (json.loads(r.body) for r in list(received)):
                for incident in payload["opened"] + payload["changed"]:
                    if incident["impact"]["records_lost"]:
                        return dict(incident)
            return None

        alerted = wait_for(loss_alert, CYCLE_TIMEOUT_S, "the webhook POST of the skipped records", 0.5)
        assert alerted["impact"]["records_lost"] == DOWN * PARTITIONS
        assert alerted["severity"] == "critical"
        stored = {i.incident_id: i for i in incidents(tables.incidents)}
        assert stored[alerted["incident_id"]].impact.records_lost == DOWN * PARTITIONS
        assert stored[alerted["incident_id"]].job_name == JOB
        # The restart judged is the Flink job's new attempt, whose run id starts with its job id.
        assert any(r.startswith(second.job_id) for r in stored[alerted["incident_id"]].run_ids), stored

        # Later cycles alert it no more.
        wait_cycles(watch, log, ok_cycles(log) + 2)
        assert len(lost_posts(received, alerted["incident_id"])) == 1
        posts: list[Request] = list(received)
        assert all(r.method == "POST" for r in posts)

        watch.send_signal(signal.SIGTERM)
        assert watch.wait(120) == 0, log.read_text()[-4000:]
        second.cancel()
    text = log.read_text()
    assert "following Flink job flink-watched" in text
    assert "stopped by signal 15 between cycles" in text
