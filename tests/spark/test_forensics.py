"""forensics: each run start classified exact / replay / skip per partition against the previous
checkpoint and the group's committed offset, linked to what the sink shows, plus the timeline."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.contracts.tables import GROUP_COMMITS_SCHEMA, LEDGER_SCHEMA, SINK_SCHEMA
from app.reconcile.forensics import restarts as fx
from app.reconcile.forensics.run import run_forensics, timeline
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.storage.handles import AuditTables
from app.storage.tables import tables_from_config
from tests.support.config import build_config
from tests.support.ledger_data import commits_table, ledger_table, sink_table, write_table
from tests.support.spark_tables import at, checkpoint, ev, gc, sink_rows

pytestmark = pytest.mark.spark


def test_restarts_are_classified_counted_and_linked_to_the_sink(spark: SparkSession, tmp_path: Path) -> None:
    cfg = build_config(data_dir=tmp_path)
    ledger = ledger_table(
        ev("RUN_STARTED", 0, run="run-1"),
        ev("OFFSETS_RESTORED", 0, run="run-1", offsets={0: 0, 1: 0, 2: 0}, detail={"source": "earliest"}),
        checkpoint(1, 10, {0: 100, 1: 100, 2: 100}, run="run-1"),
        ev("RUN_STOPPED", 20, run="run-1"),
        ev("RUN_STARTED", 100, run="run-2"),
        ev("OFFSETS_RESTORED", 100, run="run-2", offsets={0: 100}, detail={"source": "checkpoint"}),
        ev("OFFSETS_RESTORED", 100, run="run-2", offsets={1: 90}, detail={"source": "group"}),
        ev("OFFSETS_RESTORED", 100, run="run-2", offsets={2: 130}, detail={"source": "latest"}),
    )
    tables = tables_from_config(cfg)
    write_table(tables.ledger, LEDGER_SCHEMA, ledger)
    write_table(
        tables.group_commits,
        GROUP_COMMITS_SCHEMA,
        commits_table(gc(12, 0, 100), gc(12, 1, 90), gc(12, 2, 100)),
    )
    sink = sink_table(
        sink_rows(0, range(100)),
        sink_rows(1, range(100)),
        sink_rows(1, range(90, 100), run="run-2", cp=1),  # the replay wrote 90..99 again
        sink_rows(2, range(100)),
    )
    write_table(tables.sink, SINK_SCHEMA, sink)

    result = run_forensics(spark, cfg, AuditRun(run_id="fx-1", now=at(1000), since=None, until=at(1000)))
    got = {
        r["partition"]: (
            r["classification"],
            r["resume_source"],
            r["previous_checkpoint_offset"],
            r["group_committed_offset"],
            r["records_replayed"],
            r["records_skipped"],
            r["duplicates_observed"],
        )
        for r in result.restarts
    }
    assert got == {
        0: ("exact", "checkpoint", 100, 100, 0, 0, None),
        1: ("replay", "group", 100, 90, 10, 0, 10),
        2: ("skip", "latest", 100, 100, 0, 30, 0),
    }
    # Forensics stores restarts only: RESTART_* findings are reconcile's.
    assert not (Path(tables_from_config(cfg).findings) / "_delta_log").exists()
    # Re-running upserts: no duplicate rows in restarts.
    run_forensics(spark, cfg, AuditRun(run_id="fx-2", now=at(1000), since=at(0), until=at(1000)))
    assert spark.read.format("delta").load(tables_from_config(cfg).restarts).count() == 3

    run_reconcile(spark, cfg, AuditRun(run_id="rec-1", now=at(1000), since=None, until=at(1000)))
    findings = spark.read.format("delta").load(tables_from_config(cfg).findings)
    assert {
        (r.finding_type, r.severity, r.partition, r.offset_start, r.offset_end)
        for r in findings.collect()
        if r.finding_type.startswith("RESTART_")
    } == {
        ("RESTART_REPLAY", "warn", 1, 90, 100),
        ("RESTART_SKIP", "critical", 2, 100, 130),
    }
    entries = timeline(
        AuditTables.from_config(cfg, spark), job="job-a", at=at(100), around=timedelta(minutes=5)
    )
    text = fx.format_timeline("job-a", at(100), entries)
    # The timeline names the incidents: the restart, and the group commit of 90 on partition 1
    # that no request of the job explains; each with its repair command.
    incidents = text.split("Incidents around this time: ")[1]
    assert incidents.startswith("2\n")
    assert "  error    restart " in incidents  # it re-read 10 records the sink now holds twice
    assert "  error    external_offset_change " in incidents
    assert incidents.count("offset-audit repair --incident ") == 2
    assert "RUN_STARTED" in text
    assert "RESTART_SKIP" in text
    assert "GROUP_COMMIT" in text
    assert "orders/2=130" in text
    assert json.dumps(entries, default=str)  # --json can print it
