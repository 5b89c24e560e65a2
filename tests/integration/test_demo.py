"""`pgmem demo`: the team runs as separate processes and the report comes from SQL."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import psycopg
from rich.console import Console

from pgmem import demo


def test_demo_team_runs_and_the_flow_is_in_sql(dsn: str) -> None:
    out = io.StringIO()
    demo.run(dsn, namespace="demo", console=Console(file=out, width=200))
    text = out.getvalue()
    with psycopg.connect(dsn) as conn:
        by_action = dict(
            conn.execute(
                """SELECT regexp_replace(m.cause_by, '^.*\\.', ''), count(*)
                   FROM pgmem.memory_entries e
                   JOIN pgmem.messages m ON m.namespace = e.namespace AND m.id = e.message_id
                   WHERE e.namespace = 'demo' AND e.memory = 'team' GROUP BY 1"""
            ).fetchall()
        )
        flow = {
            (r[0], r[1]): r[2]
            for r in conn.execute(demo.queries.load("demo")["action_flow"], {"ns": "demo", "memory": "team"})
        }
        duplicates = conn.execute(
            "SELECT count(*) - count(DISTINCT message_id) FROM pgmem.memory_entries WHERE namespace = 'demo'"
            " GROUP BY memory ORDER BY 1 DESC LIMIT 1"
        ).fetchone()
        senders = {r[0] for r in conn.execute("SELECT DISTINCT sent_from FROM pgmem.messages WHERE namespace = 'demo'")}
    # The script: one PRD, one design, two files, one requested change, three reviews.
    assert by_action == {"UserRequirement": 1, "WritePRD": 1, "WriteDesign": 1, "WriteCode": 3, "WriteCodeReview": 3}
    assert flow == {
        ("UserRequirement", "WritePRD"): 1,
        ("WritePRD", "WriteDesign"): 1,
        ("WriteDesign", "WriteCode"): 2,
        ("WriteCode", "WriteCodeReview"): 3,
        ("WriteCodeReview", "WriteCode"): 1,
    }
    assert duplicates == (0,)
    assert senders == {"Human", "ProductManager", "Architect", "Engineer", "Reviewer"}
    assert "psql" in text and "action flow" in text and "did not finish" not in text
    # Each role kept its own memory of what it saw and said.
    with psycopg.connect(dsn) as conn:
        memories = {r[0] for r in conn.execute("SELECT key FROM pgmem.memories WHERE namespace = 'demo'")}
    assert memories == {"team", "role:ProductManager", "role:Architect", "role:Engineer", "role:Reviewer"}


def test_demo_twice_gives_the_same_report(dsn: str) -> None:
    for _ in range(2):
        demo.run(dsn, namespace="again", console=Console(file=io.StringIO()))
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pgmem.memory_entries WHERE namespace = 'again' AND memory = 'team'"
        ).fetchone() == (9,)


def test_cli_demo(dsn: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = subprocess.run(
        [sys.executable, "-m", "pgmem.cli", "demo", "--dsn", dsn, "--namespace", "cli"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "WriteCodeReview" in result.stdout and "finished in" in result.stdout
