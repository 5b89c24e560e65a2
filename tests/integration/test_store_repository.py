"""The core's store repository (``client.stores``) and the message operations ChatDev's stores use
(``messages.delete_many``, ``messages.newest``): what the facades call instead of running their own SQL."""

from __future__ import annotations

import hashlib

import psycopg
import pytest

import pgmem
from pgmem import Message
from tests.conftest import table_counts


def test_register_keeps_the_first_type_and_the_latest_config(client: pgmem.Client) -> None:
    assert client.stores.register("convo", "simple", {"top_k": 3}) == "simple"
    assert client.stores.register("convo", "simple", {"top_k": 5}) == "simple"
    assert client.stores.register("convo", "file", {"x": 1}) == "simple"  # taken: nothing changes
    (row,) = client.stores.list()
    assert (row.name, row.type, row.config) == ("convo", "simple", {"top_k": 5})
    assert client.with_namespace("other").stores.list() == []


def test_file_records_round_trip_in_the_callers_transaction(client: pgmem.Client) -> None:
    sha = hashlib.sha256(b"hello").digest()
    with pytest.raises(pgmem.NotFound, match="docs"):  # the store must be registered first
        client.stores.save_file("docs", "a.md", sha256=sha, size=5, chunk_ids=[])
    client.stores.register("docs", "file", {})
    with client.transaction() as conn:
        assert client.stores.lock_file("docs", "a.md", connection=conn) is None
        client.stores.save_file("docs", "a.md", sha256=sha, size=5, chunk_ids=["c1", "c2"], connection=conn)
    (saved,) = client.stores.files("docs")
    assert (saved.path, bytes(saved.sha256), saved.chunk_ids) == ("a.md", sha, ["c1", "c2"])
    with client.transaction() as conn:
        locked = client.stores.lock_file("docs", "a.md", connection=conn)
        assert locked is not None and locked.chunk_ids == ["c1", "c2"]
        client.stores.delete_file("docs", "a.md", connection=conn)
    assert client.stores.files("docs") == []


def test_store_bad_input_writes_nothing(client: pgmem.Client, dsn: str) -> None:
    before = table_counts(dsn)
    with pytest.raises(pgmem.InvalidInput, match="sha256"):
        client.stores.save_file("docs", "a.md", sha256=b"short", size=5, chunk_ids=[])
    with pytest.raises(pgmem.InvalidInput, match="size"):
        client.stores.save_file("docs", "a.md", sha256=bytes(32), size=-1, chunk_ids=[])
    with pytest.raises(pgmem.InvalidInput, match="NUL"):
        client.stores.register("bad\x00name", "simple", {})
    with pytest.raises(pgmem.InvalidInput, match="not JSON"):
        client.stores.register("convo", "simple", {"x": float("nan")})
    with pytest.raises(pgmem.InvalidInput):
        client.stores.files("")
    assert table_counts(dsn) == before


def test_delete_many_removes_entries_and_rows_nothing_else_refers_to(client: pgmem.Client, dsn: str) -> None:
    client.messages.add_many("m", [Message(id=f"x{i}", content=f"item {i}") for i in range(5)])
    client.messages.add("other", Message(id="x1", content="item 1"))
    assert client.messages.delete_many("m", ["x0", "x1", "missing"]) == 2
    assert [m.id for m in client.messages.last("m")] == ["x2", "x3", "x4"]
    with psycopg.connect(dsn) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM pgmem.messages ORDER BY id").fetchall()]
    assert ids == ["x1", "x2", "x3", "x4"]  # x1 stays: the memory "other" refers to it
    assert client.messages.delete_many("m", []) == 0
    with pytest.raises(pgmem.InvalidInput):
        client.messages.delete_many("m", ["bad id with spaces"])
    assert len(client.messages.last("m")) == 3


def test_newest_is_newest_first_within_an_age(client: pgmem.Client, dsn: str) -> None:
    client.messages.add_many("board", [Message(id=f"b{i}", content=f"note {i}") for i in range(6)])
    assert [m.id for m in client.messages.newest("board", 3)] == ["b5", "b4", "b3"]
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pgmem.memory_entries SET added_at = now() - interval '1 hour' WHERE message_id < 'b4'")
    assert [m.id for m in client.messages.newest("board", 10, within=60)] == ["b5", "b4"]
    assert len(client.messages.newest("board", 10)) == 6
    for bad in ({"k": -1}, {"k": 2, "within": -5}, {"k": 2, "within": float("inf")}, {"k": True}):
        with pytest.raises(pgmem.InvalidInput):
            client.messages.newest("board", **bad)  # type: ignore[arg-type]


async def test_the_async_client_has_the_same_store_api(aclient: pgmem.AsyncClient) -> None:
    assert await aclient.stores.register("convo", "blackboard", {}) == "blackboard"
    await aclient.messages.add_many("m", [Message(id=f"a{i}", content=f"item {i}") for i in range(3)])
    assert [m.id for m in await aclient.messages.newest("m", 2)] == ["a2", "a1"]
    assert await aclient.messages.delete_many("m", ["a0"]) == 1
