"""A scoped statement through libpq directly (pgmem.wire, ``scope.rows``): the same answer as psycopg's
pipeline, its own prepared statements, errors raised as psycopg raises them, and the connection left as it
was found (out of pipeline mode, the transaction where it was)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector, register_vector_async
from psycopg import errors as pg_errors
from psycopg.pq import PipelineStatus, TransactionStatus
from psycopg.types.json import Jsonb

import pgmem
from pgmem import wire
from pgmem._async import scope as ascope
from pgmem._sync import scope
from pgmem.errors import Timeout
from pgmem.models import Message
from pgmem.resilience import GuardedConnection, deadline

# The statements pgmem prepared, but the setup of the namespace (prepared on first use; its own tests).
_OURS = (
    "SELECT name FROM pg_prepared_statements"
    " WHERE name LIKE '\\_pgmem\\_%' AND statement NOT LIKE 'SELECT set_config(%' ORDER BY name"
)
_SETUPS = "SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'SELECT set_config(%' ORDER BY 1"


@pytest.fixture
def app_conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection acting as pgmem_app (row-level security applies), pgvector's types registered."""
    with GuardedConnection.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET ROLE pgmem_app")
        yield conn


def _ours(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute(_OURS)]


def _clean(conn: psycopg.Connection[Any]) -> None:
    assert conn.pgconn.pipeline_status == PipelineStatus.OFF


# -- the statement's text ----------------------------------------------------------------------------------


def test_convert_names_to_positions() -> None:
    c = wire.convert("SELECT %(a)s, %(b)b, %(a)s, 'x%%y', %(c)t")
    assert c is not None
    assert c.text == b"SELECT $1, $2, $1, 'x%y', $3"
    assert c.names == ("a", "b", "c")
    assert [f.value for f in c.formats] == ["s", "b", "t"]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT %s",  # positional: psycopg's
        "SELECT %(a)s, %(a)b",  # one name in two formats
        "SELECT 'a' % 2",  # a lone %
        "SELECT 1 %",
    ],
)
def test_convert_leaves_other_placeholders_to_psycopg(query: str) -> None:
    assert wire.convert(query) is None


def test_a_query_psycopg_must_run_still_runs(app_conn: psycopg.Connection[Any]) -> None:
    # '%s' is not a named placeholder: scope.rows hands it to psycopg's own path, same result.
    assert scope.rows(app_conn, "ns", "SELECT %(a)s::int + 1 AS x, 'a%%b'", {"a": 1}) == [(2, "a%b")]
    _clean(app_conn)


# -- the same answer as psycopg ----------------------------------------------------------------------------

_TYPED = """
SELECT %(i)s::int8, %(f)s::float8, %(t)s::text, %(n)s::numeric, %(j)s::jsonb, %(ts)s::timestamptz,
       %(arr)s::text[], %(v)s::vector, NULL::int, %(none)s::text, current_setting('pgmem.namespace')"""


