"""``pgmem report``: one self-contained HTML page of charts over the analytics views.

The charts are drawn by plotly.js, the JavaScript of the ``plotly`` package (``pip install 'pgmem[report]'``),
inlined into the page with the data as JSON: the page opens with no network. Under each chart is the SQL
that produced it (``sql/analytics.sql``) with its parameters, to copy into psql and adapt.

The page is data-driven: :data:`SECTIONS` lists its sections in order, each a named query of
``sql/analytics.sql`` and how its rows are shown (:class:`Chart`, :class:`FlowGraphs`, :class:`Rows`); adding
a section is adding a query and an entry there.

What was drawn can be checked: once plotly.js has drawn every chart, the page's script writes what the
library holds for each (its computed points, its axis titles and tick labels, the marks in its SVG) as JSON
into ``<pre id="pgmem-drawn">``, and each chart's element gets ``data-drawn`` (its non-zero marks). The tests
load the page in headless Chromium and compare that with the same queries run on the database.

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
from typing import Any, Literal

import psycopg

from pgmem.errors import InvalidInput, MissingExtra, translate
from pgmem.ops import analytics
from pgmem.ops.analytics import Scope

__all__ = [
    "SECTIONS",
    "Chart",
    "FlowGraphs",
    "ReportSummary",
    "Rows",
    "chart_library",
    "check_report",
    "collect",
    "render",
    "write_report",
]

#: A message without an action (cause_by ''), as a node of the flow graph.
NO_ACTION = "(no cause_by)"


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart of one query's rows: ``x`` against each of ``values``.

    With ``series``, each distinct value of that column is a trace (one agent, one queue); without, each
    column of ``values`` is one (one queue state). A time ``x`` (the query's ``bucket`` column) gets a bucket
    width chosen from the span between two columns of the ``totals`` query (``span``). ``{bucket}`` in a
    title is that width. Count axes (every chart here counts) have integer ticks only.
    """

    key: str
    title: str
    query: str
    kind: Literal["stacked", "grouped", "lines"]
    x: str
    values: tuple[str, ...]
    x_title: str
    y_title: str
    series: str | None = None
    span: tuple[str, str] | None = None
    table: bool = False  # the query's rows as a table under the chart too


@dataclass(frozen=True, slots=True)
class FlowGraphs:
    """The action flow: one graph per namespace (a Sankey diagram), with its edges as a table."""

    key: str
    title: str
    query: str


@dataclass(frozen=True, slots=True)
class Rows:
    """A query's rows as a table; ``empty``: what an empty table says (e.g. what turns the data on)."""

    key: str
    title: str
    query: str
    empty: str = "nothing in this scope"


Section = Chart | FlowGraphs | Rows

_TIME = "time (UTC, per {bucket})"

#: The page's sections, in order.
SECTIONS: tuple[Section, ...] = (
    Chart(
        "activity",
        "Messages stored per agent over time (per {bucket}, UTC; queue-only messages included)",
        "activity",
        "stacked",
        x="bucket",
        values=("messages",),
        series="agent",
        x_title=_TIME,
        y_title="messages stored",
        span=("first_at", "last_at"),
    ),
    FlowGraphs("flow", "Action flow per namespace: which action's messages were followed by which", "flow_graphs"),
    Chart(
        "queues",
        "Queue health: items per state (now)",
        "queues",
        "grouped",
        x="queue",
        values=("available", "leased", "delayed", "dead", "acked"),
        x_title="queue",
        y_title="items",
        table=True,
    ),
    Chart(
        "throughput",
        "Queue throughput: items acknowledged per queue over time (per {bucket}, UTC)",
        "throughput",
        "lines",
        x="bucket",
        values=("acked",),
        series="queue",
        x_title=_TIME,
        y_title="items acknowledged",
        span=("first_acked_at", "last_acked_at"),
    ),
    Chart(
        "tokens",
        "Token usage per agent over time (estimated where not counted; per {bucket}, UTC)",
        "activity",
        "stacked",
        x="bucket",
        values=("tokens_estimated",),
        series="agent",
        x_title=_TIME,
        y_title="tokens (estimated)",
        span=("first_at", "last_at"),
    ),
    Rows("agents", "Agents: messages each one stored", "agents"),
    Rows("talk", "Who talks to whom", "talk"),
    Rows(
        "retrievals",
        "Retrieval log: logged searches by label (PGMEM_RETRIEVAL_LOG=1)",
        "retrievals",
        empty="no logged searches in this scope: the retrieval log is off unless PGMEM_RETRIEVAL_LOG=1",
    ),
    Rows(
        "recall",
        "Search recall: recall@k of sampled searches per model, kind and strategy",
        "recall",
        empty="no checked samples in this scope: searches are sampled only with PGMEM_RECALL_SAMPLE (0 to 1) "
        "or connect(recall_sample=), and checked in the background a minute later",
    ),
    Rows("summaries", "Summaries per memory and level: how much they compress", "summaries"),
)

