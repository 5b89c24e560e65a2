"""``pgmem report``: one self-contained HTML page of charts over the analytics views.

The page needs no network: the data is embedded as JSON and drawn as SVG by a small inline script (no
library, no CDN). Under each chart is the SQL that produced it (``sql/analytics.sql``) with its
parameters, to copy into psql and adapt. When the script has drawn a chart it writes what it drew on the
chart's ``<svg>``: ``data-drawn`` (bars, or edges of the flow graph, with a non-zero value) — which is
how the tests check, in headless Chromium, that the charts are drawn and not empty.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from pgmem.errors import translate
from pgmem.ops import analytics
from pgmem.ops.analytics import Scope

__all__ = ["ReportSummary", "collect", "render", "write_report"]


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """What :func:`write_report` wrote: the file and how many marks each chart has (0: nothing to draw)."""

    path: Path
    messages: int
    marks: dict[str, int]


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _bucket_labels(first: datetime, last: datetime, seconds: float) -> list[datetime]:
    """Every bucket start from ``first`` to ``last`` (both bucket starts), so that quiet periods show."""
    out: list[datetime] = []
    t = first
    while t <= last and len(out) < 1000:
        out.append(t)
        t += timedelta(seconds=seconds)
    return out


def _label(t: datetime, span: float, step: float = 1.0) -> str:
    t = t.astimezone(UTC)
    if step < 1:
        return t.strftime("%H:%M:%S.%f")[:-3]
    if span < 86400:
        return t.strftime("%H:%M:%S")
    return t.strftime("%m-%d %H:%M")


def collect(conn: psycopg.Connection[Any], scope: Scope) -> dict[str, Any]:
    """Run the report's queries in one snapshot and return the page's data (JSON-ready)."""
    sections: dict[str, Any] = {}
    with translate(), conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        totals = analytics.fetch(conn, "totals", scope)[0]
        bucket = analytics.bucket_for(totals["first_at"], totals["last_at"])
        seconds = dict(analytics.BUCKETS)[bucket]
        activity = analytics.fetch(conn, "activity", scope, bucket=bucket)
        flow = analytics.fetch(conn, "flow", scope)
        queues = analytics.fetch(conn, "queues", scope)
        throughput = analytics.fetch(conn, "throughput", scope)
        agents = analytics.fetch(conn, "agents", scope)
        talk = analytics.fetch(conn, "talk", scope)
        retrievals = analytics.fetch(conn, "retrievals", scope)
    params = {k: _iso(v) for k, v in scope.params().items()}

    buckets = _bucket_labels(activity[0]["bucket"], activity[-1]["bucket"], seconds) if activity else []
    span = (buckets[-1] - buckets[0]).total_seconds() if buckets else 0.0
    index = {b: i for i, b in enumerate(buckets)}
    names = list(dict.fromkeys(r["agent"] for r in agents))
    per_agent = {a: [0] * len(buckets) for a in names}
    tokens = {a: [0] * len(buckets) for a in names}
    for r in activity:
        i = index.get(r["bucket"])
        if i is not None and r["agent"] in per_agent:
            per_agent[r["agent"]][i] += r["messages"]
            tokens[r["agent"]][i] += r["tokens_estimated"] or 0
    labels = [_label(b, span, seconds) for b in buckets]
    sections["activity"] = {
        "title": f"Messages per agent over time (per {bucket}, UTC)",
        "kind": "stacked",
        "labels": labels,
        "series": [{"name": a, "values": per_agent[a]} for a in names],
        "sql": analytics.query_text("activity"),
        "params": {**params, "bucket": bucket},
    }
    sections["flow"] = {
        "title": "Action flow: which action's messages were followed by which (edges, median delay)",
        "kind": "flow",
        "edges": [
            {
                "from": r["from_action_name"] or "(none)",
                "to": r["to_action_name"] or "(none)",
                "edges": r["edges"],
                "median_delay_s": r["median_delay_s"],
            }
            for r in flow
        ],
        "memories": sorted({m for r in flow for m in (r["memories"] or "").split(", ") if m}),
        "sql": analytics.query_text("flow"),
        "params": params,
    }
    multi_ns = len({r["namespace"] for r in queues}) > 1
    queue_names = [f"{r['namespace']}/{r['queue']}" if multi_ns else r["queue"] for r in queues]
    sections["queues"] = {
        "title": "Queue health: items per state (now)",
        "kind": "grouped",
        "labels": queue_names,
        "series": [
            {"name": state, "values": [r[state] for r in queues]}
            for state in ("available", "leased", "delayed", "dead", "acked")
        ],
        "rows": [{k: _iso(v) for k, v in r.items()} for r in queues],
        "sql": analytics.query_text("queues"),
        "params": params,
    }
    minute_span = (throughput[-1]["minute"] - throughput[0]["minute"]).total_seconds() if throughput else 0.0
    minutes = [_label(r["minute"], minute_span) for r in throughput]
    sections["throughput"] = {
        "title": "Queue throughput: items acknowledged per minute (UTC)",
        "kind": "stacked",
        "labels": minutes,
        "series": [{"name": "acknowledged", "values": [r["acked"] for r in throughput]}],
        "sql": analytics.query_text("throughput"),
        "params": params,
    }
    sections["tokens"] = {
        "title": f"Token usage per agent over time (estimated where not counted; per {bucket}, UTC)",
        "kind": "stacked",
        "labels": labels,
        "series": [{"name": a, "values": tokens[a]} for a in names],
        "sql": analytics.query_text("activity"),
        "params": {**params, "bucket": bucket},
    }
    tables = {
        "agents": ("Agents", agents),
        "talk": ("Who talks to whom", talk),
        "retrievals": ("Retrieval log: logged searches by label (PGMEM_RETRIEVAL_LOG=1)", retrievals),
    }
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "scope": params,
        "totals": {k: _iso(v) for k, v in totals.items()},
        "charts": sections,
        "tables": {
            key: {
                "title": title,
                "rows": [{k: _iso(v) for k, v in r.items()} for r in rows],
                "sql": analytics.query_text(key),
                "params": params,
            }
            for key, (title, rows) in tables.items()
        },
    }


def _json_for_script(data: Any) -> str:
    # Inside <script>, "</" would end the element and "<!--" open a comment: escape "<" everywhere.
    return json.dumps(data, default=str).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sql_block(sql: str, params: dict[str, Any]) -> str:
    shown = ", ".join(f"{k} = {json.dumps(v, default=str)}" for k, v in params.items())
    return (
        "<details class='sql'><summary>SQL behind this (sql/analytics.sql)</summary>"
        f"<pre>{html.escape(sql)}</pre><p class='params'>parameters: {html.escape(shown)}</p></details>"
    )


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p class='empty'>nothing in this scope</p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in r.values()) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(data: dict[str, Any]) -> str:
    """The HTML page for :func:`collect`'s data."""
    scope = data["scope"]
    where = f"namespace {scope['ns']!r}" if scope["ns"] else "all namespaces"
    if scope["since"]:
        where += f", since {scope['since']}"
    totals = data["totals"]
    cards = "".join(
        f"<div class='card'><b>{html.escape(str(totals[key] if totals[key] is not None else '-'))}</b>"
        f"<span>{label}</span></div>"
        for key, label in (
            ("messages", "messages"),
            ("agents", "agents"),
            ("actions", "actions"),
            ("memories", "memories"),
            ("tokens_estimated", "tokens (estimated)"),
        )
    )
    charts = "".join(
        f"<section><h2>{html.escape(c['title'])}</h2>"
        + (
            f"<p class='note'>memory: {html.escape(', '.join(c['memories']))}</p>"
            if c["kind"] == "flow" and c["memories"]
            else ""
        )
        + f"<svg class='chart' data-chart='{key}' role='img' aria-label='{html.escape(c['title'])}'></svg>"
        + (_table(c["rows"]) if key == "queues" else "")
        + _sql_block(c["sql"], c["params"])
        + "</section>"
        for key, c in data["charts"].items()
    )
    tables = "".join(
        f"<section><h2>{html.escape(t['title'])}</h2>{_table(t['rows'])}{_sql_block(t['sql'], t['params'])}</section>"
        for t in data["tables"].values()
    )
    return _PAGE.format(
        where=html.escape(where),
        generated=html.escape(data["generated_at"]),
        cards=cards,
        charts=charts,
        tables=tables,
        data=_json_for_script(data["charts"]),
        script=_SCRIPT,
        style=_STYLE,
    )


