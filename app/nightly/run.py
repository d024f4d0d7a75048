"""The nightly pipeline: ingest-offsets -> reconcile -> forensics -> check -> report -> maintain,
one run id.

Every step is idempotent over its inputs (MERGEs keyed by record or finding identity, per-run
replacement of check results), so a failed night is finished by re-running with the same run id:
steps recorded as done in the run's state file are skipped, the failed one and those after it run.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession

from app.config import AppConfig
from app.contracts.instants import instant
from app.contracts.vocabulary import (
    COMMAND_FORENSICS,
    COMMAND_RECONCILE,
    RUN_PENDING,
    SEVERITIES,
    severity_at_least,
)
from app.errors import describe_error, error_kind
from app.incidents.incident import IncidentSummary, summaries_json
from app.pipeline import steps
from app.pipeline.context import AuditContext
from app.reconcile.outputs import AuditRun, confirm_runs
from app.storage.files import read_text, write_text
from app.storage.handles import AuditTables

log = logging.getLogger(__name__)

# The night's steps in order, each the command of that name; reconcile and forensics record runs.
# Maintenance comes last: it rewrites files the audit steps would otherwise read in a race with it.
STEPS = ("ingest-offsets", COMMAND_RECONCILE, COMMAND_FORENSICS, "check", "report", "maintain")
# What became of a step (the nightly state file): skipped when an earlier attempt of the run did it.
STEP_STATUSES = ("done", "skipped", "failed")
STEP_DONE, STEP_SKIPPED, STEP_FAILED = STEP_STATUSES


def new_run_id(now: datetime) -> str:
    return f"nightly-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


@dataclass
class StepOutcome:
    step: str
    status: str  # STEP_STATUSES
    seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_kind: str | None = None  # usage | infrastructure | internal (app.errors.error_kind)


@dataclass
class NightlyResult:
    run_id: str
    started_at: str
    steps: list[StepOutcome] = field(default_factory=list)
    # severity -> count (reconcile + forensics), less the findings of incidents a repair resolved
    findings: dict[str, int] = field(default_factory=dict)
    failed_expectations: dict[str, int] = field(default_factory=dict)  # severity -> count
    report: str | None = None
    screenshot: str | None = None

    @property
    def failed_step(self) -> StepOutcome | None:
        return next((s for s in self.steps if s.status == STEP_FAILED), None)

    def failing(self, fail_on: str) -> int:
        counts = [*self.findings.items(), *self.failed_expectations.items()]
        return sum(n for sev, n in counts if severity_at_least(sev, fail_on))


def state_path(cfg: AppConfig, run_id: str) -> str:
    return cfg.paths.under("nightly", f"{run_id}.json")


def load_state(spark: SparkSession, cfg: AppConfig, run_id: str) -> dict[str, Any]:
    text = read_text(spark, state_path(cfg, run_id))
    return json.loads(text) if text else {"run_id": run_id, "steps": {}}


def save_state(spark: SparkSession, cfg: AppConfig, state: Mapping[str, Any]) -> None:
    write_text(
        spark, state_path(cfg, str(state["run_id"])), json.dumps(state, indent=2, sort_keys=True, default=str)
    )


class Nightly:
    """Runs the steps in order; each step returns a JSON-able summary of what it did."""

    def __init__(
        self,
        ctx: AuditContext,
        run_id: str | None = None,
        now: datetime | None = None,
        screenshot: bool = False,
    ) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.now = now or ctx.now()
        self.run_id = run_id or new_run_id(self.now)
        self.screenshot = screenshot

    @property
    def tables(self) -> AuditTables:
        return self.ctx.tables  # reached through the session once a step has started it

    def run(self) -> NightlyResult:
        spark = self.ctx.spark  # the state file is read through the session's file systems
        state = load_state(spark, self.cfg, self.run_id)
        state.setdefault("started_at", self.now.isoformat())
        if state["steps"].get("check", {}).get("status") != STEP_DONE:
            from app.quality import preload

            preload.start()  # Great Expectations' import overlaps with ingest and reconcile
        result = NightlyResult(self.run_id, state["started_at"])
        steps: dict[str, Callable[[], dict[str, Any]]] = {
            "ingest-offsets": self._ingest,
            COMMAND_RECONCILE: self._reconcile,
            COMMAND_FORENSICS: self._forensics,
            "check": self._check,
            "report": self._report,
            "maintain": self._maintain,
        }
        for number, name in enumerate(STEPS, 1):
            done = state["steps"].get(name)
            if done and done.get("status") == STEP_DONE:
                log.info(
                    "[%d/%d] %s: done by an earlier attempt of %s, skipped",
                    number,
                    len(STEPS),
                    name,
                    self.run_id,
                )
                result.steps.append(
                    StepOutcome(name, STEP_SKIPPED, done.get("seconds", 0.0), done.get("summary", {}))
                )
                continue
            log.info("[%d/%d] %s ...", number, len(STEPS), name)
            started = time.monotonic()
            try:
                summary = steps[name]()
            except Exception as exc:  # broad on purpose: any failure (py4j, storage) fails the step
                outcome = StepOutcome(
                    name,
                    STEP_FAILED,
                    time.monotonic() - started,
                    error=describe_error(exc),
                    error_kind=error_kind(exc),
                )
                result.steps.append(outcome)
                state["steps"][name] = asdict(outcome)
                save_state(spark, self.cfg, state)
                log.error("[%d/%d] %s failed: %s", number, len(STEPS), name, outcome.error)
                log.debug("step %s failed", name, exc_info=True)
                break
            outcome = StepOutcome(name, STEP_DONE, round(time.monotonic() - started, 2), summary)
            result.steps.append(outcome)
            state["steps"][name] = asdict(outcome)
            save_state(spark, self.cfg, state)
            log.info("[%d/%d] %s done in %.1fs", number, len(STEPS), name, outcome.seconds)
        if result.failed_step is None:
            # Only a night whose every step finished moves the audit window (CONTRACTS.md section 5).
            confirm_runs(self.tables.audit_runs, self.run_id)
        collect_steps(result)
        self._alert(result)
        return result

    def _alert(self, result: NightlyResult) -> None:
        """Metrics and the webhook, when configured; a failure to deliver fails the night (exit 3)."""
        started = time.monotonic()
        summaries = [i for s in result.steps for i in s.summary.get("incidents", [])]
        try:
            incidents = [IncidentSummary.from_json(i) for i in summaries]
            done = steps.alert_night(
                self.ctx, self.run_id, result.failed_step is None, incidents, asdict(result)
            )
        except Exception as exc:  # broad on purpose: a failed delivery is reported like a failed step
            result.steps.append(
                StepOutcome(
                    "alerts",
                    STEP_FAILED,
                    time.monotonic() - started,
                    error=describe_error(exc),
                    error_kind=error_kind(exc),
                )
            )
            log.error("alerts failed: %s", describe_error(exc))
            return
        if done is not None:
            result.steps.append(
                StepOutcome("alerts", STEP_DONE, round(time.monotonic() - started, 2), {"sent": done})
            )

    def _audit_run(self) -> AuditRun:
        return AuditRun(run_id=self.run_id, now=self.now, since=None, until=self.now, status=RUN_PENDING)

    # --- steps: each the pipeline's, its outcome made the summary the state file keeps -------------
    def _ingest(self) -> dict[str, Any]:
        outcome = steps.ingest(self.ctx, f"{self.run_id}-ingest")
        return {
            "mode": outcome.mode,
            "total": outcome.total,
            "inserted": outcome.inserted,
            "warnings": outcome.warnings,
        }

    def _reconcile(self) -> dict[str, Any]:
        outcome = steps.reconcile(self.ctx, self._audit_run())
        return {
            "completeness_windows": outcome.completeness_windows,
            "partitions": outcome.partitions,
            "gaps_suspected": outcome.gaps_suspected,
            "confirmation": outcome.confirmation,
            "counts": [[t, s, n] for (t, s), n in sorted(outcome.counts.items())],
            # Of those, the findings of incidents a repair resolved: they fail no night.
            "settled": [[t, s, n] for (t, s), n in sorted(outcome.settled.items())],
            "top": [f.to_row() for f in outcome.top[:10]],
            "incidents": summaries_json(outcome.incidents),
        }

    def _forensics(self) -> dict[str, Any]:
        outcome = steps.forensics(self.ctx, self._audit_run())
        classes: dict[str, int] = {}
        for row in outcome.restarts:
            classes[row["classification"]] = classes.get(row["classification"], 0) + 1
        return {
            "restarts": classes,
            "counts": [[t, s, n] for (t, s), n in sorted(outcome.counts.items()) if s],
        }

    def _check(self) -> dict[str, Any]:
        from app.quality.checks import CheckOptions

        since = self._window_start()
        options = CheckOptions(reconcile_run_id=self.run_id, since=since)
        summary = steps.check(self.ctx, self.run_id, options, now=self.now)
        failed: dict[str, int] = {}
        for outcome in summary.failed(SEVERITIES[-1]):
            failed[outcome.severity] = failed.get(outcome.severity, 0) + 1
        return {
            "failed_by_severity": failed,
            "data_docs": summary.data_docs,
            "since": None if since is None else since.isoformat(),
        }

    def _window_start(self) -> datetime | None:
        """Where this night's reconcile window starts (None: the first night, everything). The
        check validates the ledger and group commits from there: the rows since the last night
        that succeeded, since a failed night leaves its reconcile run pending and the next
        night's window starts where the last successful one ended."""
        rows = self.tables.audit_runs.read_columns(["run_id", "command", "window_start"]) or []
        starts = [
            instant(r["window_start"])
            for r in rows
            if r["run_id"] == self.run_id
            and r["command"] == COMMAND_RECONCILE
            and r["window_start"] is not None
        ]
        return min(starts, default=None)

    def _report(self) -> dict[str, Any]:
        from app.report.gather import report_path

        html = report_path(self.cfg)
        shot = html.with_suffix(".png") if self.screenshot else None
        outcome = steps.report(self.ctx, self.run_id, now=self.now, screenshot=shot)
        out: dict[str, Any] = {"html": str(outcome.html)}
        if outcome.png is not None:
            out["png"] = str(outcome.png)
        return out

    def _maintain(self) -> dict[str, Any]:
        result = steps.maintain(self.ctx, self.now)
        return {
            "files_by_table": {
                t.table: [t.files_before, t.files_after] for t in result.tables if not t.missing
            },
            "rows_deleted": sum(t.rows_deleted for t in result.tables),
            "files_vacuumed": sum(t.files_vacuumed for t in result.tables),
        }


