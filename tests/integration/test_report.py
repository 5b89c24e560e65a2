"""`pgmem report` renders in headless Chromium with charts drawn; `pgmem stats` prints the main figures."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import pgmem
from pgmem import Message
from tests.integration.test_analytics_views import _conversation
from tests.integration.test_cli import run_cli

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


class _Marks(HTMLParser):
    """The verification marks the page's script writes: data-drawn per chart, and on <body>."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, dict[str, str]] = {}
        self.body: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "svg" and "data-chart" in values:
            self.charts[values["data-chart"]] = values
        elif tag == "body":
            self.body = values


def render_in_chromium(page: Path, tmp_path: Path) -> _Marks:
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
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    marks = _Marks()
    marks.feed(result.stdout)
    assert "data-chart-error" not in marks.body, marks.body.get("data-chart-error")
    return marks


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


def test_report_renders_in_headless_chromium_with_charts_drawn(team: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run_cli("report", "--dsn", team, "--namespace", "acme", "--out", str(out))
    assert "report on 9 messages written to" in result.stdout
    page = out.read_text()
    # Self-contained: no external script, style, image or font.
    assert "<script src" not in page and "<link" not in page and "url(http" not in page
    assert "</script><b>" not in page  # the hostile name is escaped everywhere
    marks = render_in_chromium(out, tmp_path)
    drawn = {name: int(attrs["data-drawn"]) for name, attrs in marks.charts.items()}
    assert set(drawn) == {"activity", "flow", "queues", "throughput", "tokens"}
    assert all(n > 0 for n in drawn.values()), drawn
    # The flow: UserRequirement -> WritePRD -> WriteDesign -> WriteCode (3 edges between 4 actions).
    assert drawn["flow"] == 3 and marks.charts["flow"]["data-nodes"] == "4"
    # Queue states with items: available 1, dead 1, acked 2 (one bar each).
    assert drawn["queues"] == 3 and drawn["throughput"] == 1
    assert int(marks.body["data-charts-drawn"]) == sum(drawn.values())
    # The SQL behind each chart is on the page, with its parameters.
    assert page.count("SQL behind this") == 9 and "FROM pgmem.action_flow" in page
    assert "Summaries per memory and level" in page and "FROM pgmem.summary_compression" in page
    assert "stage:plan" in page  # the retrieval log's table


def test_report_of_an_empty_database_renders_without_charts(dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "empty.html"
    run_cli("report", "--dsn", dsn, "--out", str(out))
    marks = render_in_chromium(out, tmp_path)
    assert {n: a["data-drawn"] for n, a in marks.charts.items()} == dict.fromkeys(
        ("activity", "flow", "queues", "throughput", "tokens"), "0"
    )
    assert marks.body["data-charts-drawn"] == "0"


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