#: The headline cards: a column of the ``totals`` query, its label, and a detail (from other columns).
CARDS: tuple[tuple[str, str, str], ...] = (
    ("in_memories", "messages in memories", "+{queue_only} only in queues; {messages} stored"),
    ("actions", "actions in memories", "distinct cause_by; {all_actions} with queue-only messages"),
    ("agents", "agents", "distinct senders (the role when none)"),
    ("memories", "memories", ""),
    ("tokens_estimated", "tokens (estimated)", "of all {messages} stored messages"),
)


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """What :func:`write_report` wrote: the file, the messages it counts (held by a memory; only in a
    queue), and how many non-zero marks each chart has (0: nothing to draw)."""

    path: Path
    messages: int
    queue_only: int
    marks: dict[str, int]


@functools.cache
def _asset(name: str) -> str:
    """A file of ``pgmem/ops/report_assets`` (package data, read once per process)."""
    return resources.files("pgmem.ops").joinpath("report_assets", name).read_text(encoding="utf-8")


@functools.cache
def chart_library() -> str:
    """plotly.js, from the installed ``plotly`` package, to inline into the page.

    Raises:
        MissingExtra: ``plotly`` is not installed (``pip install 'pgmem[report]'``).
    """
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise MissingExtra(
            "pgmem report draws its charts with plotly, which is not installed: pip install 'pgmem[report]'"
        ) from None
    return str(get_plotlyjs())


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _when(t: datetime) -> str:
    """A time as plotly.js reads it on a date axis: UTC, no offset (it has no time zones), milliseconds."""
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _buckets(first: datetime, last: datetime, seconds: float) -> list[datetime]:
    """Every bucket start from ``first`` to ``last`` (both bucket starts): a line drops to 0 where nothing
    happened instead of joining the points around a quiet period."""
    out: list[datetime] = []
    t = first
    while t <= last and len(out) < 1000:
        out.append(t)
        t += timedelta(seconds=seconds)
    return out


def _count_step(most: float) -> int:
    """The tick step of a count axis up to ``most``: 1, 2, 5, 10, 20, 50… giving at most 8 ticks."""
    step = 1
    while most / step > 8:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2
    return step


def _traces(chart: Chart, rows: list[dict[str, Any]], buckets: list[datetime]) -> list[dict[str, Any]]:
    """The chart's traces: ``{"name", "x", "y"}`` each; bars without their zeros, lines with them."""
    # One queue name in two namespaces is two queues: the namespace prefixes the series, else the category.
    multi_ns = len({r.get("namespace") for r in rows}) > 1

    def x_of(r: dict[str, Any]) -> Any:
        x = r[chart.x]
        if isinstance(x, datetime):
            return _when(x)
        return f"{r['namespace']}/{x}" if multi_ns and chart.series is None else x

    def series_of(r: dict[str, Any], column: str) -> str:
        name = str(r[column])
        return f"{r['namespace']}/{name}" if multi_ns else name

    if chart.series is None:
        named = [(column, [(x_of(r), r[column] or 0) for r in rows]) for column in chart.values]
    else:
        groups: dict[str, list[tuple[Any, Any]]] = {}
        for r in rows:
            groups.setdefault(series_of(r, chart.series), []).append((x_of(r), r[chart.values[0]] or 0))
        named = list(groups.items())
    traces = []
    for name, points in named:
        if chart.kind == "lines" and buckets:
            at = dict(points)
            points = [(_when(b), at.get(_when(b), 0)) for b in buckets]
        else:
            points = [(x, y) for x, y in points if y]
        if any(y for _, y in points):
            traces.append({"name": name, "x": [x for x, _ in points], "y": [y for _, y in points]})
    return traces


