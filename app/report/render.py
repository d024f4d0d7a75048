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
    "restarts",
)
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

    A job whose sink rows are not counted (sink mode `delta_batches` or `none`: its summary's
    ``sink_distinct`` is null) has no share at all: ``present`` and ``completeness`` are None, shown
    as "not counted", since 0 present would read as everything lost and 100% as all verified."""
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
        "restarts": "Restarts: records replayed and skipped",
    }
    chart_html = "".join(
        f'<section class="panel"><h2>{esc(title)}</h2><div class="chart" id="chart-{cid}" '
        f'data-chart="{cid}"></div></section>'
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
