"""Completeness per event-time window against a real broker, Spark and Delta: records produced with
CreateTime timestamps spread over several windows, a ledger and a sink written next to them, and
`run_reconcile` with the broker's offsets-for-times lookup and the GAP confirmation.

One topic and one story serve most assertions (module fixtures): the counts per window, a gap and
a duplicate each in its own window, provisional then final with an injected clock, and a rerun
that yields the same rows. A transactional topic and a topic whose log start retention moved have
their own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from app.config import AppConfig, KafkaConfig
from app.contracts.offsets import EventSource, LedgerEvent
from app.contracts.tables import LEDGER_SCHEMA, SINK_SCHEMA
from app.contracts.vocabulary import SINK_DELTA_BATCHES
from app.kafka.clients import plain_conf
from app.kafka.gaps import kafka_gap_confirmer
from app.kafka.times import KafkaTimes
from app.reconcile.completeness.windows import window_of
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.storage.tables import tables_from_config
from tests.support.config import build_config
from tests.support.ledger_data import contract_table
from tests.support.reconcile import read, save
from tests.support.streaming import deliver, produce_transactions

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

JOB, GROUP, RUN = "orders-job", "orders-group", "run-1"
WINDOW = timedelta(minutes=10)
PER_WINDOW = 5  # records per window in the main story
LATE_S = 304  # the default lateness with the test config's trigger (2 s): 2 x 2 + 300


def create_topic(bootstrap: str, topic: str) -> None:
    """One partition, kept forever: the story's timestamps are an hour old."""
    admin = AdminClient(plain_conf(bootstrap))
    new = NewTopic(topic, num_partitions=1, replication_factor=1, config={"retention.ms": "-1"})
    admin.create_topics([new])[topic].result(30)


def produce_at(bootstrap: str, topic: str, times: Sequence[datetime]) -> None:
    """One record per time, CreateTime set explicitly, offsets 0.. in that order."""
    producer = Producer(plain_conf(bootstrap, **{"enable.idempotence": True}))
    for i, t in enumerate(times):
        producer.produce(topic, value=f"r{i}".encode(), partition=0, timestamp=int(t.timestamp() * 1000))
    deliver(producer)


def ledger(
    topic: str, started: datetime, checkpoints: Sequence[tuple[int, int, datetime]]
) -> list[dict[str, Any]]:
    """A run restored at offset 0 and its completed checkpoints (id, end offset, completion time)."""
    src = EventSource(JOB, RUN, "spark", GROUP)
    events: list[LedgerEvent] = [src.event("RUN_STARTED", started, None, {})]
    events += src.partition_events("OFFSETS_RESTORED", started, None, {(topic, 0): 0}, {"source": "earliest"})
    for cp, end, at in checkpoints:
        events += src.partition_events(
            "CHECKPOINT_SNAPSHOT", at - timedelta(seconds=1), cp, {(topic, 0): end}, {}
        )
        events += src.partition_events("CHECKPOINT_COMPLETED", at, cp, {(topic, 0): end}, {})
    return [e.to_row() for e in events]


def write_inputs(
    spark: SparkSession,
    cfg: AppConfig,
    topic: str,
    events: list[dict[str, Any]],
    sink: Sequence[tuple[int, datetime | None]],
) -> None:
    save(contract_table(LEDGER_SCHEMA, events), cfg, "ledger")
    rows = [(topic, 0, o, t, 1, RUN, None, None) for o, t in sink]
    save(contract_table(SINK_SCHEMA, rows), cfg, "sink")


def reconcile(spark: SparkSession, cfg: AppConfig, bootstrap: str, run_id: str, now: datetime) -> int | None:
    kafka = KafkaConfig(bootstrap_servers=bootstrap)
    confirm = kafka_gap_confirmer(kafka, bootstrap, max_records=1000, timeout_s=60)
    result = run_reconcile(
        spark,
        cfg,
        AuditRun(run_id=run_id, now=now, until=now),
        confirmer=confirm,
        times=KafkaTimes(kafka, bootstrap, 60),
    )
    return result.completeness_windows


def table(spark: SparkSession, cfg: AppConfig) -> list[dict[str, Any]]:
    rows = read(spark, cfg, "completeness").orderBy("window_start").collect()
    return [r.asDict() for r in rows]


def counts(rows: Sequence[dict[str, Any]], *cols: str) -> list[tuple[Any, ...]]:
    return [tuple(r[c] for c in cols) for r in rows]


