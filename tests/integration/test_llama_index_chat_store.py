"""LlamaIndex's chat stores on pgmem: the scenarios of LlamaIndex's Postgres chat-store tests, its
SQLAlchemyChatStore tests (test_sql.py) and its Memory tests, run against PgmemChatStore and
PgmemDBChatStore."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import subprocess
import sys
from typing import Any

import psycopg
import pytest

import pgmem
from tests.conftest import table_counts

pytest.importorskip("llama_index.core", reason="LlamaIndex is not installed: pip install 'pgmem[llama-index]'")

from llama_index.core.base.llms.types import ImageBlock, TextBlock  # noqa: E402
from llama_index.core.llms import ChatMessage, MessageRole  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from llama_index.core.storage.chat_store.base import BaseChatStore  # noqa: E402
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus  # noqa: E402

from pgmem.integrations.llama_index import PgmemChatStore, PgmemDBChatStore  # noqa: E402

ACTIVE, ARCHIVED = MessageStatus.ACTIVE, MessageStatus.ARCHIVED


def msg(text: str, role: MessageRole = MessageRole.USER, **kwargs: Any) -> ChatMessage:
    return ChatMessage(role=role, content=text, additional_kwargs=kwargs)


def rich() -> list[ChatMessage]:
    return [
        ChatMessage(role=MessageRole.SYSTEM, content="be brief"),
        ChatMessage(
            role=MessageRole.USER,
            blocks=[
                TextBlock(text="what is"),
                ImageBlock(image=base64.b64encode(b"\x89PNG fake"), image_mimetype="image/png"),
                TextBlock(text="this? 🌍"),
            ],
        ),
        ChatMessage(
            role=MessageRole.ASSISTANT,
            content="",
            additional_kwargs={"tool_calls": [{"id": "call_1", "function": {"name": "look", "arguments": "{}"}}]},
        ),
        ChatMessage(
            role=MessageRole.TOOL, content="a cat", additional_kwargs={"tool_call_id": "call_1", "name": "look"}
        ),
        ChatMessage(role=MessageRole.ASSISTANT, content="A cat.", additional_kwargs={"score": 0.5, "n": [1, None]}),
    ]


def texts(messages: list[ChatMessage] | None) -> list[str | None]:
    return [m.content for m in messages or []]


# -- PgmemChatStore (BaseChatStore) ---------------------------------------------------------------------------


def test_chat_store_round_trip_and_columns(client: pgmem.Client, dsn: str) -> None:
    store = PgmemChatStore(client=client)
    assert isinstance(store, BaseChatStore)
    assert store.get_messages("k") == []
    sent = rich()
    store.set_messages("k", sent)
    assert store.get_messages("k") == sent
    with psycopg.connect(dsn) as conn:
        stored = conn.execute(
            """SELECT e.memory, m.role, m.content, m.name, m.tool_call_id FROM pgmem.memory_entries e
               JOIN pgmem.messages m ON m.namespace = e.namespace AND m.id = e.message_id ORDER BY e.seq"""
        ).fetchall()
    assert [r[1] for r in stored] == ["system", "user", "assistant", "tool", "assistant"]
    assert stored[1][2] == "what is\nthis? 🌍"
    assert stored[3][3:] == ("look", "call_1")
    assert {r[0] for r in stored} == {"llamaindex:k"}


def test_chat_store_operations(client: pgmem.Client) -> None:
    store = PgmemChatStore(client=client)
    store.set_messages("k", [msg("a"), msg("b")])
    store.add_message("k", msg("c"))
    store.add_message("k", msg("c"))  # duplicates append
    assert texts(store.get_messages("k")) == ["a", "b", "c", "c"]
    store.set_messages("k", [msg("x"), msg("y"), msg("z"), msg("w")])  # replaces
    assert texts(store.get_messages("k")) == ["x", "y", "z", "w"]
    assert texts([store.delete_message("k", 1)]) == ["y"]  # type: ignore[list-item]
    assert texts([store.delete_message("k", -1)]) == ["w"]  # type: ignore[list-item]
    assert store.delete_message("k", 7) is None
    assert texts([store.delete_last_message("k")]) == ["z"]  # type: ignore[list-item]
    store.add_message("other key", msg("o"))
    assert store.get_keys() == ["k", "other key"]
    assert texts(store.delete_messages("k")) == ["x"]
    assert store.delete_messages("k") is None
    assert store.delete_last_message("k") is None
    assert store.get_keys() == ["other key"]
    store.set_messages("other key", [])
    assert store.get_keys() == []


@pytest.mark.parametrize("key", ["user_1", "with spaces", "ünïcødé 会话 🌍", "#hash", "k" * 200, "a\nb"])
def test_any_chat_key(client: pgmem.Client, key: str) -> None:
    store = PgmemChatStore(client=client)
    store.add_message(key, msg(key))
    store.add_message(key[:-1] + "?", msg("neighbour"))
    assert texts(store.get_messages(key)) == [key]
    assert key in store.get_keys()
    assert key[:-1] + "?" in store.get_keys()


@pytest.mark.parametrize("key", ["", "k" * 201, "nul\x00"])
def test_bad_chat_keys(client: pgmem.Client, key: str) -> None:
    with pytest.raises(pgmem.InvalidInput):
        PgmemChatStore(client=client).add_message(key, msg("x"))


class Opaque:
    pass


@pytest.mark.parametrize(
    "bad",
    [
        msg("nul \x00"),
        msg("nan", score=math.nan),
        msg("inf", score=math.inf),
        msg("object", thing=Opaque()),
        msg("y" * (1 << 20)),
    ],
)
def test_bad_messages_write_nothing(client: pgmem.Client, dsn: str, bad: ChatMessage) -> None:
    store = PgmemChatStore(client=client)
    store.set_messages("k", [msg("before")])
    counts = table_counts(dsn)
    with pytest.raises(pgmem.InvalidInput):
        store.set_messages("k", [msg("fine"), bad])
    with pytest.raises(pgmem.InvalidInput):
        store.add_message("k", bad)
    assert table_counts(dsn) == counts
    assert texts(store.get_messages("k")) == ["before"]  # a failed set_messages keeps the old ones


async def test_chat_store_async_twins(client: pgmem.Client, aclient: pgmem.AsyncClient) -> None:
    for store in (PgmemChatStore(client=client), PgmemChatStore(async_client=aclient)):
        await store.aset_messages("k", rich())
        assert await store.aget_messages("k") == rich()
        await store.async_add_message("k", msg("more"))
        assert texts([await store.adelete_message("k", 0)]) == ["be brief"]  # type: ignore[list-item]
        assert texts([await store.adelete_last_message("k")]) == ["more"]  # type: ignore[list-item]
        assert await store.aget_keys() == ["k"]
        assert len(await store.adelete_messages("k") or []) == 4
        assert await store.aget_keys() == []


def test_chat_store_from_uri(dsn: str) -> None:
    store = PgmemChatStore.from_uri(dsn, namespace="elsewhere")
    try:
        store.add_message("k", msg("hi"))
        assert texts(store.get_messages("k")) == ["hi"]
    finally:
        store.close()
    with pgmem.connect(dsn, namespace="elsewhere") as client:
        assert client.messages.count("llamaindex:k") == 1


def test_sync_wrappers_on_fresh_loops(client: pgmem.Client) -> None:
    store = PgmemChatStore(client=client)
    asyncio.run(store.async_add_message("k", msg("one")))
    asyncio.run(store.async_add_message("k", msg("two")))
    assert texts(asyncio.run(store.aget_messages("k"))) == ["one", "two"]


@pytest.mark.slow
def test_concurrent_delete_last_from_processes(client: pgmem.Client, dsn: str) -> None:
    store = PgmemChatStore(client=client)
    count = 200
    store.set_messages("shared", [msg(f"m{i}") for i in range(count)])
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.integration.session_workers", "llama", dsn, "shared"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    deleted: list[str] = []
    for worker in workers:
        out, _ = worker.communicate(timeout=120)
        assert worker.returncode == 0
        deleted += [json.loads(line) for line in out.splitlines()]
    assert sorted(deleted) == sorted(f"m{i}" for i in range(count))


def test_without_llama_index_the_import_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['llama_index.core'] = None\n"
        "try:\n    import pgmem.integrations.llama_index\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pgmem[llama-index]" in out


# -- PgmemDBChatStore (AsyncDBChatStore) ------------------------------------------------------------------------


@pytest.fixture(params=["client", "async_client"])
def db_store(request: pytest.FixtureRequest, client: pgmem.Client, aclient: pgmem.AsyncClient) -> PgmemDBChatStore:
    if request.param == "client":
        return PgmemDBChatStore(client=client)
    return PgmemDBChatStore(async_client=aclient)


async def test_db_store_statuses(db_store: PgmemDBChatStore, dsn: str) -> None:
    store = db_store
    assert isinstance(store, AsyncDBChatStore)
    await store.add_messages("k", [msg(f"m{i}") for i in range(6)])
    await store.add_message("k", msg("m6"))
    assert await store.count_messages("k") == 7
    assert texts(await store.archive_oldest_messages("k", 3)) == ["m0", "m1", "m2"]
    assert texts(await store.get_messages("k")) == ["m3", "m4", "m5", "m6"]
    assert texts(await store.get_messages("k", status=ARCHIVED)) == ["m0", "m1", "m2"]
    assert texts(await store.get_messages("k", status=None)) == [f"m{i}" for i in range(7)]
    assert texts(await store.get_messages("k", status=None, offset=2, limit=3)) == ["m2", "m3", "m4"]
    assert texts(await store.get_messages("k", limit=2)) == ["m3", "m4"]
    assert texts(await store.get_messages("k", offset=3)) == ["m6"]
    assert await store.count_messages("k", status=ARCHIVED) == 3
    assert await store.count_messages("k", status=None) == 7
    with psycopg.connect(dsn) as conn:  # archived entries were moved: seven message rows, no copies
        assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (7,)
    assert texts([await store.delete_message("k", 1)]) == ["m4"]  # type: ignore[list-item]
    assert await store.delete_message("k", 10) is None
    assert texts(await store.delete_oldest_messages("k", 1)) == ["m3"]
    assert await store.get_keys() == ["k"]
    await store.delete_messages("k", status=ACTIVE)
    assert await store.count_messages("k", status=None) == 3
    assert await store.get_keys() == ["k"]  # archived messages keep the key
    await store.delete_messages("k")
    assert await store.count_messages("k", status=None) == 0
    assert await store.get_keys() == []
    assert await store.archive_oldest_messages("k", 2) == []


async def test_db_store_set_and_round_trip(db_store: PgmemDBChatStore) -> None:
    store = db_store
    await store.add_messages("k", [msg("old")])
    await store.archive_oldest_messages("k", 1)
    await store.set_messages("k", rich())
    assert await store.get_messages("k", status=None) == rich()  # set replaces both statuses
    await store.set_messages("k", [msg("archived one")], status=ARCHIVED)
    assert await store.get_messages("k") == []
    assert texts(await store.get_messages("k", status=ARCHIVED)) == ["archived one"]
    await store.add_messages("k", [])
    with pytest.raises(pgmem.InvalidInput):
        await store.add_messages("k", [msg("ok"), msg("bad \x00")])
    assert await store.count_messages("k", status=None) == 1


@pytest.mark.parametrize("key", ["spaces in key", "#x", "ключ 🌍"])
async def test_db_store_keys(client: pgmem.Client, key: str) -> None:
    store = PgmemDBChatStore(client=client)
    await store.add_messages(key, [msg("1"), msg("2")])
    await store.archive_oldest_messages(key, 2)
    assert await store.get_keys() == [key]
    assert texts(await store.get_messages(key, status=ARCHIVED)) == ["1", "2"]


def words(text: str) -> list[str]:
    return text.split()


def test_memory_from_defaults_sync(client: pgmem.Client) -> None:
    """LlamaIndex's Memory on the store: its sync methods start a fresh event loop per call."""
    store = PgmemDBChatStore(client=client)
    memory = Memory.from_defaults(
        session_id="user 1", chat_store=store, chat_history=[msg("start")], tokenizer_fn=words, token_limit=40
    )
    memory.put(msg("hello there", MessageRole.USER))
    memory.put_messages([msg("general kenobi", MessageRole.ASSISTANT), msg("you are a bold one")])
    assert texts(memory.get_all()) == ["start", "hello there", "general kenobi", "you are a bold one"]
    assert texts(memory.get()) == ["start", "hello there", "general kenobi", "you are a bold one"]
    memory.set([msg("replaced")])
    assert texts(memory.get_all()) == ["replaced"]
    memory.reset()
    assert memory.get_all() == []


async def test_memory_flushes_old_messages_to_the_archive(client: pgmem.Client, aclient: pgmem.AsyncClient) -> None:
    for store in (PgmemDBChatStore(client=client), PgmemDBChatStore(async_client=aclient)):
        memory = Memory.from_defaults(
            session_id="flush", chat_store=store, tokenizer_fn=words, token_limit=20, token_flush_size=10
        )
        for i in range(12):
            await memory.aput(msg(f"message number {i} with some words"))
        await memory.aget()
        archived = await store.count_messages("flush", status=ARCHIVED)
        active = await store.count_messages("flush", status=ACTIVE)
        assert archived > 0 and active > 0 and archived + active == 12
        assert texts(await store.get_messages("flush", status=None)) == [
            f"message number {i} with some words" for i in range(12)
        ]
        await memory.areset()
