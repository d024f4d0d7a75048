"""The dashboard in a real browser: headless Chromium (Debian's package) loads the file, runs its
script, and the DOM afterwards must hold every chart drawn and the findings table filled. No skip
when Chromium is missing: CI installs it (make system-deps), so its absence is a setup failure."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.incidents.incident import Impact, StoredIncident
from app.incidents.remedy import OffsetRange, RemedyPlan, ReplayStep
from app.report import browser
from app.report import render as rp

pytestmark = pytest.mark.browser

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module", autouse=True)
def chromium_installed() -> None:
    if not any(shutil.which(n) for n in browser.CHROMIUM_NAMES):
        pytest.fail("chromium is not installed: run `make system-deps` (apt-get install chromium)")


def finding(i: int, ftype: str, severity: str, status: str, day: int) -> dict[str, Any]:
    return {
        "finding_id": f"f{i:03d}",
        "finding_type": ftype,
        "severity": severity,
        "status": status,
        "job_name": "orders-audit",
        "group_id": "offset-audit-orders",
        "topic": "orders",
        "partition": i % 3,
        "checkpoint_id": 10 + i,
        "run_id": f"run-{1 + i % 2}",
        "offset_start": 100 * i,
        "offset_end": 100 * i + 7,
        "record_count": 7,
        "detected_at": str(T0 + timedelta(days=day)),
        "evidence": '{"why": "test"}',
    }


def window(job: str, partition: int, minute: int, **over: Any) -> dict[str, Any]:
    """A completeness row as the report reads it: a complete, final 10-minute window."""
    row: dict[str, Any] = dict(
        job_name=job, topic=job.split("-")[0], partition=partition,
        window_start=f"2026-03-05 12:{minute:02d}", window_end=f"2026-03-05 12:{minute + 10:02d}",
        sink_mode="coordinates", expected=100, landed=100, lost=0, unverifiable=0, duplicated=0,
        pending=0, completeness=1.0, latency_p50_ms=900, latency_p95_ms=2500, final=True,
    )  # fmt: skip
    row.update(over)
    return row


# Three partitions of orders-audit over three windows (one lossy, the last provisional) and the
# payments job's partition, whose delta_batches sink cannot know completeness.
WINDOWS: list[dict[str, Any]] = [
    *(window("orders-audit", p, m) for p in (0, 2) for m in (0, 10)),
    window("orders-audit", 1, 0),
    window("orders-audit", 1, 10, landed=65, lost=35, completeness=0.65, latency_p95_ms=7000),
    *(window("orders-audit", p, 20, final=False, landed=80, pending=20, completeness=0.8) for p in range(3)),
    *(
        window(
            "payments", 0, m, sink_mode="delta_batches", landed=None, duplicated=None, completeness=None,
            latency_p50_ms=None, latency_p95_ms=None, offsets_in_sink_batches=100,
        )
        for m in (0, 10, 20)
    ),
]  # fmt: skip


def sample_data() -> rp.ReportData:
    kinds = [
        ("GAP", "critical", "confirmed"),
        ("DUPLICATE", "error", "open"),
        ("SKIPPED_COMMIT", "info", "open"),
        ("COMMIT_FAILURE", "warn", "open"),
    ]
    findings = [finding(i, *kinds[i % len(kinds)], day=i % 5) for i in range(20)]
    by_day: dict[tuple[str, str, str], int] = {}
    for f in findings:
        key = (f["detected_at"][:10], f["finding_type"], f["severity"])
        by_day[key] = by_day.get(key, 0) + 1
    replay = ReplayStep(tuple(OffsetRange("orders", p, 565, 600) for p in range(3)))
    incidents = [
        StoredIncident(
            incident_id="inc-restart-0001",
            kind="restart",
            severity="critical",
            status="open",
            job_name="orders-audit",
            group_id="offset-audit-orders",
            run_ids=("run-3",),
            first_evidence_at=T0 + timedelta(days=2),
            last_evidence_at=T0 + timedelta(days=2),
            partitions=3,
            impact=Impact(records_lost=35),
            cause="Run run-3 of orders-audit restarted from 'latest' and skipped 35 offsets.",
            remedy=RemedyPlan((replay,), command="offset-audit repair"),
            finding_ids=tuple(f["finding_id"] for f in findings if f["finding_type"] == "GAP"),
            reconcile_run_id="reconcile-test",
        ),
        StoredIncident(
            incident_id="inc-writer-0002",
            kind="second_writer",
            severity="error",
            status="resolved",
            job_name="orders-audit",
            group_id="offset-audit-orders",
            run_ids=(),
            first_evidence_at=T0 + timedelta(days=3),
            last_evidence_at=T0 + timedelta(days=3),
            partitions=1,
            impact=Impact(records_duplicated=20),
            cause="20 extra copies.",
            remedy=RemedyPlan(),
            finding_ids=(),
            reconcile_run_id="reconcile-test",
        ),
        # A user's own job judged by its sink's transaction log (delta_batches): a lost batch.
        StoredIncident(
            incident_id="inc-lost-batch-0003",
            kind="lost_batch",
            severity="critical",
            status="open",
            job_name="payments",
            group_id="payments-app",
            run_ids=("payments-run-1",),
            first_evidence_at=T0 + timedelta(days=4),
            last_evidence_at=T0 + timedelta(days=4),
            partitions=2,
            impact=Impact(records_lost=40),
            cause="Batch 2 of payments is not in its sink (Delta version 2 was restored away).",
            remedy=RemedyPlan((ReplayStep(tuple(OffsetRange("payments", p, 40, 60) for p in range(2))),)),
            finding_ids=(),
            reconcile_run_id="reconcile-test",
        ),
    ]
    return rp.ReportData(
        title="Offset audit (browser test)",
        generated_at=T0 + timedelta(days=5),
        run_id="report-test",
        reconcile_run_id="reconcile-test",
        findings_by_day=[
            {"day": d, "finding_type": t, "severity": s, "count": n} for (d, t, s), n in by_day.items()
        ],
        groups=rp.group_rows(
            [
                {"group_id": "offset-audit-orders", "lag_offsets": 420, "lag_seconds": 35},
                {"group_id": "payments", "lag_offsets": 12, "lag_seconds": 3},
            ],
            {"offset-audit-orders": (40, 6), "payments": (25, 0)},
        ),
        completeness=rp.completeness_rows(
            [
                *(
                    {"job_name": "orders-audit", "topic": "orders", "partition": p, "sink_distinct": 1000}
                    for p in range(3)
                ),
                # Its sink rows are not counted in that mode: reconcile stores null.
                *(
                    {"job_name": "payments", "topic": "payments", "partition": p, "sink_distinct": None}
                    for p in range(2)
                ),
            ],
            {("orders-audit", "orders", 1): 35},
        ),
        restarts=[
            {
                "job_name": "orders-audit",
                "run_id": "run-2",
                "started_at": "2026-03-02 08:00:00",
                "classification": "replay",
                "partitions": 3,
                "replayed": 120,
                "skipped": 0,
            },
            {
                "job_name": "orders-audit",
                "run_id": "run-3",
                "started_at": "2026-03-03 09:30:00",
                "classification": "skip",
                "partitions": 3,
                "replayed": 0,
                "skipped": 35,
            },
        ],
        findings=findings,
        windows=rp.window_cells(WINDOWS),
        latency=rp.latency_lines(rp.window_cells(WINDOWS)),
        incidents=rp.incident_rows(incidents),
        impact=rp.impact_by_day(incidents),
        checks=[
            {"suite": "ledger", "evaluated": 12, "failed": 0},
            {"suite": "findings", "evaluated": 14, "failed": 2},
        ],
        data_docs_href="../data_docs/index.html",
    )


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "index.html"
    path.write_text(rp.render_html(sample_data()), encoding="utf-8")
    return path


def test_every_chart_draws_and_the_findings_table_fills(page: Path) -> None:
    dom = browser.dump_dom(page)

    result = browser.check_dom(dom)

    assert result.errors == {}
    assert result.charts_drawn == len(rp.CHART_IDS)
    assert set(result.charts) == set(rp.CHART_IDS)
    assert all(shapes > 3 for shapes in result.charts.values()), result.charts
    assert 'data-rows="20"' in dom
    assert 'id="data-docs-link"' in dom
    # Incidents first, each findings row of an incident links to it.
    assert 'data-incidents="3"' in dom
    assert 'id="incident-inc-restart-0001"' in dom
    assert dom.count('href="#incident-inc-restart-0001"') == 5  # the five GAP findings
    assert dom.index('id="incidents"') < dom.index('id="chart-records-impact"') < dom.index('id="findings"')
    # Each incident row shows its impact, and its repair command when it has a plan.
    restart = section(dom, '<tr id="incident-inc-restart-0001">', "</tr>")
    assert '<td class="num">35</td>' in restart  # records lost
    assert "<code>offset-audit repair</code>" in restart
    assert "<code>" not in section(dom, '<tr id="incident-inc-writer-0002">', "</tr>")
    # The impact chart draws records lost and duplicated on the day of each incident's evidence.
    impact = section(dom, 'id="chart-records-impact"', "</section>")
    assert "<title>2026-03-03 · lost: 35</title>" in impact
    assert "<title>2026-03-04 · duplicated: 20</title>" in impact
    # The user's job is on the page beside the reference job: its incident, and its partitions in
    # the completeness chart as "not counted", never as a share.
    assert "payments" in section(dom, '<tr id="incident-inc-lost-batch-0003">', "</tr>")
    completeness = section(dom, 'id="chart-completeness"', "</section>")
    assert completeness.count(">not counted<") == 2
    for p in range(2):
        assert f"<title>payments payments/{p}: sink rows not counted" in completeness
    assert "<title>orders-audit orders/0: 1000 present, 0 missing</title>" in completeness


def test_the_completeness_heatmap_draws_a_cell_per_partition_and_window_coloured_by_completeness(
    page: Path,
) -> None:
    dom = browser.dump_dom(page)

    heatmap = section(dom, 'id="chart-completeness-windows"', "</section>")
    cells = re.findall(r'<rect [^>]*class="cell [^"]*"[^>]*>.*?</rect>', heatmap, re.S)
    keys = set(re.findall(r'class="cell [^"]*" data-key="([^"]*)"', heatmap))
    assert keys == {f"{w['job_name']} {w['topic']}/{w['partition']}|{w['window_start']}" for w in WINDOWS}
    assert len(cells) == 4 * 3
    lossy = cell(cells, "orders-audit orders/1|2026-03-05 12:10")
    assert 'fill="#b3261e"' in lossy  # the low end of the scale
    assert "expected 100, landed 65, lost 35, unverifiable 0, duplicated 0, pending 0" in lossy
    assert "latency p50 0.9 s, p95 7.0 s" in lossy
    assert 'fill="#2e9d5b"' in cell(cells, "orders-audit orders/0|2026-03-05 12:10")
    unknown = cell(cells, "payments payments/0|2026-03-05 12:00")
    assert 'fill="#9aa5b1"' in unknown  # grey: never drawn as 0 or 100%
    assert "completeness unknown" in unknown
    assert "landed unknown" in unknown
    assert "offsets in batches that reached the sink 100" in unknown  # what that sink mode knows
    provisional = cell(cells, "orders-audit orders/2|2026-03-05 12:20")
    assert 'class="cell provisional"' in provisional
    assert 'fill-opacity="0.5"' in provisional
    assert heatmap.count('class="hatch"') == 3  # orders' three 12:20 windows
    # The latency line: p95 per window, the worst partition's, one line per job and topic.
    latency = section(dom, 'id="chart-latency-p95"', "</section>")
    assert "<title>orders-audit orders · 2026-03-05 12:10 UTC · p95 7.0 s</title>" in latency
    assert latency.count('class="latency"') == 1  # payments has no latency to draw


def cell(cells: list[str], key: str) -> str:
    return next(c for c in cells if f'data-key="{key}"' in c)


def section(dom: str, start: str, end: str) -> str:
    """The DOM text from `start` to the first `end` after it."""
    at = dom.index(start)
    return dom[at : dom.index(end, at)]


def test_empty_sections_still_draw_a_placeholder(tmp_path: Path) -> None:
    path = tmp_path / "empty.html"
    path.write_text(
        rp.render_html(rp.ReportData(title="empty", generated_at=T0, run_id="r")), encoding="utf-8"
    )

    result = browser.check_dom(browser.dump_dom(path))

    assert result.errors == {}
    assert result.charts_drawn == len(rp.CHART_IDS)


def test_screenshot_writes_a_png(page: Path, tmp_path: Path) -> None:
    png = browser.screenshot(page, tmp_path / "dashboard.png")

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000  # a blank page is a few kB; drawn charts are far more
