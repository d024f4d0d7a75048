"""End to end: a shortened demo with real incidents yields exactly the findings they should, and a
clean run of the same pipeline yields none at warn or above."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig, load_config
from app.demo.story import WARN_OR_ABOVE, Demo, DemoScale
from app.incidents import repair
from app.kafka.gaps import kafka_gap_confirmer
from app.nightly.run import Nightly
from app.reconcile.outputs import AuditRun, mark_resolved, read_incidents
from app.reconcile.run import run_reconcile
from app.storage.tables import tables_from_config
from app.stream.job import StopWhen, StreamJob
from tests.kafka.streaming import create_topic, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SMALL = DemoScale(
    initial_per_partition=120,
    per_trigger=90,
    outage_per_partition=10,
    reset_back_by=30,
    downtime_per_partition=15,
    duplicated_rows=5,
)


def test_shortened_demo_finds_exactly_the_injected_incidents(spark: SparkSession, tmp_path: Path) -> None:
    base = load_config("local", [f"paths.data_dir={tmp_path}"], environ={})
    demo = Demo(base, spark, SMALL, screenshot=False)
    outcome = demo.run()

    assert outcome.nightly is not None
    assert outcome.nightly.failed_step is None
    assert outcome.incidents == [
        "crash and restart",
        "commit failure during a broker outage",
        "manual offset reset",
        "restart from latest",
        "second writer",
    ]
    assert outcome.missing == []
    assert outcome.unexpected == []
    # Exactly one finding for each expected one: nothing doubled, nothing extra.
    assert len(outcome.found) == len(outcome.expected)
    by_type = sorted((e.finding_type, e.partition, e.offset_start, e.offset_end) for e in outcome.expected)
    skip_lo, skip_hi = 120 + 10 + 10 + 10, 120 + 10 + 10 + 10 + 15  # offsets produced while the job was down
    assert ("GAP", 0, skip_lo, skip_hi) in by_type
    assert ("RESTART_SKIP", 2, skip_lo, skip_hi) in by_type
    assert ("DUPLICATE", 1, 90, 95) in by_type

    # One incident per injected event, with its impact in records.
    incidents = {i["kind"]: i for i in read_incidents(spark, demo.cfg)}
    assert {k: i["severity"] for k, i in incidents.items()} == {
        "unclean_stop": "info",
        "commit_outage": "warn",
        "external_offset_change": "error",
        "restart": "critical",
        "second_writer": "error",
    }
    assert incidents["restart"]["records_lost"] == 3 * (skip_hi - skip_lo)
    assert incidents["restart"]["partitions"] == 3
    assert incidents["second_writer"]["records_duplicated"] == SMALL.duplicated_rows

    # Repairing the restart's gap and the second writer's copies: a reconcile of the whole history
    # then finds neither, and both incidents are resolved.
    bootstrap = demo.broker.start().bootstrap_servers
    try:
        sink = tables_from_config(demo.cfg).sink
        for kind in ("restart", "second_writer"):
            done = repair.execute(spark, demo.cfg, incidents[kind], sink, lambda: bootstrap)
            mark_resolved(spark, demo.cfg, incidents[kind], {"actions": done.actions})
        confirm = kafka_gap_confirmer(demo.cfg.kafka, bootstrap, max_records=100, timeout_s=60)
        whole_history = datetime(2000, 1, 1, tzinfo=UTC)
        now = datetime.now(UTC)
        after = run_reconcile(
            spark,
            demo.cfg,
            AuditRun(run_id="after-repair", now=now, since=whole_history, until=now),
            confirmer=confirm,
        )
    finally:
        demo.broker.stop()
    assert {t for t, _ in after.counts} & {"GAP", "DUPLICATE"} == set()
    statuses = {i["kind"]: i["status"] for i in read_incidents(spark, demo.cfg)}
    assert (statuses["restart"], statuses["second_writer"]) == ("resolved", "resolved")


def test_clean_run_reports_nothing_at_warn_or_above(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic, group, job = f"clean-{unique}", f"clean-{unique}", f"clean-{unique}"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 400, 2)
    cfg: AppConfig = load_config(
        "local",
        [
            f"paths.data_dir={tmp_path}",
            f"kafka.bootstrap_servers={bootstrap}",
            f"stream.topics=[{topic}]",
            f"stream.group_id={group}",
            f"stream.job_name={job}",
            "stream.trigger_interval=1 second",
            "stream.max_offsets_per_trigger=150",
            f"ingest.groups=[{group}]",
            f"reconcile.jobs=[{job}]",
        ],
        environ={},
    )
    StreamJob(spark, cfg, bootstrap, run_id="clean-1").run(StopWhen(idle_s=4))
    produce(bootstrap, topic, 100, 2, start=400)
    StreamJob(spark, cfg, bootstrap, run_id="clean-2").run(StopWhen(idle_s=4))

    result = Nightly(spark, cfg, lambda: bootstrap).run()

    assert result.failed_step is None
    findings = spark.read.format("delta").load(cfg.paths.table("findings"))
    loud = findings.where(F.col("severity").isin(*WARN_OR_ABOVE)).collect()
    assert loud == []
    assert result.failed_expectations == {}
