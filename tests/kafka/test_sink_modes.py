"""Sink modes on a user's own jobs (real broker, Spark, Delta): the audit judges a sink without
coordinate columns by its transaction log (`delta_batches`), or not at all (`none`).

Each job is attached in one line and run to the end; its sink is then damaged as people damage
sinks, and `reconcile` must name the batch with its Delta version and offsets.

Job (a), Spark's own Delta sink, lives one life per module (`life`), each fault over offsets of
its own, reconciled after each phase; each test asserts one claim on what a phase left:

1. its driver killed with SIGKILL mid-run and the job restarted on its checkpoint: Spark's Delta
   sink skips the batch it holds already, so nothing is at warn or above (and `none` mode, which
   reads no sink, finds nothing either);
2. its checkpoint deleted while records arrive and the job restarted past the log's end: the
   ledger's restart rule names the skipped ranges and nothing else, in this mode as in any;
3. the sink restored to before the new query's last batch: that batch is named lost.

Then (b) a foreachBatch MERGE keyed by the payment id with txn ids, the same RESTORE; and a
foreachBatch appending through delta-rs with txn ids, which (unlike Spark's writer) does not skip
a transaction id the table already holds, so one batch appended twice lands twice. Job (c) (a copy
with coordinate columns) and (b)'s restarts are in test_user_job_faults.py.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import CommitProperties, Transaction, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from app.audit import attach
from app.config import AppConfig
from app.contracts import vocabulary as vocab
from app.errors import ConfigError, UsageError
from app.incidents import repair
from app.incidents.io import read_incidents
from app.incidents.remedy import ReplayStep
from app.kafka.gaps import kafka_gap_confirmer
from app.kafka.times import KafkaTimes
from app.reconcile.forensics.run import run_forensics
from app.reconcile.outputs import AuditRun
from app.reconcile.run import ReconcileResult, run_reconcile
from app.storage.handles import AuditTables
from app.storage.tables import tables_from_config
from tests.kafka.user_jobs import (
    JOB,
    MERGE_APP_ID,
    PARTITIONS,
    PER_TRIGGER,
    at_least_warn,
    audit_config,
    batch_ranges,
    checkpoint_batches,
    kafka,
    merge_payments,
    payments,
    payments_query,
    produce_payments,
    reconcile,
    run_then_kill,
    run_to_end,
    sink_version_of,
)
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka

RECORDS = 3 * PER_TRIGGER  # three batches
APP_ID_SETTING = f"reconcile.sink_app_id_by_job.{JOB}={MERGE_APP_ID}"
# Job (a)'s life, in records: six batches for the killed driver and its restart, one batch's worth
# produced while it is down with its checkpoint deleted (skipped), two batches after that.
KILLED, SKIPPED, AFTER = 6 * PER_TRIGGER, PER_TRIGGER, 2 * PER_TRIGGER
RESTORED_BATCH = 1  # of the new query: the sink restored to before it


def restore(spark: SparkSession, sink: Path, version: int) -> None:
    spark.sql(f"RESTORE TABLE delta.`{sink}` TO VERSION AS OF {version}")


def lost_batches(found: list[Any]) -> dict[tuple[int, int], tuple[int, int, int]]:
    """(batch, partition) -> (offset_start, offset_end, Delta version) of every BATCH_NOT_IN_SINK."""
    return {
        (f.checkpoint_id, f.partition): (
            f.offset_start,
            f.offset_end,
            json.loads(f.evidence)["sink_versions"][0],
        )
        for f in found
        if f.finding_type == vocab.BATCH_NOT_IN_SINK
    }


def run_attached(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    ledger: Path,
    start: Callable[[DataFrame], Any],
    starting: str = "earliest",
) -> StreamingQuery:
    """The user's job run to the end with the audit attached; its (ended) query."""
    query: StreamingQuery = start(kafka(spark, bootstrap, "subscribe", topic, starting))
    audit = attach(query, job_name=JOB, ledger=str(ledger))
    run_to_end(query, audit)
    return query


def raised(call: Callable[[], object]) -> Exception | None:
    """What ``call`` raised, if anything: a phase's outcome kept for the test that asserts it."""
    try:
        call()
    except Exception as exc:  # the claim is about which error: a test asserts it
        return exc
    return None


