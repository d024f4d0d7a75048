"""The watch loop: one Spark session, a cycle every ``interval`` seconds, a clean stop between cycles.

A cycle is a list of steps (``Watch.steps``), run in order, each a function returning a small summary:
ingest the new ``__consumer_offsets`` records, reconcile the ledger window since the last successful
cycle (findings and incidents are MERGEd by deterministic ids), alert incidents that opened or whose
impact changed, refresh the dashboard. The reconcile run of a cycle is recorded ``pending`` and
confirmed only when every step succeeded, like a night's: a failed or killed cycle never moves the
window, so the next cycle judges the same records again, into the same ids.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from pyspark.sql import SparkSession

from app.config import AppConfig
from app.contracts.vocabulary import COMMAND_RECONCILE, RUN_PENDING
from app.errors import describe_error, error_kind
from app.incidents.io import read_incidents
from app.reconcile.outputs import AuditRun, confirm_runs
from app.storage.handles import AuditTables
from app.watch import alerting

log = logging.getLogger(__name__)

Step = tuple[str, Callable[["Cycle"], dict[str, Any]]]


def new_cycle_id(now: datetime) -> str:
    return f"watch-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


@dataclass
class Cycle:
    """One cycle: its id and clock, what its steps found, and where it failed."""

    number: int
    cycle_id: str
    now: datetime
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed_step: str | None = None
    error: str | None = None
    error_kind: str | None = None
    seconds: float = 0.0

    def line(self) -> str:
        """The one progress line of a cycle."""
        if self.failed_step is not None:
            return (
                f"cycle {self.number} {self.cycle_id} failed at {self.failed_step} "
                f"after {self.seconds:.1f}s: {self.error}"
            )
        rec = self.summaries.get(COMMAND_RECONCILE, {})
        alerts = self.summaries.get("alerts", {})
        return (
            f"cycle {self.number} {self.cycle_id} ok: window [{rec.get('since') or 'beginning'}, "
            f"{rec.get('until')}), findings new {rec.get('new_findings', 0)}, completeness windows "
            f"{rec.get('completeness_windows')}, incidents opened "
            f"{alerts.get('opened', 0)} changed {alerts.get('changed', 0)}, {self.seconds:.1f}s"
        )


class StopSignal:
    """SIGTERM/SIGINT ask for a stop; ``wait`` sleeps until the timeout or a stop, whichever first.

    The handler only sets a flag and writes a byte to a pipe: no lock is taken in a signal handler
    (it runs in the main thread between two bytecodes, maybe while that thread holds the lock), and
    the wait wakes at once on the byte instead of sleeping through the signal."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self.requested: int | None = None

    def request(self, signum: int, _frame: FrameType | None = None) -> None:
        self.requested = signum
        # A full pipe holds earlier requests already: the wait wakes anyway.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"x")

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.request)
        signal.signal(signal.SIGINT, self.request)

    def wait(self, timeout_s: float) -> bool:
        """True when a stop was requested (now or before), after at most ``timeout_s``."""
        if self.requested is None:
            select.select([self._read], [], [], max(timeout_s, 0.0))
        return self.requested is not None


