"""Connecting: one connection and one query to check the schema, alembic only when there is something to
migrate, the caller's connection left usable, and the DSN found as documented.

Connections are counted on the server: a login event trigger (PostgreSQL 17+, superuser) records every
backend that logs in to the test's database.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.pq import TransactionStatus

import pgmem
from pgmem import connecting
from pgmem.revision import SCHEMA_REVISION

_COUNT_LOGINS = """
CREATE TABLE public.logins (pid int NOT NULL);
CREATE FUNCTION public.count_login() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.logins VALUES (pg_backend_pid());
END $$;
CREATE EVENT TRIGGER count_logins ON login EXECUTE FUNCTION public.count_login();
"""


@pytest.fixture
def logins(dsn: str) -> Iterator[psycopg.Connection[tuple[int, ...]]]:
    """An observer connection on a database that records the backend pid of every later login."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version_num')::int, rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert row is not None
        if row[0] < 170000 or not row[1]:
            pytest.skip("login event triggers need PostgreSQL 17+ and a superuser")
        conn.execute(_COUNT_LOGINS)
        yield conn


def _logins(conn: psycopg.Connection[tuple[int, ...]]) -> list[int]:
    return [r[0] for r in conn.execute("SELECT pid FROM public.logins")]


def _backends(conn: psycopg.Connection[tuple[int, ...]], expected: int) -> int:
    """Client backends connected to this database besides the observer, once there are ``expected`` of
    them or after 120 s (a closed connection's backend exits a moment after the client hangs up; a busy
    machine can take long)."""
    deadline = time.monotonic() + 120
    while True:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = "
            "'client backend' AND pid <> pg_backend_pid()"
        ).fetchone()
        assert row is not None
        if int(row[0]) == expected or time.monotonic() > deadline:
            return int(row[0])
        time.sleep(0.02)


def test_connect_opens_one_connection_and_the_pool_keeps_it(
    dsn: str, logins: psycopg.Connection[tuple[int, ...]]
) -> None:
    with pgmem.connect(dsn, namespace="test", max_size=4) as client:
        client.messages.add("m", pgmem.Message(content="hello"))
        with client.connection() as conn:
            pool_pid = conn.info.backend_pid
        # The schema was checked on the connection the pool then took: one login in all.
        assert _logins(logins) == [pool_pid]
        assert client.messages.count("m") == 1


async def test_aconnect_opens_one_connection(dsn: str, logins: psycopg.Connection[tuple[int, ...]]) -> None:
    async with await pgmem.aconnect(dsn, namespace="test", max_size=4) as client:
        async with client.connection() as conn:
            pool_pid = conn.info.backend_pid
        assert _logins(logins) == [pool_pid]
        assert await client.messages.count("m") == 0


def test_a_pool_of_min_size_0_closes_the_checked_connection(
    dsn: str, logins: psycopg.Connection[tuple[int, ...]]
) -> None:
    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=2) as client:
        assert _backends(logins, 0) == 0  # checked, then closed: the pool opens its first one when asked
        assert client.messages.count("m") == 0
        assert len(_logins(logins)) == 2


def test_an_out_of_date_schema_raises_and_leaves_no_connection(
    dsn: str, logins: psycopg.Connection[tuple[int, ...]]
) -> None:
    logins.execute("UPDATE pgmem.alembic_version SET version_num = '0000_older'")
    with pytest.raises(pgmem.SchemaOutOfDate) as info:
        pgmem.connect(dsn, namespace="test", migrate=False)
    assert "0000_older" in str(info.value) and SCHEMA_REVISION in str(info.value)
    assert _backends(logins, 0) == 0
    assert len(_logins(logins)) == 1


def test_connecting_to_a_current_schema_loads_no_migration_code(dsn: str) -> None:
    code = (
        "import sys, pgmem\n"
        "with pgmem.connect(namespace='test') as client:\n"
        "    client.messages.add('m', pgmem.Message(content='hi'))\n"
        "loaded = [m for m in ('alembic', 'sqlalchemy', 'mako', 'pgmem.ops.migrate', 'pgmem.ops.server')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PGMEM_DSN": dsn},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_a_process_that_reads_messages_loads_no_numpy_nor_the_vector_wing(dsn: str) -> None:
    """An agent process's cold start (benchmarks/startup.py): connect and read the last messages. numpy,
    the search code and the repositories other than messages are loaded on first use; pgvector's types
    are registered on the pool's connections from the schema check's answer, with no query of their own."""
    code = (
        "import sys, pgmem\n"
        "with pgmem.connect(namespace='test') as client:\n"
        "    assert client.messages.last('m', 1) == []\n"
        "    with client.connection() as conn:\n"
        "        assert conn.adapters.types['vector'].name == 'vector'\n"
        "heavy = ('numpy', 'pgmem.planning.search', 'pgmem._sync.vectors', 'pgmem._sync.searcher',\n"
        "         'pgmem._sync.queues', 'pgmem._sync.brains', 'pgmem._sync.summaries', 'pgmem._sync.retention',\n"
        "         'pgmem._sync.stores')\n"
        "loaded = [m for m in heavy if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "assert 'pydantic' not in sys.modules  # messages read back need no pydantic\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PGMEM_DSN": dsn},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_an_empty_database_is_migrated_on_connect(empty_dsn: str) -> None:
    with pgmem.connect(empty_dsn, namespace="test") as client:
        assert client.messages.count("m") == 0
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT version_num FROM pgmem.alembic_version").fetchall() == [(SCHEMA_REVISION,)]


def test_checking_the_callers_connection_never_aborts_its_transaction(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn) as conn:  # not autocommit
        conn.execute("CREATE TABLE public.mine (x int)")  # the caller's open transaction
        with pytest.raises(pgmem.SchemaOutOfDate):
            pgmem.connect(conn, namespace="test", migrate=False)
        conn.execute("INSERT INTO public.mine VALUES (1)")  # still usable: the check ran in a savepoint
        conn.commit()
        assert conn.execute("SELECT x FROM public.mine").fetchall() == [(1,)]


async def test_checking_the_callers_async_connection_leaves_it_idle(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:  # not autocommit, idle
        client = await pgmem.aconnect(conn, namespace="test")
        assert conn.info.transaction_status == TransactionStatus.IDLE  # the check's block was committed
        assert await client.messages.count("m") == 0
        await client.close()


def test_resolve_dsn_prefers_the_argument_then_pgmem_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_DSN", "host=from-env dbname=x")
    assert connecting.resolve_dsn("host=given dbname=x") == "host=given dbname=x"
    assert connecting.resolve_dsn(None) == "host=from-env dbname=x"


def test_resolve_dsn_without_configuration_uses_the_embedded_server(monkeypatch: pytest.MonkeyPatch) -> None:
    home = os.environ.get("PGMEM_TEST_HOME")
    if not home:
        pytest.skip("the tests do not run on the embedded server")
    monkeypatch.delenv("PGMEM_DSN", raising=False)
    monkeypatch.setenv("PGMEM_HOME", home)
    with psycopg.connect(connecting.resolve_dsn(None)) as conn:  # the running server, reused
        assert conn.execute("SELECT current_database()").fetchone() == ("pgmem",)
