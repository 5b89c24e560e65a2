"""``pgmem report``: one self-contained HTML page of charts over the analytics views.

The page needs no network: the data is embedded as JSON and drawn as SVG by a small inline script (no
library, no CDN). Under each chart is the SQL that produced it (``sql/analytics.sql``) with its
parameters, to copy into psql and adapt. When the script has drawn a chart it writes what it drew on the
chart's ``<svg>``: ``data-drawn`` (bars, or edges of the flow graph, with a non-zero value) — which is
how the tests check, in headless Chromium, that the charts are drawn and not empty.

The page's template, style and script are package data in ``pgmem/ops/report_assets/`` (``page.html``,
a :class:`string.Template`; ``report.css``; ``report.js``), inlined into every page. The template is not
called ``report.html``: the repository's ``.gitignore`` ignores that name (written reports), and so would
the wheel build.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

import psycopg

from pgmem.errors import InvalidInput, translate
from pgmem.ops import analytics
from pgmem.ops.analytics import Scope

__all__ = ["ReportSummary", "collect", "render", "write_report"]


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """What :func:`write_report` wrote: the file and how many marks each chart has (0: nothing to draw)."""

    path: Path
    messages: int
    marks: dict[str, int]


@functools.cache
def _asset(name: str) -> str:
    """A file of ``pgmem/ops/report_assets`` (package data, read once per process)."""
    return resources.files("pgmem.ops").joinpath("report_assets", name).read_text(encoding="utf-8")


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
        analytics.scope_transaction(conn, scope)
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
        summaries = analytics.fetch(conn, "summaries", scope)
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
        "summaries": ("Summaries per memory and level: how much they compress", summaries),
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
    return Template(_asset("page.html")).substitute(
        where=html.escape(where),
        generated=html.escape(data["generated_at"]),
        cards=cards,
        charts=charts,
        tables=tables,
        data=_json_for_script(data["charts"]),
        script=_asset("report.js"),
        style=_asset("report.css"),
    )


def _reading(dsn: str, replicas: Sequence[str]) -> psycopg.Connection[Any]:
    """A connection to the first replica that answers, else to ``dsn``. The report reads one snapshot of
    committed data (a replica's is as good, a moment behind) and its scans are better kept off the primary."""
    for replica in replicas:
        try:
            return psycopg.connect(replica, connect_timeout=2)
        except psycopg.OperationalError:
            continue
    return psycopg.connect(dsn)


def check_report(path: Path) -> Path:
    """``path``, checked before anything runs (the demo's agents, the report's queries): the report can be
    written there.

    A missing folder is not created: it is more often a typo than a wish, and the user should see it.

    Raises:
        InvalidInput: ``path`` is a directory, its folder does not exist (or is not a folder), or it cannot
            be written (permissions, a read-only file system); nothing was started or written.
    """
    folder = path.parent
    if path.is_dir():
        raise InvalidInput(
            f"report path {str(path)!r} is a directory: give a file name, e.g. {str(path / 'report.html')!r}"
        )
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist (pgmem does not create it)"
        raise InvalidInput(f"report path {str(path)!r}: folder {str(folder)!r} {what}")
    try:
        if path.exists():
            with path.open("ab"):  # writes nothing: the report replaces it after the run
                pass
        else:
            with path.open("xb"):
                pass
            path.unlink()
    except OSError as exc:
        raise InvalidInput(f"report path {str(path)!r} cannot be written: {exc.strerror or exc}") from None
    return path


def write_report(
    dsn: str,
    out: Path | str,
    *,
    namespace: str | None = None,
    since: datetime | None = None,
    memory: str | None = None,
    replicas: Sequence[str] = (),
) -> ReportSummary:
    """Query the analytics views at ``dsn`` (or at the first of ``replicas``, streaming replicas of it, that
    answers) and write the HTML report to ``out``.

    Raises:
        InvalidInput: ``out`` cannot be written (:func:`check_report`), before any query runs.
    """
    check_report(Path(out))
    scope = Scope(namespace, since, memory)
    with translate(), _reading(dsn, replicas) as conn:
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
