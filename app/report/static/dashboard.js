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

  // A count for a hover text: null is what the sink mode cannot know, never 0.
  function known(v, unit) {
    if (v === null || v === undefined) { return "unknown"; }
    return unit ? (v / 1000).toFixed(1) + " s" : String(v);
  }
  function windowTitle(c) {
    return c.row + " · " + c.window_start + "–" + c.window_end.slice(11) + " UTC · " +
      (c.final ? "final" : "provisional (may still change)") + " · " + c.sink_mode + "\n" +
      "completeness " + (c.completeness === null ? "unknown" : pct(c.completeness)) + " · " +
      ["expected", "landed", "lost", "unverifiable", "duplicated", "pending"].map(function (k) {
        return k + " " + known(c[k]);
      }).join(", ") +
      (c.landed === null && c.offsets_in_sink_batches !== null ?
        " · offsets in batches that reached the sink " + c.offsets_in_sink_batches : "") + "\n" +
      "latency p50 " + known(c.latency_p50_ms, "s") + ", p95 " + known(c.latency_p95_ms, "s");
  }
  function windowAxis(cells) {
    var seen = {};
    cells.forEach(function (c) { seen[c.window_start] = true; });
    return Object.keys(seen).sort();
  }

  // Partitions (rows) x windows (columns), coloured by completeness (the server picks the colour:
  // render.completeness_colour); a provisional window is lighter and hatched.
  function heatmap(host, cells) {
    if (!cells.length) {
      return empty(host, "no completeness windows in the last " + D.window_hours + " hours");
    }
    var rows = [], rowSeen = {};
    cells.forEach(function (c) { if (!rowSeen[c.row]) { rowSeen[c.row] = true; rows.push(c.row); } });
    var cols = windowAxis(cells), colOf = {};
    cols.forEach(function (w, i) { colOf[w] = i; });
    var L = 190, R = 10, T = 6, B = 34, W = 1240, rowH = 16;
    var cw = Math.max(3, Math.min(40, (W - L - R) / cols.length));
    var H = T + rows.length * rowH + B;
    var s = svgRoot(host, W, H);
    var defs = el("defs", {}, s);
    var hatch = el("pattern", {id: "hatch", patternUnits: "userSpaceOnUse", width: 5, height: 5,
                               patternTransform: "rotate(45)"}, defs);
    el("line", {x1: 0, y1: 0, x2: 0, y2: 5, stroke: "#ffffff", "stroke-width": 2}, hatch);
    rows.forEach(function (r, i) { text(s, L - 6, T + i * rowH + 12, r, {"text-anchor": "end"}); });
    cells.forEach(function (c) {
      var x = L + colOf[c.window_start] * cw, y = T + rows.indexOf(c.row) * rowH;
      var attrs = {x: x, y: y + 1, width: Math.max(1, cw - 1), height: rowH - 2, fill: c.colour,
                   "class": "cell " + (c.final ? "final" : "provisional"),
                   "data-key": c.row + "|" + c.window_start};
      if (!c.final) { attrs["fill-opacity"] = 0.5; }
      var r = el("rect", attrs, s);
      el("title", {}, r).textContent = windowTitle(c);
      if (!c.final) {
        el("rect", {x: x, y: y + 1, width: Math.max(1, cw - 1), height: rowH - 2, fill: "url(#hatch)",
                    "class": "hatch", "pointer-events": "none"}, s);
      }
    });
    var every = Math.ceil(70 / cw);  // a label is about 70 px wide: one every so many columns
    cols.forEach(function (w, i) {
      if (i % every === 0) {
        text(s, L + i * cw, H - B + 16, w.slice(5), {"text-anchor": "start"});
      }
    });
    legend(host, ["complete", "lossy (amber to red at 90%)", "unknown (sink mode)", "provisional: lighter, hatched"],
           {"complete": "#2e9d5b", "lossy (amber to red at 90%)": "#b3261e",
            "unknown (sink mode)": "#9aa5b1", "provisional: lighter, hatched": "rgba(46,157,91,0.45)"});
    return s;
  }

  // p95 latency per window, one line per job/topic; a gap where it is unknown, hollow points
  // for provisional windows.
  function latencyLines(host, lines) {
    var cols = [], seen = {};
    lines.forEach(function (l) {
      l.points.forEach(function (p) {
        if (p.p95_ms !== null && !seen[p.window_start]) { seen[p.window_start] = true; cols.push(p.window_start); }
      });
    });
    if (!cols.length) {
      return empty(host, "no latency measured in the last " + D.window_hours + " hours");
    }
    cols.sort();
    var colOf = {};
    cols.forEach(function (w, i) { colOf[w] = i; });
    var W = 1240, H = 240, L = 54, R = 40, T = 10, B = 34, pw = W - L - R, ph = H - T - B;
    var max = niceMax(Math.max.apply(null, lines.map(function (l) {
      return Math.max.apply(null, l.points.map(function (p) { return (p.p95_ms || 0) / 1000; }));
    })));
    var s = svgRoot(host, W, H);
    for (var g = 0; g <= 4; g++) {
      var y = T + ph - ph * g / 4;
      el("line", {x1: L, x2: W - R, y1: y, y2: y, stroke: "#e3e7ec"}, s);
      text(s, L - 6, y + 4, fmt(max * g / 4) + " s", {"text-anchor": "end"});
    }
    function xOf(w) { return L + (cols.length === 1 ? pw / 2 : pw * colOf[w] / (cols.length - 1)); }
    var colours = {};
    lines.forEach(function (l, i) {
      var name = l.job_name + " " + l.topic, colour = PALETTE[i % PALETTE.length];
      if (l.points.some(function (p) { return p.p95_ms !== null; })) { colours[name] = colour; }
      var run = [];
      function flush() {
        if (run.length > 1) {
          el("polyline", {points: run.join(" "), fill: "none", stroke: colour, "stroke-width": 1.5,
                          "class": "latency"}, s);
        }
        run = [];
      }
      l.points.forEach(function (p) {
        if (p.p95_ms === null) { flush(); return; }
        var x = xOf(p.window_start), y = T + ph - ph * Math.min(1, p.p95_ms / 1000 / max);
        run.push(x + "," + y);
        var dot = el("circle", {cx: x, cy: y, r: 2.5, stroke: colour, fill: p.final ? colour : "#fff",
                                "class": "point"}, s);
        el("title", {}, dot).textContent = name + " · " + p.window_start + " UTC · p95 " +
          known(p.p95_ms, "s") + (p.final ? "" : " (provisional)");
      });
      flush();
    });
    var every = Math.ceil(cols.length / 14);
    cols.forEach(function (w, i) {
      if (i % every === 0) { text(s, xOf(w), H - B + 16, w.slice(5), {"text-anchor": "middle"}); }
    });
    el("line", {x1: L, x2: W - R, y1: T + ph, y2: T + ph, stroke: "#9aa5b1"}, s);
    legend(host, Object.keys(colours), colours);
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
  // Summed over every incident by the server (render.impact_by_day), in day order.
  var impact = (function () {
    var days = {};
    D.impact.forEach(function (r) { days[r.day] = {lost: r.lost, duplicated: r.duplicated}; });
    return {cats: D.impact.map(function (r) { return r.day; }), values: days};
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
        var c = p.completeness, label = p.job_name + " " + p.topic + "/" + p.partition;
        // A sink judged by its transaction log, or not read: its rows are not counted, so there
        // is no share to draw (0% would say everything is lost, 100% that everything was checked).
        if (c === null) {
          return {label: label, value: 0, note: "not counted" + (p.missing ? " · " + p.missing + " missing" : ""),
            title: "sink rows not counted (sink mode delta_batches, iceberg_snapshots or none), " + p.missing + " missing"};
        }
        return {label: label, value: c, note: pct(c),
          color: c >= 1 ? "#2e9d5b" : (c >= 0.999 ? "#f2c12e" : "#b3261e"),
          title: p.present + " present, " + p.missing + " missing"};
      }), {max: 1, format: pct, color: "#2e9d5b", empty: "no partitions summarized yet"});
    },
    "completeness-windows": function (h) { return heatmap(h, D.windows); },
    "latency-p95": function (h) { return latencyLines(h, D.latency); },
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

  // A table of `rows` in the element `id` (its class is `id` too), or `empty` when there are none;
  // `fill(row, tr)` fills one row's cells.
  function fillTable(id, empty, headers, rows, fill) {
    var host = document.getElementById(id);
    if (!rows.length) {
      host.innerHTML = "<span class='muted'>" + empty + "</span>";
      return host;
    }
    var t = document.createElement("table");
    var b = document.createElement("tbody");
    t.className = id;
    t.innerHTML = "<thead><tr><th>" + headers.join("</th><th>") + "</th></tr></thead>";
    rows.forEach(function (row) {
      var tr = document.createElement("tr");
      fill(row, tr);
      b.appendChild(tr);
    });
    t.appendChild(b);
    host.appendChild(t);
    return host;
  }

  // Incidents first: what happened, what it cost, how to fix it. Findings link here.
  var incidentOf = {};
  (function () {
    var headers = ["severity", "kind", "status", "job", "partitions", "lost", "unverifiable", "duplicated",
                   "cause", "repair"];
    var host = fillTable("incidents", "no incidents", headers, D.incidents, function (i, tr) {
      i.finding_ids.forEach(function (f) { incidentOf[f] = i.incident_id; });
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
    });
    if (D.incidents.length) { host.setAttribute("data-incidents", String(D.incidents.length)); }
  })();

  // Expectation suites of the latest check run.
  fillTable("checks", "no validation results yet", ["suite", "expectations", "failed"], D.checks,
    function (c, tr) {
      [c.suite, c.evaluated, c.failed].forEach(function (v, i) {
        var td = document.createElement("td");
        td.textContent = v;
        if (i === 2) { td.className = c.failed ? "bad" : "good"; }
        tr.appendChild(td);
      });
    });

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
