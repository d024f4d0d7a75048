"""The HTML dashboard of `offset-audit report`: plain data in, one self-contained HTML string out.

Pure on purpose: no Spark, no files. ``app.report_io`` gathers the rows; this module shapes them
(completeness, skip rates, worst restart class) and renders. Everything is inline: the network may
be closed where the report is opened, so there is no CDN. The charts are SVG drawn by a small
vanilla-JS renderer from the JSON embedded in the page; when all of them are drawn the script sets
``data-charts-drawn`` on <body>, which the browser test waits for. The findings table sorts on a
header click and filters by text, type, severity and status.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Final

from app.schemas import FINDING_STATUSES, FINDING_TYPES, RESTART_CLASSES, SEVERITIES

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
_RESTART_RANK: Final = ("skip", "replay", "unknown", "exact")

Row = Mapping[str, Any]


@dataclass(frozen=True)
class ReportData:
    title: str
    generated_at: datetime
    run_id: str
    reconcile_run_id: str | None = None
    findings_by_day: Sequence[Row] = ()  # day, finding_type, severity, count
    groups: Sequence[Row] = ()  # group_id, lag_offsets, lag_seconds, completed, skipped, skip_rate
    completeness: Sequence[Row] = ()  # job_name, topic, partition, present, missing, completeness
    restarts: Sequence[Row] = ()  # job_name, run_id, started_at, classification, replayed, skipped
    findings: Sequence[Row] = ()  # the findings table's rows (non-benign), most severe first
    incidents: Sequence[Row] = ()  # incident_rows(): most severe first
    checks: Sequence[Row] = ()  # suite, evaluated, failed
    check_run_id: str | None = None
    data_docs_href: str | None = None
    notes: Sequence[str] = field(default_factory=tuple)  # e.g. which tables did not exist yet


# --- shaping (pure) ------------------------------------------------------------------------------


def completeness_rows(
    summary: Iterable[Row], missing: Mapping[tuple[str, str, int], int]
) -> list[dict[str, Any]]:
    """Share of the records that should be in the sink and are: distinct sink offsets against
    those plus the offsets of unresolved GAP findings (``missing``, per job/topic/partition)."""
    out = []
    for r in summary:
        key = (r["job_name"], r["topic"], r["partition"])
        present = int(r.get("sink_distinct") or 0)
        lost = int(missing.get(key, 0))
        total = present + lost
        out.append(
            {
                "job_name": key[0],
                "topic": key[1],
                "partition": key[2],
                "present": present,
                "missing": lost,
                "completeness": 1.0 if total == 0 else present / total,
            }
        )
    return sorted(out, key=lambda r: (r["job_name"], r["topic"], r["partition"]))


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
                "classification": min(classes, key=_RESTART_RANK.index) if classes else "unknown",
                "partitions": len(rows),
                "replayed": sum(int(r.get("records_replayed") or 0) for r in rows),
                "skipped": sum(int(r.get("records_skipped") or 0) for r in rows),
            }
        )
    return sorted(out, key=lambda r: (r["started_at"], r["job_name"], r["run_id"]))


def incident_rows(incidents: Iterable[Row]) -> list[dict[str, Any]]:
    """Incidents contract rows as the dashboard shows them: impact, cause, the repair command, and
    the day of their last evidence for the impact chart."""
    out = []
    for r in incidents:
        plan = json.loads(r.get("remedy") or "{}")
        last = r.get("last_evidence_at")
        out.append(
            {
                **{k: r.get(k) for k in ("incident_id", "kind", "severity", "status", "job_name", "cause")},
                **{
                    k: int(r.get(k) or 0)
                    for k in (
                        "partitions",
                        "records_lost",
                        "records_unverifiable",
                        "records_duplicated",
                        "records_replayed",
                    )
                },
                "day": str(last)[:10] if last else None,
                "repair": plan.get("command") if plan.get("steps") else None,
                "finding_ids": list(r.get("finding_ids") or []),
            }
        )
    return out


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
    open_incidents = sum(1 for i in data.incidents if i.get("status") == "open")
    cards = (
        f'<div class="card {"bad" if open_incidents else "good"}"><div class="num">{open_incidents}</div>'
        f"<div>open incidents</div></div>" + cards
    )
    return _PAGE.format(
        title=esc(data.title),
        generated=esc(data.generated_at.isoformat(timespec="seconds")),
        run_id=esc(data.run_id),
        reconcile=esc(data.reconcile_run_id or "all runs"),
        cards=cards + checks_card,
        docs=docs,
        notes=f'<ul class="notes">{notes}</ul>' if notes else "",
        charts=chart_html,
        data=_json_for_script(payload),
        css=_CSS,
        js=_JS,
    )


_CSS = """
*{box-sizing:border-box}
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
 background:#f4f5f7;color:#1d2330}
