"""Nightly alerts against a real local HTTP server: the metrics pushed to a Pushgateway endpoint
and written to a textfile parse back with prometheus_client's parser; the webhook receives the JSON
summary; a dead endpoint is an infrastructure error naming only its host."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.alerts import channels, metrics
from app.config import AlertsConfig
from app.errors import InfrastructureError
from app.incidents.incident import Impact, IncidentSummary
from tests.support.http_server import Request, recording_server
from tests.support.metrics import samples

pytestmark = pytest.mark.unit

FACTS = metrics.NightlyFacts(
    succeeded=True,
    finished_at=datetime(2026, 3, 2, 2, 30, tzinfo=UTC),
    last_success_at=datetime(2026, 3, 2, 2, 30, tzinfo=UTC),
    incidents=[
        IncidentSummary(
            incident_id="inc-1",
            kind="restart",
            severity="critical",
            status="open",
            job_name="orders",
            group_id="grp",
            run_ids=("run-5",),
            partitions=3,
            ranges=(),
            impact=Impact(records_lost=150),
            cause="",
            repair=None,
            finding_ids=(),
        ),
        IncidentSummary(
            incident_id="inc-2",
            kind="second_writer",
            severity="error",
            status="open",
            job_name="orders",
            group_id="grp",
            run_ids=(),
            partitions=1,
            ranges=(),
            impact=Impact(records_duplicated=20),
            cause="",
            repair=None,
            finding_ids=(),
        ),
    ],
    partitions=[
        {
            "group_id": "grp",
            "topic": "orders",
            "partition": 0,
            "commit_lag_offsets": 7,
            "commit_lag_seconds": 3,
        }
    ],
)


@pytest.fixture
def server() -> Iterator[tuple[str, list[Request]]]:
    with recording_server() as served:
        yield served


def test_metrics_reach_the_pushgateway_and_the_textfile_and_the_summary_the_webhook(
    server: tuple[str, list[Request]], tmp_path: Path
) -> None:
    url, received = server
    textfile = tmp_path / "offset_audit.prom"
    cfg = AlertsConfig(textfile=str(textfile), pushgateway_url=url, webhook_url=f"{url}/hook/T0KEN")
    done = channels.deliver(cfg, FACTS, {"run_id": "nightly-1", "failing": 2})
    assert len(done) == 3
    assert "T0KEN" not in " ".join(done)

    pushed = [(m, p, b) for m, p, b in received if p.startswith("/metrics/")]
    assert [(m, p) for m, p, _ in pushed] == [("PUT", "/metrics/job/offset-audit")]
    for text in (pushed[0][2].decode(), textfile.read_text()):
        got = samples(text)
        assert got[("offset_audit_incidents", (("kind", "restart"), ("severity", "critical")))] == 1
        assert got[("offset_audit_incidents", (("kind", "gap"), ("severity", "critical")))] == 0
        assert got[("offset_audit_records", (("impact", "lost"), ("job", "orders")))] == 150
        assert got[("offset_audit_records", (("impact", "duplicated"), ("job", "orders")))] == 20
        lag = (("group", "grp"), ("partition", "0"), ("topic", "orders"))
        assert got[("offset_audit_commit_lag_offsets", lag)] == 7
        assert got[("offset_audit_commit_lag_seconds", lag)] == 3
        assert got[("offset_audit_nightly_success", ())] == 1
        assert got[("offset_audit_last_success_timestamp_seconds", ())] == FACTS.finished_at.timestamp()

    hooks = [(m, p, b) for m, p, b in received if p.startswith("/hook/")]
    assert [(m, json.loads(b)) for m, _, b in hooks] == [("POST", {"failing": 2, "run_id": "nightly-1"})]


def test_a_dead_webhook_is_an_infrastructure_error_that_does_not_leak_its_token(tmp_path: Path) -> None:
    textfile = tmp_path / "m.prom"
    cfg = AlertsConfig(textfile=str(textfile), webhook_url="http://127.0.0.1:1/hook/T0KEN", timeout_s=5)
    with pytest.raises(InfrastructureError) as raised:
        channels.deliver(cfg, FACTS, {})
    assert "127.0.0.1:1" in str(raised.value)
    assert "T0KEN" not in str(raised.value)
    assert textfile.exists()  # the other channels were still served


def test_the_webhook_url_is_redacted_wherever_config_is_shown(capsys: pytest.CaptureFixture[str]) -> None:
    from app import cli

    assert cli.main(["config", "show", "--set", "alerts.webhook_url=https://hooks.example/T0KEN"]) == 0
    shown = capsys.readouterr().out
    assert "T0KEN" not in shown
    assert json.loads(shown)["alerts"]["webhook_url"] == "***"
    assert cli.main(["config", "show", "--set", "alerts.pushgateway_url=ftp://x"]) == 2
    assert "alerts.pushgateway_url" in capsys.readouterr().err
