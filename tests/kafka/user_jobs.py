"""A user's own streaming jobs, written as a data team writes them, and what the tests that audit
them read (tests/kafka/test_attach*.py, test_ledger_import.py, test_sink_modes.py,
test_user_job_faults.py):

(a) Kafka JSON payments parsed, filtered and projected into a Delta table through Spark's own
    Delta sink, with no coordinate columns: the demo's job (app/demo/user_job.py), so what the
    demo shows is what these tests run;
(b) the same payments upserted by a `foreachBatch` MERGE keyed by the payment id, made idempotent
    with Delta's txn settings (`merge_payments`);
(c) a 1:1 copy of the records with their coordinates under the team's own column names
    (`COPY_COLUMNS`), through Spark's Delta sink (`copy_records`);
(i) the payments of (a) into an Iceberg table through Iceberg's streaming sink (`toTable` on a
    catalog's table name: the sink argument).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app.audit import Attachment
from app.config import AppConfig
from app.contracts import vocabulary as vocab
from app.contracts.offsets import TopicPartitionKey
from app.demo.user_job import (
    PARTITIONS,
    PAYMENT_SCHEMA,
    PER_TRIGGER,
    QUERY_TIMEOUT_S,
    kafka,
    payments,
    payments_query,
    produce_payments,
)
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.storage.tables import tables_from_config
from app.stream.ledger import event_key_column
from app.stream.startup import parse_offset_log
from tests.kafka.processes import wait_for
from tests.support.config import build_config

__all__ = [
    "COPY_COLUMNS",
    "JOB",
    "MERGE_APP_ID",
    "PARTITIONS",
    "PAYMENT_SCHEMA",
    "PER_TRIGGER",
    "QUERY_TIMEOUT_S",
    "at_least_warn",
    "audit_config",
    "batch_ranges",
    "checkpoint_batches",
    "copy_records",
    "copy_settings",
    "duplicate_keys",
    "events_by_batch",
    "failing_query",
    "kafka",
    "merge_payments",
    "payments",
    "payments_query",
    "produce_payments",
    "reconcile",
    "run_events",
    "run_then_kill",
    "run_to_end",
    "sink_version_of",
    "start_job",
]

MERGE_APP_ID: Final = "payments-upsert"
# Job (c)'s coordinate columns: reconcile's column-name settings -> the names the team chose.
COPY_COLUMNS: Final = {
    "sink_topic_column": "src_topic",
    "sink_partition_column": "src_partition",
    "sink_offset_column": "src_offset",
}


def copy_settings() -> list[str]:
    """The reconcile settings that tell the audit job (c)'s column names."""
    return [f"reconcile.{key}={name}" for key, name in COPY_COLUMNS.items()]


def copy_records(raw: DataFrame) -> DataFrame:
    """Job (c)'s transformation: every record as it came, with its coordinates renamed."""
    return raw.select(
        F.col("topic").alias(COPY_COLUMNS["sink_topic_column"]),
        F.col("partition").alias(COPY_COLUMNS["sink_partition_column"]),
        F.col("offset").alias(COPY_COLUMNS["sink_offset_column"]),
        F.col("value").cast("string").alias("payload"),
    )


