"""Defects found running the frameworks' own test suites against the adapters (issue 33, item 6), each
against a real server: LangGraph's store (no ``validate_op_namespace`` before langgraph-checkpoint 4.3,
items put with ``index=False`` in a query search, a half-built ``AsyncPgmemStore``), the Agents SDK's
session (default ``SessionSettings``, a ``set`` in an item) and LlamaIndex's chat store rebuilt from its
``model_dump()``."""

from __future__ import annotations

import gc
import json
import warnings
from datetime import datetime
from typing import Any

import pytest

import pgmem

pytest.importorskip("langgraph.store.base", reason="LangGraph is not installed: pip install 'pgmem[langgraph]'")
pytest.importorskip("agents.memory", reason="the Agents SDK is not installed: pip install 'pgmem[openai-agents]'")
pytest.importorskip("llama_index.core", reason="LlamaIndex is not installed: pip install 'pgmem[llama-index]'")

from agents.memory import SessionSettings, SQLiteSession  # noqa: E402
from langgraph.store.base import InvalidNamespaceError, PutOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402
from llama_index.core.llms import ChatMessage  # noqa: E402

from pgmem.integrations.langgraph import AsyncPgmemStore, InvalidNamespace, PgmemStore  # noqa: E402
from pgmem.integrations.langgraph import _ops as ops_module  # noqa: E402
from pgmem.integrations.llama_index import PgmemChatStore, PgmemDBChatStore  # noqa: E402
from pgmem.integrations.openai_agents import PgmemSession  # noqa: E402
from tests.integration.test_langgraph_store import LetterEmbeddings  # noqa: E402

# -- 1. LangGraph's validate_op_namespace (langgraph-checkpoint >= 4.3) ------------------------------------


@pytest.mark.parametrize("has_langgraph_check", [True, False])
def test_namespaces_are_checked_without_langgraphs_validate_op_namespace(
    client: pgmem.Client, monkeypatch: pytest.MonkeyPatch, has_langgraph_check: bool
) -> None:
    if not has_langgraph_check:  # as on langgraph-checkpoint 4.1 and 4.2
        monkeypatch.setattr(ops_module, "_langgraph_validate", None)
    store = PgmemStore(client)
    for bad in (("a.b",), ("",), ("a", "x\x00y"), ("a", 1)):
        with pytest.raises(InvalidNamespace) as caught:
            store.batch([PutOp(bad, "k", {"v": 1})])  # type: ignore[arg-type]
        assert isinstance(caught.value, InvalidNamespaceError) and isinstance(caught.value, pgmem.InvalidInput)
    store.batch([PutOp(("a", "b"), "k", {"v": 1})])
    assert store.get(("a", "b"), "k").value == {"v": 1}  # type: ignore[union-attr]


# -- 3. a query search returns the items put with index=False after the scored ones ------------------------


def _fill(store: Any) -> None:
    for i in range(4):
        store.put(("docs",), f"scored{i}", {"text": f"apple {'x' * i}"})
    for i in range(3):
        store.put(("docs",), f"plain{i}", {"text": f"apple {i}"}, index=False)


def _page(store: Any, limit: int, offset: int) -> list[tuple[str, bool]]:
    return [(h.key, h.score is None) for h in store.search(("docs",), query="apple", limit=limit, offset=offset)]


def test_query_search_returns_unindexed_items_after_the_scored_ones(client: pgmem.Client) -> None:
    embeddings = LetterEmbeddings()
    index: Any = {"dims": embeddings.dims, "embed": embeddings}
    ours, theirs = PgmemStore(client, index=index), InMemoryStore(index=index)
    ours.setup()
    _fill(ours)
    _fill(theirs)
    everything = _page(ours, 10, 0)
    assert everything[:4] == _page(theirs, 10, 0)[:4] and all(not unscored for _, unscored in everything[:4])
    assert sorted(everything[4:]) == sorted(_page(theirs, 10, 0)[4:]) == [(f"plain{i}", True) for i in range(3)]
    assert [k for k, _ in everything[4:]] == ["plain2", "plain1", "plain0"]  # newest first
    # Pages starting among the scored items are InMemoryStore's; every page is a slice of the whole.
    for limit, offset in ((4, 0), (3, 2), (2, 3), (5, 1), (3, 4), (2, 5), (3, 7), (1, 6)):
        assert _page(ours, limit, offset) == everything[offset : offset + limit], (limit, offset)
        if offset <= 4:
            assert len(_page(theirs, limit, offset)) == len(everything[offset : offset + limit])
    # Filters apply to the unscored items too; a store without an index scores nothing, as before.
    hits = ours.search(("docs",), query="apple", filter={"text": "apple 1"})
    assert [(h.key, h.score) for h in hits] == [("plain1", None)]
    assert all(h.score is None for h in PgmemStore(client).search(("docs",), query="apple"))


async def test_async_query_search_returns_unindexed_items(aclient: pgmem.AsyncClient) -> None:
    embeddings = LetterEmbeddings()
    store = AsyncPgmemStore(aclient, index={"dims": embeddings.dims, "embed": embeddings}, ttl={"default_ttl": 5})
    await store.setup()
    await store.aput(("docs",), "scored", {"text": "apple"})
    await store.aput(("docs",), "plain", {"text": "apple"}, index=False)
    hits = await store.asearch(("docs",), query="apple", refresh_ttl=True)
    assert [(h.key, h.score is None) for h in hits] == [("scored", False), ("plain", True)]
    assert [h.key for h in await store.asearch(("docs",), query="apple", offset=1)] == ["plain"]
    assert await store.asearch(("docs",), query="apple", offset=2) == []


