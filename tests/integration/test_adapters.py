"""pgmem's faster adapters read and write exactly what psycopg's and pgvector's own do."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest
from pgvector import Vector
from pgvector.psycopg import register_vector

import pgmem
from pgmem.planning.adapters import register_fast_adapters

JSON_VALUES: list[Any] = [
    {},
    [],
    None,
    0,
    -1.5,
    "text",
    "",
    True,
    {"a": 1, "nested": {"list": [1, "two", None, False], "ü": "ñ €"}},
    [{}, [], {"": ""}],
    {"big": 2**70, "float": 0.1},
]


def _pair(dsn: str) -> tuple[psycopg.Connection[Any], psycopg.Connection[Any]]:
    stock = psycopg.connect(dsn, autocommit=True)
    register_vector(stock)
    fast = psycopg.connect(dsn, autocommit=True)
    register_vector(fast)
    register_fast_adapters(fast)
    return stock, fast


def test_jsonb_values_read_as_psycopg_reads_them(dsn: str) -> None:
    stock, fast = _pair(dsn)
    with stock, fast:
        query = "SELECT v FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(v, i) ORDER BY i"
        payload = psycopg.types.json.Jsonb(JSON_VALUES)
        expected = [r[0] for r in stock.execute(query, (payload,), binary=True).fetchall()]
        got = [r[0] for r in fast.execute(query, (payload,), binary=True).fetchall()]
        assert got == expected == JSON_VALUES
        assert [type(v) for v in got] == [type(v) for v in expected]
        # a fresh {} each time: callers may mutate what they read
        first, second = (fast.execute("SELECT '{}'::jsonb", binary=True).fetchone()[0] for _ in range(2))  # type: ignore[index]
        first["x"] = 1
        assert second == {}
        assert fast.execute("SELECT NULL::jsonb", binary=True).fetchone() == (None,)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_query_vectors_are_sent_as_pgvector_sends_them(dsn: str, dtype: Any) -> None:
    stock, fast = _pair(dsn)
    rng = np.random.default_rng(7)
    vector = rng.standard_normal(384).astype(dtype)
    strided = rng.standard_normal(768).astype(np.float32)[::2]  # not contiguous
    with stock, fast:
        for value in (vector, strided, np.zeros(1, dtype=dtype)):
            query = "SELECT %s::vector::text"
            expected = stock.execute(query, (value,), binary=True).fetchone()
            assert fast.execute(query, (value,), binary=True).fetchone() == expected
        # What pgvector rejects is still rejected, with its error.
        for bad in (np.zeros((2, 3), dtype=np.float32), np.zeros((), dtype=np.float32)):
            with pytest.raises(ValueError, match="ndim"):
                fast.execute("SELECT %s::vector", (bad,), binary=True)
        assert fast.execute("SELECT %s::vector::text", ([1.0, 2.5],), binary=True).fetchone() == ("[1,2.5]",)


def test_a_numpy_still_being_imported_registers_the_dumper_by_name(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool's worker configures a connection while another thread imports numpy: sys.modules holds a
    numpy without ndarray yet. The dumper is registered by name (as pgvector does), not an AttributeError
    that fails the connection ("partially initialized module 'numpy'")."""
    import sys
    import types

    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        monkeypatch.setitem(sys.modules, "numpy", types.ModuleType("numpy"))  # no ndarray: mid-import
        register_fast_adapters(conn)
        monkeypatch.undo()
        vector = np.arange(3, dtype=np.float32)
        assert conn.execute("SELECT %s::vector::text", (vector,), binary=True).fetchone() == ("[0,1,2]",)
        assert conn.adapters.get_dumper(np.ndarray, psycopg.adapt.PyFormat.BINARY).__name__ == "FastVectorBinaryDumper"


def test_the_client_pool_uses_them_and_leaves_caller_connections_alone(dsn: str) -> None:
    from pgmem.planning.adapters import JsonbBinaryLoader

    def jsonb_loader(conn: psycopg.Connection[Any]) -> Any:
        return conn.adapters.get_loader(conn.adapters.types["jsonb"].oid, psycopg.pq.Format.BINARY)

    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        client.messages.add("m", pgmem.Message(content="hello", metadata={"k": [1, 2]}))
        with client.connection() as conn:
            assert jsonb_loader(conn) is JsonbBinaryLoader
        [message] = client.messages.last("m")
        assert message.metadata == {"k": [1, 2]}
        with psycopg.connect(dsn) as own:
            client.messages.add("m", pgmem.Message(content="second"), connection=own)
            assert jsonb_loader(own) is not JsonbBinaryLoader
            assert [m.content for m in client.messages.last("m", connection=own)] == ["hello", "second"]


def test_the_pool_registers_pgvectors_types_as_pgvector_does_without_asking(dsn: str) -> None:
    """The pool's connections get pgvector's types from the schema check's answer: the same oids as
    ``TypeInfo.fetch``, and values read and written as on a connection ``register_vector`` set up."""
    values = "SELECT '[1,2.5]'::vector, '[1,2.5]'::halfvec, '{1:1.5}/3'::sparsevec, B'101'"
    with pgmem.connect(dsn, namespace="test", max_size=1) as client, client.connection() as conn:
        for name in ("vector", "halfvec", "sparsevec", "bit"):
            info, got = psycopg.types.TypeInfo.fetch(conn, name), conn.adapters.types[name]
            assert info is not None
            fields = ("name", "oid", "array_oid", "regtype", "delimiter")
            assert [getattr(got, f) for f in fields] == [getattr(info, f) for f in fields]
        with psycopg.connect(dsn, autocommit=True) as stock:
            register_vector(stock)
            expected = stock.execute(values, binary=True).fetchone()
            assert conn.execute(values, binary=True).fetchone() == expected
            assert conn.execute(values).fetchone() == stock.execute(values).fetchone()
        vector = np.array([1.0, 2.5], dtype=np.float32)
        assert conn.execute("SELECT %s::vector::text", (vector,), binary=True).fetchone() == ("[1,2.5]",)
        assert conn.execute("SELECT %s", ([vector, vector],), binary=True).fetchone() == ([Vector([1.0, 2.5])] * 2,)