# --- the main story ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Story:
    topic: str
    base: datetime  # the first window's start
    provisional: list[
        dict[str, Any]
    ]  # the table after a run whose clock is inside the last window's lateness
    final: list[dict[str, Any]]  # after a run at the real time
    rerun: list[dict[str, Any]]  # after one more run
    written: tuple[int | None, int | None, int | None]


@pytest.fixture(scope="module")
def story(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, bootstrap: str) -> Story:
    """4 windows of 5 records (offsets 0-19); the sink lacks offset 7 (window 1) and holds offset 12
    twice (window 2). Checkpoint 1 completes at 21 minutes (offset 10), checkpoint 2 at 40:30
    (offset 20)."""
    topic = f"completeness-{datetime.now(UTC):%H%M%S%f}"
    create_topic(bootstrap, topic)
    base = window_of(datetime.now(UTC) - timedelta(minutes=100), 10).start
    times = [base + w * WINDOW + timedelta(seconds=30 + 60 * i) for w in range(4) for i in range(PER_WINDOW)]
    produce_at(bootstrap, topic, times)
    cfg = build_config(data_dir=tmp_path_factory.mktemp("completeness"))
    cks = [(1, 10, base + timedelta(minutes=21)), (2, 20, base + timedelta(minutes=40, seconds=30))]
    sink = [(o, times[o]) for o in range(20) if o != 7] + [(12, times[12])]
    write_inputs(spark, cfg, topic, ledger(topic, base, cks), sink)

    first = reconcile(spark, cfg, bootstrap, "rec-1", base + timedelta(minutes=41))
    provisional = table(spark, cfg)
    second = reconcile(spark, cfg, bootstrap, "rec-2", datetime.now(UTC))
    final = table(spark, cfg)
    third = reconcile(spark, cfg, bootstrap, "rec-3", datetime.now(UTC) + timedelta(minutes=1))
    return Story(topic, base, provisional, final, table(spark, cfg), (first, second, third))


def test_each_window_counts_exactly_its_records_with_the_gap_and_the_copy_in_their_own_window(
    story: Story,
) -> None:
    rows = story.final
    assert [r["window_start"].astimezone(UTC) for r in rows] == [story.base + w * WINDOW for w in range(4)]
    cols = (
        "offset_start",
        "offset_end",
        "expected",
        "landed",
        "lost",
        "unverifiable",
        "duplicated",
        "pending",
    )
    assert counts(rows, *cols) == [
        (0, 5, 5, 5, 0, 0, 0, 0),
        (5, 10, 5, 4, 1, 0, 0, 0),  # offset 7 lost: here and nowhere else
        (10, 15, 5, 5, 0, 0, 1, 0),  # offset 12 twice
        (15, 20, 5, 5, 0, 0, 0, 0),
    ]
    assert counts(rows, "completeness", "final", "sink_mode") == [
        (1.0, True, "coordinates"),
        (0.8, True, "coordinates"),
        (1.0, True, "coordinates"),
        (1.0, True, "coordinates"),
    ]
    # Window 0's records (at 0:30 .. 4:30) completed with checkpoint 1 at 21:00.
    assert (rows[0]["latency_p50_ms"], rows[0]["latency_p95_ms"]) == (1_110_000, 1_230_000)
    # Window 2's (20:30 .. 24:30) with checkpoint 2 at 40:30.
    assert rows[2]["latency_p50_ms"] == 1_080_000


def test_a_window_inside_its_lateness_is_provisional_then_final(story: Story) -> None:
    before, after = story.provisional, story.final
    # At 41:00 window 3 (30:00-40:00) is within 304 s of its end; the others are past it.
    assert counts(before, "final") == [(True,), (True,), (True,), (False,)]
    assert counts(before, "reconcile_run_id") == [("rec-1",)] * 4
    # The final windows were not computed again; the provisional one was, and is now final.
    assert before[:3] == after[:3]
    assert (after[3]["final"], after[3]["reconcile_run_id"], after[3]["expected"]) == (True, "rec-2", 5)
    assert story.written[:2] == (4, 1)


def test_rerunning_reconcile_yields_the_same_rows(story: Story) -> None:
    assert story.rerun == story.final
    assert story.written[2] == 0


