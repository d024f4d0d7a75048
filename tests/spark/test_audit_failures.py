"""Audit failures are not verdicts (CONTRACTS.md section 5): when the audit cannot see, it says
so with an exit code, writes no finding, and never moves the window, so the next run looks again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from app import cli
from app.config import AppConfig, KafkaConfig
from app.contracts.vocabulary import RUN_PENDING
from app.errors import ConfigError, KafkaUnavailableError
from app.kafka.gaps import kafka_gap_confirmer
from app.reconcile.outputs import AuditRun, confirm_runs, last_window_end
from app.reconcile.run import run_reconcile
from app.storage.handles import AuditTables
from app.storage.tables import tables_from_config
from tests.support.config import build_config, set_options
from tests.support.ledger_data import at, checkpoint, ev, ledger_table, sink_rows, sink_table
from tests.support.reconcile import a_job_with_a_gap, read, reconcile, save

pytestmark = pytest.mark.spark


def tables_written(cfg: AppConfig) -> set[str]:
    return {p.name for p in Path(tables_from_config(cfg).ledger).parent.iterdir()} - {
        "ledger",
        "group_commits",
        "sink",
    }


def test_a_missing_sink_table_exits_2_naming_path_and_key_and_writes_nothing(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = build_config(data_dir=tmp_path)
    a_job_with_a_gap(cfg, sink=False)
    missing = tmp_path / "no-such-sink"
    with pytest.raises(ConfigError) as raised:
        reconcile(spark, cfg, "rec-missing")
    assert raised.value.key == "tables.sink"
    assert tables_written(cfg) == set()

    code = cli.main(["reconcile", *set_options(data_dir=tmp_path), "--sink", str(missing), "--no-confirm"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--sink" in err
    assert str(missing) in err
    assert tables_written(cfg) == set()


def test_a_failed_gap_confirmation_writes_no_finding_and_does_not_move_the_window(
    spark: SparkSession, tmp_path: Path
) -> None:
    cfg = build_config(data_dir=tmp_path)
    a_job_with_a_gap(cfg)
    unreachable = kafka_gap_confirmer(
        KafkaConfig(bootstrap_servers="127.0.0.1:1", request_timeout_s=2),
        "127.0.0.1:1",
        max_records=10,
        timeout_s=2,
    )
    with pytest.raises(KafkaUnavailableError):
        reconcile(spark, cfg, "rec-down", confirmer=unreachable)
    assert not Path(tables_from_config(cfg).findings).exists()
    assert not Path(tables_from_config(cfg).partition_summary).exists()
    runs = read(spark, cfg, "audit_runs").collect()
    assert [(r.run_id, r.status) for r in runs] == [("rec-down", "failed")]
    assert last_window_end(AuditTables.from_config(cfg, spark).audit_runs, "reconcile", []) is None

    # The next run (Kafka back) looks at the same window again and confirms the gap.
    def confirmed(gaps: Any) -> list[dict[str, Any]]:
        return [{"status": "confirmed", "data_records": g.end - g.start} for g in gaps]

    again = reconcile(spark, cfg, "rec-again", confirmer=confirmed)
    assert again.window.since is None
    gap = read(spark, cfg, "findings").filter("finding_type = 'GAP'").collect()
    assert [(g.offset_start, g.offset_end, g.status, g.severity) for g in gap] == [
        (45, 50, "confirmed", "critical")
    ]


def test_a_nightly_step_moves_the_window_only_once_its_night_has_finished(
    spark: SparkSession, tmp_path: Path
) -> None:
    cfg = build_config(data_dir=tmp_path)
    a_job_with_a_gap(cfg)
    runs = AuditTables.from_config(cfg, spark).audit_runs
    run_reconcile(
        spark,
        cfg,
        AuditRun(run_id="night-1", now=at(20_000), since=None, until=at(10_000), status=RUN_PENDING),
    )
    assert last_window_end(runs, "reconcile", []) is None
    assert confirm_runs(runs, "night-1") == 1
    assert last_window_end(runs, "reconcile", []) == at(10_000)
    assert [r.status for r in read(spark, cfg, "audit_runs").collect()] == ["succeeded"]


def test_a_storage_failure_exits_3_not_1(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = build_config(data_dir=tmp_path)
    a_job_with_a_gap(cfg)
    # A ledger whose transaction log is garbage: the storage layer's own exception, not ours.
    log = Path(tables_from_config(cfg).ledger) / "_delta_log"
    for f in log.glob("*.json"):
        f.write_text("{not json")
    code = cli.main(["reconcile", *set_options(data_dir=tmp_path), "--no-confirm"])
    err = capsys.readouterr().err
    assert code == 3
    assert err.startswith("offset-audit: infrastructure error: ")
    assert not Path(tables_from_config(cfg).findings).exists()


@pytest.mark.kafka
def test_a_night_that_fails_after_reconcile_exits_3_and_never_moves_the_window(
    spark: SparkSession,
    tmp_path: Path,
    bootstrap: str,
    unique: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = build_config(data_dir=tmp_path)
    save(
        ledger_table(
            ev("RUN_STARTED", 0, run="run-1"),
            ev("OFFSETS_RESTORED", 0, run="run-1", offsets={0: 0}, detail={"source": "earliest"}),
            checkpoint(1, 10, {0: 50}, run="run-1"),
            ev("RUN_STOPPED", 30, run="run-1"),
            ev("RUN_STARTED", 40, run="run-2"),  # a restart: forensics has a row to store
            ev("OFFSETS_RESTORED", 40, run="run-2", offsets={0: 50}, detail={"source": "checkpoint"}),
            ev("RUN_STOPPED", 50, run="run-2"),
        ),
        cfg,
        "ledger",
    )
    save(sink_table(sink_rows(0, range(50))), cfg, "sink")
    # The restarts table's transaction log is garbage: forensics, the step after reconcile, fails
    # with the storage layer's own exception.
    restarts_log = Path(tables_from_config(cfg).restarts) / "_delta_log"
    restarts_log.mkdir(parents=True)
    (restarts_log / "00000000000000000000.json").write_text("{not json")

    code = cli.main(
        [
            "nightly",
            "--json",
            "--run-id",
            "night-1",
            *set_options(
                f"kafka.bootstrap_servers={bootstrap}", f"ingest.groups=[nobody-{unique}]", data_dir=tmp_path
            ),
        ]
    )
    summary = json.loads(capsys.readouterr().out)

    assert code == 3  # an infrastructure failure, never 1 (findings)
    assert [(s["step"], s["status"], s["error_kind"]) for s in summary["steps"]] == [
        ("ingest-offsets", "done", None),
        ("reconcile", "done", None),
        ("forensics", "failed", "infrastructure"),
    ]
    # Reconcile finished, but its night did not: its run stays pending and the window stays put.
    runs = read(spark, cfg, "audit_runs").collect()
    assert [(r.run_id, r.command, r.status) for r in runs] == [("night-1", "reconcile", RUN_PENDING)]
    assert last_window_end(AuditTables.from_config(cfg, spark).audit_runs, "reconcile", []) is None
