"""Every stage under `spark-submit --master spark://...` as README.md's "Running on a cluster" runs
them, every table on s3a://: a bounded `stream` run against the session's Kafka broker, then the
single-stage entry points one by one (ingest-offsets, reconcile, forensics, check, report), then
`nightly` over the same tables. The stages find exactly what the same stages find in-process over
a local copy of the same tables and the same broker; the night after them adds no finding, on
either side; and the micro-batches, the decoding of __consumer_offsets and the sink scans run in
the workers' executors.

Between the stream and the stages the tables get a second writer's copies (a DUPLICATE), lose a
range (a GAP, confirmed against the topic) and the group gets an operator's offset reset (a
FOREIGN_COMMIT): findings of all three sources, the ledger, __consumer_offsets and the sink.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from app.cli import main
from app.kafka.clients import plain_conf
from tests.cluster import readme, scenario
from tests.cluster.servers import S3_SECRET_KEY, S3Server, SparkCluster
from tests.cluster.submit import (
    KAFKA_PASSWORD,
    Running,
    Submitted,
    event_log,
    executors_added,
    read_table,
    spark_submit,
    tasks_reading_kafka,
    tasks_scanning,
)
from tests.support.streaming import KAFKA_TIMEOUT_S, create_topic, produce

# A cluster start and seven spark-submits on a busy two-core machine, all in the first test that asks.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(3000)]

PARTITIONS = 3
RECORDS = 300  # 100 per partition
BATCHES = 2  # micro-batches of RECORDS / BATCHES: Spark splits the limit by partition, 50 each
STAGES = ("ingest-offsets", "reconcile", "forensics", "check", "report")  # nightly's order
STAGE_RUN = "cluster-stages"  # reconcile and forensics share a run id, as the night's steps do
NIGHT = "cluster-night"
GAP = (2, 20, 30)  # partition, [start, end) deleted from the sink
COPIES = (1, 5, 15)  # partition, [start, end) appended again by a second writer
RESET = (0, 10)  # partition, offset an operator sets the group to
# How old the records are (their CreateTime): every completeness window holding them is past its
# lateness (2 x the 1 s trigger + 5 min) whenever a reconcile judges it. With records of the test's
# own minute, a window became final between the local reconciles (run first) and the cluster's
# (minutes later on a busy machine), and only the cluster's check failed completeness.floor on the
# GAP's lost records: the two sides judged different ages of the same data.
RECORD_AGE = timedelta(hours=1)

FINDING_COLUMNS = (
    "finding_id", "finding_type", "severity", "status", "job_name", "group_id", "topic", "partition",
    "checkpoint_id", "run_id", "offset_start", "offset_end", "record_count",
)  # fmt: skip
SUMMARY_COLUMNS = (
    "job_name", "group_id", "topic", "partition", "sink_count", "sink_distinct", "sink_min_offset",
    "sink_max_offset", "last_checkpoint_id", "last_checkpoint_offset", "last_committed_offset",
    "last_commit_time", "commit_lag_offsets", "commit_lag_seconds", "findings_by_type",
)  # fmt: skip
# Relaxed: cause and remedy name the sink's location, which differs by storage.
INCIDENT_COLUMNS = (
    "incident_id", "kind", "severity", "status", "job_name", "group_id", "run_ids", "partitions",
    "records_lost", "records_unverifiable", "records_duplicated", "records_replayed", "max_commit_lag",
    "finding_ids",
)  # fmt: skip
GROUP_COMMIT_COLUMNS = ("partition", "committed_offset", "log_offset")
RESTART_COLUMNS = (
    "job_name", "run_id", "previous_run_id", "group_id", "topic", "partition", "resumed_offset",
    "resume_source", "classification", "records_replayed", "records_skipped", "duplicates_observed",
)  # fmt: skip


def rows(table: Any, columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(r[c] for c in columns) for r in table.select(list(columns)).to_pylist()),
        key=lambda t: tuple((v is None, str(v)) for v in t),
    )


@dataclass(frozen=True)
class Local:
    """An in-process run of a command over the local copy: its exit code and --json summary."""

    code: int
    summary: dict[str, Any]


@dataclass(frozen=True)
class Night:
    job: str
    topic: str
    group: str
    s3_data: str
    local_data: Path
    stream: Submitted
    stages: dict[str, Submitted]  # stage -> its spark-submit
    nightly: Submitted
    local: dict[str, Local]  # stage or "nightly" -> the same command in-process
    # Findings rows after the stages, before the night: (on s3a, local).
    findings_before_night: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]
    work_dir: Path


def stage_args(group: str) -> dict[str, list[str]]:
    """The tier's options after README's own for each single-stage submit (and its local twin)."""
    return {
        "ingest-offsets": ["--run-id", f"{STAGE_RUN}-ingest", "--set", f"ingest.groups=[{group}]"],
        "reconcile": ["--run-id", STAGE_RUN],
        "forensics": ["--run-id", STAGE_RUN],
        "check": ["--run-id", STAGE_RUN, "--reconcile-run", STAGE_RUN],
        "report": ["--run-id", STAGE_RUN],
    }


def run_locally(job: str, args: list[str], local_data: Path, bootstrap: str) -> Local:
    """README's `submit <job>` options and ``args``, run by the CLI in this process's local session
    (tests/conftest.py) over the local copy."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            [job, *readme.cluster_block().options(job), *args,
             "--set", f"paths.data_dir={local_data}", "--set", f"kafka.bootstrap_servers={bootstrap}"]
        )  # fmt: skip
    lines = [line for line in out.getvalue().splitlines() if line.startswith("{")]
    assert lines, f"no JSON summary from the local {job}:\n{out.getvalue()[-2000:]}"
    summary: dict[str, Any] = json.loads(lines[-1])
    return Local(code, summary)


