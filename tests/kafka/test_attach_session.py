"""`attach_session`: the queries a session starts after it are attached by their query name, those
reading Kafka only (real broker, Spark, Delta).

One job lives one life per module (`restart`): audited through `attach_session` in a driver of its
own (its query attached at its first progress report, after its first batch completed), killed with
SIGKILL, then started again on its checkpoint in this process under its query name, beside a query
that reads files, in a session audited the same way. Each test asserts one claim on what it left.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app.audit import attach_session
from app.contracts import vocabulary as vocab
from app.contracts.offsets import TopicPartitionKey
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
)
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka

BATCHES = 12  # one a second: the driver is killed long before it read them all


@dataclass(frozen=True)
class Restart:
    reached: dict[int, dict[TopicPartitionKey, int]]  # the checkpoint's batches when the driver died
    batches: dict[int, dict[TopicPartitionKey, int]]  # and once the restart read everything
    attachments: list[str]
    closed: bool  # the session's audit closed in time
    payments: str  # the restart's run id
    files: str  # the run id of the query that reads files
    ledger: DataFrame
    found: list[Any]
    restarts: list[dict[str, Any]]


@pytest.fixture(scope="module")
def restart(spark: SparkSession, bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Restart:
    root = tmp_path_factory.mktemp("session")
    topic = f"pay-k-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, BATCHES * PER_TRIGGER)
    checkpoint, sink, ledger_path = root / "cp", root / "payments", root / "ledger"
    files = root / "files"
    files.mkdir()
    (files / "part-0.json").write_text(json.dumps({"id": 1, "amount": 1.5, "kind": "payment"}) + "\n")
    since = datetime.now(UTC) - timedelta(minutes=1)
    args = [bootstrap, topic, str(checkpoint), str(sink), str(ledger_path), JOB, str(root / "driver")]

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

    # Restarted under its query name (the job's name), with no namer: the session's default.
    audit = attach_session(spark, ledger=str(ledger_path))
    payments = payments_query(kafka(spark, bootstrap, "subscribe", topic), checkpoint, sink, name=JOB)
    not_kafka = (
        spark.readStream.schema(PAYMENT_SCHEMA)
        .json(str(files))
        .writeStream.format("delta")
        .queryName("json-files")
        .option("checkpointLocation", str(root / "cp-files"))
        .trigger(availableNow=True)
        .start(str(root / "copied"))
    )
    for query in (payments, not_kafka):
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not end in time"
        assert query.exception() is None
    closed = audit.close(QUERY_TIMEOUT_S)

    cfg = audit_config(root, bootstrap, sink, ledger_path)
    found = reconcile(spark, cfg, "rec-session-kill", since)
    restarts = run_forensics(spark, cfg, AuditRun(run_id="fx-session", now=datetime.now(UTC), since=since))
    return Restart(
        reached,
        checkpoint_batches(checkpoint),
        list(audit.attachments),
        closed,
        str(payments.runId),
        str(not_kafka.runId),
        spark.read.format("delta").load(str(ledger_path)),
        found,
        restarts.restarts,
    )


def test_the_driver_was_killed_before_it_read_everything(restart: Restart) -> None:
    assert len(restart.reached) < BATCHES


def test_session_attaches_each_kafka_query_it_starts_and_no_other(restart: Restart) -> None:
    assert restart.closed
    assert restart.attachments == [restart.payments]
    runs = {r.run_id for r in restart.ledger.select("run_id").distinct().collect()}
    assert restart.files not in runs


def test_session_attaches_a_query_under_its_query_name(restart: Restart) -> None:
    restarted = restart.ledger.where(F.col("run_id") == restart.payments)
    assert {r.job_name for r in restarted.select("job_name").distinct().collect()} == {JOB}


def test_the_restart_records_every_batch_it_completed_and_its_stop_once(restart: Restart) -> None:
    restarted = restart.ledger.where(F.col("run_id") == restart.payments)
    done = {b: ends for b, ends in restart.batches.items() if b > max(restart.reached)}
    assert done  # else the test would prove nothing
    assert events_by_batch(restarted, "CHECKPOINT_COMPLETED") == done
    assert restarted.where(F.col("event_type") == "RUN_STOPPED").count() == 1


def test_the_restarts_start_is_dated_before_its_first_batch_however_late_the_attach_came(
    restart: Restart,
) -> None:
    restarted = restart.ledger.where(F.col("run_id") == restart.payments)
    [started] = restarted.where(F.col("event_type") == "RUN_STARTED").collect()
    completions = restarted.where(F.col("event_type") == "CHECKPOINT_COMPLETED")
    [(first_completed,)] = completions.agg(F.min("event_time")).collect()
    assert started.event_time <= first_completed


def test_the_restart_restores_where_the_last_committed_batch_ended(restart: Restart) -> None:
    restarted = restart.ledger.where(F.col("run_id") == restart.payments)
    restored = run_events(restarted, "OFFSETS_RESTORED")
    assert {(r.topic, r.partition): r.offset for r in restored} == restart.reached[max(restart.reached)]


def test_an_exact_restart_of_a_session_attached_job_killed_with_sigkill_is_judged_exact(
    restart: Restart,
) -> None:
    """Nothing at warn or above, and forensics says exact on every partition."""
    assert at_least_warn(restart.found) == []
    assert vocab.UNCLEAN_STOP in {
        f.finding_type for f in restart.found
    }  # the kill was seen, and judged harmless
    assert {(r["partition"], r["classification"]) for r in restart.restarts} == {
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