def write_report(
    dsn: str,
    out: Path | str,
    *,
    namespace: str | None = None,
    since: datetime | None = None,
    memory: str | None = None,
) -> ReportSummary:
    """Query the analytics views at ``dsn`` and write the HTML report to ``out``."""
    scope = Scope(namespace, since, memory)
    with translate(), psycopg.connect(dsn) as conn:
        data = collect(conn, scope)
    path = Path(out)
    path.write_text(render(data), encoding="utf-8")
    marks = {
        key: (
            sum(1 for e in c["edges"] if e["edges"])
            if c["kind"] == "flow"
            else sum(1 for s in c["series"] for v in s["values"] if v)
        )
        for key, c in data["charts"].items()
    }
    return ReportSummary(path, int(data["totals"]["messages"]), marks)


_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:18px 28px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#b8c0d0}main{max-width:1100px;margin:0 auto;padding:10px 28px 40px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:18px 0}
.card{background:#fff;border-radius:8px;padding:12px 18px;box-shadow:0 1px 2px #0002;min-width:120px}
.card b{display:block;font-size:22px}.card span{color:#667}
section{background:#fff;border-radius:8px;padding:14px 18px;margin:16px 0;box-shadow:0 1px 2px #0002}
section h2{font-size:16px;margin:0 0 8px}svg.chart{width:100%;height:auto;display:block}
.note,.params,.empty{color:#667;margin:4px 0}details.sql summary{cursor:pointer;color:#3563c9;margin-top:8px}
pre{background:#f3f4f7;padding:10px;overflow:auto;font-size:12px;border-radius:6px}
table{border-collapse:collapse;margin-top:8px;font-size:13px}td,th{border-bottom:1px solid #e3e5ea;padding:3px 10px;
text-align:left}th{color:#556}
"""

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pgmem report</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{style}</style></head>
<body><header><h1>pgmem report</h1><p>{where} &middot; generated {generated} &middot; all from SQL views in the
pgmem schema (docs/analytics.md)</p></header>
<main><div class="cards">{cards}</div>{charts}{tables}</main>
<script type="application/json" id="pgmem-data">{data}</script>
<script>{script}</script>
</body></html>
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#3563c9", "#e0803a", "#3a9d5d", "#c94a4a", "#8a5cc2", "#2aa3b0", "#b59a2b", "#d0609f",
                "#6b7a8f", "#4f8a3a"];
  function el(tag, attrs, parent, text) {
    var node = document.createElementNS(SVG, tag);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(0) + "k";
    return Math.round(v * 100) / 100 + "";
  }
  function empty(svg, w, h, text) {
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    el("text", {x: w / 2, y: h / 2, "text-anchor": "middle", fill: "#889"}, svg, text);
    return 0;
  }
  function legend(svg, series, x, y) {
    series.forEach(function (s, i) {
      var g = el("g", {transform: "translate(" + (x + (i % 6) * 130) + "," + (y + Math.floor(i / 6) * 18) + ")"}, svg);
      el("rect", {width: 10, height: 10, y: -9, fill: s.color}, g);
      el("text", {x: 14, y: 0, "font-size": 12}, g, s.name.length > 16 ? s.name.slice(0, 15) + "\u2026" : s.name);
    });
  }
  function axes(svg, m, w, h, max, labels, slot) {
    var H = h - m.t - m.b;
    [0, 0.5, 1].forEach(function (f) {
      var y = m.t + H - f * H;
      el("line", {x1: m.l, x2: w - m.r, y1: y, y2: y, stroke: "#e3e5ea"}, svg);
      el("text", {x: m.l - 6, y: y + 4, "text-anchor": "end", "font-size": 11, fill: "#667"}, svg, fmt(max * f));
    });
    var every = Math.max(1, Math.ceil(labels.length / 9));
    labels.forEach(function (label, i) {
      if (i % every) return;
      el("text", {x: m.l + slot * (i + 0.5), y: h - m.b + 14, "text-anchor": "middle", "font-size": 11,
                  fill: "#667"}, svg, label);
    });
  }
  function bars(svg, chart, grouped) {
    var labels = chart.labels, series = chart.series.map(function (s, i) {
      return {name: s.name, values: s.values, color: COLORS[i % COLORS.length]};
    }).filter(function (s) { return s.values.some(Boolean); });
    var w = 860, legendRows = Math.ceil(series.length / 6), h = 260 + 18 * legendRows;
    if (!labels.length || !series.length) return empty(svg, w, 120, "nothing to draw in this scope");
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    var m = {l: 48, r: 12, t: 10 + 18 * legendRows, b: 26}, W = w - m.l - m.r, H = h - m.t - m.b;
    var slot = W / labels.length, max = 0;
    labels.forEach(function (_, i) {
      var sum = 0;
      series.forEach(function (s) { sum = grouped ? Math.max(sum, s.values[i]) : sum + s.values[i]; });
      max = Math.max(max, sum);
    });
    max = max || 1;
    legend(svg, series, m.l, 14);
    axes(svg, m, w, h, max, labels, slot);
    var drawn = 0;
    labels.forEach(function (label, i) {
      var base = 0;
      series.forEach(function (s, j) {
        var v = s.values[i];
        if (!v) return;
        var bh = v / max * H, x, bw;
        if (grouped) {
          bw = Math.min(48, slot * 0.8 / series.length);
          x = m.l + slot * (i + 0.5) - bw * series.length / 2 + j * bw;
          base = 0;
        } else { bw = Math.max(1, Math.min(64, slot * 0.7)); x = m.l + slot * (i + 0.5) - bw / 2; }
        var r = el("rect", {x: x, y: m.t + H - base - bh, width: bw, height: Math.max(bh, 0.5),
                            fill: s.color, "class": "mark"}, svg);
        el("title", {}, r, s.name + " @ " + label + ": " + fmt(v));
        if (!grouped) base += bh;
        drawn++;
      });
    });
    return drawn;
  }
  function flow(svg, chart) {
    var edges = chart.edges.filter(function (e) { return e.edges > 0; });
    if (!edges.length) return empty(svg, 860, 120, "no action flow in this scope");
    var order = [];
    edges.forEach(function (e) {
      if (order.indexOf(e.from) < 0) order.push(e.from);
      if (order.indexOf(e.to) < 0) order.push(e.to);
    });
    var back = edges.some(function (e) { return order.indexOf(e.to) < order.indexOf(e.from); });
    var gap = 170, w = Math.max(860, order.length * gap + 40), h = back ? 320 : 200, cy = 145, bw = 136, bh = 34;
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    var defs = el("defs", {}, svg);
    var marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 11,
                               markerHeight: 11, markerUnits: "userSpaceOnUse", orient: "auto"}, defs);
    el("path", {d: "M0,0 L10,5 L0,10 z", fill: "#556"}, marker);
    var x0 = (w - (order.length - 1) * gap) / 2;
    function cx(name) { return x0 + order.indexOf(name) * gap; }
    var most = Math.max.apply(null, edges.map(function (e) { return e.edges; }));
    var drawn = 0;
    edges.forEach(function (e) {
      var a = cx(e.from), b = cx(e.to), d, lx, ly, width = 1.5 + 4 * e.edges / most;
      if (e.from === e.to) {
        d = "M" + (a - 18) + "," + (cy - bh / 2) + " C" + (a - 40) + "," + (cy - 95) + " " + (a + 40) + "," +
            (cy - 95) + " " + (a + 18) + "," + (cy - bh / 2);
        lx = a; ly = cy - 82;
      } else {
        var forward = b > a, lift = Math.min(130, 40 + Math.abs(b - a) / 4), y = forward ? cy - bh / 2 : cy + bh / 2;
        var apex = forward ? y - lift : y + lift;
        d = "M" + a + "," + y + " Q" + ((a + b) / 2) + "," + apex + " " + b + "," + y;
        lx = (a + b) / 2; ly = forward ? y - lift / 2 - 4 : y + lift / 2 + 14;
      }
      var p = el("path", {d: d, fill: "none", stroke: "#556", "stroke-width": width, "marker-end": "url(#arrow)",
                          "class": "mark", "stroke-opacity": 0.75}, svg);
      el("title", {}, p, e.from + " \u2192 " + e.to + ": " + e.edges + " (median " + fmt(e.median_delay_s) + " s)");
      el("text", {x: lx, y: ly, "text-anchor": "middle", "font-size": 12, fill: "#1d2330"}, svg,
         e.edges + "\u00d7 \u00b7 " + fmt(e.median_delay_s) + " s");
      drawn++;
    });
    order.forEach(function (name, i) {
      var x = cx(name);
      el("rect", {x: x - bw / 2, y: cy - bh / 2, width: bw, height: bh, rx: 8, fill: COLORS[i % COLORS.length],
                  "class": "node"}, svg);
      el("text", {x: x, y: cy + 5, "text-anchor": "middle", fill: "#fff", "font-size": 13, "font-weight": 600}, svg,
         name.length > 18 ? name.slice(0, 17) + "\u2026" : name);
    });
    svg.setAttribute("data-nodes", order.length);
    return drawn;
  }
  var total = 0;
  try {
    var charts = JSON.parse(document.getElementById("pgmem-data").textContent);
    Array.prototype.forEach.call(document.querySelectorAll("svg.chart"), function (svg) {
      var chart = charts[svg.getAttribute("data-chart")];
      var n = chart.kind === "flow" ? flow(svg, chart) : bars(svg, chart, chart.kind === "grouped");
      svg.setAttribute("data-drawn", n);
      total += n;
    });
    document.body.setAttribute("data-charts-drawn", total);
  } catch (err) {
    document.body.setAttribute("data-chart-error", String(err && err.stack || err));
  }
})();
"""