def _peak(chart: Chart, traces: list[dict[str, Any]]) -> float:
    if chart.kind != "stacked":
        return max((y for t in traces for y in t["y"]), default=0)
    sums: dict[Any, float] = {}
    for t in traces:
        for x, y in zip(t["x"], t["y"], strict=True):
            sums[x] = sums.get(x, 0) + y
    return max(sums.values(), default=0)


def _flow_graphs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One graph per namespace: its nodes (actions) and links (edges, median delay)."""
    graphs: dict[str, dict[str, Any]] = {}
    for r in rows:
        g = graphs.setdefault(r["namespace"], {"namespace": r["namespace"], "memory": r["memory"], "nodes": []})
        g.setdefault("links", [])
        ends = []
        for name in (r["from_action_name"], r["to_action_name"]):
            label = name or NO_ACTION
            if label not in g["nodes"]:
                g["nodes"].append(label)
            ends.append(g["nodes"].index(label))
        g["links"].append(
            {"source": ends[0], "target": ends[1], "edges": r["edges"], "median_delay_s": r["median_delay_s"]}
        )
    return list(graphs.values())


def collect(conn: psycopg.Connection[Any], scope: Scope) -> dict[str, Any]:
    """Run the report's queries in one snapshot and return the page's data (JSON-ready)."""
    params = scope.params()
    fetched: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    sections: dict[str, dict[str, Any]] = {}
    with translate(), conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        analytics.scope_transaction(conn, scope)
        totals = analytics.fetch(conn, "totals", scope)[0]
        for section in SECTIONS:
            bucket, extra = None, {}
            if isinstance(section, Chart) and section.span:
                bucket = analytics.bucket_for(totals[section.span[0]], totals[section.span[1]])
                extra = {"bucket": bucket}
            if (section.query, bucket) not in fetched:
                fetched[section.query, bucket] = analytics.fetch(conn, section.query, scope, **extra)
            rows = fetched[section.query, bucket]
            shown = {k: _iso(v) for k, v in {**params, **extra}.items()}
            out: dict[str, Any] = {"sql": analytics.query_text(section.query), "query": section.query, "params": shown}
            if isinstance(section, Chart):
                seconds = dict(analytics.BUCKETS)[bucket] if bucket else 0.0
                buckets = (
                    _buckets(min(r[section.x] for r in rows), max(r[section.x] for r in rows), seconds)
                    if bucket and rows
                    else []
                )
                traces = _traces(section, rows, buckets)
                out |= {
                    "kind": section.kind,
                    "title": section.title.format(bucket=bucket),
                    "x_title": section.x_title.format(bucket=bucket),
                    "x_type": "date" if bucket else "category",
                    "y_title": section.y_title,
                    "y_step": _count_step(_peak(section, traces)),
                    "bucket_ms": seconds * 1000,
                    "traces": traces,
                }
                if section.table:
                    out["rows"] = [{k: _iso(v) for k, v in r.items()} for r in rows]
            elif isinstance(section, FlowGraphs):
                out |= {"kind": "flow", "title": section.title, "graphs": _flow_graphs(rows)}
            else:
                out |= {
                    "kind": "rows",
                    "title": section.title,
                    "rows": [{k: _iso(v) for k, v in r.items()} for r in rows],
                    "empty": section.empty,
                }
            sections[section.key] = out
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "scope": {k: _iso(v) for k, v in params.items()},
        "totals": {k: _iso(v) for k, v in totals.items()},
        "sections": sections,
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


def _table(rows: list[dict[str, Any]], empty: str = "nothing in this scope") -> str:
    if not rows:
        return f"<p class='empty'>{html.escape(empty)}</p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in r.values()) + "</tr>"
        for r in rows
    )
    # The wrapper scrolls sideways when the table is wider than its card.
    return f"<div class='table'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _section_html(key: str, s: dict[str, Any]) -> str:
    title = html.escape(s["title"])
    if s["kind"] == "rows":
        body = _table(s["rows"], s["empty"])
    elif s["kind"] == "flow":
        graphs = "".join(
            f"<h3>namespace {html.escape(g['namespace'])} &middot; memory {html.escape(g['memory'])}</h3>"
            f"<div class='plot flow' data-graph='{i}' role='img' aria-label='action flow of namespace "
            f"{html.escape(g['namespace'])}'></div>"
            + _table(
                [
                    {
                        "from": g["nodes"][link["source"]],
                        "to": g["nodes"][link["target"]],
                        "edges": link["edges"],
                        "median delay (s)": link["median_delay_s"],
                    }
                    for link in g["links"]
                ]
            )
            for i, g in enumerate(s["graphs"])
        )
        body = f"<div class='flows' data-chart='{key}'>{graphs or '<p class=empty>nothing in this scope</p>'}</div>"
    else:
        body = f"<div class='plot' data-chart='{key}' role='img' aria-label='{title}'></div>"
        if "rows" in s:
            body += _table(s["rows"])
    return f"<section><h2>{title}</h2>{body}{_sql_block(s['sql'], s['params'])}</section>"


def render(data: dict[str, Any]) -> str:
    """The HTML page for :func:`collect`'s data.

    Raises:
        MissingExtra: ``plotly`` is not installed (``pip install 'pgmem[report]'``).
    """
    scope = data["scope"]
    where = f"namespace {scope['ns']!r}" if scope["ns"] else "all namespaces"
    if scope["since"]:
        where += f", since {scope['since']}"
    totals = data["totals"]
    cards = "".join(
        f"<div class='card'><b>{html.escape(str(totals[key] if totals[key] is not None else '-'))}</b>"
        f"<span>{label}</span>"
        + (f"<small>{html.escape(detail.format(**totals))}</small>" if detail else "")
        + "</div>"
        for key, label, detail in CARDS
    )
    charts = {k: s for k, s in data["sections"].items() if s["kind"] != "rows"}
    return Template(_asset("page.html")).substitute(
        where=html.escape(where),
        generated=html.escape(data["generated_at"]),
        cards=cards,
        sections="".join(_section_html(k, s) for k, s in data["sections"].items()),
        data=_json_for_script(charts),
        library=chart_library(),
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


def _marks(section: dict[str, Any]) -> int:
    if section["kind"] == "flow":
        return sum(1 for g in section["graphs"] for link in g["links"] if link["edges"])
    return sum(1 for t in section["traces"] for y in t["y"] if y)


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

    Example:
        >>> write_report(dsn, "report.html", namespace="acme").messages  # doctest: +SKIP
        10

    Raises:
        InvalidInput: ``out`` cannot be written (:func:`check_report`), before any query runs.
        MissingExtra: ``plotly`` is not installed (``pip install 'pgmem[report]'``), before any query runs.
    """
    chart_library()
    check_report(Path(out))
    scope = Scope(namespace, since, memory)
    with translate(), _reading(dsn, replicas) as conn:
        data = collect(conn, scope)
    path = Path(out)
    path.write_text(render(data), encoding="utf-8")
    marks = {key: _marks(s) for key, s in data["sections"].items() if s["kind"] != "rows"}
    totals = data["totals"]
    return ReportSummary(path, int(totals["in_memories"]), int(totals["queue_only"]), marks)
