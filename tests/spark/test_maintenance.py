"""`maintain` over real Delta tables (delta-rs writes them as the job and the audit do; Spark reads
them back as every Spark reader would): closed days compacted while the job appends, retention
that keeps what an open incident cites, time travel within the VACUUM retention."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from app.config import AppConfig, load_config
from app.contracts.tables import FINDINGS_SCHEMA, INCIDENTS_SCHEMA
from app.maintenance.run import maintain
from app.storage import facade
from app.storage.tables import tables_from_config
from app.stream.ledger import LedgerWriter
from tests.ledger_data import JOB, T0, checkpoint, day_events, finding_row, incident_row

pytestmark = pytest.mark.spark

NOW = datetime(2026, 3, 20, 12, 0, tzinfo=UTC)
FILES_PER_DAY = 8  # micro-batches (one file each) of every written day
APPENDER_TIMEOUT_S = 120  # a deadline for the live job's batches, not a speed check


def config(data_dir: Path, *overrides: str) -> AppConfig:
    return load_config("local", [f"paths.data_dir={data_dir}", *overrides], environ={})


def write_days(ledger: str, days: list[date], run: str = "run-1") -> int:
    """FILES_PER_DAY micro-batches on each day, through the job's ledger writer; the rows written."""
    writer = LedgerWriter(None, ledger, JOB, run, scope=f"history-{run}")
    writer.ensure()
    rows = 0
    for n, day in enumerate(days):
        for b in range(FILES_PER_DAY):
            events = day_events(day, n * FILES_PER_DAY + b + 1, run)
            writer.write(events, n * FILES_PER_DAY + b)
            rows += len(events)
    return rows


