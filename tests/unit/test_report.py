"""The dashboard's shaping functions and its HTML, without a browser: completeness, skip rates,
restart roll-ups, and a page that is self-contained and safe to embed data in."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from app.incidents.incident import Impact, StoredIncident
from app.incidents.remedy import RemedyPlan
from app.report import render as rp
from app.report.gather import unresolved_gap_records

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


def test_completeness_counts_unresolved_gap_records_against_the_sink() -> None:
    summary = [
        {"job_name": "job-a", "topic": "orders", "partition": 1, "sink_distinct": 90},
        {"job_name": "job-a", "topic": "orders", "partition": 0, "sink_distinct": 100},
        {"job_name": "job-a", "topic": "orders", "partition": 2, "sink_distinct": 0},
    ]
    missing = {("job-a", "orders", 1): 10}

    rows = rp.completeness_rows(summary, missing)

    assert [(r["partition"], r["present"], r["missing"], r["completeness"]) for r in rows] == [
        (0, 100, 0, 1.0),
        (1, 90, 10, 0.9),
        (2, 0, 0, 1.0),  # nothing expected yet: nothing missing
    ]


def test_completeness_of_a_job_whose_sink_rows_are_not_counted_is_unknown_not_zero_or_full() -> None:
    # delta_batches and none sinks: reconcile stores their sink counts as null.
    summary = [
        {"job_name": "payments", "topic": "payments", "partition": 0, "sink_distinct": None},
        {"job_name": "payments", "topic": "payments", "partition": 1, "sink_distinct": None},
    ]
    missing = {("payments", "payments", 1): 7}

    rows = rp.completeness_rows(summary, missing)

    assert [(r["partition"], r["present"], r["missing"], r["completeness"]) for r in rows] == [
        (0, None, 0, None),
        (1, None, 7, None),
    ]


def test_missing_records_count_a_skip_read_back_from_the_source_once() -> None:
    # payments/0: a restart skipped 40 offsets of a delta_batches sink, 38 data records and 2
    # deleted by retention; orders/0: a coordinates skip, counted by the GAP inside it alone.
    rows = [
        (
            "payments",
            "payments",
            0,
            "RESTART_SKIP",
            "confirmed",
            40,
            {"skipped_records": {"lost": 38, "unverifiable": 2}},
        ),
        ("job-a", "orders", 0, "RESTART_SKIP", "open", 30, {"resume_source": "latest"}),
        ("job-a", "orders", 0, "GAP", "confirmed", 30, {"status": "confirmed"}),
        ("job-a", "orders", 1, "GAP", "benign", 2, {"status": "benign"}),
    ]
    names = ("job_name", "topic", "partition", "finding_type", "status", "record_count", "evidence")
    columns = list(zip(*[(*r[:-1], json.dumps(r[-1])) for r in rows], strict=True))
    findings = pa.table(dict(zip(names, columns, strict=True)))

    assert unresolved_gap_records(findings) == {("payments", "payments", 0): 40, ("job-a", "orders", 0): 30}


def test_group_rows_join_lag_and_skip_rate_and_keep_groups_known_to_either_side() -> None:
    lags = [{"group_id": "g1", "lag_offsets": 40, "lag_seconds": 12}]
    checkpoints = {"g1": (10, 3), "g2": (0, 0)}

    rows = rp.group_rows(lags, checkpoints)

    assert rows == [
        {
            "group_id": "g1",
            "lag_offsets": 40,
            "lag_seconds": 12,
            "completed": 10,
            "skipped": 3,
            "skip_rate": 0.3,
        },
        {
            "group_id": "g2",
            "lag_offsets": None,
            "lag_seconds": None,
            "completed": 0,
            "skipped": 0,
            "skip_rate": None,
        },
    ]


def test_restart_rows_sum_partitions_and_keep_the_most_telling_class() -> None:
    def part(p: int, cls: str, replayed: int | None, skipped: int | None) -> dict[str, object]:
        return {
            "job_name": "job-a",
            "run_id": "run-2",
            "started_at": "2026-03-01 12:00:00",
            "partition": p,
            "classification": cls,
            "records_replayed": replayed,
            "records_skipped": skipped,
        }

    rows = rp.restart_rows([part(0, "replay", 5, 0), part(1, "skip", None, 7), part(2, "exact", 0, 0)])

    assert rows == [
        {
            "job_name": "job-a",
            "run_id": "run-2",
            "started_at": "2026-03-01 12:00:00",
            "classification": "skip",
            "partitions": 3,
            "replayed": 5,
            "skipped": 7,
        },
    ]


def window(partition: int, start: str, **over: object) -> dict[str, object]:
    """A completeness row as the report reads it (COMPLETENESS_SCHEMA's columns it shows)."""
    row: dict[str, object] = dict(
        job_name="job-a", topic="orders", partition=partition, window_start=start,
        window_end=start[:-2] + "10", sink_mode="coordinates", expected=100, landed=100, lost=0,
        unverifiable=0, duplicated=0, pending=0, completeness=1.0, latency_p50_ms=800,
        latency_p95_ms=2000, final=True,
    )  # fmt: skip
    row.update(over)
    return row


def test_completeness_colour_is_green_only_when_complete_amber_to_red_with_loss_grey_when_unknown() -> None:
    assert rp.completeness_colour(1.0) == rp.COMPLETE_COLOUR
    assert rp.completeness_colour(None) == rp.UNKNOWN_COLOUR
    assert rp.completeness_colour(0.9999) == "#f2c12e"  # the smallest loss is amber, not green
    assert rp.completeness_colour(0.95) == "#d27326"  # about halfway to red
    assert rp.completeness_colour(0.9) == rp.completeness_colour(0.0) == "#b3261e"
    assert len({rp.completeness_colour(c) for c in (1.0, 0.99, 0.95, 0.5, None)}) == 5
    # A sink without coordinates: the share is unknown, a lost batch's records are not.
    assert rp.completeness_colour(None, lost=20) == rp.completeness_colour(0.0)
    assert rp.completeness_colour(None, lost=0) == rp.UNKNOWN_COLOUR


def test_window_cells_keep_unknown_counts_null_and_order_partitions_then_windows() -> None:
    rows = [
        window(1, "2026-03-01 12:10", landed=65, lost=35, completeness=0.65),
        window(0, "2026-03-01 12:10", final=False, pending=40, landed=60, completeness=0.6),
        window(0, "2026-03-01 12:00"),
        window(
            0, "2026-03-01 12:00", job_name="payments", topic="payments", sink_mode="delta_batches",
            landed=None, duplicated=None, completeness=None, latency_p50_ms=None, latency_p95_ms=None,
        ),
    ]  # fmt: skip

    cells = rp.window_cells(rows)

    assert [(c["row"], c["window_start"]) for c in cells] == [
        ("job-a orders/0", "2026-03-01 12:00"),
        ("job-a orders/0", "2026-03-01 12:10"),
        ("job-a orders/1", "2026-03-01 12:10"),
        ("payments payments/0", "2026-03-01 12:00"),
    ]
    lossy, unknown = cells[2], cells[3]
    assert (lossy["expected"], lossy["landed"], lossy["lost"], lossy["colour"]) == (100, 65, 35, "#b3261e")
    assert (unknown["landed"], unknown["duplicated"], unknown["completeness"]) == (None, None, None)
    assert (unknown["lost"], unknown["colour"]) == (0, rp.UNKNOWN_COLOUR)  # delta_batches knows its losses
    assert [c["final"] for c in cells] == [True, False, True, True]


def test_latency_line_takes_the_worst_partitions_p95_per_window_and_leaves_unknown_null() -> None:
    cells = rp.window_cells(
        [
            window(0, "2026-03-01 12:00", latency_p95_ms=2000),
            window(1, "2026-03-01 12:00", latency_p95_ms=5000),
            window(0, "2026-03-01 12:10", latency_p95_ms=None, final=False),
            window(1, "2026-03-01 12:10", latency_p95_ms=None),
            window(0, "2026-03-01 12:00", topic="refunds", latency_p95_ms=700),
        ]
    )

    lines = rp.latency_lines(cells)

    assert lines == [
        {
            "job_name": "job-a",
            "topic": "orders",
            "points": [
                {"window_start": "2026-03-01 12:00", "p95_ms": 5000, "final": True},
                {"window_start": "2026-03-01 12:10", "p95_ms": None, "final": False},
            ],
        },
        {
            "job_name": "job-a",
            "topic": "refunds",
            "points": [{"window_start": "2026-03-01 12:00", "p95_ms": 700, "final": True}],
        },
    ]


def test_page_is_self_contained_and_embeds_data_that_cannot_break_out_of_its_script() -> None:
    hostile = "</script><script>alert(1)</script>"
    data = rp.ReportData(
        title="Audit <prod>",
        generated_at=NOW,
        run_id="report-1",
        findings=[{"finding_id": "f1", "severity": "critical", "finding_type": "GAP", "evidence": hostile}],
        data_docs_href="../data_docs/index.html",
    )

    page = rp.render_html(data)

    assert "<title>Audit &lt;prod&gt;</title>" in page
    assert hostile not in page
    embedded = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert embedded is not None
    assert json.loads(embedded.group(1))["findings"][0]["evidence"] == hostile
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing from the network
    assert 'href="../data_docs/index.html"' in page
    for chart in rp.CHART_IDS:
        assert f'id="chart-{chart}"' in page


def test_empty_data_renders_every_section_with_a_hint_not_an_error() -> None:
    page = rp.render_html(
        rp.ReportData(title="t", generated_at=NOW, run_id="r", notes=["table restarts does not exist yet"])
    )

    assert "table restarts does not exist yet" in page
    assert "Data Docs not built yet" in page
    assert page.count('class="chart"') == len(rp.CHART_IDS)


def test_severity_cards_count_findings_by_severity() -> None:
    findings = [{"severity": "critical"}, {"severity": "warn"}, {"severity": "warn"}]

    assert rp.severity_counts(findings) == {"critical": 1, "error": 0, "warn": 2, "info": 0}


def incident(lost: int, duplicated: int, last: datetime | None) -> StoredIncident:
    return StoredIncident(
        incident_id=f"inc-{lost}-{duplicated}",
        kind="gap",
        severity="critical",
        status="open",
        job_name="job-a",
        group_id="grp",
        run_ids=(),
        first_evidence_at=last,
        last_evidence_at=last,
        partitions=1,
        impact=Impact(records_lost=lost, records_duplicated=duplicated),
        cause="",
        remedy=RemedyPlan(),
        finding_ids=(),
        reconcile_run_id="rec",
    )


def test_the_impact_chart_counts_every_incident_with_impact_by_the_day_of_its_evidence() -> None:
    incidents = [
        incident(35, 0, datetime(2026, 3, 3, 9, 30)),
        incident(0, 20, datetime(2026, 3, 1, 12, 0)),
        incident(5, 2, datetime(2026, 3, 3, 23, 59)),
        incident(0, 0, None),  # no impact: no bar
        incident(0, 7, None),  # shown, not dropped
    ]

    rows = rp.impact_by_day(incidents)

    assert rows == [
        {"day": "2026-03-01", "lost": 0, "duplicated": 20},
        {"day": "2026-03-03", "lost": 40, "duplicated": 2},
        {"day": rp.UNDATED, "lost": 0, "duplicated": 7},
    ]
    assert sum(r["lost"] for r in rows) == sum(i.impact.records_lost for i in incidents)
    assert sum(r["duplicated"] for r in rows) == sum(i.impact.records_duplicated for i in incidents)