# --- job (a)'s life --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Life:
    cfg: AppConfig
    topic: str
    checkpoint: Path
    sink: Path
    batches_at_kill: int
    first_batches: list[int]  # the batch ids of the first checkpoint, once its job read everything
    clean: list[Any]  # 1. reconciled after the kill and the restart
    clean_sink_counts: list[int | None]
    absent_sink: Exception | None  # 1. `delta_batches` over a sink that is not there
    blind: list[Any]  # 1. `none` over the same absent sink
    first_query: str
    second_query: str
    second_run: str
    reached: dict[int, int]  # partition -> where the first checkpoint ended
    latest: dict[int, int]  # partition -> where the new checkpoint started
    restarted: list[Any]  # 2. reconciled after the restart past the end
    restarts: list[dict[str, Any]]  # 2. forensics' restarts
    read_back: ReconcileResult  # 2. reconciled with the skipped ranges read back from the source
    windows: list[Any]  # 2. its completeness windows
    lost: dict[tuple[int, int], tuple[int, int, int]]  # 3. the restored batch, as lost_batches names it
    restored: list[Any]  # 3. reconciled after the restore


@pytest.fixture(scope="module")
def life(spark: SparkSession, bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Life:
    root = tmp_path_factory.mktemp("sink-a")
    topic = f"sink-a-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, KILLED)
    checkpoint, sink, ledger = root / "cp", root / "payments", root / "ledger"
    since = datetime.now(UTC) - timedelta(minutes=1)
    cfg = audit_config(root, bootstrap, sink, ledger)

    def start(raw: DataFrame) -> Any:
        return payments_query(raw, checkpoint, sink)

    # 1. Killed while it runs (its next batch may be in the sink and not in its checkpoint's
    # commits), then started again on its checkpoint and run to the end.
    def two_committed() -> int | None:
        done = [p for p in (checkpoint / "commits").glob("*") if p.name.isdigit()]
        return len(done) if len(done) >= 2 else None

    driver = [bootstrap, topic, str(checkpoint), str(sink), str(ledger), JOB, str(root / "driver")]
    run_then_kill(driver, two_committed, "two batches of the driver to complete")
    batches_at_kill = len(checkpoint_batches(checkpoint))
    first = run_attached(spark, bootstrap, topic, checkpoint, ledger, start)
    first_batches = checkpoint_batches(checkpoint)
    clean = reconcile(spark, cfg, "rec-clean", since)
    summary = spark.read.format("delta").load(tables_from_config(cfg).partition_summary)
    counts = [r.sink_count for r in summary.where(F.col("reconcile_run_id") == "rec-clean").collect()]
    nowhere = audit_config(root, bootstrap, root / "absent", ledger)
    absent_sink = raised(lambda: reconcile(spark, nowhere, "rec-absent", since))
    only_ledger = f"reconcile.sink_mode_by_job.{JOB}=none"
    blind = reconcile(
        spark, audit_config(root, bootstrap, root / "absent", ledger, only_ledger), "rec-none", since
    )

    # 2. Its checkpoint deleted while records arrive, restarted "from latest": the log's end when
    # it restarts, which is what latest resolves to.
    reached = {p: end for (_, p), end in first_batches[max(first_batches)].items()}
    produce_payments(bootstrap, topic, SKIPPED, start=KILLED)
    shutil.rmtree(checkpoint)
    latest = {p: reached[p] + SKIPPED // PARTITIONS for p in range(PARTITIONS)}
    produce_payments(bootstrap, topic, AFTER, start=KILLED + SKIPPED)
    starting = json.dumps({topic: {str(p): o for p, o in latest.items()}})
    second = run_attached(spark, bootstrap, topic, checkpoint, ledger, start, starting)
    restarted = reconcile(spark, cfg, "rec-restart", since)
    restarts = run_forensics(spark, cfg, AuditRun(run_id="fx-restart", now=datetime.now(UTC), since=since))
    read_back = run_reconcile(
        spark,
        cfg,
        AuditRun(run_id="rec-read-back", now=datetime.now(UTC), since=since),
        confirmer=kafka_gap_confirmer(cfg.kafka, bootstrap, max_records=10_000, timeout_s=60),
        times=KafkaTimes(cfg.kafka, bootstrap, 60),
    )
    windows = (
        spark.read.format("delta")
        .load(tables_from_config(cfg).completeness)
        .where(F.col("reconcile_run_id") == "rec-read-back")
        .collect()
    )

    # 3. The sink as it was before the new query's last batch.
    version = sink_version_of(sink, RESTORED_BATCH, str(second.id))
    lost = {
        (RESTORED_BATCH, p): (start_, end, version)
        for p, (start_, end) in batch_ranges(checkpoint, topic, RESTORED_BATCH).items()
    }
    restore(spark, sink, version - 1)
    restored = reconcile(spark, cfg, "rec-restored", since)

    return Life(
        cfg,
        topic,
        checkpoint,
        sink,
        batches_at_kill,
        sorted(first_batches),
        clean,
        counts,
        absent_sink,
        blind,
        str(first.id),
        str(second.id),
        str(second.runId),
        reached,
        latest,
        restarted,
        restarts.restarts,
        read_back,
        windows,
        lost,
        restored,
    )


# --- 1. killed and restarted on its checkpoint ----------------------------------------------------


def test_the_driver_was_killed_before_it_read_everything_and_the_restart_read_the_rest(life: Life) -> None:
    assert 2 <= life.batches_at_kill < KILLED // PER_TRIGGER
    assert life.first_batches == list(range(KILLED // PER_TRIGGER))
    assert life.reached == {p: KILLED // PARTITIONS for p in range(PARTITIONS)}


def test_a_driver_killed_mid_run_and_restarted_leaves_nothing_at_warn(life: Life) -> None:
    """Spark's Delta sink skips the batch it holds already: every batch is in the sink once."""
    assert at_least_warn(life.clean) == []
    assert vocab.UNCLEAN_STOP in {
        f.finding_type for f in life.clean
    }  # the kill was seen, and judged harmless


def test_rows_are_not_counted_in_delta_batches_mode(life: Life) -> None:
    assert life.clean_sink_counts == [None] * PARTITIONS  # unknown, not zero


def test_delta_batches_mode_needs_the_sink_table(life: Life) -> None:
    assert isinstance(life.absent_sink, ConfigError)
    assert f"tables.sink_by_job.{JOB}" in str(life.absent_sink)


def test_none_mode_reads_no_sink_so_an_absent_one_changes_nothing(life: Life) -> None:
    assert at_least_warn(life.blind) == []


# --- 2. checkpoint deleted, restarted past the end -------------------------------------------------


def test_a_new_checkpoint_is_a_new_query(life: Life) -> None:
    assert life.first_query != life.second_query


def test_the_restart_past_the_end_names_the_skipped_ranges_only(life: Life) -> None:
    """The restart rules of the ledger hold in delta_batches mode, and the new checkpoint's query
    (a new id, batch ids from 0 again) is told apart from the old one: nothing else is found."""
    assert at_least_warn(life.restarted) == [(vocab.RESTART_SKIP, vocab.CRITICAL)] * PARTITIONS
    assert {
        (f.partition, f.offset_start, f.offset_end)
        for f in life.restarted
        if f.finding_type == vocab.RESTART_SKIP
    } == {(p, life.reached[p], life.latest[p]) for p in range(PARTITIONS)}


def test_forensics_classifies_the_restarts_without_reading_sink_rows(life: Life) -> None:
    """The restart past the end skipped; the restart after the kill resumed exactly."""
    classified = {
        (r["run_id"] == life.second_run, r["partition"], r["classification"]) for r in life.restarts
    }
    assert classified == {(True, p, vocab.RESTART_SKIPPED) for p in range(PARTITIONS)} | {
        (False, p, vocab.RESTART_EXACT) for p in range(PARTITIONS)
    }


def test_the_skipped_records_read_back_from_the_source_are_lost_in_the_incident(life: Life) -> None:
    """No batch read the skipped offsets: read back from the source as a gap is, their data
    records are lost whatever the sink."""
    (restart,) = [i for i in life.read_back.incidents if i.kind == vocab.INCIDENT_RESTART]
    effect = restart.impact
    assert (restart.severity, effect.records_lost, effect.records_unverifiable) == (
        vocab.CRITICAL,
        SKIPPED,
        0,
    )
    assert f"skipped {SKIPPED} offsets on {PARTITIONS} partition(s): {SKIPPED} records lost" in restart.cause


def test_the_skipped_records_are_lost_in_the_completeness_windows(life: Life) -> None:
    assert life.windows
    totals = (
        sum(w.lost for w in life.windows),
        sum(w.unverifiable for w in life.windows),
        sum(w.pending for w in life.windows),
        sum(w.offsets_in_sink_batches for w in life.windows),
    )
    assert totals == (SKIPPED, 0, 0, KILLED + AFTER)  # every offset read by a batch, none skipped


# --- 3. the sink restored to before a batch --------------------------------------------------------


def test_a_restore_names_the_lost_batch_with_its_delta_version_and_offsets(life: Life) -> None:
    assert lost_batches(life.restored) == life.lost
    assert sorted(at_least_warn(life.restored)) == sorted(
        [(vocab.BATCH_NOT_IN_SINK, vocab.CRITICAL)] * len(life.lost)
        + [(vocab.RESTART_SKIP, vocab.CRITICAL)] * PARTITIONS  # phase 2's, still in the window
    )


def lost_batch_incident(spark: SparkSession, life: Life) -> Any:
    [incident] = [
        i
        for i in read_incidents(AuditTables.from_config(life.cfg, spark).incidents)
        if i.kind == vocab.INCIDENT_LOST_BATCH
    ]
    return incident


def test_the_lost_batch_incident_plans_a_replay_of_its_ranges(spark: SparkSession, life: Life) -> None:
    incident = lost_batch_incident(spark, life)
    assert incident.severity == vocab.CRITICAL
    assert incident.impact.records_lost == sum(end - start for start, end, _ in life.lost.values())
    [replay] = [s for s in incident.remedy.steps if isinstance(s, ReplayStep)]
    assert {(r.partition, r.start, r.end) for r in replay.ranges} == {
        (p, start, end) for (_, p), (start, end, _) in life.lost.items()
    }
    first_range = life.lost[(RESTORED_BATCH, 0)][0]
    assert json.loads(replay.spark_options()[0]["startingOffsets"]) == {life.topic: {"0": first_range}}


def test_repair_leaves_the_replay_to_the_users_job(spark: SparkSession, bootstrap: str, life: Life) -> None:
    """The plan is for the user's job to carry out: repair writes coordinates sinks only (exit 2)."""
    incident = lost_batch_incident(spark, life)
    sink = AuditTables.from_config(life.cfg, spark).sink.at(str(life.sink))
    with pytest.raises(UsageError, match=f"coordinates sinks only.*reconcile.sink_mode_by_job.{JOB}"):
        repair.execute(spark, life.cfg, incident, sink, lambda: bootstrap)


# --- foreachBatch writers: (b)'s MERGE, an append through delta-rs ---------------------------------


def test_foreach_batch_merge_clean_then_a_restore_names_the_lost_batch(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = f"sink-b-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, RECORDS)
    checkpoint, sink, ledger = tmp_path / "cp", tmp_path / "payments", tmp_path / "ledger"
    spark.createDataFrame([], "id LONG, amount DOUBLE").write.format("delta").save(str(sink))
    since = datetime.now(UTC) - timedelta(minutes=1)

    def start(raw: DataFrame) -> Any:
        writer = payments(raw).writeStream.foreachBatch(merge_payments(sink, MERGE_APP_ID))
        return writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()

    run_attached(spark, bootstrap, topic, checkpoint, ledger, start)
    cfg = audit_config(tmp_path, bootstrap, sink, ledger, APP_ID_SETTING)
    assert at_least_warn(reconcile(spark, cfg, "rec-clean", since)) == []

    lost = sink_version_of(sink, 2, MERGE_APP_ID)
    restore(spark, sink, lost - 1)
    found = reconcile(spark, cfg, "rec-restored", since)

    ranges = batch_ranges(checkpoint, topic, 2)
    assert lost_batches(found) == {(2, p): (*ranges[p], lost) for p in range(PARTITIONS)}
    assert at_least_warn(found) == [(vocab.BATCH_NOT_IN_SINK, vocab.CRITICAL)] * PARTITIONS


def test_foreach_batch_appending_one_batch_twice_is_named(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = f"sink-c-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, RECORDS)
    checkpoint, sink, ledger = tmp_path / "cp", tmp_path / "payments", tmp_path / "ledger"
    since = datetime.now(UTC) - timedelta(minutes=1)
    twice = 1

    def append(batch: DataFrame, batch_id: int) -> None:
        """Appends through delta-rs with txn ids but never checks them, and (a retry gone wrong)
        writes batch ``twice`` two times."""
        rows = batch.toArrow()
        for _ in range(2 if batch_id == twice else 1):
            write_deltalake(
                str(sink),
                rows,
                mode="append",
                commit_properties=CommitProperties(app_transactions=[Transaction(MERGE_APP_ID, batch_id)]),
            )

    def start(raw: DataFrame) -> Any:
        writer = payments(raw).writeStream.foreachBatch(append)
        return writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()

    run_attached(spark, bootstrap, topic, checkpoint, ledger, start)
    cfg = audit_config(tmp_path, bootstrap, sink, ledger, APP_ID_SETTING)
    found = reconcile(spark, cfg, "rec-twice", since)

    assert at_least_warn(found) == [(vocab.BATCH_WRITTEN_TWICE, vocab.ERROR)] * PARTITIONS
    ranges = batch_ranges(checkpoint, topic, twice)
    named = [f for f in found if f.finding_type == vocab.BATCH_WRITTEN_TWICE]
    assert {(f.checkpoint_id, f.partition, f.offset_start, f.offset_end) for f in named} == {
        (twice, p, *ranges[p]) for p in range(PARTITIONS)
    }
    evidence = json.loads(named[0].evidence)
    assert len(evidence["sink_versions"]) == 2
    assert "offsets re-processed" in evidence["meaning"]
