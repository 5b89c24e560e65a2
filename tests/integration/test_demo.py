"""`pgmem demo`: the team runs as separate processes and the report comes from SQL."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from rich.console import Console

from pgmem.errors import redact
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
    demo.run(dsn, namespace="demo", console=Console(file=out, width=100))
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
    # Every role produced its action. The script: one PRD, one design, two files, one fix, three reviews.
    assert by_action == {
        ("UserRequirement", "Human"): 1,
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
    # Each role kept its own memory of what it saw and said.
    assert memories == {"team", "role:ProductManager", "role:Architect", "role:Engineer", "role:Reviewer"}
    assert redact(dsn) in text and "psql" in text and "action flow" in text
    # The team's history was compressed (offline summariser): 9 messages in chunks of 4, two rolled up.
    assert levels == [1, 1, 1, 2] and "summary (level 2" in text


def test_demo_twice_gives_the_same_report_and_follows_the_idea(dsn: str) -> None:
    outputs = []
    for _ in range(2):
        out = io.StringIO()
        demo.run(dsn, namespace="again", console=Console(file=out, width=100), idea="a todo list for teams")
        outputs.append(out.getvalue())
    with psycopg.connect(dsn) as conn:
        assert sum(r[2] for r in conn.execute(TEAM_ROWS, ("again",))) == 9
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
