"""`pgmem demo`: the team runs as separate processes and the report comes from SQL."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from rich.console import Console

from pgmem.errors import InvalidInput, redact
from pgmem.examples import demo
from pgmem.planning import statements as queries

TEAM_ROWS = """SELECT regexp_replace(m.cause_by, '^.*\\.', ''), m.sent_from, count(*)
               FROM pgmem.memory_entries e
               JOIN pgmem.messages m ON m.namespace = e.namespace AND m.id = e.message_id
               WHERE e.namespace = %s AND e.memory = 'team' GROUP BY 1, 2"""


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # no test calls the network


def test_demo_team_runs_and_the_flow_is_in_sql(dsn: str) -> None:
    out = io.StringIO()
    demo.run(dsn, namespace="demo", console=Console(file=out, width=140))
    text = out.getvalue()
    with psycopg.connect(dsn) as conn:
        by_action = {(r[0], r[1]): r[2] for r in conn.execute(TEAM_ROWS, ("demo",))}
        flow_rows = conn.execute(queries.load("demo")["action_flow"], {"ns": "demo", "memory": "team"})
        flow = {(r[0], r[1]): r[2] for r in flow_rows}
        duplicates = conn.execute(
            "SELECT count(*) FROM (SELECT memory, message_id FROM pgmem.memory_entries WHERE namespace = 'demo'"
            " GROUP BY 1, 2 HAVING count(*) > 1) d"
        ).fetchone()
        same_content = conn.execute(
            "SELECT count(*) - count(DISTINCT (content, cause_by, sent_from)) FROM pgmem.messages"
            " WHERE namespace = 'demo'"
        ).fetchone()
        memories = {r[0] for r in conn.execute("SELECT key FROM pgmem.memories WHERE namespace = 'demo'")}
        levels = [r[0] for r in conn.execute("SELECT level FROM pgmem.summaries WHERE namespace = 'demo' ORDER BY 1")]
        queues = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT queue, acked, retries, dead, depth FROM pgmem.queue_health WHERE namespace = 'demo'"
            )
        }
        dead = conn.execute(
            "SELECT m.sent_from, m.content, q.last_error FROM pgmem.queue_items q JOIN pgmem.messages m"
            " ON m.namespace = q.namespace AND m.id = q.message_id WHERE q.namespace = 'demo' AND q.status = 'dead'"
        ).fetchall()
        recalls = {
            r[0]: (r[1], r[2])
            for r in conn.execute(
                "SELECT label, count(*), sum(cardinality(message_ids)) FROM pgmem.retrieval_log"
                " WHERE namespace = 'demo' GROUP BY 1"
            )
        }
        code = conn.execute(
            "SELECT m.metadata FROM pgmem.memory_entries e JOIN pgmem.messages m"
            " ON m.namespace = e.namespace AND m.id = e.message_id WHERE e.namespace = 'demo' AND e.memory = 'team'"
            " AND m.cause_by = 'pgmem.examples.demo.WriteCode' ORDER BY e.seq"
        ).fetchall()
        recalled_design = conn.execute(
            "SELECT count(*) FROM pgmem.messages"
            " WHERE namespace = 'demo' AND cause_by = 'pgmem.examples.demo.WriteDesign'"
            " AND id = ANY(SELECT jsonb_array_elements_text(metadata -> 'recalled') FROM pgmem.messages"
            " WHERE namespace = 'demo' AND cause_by = 'pgmem.examples.demo.WriteCode')"
        ).fetchone()
    # Every role produced its action. The script: one PRD, one design, two files, one fix, three reviews;
    # and the human's second message, to the engineer directly, which it refused.
    assert by_action == {
        ("UserRequirement", "Human"): 2,
        ("WritePRD", "ProductManager"): 1,
        ("WriteDesign", "Architect"): 1,
        ("WriteCode", "Engineer"): 3,
        ("WriteCodeReview", "Reviewer"): 3,
    }
    assert flow == {
        ("UserRequirement", "WritePRD"): 1,
        ("WritePRD", "WriteDesign"): 1,
        ("WriteDesign", "WriteCode"): 2,
        ("WriteCode", "WriteCodeReview"): 3,
        ("WriteCodeReview", "WriteCode"): 1,
    }
    assert duplicates == (0,) and same_content == (0,)  # no message twice, in any memory or in the table
    # Each role kept its own memory of what it saw and said, and a long-term one of what it watches.
    roles = ("ProductManager", "Architect", "Engineer", "Reviewer")
    assert memories == {"team"} | {f"role:{r}" for r in roles} | {f"ltm:{r}" for r in roles}
    # Every message went through the routing: each role's inbox (acked, retries, dead, waiting), and the
    # engineer's MessageQueue of coding tasks. The architect's first attempt timed out and was retried; the
    # engineer dead-lettered the requirement sent to it directly.
    assert queues == {
        "inbox:ProductManager": (1, 0, 0, 0),
        "inbox:Architect": (1, 1, 0, 0),
        "inbox:Engineer": (4, 0, 1, 0),
        "inbox:Reviewer": (3, 0, 0, 0),
        "todo:Engineer": (3, 0, 0, 0),
    }
    assert len(dead) == 1 and dead[0][0] == "Human" and "ask the ProductManager" in dead[0][2]
    # Before answering, each role searched its long-term memory (logged, labelled role:action); the engineer
    # recalled the design when writing code, and the reviewer the earlier versions.
    assert {label: n for label, (n, _) in recalls.items()} == {
        "ProductManager:WritePRD": 1,
        "Architect:WriteDesign": 1,
        "Engineer:WriteCode": 3,
        "Reviewer:WriteCodeReview": 3,
    }
    assert recalls["Engineer:WriteCode"][1] > 0 and recalls["Reviewer:WriteCodeReview"][1] > 0
    assert recalled_design == (1,) and all("recalled" in m for (m,) in code)
    assert redact(dsn) in text and "psql" in text and "action flow" in text
    assert "dead letters" in text and "long-term recall" in text and "inbox:Engineer" in text
    # The team's history was compressed (offline summariser): 10 messages in chunks of 4, two rolled up.
    assert levels == [1, 1, 1, 2] and "summary (level 2" in text


#: Every panel of the report: charts (drawn by the page's script) and tables.
CHARTS = ("activity", "flow", "queues", "throughput", "tokens")
TABLES = ("agents", "talk", "retrievals", "summaries")


def test_demo_report_has_data_in_every_panel(dsn: str, tmp_path: Path, record_property: Any) -> None:
    from pgmem.ops.analytics import Scope
    from pgmem.ops.report import collect
    from tests.integration.test_report import assert_drawn_equals_sql, render_in_chromium

    started = time.monotonic()
    out = io.StringIO()
    demo.run(dsn, namespace="demo", console=Console(file=out, width=200), report=tmp_path / "r.html")
    wall = time.monotonic() - started
    # Reported, not asserted (timing belongs in benchmarks/): the bound is a minute with no API key.
    record_property("demo_wall_seconds", round(wall, 2))
    print(f"pgmem demo: {wall:.1f} s wall time, report included")
    with psycopg.connect(dsn) as conn:
        data = collect(conn, Scope("demo"))
    sections = data["sections"]
    assert {k for k, s in sections.items() if s["kind"] != "rows"} == set(CHARTS)
    assert {k for k, s in sections.items() if s["kind"] == "rows"} >= set(TABLES)
    empty_tables = [name for name in TABLES if not sections[name]["rows"]]
    assert not empty_tables, f"report tables with nothing in them: {empty_tables}"
    marks = render_in_chromium(tmp_path / "r.html", tmp_path)
    drawn = {name: int(attrs["data-drawn"]) for name, attrs in marks.charts.items()}
    assert set(drawn) == set(CHARTS)
    undrawn = [name for name, n in drawn.items() if n == 0]
    assert not undrawn, f"report charts with nothing to draw: {undrawn}"
    assert_drawn_equals_sql(dsn, tmp_path / "r.html", marks)
    page = (tmp_path / "r.html").read_text()
    # The queue chart: acked bars for the four inboxes and the to-do queue, and the dead letter's bar. The
    # flow graph: the five edges of the work, and the human's two requirements in a row.
    assert drawn["queues"] == 6 and drawn["flow"] == 6
    retrieval_labels = {r["label"] for r in sections["retrievals"]["rows"]}
    assert {"Engineer:WriteCode", "Reviewer:WriteCodeReview"} <= retrieval_labels
    assert {r["memory"] for r in sections["summaries"]["rows"]} == {"team"}
    # The console and the report count alike (issue 35: 10/5 in the run, 13/6 in the report): the team's 10
    # messages in memories and their 5 actions; the engineer's 3 to-do items are messages only in a queue.
    totals = data["totals"]
    assert (totals["in_memories"], totals["queue_only"], totals["actions"], totals["messages"]) == (10, 3, 5, 13)
    text = " ".join(out.getvalue().split())
    assert "10 messages in memories (+3 only in queues: the engineer's to-do items), 5 actions in memories" in text
    assert "<b>10</b><span>messages in memories</span><small>+3 only in queues; 13 stored</small>" in page
    assert "<b>5</b><span>actions in memories</span>" in page


def test_demo_says_what_it_does_from_the_start(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The other tests fork the roles (Linux, one thread); this one starts them as macOS does, and as a
    # process with threads of its own does: from a fork server.
    monkeypatch.setattr(demo, "_start_method", lambda: "forkserver")
    # A terminal (so the spinner between the lines is drawn too), without colours: the lines stay whole.
    out = io.StringIO()
    console = Console(file=out, width=140, force_terminal=True, color_system=None)
    demo.run(dsn, namespace="progress", console=console, report=tmp_path / "r.html")
    text = out.getvalue()
    # The first line comes before any process starts; then the roles start, each says it is ready (in the
    # order they are), the messages, the summaries, the tables, and last where the report is.
    steps = [
        "pgmem demo: 4 agent processes",
        "starting 4 role processes (forkserver)",
        "team ready in",
        "Human -> <all>",
        "summary (level 2",
        "messages by role and action",
        "finished in",
        "charts of this run",
        (tmp_path / "r.html").resolve().as_uri(),
    ]
    positions = [text.find(step) for step in steps]
    assert -1 not in positions, [step for step, at in zip(steps, positions, strict=True) if at == -1]
    assert positions == sorted(positions)
    for role in ("ProductManager", "Architect", "Engineer", "Reviewer"):
        ready = text.find(f"{role} ready (")
        assert positions[1] < ready < positions[2], role


@pytest.mark.parametrize("where", ["missing folder", "a directory", "a file as folder", "unwritable folder"])
def test_demo_report_path_is_checked_before_anything_starts(dsn: str, tmp_path: Path, where: str) -> None:
    (tmp_path / "file.txt").write_text("not a folder")
    locked = tmp_path / "locked"
    locked.mkdir()
    report = {
        "missing folder": tmp_path / "no-such-folder" / "r.html",
        "a directory": tmp_path,
        "a file as folder": tmp_path / "file.txt" / "r.html",
        "unwritable folder": locked / "r.html",
    }[where]
    if where == "unwritable folder":
        if os.geteuid() == 0:
            pytest.skip("root writes into a folder whatever its mode")
        locked.chmod(0o500)
    out = io.StringIO()
    try:
        with pytest.raises(InvalidInput) as caught:
            demo.run(dsn, namespace="badpath", console=Console(file=out, width=140), report=report)
    finally:
        locked.chmod(0o700)
    assert str(report) in str(caught.value)
    assert out.getvalue() == ""  # failed before its first line: no process started, nothing printed
    assert not (tmp_path / "no-such-folder").exists()  # a missing folder is the user's to create
    with psycopg.connect(dsn) as conn:
        written = conn.execute(
            "SELECT (SELECT count(*) FROM pgmem.messages WHERE namespace = 'badpath')"
            " + (SELECT count(*) FROM pgmem.queue_items WHERE namespace = 'badpath')"
            " + (SELECT count(*) FROM pgmem.memories WHERE namespace = 'badpath')"
        ).fetchone()
    assert written == (0,)


def test_cli_demo_bad_report_path_fails_before_the_server_starts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "PGMEM_DSN")}
    env["PGMEM_HOME"] = str(tmp_path / "home")  # the embedded server would start here
    report = tmp_path / "missing" / "r.html"
    result = subprocess.run(
        [sys.executable, "-m", "pgmem.ops.cli", "demo", "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 1
    assert "InvalidInput" in result.stderr and "does not exist" in result.stderr
    assert str(report.parent) in "".join(result.stderr.split())  # rich wraps the line, inside the path too
    assert result.stdout == "" and not (tmp_path / "home").exists()


@pytest.mark.slow  # two whole demos (3 s); test_cli_demo runs one in the default run
def test_demo_twice_gives_the_same_report_and_follows_the_idea(dsn: str) -> None:
    outputs = []
    for _ in range(2):
        out = io.StringIO()
        demo.run(dsn, namespace="again", console=Console(file=out, width=100), idea="a todo list for teams")
        outputs.append(out.getvalue())
    with psycopg.connect(dsn) as conn:
        assert sum(r[2] for r in conn.execute(TEAM_ROWS, ("again",))) == 10
        prd = conn.execute(
            "SELECT content FROM pgmem.messages WHERE namespace = 'again' AND cause_by = 'pgmem.examples.demo.WritePRD'"
        ).fetchone()
    assert prd is not None and "a todo list for teams" in prd[0]
    # The tables are the same both times (the timings are not).
    tables = [o[o.index("messages by role") : o.index("action flow")] for o in outputs]
    assert tables[0] == tables[1]


def test_cli_demo(dsn: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = subprocess.run(
        [sys.executable, "-m", "pgmem.ops.cli", "demo", "--dsn", dsn, "--namespace", "cli", "--idea", "a chess clock"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "WriteCodeReview" in result.stdout and "finished in" in result.stdout
    assert "a chess clock" in result.stdout
    # It ends by pointing to the report it wrote (default: pgmem-demo-report.html in the working directory).
    report = tmp_path / "pgmem-demo-report.html"
    assert report.exists() and "data-chart=" in report.read_text()
    assert result.stdout.rstrip().splitlines()[-1].strip() == report.resolve().as_uri()


def test_demo_without_plotly_runs_and_says_how_to_get_the_report(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's charts need plotly (`pgmem[report]`); without it the team still runs, and the run ends by
    naming the extra instead of the report's path."""
    from pgmem.errors import MissingExtra
    from pgmem.ops import report

    def missing() -> str:
        raise MissingExtra(
            "pgmem report draws its charts with plotly, which is not installed: pip install 'pgmem[report]'"
        )

    monkeypatch.setattr(report, "chart_library", missing)
    out = io.StringIO()
    demo.run(dsn, namespace="noplotly", console=Console(file=out, width=200), report=tmp_path / "r.html")
    text = out.getvalue()
    assert "finished in" in text and "no HTML report" in text and "pip install 'pgmem[report]'" in text
    assert not (tmp_path / "r.html").exists()