def failed_suites(check_summary: dict[str, Any]) -> set[str]:
    """The suites with a failed expectation in a `check --json` summary."""
    return {s["suite"] for s in check_summary["suites"] if s["failed"]}


def reset_group_offset(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    """An operator's offset reset: a commit no ledger event explains."""
    admin = AdminClient(plain_conf(bootstrap))
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, partition, offset)])
    admin.alter_consumer_group_offsets([request], request_timeout=KAFKA_TIMEOUT_S)[group].result(
        KAFKA_TIMEOUT_S
    )


def damage_sink(sink_path: Path) -> None:
    """A GAP (rows deleted) and a DUPLICATE (a second writer's copies), in two Delta commits."""
    table = DeltaTable(str(sink_path))
    part, start, end = COPIES
    copies = table.to_pyarrow_table(
        filters=[("kafka_partition", "=", part), ("kafka_offset", ">=", start), ("kafka_offset", "<", end)]
    )
    assert copies.num_rows == end - start
    run_column = copies.schema.get_field_index("_run_id")
    copies = copies.set_column(
        run_column,
        copies.schema.field(run_column),
        pa.array(["second-writer"] * copies.num_rows, pa.string()),
    )
    write_deltalake(str(sink_path), copies, mode="append")
    part, start, end = GAP
    DeltaTable(str(sink_path)).delete(
        f"kafka_partition = {part} AND kafka_offset >= {start} AND kafka_offset < {end}"
    )


