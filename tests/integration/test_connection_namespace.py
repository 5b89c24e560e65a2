"""The caller's SQL on ``client.connection()`` and ``client.read_connection()`` sees the client's namespace
(issue 37, item 7: it saw no row, row-level security with no namespace set), and leaves none behind on a
pool that clients of other namespaces share.

The test DSNs log in as a superuser, whom row-level security does not hold: a client's pool acts as
``pgmem_app``, and the caller's own connections and pools here do ``SET ROLE pgmem_app`` as it does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import pgmem
from pgmem import Message
from tests.integration._replica_cluster import Cluster

_CONTENTS = "SELECT content FROM pgmem.messages ORDER BY content"
_SETTING = "SELECT current_setting('pgmem.namespace', true)"


def _contents(conn: psycopg.Connection[Any]) -> list[str]:
    return [row[0] for row in conn.execute(_CONTENTS).fetchall()]


def _unscoped(conn: psycopg.Connection[Any]) -> bool:
    """No namespace on ``conn`` (never set, or reset to empty)."""
    row = conn.execute(_SETTING).fetchone()
    return row is not None and not row[0]


def _fill(a: pgmem.Client) -> pgmem.Client:
    """One message in ``a``'s namespace, two in namespace ``b``'s; the client of ``b``."""
    b = a.with_namespace("b")
    a.messages.add("m", Message(content="a1"))
    b.messages.add_many("m", [Message(content="b1"), Message(content="b2")])
    return b


def test_plain_sql_sees_the_clients_namespace_and_the_pool_keeps_none(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="a", max_size=1) as a:
        b = _fill(a)
        with a.connection() as conn:
            pid = conn.info.backend_pid
            assert _contents(conn) == ["a1"]
            assert conn.execute(_SETTING).fetchone() == ("a",)
        # The one pool connection again, for namespace b: it sees b's rows only, nothing of a's.
        with b.connection() as conn:
            assert conn.info.backend_pid == pid
            assert _contents(conn) == ["b1", "b2"]
        with a.read_connection() as conn:  # no replicas: one of the client's
            assert conn.info.backend_pid == pid
            assert _contents(conn) == ["a1"]
        # pgmem's own statements on the same connection are unaffected either way.
        assert a.messages.count("m") == 1 and b.messages.count("m") == 2


async def test_async_plain_sql_sees_the_clients_namespace(dsn: str) -> None:
    async with await pgmem.aconnect(dsn, namespace="a", max_size=1) as a:
        b = a.with_namespace("b")
        await a.messages.add("m", Message(content="a1"))
        await b.messages.add_many("m", [Message(content="b1"), Message(content="b2")])
        async with a.connection() as conn:
            pid = conn.info.backend_pid
            cur = await conn.execute(_CONTENTS)
            assert await cur.fetchall() == [("a1",)]
        async with b.connection() as conn:
            assert conn.info.backend_pid == pid
            cur = await conn.execute(_CONTENTS)
            assert await cur.fetchall() == [("b1",), ("b2",)]
        async with a.read_connection() as conn:
            cur = await conn.execute(_CONTENTS)
            assert await cur.fetchall() == [("a1",)]
        with pytest.raises(psycopg.errors.DivisionByZero):
            async with a.connection() as conn:
                await conn.execute("BEGIN")
                await conn.execute("SELECT 1/0")
        async with b.connection() as conn:
            cur = await conn.execute(_CONTENTS)
            assert await cur.fetchall() == [("b1",), ("b2",)]
        assert await a.messages.count("m") == 1


def test_an_error_in_the_block_leaves_the_pool_usable(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="a", max_size=1) as a:
        b = _fill(a)
        # A transaction the block opened and left aborted.
        with pytest.raises(psycopg.errors.DivisionByZero), a.connection() as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT 1/0")
        # One left open, the setting changed in it, and an error of the caller's own.
        with pytest.raises(RuntimeError), a.connection() as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT set_config('pgmem.namespace', 'a', false)")
            raise RuntimeError("the caller's bug")
        with b.connection() as conn:
            assert _contents(conn) == ["b1", "b2"]
        # Past the client's timeout: the connection is closed and the pool replaces it.
        with pytest.raises(pgmem.errors.Timeout), a.with_timeout(0.3).connection() as conn:
            conn.execute("SELECT pg_sleep(2)")
        with b.connection() as conn:
            assert _contents(conn) == ["b1", "b2"]
        assert a.messages.count("m") == 1 and b.messages.count("m") == 2


@pytest.fixture
def app_pool(dsn: str) -> Iterator[ConnectionPool[Any]]:
    """A caller's pool of one connection (outside autocommit, as psycopg_pool's are), acting as pgmem_app."""

    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.execute("SET ROLE pgmem_app")
        conn.commit()

    with ConnectionPool(dsn, min_size=1, max_size=1, configure=configure, open=True) as pool:
        yield pool


def test_a_client_on_the_callers_pool_gives_it_back_unscoped(app_pool: ConnectionPool[Any]) -> None:
    with pgmem.connect(app_pool, namespace="a") as a:
        _fill(a)
        with a.connection() as conn:
            conn.rollback()  # the setting was committed on its own: a rollback in the block keeps it
            assert _contents(conn) == ["a1"]
        with pytest.raises(RuntimeError), a.connection() as conn:
            raise RuntimeError("rolled back")
    with app_pool.connection() as conn:
        assert _unscoped(conn)
        assert _contents(conn) == []


@pytest.fixture
def app_conn(dsn: str, request: pytest.FixtureRequest) -> Iterator[psycopg.Connection[Any]]:
    autocommit = getattr(request, "param", True)
    with psycopg.connect(dsn, autocommit=autocommit) as conn:
        conn.execute("SET ROLE pgmem_app")
        conn.commit()
        yield conn


@pytest.mark.parametrize("app_conn", [True, False], indirect=True, ids=["autocommit", "transactions"])
def test_a_client_on_the_callers_connection(app_conn: psycopg.Connection[Any]) -> None:
    with pgmem.connect(app_conn, namespace="a") as a:
        b = _fill(a)
        app_conn.commit()  # outside autocommit: the caller's implicit transaction
        with a.connection() as conn:
            assert conn is app_conn
            assert _contents(conn) == ["a1"]
            with b.connection() as inner:
                assert _contents(inner) == ["b1", "b2"]
            assert _contents(conn) == ["a1"]  # put back as it was
        assert _unscoped(app_conn)
        assert _contents(app_conn) == []
        app_conn.commit()
        assert _unscoped(app_conn)


def test_the_callers_connection_inside_another_clients_transaction(
    client: pgmem.Client, app_conn: psycopg.Connection[Any]
) -> None:
    """``connection=``: inside the caller's transaction the namespace is local to it, and the enclosing
    transaction's is back after the block, for plain SQL and for pgmem's statements alike."""
    other = client.with_namespace("other")
    other.messages.add_many("m", [Message(content="o1"), Message(content="o2")])
    with other.transaction(app_conn):
        with client.connection(app_conn) as conn:
            client.messages.add("m", Message(content="t1"), connection=conn)
            assert _contents(conn) == ["t1"]
            # pgmem's statement of the enclosing client in the block sets its own namespace again.
            assert other.messages.count("m", connection=conn) == 2
        assert _contents(app_conn) == ["o1", "o2"]
        assert other.messages.count("m", connection=app_conn) == 2
    assert _unscoped(app_conn)
    assert client.messages.count("m") == 1


def test_a_closed_client_or_connection_is_refused(dsn: str) -> None:
    client = pgmem.connect(dsn, namespace="a", max_size=1)
    conn = psycopg.connect(dsn)
    conn.close()
    with pytest.raises(pgmem.errors.ClientClosed), client.connection(conn):
        pass
    client.close()
    with pytest.raises(pgmem.errors.ClientClosed), client.connection():
        pass


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    from pgmem.ops.migrate import upgrade

    started = Cluster().start()
    try:
        upgrade(started.primary.dsn)
        started.add_replica()
        yield started
    finally:
        started.close()


def test_read_connection_on_a_replica_sees_the_namespace(cluster: Cluster) -> None:
    with pgmem.connect(cluster.primary.dsn, namespace="a", replicas=[cluster.replicas[0].dsn], max_size=1) as a:
        b = _fill(a)
        for client, contents in ((a, ["a1"]), (b, ["b1", "b2"]), (a, ["a1"])):
            with client.read_connection() as conn:
                assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
                assert _contents(conn) == contents
        stats = a.replica_stats()
        assert stats is not None and sum(r.reads for r in stats.replicas) == 3
