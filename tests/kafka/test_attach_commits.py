"""A user's own query attached with `group_id`: its batches' end offsets reach the consumer group,
and the group's commits reconcile cleanly with the ledger until an operator resets the group.

Real broker, Spark and Delta. The query is a 1:1 copy written as a user writes one: Spark's Kafka
source into Spark's own Delta sink, its coordinate columns under the user's names (told to
`reconcile` through `reconcile.sink_*_column`), so `reconcile` judges ledger, commits and sink.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

import app.stream.attach as attach_module
from app.audit import attach
from app.config import AppConfig
from app.contracts import vocabulary as vocab
from app.contracts.offsets import LedgerEvent
from app.kafka.clients import plain_conf
from app.offsets_topic.run import ingest_offsets
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.storage.tables import tables_from_config
from app.stream.ledger import LedgerWriter
from tests.kafka.user_jobs import (
    PARTITIONS,
    PER_TRIGGER,
    checkpoint_batches,
    kafka,
    produce_payments,
    run_to_end,
)
from tests.support.kafka_admin import alter_group
from tests.support.streaming import create_topic, group_offsets, job_config, read

pytestmark = pytest.mark.kafka

RECORDS = 5 * PER_TRIGGER // 2  # 100: three batches of at most 40
SINK_COLUMNS = ("src_topic", "src_partition", "src_offset")


def copy_query(
    spark: SparkSession, bootstrap: str, topic: str, checkpoint: Path, sink: str
) -> StreamingQuery:
    """The user's job: every record with its coordinates under the user's own column names."""
    raw = kafka(spark, bootstrap, "subscribe", topic)
    rows = raw.select(
        *(
            F.col(c).alias(name)
            for c, name in zip(("topic", "partition", "offset"), SINK_COLUMNS, strict=True)
        ),
        F.col("value").cast("string").alias("payload"),
    )
    return (
        rows.writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(sink)
    )


def sink_options(group: str, job: str, tmp_path: Path, bootstrap: str, topic: str) -> AppConfig:
    columns = zip(("topic", "partition", "offset"), SINK_COLUMNS, strict=True)
    overrides = (f"reconcile.sink_{part}_column={name}" for part, name in columns)
    return job_config(tmp_path, bootstrap, topic, group, job, *overrides)


def warn_or_worse(spark: SparkSession, cfg: AppConfig, run_id: str) -> list[tuple[str, str]]:
    findings = read(spark, cfg, "findings").where(F.col("reconcile_run_id") == run_id)
    serious = findings.where(F.col("severity").isin(vocab.CRITICAL, vocab.ERROR, vocab.WARN))
    return [(f.finding_type, f.severity) for f in serious.collect()]


def test_group_commits_match_the_last_batch_and_a_reset_is_foreign(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic, group, job = f"pay-c-{unique}", f"pay-c-{unique}", "payments-copy"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, RECORDS)
    cfg = sink_options(group, job, tmp_path, bootstrap, topic)
    tables = tables_from_config(cfg)
    started = datetime.now(UTC) - timedelta(minutes=1)

    query = copy_query(spark, bootstrap, topic, tmp_path / "cp", tables.sink_for(job))
    audit = attach(
        query,
        job_name=job,
        ledger=tables.ledger,
        group_id=group,
        kafka_options={"bootstrap.servers": bootstrap},
    )
    run_to_end(query, audit)

    # The group holds the last completed batch's end offsets: Spark's next-to-read, unchanged.
    batches = checkpoint_batches(tmp_path / "cp")
    assert len(batches) == 3
    last = batches[max(batches)]
    assert group_offsets(bootstrap, group, topic, PARTITIONS) == {
        p: last[(topic, p)] for p in range(PARTITIONS)
    }
    assert sum(last.values()) == RECORDS

    ledger = read(spark, cfg, "ledger")
    assert {r.group_id for r in ledger.collect()} == {group}
    requested = ledger.where(F.col("event_type") == vocab.EVENT_COMMIT_REQUESTED)
    assert max(r.checkpoint_id for r in requested.collect()) == max(batches)
    succeeded = ledger.where(
        (F.col("event_type") == vocab.EVENT_COMMIT_SUCCEEDED) & (F.col("checkpoint_id") == max(batches))
    )
    assert {(r.topic, r.partition): r.offset for r in succeeded.collect()} == last
    assert ledger.where(F.col("event_type") == vocab.EVENT_COMMIT_FAILED).count() == 0
    [stopped] = ledger.where(F.col("event_type") == vocab.EVENT_RUN_STOPPED).collect()
    detail = json.loads(stopped.detail)
    assert detail["failed_commits"] == 0
    assert detail["successful_commits"] >= 1
    assert audit.commits is not None
    assert audit.commits.committer.successful_commits == detail["successful_commits"]

    # A clean run: the group's commits, the ledger and the sink agree.
    ingest_offsets(spark, cfg, bootstrap, [group], run_id="ingest-1")
    run_reconcile(spark, cfg, AuditRun(run_id="rec-1", now=datetime.now(UTC)))
    assert warn_or_worse(spark, cfg, "rec-1") == []

    # An operator resets partition 0 to earliest after the job stopped: not the job's commit.
    alter_group(AdminClient(plain_conf(bootstrap)), group, topic, 0, 0)
    ingest_offsets(spark, cfg, bootstrap, [group], run_id="ingest-2")
    run_reconcile(spark, cfg, AuditRun(run_id="rec-2", now=datetime.now(UTC), since=started))
    # The reset also moves the group's offset backwards (a regression), and it is nobody's mismatch.
    assert sorted(warn_or_worse(spark, cfg, "rec-2")) == [
        (vocab.COMMIT_REGRESSION, vocab.ERROR),
        (vocab.FOREIGN_COMMIT, vocab.ERROR),
    ]
    [foreign] = (
        read(spark, cfg, "findings")
        .where((F.col("reconcile_run_id") == "rec-2") & (F.col("finding_type") == vocab.FOREIGN_COMMIT))
        .collect()
    )
    assert (foreign.job_name, foreign.group_id, foreign.partition, foreign.offset_start) == (job, group, 0, 0)


class CrashingWriter(LedgerWriter):
    """The ledger of a driver that dies at batch CRASH_AT: that write and every later one fail, so
    the ledger lacks that batch, the later ones, the commit outcomes and RUN_STOPPED, while the
    commit of batch CRASH_AT has already been sent to the group."""

    CRASH_AT = 1
    crashed = False

    def write(self, events: Sequence[LedgerEvent], batch_id: int) -> bool:
        if batch_id >= self.CRASH_AT:
            CrashingWriter.crashed = True
        if CrashingWriter.crashed:
            raise OSError("the driver died")
        return super().write(events, batch_id)

    def write_new(self, events: Sequence[LedgerEvent]) -> int:
        if CrashingWriter.crashed:
            raise OSError("the driver died")
        return super().write_new(events)


def test_commit_of_a_batch_the_dead_run_never_recorded_is_claimed_by_its_recovery(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run dies after its commit of batch 1 reached the group but before the ledger held it: the
    next attach recovers the batch as that group's completion, so the commit is the job's own
    (no FOREIGN_COMMIT), and the restart resumes exactly: nothing at warn or above."""
    topic, group, job = f"pay-r-{unique}", f"pay-r-{unique}", "payments-crash"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, RECORDS)
    cfg = sink_options(group, job, tmp_path, bootstrap, topic)
    tables = tables_from_config(cfg)
    monkeypatch.setattr(attach_module, "RETRY_WAIT_S", 0.01)
    monkeypatch.setattr(CrashingWriter, "crashed", False)

    def run() -> attach_module.Attachment:
        query = copy_query(spark, bootstrap, topic, tmp_path / "cp", tables.sink_for(job))
        options = {"bootstrap.servers": bootstrap}
        audit = attach(query, job_name=job, ledger=tables.ledger, group_id=group, kafka_options=options)
        run_to_end(query, audit)
        return audit

    with monkeypatch.context() as patch:
        patch.setattr(attach_module, "LedgerWriter", CrashingWriter)
        dead = run()
    assert CrashingWriter.crashed
    assert dead.ledger_write_failures >= 2
    first = checkpoint_batches(tmp_path / "cp")
    sent = first[CrashingWriter.CRASH_AT]
    assert group_offsets(bootstrap, group, topic, PARTITIONS) == {
        p: sent[(topic, p)] for p in range(PARTITIONS)
    }
    ledger = read(spark, cfg, "ledger")
    assert ledger.where(F.col("checkpoint_id") >= CrashingWriter.CRASH_AT).count() == 0

    produce_payments(bootstrap, topic, PER_TRIGGER, start=RECORDS)
    audit = run()
    batches = checkpoint_batches(tmp_path / "cp")
    last = batches[max(batches)]
    assert group_offsets(bootstrap, group, topic, PARTITIONS) == {
        p: last[(topic, p)] for p in range(PARTITIONS)
    }
    assert audit.recovered_events > 0
    ledger = read(spark, cfg, "ledger")
    recovered = ledger.where(
        (F.col("event_type") == vocab.EVENT_CHECKPOINT_COMPLETED)
        & (F.col("checkpoint_id") == CrashingWriter.CRASH_AT)
    ).collect()
    assert {(r.group_id, json.loads(r.detail).get("recovered")) for r in recovered} == {(group, True)}

    ingest_offsets(spark, cfg, bootstrap, [group], run_id="ingest-1")
    run_reconcile(spark, cfg, AuditRun(run_id="rec-1", now=datetime.now(UTC)))
    assert warn_or_worse(spark, cfg, "rec-1") == []
