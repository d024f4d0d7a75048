"""End to end: a shortened demo with real incidents yields exactly the findings they should, and a
clean run of the same pipeline yields none at warn or above."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig, load_config
from app.demo import WARN_OR_ABOVE, Demo, DemoScale
from app.nightly import Nightly
from app.stream_job import StopWhen, StreamJob
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
    outcome = Demo(base, spark, SMALL, screenshot=False).run()

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
