"""`attach_session`: the queries a session starts after it are attached by their query name, those
reading Kafka only (real broker, Spark, Delta)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.attach import attach_session
from tests.kafka.streaming import create_topic
from tests.kafka.user_jobs import (
    PARTITIONS,
    PAYMENT_SCHEMA,
    QUERY_TIMEOUT_S,
    checkpoint_batches,
    events_by_batch,
    kafka,
    payments_query,
    produce_payments,
)

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
