"""What `nightly` tells monitoring when it ends (config section ``alerts``).

Metrics in Prometheus' text exposition format, built with ``prometheus_client`` in a registry of
their own: written atomically to a file for node_exporter's textfile collector and/or pushed to a
Pushgateway. The nightly JSON summary can be POSTed to a webhook. The webhook URL is treated as a
secret (chat webhooks carry their token in the URL): messages name only its host.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from app.config import AlertsConfig
from app.contracts.vocabulary import INCIDENT_KINDS, SEVERITIES
from app.errors import InfrastructureError
from app.incidents.incident import IncidentSummary

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NightlyFacts:
    """What the metrics are made of, gathered by the nightly runner."""

    succeeded: bool
    finished_at: datetime
    last_success_at: datetime | None
    incidents: Sequence[IncidentSummary]  # of this night's reconcile
    partitions: Sequence[Mapping[str, Any]]  # partition_summary rows of this night's reconcile


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
