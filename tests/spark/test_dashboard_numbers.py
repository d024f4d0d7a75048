"""The dashboard and the findings use one definition of a skipped commit: a completed checkpoint
with a SKIPPED_COMMIT finding, whatever its reason (the dashboard used to count only the ledger's
COMMIT_SKIPPED events, and showed 0% beside SKIPPED_COMMIT findings of failed commits)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from app.contracts.tables import INGEST_POSITIONS_SCHEMA
from app.report import gather as report_io
from app.storage.handles import AuditTables
from tests.support.config import build_config
from tests.support.ledger_data import (
    COVERED_SKIPS_STOP,
    GROUP,
    at,
    checkpoint,
    commits_table,
    contract_table,
    covered_skips_story,
    ev,
    gc,
    ledger_table,
    sink_rows,
    sink_table,
)
from tests.support.reconcile import read, reconcile, save

pytestmark = pytest.mark.spark


def test_the_skip_rate_counts_the_checkpoints_the_findings_call_skipped(
    spark: SparkSession, tmp_path: Path
) -> None:
    cfg = build_config(data_dir=tmp_path)
    failure = {"attempt": 2, "error": "NOT_COORDINATOR", "retriable": True}
    ledger = ledger_table(
        ev("RUN_STARTED", 0),
        ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
        checkpoint(1, 10, {0: 10}),
        checkpoint(2, 20, {0: 20}, commit=False),
        ev("COMMIT_REQUESTED", 21, cp=2, offsets={0: 20}, detail={"attempt": 2}),
        ev("COMMIT_FAILED", 22, cp=2, offsets={0: 20}, detail=failure),
        checkpoint(3, 30, {0: 30}),
        ev("RUN_STOPPED", 40),
    )
    save(ledger, cfg, "ledger")
    save(commits_table(gc(12, 0, 10), gc(32, 0, 30)), cfg, "group_commits")
    save(sink_table(sink_rows(0, range(30))), cfg, "sink")
    # ingest-offsets ran after the job stopped: every commit it made is in group_commits.
    save(contract_table(INGEST_POSITIONS_SCHEMA, [(0, 3, "ingest-1", at(100))]), cfg, "ingest_positions")

    def none(gaps: Any) -> list[dict[str, Any]]:
        return []

    reconcile(spark, cfg, "rec-1", confirmer=none)
    skipped = read(spark, cfg, "findings").filter("finding_type = 'SKIPPED_COMMIT'").collect()
    assert [(f.checkpoint_id, f.severity) for f in skipped] == [(2, "info")]

    tables = report_io.read_tables(AuditTables.from_config(cfg, spark), cfg)
    assert tables.ledger is not None
    counts = report_io.checkpoint_commit_counts(tables.ledger, tables.findings)
    assert counts == {GROUP: (3, len(skipped))}


@pytest.mark.parametrize("engine", ["spark", "flink-legacy"])
def test_covered_skips_reach_the_skip_rate_when_commits_are_ingested_right_after_the_stop(
    spark: SparkSession, tmp_path: Path, engine: str
) -> None:
    """The same story in both dialects, through reconcile over Delta tables: a superseded and an
    evicted checkpoint, both covered by later commits; ingest-offsets ran a second after the job
    stopped, inside the clock-skew allowance. Both skips are reported (benign) and counted."""
    cfg = build_config(data_dir=tmp_path)
    events, commit_rows = covered_skips_story(engine)
    save(ledger_table(events), cfg, "ledger")
    save(commits_table(*commit_rows), cfg, "group_commits")
    save(sink_table(sink_rows(0, range(50))), cfg, "sink")
    ingested = at(COVERED_SKIPS_STOP + 1)
    save(
        contract_table(INGEST_POSITIONS_SCHEMA, [(0, 3, "ingest-1", ingested)]),
        cfg,
        "ingest_positions",
    )
    assert ingested < at(COVERED_SKIPS_STOP + 2 * cfg.reconcile.clock_skew_s)  # the run's end is not past it

    reconcile(spark, cfg, "rec-1")

    findings = read(spark, cfg, "findings").collect()
    assert sorted((f.finding_type, f.checkpoint_id, f.severity, f.status) for f in findings) == [
        ("SKIPPED_COMMIT", 2, "info", "benign"),
        ("SKIPPED_COMMIT", 4, "info", "benign"),
    ]
    tables = report_io.read_tables(AuditTables.from_config(cfg, spark), cfg)
    assert tables.ledger is not None
    assert report_io.checkpoint_commit_counts(tables.ledger, tables.findings) == {GROUP: (5, 2)}


def test_the_impact_chart_totals_are_the_incidents_totals_with_the_duplicates_dated(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A second writer appends copies of 10 offsets the job wrote (keeping their checkpoint id, under
    its own run label), and 5 offsets of another partition are lost. The second_writer incident
    is dated by the ledger's completion of the checkpoint that wrote the job's copies, names the
    job's run and no run for the second writer, and the chart counts every incident."""
    cfg = build_config(data_dir=tmp_path)
    ledger = ledger_table(
        ev("RUN_STARTED", 0),
        ev("OFFSETS_RESTORED", 0, offsets={0: 0, 1: 0}, detail={"source": "earliest"}),
        checkpoint(1, 10, {0: 50, 1: 50}),
        ev("RUN_STOPPED", 30),
    )
    save(ledger, cfg, "ledger")
    save(commits_table(gc(12, 0, 50), gc(12, 1, 50)), cfg, "group_commits")
    copies = sink_rows(0, range(10, 20), run="second-writer", cp=1)
    save(sink_table(sink_rows(0, range(50)), copies, sink_rows(1, range(45))), cfg, "sink")

    def confirmed(gaps: Any) -> list[dict[str, Any]]:
        return [{"status": "confirmed", "data_records": g.end - g.start} for g in gaps]

    reconcile(spark, cfg, "rec-1", confirmer=confirmed)

    stored = {r.kind: r for r in read(spark, cfg, "incidents").collect()}
    assert sorted(stored) == ["gap", "second_writer"]
    writer = stored["second_writer"]
    assert (writer.records_duplicated, list(writer.run_ids)) == (10, ["run-1"])
    completed = at(11).replace(tzinfo=None)  # checkpoint 1's completion, as Spark's naive UTC
    assert (writer.first_evidence_at, writer.last_evidence_at) == (completed, completed)
    assert "run run-1 and second-writer (no run of job-a)" in writer.cause

    tables = report_io.read_tables(AuditTables.from_config(cfg, spark), cfg)
    assert tables.incidents is not None
    chart = report_io.incident_impact(tables.incidents)
    assert chart == [{"day": "2026-03-01", "lost": 5, "duplicated": 10}]
    for column, key in (("records_lost", "lost"), ("records_duplicated", "duplicated")):
        assert sum(r[key] for r in chart) == sum(getattr(r, column) for r in stored.values())
