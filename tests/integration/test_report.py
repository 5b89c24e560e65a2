"""`pgmem report` renders in headless Chromium with plotly.js, and what it drew equals the SQL behind it;
`pgmem stats` prints the main figures."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.ops.report import SECTIONS
from tests.integration.test_analytics_views import T0, UR, _conversation
from tests.integration.test_cli import run_cli

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
CHARTS = ("activity", "flow", "queues", "throughput", "tokens")

#: How each chart's traces come from its query's rows: the series column (None: one trace per value column),
#: the x column, the value columns. Written here, not taken from pgmem.ops.report: the test's own reading.
READING = {
    "activity": ("agent", "bucket", ("messages",)),
    "tokens": ("agent", "bucket", ("tokens_estimated",)),
    "throughput": ("queue", "bucket", ("acked",)),
    "queues": (None, "queue", ("available", "leased", "delayed", "dead", "acked")),
}


class _Page(HTMLParser):
    """The DOM after the page's script ran: each chart's element (data-chart, data-drawn), <body>'s marks,
    and what plotly.js drew (<pre id="pgmem-drawn">, JSON)."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, dict[str, str]] = {}
        self.body: dict[str, str] = {}
        self._in_drawn = False
        self._drawn: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if "data-chart" in values:
            self.charts[values["data-chart"]] = values
        elif tag == "body":
            self.body = values
        self._in_drawn = values.get("id") == "pgmem-drawn"

    def handle_endtag(self, tag: str) -> None:
        self._in_drawn = False

    def handle_data(self, data: str) -> None:
        if self._in_drawn:
            self._drawn.append(data)

    @property
    def drawn(self) -> dict[str, Any]:
        return dict(json.loads("".join(self._drawn) or "{}"))


def render_in_chromium(page: Path, tmp_path: Path) -> _Page:
    """Load the page in headless Chromium (no network) and parse the DOM after its script ran."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'chromium'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    dom = _Page()
    dom.feed(result.stdout)
    assert "data-chart-error" not in dom.body, dom.body.get("data-chart-error")
    assert "data-charts-drawn" in dom.body, "the page's script did not finish"
    # Nothing sticks out of its card at Chromium's default 800 px: wide tables wrap or scroll inside theirs.
    assert dom.body["data-overflowing"] == "0"
    return dom


def _page_data(page: Path) -> dict[str, Any]:
    """The charts' data as the page embeds it: each chart's query and parameters (shown under it)."""
    text = page.read_text()
    start = text.index('<script type="application/json" id="pgmem-data">') + len(
        '<script type="application/json" id="pgmem-data">'
    )
    return dict(json.loads(text[start : text.index("</script>", start)]))


def _ms(t: datetime) -> int:
    """A time as plotly.js's date axis holds it: milliseconds since the epoch, UTC."""
    return round(t.timestamp() * 1000)


