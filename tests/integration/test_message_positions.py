"""The message repository's operations for framework adapters: stored payloads read as JSON, deletes by
position, taking the oldest, and moving entries between memories, sync and async."""

from __future__ import annotations

import psycopg
import pytest

import pgmem


def add(client: pgmem.Client, memory: str, *contents: str, field: str = "obj") -> None:
    client.messages.add_many(
        memory, [pgmem.Message(content=c, role="user", metadata={field: {"text": c}}) for c in contents]
    )


def contents(client: pgmem.Client, memory: str) -> list[str]:
    return [m.content for m in client.messages.last(memory)]


def test_payloads_last_and_page(client: pgmem.Client) -> None:
    add(client, "chat", "a", "b", "c", "d")
    repo = client.messages
    assert repo.payloads("chat", "obj") == [{"text": t} for t in "abcd"]
    assert repo.payloads("chat", "obj", last=2) == [{"text": "c"}, {"text": "d"}]
    assert repo.payloads("chat", "obj", last=0) == [{"text": t} for t in "abcd"]
    assert repo.payloads("chat", "obj", offset=1, limit=2) == [{"text": "b"}, {"text": "c"}]
    assert repo.payloads("chat", "obj", offset=9) == []
    assert repo.payloads("nothing-here", "obj") == []
    # A message without the field stands in as role and content.
    client.messages.add("chat", pgmem.Message(content="plain", role="assistant"))
    assert repo.payloads("chat", "obj", last=1) == [{"role": "assistant", "content": "plain"}]
    with pytest.raises(pgmem.InvalidInput):
        repo.payloads("chat", "obj", last=1, offset=1)
    with pytest.raises(pgmem.InvalidInput):
        repo.payloads("chat", "", last=1)
    with pytest.raises(pgmem.InvalidInput):
        repo.payloads("chat", "obj", limit=-1)


def test_payloads_of_two_memories_merge_in_order(client: pgmem.Client) -> None:
    add(client, "active", "1", "2", "3", "4", "5")
    assert [m.content for m in client.messages.move_oldest("active", "archived", 2)] == ["1", "2"]
    add(client, "active", "6")
    assert contents(client, "archived") == ["1", "2"]
    assert contents(client, "active") == ["3", "4", "5", "6"]
    merged = client.messages.payloads("active", "obj", merged_with="archived")
    assert [p["text"] for p in merged] == ["1", "2", "3", "4", "5", "6"]
    page = client.messages.payloads("active", "obj", merged_with="archived", offset=1, limit=3)
    assert [p["text"] for p in page] == ["2", "3", "4"]
    # The messages were moved, not copied.
    with psycopg.connect(client.conninfo or "") as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (6,)


def test_move_oldest_edge_cases(client: pgmem.Client) -> None:
    assert client.messages.move_oldest("empty", "elsewhere", 3) == []
    add(client, "m", "x")
    assert client.messages.move_oldest("m", "n", 0) == []
    assert [m.content for m in client.messages.move_oldest("m", "n", 10)] == ["x"]
    assert client.messages.count("m") == 0
    with pytest.raises(pgmem.InvalidInput):
        client.messages.move_oldest("m", "m", 1)
    with pytest.raises(pgmem.InvalidInput):
        client.messages.move_oldest("m", "bad key", 1)


def test_delete_at(client: pgmem.Client) -> None:
    add(client, "m", "a", "b", "c", "d")
    assert (gone := client.messages.delete_at("m", 1)) is not None and gone.content == "b"
    assert (gone := client.messages.delete_at("m", -1)) is not None and gone.content == "d"
    assert client.messages.delete_at("m", 5) is None
    assert client.messages.delete_at("m", -3) is None
    assert contents(client, "m") == ["a", "c"]
    with pytest.raises(pgmem.InvalidInput):
        client.messages.delete_at("m", True)
    with psycopg.connect(client.conninfo or "") as conn:  # the rows went with their entries
        assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (2,)


def test_delete_oldest(client: pgmem.Client) -> None:
    add(client, "m", "a", "b", "c")
    assert [m.content for m in client.messages.delete_oldest("m", 2)] == ["a", "b"]
    assert client.messages.delete_oldest("m", 0) == []
    assert [m.content for m in client.messages.delete_oldest("m", 5)] == ["c"]
    assert client.messages.delete_oldest("m", 1) == []


def test_memories_by_prefix(client: pgmem.Client) -> None:
    add(client, "app:one", "x")
    add(client, "app:two", "y")
    add(client, "other", "z")
    client.messages.clear("app:two")
    assert client.messages.memories(prefix="app:") == ["app:one", "app:two"]
    assert client.messages.memories(prefix="app:", nonempty=True) == ["app:one"]
    assert client.messages.memories(nonempty=True) == ["app:one", "other"]
    assert client.messages.memories() == ["app:one", "app:two", "other"]


async def test_async_twins(aclient: pgmem.AsyncClient) -> None:
    repo = aclient.messages
    await repo.add_many("m", [pgmem.Message(content=c, metadata={"o": c}) for c in "abcde"])
    assert await repo.payloads("m", "o", last=3) == ["c", "d", "e"]
    assert (gone := await repo.delete_at("m", 0)) is not None and gone.content == "a"
    assert [m.content for m in await repo.delete_oldest("m", 1)] == ["b"]
    assert [m.content for m in await repo.move_oldest("m", "arch", 1)] == ["c"]
    assert await repo.payloads("m", "o", merged_with="arch") == ["c", "d", "e"]
    assert await repo.memories(prefix="ar") == ["arch"]