def files_per_day(path: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in DeltaTable(path).get_add_actions(flatten=True).column("partition.event_date").to_pylist():
        counts[p.isoformat()] = counts.get(p.isoformat(), 0) + 1
    return counts


def rows_per_day(spark: SparkSession, path: str) -> dict[str, int]:
    rows = spark.read.format("delta").load(path).groupBy("event_date").count().collect()
    return {r["event_date"].isoformat(): r["count"] for r in rows}


class LiveJob:
    """The streaming job appending micro-batches to today's ledger partition from its own thread,
    as `stream.job` does through the same writer, until told to stop."""

    def __init__(self, ledger: str) -> None:
        self.writer = LedgerWriter(None, ledger, JOB, "run-live", scope="live")
        self.written = 0
        self.errors: list[BaseException] = []
        self.batches = threading.Condition()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopping.is_set():
            cp = self.written + 1
            events = checkpoint(cp, (NOW - T0).total_seconds() + cp, {0: 10 * cp, 1: 10 * cp}, run="run-live")
            try:
                self.writer.write(events, cp)
            except BaseException as exc:  # what would fail the job's micro-batch
                self.errors.append(exc)
                return
            with self.batches:
                self.written = cp
                self.batches.notify_all()

    def wait_for(self, count: int) -> None:
        with self.batches:
            assert self.batches.wait_for(
                lambda: self.written >= count or bool(self.errors), APPENDER_TIMEOUT_S
            ), f"the job wrote {self.written} batches in {APPENDER_TIMEOUT_S}s"

    def __enter__(self) -> LiveJob:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(APPENDER_TIMEOUT_S)


def test_closed_days_are_compacted_while_the_job_appends_and_no_event_is_lost(
    spark: SparkSession, tmp_path: Path
) -> None:
    cfg = config(tmp_path)
    ledger = tables_from_config(cfg).ledger
    expired, closed = [date(2026, 2, 1)], [date(2026, 3, 16), date(2026, 3, 17), date(2026, 3, 18)]
    write_days(ledger, expired + closed)
    before = rows_per_day(spark, ledger)

    with LiveJob(ledger) as job:
        job.wait_for(3)  # the job is appending before the maintenance starts
        started_with = job.written
        result = maintain(None, cfg, NOW)
        job.wait_for(job.written + 3)  # and goes on after it
    assert job.errors == []
    assert job.written > started_with  # its appends overlapped the maintenance

    (outcome,) = [t for t in result.tables if t.table == "ledger"]
    assert sorted(outcome.compacted) == [d.isoformat() for d in closed]
    files = files_per_day(ledger)
    assert {d.isoformat(): files[d.isoformat()] for d in closed} == {d.isoformat(): 1 for d in closed}
    after = rows_per_day(spark, ledger)
    # The closed days hold the same rows in one file each; the expired day is gone; every batch the
    # job wrote, before, during and after the maintenance, is there (4 events x 2 partitions each).
    assert {d: after[d] for d in before if d != "2026-02-01"} == {
        d: before[d] for d in before if d != "2026-02-01"
    }
    assert "2026-02-01" not in after
    live = spark.read.format("delta").load(ledger).where("run_id = 'run-live'")
    assert live.count() == job.written * 8
    assert live.select("checkpoint_id").distinct().count() == job.written
    assert DeltaTable(ledger).metadata().configuration["delta.appendOnly"] == "true"


def test_retention_keeps_what_an_open_incident_cites_until_it_is_resolved(
    spark: SparkSession, tmp_path: Path
) -> None:
    cfg = config(
        tmp_path, "maintenance.retention_days.findings=30", "maintenance.retention_days.incidents=30"
    )
    tables = tables_from_config(cfg)
    # The open incident's evidence starts on 01-12; a night looks 7 days back for its baseline.
    evidence = datetime(2026, 1, 12, 10, tzinfo=UTC)
    write_days(tables.ledger, [date(2026, 1, 1), date(2026, 1, 5), date(2026, 2, 1), date(2026, 3, 10)])
    old = evidence
    facade.merge(None, tables.findings, FINDINGS_SCHEMA, [
        finding_row("f-cited", "rec-1", old), finding_row("f-uncited", "rec-0", old),
        finding_row("f-new", "rec-2", NOW - timedelta(days=1)),
    ], "finding_id")  # fmt: skip
    facade.merge(None, tables.incidents, INCIDENTS_SCHEMA, [
        incident_row("i-open", "open", evidence, evidence, ["f-cited"]),
        incident_row("i-resolved", "resolved", old, old, ["f-uncited"]),
    ], "incident_id")  # fmt: skip

    maintain(None, cfg, NOW)

    def ids(path: str, column: str) -> list[str]:
        return sorted(r[column] for r in spark.read.format("delta").load(path).select(column).collect())

    assert sorted(rows_per_day(spark, tables.ledger)) == ["2026-01-05", "2026-02-01", "2026-03-10"]
    assert ids(tables.findings, "finding_id") == ["f-cited", "f-new"]
    assert ids(tables.incidents, "incident_id") == ["i-open"]

    # Once resolved, the incident and what it cited age out like the rest.
    facade.merge(None, tables.incidents, INCIDENTS_SCHEMA, [
        incident_row("i-open", "resolved", evidence, evidence, ["f-cited"]),
    ], "incident_id")  # fmt: skip
    maintain(None, cfg, NOW)
    assert sorted(rows_per_day(spark, tables.ledger)) == ["2026-03-10"]
    assert ids(tables.findings, "finding_id") == ["f-new"]
    assert ids(tables.incidents, "incident_id") == []


def test_time_travel_to_a_version_within_the_vacuum_retention_still_works_after_maintenance(
    spark: SparkSession, tmp_path: Path
) -> None:
    cfg = config(tmp_path)
    tables = tables_from_config(cfg)
    write_days(tables.ledger, [date(2026, 3, 16), date(2026, 3, 17)])
    for n in range(FILES_PER_DAY):  # one file per merge: a table worth compacting
        facade.merge(
            None, tables.findings, FINDINGS_SCHEMA, [finding_row(f"f-{n}", "rec-1", NOW)], "finding_id"
        )
    versions = {path: DeltaTable(path).version() for path in (tables.ledger, tables.findings)}
    before = {path: sorted(map(tuple, spark.read.format("delta").load(path).collect())) for path in versions}

    result = maintain(None, cfg, NOW)
    assert {t.table: t.files_compacted > 0 for t in result.tables if t.table in ("ledger", "findings")} == {
        "ledger": True,
        "findings": True,
    }

    for path, version in versions.items():
        assert DeltaTable(path).version() > version  # the compaction is a new version
        old = spark.read.format("delta").option("versionAsOf", version).load(path)
        assert sorted(map(tuple, old.collect())) == before[path]
        assert DeltaTable(path, version=version).to_pyarrow_table().num_rows == len(before[path])
