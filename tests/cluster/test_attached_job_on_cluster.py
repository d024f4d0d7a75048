"""A user's own job attached on the cluster, every table on s3a://: `user_job.py` (JSON parse +
filter + select into Spark's Delta sink, its checkpoint on s3a://, the audit attached in one line
with a consumer group) submitted to the standalone cluster with the library as the `--py-files` zip
`make dist` builds, as README's "Audit your own job" ships it. Then `ingest-offsets` and
`reconcile` as README's cluster block submits them, the job in `delta_batches` mode: the ledger
holds exactly the checkpoint's batches, the group's commits are the last batch's end, and nothing
is at warning or above. Last, the sink is restored (delta-rs, on s3a://) to before its last batch,
and `reconcile` names that batch as lost, with its Delta version and offsets, from the sink's
transaction log on the object store.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from app.contracts import vocabulary as vocab
from app.contracts.offsets import TopicPartitionKey
from app.kafka.clients import plain_conf
from app.stream.startup import parse_offset_log
from tests.cluster.servers import S3_SECRET_KEY, S3Server, SparkCluster
from tests.cluster.submit import (
    Submitted,
    delta_rs_s3_options,
    event_log,
    py_files_of,
    read_table,
    spark_submit,
    submit_user_job,
)
from tests.support.streaming import create_topic, deliver, group_offsets

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(2400)]

JOB = "payments"
PARTITIONS = 2
PER_TRIGGER = 40  # maxOffsetsPerTrigger: records per batch over both partitions
BATCHES = 3
RECORDS = BATCHES * PER_TRIGGER
USER_JOB = Path(__file__).with_name("user_job.py")


@dataclass(frozen=True)
class Attached:
    topic: str
    group: str
    prefix: str  # the run's tables and checkpoint under s3://bucket/prefix/
    s3_data: str
    since: datetime  # before the job started: the reconcile window's start
    job: Submitted
    ingest: Submitted
    clean: Submitted  # reconcile of the undamaged sink
    work_dir: Path

    @property
    def sink(self) -> str:
        return f"{self.s3_data}/{JOB}"

    @property
    def checkpoint_prefix(self) -> str:
        return f"{self.prefix}/checkpoints/{JOB}"


def produce_payments(bootstrap: str, topic: str, count: int) -> None:
    """JSON payments, every fourth a refund the job filters out."""
    producer = Producer(plain_conf(bootstrap, **{"linger.ms": 5}))
    for i in range(count):
        record = {"id": i, "amount": i * 1.5, "kind": "refund" if i % 4 == 0 else "payment"}
        producer.produce(topic, value=json.dumps(record).encode(), partition=i % PARTITIONS)
    deliver(producer)


def audit_args(run_id: str, group: str, sink: str) -> list[str]:
    """The options the audit's commands get for the user's job: its sink, its mode, its group."""
    return [
        "--run-id", run_id, "--json",
        "--set", f"ingest.groups=[{group}]",
        "--set", f"reconcile.jobs=[{JOB}]",
        "--set", f"tables.sink_by_job.{JOB}={sink}",
        "--set", f"reconcile.sink_mode_by_job.{JOB}=delta_batches",
    ]  # fmt: skip


def s3_text(s3: S3Server, key: str) -> str:
    body: bytes = s3.client().get_object(Bucket=s3.bucket, Key=key)["Body"].read()
    return body.decode()


def s3_keys(s3: S3Server, prefix: str) -> list[str]:
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix)
    return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


def checkpoint_batches(s3: S3Server, checkpoint_prefix: str) -> dict[int, dict[TopicPartitionKey, int]]:
    """The end offsets of every batch the checkpoint on s3a:// holds as committed, read from its files."""
    committed = [
        int(key.rsplit("/", 1)[1])
        for key in s3_keys(s3, f"{checkpoint_prefix}/commits/")
        if key.rsplit("/", 1)[1].isdigit()
    ]
    return {b: parse_offset_log(s3_text(s3, f"{checkpoint_prefix}/offsets/{b}")) for b in committed}


def sink_version_of(s3: S3Server, sink_prefix: str, batch: int, app_id: str) -> int:
    """The sink version whose commit carries ``batch``'s transaction id, from its log on s3a://."""
    for key in sorted(s3_keys(s3, f"{sink_prefix}/_delta_log/")):
        if not key.endswith(".json"):
            continue
        for line in s3_text(s3, key).splitlines():
            txn = json.loads(line).get("txn")
            if txn and (txn["appId"], txn["version"]) == (app_id, batch):
                return int(key.rsplit("/", 1)[1].removesuffix(".json"))
    raise AssertionError(f"no commit of batch {batch} under {sink_prefix}")


def ledger_batches(s3_data: str, s3: S3Server, event_type: str) -> dict[int, dict[TopicPartitionKey, int]]:
    ledger = read_table(f"{s3_data}/tables/ledger", s3)
    events = ledger.filter(pc.equal(ledger.column("event_type"), event_type)).to_pylist()
    out: dict[int, dict[TopicPartitionKey, int]] = {}
    for e in events:
        out.setdefault(e["checkpoint_id"], {})[(e["topic"], e["partition"])] = e["offset"]
    return out


def findings_of(s3_data: str, s3: S3Server, run_id: str) -> list[dict[str, Any]]:
    findings = read_table(f"{s3_data}/tables/findings", s3)
    return [f for f in findings.to_pylist() if f["reconcile_run_id"] == run_id]


def at_least_warn(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (f["finding_type"], f["severity"])
        for f in found
        if vocab.severity_at_least(f["severity"], vocab.WARN)
    ]


