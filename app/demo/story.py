"""The demo: from nothing to a dashboard, through real incidents on the embedded default.

Everything lives under <data_dir>/demo (its own broker, tables and checkpoints), wiped at the start.
The scripted incidents are real: a SIGKILL of the whole streaming job, a broker outage while a
commit is being sent, a manual offset reset through the Admin API, a restart from `latest` after
downtime, and a second writer appending records the sink already holds. Beside it runs a user's
own job (app/demo/user_job.py: JSON payments into Spark's Delta sink, no coordinate columns),
attached in one line and judged by its sink's transaction log (`delta_batches`), whose sink is
restored to before its last batch. Then the nightly pipeline runs and the demo compares what it
found with what was injected.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig, load_config
from app.contracts import vocabulary as vocab
from app.contracts.offsets import TopicPartitionKey
from app.contracts.vocabulary import EVENT_RUN_STARTED
from app.demo import user_job
from app.demo.local_kafka import LocalKafka
from app.errors import InfrastructureError, KafkaUnavailableError
from app.kafka.clients import kafka_error, plain_conf, retry_kafka
from app.kafka.commit_outcome import CommitFn, CommitResult
from app.kafka.group_offsets import group_offsets
from app.nightly.run import Nightly, NightlyResult
from app.pipeline.context import AuditContext
from app.runtime import jvm
from app.storage.handles import AuditTables
from app.stream.job import StopWhen, StreamJob, StreamResult
from app.stream.startup import batch_ids, parse_offset_log

log = logging.getLogger(__name__)

TOPIC = "orders"
GROUP = "offset-audit-orders"
JOB = "orders-audit"
PARTITIONS = 3
WARN_OR_ABOVE = vocab.severities_at_least(vocab.WARN)
# The user's own job: its topic, its name in the audit, and the group attach commits its batches to.
USER_TOPIC = "payments"
USER_JOB = "payments"
USER_GROUP = "payments-app"
USER_BATCHES = 3  # the job reads them in one availableNow run; the last one is lost to the restore
USER_INCIDENT = "user job's sink restored"


DEMO_WINDOW_MINUTES = 1
NEVER = datetime.min.replace(tzinfo=UTC)  # a span not yet seen: no window overlaps it


def user_job_dir(data_dir: Path) -> Path:
    return data_dir / "user-job"


@dataclass(frozen=True)
class DemoScale:
    """Sizes of the scripted story; the tests use a smaller one than `make demo`."""

    initial_per_partition: int = 400
    per_trigger: int = 150
    outage_per_partition: int = 40
    reset_back_by: int = 100
    downtime_per_partition: int = 50
    duplicated_rows: int = 20


@dataclass(frozen=True)
class ExpectedFinding:
    finding_type: str
    severity: str
    partition: int | None
    offset_start: int | None = None
    offset_end: int | None = None
    record_count: int | None = None
    incident: str = ""

    def matches(self, row: Mapping[str, Any]) -> bool:
        return (
            row["finding_type"] == self.finding_type
            and row["severity"] == self.severity
            and (self.partition is None or row["partition"] == self.partition)
            and (self.offset_start is None or row["offset_start"] == self.offset_start)
            and (self.offset_end is None or row["offset_end"] == self.offset_end)
            and (self.record_count is None or row["record_count"] == self.record_count)
        )


@dataclass
class DemoOutcome:
    nightly: NightlyResult | None = None
    expected: list[ExpectedFinding] = field(default_factory=list)
    found: list[dict[str, Any]] = field(default_factory=list)  # findings at warn or above
    missing: list[ExpectedFinding] = field(default_factory=list)
    unexpected: list[dict[str, Any]] = field(default_factory=list)
    incidents: list[str] = field(default_factory=list)
    # Where the completeness table put each job's lost records, and whether that is where they were
    # injected: (job, partition) -> {window start: records lost}.
    lost_by_window: dict[tuple[str, int], dict[datetime, int]] = field(default_factory=dict)
    completeness_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected and not self.completeness_errors


def demo_overrides(data_dir: Path, scale: DemoScale) -> list[str]:
    """The demo's config on top of the user's: its own data dir and job, small triggers."""
    return [
        f"paths.data_dir={data_dir}",
        "kafka.bootstrap_servers=local",
        f"stream.job_name={JOB}",
        f"stream.topics=[{TOPIC}]",
        f"stream.group_id={GROUP}",
        "stream.trigger_interval=1 second",
        f"stream.max_offsets_per_trigger={scale.per_trigger}",
        "stream.startup_mode=earliest",
        # One-minute windows: the demo's few minutes span several, so the heatmap shows the loss in
        # its own windows and the others complete.
        f"completeness.window_minutes={DEMO_WINDOW_MINUTES}",
        f"ingest.groups=[{GROUP},{USER_GROUP}]",
        f"reconcile.jobs=[{JOB},{USER_JOB}]",
        # The user's job writes no coordinate columns: its sink is judged by its Delta log.
        f"tables.sink_by_job.{USER_JOB}={user_job_dir(data_dir) / 'sink'}",
        f"reconcile.sink_mode_by_job.{USER_JOB}={vocab.SINK_DELTA_BATCHES}",
    ]


class _JobThread(threading.Thread):
    """Runs a streaming job in the background while the demo injects incidents."""

    def __init__(self, job: StreamJob) -> None:
        super().__init__(name=f"stream-{job.run_id}", daemon=True)
        self.job = job
        self.results: list[StreamResult] = []
        self.errors: list[BaseException] = []

    def run(self) -> None:
        try:
            self.results.append(self.job.run(StopWhen()))
        except BaseException as exc:  # handed to the main thread by Demo.stop_job
            self.errors.append(exc)


class Demo:
    def __init__(
        self,
        base: AppConfig,
        spark: SparkSession,
        scale: DemoScale = DemoScale(),
        env: str = "local",
        conf_dir: Path | None = None,
        progress: Callable[[str], None] | None = None,
        screenshot: bool = True,
        overrides: Sequence[str] = (),
    ) -> None:
        self.data_dir = Path(base.paths.data_dir).resolve() / "demo"
        self.scale = scale
        self.env = env
        self.conf_dir = conf_dir
        # The user's --set items (alert channels, Spark settings, ...) under the demo's own.
        self.overrides = [*overrides, *demo_overrides(self.data_dir, scale)]
        self.cfg = load_config(env, self.overrides, conf_dir)
        self.spark = spark
        self.tables = AuditTables.from_config(self.cfg, spark)
        self.say = progress or (lambda text: log.info("%s", text))
        self.screenshot = screenshot
        self.broker = LocalKafka(
            self.cfg.paths.kafka_dir,
            jvm.resolve_classpath("kafka", self.cfg.paths.cache_dir),
            offsets_partitions=self.cfg.local_kafka.offsets_partitions,
            heap=self.cfg.local_kafka.heap,
            start_timeout_s=self.cfg.local_kafka.start_timeout_s,
            die_with_parent=True,
        )
        self.bootstrap = ""
        self.produced = 0  # records per partition so far
        self.outcome = DemoOutcome()
        self._running: tuple[StreamJob, _JobThread] | None = None
        self._threads: list[_JobThread] = []  # every job started, stopped at the end whatever happens
        self._admin: tuple[str, AdminClient] | None = None  # (bootstrap, client), see admin()
        self.skipped = (0, 0)  # offsets produced while the job was down before its 'latest' restart
        self.skipped_at = (NEVER, NEVER)  # the wall-clock span those records were produced in
        self.user_lost_at = (NEVER, NEVER)  # the span the user job's records were produced in
        self.duplicated = (0, 0)  # offsets of partition 1 the second writer appended again

    # --- plumbing --------------------------------------------------------------------------------
    def config(self, *extra: str) -> AppConfig:
        return load_config(self.env, [*self.overrides, *extra], self.conf_dir)

    def admin(self) -> AdminClient:
        """One Admin client per broker start. A client per request costs a connection and logs its
        start-up and shutdown every time; but a client that lived through the broker's SIGKILL did
        not find the group coordinator again (its group-offset requests kept failing for the
        whole 300 s the demo waited on a loaded machine), so a restart gets a new one."""
        if self._admin is None or self._admin[0] != self.bootstrap:
            self._admin = (self.bootstrap, AdminClient(plain_conf(self.bootstrap)))
        return self._admin[1]

    def restart_broker(self) -> None:
        self._admin = None
        self.bootstrap = self.broker.start().bootstrap_servers

    def produce(self, per_partition: int) -> tuple[int, int]:
        """Append records to every partition; returns the [start, end) offsets they got."""
        producer = Producer(plain_conf(self.bootstrap, **{"linger.ms": 5}))
        start = self.produced
        for i in range(start, start + per_partition):
            for p in range(PARTITIONS):
                producer.produce(
                    TOPIC, key=f"order-{p}-{i}".encode(), value=f'{{"n": {i}}}'.encode(), partition=p
                )
        if producer.flush(60) != 0:
            raise InfrastructureError("the demo producer could not deliver its records")
        self.produced += per_partition
        return start, self.produced

    def group_offsets(self, timeout_s: float = 30) -> dict[int, int]:
        held = group_offsets(
            plain_conf(self.bootstrap), GROUP, timeout_s, [(TOPIC, p) for p in range(PARTITIONS)]
        )
        return {p: h.offset for (_, p), h in held.items()}

    def wait_committed(self, target: int, thread: _JobThread, timeout_s: float = 300) -> None:
        """Until the group has committed `target` on every partition (the job caught up).

        Fails at once, with the reason, when the job or the broker it needs has stopped: waiting
        out the deadline would only hide why."""
        deadline = time.monotonic() + timeout_s
        offsets: dict[int, int] = {}
        while True:
            self._check_alive(thread, f"committing offset {target}")
            # The broker may be restarting: ask again (each ask is a new client) until the deadline.
            with contextlib.suppress(KafkaUnavailableError):
                offsets = self.group_offsets(timeout_s=max(5.0, min(30.0, deadline - time.monotonic())))
            if offsets and all(offsets.get(p) == target for p in range(PARTITIONS)):
                return
            if time.monotonic() > deadline:
                raise InfrastructureError(
                    f"the job did not commit offset {target} in {timeout_s:.0f}s (last seen {offsets})"
                )
            time.sleep(0.5)

    def _check_alive(self, thread: _JobThread, doing: str) -> None:
        if thread.errors or not thread.is_alive():
            error = thread.errors[0] if thread.errors else None
            raise InfrastructureError(
                f"the streaming job {thread.job.run_id} stopped before {doing}: {error or 'no error'}"
            ) from error
        if self.broker.status() is None:
            raise InfrastructureError(
                f"the local broker is not running while the demo waits for {doing}; its log ends with:\n"
                + self.broker.tail_log(20)
            )

    def wait_started(self, run_id: str, thread: _JobThread, timeout_s: float = 300) -> None:
        """Until the ledger holds ``run_id``'s RUN_STARTED (its start offsets are fixed by then)."""
        ledger = self.tables.ledger
        deadline = time.monotonic() + timeout_s
        while True:
            dataset = ledger.dataset()
            if dataset is not None:
                started = dataset.to_table(
                    columns=["run_id"],
                    filter=(pc.field("run_id") == run_id) & (pc.field("event_type") == EVENT_RUN_STARTED),
                )
                if started.num_rows:
                    return
            if thread.errors or not thread.is_alive():
                raise InfrastructureError(f"the streaming job {run_id} ended before it started")
            if time.monotonic() > deadline:
                raise InfrastructureError(f"the streaming job {run_id} did not start in {timeout_s:.0f}s")
            time.sleep(0.2)

    def start_job(
        self, cfg: AppConfig, run_id: str, wrapper: Callable[[CommitFn], CommitFn] | None = None
    ) -> tuple[StreamJob, _JobThread, list[StreamResult]]:
        job = StreamJob(self.spark, cfg, self.bootstrap, run_id=run_id, commit_fn_wrapper=wrapper)
        thread = _JobThread(job)
        thread.start()
        self._threads.append(thread)
        return job, thread, thread.results

    def stop_job(self, job: StreamJob, thread: _JobThread) -> None:
        job.request_stop()
        thread.join(300)
        if thread.is_alive():
            raise InfrastructureError("the streaming job did not stop")
        if thread.errors:
            raise InfrastructureError(f"the streaming job failed: {thread.errors[0]}") from thread.errors[0]

    def _stop_leftover_jobs(self) -> None:
        # After a failed step a job may still run; left alone it would retry the stopped broker
        # for as long as the process lives.
        for thread in self._threads:
            if thread.is_alive():
                thread.job.request_stop()
                thread.join(120)

    # --- the story -------------------------------------------------------------------------------
    def run(self) -> DemoOutcome:
        steps: Sequence[tuple[str, Callable[[], None]]] = [
            ("start from nothing: a local broker and a topic with data", self.setup),
            (
                "incident 1: the streaming job is killed (SIGKILL) mid-run and restarted",
                self.crash_and_restart,
            ),
            ("incident 2: the broker goes down while a commit is sent", self.commit_outage),
            ("incident 3: someone resets the job's group offsets with the Admin API", self.manual_reset),
            (
                "incident 4: after downtime the job restarts from 'latest' without its checkpoint",
                self.restart_latest,
            ),
            ("incident 5: a second writer appends records the sink already holds", self.second_writer),
            (
                "incident 6: a user's own job, attached in one line, has its sink restored to before a batch",
                self.user_job_restored,
            ),
            ("nightly: ingest-offsets, reconcile, forensics, check, report", self.nightly),
        ]
        try:
            for number, (title, step) in enumerate(steps, 1):
                self.say(f"[demo {number}/{len(steps)}] {title}")
                started = time.monotonic()
                step()
                self.say(f"[demo {number}/{len(steps)}] done in {time.monotonic() - started:.0f}s")
        finally:
            self._stop_leftover_jobs()
            self.broker.stop()
        self.compare()
        return self.outcome

    def setup(self) -> None:
        if self.data_dir.exists():
            LocalKafka(self.cfg.paths.kafka_dir, []).stop()
            shutil.rmtree(self.data_dir)
        self.bootstrap = self.broker.start().bootstrap_servers
        retry_kafka(partial(self._create_topic, TOPIC, PARTITIONS), f"creating {TOPIC}", 30)
        self.produce(self.scale.initial_per_partition)
        self.say(f"  produced {self.produced * PARTITIONS} records to '{TOPIC}' ({PARTITIONS} partitions)")

    def _create_topic(self, topic: str, partitions: int, timeout_s: float) -> None:
        new = NewTopic(topic, num_partitions=partitions, replication_factor=1)
        try:
            self.admin().create_topics([new], request_timeout=timeout_s)[topic].result(timeout_s)
        except KafkaException as exc:
            error = kafka_error(exc)
            # A retry after a request that timed out but went through finds the topic there.
            if error is None or error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def crash_and_restart(self) -> None:
        cmd = [sys.executable, "-m", "app.cli", "stream", "--env", self.env, "--run-id", "run-1-killed"]
        if self.conf_dir is not None:
            cmd += ["--conf-dir", str(self.conf_dir)]
        for item in self.overrides:
            cmd += ["--set", item]
        commits = Path(self.cfg.stream.checkpoint_dir or f"{self.data_dir}/checkpoints/{JOB}") / "commits"
        with (self.data_dir / "killed-run.log").open("wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + 300
            while len(batch_ids(os.listdir(commits)) if commits.exists() else []) < 2:
                if proc.poll() is not None:
                    raise InfrastructureError(f"the job exited early; see {self.data_dir / 'killed-run.log'}")
                if time.monotonic() > deadline:
                    os.killpg(proc.pid, signal.SIGKILL)
                    raise InfrastructureError("the job completed no checkpoints in time")
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGKILL)  # the whole job, JVM included
            proc.wait(30)
        self.say("  killed the job after 2 completed checkpoints; restarting from its checkpoint")
        job, thread, _ = self.start_job(self.cfg, "run-2")
        self.wait_committed(self.produced, thread)
        self._running = (job, thread)
        self.outcome.incidents.append("crash and restart")

    def commit_outage(self) -> None:
        armed, failed = threading.Event(), threading.Event()

        def wrapper(commit: CommitFn) -> CommitFn:
            def outage_commit(offsets: Mapping[TopicPartitionKey, int]) -> CommitResult:
                if not armed.is_set():
                    return commit(offsets)
                armed.clear()
                self.say("  broker down just as a checkpoint's offsets are committed")
                self.broker.kill()
                try:
                    return commit(offsets)
                finally:
                    failed.set()  # the main thread brings the broker back (see LocalKafka pdeathsig)

            return outage_commit

        assert self._running is not None
        job, thread = self._running
        self.stop_job(job, thread)
        job, thread, _ = self.start_job(self.cfg, "run-3", wrapper)
        self.wait_committed(self.produced, thread)
        armed.set()
        self.produce(self.scale.outage_per_partition)
        if not failed.wait(300):
            raise InfrastructureError("no commit was attempted during the outage window")
        self.restart_broker()
        self.say("  broker back")
        self.produce(self.scale.outage_per_partition)  # a later checkpoint commits past the failed one
        self.wait_committed(self.produced, thread)
        self.stop_job(job, thread)
        self.outcome.incidents.append("commit failure during a broker outage")

    def manual_reset(self) -> None:
        # An operator acts right after the job's last checkpoint and commit, well inside the match
        # window: the reset is still foreign, because the job never asked for that offset.
        target = self.produced - self.scale.reset_back_by
        request = ConsumerGroupTopicPartitions(GROUP, [TopicPartition(TOPIC, 0, target)])
        retry_kafka(
            lambda left: (
                self.admin().alter_consumer_group_offsets([request], request_timeout=left)[GROUP].result(left)
            ),
            f"resetting the offsets of {GROUP}",
            30,
        )
        self.say(f"  {GROUP} partition 0 reset from {self.produced} to {target}")
        # And the job restarts at once; its own commits right after the reset do not make the
        # reset its own either.
        job, thread, _ = self.start_job(self.cfg, "run-4")
        self.produce(self.scale.outage_per_partition)
        self.wait_committed(self.produced, thread)
        self.stop_job(job, thread)
        self.outcome.incidents.append("manual offset reset")

    def restart_latest(self) -> None:
        before = datetime.now(UTC)
        self.skipped = self.produce(self.scale.downtime_per_partition)
        self.skipped_at = (before, datetime.now(UTC))  # their CreateTime lies in this span
        shutil.rmtree(Path(f"{self.data_dir}/checkpoints/{JOB}"))
        self.say(
            f"  {self.scale.downtime_per_partition * PARTITIONS} records arrived while the job was down; "
            "checkpoint deleted; restarting with startup_mode=latest"
        )
        job, thread, _ = self.start_job(self.config("stream.startup_mode=latest"), "run-5")
        # New data only once the run has resolved 'latest' into offsets (its RUN_STARTED is written
        # right after), or that data would be skipped too.
        self.wait_started("run-5", thread)
        self.produce(self.scale.outage_per_partition)
        self.wait_committed(self.produced, thread)
        self.stop_job(job, thread)
        self.outcome.incidents.append("restart from latest")

    def second_writer(self) -> None:
        sink = self.tables.sink_for(JOB)
        start = self.scale.per_trigger  # well inside data the job wrote
        rows = (
            sink.load()
            .where(
                (F.col("kafka_partition") == 1)
                & F.col("kafka_offset").between(start, start + self.scale.duplicated_rows - 1)
            )
            .withColumn("_run_id", F.lit("second-writer"))
        )
        sink.append(rows)
        self.duplicated = (start, start + self.scale.duplicated_rows)
        self.say(f"  appended offsets [{start}, {start + self.scale.duplicated_rows}) of partition 1 again")
        self.outcome.incidents.append("second writer")

    def user_job_restored(self) -> None:
        """The user's job reads its topic in one run; then someone RESTOREs its sink to the version
        before the last batch (a rollback of a bad deploy, say): the batch is in the checkpoint,
        the ledger and the group's commits, and no longer in the sink."""
        create = partial(self._create_topic, USER_TOPIC, user_job.PARTITIONS)
        retry_kafka(create, f"creating {USER_TOPIC}", 30)
        before = datetime.now(UTC)
        user_job.produce_payments(self.bootstrap, USER_TOPIC, USER_BATCHES * user_job.PER_TRIGGER)
        self.user_lost_at = (before, datetime.now(UTC))
        where = user_job_dir(self.data_dir)
        sink = where / "sink"
        query_id = user_job.run_payments(
            self.spark,
            self.bootstrap,
            USER_TOPIC,
            where / "checkpoint",
            sink,
            job_name=USER_JOB,
            ledger=self.tables.ledger.location,
            group_id=USER_GROUP,
        )
        last = max(checkpoint_ends(where / "checkpoint"))
        version = sink_version_of_batch(sink, query_id, last)
        self.spark.sql(f"RESTORE TABLE delta.`{sink}` TO VERSION AS OF {version - 1}")
        self.say(
            f"  '{USER_JOB}' wrote {last + 1} batches, the last as sink version {version}; "
            f"its sink restored to version {version - 1}"
        )
        self.outcome.incidents.append(USER_INCIDENT)

    def user_lost_batch(self) -> dict[int, tuple[int, int]]:
        """partition -> [start, end) of the user job's last batch, read from its checkpoint; empty
        when the job has not run."""
        checkpoint = user_job_dir(self.data_dir) / "checkpoint"
        if not (checkpoint / "commits").is_dir():
            return {}
        ends = checkpoint_ends(checkpoint)
        last = max(ends)
        before = ends.get(last - 1, {})
        return {p: (before.get((t, p), 0), end) for (t, p), end in ends[last].items() if t == USER_TOPIC}

    def nightly(self) -> None:
        self.restart_broker()
        ctx = AuditContext.for_session(self.cfg, self.spark, lambda: self.bootstrap)
        self.outcome.nightly = Nightly(ctx, screenshot=self.screenshot).run()

    # --- verdict ---------------------------------------------------------------------------------
    def expected(self) -> list[ExpectedFinding]:
        lo, hi = self.skipped
        out = [
            # The crash costs nothing: the restart resumed exactly, so the unclean stop is information.
            ExpectedFinding(vocab.UNCLEAN_STOP, vocab.INFO, None, incident="crash and restart"),
            *[
                ExpectedFinding(
                    vocab.COMMIT_FAILURE, vocab.WARN, p, incident="commit failure during a broker outage"
                )
                for p in range(PARTITIONS)
            ],
            ExpectedFinding(vocab.FOREIGN_COMMIT, vocab.ERROR, 0, incident="manual offset reset"),
            ExpectedFinding(vocab.COMMIT_REGRESSION, vocab.ERROR, 0, incident="manual offset reset"),
            ExpectedFinding(
                vocab.DUPLICATE,
                vocab.ERROR,
                1,
                self.duplicated[0],
                self.duplicated[1],
                self.scale.duplicated_rows,
                incident="second writer",
            ),
        ]
        for p in range(PARTITIONS):
            out.append(
                ExpectedFinding(
                    vocab.RESTART_SKIP, vocab.CRITICAL, p, lo, hi, hi - lo, incident="restart from latest"
                )
            )
            out.append(
                ExpectedFinding(vocab.GAP, vocab.CRITICAL, p, lo, hi, hi - lo, incident="restart from latest")
            )
        # The restored batch of the user's job, named per partition with its offsets.
        for p, (start, end) in sorted(self.user_lost_batch().items()):
            kind = vocab.BATCH_NOT_IN_SINK
            out.append(ExpectedFinding(kind, vocab.CRITICAL, p, start, end, incident=USER_INCIDENT))
        return out

    def compare(self) -> None:
        expected = self.expected()
        rows = [r.asDict() for r in self.tables.findings.load().collect()]
        # Expected information (the crash's unclean stop) must be found too; anything else below
        # warn is not the demo's business.
        shown = [r for r in rows if r["severity"] in WARN_OR_ABOVE or any(e.matches(r) for e in expected)]
        self.outcome.found = shown
        self.outcome.expected = expected
        self.outcome.missing = [e for e in expected if not any(e.matches(r) for r in shown)]
        self.outcome.unexpected = [
            r for r in shown if r["severity"] in WARN_OR_ABOVE and not any(e.matches(r) for e in expected)
        ]
        self.compare_completeness()

    def compare_completeness(self) -> None:
        """The completeness table holds each injected loss in the windows its records were produced
        in, and no loss anywhere else."""
        lossy = self.tables.completeness.load().where(F.col("lost") > 0)
        # Epoch seconds, not a collected timestamp: those come back naive, in the driver's zone.
        rows = lossy.select("job_name", "partition", F.col("window_start").cast("long").alias("at"), "lost")
        lost: dict[tuple[str, int], dict[datetime, int]] = {}
        for r in rows.collect():
            at = datetime.fromtimestamp(r["at"], UTC)
            lost.setdefault((r["job_name"], r["partition"]), {})[at] = r["lost"]
        self.outcome.lost_by_window = lost
        lo, hi = self.skipped
        injected = {(JOB, p): (hi - lo, self.skipped_at) for p in range(PARTITIONS)}
        for p, (start, end) in self.user_lost_batch().items():
            injected[(USER_JOB, p)] = (end - start, self.user_lost_at)
        self.outcome.completeness_errors = completeness_errors(lost, injected, DEMO_WINDOW_MINUTES)


