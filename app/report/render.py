"""The HTML dashboard of `offset-audit report`: plain data in, one self-contained HTML string out.

Pure on purpose: no Spark, no files. ``app.report.gather`` gathers the rows; this module shapes them
(completeness, skip rates, worst restart class) and renders. Everything is inline: the network may
be closed where the report is opened, so there is no CDN. The charts are SVG drawn by a small
vanilla-JS renderer from the JSON embedded in the page; when all of them are drawn the script sets
``data-charts-drawn`` on <body>, which the browser test waits for. The findings table sorts on a
header click and filters by text, type, severity and status.
"""

from __future__ import annotations

import functools
import html
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from importlib import resources
from typing import Any, Final

from app.contracts import vocabulary as vocab
from app.contracts.vocabulary import FINDING_STATUSES, FINDING_TYPES, RESTART_CLASSES, SEVERITIES
from app.incidents.incident import StoredIncident

# Charts the page draws, in page order; the browser test expects exactly these.
CHART_IDS: Final = (
    "records-impact",
    "findings-by-type",
    "findings-by-severity",
    "commit-lag",
    "skip-rate",
    "completeness",
    "completeness-windows",
    "latency-p95",
    "restarts",
)
# Charts as wide as the page: a heatmap needs the width for a day of windows.
WIDE_CHARTS: Final = frozenset({"completeness-windows", "latency-p95"})
# Most telling first: a skip loses data, a replay duplicates it, unknown is unexplained.
_RESTART_RANK: Final = (
    vocab.RESTART_SKIPPED,
    vocab.RESTART_REPLAYED,
    vocab.RESTART_UNKNOWN,
    vocab.RESTART_EXACT,
)

Row = Mapping[str, Any]


@dataclass(frozen=True)
class ReportData:
    title: str
    generated_at: datetime
    run_id: str
    reconcile_run_id: str | None = None
    findings_by_day: Sequence[Row] = ()  # day, finding_type, severity, count
    groups: Sequence[Row] = ()  # group_id, lag_offsets, lag_seconds, completed, skipped, skip_rate
    completeness: Sequence[Row] = ()  # job_name, topic, partition, present, missing, completeness (None:
    # the job's sink rows are not counted)
    restarts: Sequence[Row] = ()  # job_name, run_id, started_at, classification, replayed, skipped
    findings: Sequence[Row] = ()  # the findings table's rows (non-benign), most severe first
    incidents: Sequence[Row] = ()  # incident_rows(): most severe first
    impact: Sequence[Row] = ()  # impact_by_day() over every incident: day, lost, duplicated
    windows: Sequence[Row] = ()  # window_cells(): one per partition and window, recent ones only
    latency: Sequence[Row] = ()  # latency_lines(): p95 per window, per job and topic
    window_hours: int = 24  # how far back the windows go (report.window_hours)
    checks: Sequence[Row] = ()  # suite, evaluated, failed
    check_run_id: str | None = None
    data_docs_href: str | None = None
    notes: Sequence[str] = field(default_factory=tuple)  # e.g. which tables did not exist yet


# --- shaping (pure) ------------------------------------------------------------------------------


def completeness_rows(
    summary: Iterable[Row], missing: Mapping[tuple[str, str, int], int]
) -> list[dict[str, Any]]:
    """Share of the records that should be in the sink and are: distinct sink offsets against
    those plus the offsets of unresolved GAP findings (``missing``, per job/topic/partition).

    A job whose sink rows are not counted (sink mode `delta_batches`, `iceberg_snapshots` or `none`:
    its summary's ``sink_distinct`` is null) has no share at all: ``present`` and ``completeness``
    are None, shown as "not counted", since 0 present would read as everything lost and 100% as all
    verified."""
    out = []
    for r in summary:
        key = (r["job_name"], r["topic"], r["partition"])
        distinct = r.get("sink_distinct")
        lost = int(missing.get(key, 0))
        present = None if distinct is None else int(distinct)
        out.append(
            {
                "job_name": key[0],
                "topic": key[1],
                "partition": key[2],
                "present": present,
                "missing": lost,
                "completeness": None if present is None else _share(present, present + lost),
            }
        )
    return sorted(out, key=lambda r: (r["job_name"], r["topic"], r["partition"]))