@pytest.fixture(scope="module")
def attached(
    spark_cluster: SparkCluster,
    s3_server: S3Server,
    cluster_jars: list[Path],
    dist: Path,
    bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Attached:
    work_dir = tmp_path_factory.mktemp("attached")
    unique = uuid.uuid4().hex[:8]
    topic, group, prefix = f"payments-{unique}", f"payments-spark-{unique}", f"attached-{unique}"
    s3_data = f"s3a://{s3_server.bucket}/{prefix}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, RECORDS)
    py_files = py_files_of(dist)
    since = datetime.now(UTC) - timedelta(minutes=1)

    job_args = [
        bootstrap, topic, f"{s3_data}/checkpoints/{JOB}", f"{s3_data}/{JOB}", f"{s3_data}/tables/ledger",
        JOB, group, str(PER_TRIGGER),
    ]  # fmt: skip
    with submit_user_job(
        spark_cluster, s3_server, cluster_jars, py_files, USER_JOB, job_args, work_dir
    ) as running:
        job = running.finish()
    assert job.returncode == 0, job.stderr[-6000:]

    def stage(name: str, run_id: str, *extra: str) -> Submitted:
        args = [*audit_args(run_id, group, f"{s3_data}/{JOB}"), *extra]
        with spark_submit(
            spark_cluster, s3_server, cluster_jars, bootstrap, s3_data, name, args, work_dir
        ) as running:
            return running.finish()

    ingest = stage("ingest-offsets", "attached-ingest")
    assert ingest.returncode == 0, ingest.stderr[-6000:]
    clean = stage("reconcile", "attached-clean", "--since", since.isoformat())
    return Attached(topic, group, prefix, s3_data, since, job, ingest, clean, work_dir)


def last_batch(attached: Attached, s3: S3Server) -> tuple[int, dict[TopicPartitionKey, int]]:
    batches = checkpoint_batches(s3, attached.checkpoint_prefix)
    last = max(batches)
    return last, batches[last]


def test_the_ledger_holds_exactly_the_checkpoints_batches(attached: Attached, s3_server: S3Server) -> None:
    summary = attached.job.summary()
    assert (summary["ledger_closed"], summary["query_failed"]) == (True, False)
    batches = checkpoint_batches(s3_server, attached.checkpoint_prefix)
    assert sorted(batches) == list(range(BATCHES))
    assert batches[BATCHES - 1] == {(attached.topic, p): RECORDS // PARTITIONS for p in range(PARTITIONS)}
    assert ledger_batches(attached.s3_data, s3_server, vocab.EVENT_CHECKPOINT_SNAPSHOT) == batches
    assert ledger_batches(attached.s3_data, s3_server, vocab.EVENT_CHECKPOINT_COMPLETED) == batches


def test_the_group_committed_the_last_batchs_end(
    attached: Attached, s3_server: S3Server, bootstrap: str
) -> None:
    _, ends = last_batch(attached, s3_server)
    committed = group_offsets(bootstrap, attached.group, attached.topic, PARTITIONS)
    assert committed == {p: ends[(attached.topic, p)] for p in range(PARTITIONS)}


def test_reconcile_of_the_clean_run_has_nothing_at_warning_or_above(
    attached: Attached, s3_server: S3Server
) -> None:
    assert attached.clean.returncode == 0, attached.clean.stderr[-6000:]
    summary = attached.clean.summary()
    assert (summary["jobs"], summary["partitions"], summary["failing_findings"]) == ([JOB], PARTITIONS, 0)
    assert at_least_warn(findings_of(attached.s3_data, s3_server, "attached-clean")) == []


def test_no_secret_appears_in_the_jobs_output_or_event_log(attached: Attached) -> None:
    for run in (attached.job, attached.ingest, attached.clean):
        written = run.stdout + run.stderr + json.dumps(event_log(run.event_log_dir))
        assert S3_SECRET_KEY not in written


# Last: it damages the sink the tests above read.
def test_a_sink_restored_to_before_the_last_batch_names_that_batch_as_lost(
    attached: Attached,
    s3_server: S3Server,
    spark_cluster: SparkCluster,
    cluster_jars: list[Path],
    bootstrap: str,
) -> None:
    last, ends = last_batch(attached, s3_server)
    starts = checkpoint_batches(s3_server, attached.checkpoint_prefix)[last - 1]
    version = sink_version_of(s3_server, f"{attached.prefix}/{JOB}", last, attached.job.summary()["query_id"])
    sink = DeltaTable(
        "s3://" + attached.sink.removeprefix("s3a://"), storage_options=delta_rs_s3_options(s3_server)
    )
    sink.restore(version - 1)

    args = [
        *audit_args("attached-restored", attached.group, attached.sink),
        "--since",
        attached.since.isoformat(),
    ]
    with spark_submit(
        spark_cluster,
        s3_server,
        cluster_jars,
        bootstrap,
        attached.s3_data,
        "reconcile",
        args,
        attached.work_dir,
    ) as running:
        restored = running.finish()
    assert restored.returncode in (0, 1), restored.stderr[-6000:]

    found = findings_of(attached.s3_data, s3_server, "attached-restored")
    lost = {
        (f["checkpoint_id"], f["partition"]): (
            f["offset_start"],
            f["offset_end"],
            json.loads(f["evidence"])["sink_versions"][0],
        )
        for f in found
        if f["finding_type"] == vocab.BATCH_NOT_IN_SINK
    }
    topic = attached.topic
    assert lost == {(last, p): (starts[(topic, p)], ends[(topic, p)], version) for p in range(PARTITIONS)}
    assert at_least_warn(found) == [(vocab.BATCH_NOT_IN_SINK, vocab.CRITICAL)] * PARTITIONS
