"""`offset-audit watch` over the reference job on the real broker, Spark and Delta.

One watch follows a job that runs cleanly, then is restarted from `latest` without its checkpoint
(skipping what arrived while it was down): a cycle finds the incident and POSTs it to the webhook
once, and the cycles after it do not again. The watch is then killed (SIGKILL) in the middle of a
cycle and started again: the windows of its successful cycles still follow one another without a
hole, the findings and incidents are those it had, nothing is alerted a second time, and the
completeness windows tile each partition's offsets with the skipped records lost once. SIGTERM
then stops it between cycles with exit code 0.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from app.alerts.incidents import fingerprint
from app.config import AppConfig
from app.contracts.tables import INCIDENTS_SCHEMA
from app.incidents.incident import StoredIncident
from app.storage.tables import tables_from_config
from app.stream.job import StopWhen, StreamJob
from tests.kafka.processes import cli, wait_for
from tests.support.http_server import Request, recording_server
from tests.support.streaming import create_topic, job_config, produce, until_all_read
from tests.support.watch_cycles import CYCLE_TIMEOUT_S, lost_posts, ok_cycles, wait_cycles

pytestmark = pytest.mark.kafka

PARTITIONS = 3
BEFORE, DOWN, AFTER = 30, 20, 10  # per partition: read by run-1, skipped by run-2, read by run-2


def start_watch(data_dir: Path, overrides: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    argv = cli("watch", data_dir, *overrides, args=("--interval", "2", "--log-level", "INFO"))
    with log_path.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def kill_mid_cycle(proc: subprocess.Popen[bytes], log_path: Path) -> int:
    """SIGKILL the watch while a cycle's reconcile runs; returns that cycle's number. The watch is
    frozen (SIGSTOP) as soon as a reconcile starts in its output, then killed if that cycle has not
    ended by then; a cycle that ended first is let go on (SIGCONT) and the next one tried."""
    for _ in range(20):
        number = ok_cycles(log_path) + 1
        started = re.compile(rf"cycle {number} watch-\S+: reconcile \.\.\.")
        ended = re.compile(rf"^cycle {number} watch-\S+ ", re.MULTILINE)
        wait_for(
            lambda: True if started.search(log_path.read_text()) else None,  # noqa: B023 - used at once
            CYCLE_TIMEOUT_S,
            f"the reconcile of cycle {number}",
            0.01,
        )
        os.killpg(proc.pid, signal.SIGSTOP)
        if not ended.search(log_path.read_text()):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
            return number
        os.killpg(proc.pid, signal.SIGCONT)
    raise AssertionError("no cycle was caught at work in 20 tries")


def assert_no_alert_repeated(received: list[Request]) -> None:
    """An incident is alerted when it opens and again only when it changed: never twice as it was."""
    payloads = [json.loads(r.body) for r in received]
    alerted = [
        (i["incident_id"], i["severity"], i["status"], json.dumps(i["impact"], sort_keys=True))
        for p in payloads
        for i in p["opened"] + p["changed"]
    ]
    assert alerted
    assert len(alerted) == len(set(alerted)), alerted


def table_rows(path: str, columns: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(path).to_pyarrow_table(columns=columns).to_pylist()
    return rows


def judged(cfg: AppConfig) -> tuple[set[str], dict[str, str]]:
    """The finding ids, and each incident's id with what an alert is about (its fingerprint)."""
    tables = tables_from_config(cfg)
    findings = {r["finding_id"] for r in table_rows(tables.findings, ["finding_id"])}
    names = INCIDENTS_SCHEMA.fieldNames()
    incidents = [StoredIncident.from_row(r) for r in table_rows(tables.incidents, names)]
    return findings, {i.incident_id: fingerprint(i) for i in incidents}


def restart_from_latest(
    spark: SparkSession, cfg: AppConfig, bootstrap: str, topic: str, data_dir: Path
) -> None:
    """run-2: the checkpoint deleted, ``startup_mode=latest``; records produced only once it has
    resolved 'latest' (its RUN_STARTED is in the ledger), so it completes checkpoints past the skip."""
    produce(bootstrap, topic, DOWN * PARTITIONS, PARTITIONS, start=BEFORE * PARTITIONS)
    shutil.rmtree(data_dir / "checkpoints" / cfg.stream.job_name)
    end = {(topic, p): BEFORE + DOWN + AFTER for p in range(PARTITIONS)}
    job = StreamJob(spark, cfg, bootstrap, run_id="run-2")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            job.run(StopWhen(offsets=end))
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ledger = tables_from_config(cfg).ledger

    def started() -> bool | None:
        assert not errors, errors
        rows = DeltaTable(ledger).to_pyarrow_table(
            columns=["run_id"], filters=[("run_id", "=", "run-2"), ("event_type", "=", "RUN_STARTED")]
        )
        return True if rows.num_rows else None

    wait_for(started, 240, "RUN_STARTED of run-2", step_s=0.2)
    produce(bootstrap, topic, AFTER * PARTITIONS, PARTITIONS, start=(BEFORE + DOWN) * PARTITIONS)
    thread.join(300)
    assert not thread.is_alive(), "run-2 did not read its records"
    assert not errors, errors


def successful_windows(cfg: AppConfig) -> list[tuple[Any, Any]]:
    rows = table_rows(
        tables_from_config(cfg).audit_runs, ["run_id", "command", "status", "window_start", "window_end"]
    )
    done = [
        r
        for r in rows
        if r["run_id"].startswith("watch-") and r["command"] == "reconcile" and r["status"] == "succeeded"
    ]
    return [(r["window_start"], r["window_end"]) for r in sorted(done, key=lambda r: r["window_end"])]