@pytest.fixture(scope="module")
def night(
    spark_cluster: SparkCluster,
    s3_server: S3Server,
    cluster_jars: list[Path],
    bootstrap: str,
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
) -> Night:
    work_dir = tmp_path_factory.mktemp("stages")
    unique = uuid.uuid4().hex[:8]
    job, topic, group = f"cluster-{unique}", f"orders-{unique}", f"offset-audit-{unique}"
    prefix = f"night-{unique}"
    s3_data = f"s3a://{s3_server.bucket}/{prefix}"
    create_topic(bootstrap, topic, PARTITIONS)
    produced_at = datetime.now(UTC) - RECORD_AGE
    produce(bootstrap, topic, RECORDS, PARTITIONS, timestamp_ms=int(produced_at.timestamp() * 1000))

    def submit(stage: str, args: list[str]) -> Running:
        return spark_submit(spark_cluster, s3_server, cluster_jars, bootstrap, s3_data, stage, args, work_dir)

    stream_args = [
        "--max-batches", str(BATCHES), "--run-id", f"stream-{unique}", "--json",
        "--set", f"stream.job_name={job}", "--set", f"stream.topics=[{topic}]",
        "--set", f"stream.group_id={group}", "--set", "stream.trigger_interval=1 second",
        "--set", f"stream.max_offsets_per_trigger={RECORDS // BATCHES}",
    ]  # fmt: skip
    with submit("stream", stream_args) as running:
        stream = running.finish()
    assert stream.returncode == 0, stream.stderr[-6000:]

    # The same tables on local disk; the damage is done there and the changed files copied back.
    local_data = work_dir / "local"
    client = s3_server.client()
    for table in ("ledger", "sink"):
        assert scenario.download_tree(
            client, s3_server.bucket, f"{prefix}/tables/{table}", local_data / "tables" / table
        )
    damage_sink(local_data / "tables" / "sink")
    scenario.upload_tree(local_data / "tables" / "sink", client, s3_server.bucket, f"{prefix}/tables/sink")
    reset_group_offset(bootstrap, group, topic, *RESET)

    args = stage_args(group)
    night_args = ["--run-id", NIGHT, "--set", f"ingest.groups=[{group}]"]
    local: dict[str, Local] = {}
    local_findings: list[tuple[Any, ...]] = []
    stages: dict[str, Submitted] = {}
    for stage in STAGES:
        with submit(stage, args[stage]) as running:
            if not local:
                # Meanwhile, the same stages and night in this process's local session, over the copy.
                for same in STAGES:
                    local[same] = run_locally(same, args[same], local_data, bootstrap)
                local_findings = rows(read_table(str(local_data / "tables" / "findings")), FINDING_COLUMNS)
                local["nightly"] = run_locally("nightly", night_args, local_data, bootstrap)
            stages[stage] = running.finish()
        assert stages[stage].returncode in (0, 1), stages[stage].stderr[-6000:]
    findings = rows(read_table(f"{s3_data}/tables/findings", s3_server), FINDING_COLUMNS)
    with submit("nightly", night_args) as running:
        nightly = running.finish()
    return Night(
        job, topic, group, s3_data, local_data, stream, stages, nightly, local, (findings, local_findings),
        work_dir,
    )  # fmt: skip


def both(night: Night, s3: S3Server, table: str, columns: tuple[str, ...]) -> tuple[list[Any], list[Any]]:
    """``table``'s rows (``columns``, sorted) on s3a and in the local copy."""
    on_s3 = rows(read_table(f"{night.s3_data}/tables/{table}", s3), columns)
    local = rows(read_table(str(night.local_data / "tables" / table)), columns)
    return on_s3, local


def test_the_readme_block_has_the_submit_lines_the_tier_runs() -> None:
    block = readme.cluster_block()
    assert set(block.invocations) == {"stream", "nightly", *STAGES}
    assert "python -m zipfile -c offset_audit.zip app checks" in block.prelude


def test_stream_on_the_cluster_reads_every_record_into_the_s3a_sink_and_ledger(
    night: Night, s3_server: S3Server
) -> None:
    summary = night.stream.summary()
    assert (summary["batches"], summary["input_rows"], summary["failed_commits"]) == (BATCHES, RECORDS, 0)
    assert summary["successful_commits"] >= 1
    ledger = read_table(f"{night.s3_data}/tables/ledger", s3_server)
    completed = ledger.filter(pc.equal(ledger.column("event_type"), "CHECKPOINT_COMPLETED"))
    assert len(set(completed.column("checkpoint_id").to_pylist())) == BATCHES
    assert {e for e in ledger.column("event_type").to_pylist()} >= {"RUN_STARTED", "RUN_STOPPED"}


def test_micro_batches_ran_in_the_workers_executors(night: Night) -> None:
    executors = executors_added(night.stream.event_log_dir)
    reads = tasks_reading_kafka(night.stream.event_log_dir)
    assert reads, "no task read the topic"
    assert "driver" not in executors
    assert {t.executor_id for t in reads} <= set(executors), (reads, executors)