def test_rows_equal_psycopg_pipeline(app_conn: psycopg.Connection[Any]) -> None:
    params = {
        "i": 2**40,
        "f": 1.5,
        "t": "zß\u00e9",
        "n": Decimal("1.25"),
        "j": Jsonb({"a": [1, None]}),
        "ts": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "arr": ["a", "b"],
        "v": np.array([1.0, 2.0, 3.0], dtype=np.float32),
        "none": None,
    }
    ours = scope.rows(app_conn, "tenant-a", _TYPED, params)
    theirs = scope.execute(app_conn, "tenant-a", _TYPED, params, binary=True).fetchall()
    assert len(ours) == 1
    for a, b in zip(ours[0], theirs[0], strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b
    assert ours[0][-1] == "tenant-a"
    _clean(app_conn)


def test_the_namespace_scopes_the_statement_only(dsn: str, app_conn: psycopg.Connection[Any]) -> None:
    with pgmem.connect(dsn, namespace="wire-a", max_size=1) as a:
        a.messages.add("m", Message(id="x", content="of a"))
    with pgmem.connect(dsn, namespace="wire-b", max_size=1) as b:
        b.messages.add("m", Message(id="y", content="of b"))
    q = "SELECT id FROM pgmem.messages WHERE namespace = %(ns)s ORDER BY id"
    assert scope.rows(app_conn, "wire-a", q, {"ns": "wire-a"}) == [("x",)]
    assert scope.rows(app_conn, "wire-a", q, {"ns": "wire-b"}) == []  # row-level security, not the WHERE
    assert scope.rows(app_conn, "wire-b", q, {"ns": "wire-b"}) == [("y",)]
    # Local to the statement's implicit transaction: nothing is left on the session.
    assert app_conn.execute("SELECT current_setting('pgmem.namespace', true)").fetchone() in (("",), (None,))


def test_a_statement_that_returns_no_rows(app_conn: psycopg.Connection[Any]) -> None:
    assert scope.rows(app_conn, "ns", "SELECT set_config('x.y', %(v)s, false) WHERE false", {"v": "1"}) == []
    assert scope.rows(app_conn, "ns", "SET x.z = 1", {}) == []  # a command: no result set
    assert app_conn.execute("SELECT current_setting('x.z')").fetchone() == ("1",)


# -- prepared statements -----------------------------------------------------------------------------------


def test_prepared_from_the_second_run(app_conn: psycopg.Connection[Any]) -> None:
    q = "SELECT %(a)s::int * 2"
    assert scope.rows(app_conn, "ns", q, {"a": 1}) == [(2,)]
    assert _ours(app_conn) == []
    assert scope.rows(app_conn, "ns", q, {"a": 2}) == [(4,)]
    assert len(_ours(app_conn)) == 1
    assert scope.rows(app_conn, "ns", q, {"a": 3}) == [(6,)]
    assert len(_ours(app_conn)) == 1  # used, not prepared again


def test_the_namespace_setup_is_prepared_on_first_use_and_reused(app_conn: psycopg.Connection[Any]) -> None:
    """The setup goes with every statement that sets the namespace: prepared from its first run (its parse
    and plan were 20-30 us of the server's time per call), once per connection and setting count, and kept
    when the statement beside it fails."""
    with pytest.raises(pg_errors.DivisionByZero):
        scope.rows(app_conn, "ns", "SELECT 1 / %(z)s::int", {"z": 0})
    for a in range(3):
        assert scope.rows(app_conn, "ns", "SELECT current_setting('pgmem.namespace'), %(a)s::int", {"a": a}) == [
            ("ns", a)
        ]
    settings = {"hnsw.ef_search": "77"}
    q = "SELECT current_setting('hnsw.ef_search'), %(a)s::int"
    assert scope.rows(app_conn, "other", q, {"a": 1}, settings=settings) == [("77", 1)]
    assert scope.rows(app_conn, "other", q, {"a": 2}, settings=settings) == [("77", 2)]
    assert [r[0] for r in app_conn.execute(_SETUPS)] == [
        wire.setup_statement(True, 0).decode(),
        wire.setup_statement(True, 1).decode(),
    ]


def test_prepare_true_and_false(app_conn: psycopg.Connection[Any]) -> None:
    scope.rows(app_conn, "ns", "SELECT %(a)s::int + 7", {"a": 1}, prepare=True)
    assert len(_ours(app_conn)) == 1
    for _ in range(3):
        scope.rows(app_conn, "ns", "SELECT %(a)s::int + 8", {"a": 1}, prepare=False)
    assert len(_ours(app_conn)) == 1


def test_a_statement_that_fails_to_prepare_is_not_remembered(app_conn: psycopg.Connection[Any]) -> None:
    q = "SELECT %(a)s::int FROM no_such_table"
    for _ in range(3):
        with pytest.raises(pg_errors.UndefinedTable):
            scope.rows(app_conn, "ns", q, {"a": 1}, prepare=True)
        _clean(app_conn)
    assert _ours(app_conn) == []


def test_at_most_prepared_max_per_connection(
    app_conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "PREPARED_MAX", 3)
    for i in range(8):
        for _ in range(2):
            assert scope.rows(app_conn, "ns", f"SELECT %(a)s::int + {i}", {"a": 1}) == [(1 + i,)]
    names = _ours(app_conn)
    assert len(names) == 2 and len(app_conn.execute(_SETUPS).fetchall()) == 1  # the setup is one of the three
    # The most recent ones are kept (the setup, used by every call, and two statements), and still answer.
    for i in (6, 7):
        assert scope.rows(app_conn, "ns", f"SELECT %(a)s::int + {i}", {"a": 2}) == [(2 + i,)]
    assert _ours(app_conn) == names


def test_discard_all_then_the_next_call_still_answers(app_conn: psycopg.Connection[Any]) -> None:
    q = "SELECT %(a)s::int - 1"
    for a in (1, 2):
        scope.rows(app_conn, "ns", q, {"a": a})
    assert len(_ours(app_conn)) == 1
    app_conn.execute("DISCARD ALL")  # the server forgets every prepared statement (and the role)
    app_conn.execute("SET ROLE pgmem_app")
    assert scope.rows(app_conn, "ns", q, {"a": 10}) == [(9,)]  # run again, unprepared
    scope.rows(app_conn, "ns", q, {"a": 10})
    assert scope.rows(app_conn, "ns", q, {"a": 11}) == [(10,)]
    assert len(_ours(app_conn)) == 1


def test_discard_all_inside_a_transaction_is_the_callers_error(app_conn: psycopg.Connection[Any]) -> None:
    q = "SELECT %(a)s::int - 2"
    for a in (1, 2):
        scope.rows(app_conn, "ns", q, {"a": a})
    app_conn.execute("DEALLOCATE ALL")
    with pytest.raises(pg_errors.InvalidSqlStatementName), app_conn.transaction():
        scope.rows(app_conn, "ns", q, {"a": 3})
    _clean(app_conn)
    assert app_conn.info.transaction_status == TransactionStatus.IDLE
    assert scope.rows(app_conn, "ns", q, {"a": 3}) == [(1,)]  # forgotten: prepared again


# -- errors and the connection's state ---------------------------------------------------------------------


def test_an_error_is_psycopgs_and_the_connection_stays_usable(app_conn: psycopg.Connection[Any]) -> None:
    for prepare in (None, True, True):
        with pytest.raises(pg_errors.DivisionByZero) as info:
            scope.rows(app_conn, "ns", "SELECT 1 / %(z)s::int", {"z": 0}, prepare=prepare)
        assert info.value.sqlstate == "22012"
        _clean(app_conn)
        assert app_conn.info.transaction_status == TransactionStatus.IDLE
    assert scope.rows(app_conn, "ns", "SELECT 1 / %(z)s::int", {"z": 1}) == [(1,)]


def test_a_missing_parameter_sends_nothing(app_conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.ProgrammingError, match="missing"):
        scope.rows(app_conn, "ns", "SELECT %(a)s::int", {})
    _clean(app_conn)
    assert scope.rows(app_conn, "ns", "SELECT %(a)s::int", {"a": 4}) == [(4,)]


def test_inside_a_transaction_block(app_conn: psycopg.Connection[Any]) -> None:
    with app_conn.transaction():
        scope.rows(app_conn, "ns", "SELECT set_config('x.t', %(v)s, true)", {"v": "inside"})
        assert app_conn.info.transaction_status == TransactionStatus.INTRANS  # the Sync did not end it
        assert app_conn.execute("SELECT current_setting('x.t')").fetchone() == ("inside",)
        with pytest.raises(pg_errors.DivisionByZero):
            scope.rows(app_conn, "ns", "SELECT 1 / %(z)s::int", {"z": 0})
        assert app_conn.info.transaction_status == TransactionStatus.INERROR
        _clean(app_conn)
        raise psycopg.Rollback()
    assert app_conn.info.transaction_status == TransactionStatus.IDLE


def test_a_caller_connection_outside_autocommit_gets_its_transaction(dsn: str) -> None:
    # psycopg starts the caller's transaction on a non-autocommit connection: that path stays psycopg's.
    with psycopg.connect(dsn) as conn:
        conn.execute("SET ROLE pgmem_app")
        conn.commit()
        assert scope.rows(conn, "ns", "SELECT %(a)s::int", {"a": 5}) == [(5,)]
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        conn.rollback()


def test_a_callers_pipeline_is_left_to_psycopg(app_conn: psycopg.Connection[Any]) -> None:
    with app_conn.pipeline():
        assert scope.rows(app_conn, "ns", "SELECT %(a)s::int", {"a": 6}) == [(6,)]
        assert scope.rows(app_conn, "ns", "SET x.w = 2", {}) == []
    _clean(app_conn)


def test_the_deadline_ends_the_call(app_conn: psycopg.Connection[Any]) -> None:
    started = time.monotonic()
    with pytest.raises(Timeout), deadline(0.5):
        scope.rows(app_conn, "ns", "SELECT pg_sleep(%(s)s::float8)", {"s": 5.0})
    assert time.monotonic() - started < 1.5
    assert app_conn.closed  # its state unknown: closed, as for any statement


def test_notifications_reach_the_connections_handler(dsn: str, app_conn: psycopg.Connection[Any]) -> None:
    got: list[str] = []
    app_conn.add_notify_handler(lambda n: got.append(n.payload))
    app_conn.execute("LISTEN wire_test")
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("NOTIFY wire_test, 'hello'")
    time.sleep(0.1)
    assert scope.rows(app_conn, "ns", "SELECT %(a)s::int", {"a": 1}) == [(1,)]
    assert got == ["hello"]


def test_threads_sharing_a_connection_take_turns(app_conn: psycopg.Connection[Any]) -> None:
    errors: list[Exception] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                assert scope.rows(app_conn, "ns", "SELECT %(a)s::int + %(b)s::int", {"a": n, "b": i}) == [(n + i,)]
        except (AssertionError, psycopg.Error) as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n * 1000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _clean(app_conn)


# -- the async flavour -------------------------------------------------------------------------------------


async def test_async_rows(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await register_vector_async(conn)
        await conn.execute("SET ROLE pgmem_app")
        q = "SELECT %(a)s::int, current_setting('pgmem.namespace'), %(v)s::vector"
        for a in range(3):
            rows = await ascope.rows(conn, "tenant-z", q, {"a": a, "v": np.ones(2, dtype=np.float32)})
            assert rows[0][:2] == (a, "tenant-z")
            np.testing.assert_array_equal(rows[0][2].to_numpy(), [1.0, 1.0])
        cur = await conn.execute(_OURS)
        assert len(await cur.fetchall()) == 1
        with pytest.raises(pg_errors.DivisionByZero):
            await ascope.rows(conn, "ns", "SELECT 1 / %(z)s::int", {"z": 0})
        assert conn.pgconn.pipeline_status == PipelineStatus.OFF
        results = await asyncio.gather(*(ascope.rows(conn, "ns", "SELECT %(a)s::int", {"a": i}) for i in range(20)))
        assert [r[0][0] for r in results] == list(range(20))


# -- settings local to the statement's transaction ---------------------------------------------------------


def test_settings_go_with_the_namespace_and_end_with_the_statement(app_conn: psycopg.Connection[Any]) -> None:
    q = "SELECT current_setting('pgmem.namespace'), current_setting('hnsw.ef_search'), %(a)s::int"
    settings = {"hnsw.ef_search": "123"}
    for a in range(3):  # unprepared, then prepared
        assert scope.rows(app_conn, "ns-s", q, {"a": a}, settings=settings) == [("ns-s", "123", a)]
    assert app_conn.execute("SELECT current_setting('hnsw.ef_search')").fetchone() != ("123",)
    with scope.transaction(app_conn, "ns-s"):  # scoped already: the settings alone, until the block ends
        assert scope.rows(app_conn, "ns-s", q, {"a": 9}, settings=settings) == [("ns-s", "123", 9)]
        assert app_conn.execute("SELECT current_setting('hnsw.ef_search')").fetchone() == ("123",)
    assert app_conn.execute("SELECT current_setting('hnsw.ef_search')").fetchone() != ("123",)
    with app_conn.pipeline():  # psycopg's path: the same
        assert scope.rows(app_conn, "ns-s", q, {"a": 1}, settings=settings) == [("ns-s", "123", 1)]
    assert app_conn.execute("SELECT current_setting('hnsw.ef_search')").fetchone() != ("123",)


def test_a_search_does_not_depend_on_its_sessions_settings(client: pgmem.Client) -> None:
    # An index scan's settings travel with the statement: a session set to stop HNSW after one candidate
    # and never iterate still gets every hit.
    from pgmem.embeddings import HashingEmbedder

    embedder = HashingEmbedder(dimension=16)
    client.vectors.enable("notes", embedder=embedder)
    client.messages.add_many("notes", [Message(id=f"n{i}", content=f"note number {i} of many") for i in range(60)])
    client.vectors.flush()
    q = embedder.embed(["note number 7"])[0]
    with client.connection() as conn:
        conn.execute("SET hnsw.ef_search = 1")
        conn.execute("SET hnsw.iterative_scan = off")
        conn.execute("SET enable_seqscan = off")  # the index even for 60 vectors
        conn.execute("SET enable_sort = off")
        hits = client.search(vector=q, k=10, memory="notes", mode="ann", connection=conn)
        assert len(hits) == 10
        assert conn.execute("SELECT current_setting('hnsw.ef_search')").fetchone() == ("1",)  # left as it was
    assert len(client.search(vector=q, k=10, memory="notes", mode="ann")) == 10
