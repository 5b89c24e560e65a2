"""The `pgmem` command line, run as a user would (subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import pgmem


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
        assert probe.stdout.strip() == dsn
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
