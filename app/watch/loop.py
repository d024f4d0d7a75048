"""The watch loop: one context and Spark session, a cycle every ``interval`` seconds, a clean stop
between cycles.

A cycle is a list of steps (``Watch.steps``), run in order, each a step of `app.pipeline.steps` over
the cycle, returning a small summary: bring each followed Flink job's new checkpoints into the
ledger (`watch.flink_jobs`, `app.watch.flink`), ingest the new ``__consumer_offsets`` records, reconcile the
ledger window since the last successful cycle (findings and incidents are MERGEd by deterministic
ids), alert incidents that opened or whose impact changed, refresh the dashboard. The reconcile run
of a cycle is recorded ``pending`` and confirmed only when every step succeeded, like a night's: a
failed or killed cycle never moves the window, so the next cycle judges the same records again,
into the same ids.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.contracts import vocabulary as vocab
from app.contracts.vocabulary import COMMAND_RECONCILE, RUN_PENDING
from app.errors import describe_error, error_kind
from app.pipeline import steps
from app.pipeline.context import AuditContext
from app.reconcile.outputs import AuditRun, confirm_runs
from app.runtime.signals import StopSignal
from app.storage.handles import AuditTables
from app.watch.flink import FlinkFollowers

log = logging.getLogger(__name__)

FOLLOW_FLINK = "follow-flink"
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
            f"{alerts.get('opened', 0)} changed {alerts.get('changed', 0)}"
            f"{flink_part(self.summaries.get(FOLLOW_FLINK))}, {self.seconds:.1f}s"
        )


def flink_part(followed: dict[str, Any] | None) -> str:
    """The Flink jobs' share of a cycle's line: how many answered, their checkpoints recorded and
    missed since the watch started (empty without `watch.flink_jobs`)."""
    if not followed:
        return ""
    jobs = list(followed.values())
    answered = sum(1 for j in jobs if j["followed"])
    recorded = sum(j.get(vocab.DETAIL_CHECKPOINTS_RECORDED, 0) for j in jobs)
    missed = sum(j.get("missed", 0) for j in jobs)
    return f", Flink jobs followed {answered}/{len(jobs)} checkpoints recorded {recorded} missed {missed}"


class Watch:
    """Runs cycles until a stop; each cycle's failure is logged with its step and the loop goes on."""

    def __init__(
        self,
        ctx: AuditContext,
        interval_s: float,
        stop: StopSignal,
        out: Callable[[str], None] = print,
    ) -> None:
        self.ctx = ctx
        self.interval_s = interval_s
        self.stop = stop
        self.out = out
        # The cycle's steps, in order, each the pipeline's step over the cycle. A step that fails
        # ends the cycle; the next cycle starts again from the first step. Another source of the
        # ledger followed each cycle is one more entry before the judging steps: the Flink jobs of
        # `watch.flink_jobs`, whose followers poll between cycles too (`app.watch.flink`).
        self.flink = FlinkFollowers(ctx, list(ctx.cfg.watch.flink_jobs))
        follow: list[Step] = [(FOLLOW_FLINK, self._follow_flink)] if self.flink.jobs else []
        self.steps: list[Step] = [
            *follow,
            ("ingest-offsets", self._ingest),
            (COMMAND_RECONCILE, self._reconcile),
            # Reconcile writes the completeness table too (its windows not yet final): before the
            # window is confirmed, and resumed from the table itself, not from the window.
            ("window", self._confirm_window),
            ("alerts", self._alerts),
            ("report", self._report),
        ]

    @property
    def tables(self) -> AuditTables:
        return self.ctx.tables

    def run(self, max_cycles: int | None = None) -> list[Cycle]:
        """Cycles every ``interval_s`` (measured start to start) until a stop or ``max_cycles``;
        ends after a first cycle that failed for a usage reason."""
        cycles: list[Cycle] = []
        try:
            self._cycles(cycles, max_cycles)
        finally:
            self.flink.close()  # the Flink followers stop with the watch
        if self.stop.requested is not None:
            log.info("stopped by signal %d between cycles", self.stop.requested)
        return cycles

    def _cycles(self, cycles: list[Cycle], max_cycles: int | None) -> None:
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

    def cycle(self, number: int) -> Cycle:
        now = self.ctx.now()
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

    # --- steps: each the pipeline's, its outcome made the cycle's summary --------------------------
    def _follow_flink(self, _cycle: Cycle) -> dict[str, Any]:
        return self.flink.step()

    def _ingest(self, cycle: Cycle) -> dict[str, Any]:
        outcome = steps.ingest(self.ctx, f"{cycle.cycle_id}-ingest")
        return {"total": outcome.total, "inserted": outcome.inserted}

    def _reconcile(self, cycle: Cycle) -> dict[str, Any]:
        run = AuditRun(run_id=cycle.cycle_id, now=cycle.now, until=cycle.now, status=RUN_PENDING)
        known = self._finding_ids()
        outcome = steps.reconcile(self.ctx, run)
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
        sent = steps.alert_incidents(self.ctx, cycle.cycle_id, cycle.now)
        return {"opened": sent.opened, "changed": sent.changed, "posted": sent.posted}

    def _report(self, cycle: Cycle) -> dict[str, Any]:
        return {"html": str(steps.report(self.ctx, cycle.cycle_id, now=cycle.now).html)}