def _share(part: int, total: int) -> float:
    return 1.0 if total == 0 else part / total  # nothing expected yet: nothing missing


# The heatmap's colours: green only for a complete window; a window with any loss is amber (just
# short of complete) to red (at or below ``_RED_AT``), so no lossy window can pass for complete at a
# glance; grey where the sink mode cannot know (null completeness), never 0 or 100%.
COMPLETE_COLOUR: Final = "#2e9d5b"
UNKNOWN_COLOUR: Final = "#9aa5b1"
_AMBER: Final = (0xF2, 0xC1, 0x2E)
_RED: Final = (0xB3, 0x26, 0x1E)
_RED_AT: Final = 0.9

# The counts a heatmap cell's hover shows, in order; a null count is shown as unknown.
WINDOW_COUNTS: Final = ("expected", "landed", "lost", "unverifiable", "duplicated", "pending")


def completeness_colour(completeness: float | None, lost: int | None = None) -> str:
    """The heatmap colour of a window's completeness (see ``COMPLETE_COLOUR``). Where the share is
    unknown (a sink without coordinates) but records are known lost (a batch with no sink commit),
    the window is red: the loss is a fact even where the share is not."""
    if completeness is None:
        return _hex(_RED) if lost else UNKNOWN_COLOUR
    if completeness >= 1.0:
        return COMPLETE_COLOUR
    # 1.0 (exclusive) .. _RED_AT: amber to red, linearly; below it red.
    t = min(1.0, max(0.0, (1.0 - completeness) / (1.0 - _RED_AT)))
    return _hex(tuple(round(a + (z - a) * t) for a, z in zip(_AMBER, _RED, strict=True)))


def _hex(rgb: Sequence[int]) -> str:
    r, g, b = rgb
    return f"#{r:02x}{g:02x}{b:02x}"


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def window_cells(windows: Iterable[Row]) -> list[dict[str, Any]]:
    """The heatmap's cells: one per completeness row (job, topic, partition, window), ordered by
    row label and window, each with its colour. Nulls stay null (unknown), never 0."""
    out = []
    for w in windows:
        completeness = w.get("completeness")
        cell = {
            "row": f"{w['job_name']} {w['topic']}/{w['partition']}",
            "job_name": w["job_name"],
            "topic": w["topic"],
            "partition": int(w["partition"]),
            "window_start": str(w["window_start"]),
            "window_end": str(w["window_end"]),
            "sink_mode": w.get("sink_mode"),
            "final": bool(w["final"]),
            "completeness": None if completeness is None else float(completeness),
            "latency_p50_ms": _optional_int(w.get("latency_p50_ms")),
            "latency_p95_ms": _optional_int(w.get("latency_p95_ms")),
            # What a sink without coordinates knows: offsets of batches that reached it.
            "offsets_in_sink_batches": _optional_int(w.get("offsets_in_sink_batches")),
            "colour": completeness_colour(
                None if completeness is None else float(completeness), _optional_int(w.get("lost"))
            ),
        }
        cell.update({c: _optional_int(w.get(c)) for c in WINDOW_COUNTS})
        out.append(cell)
    return sorted(out, key=lambda c: (c["job_name"], c["topic"], c["partition"], c["window_start"]))