def assert_completeness_counted_once(cfg: AppConfig, topic: str) -> None:
    """Per partition, the completeness windows written by the cycles before and after the kill:
    their offsets follow one another from 0 to the end, and the records run-2 skipped are lost once."""
    cols = [
        "topic",
        "partition",
        "window_start",
        "offset_start",
        "offset_end",
        "landed",
        "lost",
        "duplicated",
    ]
    rows = table_rows(tables_from_config(cfg).completeness, cols)
    for p in range(PARTITIONS):
        mine = sorted(
            (r for r in rows if (r["topic"], r["partition"]) == (topic, p)), key=lambda r: r["window_start"]
        )
        assert mine, f"no completeness window of partition {p}"
        bounds = [(r["offset_start"], r["offset_end"]) for r in mine]
        assert bounds[0][0] == 0
        assert bounds[-1][1] == BEFORE + DOWN + AFTER
        assert all(b[0] == a[1] for a, b in itertools.pairwise(bounds)), bounds
        assert sum(r["lost"] for r in mine) == DOWN
        assert sum(r["landed"] for r in mine) == BEFORE + AFTER
        assert sum(r["duplicated"] for r in mine) == 0


def test_watch_alerts_a_restart_from_latest_once_survives_a_kill_and_stops_on_sigterm(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic, group, job = f"watch-{unique}", f"watch-{unique}", "watch-job"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, BEFORE * PARTITIONS, PARTITIONS)
    settings = [
        f"kafka.bootstrap_servers={bootstrap}",
        f"stream.topics=[{topic}]",
        f"stream.group_id={group}",
        f"stream.job_name={job}",
        "stream.trigger_interval=1 second",
        f"ingest.groups=[{group}]",
    ]
    cfg = job_config(tmp_path, bootstrap, topic, group, job, "stream.startup_mode=earliest", *settings[4:])
    StreamJob(spark, cfg, bootstrap, run_id="run-1").run(until_all_read(bootstrap, topic, PARTITIONS))

    with recording_server() as (url, received):
        overrides = [*settings, f"alerts.webhook_url={url}/hook"]
        first_log = tmp_path / "watch-1.log"
        watch = start_watch(tmp_path, overrides, first_log)
        try:
            wait_cycles(watch, first_log, 1)

            # A restart from latest: a cycle finds it and alerts it.
            latest = job_config(
                tmp_path, bootstrap, topic, group, job, "stream.startup_mode=latest", *settings[4:]
            )
            restart_from_latest(spark, latest, bootstrap, topic, tmp_path)

            def loss_alert() -> dict[str, Any] | None:
                assert watch.poll() is None, first_log.read_text()[-4000:]
                for payload in (json.loads(r.body) for r in list(received)):
                    # Opened with its loss, or a restart alerted before the loss was confirmed and
                    # again when a later cycle added it (its impact changed).
                    for incident in payload["opened"] + payload["changed"]:
                        if incident["impact"]["records_lost"]:
                            return dict(incident)
                return None

            incident = wait_for(loss_alert, CYCLE_TIMEOUT_S, "the webhook POST of the lost records", 0.2)
            assert incident["impact"]["records_lost"] == DOWN * PARTITIONS
            assert incident["severity"] == "critical"
            # Later cycles see the incidents again and alert none of them again.
            posts = len(received)
            wait_cycles(watch, first_log, ok_cycles(first_log) + 3)
            assert len(received) == posts
            assert len(lost_posts(received, incident["incident_id"])) == 1
            assert_no_alert_repeated(received)
            before_kill = judged(cfg)
            posts_before_kill = len(received)

            # SIGKILL in the middle of a cycle, while its reconcile runs.
            killed_cycle = kill_mid_cycle(watch, first_log)
        finally:
            if watch.poll() is None:
                os.killpg(watch.pid, signal.SIGKILL)
                watch.wait(60)
        assert not re.search(rf"^cycle {killed_cycle} watch-\S+ ok", first_log.read_text(), re.MULTILINE)

        second_log = tmp_path / "watch-2.log"
        watch = start_watch(tmp_path, overrides, second_log)
        try:
            wait_cycles(watch, second_log, 2)
            # Nothing judged twice, nothing alerted twice ...
            assert judged(cfg) == before_kill
            assert len(received) == posts_before_kill
            assert len(lost_posts(received, incident["incident_id"])) == 1
            assert_no_alert_repeated(received)
            # ... and no window missed: each successful cycle starts where the one before ended,
            # or earlier, at a ledger row the one before could not see yet (written after it read).
            windows = successful_windows(cfg)
            assert windows[0][0] is None
            assert all(b[0] <= a[1] for a, b in itertools.pairwise(windows)), windows
            # ... nor a completeness window: every partition's windows tile its offsets, the skipped
            # records counted lost once.
            assert_completeness_counted_once(cfg, topic)
            assert re.search(r"completeness windows [1-9]", second_log.read_text())

            watch.send_signal(signal.SIGTERM)
            assert watch.wait(120) == 0, second_log.read_text()[-4000:]
        finally:
            if watch.poll() is None:
                os.killpg(watch.pid, signal.SIGKILL)
                watch.wait(60)
    assert "stopped by signal 15 between cycles" in second_log.read_text()
