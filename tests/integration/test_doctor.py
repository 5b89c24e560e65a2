"""``pgmem doctor`` and ``pgmem --version``: each check against a real server, OK or what to do."""

from __future__ import annotations

import psycopg
import pytest

from pgmem import __version__, doorbell
from pgmem.ops.doctor import Check, run_checks
from pgmem.ops.drift import CATEGORIES
from pgmem.revision import SCHEMA_REVISION
from tests.conftest import needs_own_database
from tests.integration.test_cli import run_cli


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {check.name: check for check in checks}


def test_a_migrated_database_passes(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGMEM_EMBEDDER", raising=False)
    checks = _by_name(run_checks(dsn))
    assert [c for c in checks.values() if c.status == "fail"] == []
    assert checks["schema"].found == f"revision {SCHEMA_REVISION}, as this pgmem needs"
    assert checks["pgvector"].status == "ok" and "installed" in checks["pgvector"].found
    assert checks["app role"].status == "ok"
    assert [(c, checks[c].status) for c in CATEGORIES] == [(c, "ok") for c in CATEGORIES]  # one line each
    assert checks["embedder"].status == "ok" and "384 dimensions" in checks["embedder"].found
    assert {"server", "connections", "autovacuum", "embeddings", "doorbell"} <= set(checks)


def test_the_doorbell_check_sees_who_rings_and_what_waits(dsn: str) -> None:
    import pgmem

    with pgmem.connect(dsn, namespace="doc", max_size=1) as client:
        client.queues.push("jobs", pgmem.Message(content="nobody listens yet"))
    found = _by_name(run_checks(dsn, embedder=False))["doorbell"].found
    assert found == "nobody rings it (no process listens); 1 rings waiting for the first listener"
    bell = doorbell.acquire(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:  # until it has drained the ring
            for _ in range(600):
                if conn.execute("SELECT count(*) FROM pgmem.doorbell").fetchone() == (0,) and bell.leading:
                    break
                conn.execute("SELECT pg_sleep(0.05)")
        assert _by_name(run_checks(dsn, embedder=False))["doorbell"].found == "a process rings it; 0 rings waiting"
    finally:
        doorbell.release(bell)


def test_an_unmigrated_database_fails_with_what_to_run(empty_dsn: str) -> None:
    result = run_cli("doctor", "--dsn", empty_dsn, "--no-embedder", check=False)
    assert result.returncode == 1, result.stdout
    assert "FAIL schema: not migrated" in result.stdout
    assert "run `pgmem migrate`" in result.stdout


def test_a_server_that_does_not_answer_fails_the_connection_line() -> None:
    secret = "s3cret-doctor-pw"
    checks = run_checks(f"postgresql://u:{secret}@127.0.0.1:1/db", embedder=False)
    assert [(c.name, c.status) for c in checks] == [("connection", "fail")]
    assert secret not in repr(checks)


def test_an_embedder_that_cannot_answer_fails_with_advice(dsn: str) -> None:
    result = run_cli("doctor", "--dsn", dsn, env={"PGMEM_EMBEDDER": "no-such-provider", "PGMEM_DSN": dsn}, check=False)
    assert result.returncode == 1
    assert "FAIL embedder: InvalidInput: PGMEM_EMBEDDER='no-such-provider'" in result.stdout
    assert "check PGMEM_EMBEDDER" in result.stdout


def test_version() -> None:
    result = run_cli("--version")
    assert result.stdout.strip() == f"pgmem {__version__} (schema revision {SCHEMA_REVISION})"


def test_a_schema_that_drifted_from_its_revision_is_named(dsn: str, single_database: bool) -> None:
    """A stamp can lie (a database stamped while a migration was a placeholder): the live catalog is
    checked against what the revision declares, one line per category (tests/migrations/test_drift.py
    takes the schema apart further and repairs it)."""
    needs_own_database(single_database)  # it takes the schema apart
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgmem.memories NO FORCE ROW LEVEL SECURITY")
        conn.execute("DROP POLICY pgmem_admin ON pgmem.summaries")
        conn.execute("REVOKE DELETE ON pgmem.items FROM pgmem_app")
        conn.execute("GRANT DELETE ON pgmem.doorbell TO pgmem_app")
        conn.execute("ALTER VIEW pgmem.queue_archive SET (security_invoker = false)")
    checks = _by_name(run_checks(dsn, embedder=False))
    found = {name: (c.status, c.found) for name, c in checks.items() if name in CATEGORIES and c.status != "ok"}
    assert found == {
        "row-level security": (
            "fail",
            "1 difference(s) from the revision's schema: pgmem.memories: row-level security not forced",
        ),
        "policies": ("fail", "1 difference(s) from the revision's schema: pgmem.summaries: policy pgmem_admin missing"),
        "grants": (
            "fail",
            "2 difference(s) from the revision's schema: pgmem.doorbell: pgmem_app may also DELETE (declared: INSERT, "
            "SELECT); pgmem.items: pgmem_app lacks DELETE",
        ),
        "views": (
            "fail",
            "1 difference(s) from the revision's schema: pgmem.queue_archive: not security_invoker: it reads the "
            "tables with its owner's rights, not the caller's",
        ),
    }
    assert all("run `pgmem migrate --repair`" in checks[name].advice for name in found)
