"""Statements that ran around the executor now run through it (issue 33, item 1): a connection lost under
them gets the lost-connection policy and pgmem's errors, on a real terminated backend.

The pool's idle check would drop a connection whose server went away before handing it out; to have a
statement meet the loss itself, these tests turn the check off (``idle_broken``) and terminate the pool's
one connection, or the caller's, with ``pg_terminate_backend`` from another connection first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

import pgmem
import pgmem._sync.pooling
from pgmem.embeddings import Precomputed
from pgmem.errors import CommitUnknown, ConnectionFailed


def _terminate(dsn: str, pid: int) -> None:
    """End the backend ``pid`` and wait until it is gone (its FATAL message is then on its socket)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        give_up = time.monotonic() + 10
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < give_up, "the backend did not end"
            time.sleep(0.01)


@pytest.fixture
def client(dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[pgmem.Client]:
    """A client with one pool connection, handed out even after its server went away."""
    monkeypatch.setattr(pgmem._sync.pooling, "idle_broken", lambda conn: conn.closed)
    with pgmem.connect(dsn, namespace="exec", min_size=1, max_size=1) as c:
        yield c


def _kill_pooled(client: pgmem.Client, dsn: str) -> None:
    """Terminate the backend of the client's one pool connection (it stays in the pool)."""
    pool = client._pool
    assert pool is not None
    with pool.connection() as conn:
        pid = conn.info.backend_pid
    _terminate(dsn, pid)


def test_a_search_statement_runs_again_on_a_fresh_connection(client: pgmem.Client, dsn: str) -> None:
    """Keyword search's scope count and statement (formerly scope.rows called directly: the loss raised)."""
    client.messages.add("m", pgmem.Message(content="the refund policy"))
    _kill_pooled(client, dsn)
    assert [m.content for m in client.messages.search_text("m", "refund")] == ["the refund policy"]


def test_an_add_lost_on_the_way_may_have_committed(client: pgmem.Client, dsn: str) -> None:
    """messages.add and a claim (formerly run around the policy: a plain ConnectionFailed) are writes
    without an idempotency key: CommitUnknown, and nothing is run twice."""
    client.queues.push("q", pgmem.Message(content="job"))
    _kill_pooled(client, dsn)
    with pytest.raises(CommitUnknown) as info:
        client.messages.add("m", pgmem.Message(content="once"))
    assert isinstance(info.value.__cause__, ConnectionFailed)
    assert client.messages.count("m") == 0  # the backend was gone before the statement: it never ran
    _kill_pooled(client, dsn)
    with pytest.raises(CommitUnknown):
        client.queues.claim("q")
    assert client.queues.depth("q")["claimable"] == 1


def test_a_brain_read_runs_again_and_a_brain_write_lost_before_commit_wrote_nothing(
    client: pgmem.Client, dsn: str
) -> None:
    client.brains.dump("chat:1", history=[pgmem.Message(content="hi")])
    _kill_pooled(client, dsn)
    state = client.brains.load("chat:1")  # three reads on one connection: all again on a fresh one
    assert state is not None and [m.content for m in state.history] == ["hi"]
    _kill_pooled(client, dsn)
    with pytest.raises(ConnectionFailed) as info:  # lost at BEGIN: the block never ran, nothing committed
        client.brains.dump("chat:1", history=[pgmem.Message(content="lost")])
    assert not isinstance(info.value, CommitUnknown)
    assert isinstance(info.value.__cause__, psycopg.OperationalError)
    state = client.brains.load("chat:1")
    assert state is not None and [m.content for m in state.history] == ["hi"]


def test_a_block_lost_at_commit_may_have_committed(client: pgmem.Client, dsn: str) -> None:
    """The block's statements ran; its connection is terminated before COMMIT reaches the server."""
    with pytest.raises(CommitUnknown), client.executor.transaction() as block:
        client.messages.add("m", pgmem.Message(content="in a block"), connection=block.connection)
        _terminate(dsn, block.connection.info.backend_pid)
    assert client.messages.count("m") == 0  # here it had not: the server rolled the block back
    with pytest.raises(ConnectionFailed) as info, client.executor.transaction(reads=True) as block:
        block.rows("SELECT 1")
        _terminate(dsn, block.connection.info.backend_pid)
    assert not isinstance(info.value, CommitUnknown)  # a block that only read committed nothing


def test_on_the_callers_connection_a_loss_is_typed_and_never_run_again(client: pgmem.Client, dsn: str) -> None:
    """vectors.enable and a brain write in the caller's transaction: ConnectionFailed (that transaction
    died with the connection: nothing committed, only the caller can run it again), never a driver error."""
    calls = [
        lambda conn: client.vectors.enable("m", Precomputed("own-4", 4), distance="cosine", connection=conn),
        lambda conn: client.brains.dump("chat:2", history=[pgmem.Message(content="x")], connection=conn),
        lambda conn: client.messages.add("m", pgmem.Message(content="x"), connection=conn),
    ]
    for call in calls:
        with psycopg.connect(dsn) as conn:  # in a transaction once its first statement ran
            conn.execute("SET ROLE pgmem_app")
            _terminate(dsn, conn.info.backend_pid)
            with pytest.raises(ConnectionFailed) as info:
                call(conn)
        assert not isinstance(info.value, CommitUnknown)
        assert isinstance(info.value.__cause__, psycopg.OperationalError)


def test_statements_of_a_block_are_translated(client: pgmem.Client) -> None:
    from pgmem._sync.executor import Block

    with client.executor.transaction() as block:
        with pytest.raises(pgmem.InvalidInput) as info, block.transaction():
            Block(block.connection).rows("SELECT 1 / %(z)s::int", {"z": 0})
        assert info.value.sqlstate == "22012"
        assert block.scalar("SELECT current_setting('pgmem.namespace')") == "exec"
    with pytest.raises(pgmem.InvalidInput, match=r"\bt\b.*lone surrogate"):
        client.executor.rows("SELECT %(t)s::text", {"t": "x\ud800"})


@pytest.mark.parametrize("removal", ["delete", "clear", "trim"])
def test_a_removal_lost_on_the_way_may_have_committed(client: pgmem.Client, dsn: str, removal: str) -> None:
    """A message removal (its fork statement and its own in one pipeline, whose Sync commits them) meeting a
    lost connection: CommitUnknown, as a write of one statement, never a bare ConnectionFailed."""
    client.messages.add("m", pgmem.Message(id="x", content="kept"))
    _kill_pooled(client, dsn)
    with pytest.raises(CommitUnknown) as info:
        if removal == "delete":
            client.messages.delete("m", "x")
        elif removal == "clear":
            client.messages.clear("m")
        else:
            client.messages.trim("m", 0)
    assert isinstance(info.value.__cause__, ConnectionFailed)
    assert client.messages.count("m") == 1  # the backend was gone before the statements: they never ran


def _pool_backends(client: pgmem.Client, n: int) -> set[int]:
    """The backends of the client's ``n`` pool connections (all of it: taken at once, then given back)."""
    pool = client._pool
    assert pool is not None
    pool.wait()
    held = [pool.getconn(timeout=10) for _ in range(n)]
    try:
        return {conn.info.backend_pid for conn in held}
    finally:
        for conn in held:
            pool.putconn(conn)


def test_after_a_loss_the_pool_replaces_the_connections_it_opened_before(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One pool connection is terminated under a read; the pool's two others are alive and pass a check.
    The retry still runs on a connection opened after the loss, and so does every later call: a sweep of
    terminations (``pg_terminate_backend`` over every backend) reaches a checked connection after its
    check, which made 1 in 51,232 retries fail under load (tests/faults/test_terminated.py)."""
    monkeypatch.setattr(pgmem._sync.pooling, "idle_broken", lambda conn: conn.closed)
    with pgmem.connect(dsn, namespace="exec", min_size=3, max_size=3) as client:
        before = _pool_backends(client, 3)
        (next_pid,) = client.executor.rows("SELECT pg_backend_pid()", {}, scoped=False)[0]
        assert next_pid in before
        _terminate(dsn, next_pid)  # the connection the next call takes (the pool hands out its newest)
        (retried_on,) = client.executor.rows("SELECT pg_backend_pid()", {}, scoped=False)[0]
        assert retried_on not in before
        assert _pool_backends(client, 3).isdisjoint(before)
        assert client.messages.count("m") == 0


def test_a_callers_lost_connection_leaves_the_pools_connections_alone(dsn: str) -> None:
    """A loss on the caller's connection says nothing of the pool's: they are kept (replacing them would
    cost every one a reconnection for nothing)."""
    with pgmem.connect(dsn, namespace="exec", min_size=2, max_size=2) as client:
        before = _pool_backends(client, 2)
        with psycopg.connect(dsn, autocommit=True) as mine:
            mine.execute("SET ROLE pgmem_app")
            _terminate(dsn, mine.info.backend_pid)
            with pytest.raises(ConnectionFailed):
                client.messages.count("m", connection=mine)
        (used,) = client.executor.rows("SELECT pg_backend_pid()", {}, scoped=False)[0]
        assert used in before  # taken as it was, not replaced
