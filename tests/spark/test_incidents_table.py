"""The incidents table: written by reconcile next to the findings, idempotent across re-runs, and
listed by `offset-audit incidents` (text and JSON)."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from app import cli
from tests.support.config import build_config, set_options
from tests.support.ledger_data import at, sink_rows, sink_table
from tests.support.reconcile import a_job_with_a_gap, read, reconcile, save

pytestmark = pytest.mark.spark


def confirmed(gaps: Any) -> list[dict[str, Any]]:
    return [{"status": "confirmed", "data_records": g.end - g.start} for g in gaps]


def test_reconcile_stores_incidents_once_and_the_cli_lists_them(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = build_config(data_dir=tmp_path)
    a_job_with_a_gap(cfg)
    first = reconcile(spark, cfg, "rec-1", confirmer=confirmed)
    again = reconcile(spark, cfg, "rec-2", confirmer=confirmed, since=at(-3600))  # the same window
    assert [i.incident_id for i in first.incidents] == [i.incident_id for i in again.incidents]
    stored = read(spark, cfg, "incidents").collect()
    assert [(r.kind, r.severity, r.records_lost, r.partitions, r.reconcile_run_id) for r in stored] == [
        ("gap", "critical", 5, 1, "rec-2")
    ]
    gap = read(spark, cfg, "findings").filter("finding_type = 'GAP'").first()
    assert gap is not None
    assert list(stored[0].finding_ids) == [gap.finding_id]
    assert first.audited_jobs == ["job-a"]
    # Dated by its evidence: the checkpoint by whose completion the sink should have held 45..49.
    evidence_at = {stored[0].first_evidence_at, stored[0].last_evidence_at}
    assert {t.replace(tzinfo=UTC) for t in evidence_at} == {at(11)}  # Spark's naive UTC times

    code = cli.main(["incidents", "--json", *set_options(data_dir=tmp_path)])
    listed = json.loads(capsys.readouterr().out)
    assert code == 1  # a critical incident is at or above the default --fail-on error
    assert [i["incident_id"] for i in listed["incidents"]] == [stored[0].incident_id]
    assert listed["incidents"][0]["ranges"] == [{"topic": "orders", "partition": 0, "start": 45, "end": 50}]
    assert listed["incidents"][0]["repair"] == f"offset-audit repair --incident {stored[0].incident_id}"
    # --job and --since select: another job's, or evidence before the given time, lists nothing.
    for selection, listed_ids in (
        (["--job", "other"], []),
        (["--job", "job-a"], [stored[0].incident_id]),
        (["--since", at(3600).isoformat()], []),
        (["--since", at(-3600).isoformat()], [stored[0].incident_id]),
    ):
        code = cli.main(["incidents", "--json", *selection, *set_options(data_dir=tmp_path)])
        selected = json.loads(capsys.readouterr().out)
        assert [i["incident_id"] for i in selected["incidents"]] == listed_ids, selection
        assert code == (1 if listed_ids else 0)

    code = cli.main(["repair", "--incident", stored[0].incident_id, *set_options(data_dir=tmp_path)])
    plan = capsys.readouterr().out
    assert code == 0
    assert "dry run: nothing is changed" in plan
    assert 'startingOffsets={"orders": {"0": 45}} endingOffsets={"orders": {"0": 50}}' in plan
    assert "orders,0,45" in plan
    assert cli.main(["repair", "--incident", "no-such", *set_options(data_dir=tmp_path)]) == 2


def test_output_the_ledger_does_not_account_for_is_a_ledger_gap_incident_in_reconcile_json(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = build_config(data_dir=tmp_path)
    a_job_with_a_gap(cfg, sink=False)
    # The job wrote 0..59 but its ledger vouches for 0..49 only: 50..59 came from a batch it never
    # recorded as completed (the job ran without auditing, or crashed between sink and ledger).
    save(sink_table(sink_rows(0, range(60))), cfg, "sink")

    code = cli.main(["reconcile", "--json", "--no-confirm", *set_options(data_dir=tmp_path)])
    summary = json.loads(capsys.readouterr().out)

    assert code == 0  # a warn incident is below the default --fail-on error
    assert summary["jobs"] == ["job-a"]  # the job it audited, not only the ones asked for
    (incident,) = summary["incidents"]
    stored = read(spark, cfg, "incidents").collect()
    assert [(r.incident_id, r.kind, r.severity, r.partitions) for r in stored] == [
        (incident["incident_id"], "ledger_gap", "warn", 1)
    ]
    assert (incident["kind"], incident["severity"], incident["partitions"]) == ("ledger_gap", "warn", 1)
    assert "does not account for" in incident["cause"]
    assert set(incident["impact"]) == {
        "records_lost",
        "records_unverifiable",
        "records_duplicated",
        "records_replayed",
        "max_commit_lag",
    }
    assert incident["finding_ids"] == list(stored[0].finding_ids)
