"""The window gauges: per job and topic, the last closed completeness window (every partition's
row final), summed over its partitions; unknown values (a sink mode without coordinates) have no
sample; `watch` replaces them in the nightly's textfile and keeps the nightly's other metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.alerts import channels, metrics
from app.config import AlertsConfig
from app.contracts.tables import COMPLETENESS_SCHEMA
from app.pipeline.context import AuditContext
from app.runtime.signals import StopSignal
from app.storage import delta_rows
from app.storage.tables import tables_from_config
from app.watch.loop import Watch
from tests.support.config import build_config

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
JOB = "orders-audit"


def window(partition: int, minutes: int, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict(
        job_name=JOB, topic="orders", partition=partition, window_start=T0 + timedelta(minutes=minutes),
        window_end=T0 + timedelta(minutes=minutes + 10), sink_mode="coordinates", expected=100,
        landed=100, lost=0, unverifiable=0, duplicated=0, pending=0, completeness=1.0,
        latency_p50_ms=800, latency_p95_ms=2000, final=True,
    )  # fmt: skip
    row.update(over)
    return row


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_last_closed_window_is_the_latest_whose_every_partition_is_final() -> None:
    rows = [
        window(0, 0),
        window(1, 0),
        window(0, 10, landed=90, lost=10, completeness=0.9, latency_p95_ms=4000),
        window(1, 10, landed=95, lost=3, unverifiable=2, completeness=0.95),
        window(0, 20),  # closed on partition 0 only: partition 1 still recomputes it
        window(1, 20, final=False, landed=50, pending=50, completeness=0.5),
        window(0, 30, final=False),
    ]

    closed = metrics.last_closed_windows(rows)

    assert closed == [
        metrics.ClosedWindow(
            job_name=JOB,
            topic="orders",
            window_start=T0 + timedelta(minutes=10),
            window_end=T0 + timedelta(minutes=20),
            completeness=185 / 200,
            lost=13,
            latency_p95_ms=4000,  # the worst partition's
        )
    ]


def test_a_job_with_no_closed_window_has_none_and_unknown_values_stay_unknown() -> None:
    rows = [
        window(0, 0, final=False),
        *(
            window(p, 0, job_name="payments", topic="payments", sink_mode="delta_batches", landed=None,
                   duplicated=None, completeness=None, latency_p50_ms=None, latency_p95_ms=None, lost=4 * p)
            for p in range(2)
        ),
    ]  # fmt: skip

    closed = metrics.last_closed_windows(rows)

    assert [(w.job_name, w.completeness, w.lost, w.latency_p95_ms) for w in closed] == [
        ("payments", None, 4, None)
    ]


def test_the_gauges_carry_job_and_topic_and_export_no_number_for_unknown(tmp_path: Path) -> None:
    windows = metrics.last_closed_windows(
        [
            window(0, 0, landed=90, lost=10, completeness=0.9, latency_p95_ms=2500),
            window(
                0,
                0,
                job_name="payments",
                topic="payments",
                landed=None,
                completeness=None,
                latency_p95_ms=None,
                lost=None,
            ),
        ]
    )
    textfile = tmp_path / "m.prom"
    facts = metrics.NightlyFacts(True, T0, T0, incidents=[], partitions=[], windows=windows)

    channels.deliver(AlertsConfig(textfile=str(textfile)), facts, {})

    got = samples(textfile.read_text())
    orders = (("job", JOB), ("topic", "orders"))
    payments = (("job", "payments"), ("topic", "payments"))
    assert got[("offset_audit_window_completeness_ratio", orders)] == 0.9
    assert got[("offset_audit_window_records_lost", orders)] == 10
    assert got[("offset_audit_window_latency_p95_seconds", orders)] == 2.5
    assert (
        got[("offset_audit_window_end_timestamp_seconds", orders)] == (T0 + timedelta(minutes=10)).timestamp()
    )
    assert got[("offset_audit_window_end_timestamp_seconds", payments)] > 0
    for name in metrics.WINDOW_METRICS[:3]:
        assert (name, payments) not in got  # unknown: no sample, neither 0 nor 1


def test_watch_replaces_the_window_gauges_and_keeps_the_nightlys_other_metrics(tmp_path: Path) -> None:
    textfile = tmp_path / "m.prom"
    before = metrics.last_closed_windows([window(0, 0, landed=90, lost=10, completeness=0.9)])
    facts = metrics.NightlyFacts(True, T0, T0, incidents=[], partitions=[], windows=before)
    channels.deliver(AlertsConfig(textfile=str(textfile)), facts, {})
    nightly = {k: v for k, v in samples(textfile.read_text()).items() if k[0] not in metrics.WINDOW_METRICS}

    metrics.refresh_window_metrics(str(textfile), metrics.last_closed_windows([window(0, 10)]))

    got = samples(textfile.read_text())
    orders = (("job", JOB), ("topic", "orders"))
    assert got[("offset_audit_window_completeness_ratio", orders)] == 1.0
    assert got[("offset_audit_window_records_lost", orders)] == 0
    assert (
        got[("offset_audit_window_end_timestamp_seconds", orders)] == (T0 + timedelta(minutes=20)).timestamp()
    )
    assert {k: v for k, v in got.items() if k[0] not in metrics.WINDOW_METRICS} == nightly
    assert ("offset_audit_nightly_success", ()) in nightly


def test_without_a_nightly_textfile_yet_watch_writes_the_window_gauges_alone(tmp_path: Path) -> None:
    textfile = tmp_path / "m.prom"

    metrics.refresh_window_metrics(str(textfile), metrics.last_closed_windows([window(0, 0)]))

    assert {name for name, _ in samples(textfile.read_text())} == set(metrics.WINDOW_METRICS)


def test_watch_refreshes_the_gauges_from_the_completeness_table_each_cycle(tmp_path: Path) -> None:
    cfg = build_config(f"alerts.textfile={tmp_path / 'm.prom'}", data_dir=tmp_path)
    path = tables_from_config(cfg).completeness
    now = datetime.now(UTC)
    # No Spark session: the alerts step reads its tables with delta-rs, which takes None for local.
    ctx = AuditContext.create(cfg, None, bootstrap=str)
    watch = Watch(ctx, interval_s=60, stop=StopSignal(), out=lambda _: None)
    watch.steps = [step for step in watch.steps if step[0] == "alerts"]

    def stored(start: datetime, **over: Any) -> dict[str, Any]:
        extra = dict(
            offset_start=0, offset_end=99, offsets_in_sink_batches=100, computed_at=now, reconcile_run_id="r"
        )
        return window(0, 0, window_start=start, window_end=start + timedelta(minutes=10)) | extra | over

    old = now - timedelta(hours=30)  # beyond report.window_hours: not read
    delta_rows.append_rows(None, path, COMPLETENESS_SCHEMA, [stored(old, lost=0)])
    first = watch.cycle(1)
    delta_rows.append_rows(
        None,
        path,
        COMPLETENESS_SCHEMA,
        [stored(now - timedelta(hours=1), landed=97, lost=3, completeness=0.97)],
    )
    second = watch.cycle(2)

    assert (first.failed_step, second.failed_step) == (None, None)
    got = samples((tmp_path / "m.prom").read_text())
    assert got[("offset_audit_window_records_lost", (("job", JOB), ("topic", "orders")))] == 3