def completeness_errors(
    lost: Mapping[tuple[str, int], Mapping[datetime, int]],
    injected: Mapping[tuple[str, int], tuple[int, tuple[datetime, datetime]]],
    window_minutes: int,
) -> list[str]:
    """What the completeness table says about the losses that differs from what was injected: per
    (job, partition), the records lost over all windows, and each lossy window overlapping the span
    in which the lost records were produced. A loss where none was injected is an error too."""
    width = timedelta(minutes=window_minutes)
    errors = []
    for key, windows in sorted(lost.items()):
        if key not in injected:
            errors.append(f"{key[0]} partition {key[1]}: {sum(windows.values())} records lost, none injected")
    for (job, partition), (count, (produced_from, produced_to)) in sorted(injected.items()):
        windows = lost.get((job, partition), {})
        if sum(windows.values()) != count:
            errors.append(
                f"{job} partition {partition}: {sum(windows.values())} records lost, {count} injected"
            )
        for start in windows:
            if start + width <= produced_from or start > produced_to:
                errors.append(
                    f"{job} partition {partition}: loss in window {start:%H:%M}, outside the injection"
                )
    return errors


def checkpoint_ends(checkpoint: Path) -> dict[int, dict[TopicPartitionKey, int]]:
    """The end offsets of every committed batch, from a query's checkpoint files."""
    committed = batch_ids(os.listdir(checkpoint / "commits"))
    return {b: parse_offset_log((checkpoint / "offsets" / str(b)).read_text()) for b in committed}


def sink_version_of_batch(sink: Path, app_id: str, batch: int) -> int:
    """The Delta version whose commit carries ``batch``'s transaction id (Spark's Delta sink writes
    the query id as the app id and the batch id as the version)."""
    for path in sorted((sink / "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn and (txn["appId"], txn["version"]) == (app_id, batch):
                return int(path.stem)
    raise InfrastructureError(f"no commit of batch {batch} in {sink}")