header{background:#1d2330;color:#fff;padding:16px 24px}
header h1{margin:0 0 4px;font-size:22px}
header .meta{color:#b8c0cc;font-size:12px}
header a{color:#9cd0ff}
main{padding:16px 24px;display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:16px}
.wide{grid-column:1/-1}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{background:#fff;border-radius:8px;padding:10px 16px;min-width:110px;border-top:4px solid #9aa5b1;
 box-shadow:0 1px 2px rgba(0,0,0,.08)}
.card .num{font-size:24px;font-weight:600}
.sev-critical{border-color:#b3261e}.sev-error{border-color:#e8710a}.sev-warn{border-color:#f2c12e}
.sev-info{border-color:#4a90d9}.card.good{border-color:#2e9d5b}.card.bad{border-color:#b3261e}
.panel{background:#fff;border-radius:8px;padding:12px 16px;box-shadow:0 1px 2px rgba(0,0,0,.08);min-width:0}
.panel h2{font-size:15px;margin:0 0 8px}
.chart svg{display:block;width:100%;height:auto}
.chart text{font-size:11px;fill:#3d4756}
.legend{display:flex;flex-wrap:wrap;gap:4px 12px;font-size:12px;margin-top:6px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.muted{color:#6b7785}
.notes{margin:8px 0 0;color:#6b7785;font-size:12px}
.filters{display:flex;gap:8px;flex-wrap:wrap;margin-bottom:8px}
.filters input,.filters select{font:inherit;padding:4px 6px;border:1px solid #c4cbd4;border-radius:4px}
table{border-collapse:collapse;width:100%;font-size:12px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #e3e7ec;white-space:nowrap}
th{cursor:pointer;user-select:none;background:#f0f2f5;position:sticky;top:0}
th.asc::after{content:" \\25B2"}th.desc::after{content:" \\25BC"}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.pill{padding:1px 6px;border-radius:9px;color:#fff;font-size:11px}
.pill.critical{background:#b3261e}.pill.error{background:#e8710a}.pill.warn{background:#b98900}.pill.info{background:#4a90d9}
.tablewrap{max-height:520px;overflow:auto}
.checks td.bad{color:#b3261e;font-weight:600}.checks td.good{color:#2e9d5b}
.incidents td.cause{white-space:normal;min-width:320px}
.incidents code{font-size:11px;white-space:normal;word-break:break-all}
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>{title}</title><style>{css}</style></head>
<body data-charts-drawn="0">
<header><h1>{title}</h1>
<div class="meta">generated {generated} · report run {run_id} · reconcile run {reconcile}
 · {docs}</div></header>
<main>
<section class="wide"><div class="cards">{cards}</div>{notes}</section>
<section class="panel wide"><h2>Incidents</h2><div id="incidents"></div></section>
{charts}
<section class="panel wide"><h2>Expectation suites (latest check)</h2><div id="checks"></div></section>
<section class="panel wide"><h2>Open findings</h2>
<div class="filters">
<input id="f-text" type="search" placeholder="filter: job, topic, run, evidence…" size="32">
<select id="f-type"><option value="">all types</option></select>
<select id="f-severity"><option value="">all severities</option></select>
<select id="f-status"><option value="">all statuses</option></select>
<span id="f-count" class="muted"></span></div>
<div class="tablewrap"><table id="findings"><thead></thead><tbody></tbody></table></div></section>
</main>
<script type="application/json" id="report-data">{data}</script>
<script>{js}</script>
</body></html>
"""

_JS = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var PALETTE = ["#4a90d9", "#e8710a", "#2e9d5b", "#b3261e", "#8e44ad", "#f2c12e", "#16a2b8",
                 "#d35d8f", "#6b7785", "#7fb800", "#a0522d", "#1d2330"];
  var SEV_COLOR = {critical: "#b3261e", error: "#e8710a", warn: "#f2c12e", info: "#4a90d9"};
  var CLASS_COLOR = {skip: "#b3261e", replay: "#e8710a", unknown: "#9aa5b1", exact: "#2e9d5b"};

  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function text(parent, x, y, s, attrs) {
    var t = el("text", Object.assign({x: x, y: y}, attrs || {}), parent);
    t.textContent = s;
    return t;
  }
  function fmt(n) {
    if (n === null || n === undefined) { return "–"; }
    var a = Math.abs(n);
    if (a >= 1e9) { return (n / 1e9).toFixed(1) + "G"; }
    if (a >= 1e6) { return (n / 1e6).toFixed(1) + "M"; }
    if (a >= 1e4) { return (n / 1e3).toFixed(0) + "k"; }
    return String(Math.round(n * 100) / 100);
  }
  function pct(x) {
    if (x === null || x === undefined) { return "–"; }
    return (x * 100).toFixed(x < 1 && x > 0.99 ? 2 : 1) + "%";
  }
  function svgRoot(host, w, h) {
    var s = el("svg", {viewBox: "0 0 " + w + " " + h, width: w, height: h, role: "img"});
    host.appendChild(s);
    return s;
  }
  function empty(host, message) {
    var s = svgRoot(host, 600, 60);
    text(s, 300, 34, message, {"text-anchor": "middle", "class": "empty"});
    return s;
  }
  function legend(host, names, colors) {
    var div = document.createElement("div");
    div.className = "legend";
    names.forEach(function (n) {
      var span = document.createElement("span");
      var i = document.createElement("i");
      i.style.background = colors[n];
      span.appendChild(i);
      span.appendChild(document.createTextNode(n));
      div.appendChild(span);
    });
    host.appendChild(div);
  }
  function niceMax(v) {
    if (v <= 0) { return 1; }
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var m = [1, 2, 2.5, 5, 10].find(function (f) { return f * p >= v; });
    return m * p;
  }

  // Vertical stacked bars: categories on x, one stack segment per series.
  function stacked(host, cats, series, values, colors) {
    if (!cats.length) { return empty(host, "no findings recorded"); }
    var W = 640, H = 260, L = 44, R = 8, T = 10, B = 46;
    var s = svgRoot(host, W, H);
    var totals = cats.map(function (c) {
      return series.reduce(function (a, k) { return a + (values[c][k] || 0); }, 0);
    });
    var max = niceMax(Math.max.apply(null, totals));
    // Counts: pick a grid whose steps are whole numbers when the axis is short.
    var ticks = max % 4 === 0 || max > 20 ? 4 : (max % 5 === 0 ? 5 : (max <= 3 ? max : 4));
    var pw = W - L - R, ph = H - T - B, step = pw / cats.length, bw = Math.max(2, Math.min(42, step * 0.7));
    for (var g = 0; g <= ticks; g++) {
      var y = T + ph - ph * g / ticks;
      el("line", {x1: L, x2: W - R, y1: y, y2: y, stroke: "#e3e7ec"}, s);
      text(s, L - 6, y + 4, fmt(max * g / ticks), {"text-anchor": "end"});
    }
    cats.forEach(function (c, i) {
      var x = L + i * step + (step - bw) / 2, y0 = T + ph;
      series.forEach(function (k) {
        var v = values[c][k] || 0;
        if (!v) { return; }
        var h = ph * v / max;
        var r = el("rect", {x: x, y: y0 - h, width: bw, height: h, fill: colors[k], "class": "bar"}, s);
        el("title", {}, r).textContent = c + " · " + k + ": " + v;
        y0 -= h;
      });
      var every = Math.ceil(cats.length / 12);
      if (i % every === 0) { text(s, x + bw / 2, H - B + 16, c.slice(5), {"text-anchor": "middle"}); }
    });
    el("line", {x1: L, x2: W - R, y1: T + ph, y2: T + ph, stroke: "#9aa5b1"}, s);
    legend(host, series, colors);
    return s;
  }

  // Horizontal bars: one row per item, an optional second bar per row (grouped).
  function hbars(host, items, opts) {
    if (!items.length) { return empty(host, opts.empty); }
    var rowH = opts.second ? 30 : 22, L = opts.labelWidth || 190, R = opts.right || 90, T = 6;
    var W = 640, H = T + items.length * rowH + 24;
    var s = svgRoot(host, W, H);
    var max = opts.max || niceMax(Math.max.apply(null, items.map(function (d) {
      return Math.max(d.value || 0, opts.second ? (d.value2 || 0) : 0);
    })));
    var pw = W - L - R;
    for (var g = 0; g <= 4; g++) {
      var gx = L + pw * g / 4;
      el("line", {x1: gx, x2: gx, y1: T, y2: H - 20, stroke: "#e3e7ec"}, s);
      text(s, gx, H - 6, opts.format(max * g / 4), {"text-anchor": "middle"});
    }
    items.forEach(function (d, i) {
      var y = T + i * rowH;
      text(s, L - 6, y + 14, d.label, {"text-anchor": "end"});
      var h = opts.second ? 11 : 15;
      var w = Math.max(d.value ? 1.5 : 0, pw * Math.min(1, (d.value || 0) / max));
      var r = el("rect", {x: L, y: y + 3, width: w, height: h, fill: d.color || opts.color,
                          "class": "bar"}, s);
      el("title", {}, r).textContent = d.label + ": " + d.title;
      if (opts.second) {
        var w2 = Math.max(d.value2 ? 1.5 : 0, pw * Math.min(1, (d.value2 || 0) / max));
        var r2 = el("rect", {x: L, y: y + 3 + h + 1, width: w2, height: h, fill: opts.color2,
                             "class": "bar"}, s);
        el("title", {}, r2).textContent = d.label + ": " + d.title;
      }
      text(s, L + Math.max(w, opts.second ? w2 : 0) + 4, y + 14, d.note);
    });
    if (opts.legend) { legend(host, Object.keys(opts.legend), opts.legend); }
    return s;
  }

  function byDay(key, order) {
    var days = {}, seen = {};
    D.findings_by_day.forEach(function (r) {
      days[r.day] = days[r.day] || {};
      days[r.day][r[key]] = (days[r.day][r[key]] || 0) + r.count;
      seen[r[key]] = true;
    });
    var cats = Object.keys(days).sort();
    var series = order.filter(function (k) { return seen[k]; });
    return {cats: cats, series: series, values: days};
  }

  var typeColors = {};
  D.vocab.finding_types.forEach(function (t, i) { typeColors[t] = PALETTE[i % PALETTE.length]; });
  var ttype = byDay("finding_type", D.vocab.finding_types);
  var tsev = byDay("severity", D.vocab.severities);
  var impact = (function () {
    var days = {};
    D.incidents.forEach(function (i) {
      if (!i.day) { return; }
      days[i.day] = days[i.day] || {lost: 0, duplicated: 0};
      days[i.day].lost += i.records_lost;
      days[i.day].duplicated += i.records_duplicated;
    });
    return {cats: Object.keys(days).sort(), values: days};
  })();
  var charts = {
    "records-impact": function (h) {
      if (!impact.cats.length) { return empty(h, "no incidents recorded"); }
      return stacked(h, impact.cats, ["lost", "duplicated"], impact.values,
                     {lost: "#b3261e", duplicated: "#e8710a"});
    },
    "findings-by-type": function (h) {
      return stacked(h, ttype.cats, ttype.series, ttype.values, typeColors);
    },
    "findings-by-severity": function (h) {
      return stacked(h, tsev.cats, tsev.series, tsev.values, SEV_COLOR);
    },
    "commit-lag": function (h) {
      return hbars(h, D.groups.filter(function (g) { return g.lag_offsets !== null; }).map(function (g) {
        return {label: g.group_id, value: Math.max(0, g.lag_offsets), note: fmt(g.lag_offsets) + " · " +
          fmt(g.lag_seconds) + "s", title: g.lag_offsets + " offsets, " + g.lag_seconds + " s"};
      }), {format: fmt, color: "#4a90d9", empty: "no committed offsets summarized yet"});
    },
    "skip-rate": function (h) {
      return hbars(h, D.groups.filter(function (g) { return g.skip_rate !== null; }).map(function (g) {
        return {label: g.group_id, value: g.skip_rate, note: pct(g.skip_rate) + " (" + g.skipped + "/" +
          g.completed + ")", title: g.skipped + " of " + g.completed + " checkpoints skipped"};
      }), {max: 1, format: pct, color: "#e8710a", empty: "no completed checkpoints in the ledger"});
    },
    "completeness": function (h) {
      return hbars(h, D.completeness.map(function (p) {
        var c = p.completeness;
        return {label: p.job_name + " " + p.topic + "/" + p.partition, value: c, note: pct(c),
          color: c >= 1 ? "#2e9d5b" : (c >= 0.999 ? "#f2c12e" : "#b3261e"),
          title: p.present + " present, " + p.missing + " missing"};
      }), {max: 1, format: pct, color: "#2e9d5b", empty: "no partitions summarized yet"});
    },
    "restarts": function (h) {
      return hbars(h, D.restarts.map(function (r) {
        return {label: r.job_name + " " + r.run_id, value: r.replayed, value2: r.skipped,
          color: "#e8710a", note: r.classification + " · " + fmt(r.replayed) + " / " + fmt(r.skipped),
          title: r.classification + ", started " + r.started_at + ": " + r.replayed + " replayed, " +
            r.skipped + " skipped over " + r.partitions + " partitions"};
      }), {second: true, format: fmt, color: "#e8710a", color2: "#b3261e", labelWidth: 200, right: 130,
           legend: {replayed: "#e8710a", skipped: "#b3261e"}, empty: "no restarts recorded"});
    }
  };

  var drawn = 0;
  Object.keys(charts).forEach(function (id) {
    var host = document.getElementById("chart-" + id);
    try {
      charts[id](host);
      if (host.querySelector("svg")) { drawn += 1; host.setAttribute("data-drawn", "1"); }
    } catch (e) {
      host.textContent = "chart failed: " + e;
      host.setAttribute("data-error", String(e));
    }
  });

  // Incidents first: what happened, what it cost, how to fix it. Findings link here.
  var incidentOf = {};
  (function () {
    var host = document.getElementById("incidents");
    if (!D.incidents.length) {
      host.innerHTML = "<span class='muted'>no incidents</span>";
      return;
    }
    var t = document.createElement("table");
    t.className = "incidents";
    t.innerHTML = "<thead><tr><th>severity</th><th>kind</th><th>status</th><th>job</th><th>partitions</th>" +
      "<th>lost</th><th>unverifiable</th><th>duplicated</th><th>cause</th><th>repair</th></tr></thead>";
    var b = document.createElement("tbody");
    D.incidents.forEach(function (i) {
      i.finding_ids.forEach(function (f) { incidentOf[f] = i.incident_id; });
      var tr = document.createElement("tr");
      tr.id = "incident-" + i.incident_id;
      [i.severity, i.kind, i.status, i.job_name, i.partitions, i.records_lost, i.records_unverifiable,
       i.records_duplicated, i.cause, i.repair || ""].forEach(function (v, k) {
        var td = document.createElement("td");
        if (k === 0) {
          var span = document.createElement("span");
          span.className = "pill " + v;
          span.textContent = v;
          td.appendChild(span);
        } else if (k === 9 && v) {
          var code = document.createElement("code");
          code.textContent = v;
          td.appendChild(code);
        } else {
          td.textContent = v === null || v === undefined ? "" : v;
        }
        if (k >= 4 && k <= 7) { td.className = "num"; }
        if (k === 8) { td.className = "cause"; }
        tr.appendChild(td);
      });
      b.appendChild(tr);
    });
    t.appendChild(b);
    host.appendChild(t);
    host.setAttribute("data-incidents", String(D.incidents.length));
  })();

  // Expectation suites of the latest check run.
  (function () {
    var host = document.getElementById("checks");
    if (!D.checks.length) {
      host.innerHTML = "<span class='muted'>no validation results yet</span>";
      return;
    }
    var t = document.createElement("table");
    t.className = "checks";
    t.innerHTML = "<thead><tr><th>suite</th><th>expectations</th><th>failed</th></tr></thead>";
    var b = document.createElement("tbody");
    D.checks.forEach(function (c) {
      var tr = document.createElement("tr");
      [c.suite, c.evaluated, c.failed].forEach(function (v, i) {
        var td = document.createElement("td");
        td.textContent = v;
        if (i === 2) { td.className = c.failed ? "bad" : "good"; }
        tr.appendChild(td);
      });
      b.appendChild(tr);
    });
    t.appendChild(b);
    host.appendChild(t);
  })();

  // Findings table: click a header to sort, type or pick to filter.
  (function () {
    var cols = ["severity", "finding_type", "status", "incident", "job_name", "group_id", "topic",
                "partition", "checkpoint_id", "run_id", "offset_start", "offset_end", "record_count",
                "detected_at"];
    D.findings.forEach(function (r) { r.incident = incidentOf[r.finding_id] || null; });
    var numeric = {partition: 1, checkpoint_id: 1, offset_start: 1, offset_end: 1, record_count: 1};
    var sevRank = {};
    D.vocab.severities.forEach(function (s, i) { sevRank[s] = i; });
    var state = {key: "severity", dir: 1};
    var table = document.getElementById("findings");
    var head = document.createElement("tr");
    cols.forEach(function (c) {
      var th = document.createElement("th");
      th.textContent = c;
      th.dataset.key = c;
      th.addEventListener("click", function () {
        state.dir = state.key === c ? -state.dir : 1;
        state.key = c;
        render();
      });
      head.appendChild(th);
    });
    table.tHead.appendChild(head);
    function fill(id, values) {
      var sel = document.getElementById(id);
      values.forEach(function (v) {
        var o = document.createElement("option");
        o.value = v; o.textContent = v;
        sel.appendChild(o);
      });
      sel.addEventListener("change", render);
    }
    fill("f-type", D.vocab.finding_types);
    fill("f-severity", D.vocab.severities);
    fill("f-status", D.vocab.statuses);
    document.getElementById("f-text").addEventListener("input", render);
    function sortValue(r, k) {
      if (k === "severity") { return sevRank[r.severity]; }
      var v = r[k];
      if (v === null || v === undefined) { return numeric[k] ? -Infinity : ""; }
      return numeric[k] ? Number(v) : String(v);
    }
    function render() {
      var q = document.getElementById("f-text").value.toLowerCase();
      var ft = document.getElementById("f-type").value;
      var fs = document.getElementById("f-severity").value;
      var fst = document.getElementById("f-status").value;
      var rows = D.findings.filter(function (r) {
        if (ft && r.finding_type !== ft) { return false; }
        if (fs && r.severity !== fs) { return false; }
        if (fst && r.status !== fst) { return false; }
        if (q) {
          var hay = cols.map(function (c) { return r[c]; }).join(" ") + " " + (r.evidence || "");
          if (hay.toLowerCase().indexOf(q) < 0) { return false; }
        }
        return true;
      });
      rows.sort(function (a, b) {
        var x = sortValue(a, state.key), y = sortValue(b, state.key);
        return (x < y ? -1 : x > y ? 1 : 0) * state.dir;
      });
      Array.prototype.forEach.call(head.children, function (th) {
        th.className = th.dataset.key === state.key ? (state.dir > 0 ? "asc" : "desc") : "";
      });
      var body = table.tBodies[0];
      body.innerHTML = "";
      rows.forEach(function (r) {
        var tr = document.createElement("tr");
        tr.title = r.evidence || "";
        cols.forEach(function (c) {
          var td = document.createElement("td");
          var v = r[c];
          if (c === "severity") {
            var span = document.createElement("span");
            span.className = "pill " + v;
            span.textContent = v;
            td.appendChild(span);
          } else if (c === "incident" && v) {
            var a = document.createElement("a");
            a.href = "#incident-" + v;
            a.textContent = v.slice(0, 8);
            td.appendChild(a);
          } else {
            td.textContent = v === null || v === undefined ? "" : v;
          }
          if (numeric[c]) { td.className = "num"; }
          tr.appendChild(td);
        });
        body.appendChild(tr);
      });
      document.getElementById("f-count").textContent = rows.length + " of " + D.findings.length + " findings";
      table.setAttribute("data-rows", String(rows.length));
    }
    render();
  })();

  document.body.setAttribute("data-charts-drawn", String(drawn));
})();
"""
