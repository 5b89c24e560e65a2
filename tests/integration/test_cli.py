"""The `pgmem` command line, run as a user would (subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

import pgmem
from tests.conftest import table_counts


def run_cli(*args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    if env is not None and "PGMEM_DSN" not in env:
        full_env.pop("PGMEM_DSN", None)  # let the embedded server under PGMEM_HOME answer
    result = subprocess.run(
        [sys.executable, "-m", "pgmem.ops.cli", *args], capture_output=True, text=True, env=full_env, timeout=120
    )
    if check and result.returncode != 0:
        raise AssertionError(f"pgmem {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


@pytest.mark.slow
def test_server_start_status_stop(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    env = {"PGMEM_HOME": home}
    try:
        started = run_cli("server", "start", env=env)
        dsn = started.stdout.strip().splitlines()[-1]
        assert dsn.startswith("postgresql://") and "pgmem" in dsn
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        # A second start reuses the running server (same DSN), as a later process would.
        assert run_cli("server", "start", env=env).stdout.strip().splitlines()[-1] == dsn
        status = run_cli("server", "status", env=env)
        assert "running" in status.stdout and dsn in status.stdout
        # With no DSN configured, connect() uses that same embedded server.
        os.environ.pop("PGMEM_DSN", None)
        probe = subprocess.run(
            [sys.executable, "-c", "import pgmem; c = pgmem.connect(namespace='cli'); print(c.conninfo); c.close()"],
            capture_output=True,
            text=True,
            env={**os.environ, "PGMEM_HOME": home},
            timeout=120,
        )
        assert probe.returncode == 0, probe.stderr
        # ... logged in as its agent role, not its superuser (row-level security holds the agent)
        assert "pgmem_agent" in probe.stdout and "postgres:" not in probe.stdout
    finally:
        stopped = run_cli("server", "stop", env=env, check=False)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    after = run_cli("server", "status", env=env, check=False)
    assert after.returncode == 3 and "not running" in after.stdout


def test_stats_counts_by_namespace_memory_role_action(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="alpha") as client:
        client.messages.add_many(
            "role:PM", [pgmem.Message(content=f"prd {i}", role="pm", cause_by="WritePRD") for i in range(3)]
        )
        client.with_namespace("beta").messages.add("role:QA", pgmem.Message(content="t", role="qa", cause_by="Test"))
    out = run_cli("stats", "--dsn", dsn).stdout
    assert "alpha" in out and "role:PM" in out and "WritePRD" in out and "beta" in out
    assert "4 message references in 2 memories" in out
    only = run_cli("stats", "--dsn", dsn, "--namespace", "beta").stdout
    assert "alpha" not in only and "1 message references in 1 memories" in only


def test_unreachable_dsn_is_a_clear_error_without_password() -> None:
    result = run_cli("stats", "--dsn", "postgresql://bob:hunter2secret@127.0.0.1:1/nothing", check=False)
    assert result.returncode == 1
    assert "ConnectionFailed" in result.stderr and "127.0.0.1" in result.stderr
    assert "hunter2secret" not in result.stderr + result.stdout


def _purgeable(dsn: str) -> None:
    """Two namespaces, each with an archived queue batch of 3 and 3 vector log rows, all two hours old."""
    with pgmem.connect(dsn, namespace="alpha") as client:
        for ns in ("alpha", "beta"):
            scoped = client.with_namespace(ns)
            q = scoped.queues
            q.push_many("jobs", [pgmem.Message(content=f"{ns} job {i}") for i in range(3)])
            q.ack(q.claim("jobs", 3))
            scoped.vectors.enable("m")
            scoped.messages.add_many("m", [pgmem.Message(content=f"{ns} note {i}") for i in range(3)])
            scoped.vectors.flush()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgmem.queue_archive_batches SET acked_at = acked_at - interval '2 hours'")
        conn.execute("UPDATE pgmem.vector_log SET logged_at = logged_at - interval '2 hours'")


def _rows_of(dsn: str, table: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        query = f"SELECT namespace, count(*) FROM pgmem.{table} GROUP BY 1"
        return {ns: n for ns, n in conn.execute(query).fetchall()}


def test_purge_runs_the_purges_with_explicit_cutoffs_namespace_by_namespace(dsn: str) -> None:
    _purgeable(dsn)
    out = run_cli(
        "purge", "--dsn", dsn, "-n", "alpha", "--queue-archive", "1h", "--vector-log", "90m", "--brains"
    ).stdout
    assert "purged in 1 namespace: queue items 3, expired brains 0, vector log rows 2" in out
    assert _rows_of(dsn, "queue_archive_batches") == {"beta": 1}
    assert _rows_of(dsn, "vector_log") == {"alpha": 1, "beta": 3}  # each memory keeps its newest revision
    # No namespace: every one holding something to purge; a cutoff may be a moment.
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    out = run_cli("purge", "--dsn", dsn, "--queue-archive", later).stdout
    assert "purged in 2 namespaces: queue items 3" in out
    assert _rows_of(dsn, "queue_archive_batches") == {}


@pytest.mark.parametrize(
    "args",
    [
        ("-n", "alpha", "--vector-log", "yesterday"),
        ("-n", "alpha", "-n", "not a namespace", "--vector-log", "1h"),
        ("-n", "alpha", "--queue", "jobs"),
        ("-n", "alpha", "--queue", "no spaces", "--queue-archive", "1h"),
        (
            "-n",
            "alpha",
        ),
    ],
    ids=["bad age", "bad namespace", "queue without archive", "bad queue", "nothing to purge"],
)
def test_purge_rejects_bad_input_before_deleting_anything(dsn: str, args: tuple[str, ...]) -> None:
    _purgeable(dsn)
    before = table_counts(dsn)
    result = run_cli("purge", "--dsn", dsn, *args, check=False)
    assert result.returncode == 1 and "InvalidInput" in result.stderr, result.stderr
    assert table_counts(dsn) == before


# -- stats --format / --watch / an empty namespace (issue 35) -----------------------------------------------------


def _two_namespaces(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="alpha") as client:
        client.messages.add_many(
            "role:PM", [pgmem.Message(content=f"prd {i}", role="pm", cause_by="WritePRD") for i in range(3)]
        )
        client.with_namespace("beta").messages.add("role:QA", pgmem.Message(content="t", role="qa", cause_by="Test"))


def test_stats_as_json_and_csv_carry_the_tables_figures(dsn: str) -> None:
    import csv
    import io
    import json

    _two_namespaces(dsn)
    found = json.loads(run_cli("stats", "--dsn", dsn, "--format", "json").stdout)
    assert found["totals"] == {"message_references": 4, "memories": 2}
    rows = {(r["namespace"], r["memory"], r["role"]): r["messages"] for r in found["messages_by_memory"]}
    assert rows == {("alpha", "role:PM", "pm"): 3, ("beta", "role:QA", "qa"): 1}
    assert {"agents", "flow", "talk", "queues", "retrievals", "summaries"} <= found.keys()
    table = list(csv.DictReader(io.StringIO(run_cli("stats", "--dsn", dsn, "--format", "csv").stdout)))
    memory_rows = [r for r in table if r["section"] == "messages_by_memory"]
    assert {(r["namespace"], r["memory"], r["messages"]) for r in memory_rows} == {
        ("alpha", "role:PM", "3"),
        ("beta", "role:QA", "1"),
    }
    bad = run_cli("stats", "--dsn", dsn, "--format", "xml", check=False)
    assert bad.returncode == 1 and "InvalidInput" in bad.stderr


def test_stats_of_a_namespace_with_no_rows_warns_and_exits_0(dsn: str) -> None:
    _two_namespaces(dsn)
    result = run_cli("stats", "--dsn", dsn, "-n", "alpah")
    assert "namespace 'alpah' has no rows" in result.stderr and "PGMEM_NAMESPACE" in result.stderr
    assert "has no rows" not in run_cli("stats", "--dsn", dsn, "-n", "alpha").stderr


def test_stats_watch_prints_again_until_ctrl_c(dsn: str) -> None:
    import signal
    import time

    _two_namespaces(dsn)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgmem.ops.cli", "stats", "--dsn", dsn, "--watch", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    seen = 0
    deadline = time.monotonic() + 120  # generous: only progress is measured
    try:
        while seen < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen += "message references in" in line
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert seen >= 2, err
    assert proc.returncode == 0, err


# -- migrate --sql (issue 35) ---------------------------------------------------------------------------------------


def _revision(dsn: str) -> str | None:
    with psycopg.connect(dsn) as conn:
        if not conn.execute("SELECT to_regclass('pgmem.alembic_version') IS NOT NULL").fetchone()[0]:  # type: ignore[index]
            return None
        return conn.execute("SELECT version_num FROM pgmem.alembic_version").fetchone()[0]  # type: ignore[index]


def test_migrate_sql_prints_the_script_of_an_empty_database_and_runs_nothing(empty_dsn: str) -> None:
    from pgmem.ops import migrate
    from pgmem.revision import SCHEMA_REVISION

    script = run_cli("migrate", "--sql", "--dsn", empty_dsn).stdout
    assert "CREATE TABLE pgmem.messages" in script and "Running upgrade  -> 0001" in script
    assert f"version_num='{SCHEMA_REVISION}'" in script
    assert _revision(empty_dsn) is None  # nothing ran
    # The script is what the migrations do: run by hand (as a DBA would), it leaves the schema its revision
    # declares, the decisions the migrations take online (0005, 0007) made by the server.
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(script.encode())
    assert _revision(empty_dsn) == SCHEMA_REVISION
    assert not migrate.verify(empty_dsn).drift


def test_migrate_sql_from_a_revision_prints_only_the_steps_above_it(dsn: str) -> None:
    from pgmem.revision import SCHEMA_REVISION

    script = run_cli("migrate", "--sql", "--from", "0017", "--dsn", dsn).stdout
    assert "Running upgrade 0017 -> 0018" in script and "-> 0017" not in script
    assert "CREATE TABLE pgmem.messages" not in script
    assert _revision(dsn) == SCHEMA_REVISION
    assert "nothing to run" in run_cli("migrate", "--sql", "--dsn", dsn).stdout  # the database's own revision
    bad = run_cli("migrate", "--sql", "--from", "17x", "--dsn", dsn, check=False)
    assert bad.returncode == 1 and "InvalidInput" in bad.stderr
