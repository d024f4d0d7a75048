"""Where the alerts go (config section ``alerts``): the metrics written atomically to a file for
node_exporter's textfile collector and/or pushed to a Pushgateway; a JSON body (the nightly's
summary, `watch`'s incidents) POSTed to a webhook. The webhook URL is treated as a secret (chat
webhooks carry their token in the URL): messages name only its host.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from prometheus_client import push_to_gateway, write_to_textfile

from app.alerts.metrics import NightlyFacts, registry_for
from app.config import AlertsConfig
from app.errors import InfrastructureError

log = logging.getLogger(__name__)


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
