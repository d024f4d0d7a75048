"""Each step of the audit, written once as a function of the context: ingest, reconcile, forensics,
check, report, maintain, and the alerts of a night and of a watch cycle.

The single commands run one step each; `nightly` runs them in order under one run id, with its
resumable state; `watch` runs a cycle of them every few seconds. A step returns its typed outcome;
each caller makes of it the summary it prints or keeps. A step talks to the broker only through
the context's `Broker`, so an unreachable broker means the same in all three.

The heavy modules (Spark's jobs, Great Expectations, the browser) are imported when their step
runs: a command pays only for its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.pipeline.context import AuditContext

if TYPE_CHECKING:
    from app.incidents.incident import IncidentSummary
    from app.maintenance.run import MaintenanceResult
    from app.offsets_topic.plan import IngestResult
    from app.quality.checks import CheckOptions
    from app.quality.outcomes import CheckSummary
    from app.reconcile.forensics.run import ForensicsResult
    from app.reconcile.outputs import AuditRun
    from app.reconcile.run import ReconcileResult


def ingest(
    ctx: AuditContext, run_id: str | None, groups: Sequence[str] | None = None, mode: str | None = None
) -> IngestResult:
    """`__consumer_offsets` into the ingest tables (``groups`` and ``mode``: the config's unless
    given). The broker is needed: asked before Spark starts, so its absence costs
    kafka.request_timeout_s, not a session's start."""
    from app.offsets_topic.run import ingest_offsets

    bootstrap = ctx.broker.reachable()
    spark = ctx.spark
    chosen = list(groups) if groups is not None else list(ctx.cfg.ingest.groups)
    return ingest_offsets(
        spark, ctx.cfg, bootstrap, chosen, run_id, mode=mode or ctx.cfg.ingest.mode, tables=ctx.tables
    )


def reconcile(ctx: AuditContext, run: AuditRun, confirm: bool = True) -> ReconcileResult:
    """The audit of ``run``'s window. Suspected gaps are read back from the source when
    reconcile.confirm_gaps and ``confirm`` (`--no-confirm`) allow."""
    from app.reconcile.run import run_reconcile

    r = ctx.cfg.reconcile
    confirmer = ctx.broker.gap_confirmer(r) if r.confirm_gaps and confirm else None
    times = ctx.broker.source_times(r)
    spark = ctx.spark
    return run_reconcile(spark, ctx.cfg, run, confirmer=confirmer, times=times, tables=ctx.tables)


def forensics(ctx: AuditContext, run: AuditRun) -> ForensicsResult:
    """The restarts of ``run``'s window classified into the restarts table."""
    from app.reconcile.forensics.run import run_forensics

    spark = ctx.spark
    return run_forensics(spark, ctx.cfg, run, ctx.tables)


def check(ctx: AuditContext, run_id: str, options: CheckOptions, now: datetime | None = None) -> CheckSummary:
    """The Great Expectations suites over the audit tables."""
    from app.quality.checks import run_checks

    spark = ctx.spark
    return run_checks(spark, ctx.cfg, run_id, now=now, options=options, tables=ctx.tables)


@dataclass(frozen=True)
class ReportOutcome:
    html: Path
    png: Path | None = None


def report(
    ctx: AuditContext,
    run_id: str,
    output: Path | None = None,
    now: datetime | None = None,
    screenshot: Path | None = None,
) -> ReportOutcome:
    """The dashboard, read on the driver (no Spark of its own), and its screenshot if asked."""
    from app.report.gather import build_report

    html = build_report(ctx.tables, ctx.cfg, run_id, output=output, now=now)
    if screenshot is None:
        return ReportOutcome(html)
    from app.report.browser import screenshot as take_screenshot

    return ReportOutcome(html, take_screenshot(html, screenshot))


def maintain(ctx: AuditContext, now: datetime, only: Sequence[str] = ()) -> MaintenanceResult:
    """Retention, compaction, checkpoints and VACUUM of the tables, with delta-rs on the driver."""
    from app.maintenance.run import maintain as maintain_tables

    return maintain_tables(ctx.storage, ctx.cfg, now, only=only, tables=ctx.tables)


def alert_night(
    ctx: AuditContext,
    run_id: str,
    succeeded: bool,
    incidents: Sequence[IncidentSummary],
    summary: dict[str, Any],
) -> list[str] | None:
    """A night's metrics and summary to every configured channel; what was done, None when no
    channel is configured. A channel that fails raises InfrastructureError after the others."""
    from app.alerts import channels, metrics

    a = ctx.cfg.alerts
    if not (a.textfile or a.pushgateway_url or a.webhook_url):
        return None
    finished_at = ctx.now()
    facts = metrics.NightlyFacts(
        succeeded=succeeded,
        finished_at=finished_at,
        last_success_at=metrics.last_reconcile_success(ctx.tables.audit_runs),
        incidents=incidents,
        partitions=metrics.run_partitions(ctx.tables.partition_summary, run_id),
        windows=metrics.read_closed_windows(ctx.tables.completeness, ctx.cfg, finished_at),
    )
    return channels.deliver(a, facts, summary)


@dataclass(frozen=True)
class IncidentAlerts:
    opened: int
    changed: int
    posted: bool


def alert_incidents(ctx: AuditContext, cycle_id: str, now: datetime) -> IncidentAlerts:
    """The open incidents due (new, or changed since last alerted) POSTed to the webhook, then
    recorded as sent; the window gauges in the textfile refreshed (the nightly's other metrics
    stay as it wrote them)."""
    from app.alerts import channels, incidents, metrics
    from app.incidents.io import read_incidents

    sent = ctx.tables.alert_state
    due = incidents.due_alerts(read_incidents(ctx.tables.incidents), incidents.read_sent(sent))
    url = ctx.cfg.alerts.webhook_url
    if url and not due.empty:
        channels.post_json(url, due.payload(cycle_id), ctx.cfg.alerts.timeout_s)
    if not due.empty:
        incidents.record_sent(sent, due, cycle_id, ctx.now())
    textfile = ctx.cfg.alerts.textfile
    if textfile:
        windows = metrics.read_closed_windows(ctx.tables.completeness, ctx.cfg, now)
        metrics.refresh_window_metrics(textfile, windows)
    return IncidentAlerts(len(due.opened), len(due.changed), bool(url and not due.empty))