def latency_lines(cells: Iterable[Row]) -> list[dict[str, Any]]:
    """p95 latency per window, one line per job and topic: the worst partition's p95 (percentiles
    of partitions do not combine into the topic's), null where no partition measured one (a sink
    mode without coordinates). A window is final only when all its partitions are."""
    lines: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for c in cells:
        point = lines[(c["job_name"], c["topic"])].setdefault(
            c["window_start"], {"window_start": c["window_start"], "p95_ms": None, "final": True}
        )
        p95 = c.get("latency_p95_ms")
        if p95 is not None:
            point["p95_ms"] = p95 if point["p95_ms"] is None else max(point["p95_ms"], p95)
        point["final"] = point["final"] and bool(c["final"])
    return [
        {"job_name": job, "topic": topic, "points": [points[w] for w in sorted(points)]}
        for (job, topic), points in sorted(lines.items())
    ]


def group_rows(lags: Iterable[Row], checkpoints: Mapping[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """Per group: worst commit lag over its partitions and the share of completed checkpoints
    whose commit was skipped (``checkpoints``: group -> (completed, skipped))."""
    out = []
    lag_by_group = {r["group_id"]: r for r in lags}
    for group in sorted(set(lag_by_group) | set(checkpoints)):
        lag = lag_by_group.get(group, {})
        completed, skipped = checkpoints.get(group, (0, 0))
        out.append(
            {
                "group_id": group,
                "lag_offsets": lag.get("lag_offsets"),
                "lag_seconds": lag.get("lag_seconds"),
                "completed": completed,
                "skipped": skipped,
                "skip_rate": None if completed == 0 else min(1.0, skipped / completed),
            }
        )
    return out


def restart_rows(per_partition: Iterable[Row]) -> list[dict[str, Any]]:
    """One row per run start: replayed and skipped records summed over its partitions, and the
    most telling classification among them."""
    grouped: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in per_partition:
        grouped[(r["job_name"], r["run_id"])].append(r)
    out = []
    for (job, run), rows in grouped.items():
        classes = [r["classification"] for r in rows if r["classification"] in _RESTART_RANK]
        out.append(
            {
                "job_name": job,
                "run_id": run,
                "started_at": min(str(r["started_at"]) for r in rows),
                "classification": min(classes, key=_RESTART_RANK.index) if classes else vocab.RESTART_UNKNOWN,
                "partitions": len(rows),
                "replayed": sum(int(r.get("records_replayed") or 0) for r in rows),
                "skipped": sum(int(r.get("records_skipped") or 0) for r in rows),
            }
        )
    return sorted(out, key=lambda r: (r["started_at"], r["job_name"], r["run_id"]))


def incident_rows(incidents: Iterable[StoredIncident]) -> list[dict[str, Any]]:
    """Incidents as the dashboard's incidents table shows them: impact, cause, the repair command,
    and the day of their last evidence."""
    return [
        {
            "incident_id": i.incident_id,
            "kind": i.kind,
            "severity": i.severity,
            "status": i.status,
            "job_name": i.job_name,
            "cause": i.cause,
            "partitions": i.partitions,
            "records_lost": i.impact.records_lost,
            "records_unverifiable": i.impact.records_unverifiable,
            "records_duplicated": i.impact.records_duplicated,
            "records_replayed": i.impact.records_replayed,
            "day": _day(i.last_evidence_at),
            "repair": i.remedy.repair_command,
            "finding_ids": list(i.finding_ids),
        }
        for i in incidents
    ]


def _day(t: datetime | None) -> str | None:
    return str(t)[:10] if t else None


# The impact chart's category for an incident with impact but no evidence time: shown, not dropped.
UNDATED: Final = "undated"


def impact_by_day(incidents: Iterable[StoredIncident]) -> list[dict[str, Any]]:
    """Records lost and duplicated per day of the incidents' last evidence, for the impact chart.

    Every incident of the table counts (not only the rows the incidents table shows), so the
    chart's totals are the table's totals; an incident with impact and no evidence time (which
    reconcile no longer writes) is counted under ``UNDATED``, last, rather than left out.
    """
    days: dict[str, dict[str, int]] = {}
    for i in incidents:
        lost, duplicated = i.impact.records_lost, i.impact.records_duplicated
        if not lost and not duplicated:
            continue
        day = days.setdefault(_day(i.last_evidence_at) or UNDATED, {"lost": 0, "duplicated": 0})
        day["lost"] += lost
        day["duplicated"] += duplicated
    return [{"day": d, **days[d]} for d in sorted(days, key=lambda d: (d == UNDATED, d))]


def severity_counts(findings: Iterable[Row]) -> dict[str, int]:
    counts = dict.fromkeys(SEVERITIES, 0)
    for f in findings:
        if f.get("severity") in counts:
            counts[f["severity"]] += 1
    return counts


# --- rendering -----------------------------------------------------------------------------------


def _json_for_script(value: Any) -> str:
    """JSON safe inside <script>: no '</script>' or '<!--' can end the element early."""
    text = json.dumps(value, default=str, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(data: ReportData) -> str:
    esc = html.escape
    payload = asdict(data)
    payload["vocab"] = {
        "finding_types": list(FINDING_TYPES),
        "severities": list(SEVERITIES),
        "statuses": list(FINDING_STATUSES),
        "restart_classes": list(RESTART_CLASSES),
    }
    sev = severity_counts(data.findings)
    cards = "".join(
        f'<div class="card sev-{s}"><div class="num">{n}</div><div>{s}</div></div>' for s, n in sev.items()
    )
    failed_checks = sum(int(c.get("failed") or 0) for c in data.checks)
    if not data.checks:
        checks_card = '<div class="card"><div class="num">–</div><div>checks not run</div></div>'
    else:
        cls = "bad" if failed_checks else "good"
        checks_card = (
            f'<div class="card {cls}"><div class="num">{failed_checks}</div>'
            f"<div>failed expectations</div></div>"
        )
    docs = (
        f'<a id="data-docs-link" href="{esc(data.data_docs_href)}">Great Expectations Data Docs</a>'
        if data.data_docs_href
        else '<span class="muted">Data Docs not built yet (run <code>offset-audit check</code>)</span>'
    )
    notes = "".join(f"<li>{esc(n)}</li>" for n in data.notes)
    charts = {
        "records-impact": "Records lost and duplicated over time (incidents)",
        "findings-by-type": "Findings over time, by type",
        "findings-by-severity": "Findings over time, by severity",
        "commit-lag": "Commit lag per group (offsets, worst partition)",
        "skip-rate": "Skipped commits per group (share of completed checkpoints)",
        "completeness": "Completeness per partition (sink vs. unresolved gaps)",
        "completeness-windows": f"Completeness per partition and window (last {data.window_hours} h)",
        "latency-p95": f"End-to-end latency per window, p95 (last {data.window_hours} h)",
        "restarts": "Restarts: records replayed and skipped",
    }
    chart_html = "".join(
        f'<section class="panel{" wide" if cid in WIDE_CHARTS else ""}"><h2>{esc(title)}</h2>'
        f'<div class="chart" id="chart-{cid}" data-chart="{cid}"></div></section>'
        for cid, title in charts.items()
    )
    open_incidents = sum(1 for i in data.incidents if i.get("status") == vocab.INCIDENT_OPEN)
    cards = (
        f'<div class="card {"bad" if open_incidents else "good"}"><div class="num">{open_incidents}</div>'
        f"<div>open incidents</div></div>" + cards
    )
    return _asset("dashboard.html").format(
        title=esc(data.title),
        generated=esc(data.generated_at.isoformat(timespec="seconds")),
        run_id=esc(data.run_id),
        reconcile=esc(data.reconcile_run_id or "all runs"),
        cards=cards + checks_card,
        docs=docs,
        notes=f'<ul class="notes">{notes}</ul>' if notes else "",
        charts=chart_html,
        data=_json_for_script(payload),
        css=_asset("dashboard.css"),
        js=_asset("dashboard.js"),
    )


@functools.cache
def _asset(name: str) -> str:
    """The dashboard's page, style and script, kept as package data files so editors and linters
    treat them as HTML, CSS and JavaScript."""
    return resources.files("app.report").joinpath("static", name).read_text(encoding="utf-8")