def test_a_delta_batches_sink_counts_the_records_of_its_lost_batch_and_never_rows(
    spark: SparkSession, tmp_path: Path, bootstrap: str, story: Story
) -> None:
    """The story's topic read in 4 batches of 5 offsets, one per window; the sink (Spark's Delta
    writer with txn ids) holds batches 1, 3 and 4: batch 2's records (window 1) are lost."""
    cfg = build_config(
        data_dir=tmp_path,
        reconcile={"sink_mode": SINK_DELTA_BATCHES, "sink_app_id_by_job": {JOB: "orders-app"}},
    )
    base = story.base
    cks = [(b, 5 * b, base + b * WINDOW + timedelta(seconds=1)) for b in range(1, 5)]
    save(contract_table(LEDGER_SCHEMA, ledger(story.topic, base, cks)), cfg, "ledger")
    sink = tables_from_config(cfg).sink
    for batch in (1, 3, 4):
        writer = spark.range(5).write.format("delta").mode("append").option("txnAppId", "orders-app")
        writer.option("txnVersion", str(batch)).save(sink)

    assert reconcile(spark, cfg, bootstrap, "rec-batches", datetime.now(UTC)) == 4
    rows = table(spark, cfg)
    cols = (
        "offset_start",
        "offset_end",
        "lost",
        "unverifiable",
        "pending",
        "offsets_in_sink_batches",
        "final",
    )
    assert counts(rows, *cols) == [
        (0, 5, 0, 0, 0, 5, True),
        (5, 10, 5, 0, 0, 0, True),
        (10, 15, 0, 0, 0, 5, True),
        (15, 20, 0, 0, 0, 5, True),
    ]
    unknown = ("expected", "landed", "duplicated", "completeness", "latency_p50_ms", "latency_p95_ms")
    assert set(counts(rows, *unknown)) == {(None,) * len(unknown)}
    assert {r["sink_mode"] for r in rows} == {SINK_DELTA_BATCHES}


# --- a transactional source ----------------------------------------------------------------------


def test_aborted_records_and_markers_are_not_expected(
    spark: SparkSession, tmp_path: Path, bootstrap: str
) -> None:
    """20 transactions of 2 records, every odd one aborted: offsets 0-59 hold 20 committed records,
    20 aborted ones and 20 markers. Produced now (a marker is stamped with the broker's time)."""
    topic = f"completeness-tx-{datetime.now(UTC):%H%M%S%f}"
    create_topic(bootstrap, topic)
    committed = produce_transactions(bootstrap, topic, topic)
    started = datetime.now(UTC)
    cfg = build_config(data_dir=tmp_path)
    write_inputs(
        spark, cfg, topic, ledger(topic, started, [(1, 60, started)]), [(o, None) for o in committed]
    )

    later = datetime.now(UTC) + timedelta(hours=1)  # every window past its lateness
    assert reconcile(spark, cfg, bootstrap, "rec-tx", later)
    rows = table(spark, cfg)
    assert sum(r["expected"] for r in rows) == 20
    assert sum(r["landed"] for r in rows) == 20
    assert {(r["lost"], r["unverifiable"], r["pending"], r["final"]) for r in rows} == {(0, 0, 0, True)}
    assert (rows[0]["offset_start"], rows[-1]["offset_end"]) == (0, 60)
    # No timestamp in this sink: the latencies are unknown, not zero.
    assert {(r["latency_p50_ms"], r["latency_p95_ms"]) for r in rows} == {(None, None)}


# --- a window older than retention ---------------------------------------------------------------


def test_a_window_older_than_retention_is_bounded_by_the_sink_and_unverifiable(
    spark: SparkSession, tmp_path: Path, bootstrap: str
) -> None:
    """Two windows of 5 records; retention moves the log start to 7; the sink lacks offsets 2 and 3."""
    topic = f"completeness-ret-{datetime.now(UTC):%H%M%S%f}"
    create_topic(bootstrap, topic)
    base = window_of(datetime.now(UTC) - timedelta(minutes=60), 10).start
    times = [base + w * WINDOW + timedelta(seconds=30 + 60 * i) for w in range(2) for i in range(PER_WINDOW)]
    produce_at(bootstrap, topic, times)
    admin = AdminClient(plain_conf(bootstrap))
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, 7)]).values()
    deleted.result(30)
    cfg = build_config(data_dir=tmp_path, completeness={"lateness_seconds": LATE_S})
    sink = [(o, times[o]) for o in range(10) if o not in (2, 3)]
    write_inputs(spark, cfg, topic, ledger(topic, base, [(1, 10, base + timedelta(minutes=21))]), sink)

    assert reconcile(spark, cfg, bootstrap, "rec-ret", datetime.now(UTC)) == 2
    rows = table(spark, cfg)
    cols = (
        "offset_start",
        "offset_end",
        "expected",
        "landed",
        "lost",
        "unverifiable",
        "completeness",
        "final",
    )
    assert counts(rows, *cols) == [(0, 5, 5, 3, 0, 2, 0.6, True), (5, 10, 5, 5, 0, 0, 1.0, True)]
