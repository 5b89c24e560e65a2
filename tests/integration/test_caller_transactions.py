"""Writes join the caller's transaction; clients built on the caller's connection or pool."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import pgmem


def _count(dsn: str, memory: str = "m") -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgmem.memory_entries WHERE memory = %s", (memory,)).fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize("autocommit", [True, False])
def test_rollback_leaves_nothing_commit_keeps_everything(client: pgmem.Client, dsn: str, autocommit: bool) -> None:
    with psycopg.connect(dsn, autocommit=autocommit) as conn:
        with pytest.raises(RuntimeError), conn.transaction():
            client.messages.add("m", pgmem.Message(content="one"), connection=conn)
            client.messages.add_many(
                "m", [pgmem.Message(content="two"), pgmem.Message(content="three")], connection=conn
            )
            client.queues.push("q", pgmem.Message(content="job"), connection=conn)
            # Our own uncommitted writes are visible on our connection, not on others.
            assert client.messages.count("m", connection=conn) == 3
            assert client.messages.count("m") == 0
            raise RuntimeError("the app failed after writing")
        assert _count(dsn) == 0 and client.queues.depth("q")["ready"] == 0

        with conn.transaction():
            conn.execute("CREATE TABLE app_orders (id int PRIMARY KEY)")
            conn.execute("INSERT INTO app_orders VALUES (42)")
            client.messages.add("m", pgmem.Message(content="order placed"), connection=conn)
        assert _count(dsn) == 1
        client.messages.clear("m", connection=conn)
        if not autocommit:
            assert _count(dsn) == 1  # the caller's implicit transaction is still open
            conn.commit()
        assert _count(dsn) == 0


def test_implicit_transaction_of_a_non_autocommit_connection_is_the_callers(client: pgmem.Client, dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        client.messages.add("m", pgmem.Message(content="pending"), connection=conn)
        assert _count(dsn) == 0
        conn.rollback()
        assert _count(dsn) == 0
        client.messages.add("m", pgmem.Message(content="kept"), connection=conn)
        conn.commit()
        assert _count(dsn) == 1


def test_client_on_the_callers_connection(dsn: str) -> None:
    conn = psycopg.connect(dsn, autocommit=True)
    with pgmem.connect(conn, namespace="test") as client:
        client.messages.add("m", pgmem.Message(content="x"))
    assert not conn.closed  # the client did not open it, so it does not close it
    assert _count(dsn) == 1
    conn.close()


def test_client_on_the_callers_pool(dsn: str) -> None:
    with ConnectionPool(dsn, min_size=1, max_size=2, open=True) as pool:
        with pgmem.connect(pool, namespace="test") as client:
            client.messages.add("m", pgmem.Message(content="x"))
            assert client.messages.count("m") == 1
        assert not pool.closed
        with pool.connection() as conn:
            assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (1,)


async def test_async_client_on_the_callers_connection_and_pool(dsn: str) -> None:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with await pgmem.aconnect(conn, namespace="test") as client:
        await client.messages.add("m", pgmem.Message(content="x"))
    assert not conn.closed
    async with conn.transaction():
        async with await pgmem.aconnect(conn, namespace="test") as client:
            await client.messages.add("m", pgmem.Message(content="y"), connection=conn)
    await conn.close()
    pool = AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False)
    await pool.open()
    async with await pgmem.aconnect(pool, namespace="test") as client:
        assert await client.messages.count("m") == 2
    assert not pool.closed
    await pool.close()


def test_migrate_false_on_an_empty_database(empty_dsn: str) -> None:
    with pytest.raises(pgmem.SchemaOutOfDate):
        pgmem.connect(empty_dsn, migrate=False)
    with pgmem.connect(empty_dsn) as client:
        assert client.messages.count("m") == 0
    with pgmem.connect(empty_dsn, migrate=False) as client:
        assert client.messages.count("m") == 0


def test_a_client_on_the_callers_connection_embeds_only_when_asked(dsn: str) -> None:
    """No background thread works on the caller's connection (it would run inside the caller's
    transaction, concurrently with the caller): the outbox waits for embed_pending / flush."""
    with psycopg.connect(dsn) as conn:  # not autocommit: the statements open the caller's transaction
        client = pgmem.connect(conn, namespace="test")
        client.vectors.enable("m")
        client.messages.add("m", pgmem.Message(id="x", content="a write in the caller's transaction"))
        client.vectors.wait()
        assert client.vectors.pending("m") == {"pgmem-hash-384": 1}  # nothing ran in the background
        report = client.vectors.embed_pending()
        assert (report.embedded, report.failed) == (1, 0)
        conn.commit()
    with pgmem.connect(dsn, namespace="test") as own:
        assert own.vectors.pending("m") == {}
        assert [h.message.id for h in own.search("a write in the caller's transaction", memory="m", k=1)] == ["x"]
