"""`attach_session`: the queries a session starts after it are attached by their query name, those
reading Kafka only (real broker, Spark, Delta)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app.attach import attach_session
from app.contracts import vocabulary as vocab
from app.reconcile.forensics.run import run_forensics
from app.reconcile.outputs import AuditRun
from tests.kafka.user_jobs import (
    JOB,
    PARTITIONS,
    PAYMENT_SCHEMA,
    PER_TRIGGER,
    QUERY_TIMEOUT_S,
    at_least_warn,
    audit_config,
    checkpoint_batches,
    events_by_batch,
    failing_query,
    kafka,
    payments_query,
    produce_payments,
    reconcile,
    run_events,
    run_then_kill,
    start_job,
)
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka


def test_session_attaches_each_kafka_query_it_starts_under_its_query_name(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = f"pay-s-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, 100)
    files = tmp_path / "files"
    files.mkdir()
    (files / "part-0.json").write_text(json.dumps({"id": 1, "amount": 1.5, "kind": "payment"}) + "\n")
    ledger_path = str(tmp_path / "ledger")

    audit = attach_session(spark, ledger=ledger_path)
    raw = kafka(spark, bootstrap, "subscribe", topic)
    payments = payments_query(raw, tmp_path / "cp", tmp_path / "payments", name="payments")
    not_kafka = (
        spark.readStream.schema(PAYMENT_SCHEMA)
        .json(str(files))
        .writeStream.format("delta")
        .queryName("json-files")
        .option("checkpointLocation", str(tmp_path / "cp-files"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "copied"))
    )
    for query in (payments, not_kafka):
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not end in time"
        assert query.exception() is None
    assert audit.close(QUERY_TIMEOUT_S)

    assert list(audit.attachments) == [str(payments.runId)]
    ledger = spark.read.format("delta").load(ledger_path)
    assert {r.job_name for r in ledger.select("job_name").distinct().collect()} == {"payments"}
    batches = checkpoint_batches(tmp_path / "cp")
    assert events_by_batch(ledger, "CHECKPOINT_COMPLETED") == batches
    assert ledger.where(F.col("event_type") == "RUN_STOPPED").count() == 1


def test_an_exact_restart_of_a_session_attached_job_killed_with_sigkill_is_judged_exact(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """The job audited through `attach_session` (its query attached at its first progress report,
    after its first batch completed), killed with SIGKILL, then started again on its checkpoint
    and attached the same way: the restart resumed exactly where the last committed batch ended,
    so nothing is at warn or above and forensics says exact on every partition. The new run's start
    is dated before its first batch's completion, however late the attach came."""
    topic = f"pay-k-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    batches = 20  # one a second: the driver is killed long before it read them all
    produce_payments(bootstrap, topic, batches * PER_TRIGGER)
    checkpoint, sink, ledger_path = tmp_path / "cp", tmp_path / "payments", tmp_path / "ledger"
    since = datetime.now(UTC) - timedelta(minutes=1)
    args = [bootstrap, topic, str(checkpoint), str(sink), str(ledger_path), JOB, str(tmp_path / "driver")]

    def two_batches_in_the_ledger() -> bool | None:
        """Two committed batches and the killed run's start and first batch in its ledger (its
        creation, the run's start and a batch are three Delta commits): the restart then has a
        previous run to be judged against."""
        if not (checkpoint / "commits").is_dir() or len(checkpoint_batches(checkpoint)) < 2:
            return None
        ledger_commits = list((ledger_path / "_delta_log").glob("*.json"))
        return True if len(ledger_commits) >= 3 else None

    run_then_kill([*args, "a", "--session"], two_batches_in_the_ledger, "two batches of the driver")
    reached = checkpoint_batches(checkpoint)
    assert len(reached) < batches  # killed before it read everything

    with attach_session(spark, ledger=str(ledger_path), job_name=lambda _query: JOB) as audit:
        query = start_job("a", kafka(spark, bootstrap, "subscribe", topic), checkpoint, sink)
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not read everything in time"
    assert list(audit.attachments) == [str(query.runId)]
    resumed_at = reached[max(reached)]

    ledger = spark.read.format("delta").load(str(ledger_path))
    restart = ledger.where(F.col("run_id") == str(query.runId))
    [started] = restart.where(F.col("event_type") == "RUN_STARTED").collect()
    completions = restart.where(F.col("event_type") == "CHECKPOINT_COMPLETED")
    [(first_completed,)] = completions.agg(F.min("event_time")).collect()
    assert started.event_time <= first_completed
    restored = run_events(restart, "OFFSETS_RESTORED")
    assert {(r.topic, r.partition): r.offset for r in restored} == resumed_at

    cfg = audit_config(tmp_path, bootstrap, sink, ledger_path)
    found = reconcile(spark, cfg, "rec-session-kill", since)
    assert at_least_warn(found) == []
    assert vocab.UNCLEAN_STOP in {f.finding_type for f in found}  # the kill was seen, and judged harmless
    restarts = run_forensics(spark, cfg, AuditRun(run_id="fx-session", now=datetime.now(UTC), since=since))
    assert {(r["partition"], r["classification"]) for r in restarts.restarts} == {
        (p, vocab.RESTART_EXACT) for p in range(PARTITIONS)
    }


def test_leaving_a_with_block_of_attach_session_by_a_failed_query_writes_the_run_end(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """`with attach_session(...)` around a query whose second batch fails: awaitTermination raises
    out of the block, and the attached run still gets its RUN_STOPPED, naming the failure."""
    topic = f"pay-f-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, 3 * PER_TRIGGER)
    ledger_path = tmp_path / "ledger"

    started: list[StreamingQuery] = []

    def the_users_driver() -> None:
        with attach_session(spark, ledger=str(ledger_path)):
            query = failing_query(kafka(spark, bootstrap, "subscribe", topic), tmp_path / "cp", name=JOB)
            started.append(query)
            query.awaitTermination(QUERY_TIMEOUT_S)

    with pytest.raises(StreamingQueryException):
        the_users_driver()

    [stopped] = run_events(spark.read.format("delta").load(str(ledger_path)), "RUN_STOPPED")
    assert stopped.run_id == str(started[0].runId)
    assert json.loads(stopped.detail)[vocab.DETAIL_REASON].startswith("query failed")