# -- 4. an AsyncPgmemStore whose constructor raised ----------------------------------------------------------


async def test_a_half_built_async_store_is_collected_and_stopped_cleanly(aclient: pgmem.AsyncClient) -> None:
    def unraisable(_: Any) -> None:
        raise AssertionError("__del__ raised")

    for bad in ({"index": {"dims": 0, "embed": "x"}}, {"ttl": "not a dict"}):
        with pytest.raises(pgmem.InvalidInput):
            AsyncPgmemStore(aclient, **bad)
    with pytest.raises(pgmem.InvalidInput):
        AsyncPgmemStore(pgmem.Client.__new__(pgmem.Client))  # type: ignore[arg-type]
    half = AsyncPgmemStore.__new__(AsyncPgmemStore)
    assert await half.stop_ttl_sweeper() is True
    assert PgmemStore.__new__(PgmemStore).stop_ttl_sweeper() is True
    import sys

    old, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            half.__del__()
            del half
            gc.collect()
    finally:
        sys.unraisablehook = old


# -- 2, 5. the Agents SDK's session --------------------------------------------------------------------------


async def test_session_settings_default_as_the_sdks_sessions(client: pgmem.Client) -> None:
    session = PgmemSession("s", client=client)
    assert session.session_settings == SQLiteSession("s").session_settings == SessionSettings()
    await session.add_items([{"role": "user", "content": f"m{i}"} for i in range(3)])
    assert len(await session.get_items()) == 3  # SessionSettings().limit is None: everything
    assert PgmemSession("s", client=client, session_settings={"limit": 2}).session_settings.limit == 2


@pytest.mark.parametrize(
    "bad", [{"a", "b"}, frozenset({1}), datetime(2024, 1, 1), [{"nested": {1, 2}}], float("nan"), object()]
)
async def test_session_items_that_are_not_json_are_rejected(client: pgmem.Client, bad: Any) -> None:
    session = PgmemSession("s", client=client)
    good = {"role": "user", "content": "kept"}
    with pytest.raises(pgmem.InvalidInput, match="item 1 is not JSON"):
        await session.add_items([good, {"role": "user", "content": bad}])
    with pytest.raises((TypeError, ValueError)):  # what the SDK's own session does with it
        json.dumps({"content": bad}, allow_nan=False)
    assert await session.get_items() == []  # nothing written
    await session.add_items([good, {"role": "user", "content": ["a", ("t", 1)]}])
    assert len(await session.get_items()) == 2


# -- 6. LlamaIndex's chat store rebuilt from its model_dump() ------------------------------------------------


@pytest.mark.parametrize("cls", [PgmemChatStore, PgmemDBChatStore])
async def test_chat_store_dump_carries_the_namespace_and_rebuilding_needs_a_client(cls: Any, dsn: str) -> None:
    secret = pgmem.connect(dsn, namespace="tenant-a")
    other = pgmem.connect(dsn, namespace="tenant-b")
    try:
        store = cls(client=secret)
        dump = store.model_dump()
        assert dump["namespace"] == "tenant-a"
        assert dump["dsn"] == secret.conninfo and (dump["dsn"] is None or "***" in dump["dsn"] or ":" not in dsn)
        password = psycopg_password(dsn)
        if password:
            assert password not in json.dumps(dump) and password not in store.model_dump_json()
        with pytest.raises(pgmem.InvalidInput, match="namespace 'tenant-a'"):
            cls(**dump)
        if hasattr(cls, "from_dict"):  # BaseChatStore is a LlamaIndex BaseComponent; AsyncDBChatStore is not
            with pytest.raises(pgmem.InvalidInput, match="namespace 'tenant-a'"):
                cls.from_dict(store.to_dict())
        with pytest.raises(ValueError, match="namespace 'tenant-a'"):
            cls.model_validate(dump)
        # Rebuilt with a client of another namespace: the dumped namespace, sharing the client's pool.
        rebuilt = cls(client=other, **dump)
        assert rebuilt.model_dump() == dump
        message = ChatMessage(role="user", content="hello")
        if cls is PgmemChatStore:
            store.add_message("k", message)
            assert [m.content for m in rebuilt.get_messages("k")] == ["hello"]
        else:
            await store.add_message("k", message)
            assert [m.content for m in await rebuilt.get_messages("k")] == ["hello"]
        assert other.messages.count("llamaindex:k") == 0
        assert secret.messages.count("llamaindex:k") == 1
        # A store on the default client dumps no namespace and is rebuilt on the default client.
        assert cls().model_dump()["namespace"] is None and cls(**cls().model_dump()).namespace is None
    finally:
        secret.close()
        other.close()


def psycopg_password(dsn: str) -> str | None:
    from psycopg.conninfo import conninfo_to_dict

    value = conninfo_to_dict(dsn).get("password")
    return value if isinstance(value, str) and value else None
