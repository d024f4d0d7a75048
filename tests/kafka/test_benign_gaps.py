"""A transactional source with many aborted transactions: the markers and aborted records the sink
rightly lacks are confirmed benign against the real broker and reported as one GAP per partition
and window, with the counts by cause, never one row per marker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from app.config import KafkaConfig
from app.kafka.gaps import kafka_gap_confirmer
from tests.support.config import build_config
from tests.support.ledger_data import (
    checkpoint,
    commits_table,
    ev,
    gc,
    ledger_table,
    sink_rows,
    sink_table,
    with_topic,
)
from tests.support.reconcile import read, reconcile, save
from tests.support.streaming import TRANSACTIONS, produce_transactions

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_markers_and_aborted_records_are_one_benign_gap_per_partition(
    spark: SparkSession, tmp_path: Path, bootstrap: str, unique: str
) -> None:
    topic = f"orders-{unique}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    committed = produce_transactions(bootstrap, topic, unique)
    end = 3 * TRANSACTIONS

    cfg = build_config(data_dir=tmp_path)
    save(
        with_topic(
            ledger_table(
                ev("RUN_STARTED", 0),
                ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
                checkpoint(1, 10, {0: end}),
                ev("RUN_STOPPED", 30),
            ),
            topic,
        ),
        cfg,
        "ledger",
    )
    save(commits_table(gc(12, 0, end, topic=topic)), cfg, "group_commits")
    # A read_committed job wrote exactly the committed data records.
    save(sink_table(sink_rows(0, committed, topic=topic)), cfg, "sink")

    confirm = kafka_gap_confirmer(
        KafkaConfig(bootstrap_servers=bootstrap), bootstrap, max_records=100, timeout_s=60
    )
    result = reconcile(spark, cfg, "rec-txn", confirmer=confirm)

    # Each aborted transaction joins the commit marker before it into one hole.
    assert result.gaps_suspected == TRANSACTIONS // 2
    gaps = read(spark, cfg, "findings").filter("finding_type = 'GAP'").collect()
    assert len(gaps) == 1
    gap = gaps[0]
    missing = end - len(committed)
    assert (gap.severity, gap.status, gap.partition) == ("info", "benign", 0)
    assert (gap.offset_start, gap.offset_end, gap.record_count) == (2, end, missing)
    evidence = json.loads(gap.evidence)
    assert evidence["gaps"] == result.gaps_suspected
    assert evidence["missing_offsets"] == missing
    assert sum(evidence["by_cause"].values()) == missing
    assert evidence["ranges"][0] == [2, 6]
