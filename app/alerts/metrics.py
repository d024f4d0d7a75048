"""The metrics `nightly` tells monitoring when it ends (config section ``alerts``), in Prometheus'
text exposition format, built with ``prometheus_client`` in a registry of their own (delivered by
``alerts.channels``).

The window gauges (``WINDOW_METRICS``) describe each job and topic's last closed completeness
window; `watch` refreshes them in the nightly's textfile every cycle (``refresh_window_metrics``),
keeping the nightly's other metrics as they are.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from app.config import AppConfig
from app.contracts.instants import instant
from app.contracts.vocabulary import COMMAND_RECONCILE, INCIDENT_KINDS, RUN_SUCCEEDED, SEVERITIES
from app.incidents.incident import IncidentSummary
from app.reconcile.completeness.reads import recent_windows
from app.storage.handles import TableHandle

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClosedWindow:
    """A job and topic's last closed window, over its partitions; None where the sink mode cannot
    know the value (it is then not exported: no number stands for unknown)."""

    job_name: str
    topic: str
    window_start: datetime
    window_end: datetime
    completeness: float | None  # landed / expected over the partitions
    lost: int | None
    latency_p95_ms: int | None  # the worst partition's p95

    @property
    def labels(self) -> tuple[str, str]:
        return (self.job_name, self.topic)


def _closed_window(job: str, topic: str, rows: Sequence[Mapping[str, Any]]) -> ClosedWindow:
    expected = [r.get("expected") for r in rows]
    landed = [r.get("landed") for r in rows]
    known = all(v is not None for v in (*expected, *landed)) and all(
        r.get("completeness") is not None for r in rows
    )
    total = sum(int(v) for v in expected if v is not None)
    completeness = None
    if known:
        # Nothing expected: nothing missing (as the dashboard counts it).
        completeness = 1.0 if total == 0 else sum(int(v) for v in landed if v is not None) / total
    lost = [r.get("lost") for r in rows]
    p95 = [int(r["latency_p95_ms"]) for r in rows if r.get("latency_p95_ms") is not None]
    return ClosedWindow(
        job_name=job,
        topic=topic,
        window_start=rows[0]["window_start"],
        window_end=max(r["window_end"] for r in rows),
        completeness=completeness,
        lost=None if any(v is None for v in lost) else sum(int(v) for v in lost if v is not None),
        latency_p95_ms=max(p95, default=None),
    )


def last_closed_windows(rows: Iterable[Mapping[str, Any]]) -> list[ClosedWindow]:
    """Per job and topic, the latest window whose every partition's row is final (a window some
    partition still recomputes is not closed), summed over its partitions."""
    windows: dict[tuple[str, str], dict[datetime, list[Mapping[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rows:
        windows[(str(r["job_name"]), str(r["topic"]))][r["window_start"]].append(r)
    out = []
    for (job, topic), by_start in sorted(windows.items()):
        closed = [start for start, part in by_start.items() if all(bool(r["final"]) for r in part)]
        if closed:
            out.append(_closed_window(job, topic, by_start[max(closed)]))
    return out


def read_closed_windows(completeness: TableHandle, cfg: AppConfig, now: datetime) -> list[ClosedWindow]:
    """The last closed window per job and topic among the recent ones (``report.window_hours``):
    a bounded read, whatever the table's history; none when there is no completeness table."""
    table = recent_windows(completeness, now - timedelta(hours=cfg.report.window_hours))
    return [] if table is None else last_closed_windows(table.to_pylist())


def last_reconcile_success(audit_runs: TableHandle) -> datetime | None:
    """When the last successful reconcile run finished (a night's, a cycle's or a command's)."""
    rows = audit_runs.read_columns(["command", "status", "finished_at"]) or []
    times = [
        instant(r["finished_at"])
        for r in rows
        if r["command"] == COMMAND_RECONCILE and r["status"] == RUN_SUCCEEDED
    ]
    return max(times, default=None)


def run_partitions(partition_summary: TableHandle, reconcile_run_id: str) -> list[dict[str, Any]]:
    """The commit lag of each partition in ``reconcile_run_id``'s summary rows. The run's own rows:
    the files whose statistics rule its run out are not opened (a watch beside the nightly appends
    a run's rows every minute)."""
    cols = ["reconcile_run_id", "group_id", "topic", "partition", "commit_lag_offsets", "commit_lag_seconds"]
    rows = partition_summary.rows_with("reconcile_run_id", reconcile_run_id)
    return [] if rows is None else rows.select(cols).to_pylist()


# The window gauges, by name: what `watch` replaces in the nightly's textfile.
WINDOW_COMPLETENESS: Final = "offset_audit_window_completeness_ratio"
WINDOW_LOST: Final = "offset_audit_window_records_lost"
WINDOW_LATENCY: Final = "offset_audit_window_latency_p95_seconds"
WINDOW_END: Final = "offset_audit_window_end_timestamp_seconds"
WINDOW_METRICS: Final = (WINDOW_COMPLETENESS, WINDOW_LOST, WINDOW_LATENCY, WINDOW_END)