def collect_steps(result: NightlyResult) -> None:
    """The night's totals from its steps' summaries: findings by severity (less those of incidents a
    repair resolved, which fail no night), failed expectations, the report's files."""
    for step in result.steps:
        if step.step in (COMMAND_RECONCILE, COMMAND_FORENSICS):
            for _, severity, n in step.summary.get("counts", []):
                if severity in SEVERITIES:
                    result.findings[severity] = result.findings.get(severity, 0) + int(n)
            for _, severity, n in step.summary.get("settled", []):
                if severity in SEVERITIES:
                    result.findings[severity] = result.findings.get(severity, 0) - int(n)
        elif step.step == "check":
            result.failed_expectations = dict(step.summary.get("failed_by_severity", {}))
        elif step.step == "report":
            result.report = step.summary.get("html")
            result.screenshot = step.summary.get("png")


def summary_text(result: NightlyResult, fail_on: str) -> str:
    lines = [f"nightly {result.run_id} (started {result.started_at})"]
    for step in result.steps:
        mark = {STEP_DONE: "ok", STEP_SKIPPED: "--", STEP_FAILED: "!!"}[step.status]
        detail = step.error or _step_line(step)
        lines.append(f"  {mark} {step.step:<15} {step.seconds:7.1f}s  {detail}")
    found = ", ".join(f"{sev} {result.findings.get(sev, 0)}" for sev in SEVERITIES)
    lines.append(f"  findings: {found}")
    if result.failed_expectations:
        failed = ", ".join(f"{sev} {n}" for sev, n in sorted(result.failed_expectations.items()))
        lines.append(f"  failed expectations: {failed}")
    if result.report:
        lines.append(f"  dashboard: {result.report}")
    if result.screenshot:
        lines.append(f"  screenshot: {result.screenshot}")
    if result.failed_step:
        lines.append(
            f"  stopped at {result.failed_step.step}; finish this night with: "
            f"offset-audit nightly --run-id {result.run_id}"
        )
    else:
        lines.append(f"  {result.failing(fail_on)} findings/expectations at or above '{fail_on}'")
    return "\n".join(lines)


def _step_line(step: StepOutcome) -> str:
    s = step.summary
    if step.step == "ingest-offsets":
        total = s.get("total", {})
        read, decoded, quarantined = (total.get(k, 0) for k in ("read", "decoded", "quarantined"))
        return f"read {read}, decoded {decoded}, quarantined {quarantined}"
    if step.step == COMMAND_RECONCILE:
        gaps = f"{s.get('gaps_suspected', 0)} suspected gaps ({s.get('confirmation')})"
        windows = f"{s.get('completeness_windows')} completeness windows"
        return f"{s.get('partitions', 0)} partitions, {gaps}, {windows}"
    if step.step == COMMAND_FORENSICS:
        return "restarts: " + (
            ", ".join(f"{k} {v}" for k, v in sorted(s.get("restarts", {}).items())) or "none"
        )
    if step.step == "check":
        failed = s.get("failed_by_severity", {})
        return f"{sum(failed.values())} failed expectations" if failed else "all expectations met"
    if step.step == "maintain":
        files = s.get("files_by_table", {}).values()
        before, after = sum(f[0] for f in files), sum(f[1] for f in files)
        return f"files {before} -> {after}, {s.get('rows_deleted', 0)} rows past retention deleted"
    return str(s.get("html", ""))
