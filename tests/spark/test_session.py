"""The session factory gives a Delta-enabled, UTC session."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.contracts.tables import SINK_SCHEMA
from tests.support import jvm_options

pytestmark = pytest.mark.spark


def test_delta_round_trip(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "sink")
    ts = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    rows = [("orders", 0, 41, ts, 7, "run-1", b"k", b"v"), ("orders", 1, 9, ts, 7, "run-1", None, b"w")]
    spark.createDataFrame(rows, SINK_SCHEMA).write.format("delta").save(path)

    back = spark.read.format("delta").load(path).orderBy("kafka_partition")
    # Delta stores every column as nullable; names and types are what the contract fixes.
    assert [(f.name, f.dataType) for f in back.schema] == [(f.name, f.dataType) for f in SINK_SCHEMA]
    assert [(r.kafka_partition, r.kafka_offset, r.kafka_timestamp) for r in back.collect()] == [
        (0, 41, datetime(2026, 1, 2, 3, 4, 5)),
        (1, 9, datetime(2026, 1, 2, 3, 4, 5)),
    ]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert [h.operation for h in history] == ["WRITE"]


def test_session_time_zone_is_utc(spark: SparkSession) -> None:
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    row = spark.sql("SELECT CAST(TIMESTAMP '2026-01-01 00:00:00' AS LONG) AS s").first()
    assert row is not None
    assert row.s == 1767225600


def test_the_suites_drivers_map_the_class_data_sharing_archive(spark: SparkSession) -> None:
    # `make test` dumps it first (tests/support/cds.py); each driver then maps Spark's classes from
    # it instead of loading them (about 3 of 10 CPU-seconds of a short session's start).
    archive = jvm_options.cds_archive()
    assert archive is not None
    assert archive.exists(), "no archive: `make test` runs `python -m tests.support.cds`"
    assert f"-XX:SharedArchiveFile={archive}" in jvm_options.QUICK_JVM_OPTIONS
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pid = jvm.java.lang.ProcessHandle.current().pid()
    # The JVM ignores an archive it cannot use (silently, with -Xlog:cds=off): mapped means used.
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text()


def test_the_suites_quick_driver_keeps_a_full_code_cache(spark: SparkSession) -> None:
    # C1 alone would shrink the code cache to 48 MB; a driver that filled it stopped compiling and
    # printed ten lines of warnings into the demo's story.
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    management = jvm.java.lang.management.ManagementFactory
    arguments = list(management.getRuntimeMXBean().getInputArguments())
    assert "-XX:TieredStopAtLevel=1" in arguments, arguments
    hotspot = management.getPlatformMXBean(jvm.com.sun.management.HotSpotDiagnosticMXBean._java_lang_class)
    assert int(hotspot.getVMOption("ReservedCodeCacheSize").getValue()) >= 240 * 1024 * 1024