def _sql(dsn: str, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart's query, run directly (as the tables' owner: the query's own filters scope it)."""
    from pgmem.ops.analytics import query_text

    with psycopg.connect(dsn) as conn:
        cur = conn.execute(query_text(query), params)
        columns = [c.name for c in cur.description or []]
        return [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]


def assert_drawn_equals_sql(dsn: str, page: Path, dom: _Page) -> dict[str, Any]:
    """Every point plotly.js computed equals the rows of the query under its chart, run here with the
    parameters the page shows; every axis is titled; count axes have integer ticks only. Returns the drawn
    data."""
    data, drawn = _page_data(page), dom.drawn
    assert set(drawn) == set(data) == set(CHARTS)
    for key, chart in data.items():
        rows = _sql(dsn, chart["query"], chart["params"])
        got = drawn[key]
        assert int(dom.charts[key]["data-drawn"]) == got["nonzero"], key
        if key == "flow":
            namespaces = {r["namespace"] for r in rows}
            assert [g["namespace"] for g in got["graphs"]] == sorted(namespaces)  # one graph per namespace
            for g in got["graphs"]:
                want = {
                    (r["from_action_name"] or "(no cause_by)", r["to_action_name"] or "(no cause_by)", r["edges"])
                    for r in rows
                    if r["namespace"] == g["namespace"]
                }
                assert {tuple(link) for link in g["links"]} == want, g["namespace"]
                assert g["marks"] == len(want)  # one link drawn in plotly's SVG per edge
            continue
        series, x_col, values = READING[key]
        multi_ns = len({r.get("namespace") for r in rows}) > 1
        want: dict[tuple[str, Any], Any] = {}
        for r in rows:
            x = _ms(r[x_col]) if isinstance(r[x_col], datetime) else r[x_col]
            name = str(r[series]) if series else None
            if multi_ns and series:  # one queue name in two namespaces: two queues
                name = f"{r['namespace']}/{name}"
            elif multi_ns:
                x = f"{r['namespace']}/{x}"
            for column in values:
                if r[column]:
                    want[(name or column, x)] = r[column]
        points = {(t["name"], x): y for t in got["traces"] for x, y in zip(t["x"], t["y"], strict=True)}
        assert {p: y for p, y in points.items() if y} == want, key
        if chart["kind"] == "lines":  # the other points of a line are the buckets in between, at 0
            assert got["marks"] == len(points)
            step = chart["bucket_ms"]
            for t in got["traces"]:
                assert all(b - a == pytest.approx(step) for a, b in zip(t["x"], t["x"][1:], strict=False)), key
        else:
            assert got["marks"] == len(points) == len(want), key  # a bar in plotly's SVG per non-zero value
        if want:
            assert got["x_title"] and got["y_title"], key
            assert got["y_ticks"] and all(re.fullmatch(r"\d[\d,]*", tick) for tick in got["y_ticks"]), got["y_ticks"]
    return drawn


@pytest.fixture
def team(dsn: str) -> str:
    msgs = _conversation()
    # A hostile name: it must neither break the page's script nor become markup.
    msgs[3] = msgs[3].model_copy(update={"sent_from": "</script><b>Eng</b>"})
    with pgmem.connect(dsn, namespace="acme", retrieval_log=True) as client:
        client.messages.add_many("team", msgs)
        q = client.queues
        for i in range(4):
            q.push("jobs", Message(content=f"job {i}", sent_from="Boss", send_to={"Worker"}))
        items = q.claim("jobs", 3)
        q.ack(items[:2])
        q.nack(items[2], dead=True)
        client.vectors.enable("team")
        client.vectors.flush()
        client.vectors.search("2048 game", memory="team", k=2, label="stage:plan")
    return dsn


def test_report_renders_in_headless_chromium_and_draws_what_the_sql_says(team: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run_cli("report", "--dsn", team, "--namespace", "acme", "--out", str(out))
    # The conversation's 5 messages are in a memory; the 4 jobs only in their queue.
    assert "report on 5 messages in memories (+4 only in queues) written to" in result.stdout
    page = out.read_text()
    assert "</script><b>" not in page  # the hostile name is escaped everywhere
    dom = render_in_chromium(out, tmp_path)
    drawn = assert_drawn_equals_sql(team, out, dom)
    marks = {name: int(attrs["data-drawn"]) for name, attrs in dom.charts.items()}
    assert set(marks) == set(CHARTS) and all(n > 0 for n in marks.values()), marks
    # The flow: UserRequirement -> WritePRD -> WriteDesign -> WriteCode (3 edges between 4 actions).
    assert marks["flow"] == 3 and dom.charts["flow"]["data-nodes"] == "4"
    # Queue states with items: available 1, dead 1, acked 2 (one bar each); 2 acks in one bucket.
    assert marks["queues"] == 3 and sum(y for t in drawn["throughput"]["traces"] for y in t["y"]) == 2
    assert drawn["activity"]["y_title"] == "messages stored" and "time (UTC" in drawn["activity"]["x_title"]
    assert drawn["queues"]["x_title"] == "queue" and drawn["throughput"]["y_title"] == "items acknowledged"
    assert int(dom.body["data-charts-drawn"]) == sum(marks.values())
    # The headline cards say what they count.
    assert "<b>5</b><span>messages in memories</span><small>+4 only in queues; 9 stored</small>" in page
    # The SQL behind each chart is on the page, with its parameters.
    assert page.count("SQL behind this") == len(SECTIONS) and "FROM pgmem.action_flow" in page
    assert "Summaries per memory and level" in page and "FROM pgmem.summary_compression" in page
    assert "stage:plan" in page  # the retrieval log's table
    assert "parameters: ns = &quot;acme&quot;, since = null, memory = null, bucket = " in page


class _Fetches(HTMLParser):
    """Every attribute a browser would fetch from (src, href, srcset, poster, data, action, background)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "srcset", "poster", "data", "action", "background", "formaction"):
                self.urls.append((tag, name, value or ""))


def test_report_page_fetches_nothing_from_the_network(team: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    run_cli("report", "--dsn", team, "--namespace", "acme", "--out", str(out))
    page = out.read_text()
    fetches = _Fetches()
    fetches.feed(page)  # <script> and <style> bodies are not markup: their text is not parsed for tags
    assert not [u for u in fetches.urls if re.match(r"\s*(https?:)?//", u[2], re.IGNORECASE)], fetches.urls
    assert not re.search(r"<(script|img|iframe|link|source)\b[^>]*\b(src|href)\s*=", page, re.IGNORECASE)
    style = page[page.index("<style>") : page.index("</style>")]
    assert "url(" not in style and "@import" not in style
    # The chart library is inlined, from the installed plotly package.
    from plotly.offline import get_plotlyjs

    assert get_plotlyjs() in page


def test_all_namespaces_draw_one_flow_graph_each(team: str, tmp_path: Path) -> None:
    """Every namespace's flow on its own (never mixed into one graph), and a message without cause_by is
    labelled as such (no "(none)" node)."""
    with pgmem.connect(team, namespace="other") as client:
        client.messages.add_many(
            "chat",
            [
                Message(content="hello", sent_from="Zed", cause_by=UR, created_at=T0),
                Message(content="no action", sent_from="Zed", created_at=T0 + timedelta(seconds=1)),
                Message(content="again", sent_from="Ann", cause_by=UR, created_at=T0 + timedelta(seconds=2)),
            ],
        )
        client.queues.push("jobs", Message(content="job", sent_from="Zed"))  # the same queue name as acme's
        client.queues.ack(client.queues.claim("jobs", 1))
    out = tmp_path / "all.html"
    run_cli("report", "--dsn", team, "--out", str(out))
    dom = render_in_chromium(out, tmp_path)
    drawn = assert_drawn_equals_sql(team, out, dom)
    graphs = {g["namespace"]: {tuple(link) for link in g["links"]} for g in drawn["flow"]["graphs"]}
    assert set(graphs) == {"acme", "other"}
    assert graphs["other"] == {("UserRequirement", "(no cause_by)", 1), ("(no cause_by)", "UserRequirement", 1)}
    assert not any("WritePRD" in link for link in graphs["other"])
    # Two namespaces' queues named alike stay two queues, in both queue charts.
    assert {t["name"] for t in drawn["throughput"]["traces"]} == {"acme/jobs", "other/jobs"}
    assert {x for t in drawn["queues"]["traces"] for x in t["x"]} == {"acme/jobs", "other/jobs"}
    page = out.read_text()
    assert "(none)" not in page and "namespace other &middot; memory chat" in page


def test_report_of_an_empty_database_renders_without_charts(dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "empty.html"
    run_cli("report", "--dsn", dsn, "--out", str(out))
    dom = render_in_chromium(out, tmp_path)
    assert {n: a["data-drawn"] for n, a in dom.charts.items()} == dict.fromkeys(CHARTS, "0")
    assert dom.body["data-charts-drawn"] == "0"
    assert_drawn_equals_sql(dsn, out, dom)


def test_report_without_plotly_names_the_extra(tmp_path: Path) -> None:
    """Without the plotly package (shadowed here by one that fails to import), `pgmem report` fails with a
    typed error naming the extra, before it connects (the DSN leads nowhere) or writes anything."""
    shadow = tmp_path / "shadow" / "plotly"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('plotly is not installed (test)')\n")
    out = tmp_path / "r.html"
    result = subprocess.run(
        [sys.executable, "-m", "pgmem.ops.cli", "report", "--dsn", "host=127.0.0.1 port=1", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "shadow"), "COLUMNS": "1000"},
    )
    assert result.returncode == 1, result.stderr
    assert "MissingExtra" in result.stderr and "pip install 'pgmem[report]'" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def test_stats_prints_the_main_figures_with_namespace_and_window(team: str) -> None:
    from pgmem.summarizer import CompressionPolicy, OfflineSummarizer

    with pgmem.connect(team, namespace="other") as client:
        client.messages.add("team", Message(content="elsewhere", sent_from="Zed", cause_by="Other"))
    with pgmem.connect(team, namespace="acme") as client:
        assert client.summaries.compress("team", OfflineSummarizer(), CompressionPolicy(chunk=2, fanout=2))
    out = run_cli("stats", "--dsn", team, "--namespace", "acme").stdout
    for title in (
        "messages by namespace",
        "agents",
        "action flow",
        "who talks to whom",
        "queue health",
        "logged",
        "summaries",
    ):
        assert title in out
    assert "WriteDesign" in out and "QaEngineer" in out and "Zed" not in out
    assert "5 message references in 1 memories" in out
    # The conversation happened in January 2026; the queue's messages now.
    recent = run_cli("stats", "--dsn", team, "--namespace", "acme", "--since", "1h").stdout
    assert "WriteDesign" not in recent and "Boss" in recent and "0 message references in 0 memories" in recent
    everything = run_cli("stats", "--dsn", team).stdout
    assert "Zed" in everything
    bad = run_cli("stats", "--dsn", team, "--since", "yesterday-ish", check=False)
    assert bad.returncode == 1 and "InvalidInput" in bad.stderr and "--since" in bad.stderr


def test_report_to_a_path_that_cannot_be_written_fails_first(tmp_path: Path) -> None:
    """`pgmem report -o` to a missing folder was a traceback after the queries (issue 35, item 5): now a typed
    error naming the folder, before anything connects (the DSN here leads nowhere)."""
    from pgmem.errors import InvalidInput
    from pgmem.ops.report import write_report

    missing = tmp_path / "no-such-folder" / "report.html"
    with pytest.raises(InvalidInput, match="does not exist"):
        write_report("host=127.0.0.1 port=1 connect_timeout=1", missing)
    with pytest.raises(InvalidInput, match="is a directory"):
        write_report("host=127.0.0.1 port=1 connect_timeout=1", tmp_path)
    nowhere = "host=127.0.0.1 port=1"
    result = run_cli("report", "-o", str(missing), "--dsn", nowhere, env={"COLUMNS": "1000"}, check=False)
    assert result.returncode == 1 and "InvalidInput" in result.stderr and "Traceback" not in result.stderr
    assert not missing.parent.exists()