def add_window_gauges(registry: CollectorRegistry, windows: Iterable[ClosedWindow]) -> None:
    """The last closed window's gauges per job and topic; an unknown value has no sample."""
    labels = ["job", "topic"]
    ratio = Gauge(
        WINDOW_COMPLETENESS,
        "Records landed / expected in the last closed completeness window",
        labels,
        registry=registry,
    )
    lost = Gauge(WINDOW_LOST, "Records lost (confirmed) in the last closed window", labels, registry=registry)
    latency = Gauge(
        WINDOW_LATENCY,
        "End-to-end p95 latency in the last closed window (worst partition)",
        labels,
        registry=registry,
    )
    end = Gauge(
        WINDOW_END, "End of the last closed window the other gauges describe", labels, registry=registry
    )
    for w in windows:
        end.labels(*w.labels).set(w.window_end.timestamp())
        if w.completeness is not None:
            ratio.labels(*w.labels).set(w.completeness)
        if w.lost is not None:
            lost.labels(*w.labels).set(w.lost)
        if w.latency_p95_ms is not None:
            latency.labels(*w.labels).set(w.latency_p95_ms / 1000)


class _Families:
    """A collector of metric families as parsed from a textfile: the nightly's, kept as written."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self.families = families

    def collect(self) -> Sequence[Metric]:
        return self.families


def refresh_window_metrics(textfile: str, windows: Iterable[ClosedWindow]) -> None:
    """Replace the window gauges in ``textfile`` (atomically), keeping every other metric in it."""
    path = Path(textfile)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    kept = [f for f in text_string_to_metric_families(text) if f.name not in WINDOW_METRICS]
    registry = CollectorRegistry()
    registry.register(_Families(kept))
    add_window_gauges(registry, windows)
    write_to_textfile(textfile, registry)


@dataclass(frozen=True)
class NightlyFacts:
    """What the metrics are made of, gathered by the nightly runner."""

    succeeded: bool
    finished_at: datetime
    last_success_at: datetime | None
    incidents: Sequence[IncidentSummary]  # of this night's reconcile
    partitions: Sequence[Mapping[str, Any]]  # partition_summary rows of this night's reconcile
    windows: Sequence[ClosedWindow] = ()  # each job and topic's last closed completeness window


def registry_for(facts: NightlyFacts) -> CollectorRegistry:
    registry = CollectorRegistry()
    incidents = Gauge(
        "offset_audit_incidents",
        "Open incidents found by the last nightly reconcile, by kind and severity",
        ["kind", "severity"],
        registry=registry,
    )
    for kind in INCIDENT_KINDS:
        for severity in SEVERITIES:
            incidents.labels(kind, severity).set(0)
    records = Gauge(
        "offset_audit_records",
        "Records lost (confirmed), unverifiable, duplicated and replayed in the last night's incidents",
        ["job", "impact"],
        registry=registry,
    )
    for i in facts.incidents:
        if i.is_open:
            incidents.labels(i.kind, i.severity).inc()
        for name, n in (
            ("lost", i.impact.records_lost),
            ("unverifiable", i.impact.records_unverifiable),
            ("duplicated", i.impact.records_duplicated),
            ("replayed", i.impact.records_replayed),
        ):
            records.labels(str(i.job_name), name).inc(n)
    lag = Gauge(
        "offset_audit_commit_lag_offsets",
        "Latest completed checkpoint offset minus the group's committed offset",
        ["group", "topic", "partition"],
        registry=registry,
    )
    lag_s = Gauge(
        "offset_audit_commit_lag_seconds",
        "Seconds between the latest completed checkpoint and the group's last commit",
        ["group", "topic", "partition"],
        registry=registry,
    )
    for p in facts.partitions:
        labels = (str(p["group_id"]), str(p["topic"]), str(p["partition"]))
        if p.get("commit_lag_offsets") is not None:
            lag.labels(*labels).set(int(p["commit_lag_offsets"]))
        if p.get("commit_lag_seconds") is not None:
            lag_s.labels(*labels).set(int(p["commit_lag_seconds"]))
    Gauge(
        "offset_audit_nightly_success", "1 when the last nightly finished every step", registry=registry
    ).set(1 if facts.succeeded else 0)
    Gauge(
        "offset_audit_nightly_finished_timestamp_seconds", "When the last nightly ended", registry=registry
    ).set(facts.finished_at.timestamp())
    if facts.last_success_at is not None:
        Gauge(
            "offset_audit_last_success_timestamp_seconds",
            "When the last nightly that finished every step ended",
            registry=registry,
        ).set(facts.last_success_at.timestamp())
    add_window_gauges(registry, facts.windows)
    return registry
