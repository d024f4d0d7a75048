"""One policy for a broker that is away, whichever way the reconcile step runs: the `reconcile`
command, a night's step and a watch cycle's. Kafka is needed only to read suspected gaps back: a
window without gaps is audited, its completeness windows left for the next run with a warning; a
window with gaps fails as an infrastructure error naming what could not be confirmed, with no
finding written. An embedded broker that is not running (`kafka.bootstrap_servers: local`, nothing
started) is away like one that does not answer."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app import cli
from app.config import AppConfig
from app.contracts.vocabulary import COMMAND_RECONCILE
from app.nightly.run import STEP_DONE, STEPS, Nightly, state_path
from app.pipeline.context import AuditContext
from app.runtime.session import kafka_bootstrap
from app.runtime.signals import StopSignal
from app.storage.tables import tables_from_config
from app.watch.loop import Watch
from tests.support.config import build_config
from tests.support.ledger_data import (
    at,
    checkpoint,
    commits_table,
    ev,
    gc,
    ledger_table,
    sink_rows,
    sink_table,
)
from tests.support.reconcile import a_job_with_a_gap, save

pytestmark = pytest.mark.spark

WIRINGS = ("command", "nightly", "watch")
SKIPPED_COMPLETENESS = "completeness not computed this run"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    error: str  # what the run said of its failure ("" when it succeeded)


def a_job_without_gaps(cfg: AppConfig) -> None:
    save(
        ledger_table(
            ev("RUN_STARTED", 0),
            ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
            checkpoint(1, 10, {0: 50}),
            ev("RUN_STOPPED", 30),
        ),
        cfg,
        "ledger",
    )
    save(commits_table(gc(12, 0, 50)), cfg, "group_commits")
    save(sink_table(sink_rows(0, range(50))), cfg, "sink")


def context(cfg: AppConfig, spark: SparkSession) -> AuditContext:
    """As the processes open theirs: the broker located by the config, each time a step asks."""
    return AuditContext.for_session(cfg, spark, lambda: kafka_bootstrap(cfg))


def reconcile_by(
    wiring: str, cfg: AppConfig, spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> Outcome:
    if wiring == "command":
        code = cli.main(["reconcile", "--set", f"paths.data_dir={cfg.paths.data_dir}"])
        err = capsys.readouterr().err
        assert code in (0, 3), err
        return Outcome(code == 0, err)
    if wiring == "nightly":
        # A night resumed at its reconcile: every other step was done by an earlier attempt.
        run_id = "nightly-resumed"
        others = {s: {"status": STEP_DONE, "summary": {}} for s in STEPS if s != COMMAND_RECONCILE}
        path = Path(state_path(cfg, run_id))
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"run_id": run_id, "steps": others}))
        night = Nightly(context(cfg, spark), run_id, now=at(10_000)).run()
        step = next(s for s in night.steps if s.step == COMMAND_RECONCILE)
        return Outcome(night.failed_step is None, step.error or "")
    watch = Watch(context(cfg, spark), 60, StopSignal(), out=lambda _: None)
    watch.steps = [s for s in watch.steps if s[0] == COMMAND_RECONCILE]
    cycle = watch.cycle(1)
    return Outcome(cycle.failed_step is None, cycle.error or "")


@pytest.mark.parametrize("wiring", WIRINGS)
def test_without_gaps_an_absent_broker_costs_only_the_completeness_windows(
    wiring: str,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    cfg = build_config(data_dir=tmp_path)  # kafka.bootstrap_servers: local, and none started here
    a_job_without_gaps(cfg)

    with caplog.at_level(logging.WARNING):
        outcome = reconcile_by(wiring, cfg, spark, capsys)

    assert outcome == Outcome(True, "")
    assert Path(tables_from_config(cfg).partition_summary).exists()  # the window was audited
    assert not Path(tables_from_config(cfg).completeness).exists()  # left for the next run
    assert any(SKIPPED_COMPLETENESS in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.parametrize("wiring", WIRINGS)
def test_with_gaps_an_absent_broker_fails_the_step_naming_the_gaps_it_could_not_confirm(
    wiring: str,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = build_config(data_dir=tmp_path)
    a_job_with_a_gap(cfg)

    outcome = reconcile_by(wiring, cfg, spark, capsys)

    assert not outcome.ok
    assert "cannot confirm 1 suspected gap(s)" in outcome.error, outcome.error
    assert "no embedded broker runs" in outcome.error, outcome.error
    assert not Path(tables_from_config(cfg).findings).exists()