class Watch:
    """Runs cycles until a stop; each cycle's failure is logged with its step and the loop goes on."""

    def __init__(
        self,
        spark: SparkSession,
        cfg: AppConfig,
        bootstrap: Callable[[], str],
        interval_s: float,
        stop: StopSignal,
        out: Callable[[str], None] = print,
    ) -> None:
        self.spark = spark
        self.cfg = cfg
        self.bootstrap = bootstrap
        self.interval_s = interval_s
        self.stop = stop
        self.out = out
        self.tables = AuditTables.from_config(cfg, spark)
        # The cycle's steps, in order. A step that fails ends the cycle; the next cycle starts again
        # from the first step.
        self.steps: list[Step] = [
            ("ingest-offsets", self._ingest),
            (COMMAND_RECONCILE, self._reconcile),
            # Reconcile writes the completeness table too (its windows not yet final): before the
            # window is confirmed, and resumed from the table itself, not from the window.
            ("window", self._confirm_window),
            ("alerts", self._alerts),
            ("report", self._report),
        ]

    def run(self, max_cycles: int | None = None) -> list[Cycle]:
        """Cycles every ``interval_s`` (measured start to start) until a stop or ``max_cycles``;
        ends after a first cycle that failed for a usage reason."""
        cycles: list[Cycle] = []
        while self.stop.requested is None and (max_cycles is None or len(cycles) < max_cycles):
            started = time.monotonic()
            cycle = self.cycle(len(cycles) + 1)
            cycles.append(cycle)
            self.out(cycle.line())
            if len(cycles) == 1 and cycle.error_kind == "usage":
                # A configuration the first cycle cannot work with (a missing sink, a bad setting):
                # no later cycle fixes it, so the watch ends at start (exit 2).
                break
            if max_cycles is not None and len(cycles) >= max_cycles:
                break
            if self.stop.wait(self.interval_s - (time.monotonic() - started)):
                break
        if self.stop.requested is not None:
            log.info("stopped by signal %d between cycles", self.stop.requested)
        return cycles

    def cycle(self, number: int) -> Cycle:
        now = datetime.now(UTC)
        cycle = Cycle(number, new_cycle_id(now), now)
        started = time.monotonic()
        for name, step in self.steps:
            log.info("cycle %d %s: %s ...", number, cycle.cycle_id, name)
            try:
                cycle.summaries[name] = step(cycle)
            except Exception as exc:  # broad on purpose: any failure fails the cycle, not the watch
                cycle.failed_step, cycle.error, cycle.error_kind = name, describe_error(exc), error_kind(exc)
                log.error("cycle %d %s: %s failed: %s", number, cycle.cycle_id, name, cycle.error)
                log.debug("cycle %s: step %s failed", cycle.cycle_id, name, exc_info=True)
                break
        cycle.seconds = time.monotonic() - started
        return cycle

    # --- steps -----------------------------------------------------------------------------------
    def _ingest(self, cycle: Cycle) -> dict[str, Any]:
        from app.kafka.clients import check_reachable
        from app.offsets_topic.run import ingest_offsets

        bootstrap = self.bootstrap()
        check_reachable(self.cfg.kafka, bootstrap)
        outcome = ingest_offsets(
            self.spark,
            self.cfg,
            bootstrap,
            list(self.cfg.ingest.groups),
            f"{cycle.cycle_id}-ingest",
            mode=self.cfg.ingest.mode,
            tables=self.tables,
        )
        return {"total": outcome.total, "inserted": outcome.inserted}

    def _reconcile(self, cycle: Cycle) -> dict[str, Any]:
        from app.kafka.gaps import kafka_gap_confirmer
        from app.kafka.times import KafkaTimes
        from app.reconcile.run import run_reconcile

        r = self.cfg.reconcile
        confirmer = None
        if r.confirm_gaps:
            confirmer = kafka_gap_confirmer(
                self.cfg.kafka,
                self.bootstrap(),
                max_records=r.confirm_max_records,
                timeout_s=r.confirm_timeout_s,
            )
        run = AuditRun(run_id=cycle.cycle_id, now=cycle.now, until=cycle.now, status=RUN_PENDING)
        known = self._finding_ids()
        times = KafkaTimes(self.cfg.kafka, self.bootstrap(), r.confirm_timeout_s)
        outcome = run_reconcile(
            self.spark, self.cfg, run, confirmer=confirmer, times=times, tables=self.tables
        )
        since = outcome.window.since
        return {
            "since": None if since is None else since.isoformat(timespec="seconds"),
            "until": outcome.window.until.isoformat(timespec="seconds"),
            "new_findings": len(self._finding_ids() - known),
            "incidents": len(outcome.incidents),
            "completeness_windows": outcome.completeness_windows,
        }

    def _finding_ids(self) -> set[str]:
        rows = self.tables.findings.read_columns(["finding_id"]) or []
        return {str(r["finding_id"]) for r in rows}

    def _confirm_window(self, cycle: Cycle) -> dict[str, Any]:
        """The judging steps all succeeded: the next cycle's window starts where this one ended.
        Alerts and the dashboard come after on purpose: they read the incidents table, not the
        window, so one that fails is done again by the next cycle without judging anything twice,
        and the dashboard shows this cycle's reconcile run (the latest confirmed one)."""
        return {"confirmed": confirm_runs(self.tables.audit_runs, cycle.cycle_id)}

    def _alerts(self, cycle: Cycle) -> dict[str, Any]:
        sent = self.tables.alert_state
        due = alerting.due_alerts(read_incidents(self.tables.incidents), alerting.read_sent(sent))
        url = self.cfg.alerts.webhook_url
        if url and not due.empty:
            from app.nightly.alerts import post_json

            post_json(url, due.payload(cycle.cycle_id), self.cfg.alerts.timeout_s)
        if not due.empty:
            alerting.record_sent(sent, due, cycle.cycle_id, datetime.now(UTC))
        textfile = self.cfg.alerts.textfile
        if textfile:
            # The window gauges move every cycle; the nightly's other metrics stay as it wrote them.
            from app.nightly.alerts import read_closed_windows, refresh_window_metrics

            refresh_window_metrics(
                textfile, read_closed_windows(self.tables.completeness, self.cfg, cycle.now)
            )
        return {"opened": len(due.opened), "changed": len(due.changed), "posted": bool(url and not due.empty)}

    def _report(self, cycle: Cycle) -> dict[str, Any]:
        from app.report.gather import build_report

        return {"html": str(build_report(self.tables, self.cfg, cycle.cycle_id, now=cycle.now))}