def merge_payments(sink: Path | str, app_id: str = MERGE_APP_ID) -> Callable[[DataFrame, int], None]:
    """Job (b)'s foreachBatch: an upsert keyed by the payment id, made idempotent with txn ids
    (Delta's session settings for a MERGE)."""

    def upsert(batch: DataFrame, batch_id: int) -> None:
        session = batch.sparkSession
        session.conf.set("spark.databricks.delta.write.txnAppId", app_id)
        session.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            batch.createOrReplaceTempView("incoming")
            session.sql(
                f"MERGE INTO delta.`{sink}` t USING incoming s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )
        finally:
            session.conf.unset("spark.databricks.delta.write.txnAppId")
            session.conf.unset("spark.databricks.delta.write.txnVersion")

    return upsert


def start_job(
    kind: str, raw: DataFrame, checkpoint: Path | str, sink: Path | str, trigger: dict[str, Any] | None = None
) -> StreamingQuery:
    """Job ``kind`` ('a', 'b', 'c' or 'i') over the Kafka source ``raw``; ``trigger``: Spark's
    `trigger(...)` keywords (default: availableNow). Job (b)'s sink table must exist; job (i)'s
    ``sink`` is an Iceberg table's name in a catalog of the session."""
    how = trigger or {"availableNow": True}
    if kind == "a":
        return payments_query(raw, Path(checkpoint), Path(sink), trigger=how)
    if kind == "b":
        writer = payments(raw).writeStream.foreachBatch(merge_payments(sink))
        return writer.option("checkpointLocation", str(checkpoint)).trigger(**how).start()
    if kind == "c":
        writer = copy_records(raw).writeStream.format("delta").option("checkpointLocation", str(checkpoint))
        return writer.trigger(**how).start(str(sink))
    if kind == "i":
        writer = payments(raw).writeStream.format("iceberg").outputMode("append")
        writer = writer.option("checkpointLocation", str(checkpoint)).trigger(**how)
        return writer.toTable(str(sink))
    raise ValueError(f"no user job {kind!r}: a, b, c or i")


def failing_query(raw: DataFrame, checkpoint: Path | str, name: str | None = None) -> StreamingQuery:
    """A job whose second batch fails (its foreachBatch raises): the query ends in failure after
    one completed batch. ``name``: its queryName."""

    def write(batch: DataFrame, batch_id: int) -> None:
        if batch_id >= 1:
            raise RuntimeError(f"the sink refused batch {batch_id}")
        batch.count()

    writer = payments(raw).writeStream.foreachBatch(write)
    if name is not None:
        writer = writer.queryName(name)
    return writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()


def run_to_end(query: StreamingQuery, audit: Attachment) -> None:
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not read everything in time"
    assert query.exception() is None
    assert audit.close(QUERY_TIMEOUT_S), "the ledger writer did not finish"


def checkpoint_batches(checkpoint: Path) -> dict[int, dict[TopicPartitionKey, int]]:
    """The end offsets of every committed batch, read from the checkpoint's own files."""
    committed = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    return {b: parse_offset_log((checkpoint / "offsets" / str(b)).read_text()) for b in committed}


def events_by_batch(ledger: DataFrame, event_type: str) -> dict[int, dict[TopicPartitionKey, int]]:
    out: dict[int, dict[TopicPartitionKey, int]] = {}
    for r in ledger.where(F.col("event_type") == event_type).collect():
        out.setdefault(r.checkpoint_id, {})[(r.topic, r.partition)] = r.offset
    return out


def duplicate_keys(ledger: DataFrame) -> int:
    return ledger.groupBy(event_key_column().alias("k")).count().where("count > 1").count()


def run_events(ledger: DataFrame, event_type: str) -> list[Any]:
    return ledger.where(F.col("event_type") == event_type).collect()


# --- the audit of a job's run -------------------------------------------------------------------

JOB: Final = "payments"
KILL_WAIT_S: Final = 180


def audit_config(
    tmp_path: Path, bootstrap: str, sink: Path, ledger: Path, *extra: str, mode: str = "delta_batches"
) -> AppConfig:
    """The audit of job ``JOB`` (its ledger and sink), in sink mode ``mode``."""
    return build_config(
        f"kafka.bootstrap_servers={bootstrap}",
        f"tables.ledger={ledger}",
        f"tables.sink_by_job.{JOB}={sink}",
        f"reconcile.jobs=[{JOB}]",
        f"reconcile.sink_mode_by_job.{JOB}={mode}",
        "reconcile.confirm_gaps=false",
        *extra,
        data_dir=tmp_path / "audit",
    )


def reconcile(spark: SparkSession, cfg: AppConfig, run_id: str, since: datetime) -> list[Any]:
    """One reconciliation of the window since ``since``; its findings, as stored."""
    run_reconcile(spark, cfg, AuditRun(run_id=run_id, now=datetime.now(UTC), since=since))
    stored = spark.read.format("delta").load(tables_from_config(cfg).findings)
    return stored.where(F.col("reconcile_run_id") == run_id).collect()


def at_least_warn(found: list[Any]) -> list[tuple[str, str]]:
    return [(f.finding_type, f.severity) for f in found if vocab.severity_at_least(f.severity, vocab.WARN)]


def batch_ranges(checkpoint: Path, topic: str, batch: int) -> dict[int, tuple[int, int]]:
    """partition -> [start, end) of ``batch``, from the checkpoint's own offset files."""
    ends = checkpoint_batches(checkpoint)
    return {
        p: (ends[batch - 1].get((topic, p), 0) if batch else 0, ends[batch][(topic, p)])
        for p in range(PARTITIONS)
    }


def run_then_kill(args: list[str], until: Callable[[], object | None], what: str) -> None:
    """The job as its own driver process (`user_job_main` ``args``), killed with SIGKILL once
    ``until`` returns something other than None."""
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.kafka.user_job_main", *args],
        start_new_session=True,  # its own process group: the driver and its JVM die together
    )
    try:
        wait_for(until, KILL_WAIT_S, what, step_s=0.2)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(KILL_WAIT_S)


def sink_version_of(sink: Path, batch: int, app_id: str) -> int:
    """The sink version whose commit carries ``batch``'s transaction id, read as a user would."""
    log = sorted((sink / "_delta_log").glob("*.json"))
    for path in log:
        for line in path.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn and (txn["appId"], txn["version"]) == (app_id, batch):
                return int(path.stem)
    raise AssertionError(f"no commit of batch {batch}")
