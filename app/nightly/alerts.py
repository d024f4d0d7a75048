"""What `nightly` tells monitoring when it ends (config section ``alerts``).

Metrics in Prometheus' text exposition format, built with ``prometheus_client`` in a registry of
their own: written atomically to a file for node_exporter's textfile collector and/or pushed to a
Pushgateway. The nightly JSON summary can be POSTed to a webhook. The webhook URL is treated as a
secret (chat webhooks carry their token in the URL): messages name only its host.

The window gauges (``WINDOW_METRICS``) describe each job and topic's last closed completeness
window; `watch` refreshes them in the nightly's textfile every cycle (``refresh_window_metrics``),
keeping the nightly's other metrics as they are.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlparse

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from app.config import AlertsConfig, AppConfig
from app.contracts.vocabulary import INCIDENT_KINDS, SEVERITIES
from app.errors import InfrastructureError
from app.incidents.incident import IncidentSummary
from app.report.gather import recent_windows
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


def post_json(url: str, payload: Mapping[str, Any], timeout_s: float) -> int:
    """POST ``payload`` as JSON; the HTTP status, or InfrastructureError naming only the host."""
    body = json.dumps(payload, sort_keys=True, default=str).encode("utf-8")
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    host = urlparse(url).netloc.rsplit("@", 1)[-1]
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status)
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise InfrastructureError(f"the webhook at {host} did not accept the summary: {reason}") from None


def deliver(cfg: AlertsConfig, facts: NightlyFacts, summary: Mapping[str, Any]) -> list[str]:
    """Every configured channel; returns what was done. Any failure raises InfrastructureError after
    trying the others, so one dead channel does not silence the rest."""
    done: list[str] = []
    errors: list[str] = []
    registry = registry_for(facts)
    if cfg.textfile:
        try:
            write_to_textfile(cfg.textfile, registry)
            done.append(f"metrics written to {cfg.textfile}")
        except OSError as exc:
            errors.append(f"cannot write {cfg.textfile}: {exc}")
    if cfg.pushgateway_url:
        host = urlparse(cfg.pushgateway_url).netloc.rsplit("@", 1)[-1]
        try:
            push_to_gateway(
                cfg.pushgateway_url, job=cfg.pushgateway_job, registry=registry, timeout=cfg.timeout_s
            )
            done.append(f"metrics pushed to the Pushgateway at {host}")
        except (urllib.error.URLError, OSError) as exc:
            errors.append(f"the Pushgateway at {host} did not accept the metrics: {exc}")
    if cfg.webhook_url:
        try:
            status = post_json(cfg.webhook_url, summary, cfg.timeout_s)
            done.append(f"summary posted to the webhook (HTTP {status})")
        except InfrastructureError as exc:
            errors.append(str(exc))
    for line in done:
        log.info("alerts: %s", line)
    if errors:
        raise InfrastructureError("; ".join(errors))
    return done