def test_each_stage_on_the_cluster_over_s3a_finds_what_it_finds_locally(
    night: Night, s3_server: S3Server
) -> None:
    codes = {stage: night.stages[stage].returncode for stage in STAGES}
    assert codes == {stage: night.local[stage].code for stage in STAGES}
    reconcile, local_reconcile = night.stages["reconcile"].summary(), night.local["reconcile"].summary
    for key in ("findings", "failing_findings", "partitions", "gaps_suspected"):
        assert reconcile[key] == local_reconcile[key], key
    assert night.stages["forensics"].summary()["failing"] == night.local["forensics"].summary["failing"]
    check, local_check = night.stages["check"].summary(), night.local["check"].summary
    assert check["failing_expectations"] == local_check["failing_expectations"]
    # The GAP's window is final on both sides (RECORD_AGE), so both judge its lost records.
    assert failed_suites(check) == failed_suites(local_check)
    assert "completeness.floor" in failed_suites(check)

    findings, expected = both(night, s3_server, "findings", FINDING_COLUMNS)
    assert findings == expected
    by_type = {(r[1], r[7], r[10], r[11]) for r in findings}
    assert ("GAP", *GAP) in by_type
    assert any(t == "DUPLICATE" and p == COPIES[0] for t, p, _, _ in by_type), by_type
    assert any(t == "FOREIGN_COMMIT" and p == RESET[0] for t, p, _, _ in by_type), by_type
    for table, columns in (
        ("incidents", INCIDENT_COLUMNS),
        ("partition_summary", SUMMARY_COLUMNS),
        ("restarts", RESTART_COLUMNS),
    ):
        on_s3, local = both(night, s3_server, table, columns)
        assert on_s3 == local, table
    group_commits, local_commits = both(night, s3_server, "group_commits", GROUP_COMMIT_COLUMNS)
    assert group_commits
    assert group_commits == local_commits


def test_the_night_after_the_stages_adds_no_finding_on_the_cluster_as_locally(
    night: Night, s3_server: S3Server
) -> None:
    assert night.nightly.returncode in (0, 1), night.nightly.stderr[-6000:]
    summary, local = night.nightly.summary(), night.local["nightly"]
    night_steps = [(step, "done") for step in (*STAGES, "maintain")]  # the night ends with maintain
    assert [(s["step"], s["status"]) for s in summary["steps"]] == night_steps
    assert [(s["step"], s["status"]) for s in local.summary["steps"]] == night_steps
    assert (night.nightly.returncode, summary["findings"], summary["failed_expectations"]) == (
        local.code,
        local.summary["findings"],
        local.summary["failed_expectations"],
    )
    findings, local_findings = both(night, s3_server, "findings", FINDING_COLUMNS)
    assert (findings, local_findings) == night.findings_before_night


def test_decoding_and_sink_scans_ran_in_the_workers_executors(night: Night) -> None:
    ingest, reconcile = night.stages["ingest-offsets"].event_log_dir, night.stages["reconcile"].event_log_dir
    decode = tasks_reading_kafka(ingest)
    scans = tasks_scanning(reconcile, f"{night.s3_data}/tables/sink")
    assert decode, "no task read __consumer_offsets"
    assert scans, "no task scanned the sink"
    for log_dir, tasks in ((ingest, decode), (reconcile, scans)):
        executors = executors_added(log_dir)
        assert "driver" not in executors
        assert {t.executor_id for t in tasks} <= set(executors), (tasks, executors)


def test_the_dashboard_and_data_docs_are_on_the_drivers_disk(night: Night) -> None:
    for run in (night.stages["report"], night.nightly):
        summary = run.summary()
        report = Path(summary["report"])
        assert report.is_relative_to(night.work_dir), report
        assert report.is_file()
    for run_name in ("check", "nightly"):
        assert (night.work_dir / f"local-{run_name}" / "data_docs" / "index.html").is_file()


def test_no_secret_appears_in_any_output_or_event_log(night: Night) -> None:
    for run in (night.stream, *night.stages.values(), night.nightly):
        written = run.stdout + run.stderr + json.dumps(event_log(run.event_log_dir))
        assert S3_SECRET_KEY not in written
        assert KAFKA_PASSWORD not in written  # in conf/cluster.yaml's sasl.jaas.config and librdkafka's
