"""Which incidents `watch` alerts: once when one opens, again only when its impact changes; the
stop signal that ends the wait between cycles at once; a failed step fails its cycle, not the watch."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from app.alerts.incidents import due_alerts, fingerprint
from app.contracts.vocabulary import INCIDENT_OPEN, INCIDENT_RESOLVED
from app.errors import ConfigError, KafkaUnavailableError
from app.incidents.incident import Impact, StoredIncident
from app.incidents.remedy import RemedyPlan
from app.nightly.run import STEP_DONE, StepOutcome, _step_line
from app.pipeline.context import AuditContext
from app.runtime.signals import StopSignal
from app.watch.loop import Cycle, Watch
from tests.support.config import build_config

pytestmark = pytest.mark.unit


def incident(
    incident_id: str, lost: int = 10, status: str = INCIDENT_OPEN, run: str = "rec-1"
) -> StoredIncident:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return StoredIncident(
        incident_id=incident_id,
        kind="restart",
        severity="critical",
        status=status,
        job_name="job",
        group_id="group",
        run_ids=("run-1",),
        first_evidence_at=at,
        last_evidence_at=at,
        partitions=1,
        impact=Impact(records_lost=lost),
        cause="a restart from latest skipped records",
        remedy=RemedyPlan(),
        finding_ids=("f1",),
        reconcile_run_id=run,
    )


def test_a_new_open_incident_is_due_once_and_not_again_when_only_its_reconcile_run_changes() -> None:
    first = incident("i1")
    due = due_alerts([first], {})
    assert [i.incident_id for i in due.opened] == ["i1"]
    assert due.changed == ()

    seen_again = incident("i1", run="rec-2")  # the next cycle's reconcile saw it again
    assert due_alerts([seen_again], {"i1": fingerprint(first)}).empty


def test_an_incident_whose_impact_changed_is_due_again() -> None:
    sent = {"i1": fingerprint(incident("i1", lost=10))}
    due = due_alerts([incident("i1", lost=25)], sent)
    assert due.opened == ()
    assert [i.impact.records_lost for i in due.changed] == [25]


def test_a_resolved_incident_is_not_alerted() -> None:
    assert due_alerts([incident("i1", status=INCIDENT_RESOLVED)], {}).empty


def test_the_payload_names_what_opened_and_what_changed() -> None:
    due = due_alerts([incident("new"), incident("old", lost=3)], {"old": fingerprint(incident("old"))})
    payload = due.payload("watch-1")
    assert [i["incident_id"] for i in payload["opened"]] == ["new"]
    assert [i["impact"]["records_lost"] for i in payload["changed"]] == [3]
    assert dataclasses.replace(due, opened=(), changed=()).empty


def test_the_wait_between_cycles_ends_at_a_signal_not_at_its_timeout() -> None:
    stop = StopSignal()
    previous = signal.signal(signal.SIGTERM, stop.request)
    try:
        started = time.monotonic()
        signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGTERM))
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        assert stop.wait(60.0) is True
        assert time.monotonic() - started < 30  # woken by the signal, far before the timeout
        assert stop.requested == signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_the_wait_times_out_without_a_stop() -> None:
    assert StopSignal().wait(0.05) is False


def watch_with(steps: list[tuple[str, Callable[[Cycle], dict[str, Any]]]], lines: list[str]) -> Watch:
    cfg = build_config()
    ctx = AuditContext.create(cfg, None, bootstrap=lambda: "unused:9092")
    watch = Watch(ctx, 0.01, StopSignal(), lines.append)
    watch.steps = steps
    return watch


def test_a_failed_step_ends_its_cycle_with_a_line_naming_it_and_the_next_cycle_runs_again() -> None:
    calls: list[str] = []

    def ingest(cycle: Cycle) -> dict[str, Any]:
        calls.append(f"ingest {cycle.number}")
        if cycle.number == 1:
            raise KafkaUnavailableError("no broker answered at unused:9092")
        return {}

    def window(cycle: Cycle) -> dict[str, Any]:
        calls.append(f"window {cycle.number}")
        return {}

    lines: list[str] = []
    cycles = watch_with([("ingest-offsets", ingest), ("window", window)], lines).run(max_cycles=2)

    assert calls == ["ingest 1", "ingest 2", "window 2"]  # the failed cycle never reached its window
    assert cycles[0].failed_step == "ingest-offsets"
    assert "failed at ingest-offsets" in lines[0]
    assert "no broker answered" in lines[0]
    assert " ok: " in lines[1]


def test_a_usage_error_in_the_first_cycle_ends_the_watch() -> None:
    def reconcile(cycle: Cycle) -> dict[str, Any]:
        raise ConfigError("tables.sink", "no Delta table at /nowhere")

    cycles = watch_with([("reconcile", reconcile)], []).run(max_cycles=5)
    assert len(cycles) == 1
    assert cycles[0].error_kind == "usage"


def test_a_cycle_line_says_how_many_completeness_windows_its_reconcile_wrote() -> None:
    cycle = Cycle(3, "watch-x", datetime(2026, 3, 1, tzinfo=UTC))
    cycle.summaries["reconcile"] = {"since": None, "until": "2026-03-01T00:00:00", "completeness_windows": 4}
    assert "completeness windows 4," in cycle.line()


def test_a_nightly_reconcile_step_says_how_many_completeness_windows_it_wrote() -> None:
    step = StepOutcome("reconcile", STEP_DONE, 1.0, {"partitions": 2, "completeness_windows": 7})
    assert _step_line(step).endswith("7 completeness windows")
