"""LangGraph's BaseStore on pgmem: the scenarios of LangGraph's own Postgres store tests
(libs/checkpoint-postgres/tests/test_store.py, test_async_store.py), run against PgmemStore and
AsyncPgmemStore, and the properties pgmem adds (exact pages at any depth, whole-label prefixes, TTL
refresh, all-or-nothing batches, concurrent writers in real processes)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgmem
from tests.conftest import table_counts

pytest.importorskip("langgraph.store.base", reason="LangGraph is not installed: pip install 'pgmem[langgraph]'")

from langchain_core.embeddings import Embeddings  # noqa: E402
from langgraph.store.base import (  # noqa: E402
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from pgmem.integrations.langgraph import AsyncPgmemStore, InvalidNamespace, PgmemStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class LetterEmbeddings(Embeddings):
    """Deterministic embeddings for tests: the letters of a text counted into ``dims`` buckets (texts
    sharing letters are close), plus a constant so that no vector is zero; ``unit``: divided by their
    length (as LangGraph's tests embed for every ``distance_type``)."""

    def __init__(self, dims: int = 64, unit: bool = False) -> None:
        self.dims = dims
        self.calls = 0
        self.unit = unit

    def _one(self, text: str) -> list[float]:
        v = [0.0] * self.dims
        v[0] = 0.1
        for c in text.lower():
            v[ord(c) % self.dims] += 1.0
        length = math.sqrt(sum(x * x for x in v)) if self.unit else 1.0
        return [x / length for x in v]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


class Either:
    """One store's API as coroutines, whichever the flavour: ``await s.put(...)`` runs ``put`` of a
    PgmemStore or ``aput`` of an AsyncPgmemStore."""

    def __init__(self, store: PgmemStore | AsyncPgmemStore) -> None:
        self.store = store
        self.is_async = isinstance(store, AsyncPgmemStore)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        async def run(*args: Any, **kwargs: Any) -> Any:
            if self.is_async:
                method = "abatch" if name == "batch" else "a" + name
                return await getattr(self.store, method)(*args, **kwargs)
            return getattr(self.store, name)(*args, **kwargs)

        return run


@pytest.fixture(params=["sync", "async"])
async def make(request: pytest.FixtureRequest, dsn: str) -> AsyncIterator[Callable[..., Any]]:
    """Build stores of the test's flavour on the test's database (closed afterwards)."""
    opened: list[Any] = []

    async def build(**kwargs: Any) -> Either:
        if request.param == "sync":
            client: Any = pgmem.connect(dsn, namespace=kwargs.pop("namespace", "test"), max_size=4)
            opened.append(client)
            store: Any = PgmemStore(client, **kwargs)
            store.setup()
        else:
            client = await pgmem.aconnect(dsn, namespace=kwargs.pop("namespace", "test"), max_size=4)
            opened.append(client)
            store = AsyncPgmemStore(client, **kwargs)
            await store.setup()
        return Either(store)

    yield build
    for client in opened:
        if isinstance(client, pgmem.AsyncClient):
            await client.close()
        else:
            client.close()


@pytest.fixture
async def store(make: Callable[..., Any]) -> Either:
    return await make()


@pytest.fixture
def embeddings() -> LetterEmbeddings:
    return LetterEmbeddings()


@pytest.fixture(params=["cosine", "l2", "inner_product"])
async def vstore(request: pytest.FixtureRequest, make: Callable[..., Any], embeddings: LetterEmbeddings) -> Either:
    """A store with an index, for each of LangGraph's distance types (unit vectors for l2 and inner
    product, as in LangGraph's tests; test_store_distances.py compares scores on unnormalised ones)."""
    embeddings.unit = request.param != "cosine"
    index = {"dims": embeddings.dims, "embed": embeddings, "distance_type": request.param}
    return await make(index=index, ttl={"default_ttl": 2})


# -- LangGraph's scenarios: batches, basic operations, namespaces, search ------------------------------------


async def test_batch_order(store: Either) -> None:
    await store.put(("test", "foo"), "key1", {"data": "value1"})
    await store.put(("test", "bar"), "key2", {"data": "value2"})
    results = await store.batch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key2", {"data": "value2"}),
            SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(("test",), "key3"),
        ]
    )
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"} and results[0].key == "key1"
    assert results[1] is None
    assert [i.key for i in results[2]] == ["key1"]
    assert results[3] == [("test", "bar"), ("test", "foo")]
    assert results[4] is None

    results = await store.batch(
        [
            SearchOp(("test",), filter=None, limit=5, offset=0),
            GetOp(("test", "bar"), "key2"),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
            PutOp(("test",), "key3", {"data": "value3"}),
            GetOp(("test", "foo"), "key1"),
        ]
    )
    assert len(results[0]) == 2  # reads run before the batch's writes
    assert results[1].value == {"data": "value2"}
    assert results[2] == [("test", "bar"), ("test", "foo")]
    assert results[3] is None
    assert results[4].value == {"data": "value1"}
    assert (await store.get(("test",), "key3")).value == {"data": "value3"}


async def test_batch_get_put_and_delete(store: Either) -> None:
    results = await store.batch(
        [
            PutOp(("test",), "key1", {"data": "value1"}),
            PutOp(("test",), "key2", {"data": "value2"}),
            PutOp(("test",), "key3", None),
        ]
    )
    assert results == [None, None, None]
    got = await store.batch([GetOp(("test",), "key1"), GetOp(("test",), "key2"), GetOp(("test",), "key3")])
    assert [g.key if g else None for g in got] == ["key1", "key2", None]
    assert len(await store.search(("test",), limit=10)) == 2


async def test_batch_search_ops(store: Either) -> None:
    for ns, key, value in [
        (("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
        (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
        (("test", "baz"), "key3", {"data": "value3", "tag": "b"}),
    ]:
        await store.put(ns, key, value)
    results = await store.batch(
        [
            SearchOp(("test",), filter={"tag": "a"}, limit=10, offset=0),
            SearchOp(("test",), filter=None, limit=2, offset=0),
            SearchOp(("test", "foo"), filter=None, limit=10, offset=0),
        ]
    )
    assert sorted(i.key for i in results[0]) == ["key1", "key2"]
    assert len(results[1]) == 2
    assert [(i.namespace, i.key) for i in results[2]] == [(("test", "foo"), "key1")]


async def test_basic_operations(store: Either) -> None:
    ns = ("test", "documents")
    await store.put(ns, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = await store.get(ns, "doc1")
    assert (item.namespace, item.key, item.value) == (
        ns,
        "doc1",
        {"title": "Test Document", "content": "Hello, World!"},
    )
    await asyncio.sleep(0.01)
    await store.put(ns, "doc1", {"title": "Updated"})
    updated = await store.get(ns, "doc1")
    assert updated.value == {"title": "Updated"}
    assert updated.updated_at > item.updated_at and updated.created_at == item.created_at
    assert await store.get(("test", "other_documents"), "doc1") is None
    await store.delete(ns, "doc1")
    assert await store.get(ns, "doc1") is None


async def test_list_namespaces(store: Either) -> None:
    namespaces = [
        ("test", "documents", "public"),
        ("test", "documents", "private"),
        ("test", "images", "public"),
        ("test", "images", "private"),
        ("prod", "documents", "public"),
        ("prod", "documents", "private"),
    ]
    for ns in namespaces:
        await store.put(ns, "dummy", {"content": "dummy"})
    assert await store.list_namespaces() == sorted(namespaces)
    assert await store.list_namespaces(prefix=("test",)) == sorted(n for n in namespaces if n[0] == "test")
    assert await store.list_namespaces(suffix=("public",)) == sorted(n for n in namespaces if n[-1] == "public")
    assert await store.list_namespaces(max_depth=2) == [
        ("prod", "documents"),
        ("test", "documents"),
        ("test", "images"),
    ]
    assert await store.list_namespaces(prefix=("test", "*", "public")) == [
        ("test", "documents", "public"),
        ("test", "images", "public"),
    ]
    assert await store.list_namespaces(limit=3) == sorted(namespaces)[:3]
    assert await store.list_namespaces(limit=3, offset=3) == sorted(namespaces)[3:]
    results = await store.batch([ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("public",)),))])
    assert all(ns[-1] == "public" for ns in results[0])
    for ns in namespaces:
        await store.delete(ns, "dummy")
    assert await store.list_namespaces() == []


async def test_prefixes_match_whole_labels(store: Either) -> None:
    """``_``, ``%`` and newlines are literal; a prefix is a run of whole labels."""
    for ns in [("user_1",), ("userX1",), ("user_1x",), ("a%",), ("ab",), ("line\nbreak",), ("line",), ("*",)]:
        await store.put(ns, "k", {"ns": list(ns)})
    assert [i.namespace for i in await store.search(("user_1",))] == [("user_1",)]
    assert [i.namespace for i in await store.search(("a%",))] == [("a%",)]
    assert [i.namespace for i in await store.search(("line",))] == [("line",)]
    assert [i.namespace for i in await store.search(("*",))] == [("*",)]
    assert await store.list_namespaces(prefix=("user_1",)) == [("user_1",)]
    assert await store.list_namespaces(prefix=("line",)) == [("line",)]
    assert len(await store.list_namespaces(prefix=("*",))) == 8  # in list_namespaces "*" is any one label


async def test_search_filters_and_pages(store: Either) -> None:
    data = [
        (("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["important"]}),
        (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
        (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]}),
    ]
    for ns, key, value in data:
        await store.put(ns, key, value)
    assert len(await store.search(("test",))) == 3
    assert {i.key for i in await store.search(("test", "docs"))} == {"doc1", "doc2"}
    assert {i.key for i in await store.search(("test",), filter={"author": "Alice"})} == {"doc1", "img1"}
    assert [i.key for i in await store.search(("test",), filter={"tags": ["draft"]})] == ["doc2"]
    assert {i.key for i in await store.search(("test",), filter={"author": {"$ne": "Alice"}})} == {"doc2"}
    newest_first = [i.key for i in await store.search(("test",))]
    assert newest_first == ["img1", "doc2", "doc1"]
    assert [i.key for i in await store.search(("test",), limit=2)] == newest_first[:2]
    assert [i.key for i in await store.search(("test",), offset=2)] == newest_first[2:]
    assert all(i.score is None for i in await store.search(("test",)))


async def test_numeric_comparison_filters(store: Either) -> None:
    ns = ("test", "scores")
    for key, score in [("a", 2), ("b", 9), ("c", 10), ("d", 11)]:
        await store.put(ns, key, {"score": score})

    async def scores(filter: dict[str, Any]) -> list[Any]:
        return sorted(i.value["score"] for i in await store.search(ns, filter=filter))

    assert await scores({"score": {"$gte": 10}}) == [10, 11]
    assert await scores({"score": {"$gt": 9}}) == [10, 11]
    assert await scores({"score": {"$lt": 10}}) == [2, 9]
    assert await scores({"score": {"$lte": 9}}) == [2, 9]
    assert await scores({"score": {"$eq": 9}}) == [9]
    assert await scores({"score": {"$gt": 2, "$lt": 11}}) == [9, 10]
    await store.put(ns, "e", {"score": 9.5})
    assert await scores({"score": {"$gt": 9}}) == [9.5, 10, 11]
    await store.put(ns, "f", {"score": "12"})  # a string never compares with numbers
    assert await scores({"score": {"$gt": 9}}) == [9.5, 10, 11]
    names = ("test", "names")
    for key, name in [("a", "apple"), ("b", "banana")]:
        await store.put(names, key, {"name": name})
    assert [i.value["name"] for i in await store.search(names, filter={"name": {"$gt": "apple"}})] == ["banana"]
    await store.put(names, "c", {"other": 1})
    assert {i.key for i in await store.search(names, filter={"name": {"$ne": "apple"}})} == {"b", "c"}


# -- vector search ---------------------------------------------------------------------------------------


async def test_vector_store_keeps_the_index_config_as_given(
    make: Callable[..., Any], embeddings: LetterEmbeddings
) -> None:
    index = {"dims": embeddings.dims, "embed": embeddings, "ann_index_config": {"vector_type": "vector"}}
    s = await make(index=index)
    assert s.store.index_config is index and s.store.index_config["embed"] is embeddings
    for distance in ("cosine", "l2", "inner_product"):  # LangGraph's three (scores: test_store_distances.py)
        assert PgmemStore(None, index={**index, "distance_type": distance}).index_config["distance_type"] == distance
    for bad in ("hamming", "euclidean", None):
        with pytest.raises(ValueError, match="distance_type must be one of"):
            PgmemStore(None, index={**index, "distance_type": bad})


async def test_vector_insert_and_search(vstore: Either) -> None:
    docs = [
        ("doc1", {"text": "short text"}),
        ("doc2", {"text": "longer text document"}),
        ("doc3", {"text": "longest text document here"}),
        ("doc4", {"description": "text in description field"}),
        ("doc5", {"content": "text in content field"}),
        ("doc6", {"body": "text in body field"}),
    ]
    for key, value in docs:
        await vstore.put(("test",), key, value)
    results = await vstore.search(("test",), query="long text")
    keys = [r.key for r in results]
    assert "doc2" in keys and "doc3" in keys
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)


async def test_vector_update_and_index_false(vstore: Either) -> None:
    await vstore.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    await vstore.put(("test",), "doc2", {"text": "something about dogs"})
    await vstore.put(("test",), "doc3", {"text": "text about birds"})
    initial = await vstore.search(("test",), query="Zany Xerxes")
    assert initial[0].key == "doc1"
    await vstore.put(("test",), "doc1", {"text": "new text about dogs"})
    after = await vstore.search(("test",), query="Zany Xerxes")
    assert next(r.score for r in after if r.key == "doc1") < initial[0].score
    await vstore.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    assert all(r.key != "doc4" for r in await vstore.search(("test",), query="new text about dogs", limit=3))
    assert (await vstore.get(("test",), "doc4")).value == {"text": "new text about dogs"}


@pytest.mark.parametrize("refresh_ttl", [True, False])
async def test_vector_search_with_filters(vstore: Either, refresh_ttl: bool) -> None:
    docs = [
        ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
        ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
        ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
        ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
    ]
    for key, value in docs:
        await vstore.put(("test",), key, value)
    r = await vstore.search(("test",), query="apple", filter={"color": "red"}, refresh_ttl=refresh_ttl)
    assert [x.key for x in r][:1] == ["doc1"] and len(r) == 2
    r = await vstore.search(("test",), query="car", filter={"color": "red"}, refresh_ttl=refresh_ttl)
    assert [x.key for x in r][:1] == ["doc2"] and len(r) == 2
    r = await vstore.search(("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}}, refresh_ttl=refresh_ttl)
    assert [x.key for x in r][:1] == ["doc4"] and len(r) == 3
    r = await vstore.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
    assert [x.key for x in r] == ["doc3"]


async def test_vector_search_pages_and_edge_cases(vstore: Either) -> None:
    for i in range(5):
        await vstore.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    page1 = await vstore.search(("test",), query="test", limit=2)
    page2 = await vstore.search(("test",), query="test", limit=2, offset=2)
    everything = await vstore.search(("test",), query="test", limit=10)
    assert len(everything) == 5
    assert [r.key for r in page1 + page2] == [r.key for r in everything[:4]]
    for query in ("", None):
        hits = await vstore.search(("test",), query=query)
        assert len(hits) == 5 and all(h.score is None for h in hits)
    assert len(await vstore.search(("test",), query="test " * 100)) == 5
    assert len(await vstore.search(("test",), query="test!@#$%^&*()")) == 5


@pytest.mark.parametrize("distance", ["cosine", "inner_product"])
async def test_fields_give_one_vector_each_and_an_item_scores_as_its_best(
    make: Callable[..., Any], embeddings: LetterEmbeddings, dsn: str, distance: str
) -> None:
    embeddings.unit = True  # inner products of unit vectors: 1 for the same text, as cosine
    fields = ["key0", "key1", "key3"]
    s = await make(index={"dims": embeddings.dims, "embed": embeddings, "fields": fields, "distance_type": distance})
    await s.put(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})  # key0 missing: skipped
    await s.put(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
    with psycopg.connect(dsn) as conn:
        counts = dict(
            conn.execute(
                "SELECT i.key, count(*) FROM pgmem.item_vectors v JOIN pgmem.items i ON i.id = v.item_id GROUP BY 1"
            ).fetchall()
        )
    assert counts == {"doc1": 2, "doc2": 3}
    r = await s.search(("test",), query="xxx")
    assert len(r) == 2 and r[0].score == pytest.approx(r[1].score, abs=1e-6) == pytest.approx(1.0)
    r = await s.search(("test",), query="uuu")
    assert r[0].key == "doc2" and r[0].score > r[1].score
    r = await s.search(("test",), query="www")  # not indexed
    assert all(h.score < 0.99 for h in r)
    # index= on the put overrides the fields; [*] gives a vector per element
    await s.put(("test",), "doc3", {"key0": "aaa", "tags": ["ppp", "qqq"]}, index=["tags[*]"])
    r = await s.search(("test",), query="qqq", limit=1)
    assert r[0].key == "doc3" and r[0].score == pytest.approx(1.0)
    assert (await s.search(("test",), query="aaa", limit=1))[0].key != "doc3"


@pytest.mark.parametrize("distance", ["cosine", "l2", "inner_product"])
@pytest.mark.parametrize("query", ["aaa", "bbb", "abcd", "poisson"])
async def test_scores_are_those_of_the_distance(
    make: Callable[..., Any], embeddings: LetterEmbeddings, query: str, distance: str
) -> None:
    """LangGraph's test_scores: cosine similarity, inner product, negated Euclidean distance."""
    index = {"dims": embeddings.dims, "embed": embeddings, "fields": ["key0"], "distance_type": distance}
    s = await make(index=index)
    await s.put(("test",), "doc", {"key0": "aaa"}, index=["key0", "key1"])
    results = await s.search((), query=query)
    assert len(results) == 1
    a, b = embeddings.embed_query(query), embeddings.embed_query("aaa")
    expected = {
        "cosine": cosine(a, b),
        "inner_product": sum(x * y for x, y in zip(a, b, strict=True)),
        "l2": -math.dist(a, b),
    }[distance]
    assert results[0].score == pytest.approx(expected, rel=1e-5, abs=1e-5)


async def test_non_ascii(vstore: Either) -> None:
    texts = ["这是中文", "これは日本語です", "이건 한국어야", "Это русский", "यह रूसी है"]
    for i, text in enumerate(texts, start=1):
        await vstore.put(("user_123", "memories"), str(i), {"text": text})
    for i, text in enumerate(texts, start=1):
        assert (await vstore.search(("user_123", "memories"), query=text))[0].key == str(i)


async def test_one_embedding_call_per_batch(vstore: Either, embeddings: LetterEmbeddings) -> None:
    before = embeddings.calls
    await vstore.batch([PutOp(("test",), f"k{i}", {"text": f"doc {i}", "n": i}) for i in range(20)])
    assert embeddings.calls == before + 1


async def test_models_are_named_after_the_embedder(make: Callable[..., Any], dsn: str) -> None:
    a = await make(index={"dims": 16, "embed": LetterEmbeddings(16)})
    b = await make(index={"dims": 16, "embed": LetterEmbeddings(16), "model": "my-letters"})
    await a.put(("n",), "k", {"text": "hello"})
    await b.put(("n",), "k2", {"text": "hello"})
    with psycopg.connect(dsn) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM pgmem.embedding_models")}
    assert "my-letters" in names and any(n.startswith("langgraph:") and n.endswith(":16") for n in names)
    # b's vectors are another model's: k2 is unscored for a, after the scored items (as index=False items)
    assert [(h.key, h.score is None) for h in await a.search(("n",), query="hello")] == [("k", False), ("k2", True)]


# -- bad input and failures: nothing written -------------------------------------------------------------


class WrongSize(LetterEmbeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [v[:-1] for v in super().embed_documents(texts)]


async def test_bad_input_writes_nothing(vstore: Either, dsn: str) -> None:
    await vstore.put(("test",), "ok", {"text": "kept"})
    before = table_counts(dsn)
    bad_values: list[Any] = [
        {"x": float("nan")},
        {"x": "nul\x00"},
        {"x": object()},
        {"x": "\ud800"},
        {"x": "y" * (1 << 20)},
    ]
    for value in bad_values:
        with pytest.raises(pgmem.InvalidInput):
            await vstore.batch([PutOp(("test",), "a", {"text": "fine"}), PutOp(("test",), "b", value)])
    with pytest.raises(pgmem.InvalidInput):
        await vstore.batch([PutOp(("test",), "a", {"text": "fine"}), PutOp(("test",), "nul\x00key", {"t": 1})])
    with pytest.raises(pgmem.InvalidInput):
        await vstore.batch([PutOp(("test",), "a", {"text": "fine"}), PutOp(("test",), "b", ["not", "a", "dict"])])
    with pytest.raises(pgmem.InvalidInput):
        await vstore.put(("test",), "a", {"text": "fine"}, ttl=float("inf"))
    with pytest.raises(InvalidNamespace) as caught:
        await vstore.batch([PutOp(("test",), "a", {"text": "fine"}), PutOp(("bad.label",), "b", {"t": 1})])
    assert isinstance(caught.value, InvalidNamespaceError) and isinstance(caught.value, pgmem.InvalidInput)
    with pytest.raises(pgmem.InvalidInput, match="operator"):
        await vstore.search(("test",), filter={"x": {"$regex": "a"}})
    assert table_counts(dsn) == before


async def test_wrong_dimension_is_an_embedding_error_and_writes_nothing(make: Callable[..., Any], dsn: str) -> None:
    s = await make(index={"dims": 16, "embed": WrongSize(16)})
    before = table_counts(dsn)
    with pytest.raises(pgmem.EmbeddingError, match="16"):
        await s.batch([PutOp(("test",), "a", {"text": "one"}), PutOp(("test",), "b", {"text": "two"})])
    assert table_counts(dsn) == before


# -- TTL ---------------------------------------------------------------------------------------------------


def _expiry(dsn: str, key: str) -> tuple[Any, Any, Any]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT expires_at, updated_at, ttl_minutes FROM pgmem.items WHERE key = %s", (key,)
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def _age(dsn: str, key: str, minutes: float) -> None:
    """Move an item's expiry ``minutes`` into the past (time passing, without sleeping)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE pgmem.items SET expires_at = expires_at - make_interval(secs => %s) WHERE key = %s",
            (minutes * 60, key),
        )


async def test_ttl_refresh_on_read_extends_expiry_only(store: Either, dsn: str) -> None:
    await store.put(("t",), "item", {"v": 1}, ttl=10)
    expires, updated, ttl = _expiry(dsn, "item")
    assert ttl == 10 and timedelta(minutes=9) < expires - updated <= timedelta(minutes=10, seconds=1)
    _age(dsn, "item", 5)
    aged, _, _ = _expiry(dsn, "item")
    await store.get(("t",), "item", refresh_ttl=False)
    assert _expiry(dsn, "item")[0] == aged
    await store.get(("t",), "item")  # refresh_on_read defaults to True
    refreshed, updated_after, _ = _expiry(dsn, "item")
    assert refreshed > aged + timedelta(minutes=4) and updated_after == updated
    _age(dsn, "item", 5)
    aged, _, _ = _expiry(dsn, "item")
    await store.search(("t",), refresh_ttl=True)
    assert _expiry(dsn, "item")[0] > aged + timedelta(minutes=4)
    _age(dsn, "item", 20)  # expired now: a read never brings it back
    expired, _, _ = _expiry(dsn, "item")
    await store.get(("t",), "item")
    await store.search(("t",))
    assert _expiry(dsn, "item")[0] == expired
    await store.put(("t",), "no-ttl", {"v": 2})
    assert _expiry(dsn, "no-ttl")[0] is None


async def test_a_vector_search_refreshes_the_ttl_of_its_hits_only(vstore: Either, dsn: str) -> None:
    """The refresh is a statement of its own after the read: it extends the hits' expiry, only theirs,
    never an expired one's, and a store's search of items without a TTL writes nothing."""
    await vstore.put(("v",), "hit", {"text": "apple"})  # default_ttl 2 minutes
    await vstore.put(("v",), "other", {"text": "zebra"})
    await vstore.put(("v",), "forever", {"text": "apple pie"}, ttl=None)
    _age(dsn, "hit", 1.5)
    _age(dsn, "other", 1.5)
    hit, other = _expiry(dsn, "hit")[0], _expiry(dsn, "other")[0]
    found = await vstore.search(("v",), query="apple", limit=2, refresh_ttl=False)
    assert {i.key for i in found} == {"hit", "forever"} and _expiry(dsn, "hit")[0] == hit
    await vstore.search(("v",), query="apple", limit=2)  # refresh_on_read: True by default
    assert _expiry(dsn, "hit")[0] > hit + timedelta(minutes=1)
    assert _expiry(dsn, "other")[0] == other and _expiry(dsn, "forever")[0] is None
    _age(dsn, "hit", 10)  # expired: a read never brings it back
    expired = _expiry(dsn, "hit")[0]
    await vstore.search(("v",), query="apple", limit=2)
    assert _expiry(dsn, "hit")[0] == expired


async def test_omit_expired_and_sweep(make: Callable[..., Any], embeddings: LetterEmbeddings, dsn: str) -> None:
    ttl: dict[str, Any] = {"default_ttl": 1}
    s = await make(index={"dims": embeddings.dims, "embed": embeddings}, ttl=ttl)
    await s.put(("t", "a"), "old", {"text": "expiring soon"})
    await s.put(("t", "b"), "new", {"text": "staying"}, ttl=None)
    _age(dsn, "old", 2)
    assert (await s.get(("t", "a"), "old")) is not None  # not omitted unless configured
    ttl["omit_expired"] = True  # read per operation
    assert await s.get(("t", "a"), "old") is None
    assert [i.key for i in await s.search(("t",))] == ["new"]
    assert [i.key for i in await s.search(("t",), query="expiring soon")] == ["new"]
    assert await s.list_namespaces() == [("t", "b")]
    swept = (await s.store.sweep_ttl()) if s.is_async else s.store.sweep_ttl()
    assert swept == 1
    counts = table_counts(dsn)
    assert counts["items"] == 1 and counts["item_vectors"] == 1


def test_the_sweeper_thread_sweeps_and_stops(client: pgmem.Client, dsn: str) -> None:
    store = PgmemStore(client, ttl={"default_ttl": 1, "sweep_interval_minutes": 0.002})
    store.put(("t",), "x", {"v": 1})
    _age(dsn, "x", 2)
    future = store.start_ttl_sweeper()
    deadline = time.monotonic() + 120  # generous: only a failure waits this long
    while store.get(("t",), "x") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.get(("t",), "x") is None
    assert store.stop_ttl_sweeper(timeout=5)
    assert future.result(timeout=5) is None


async def test_the_async_sweeper_task_sweeps_and_stops(aclient: pgmem.AsyncClient, dsn: str) -> None:
    store = AsyncPgmemStore(aclient, ttl={"default_ttl": 1, "sweep_interval_minutes": 0.002})
    await store.aput(("t",), "x", {"v": 1})
    _age(dsn, "x", 2)
    await store.start_ttl_sweeper()
    deadline = time.monotonic() + 120
    while await store.aget(("t",), "x") is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert await store.aget(("t",), "x") is None
    assert await store.stop_ttl_sweeper(timeout=5)


# -- exact pages, filtered search, tenants ------------------------------------------------------------------


def _brute(vectors: dict[str, list[float]], query: list[float], keys: set[str]) -> list[str]:
    scored = sorted(((-cosine(query, v), k) for k, v in vectors.items() if k in keys))
    return [k for _, k in scored]


def test_filtered_pages_are_exact_at_any_depth(client: pgmem.Client) -> None:
    """Exact and index scans (the latter forced by a low exact limit) both return full, exactly ordered
    pages; LangGraph's PostgresStore cuts candidates to 2*limit+1 before OFFSET and filters after its scan."""
    rng = random.Random(7)
    dims = 24
    vectors = {f"k{i:04d}": [rng.gauss(0, 1) for _ in range(dims)] for i in range(2000)}

    class Lookup(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [vectors[t] for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return vectors[text]

    store = PgmemStore(client, index={"dims": dims, "embed": Lookup(), "fields": ["id"]})
    store.batch([PutOp(("docs", f"g{i % 8}"), k, {"id": k, "bucket": i % 8, "n": i}) for i, k in enumerate(vectors)])
    query = [rng.gauss(0, 1) for _ in range(dims)]
    embedder = store._index.embedder  # type: ignore[union-attr]
    in_g3 = {k for i, k in enumerate(vectors) if i % 8 == 3}
    expected = _brute(vectors, query, in_g3)
    for exact_limit in (None, 10):
        got: list[str] = []
        for offset in range(0, 240, 30):
            page = client.items.search(
                ("docs", "g3"), vector=query, embedder=embedder, limit=30, offset=offset, exact_limit=exact_limit
            )
            assert len(page) == 30
            got += [h.key for h in page]
        assert got == expected[:240]
        filtered = client.items.search(
            ("docs",), filter={"bucket": 3}, vector=query, embedder=embedder, limit=50, exact_limit=exact_limit
        )
        assert [h.key for h in filtered] == expected[:50]
    ann = client.items.search(("docs",), filter={"bucket": 3}, vector=query, embedder=embedder, limit=20, mode="ann")
    assert len({h.key for h in ann} & set(expected[:20])) >= 19  # recall of the index scan itself
    through_store = store.search(("docs", "g3"), query="k0003", limit=10, offset=100)
    assert [i.key for i in through_store] == _brute(vectors, vectors["k0003"], in_g3)[100:110]


def test_equality_filters_on_any_field_name_and_value(client: pgmem.Client) -> None:
    """Equality filters are containment of ``{field: value}`` (built client-side): field names that need
    escaping and every JSON type match exactly what they matched as ``jsonb_build_object``, in searches
    with and without a query, exact and by the index."""
    rng = random.Random(3)
    fields = ["plain", 'quo"te', "back\\slash", "uni é ☃", "__pgmem__", "a.b"]
    values: list[Any] = ["x", 7, 2.5, True, None, [1, "two"], {"n": {"m": [1]}}, "7", 0]
    vectors: dict[str, list[float]] = {}
    writes = []
    for i in range(120):
        key = f"k{i:03d}"
        vectors[key] = [rng.gauss(0, 1) for _ in range(8)]
        value = {f: values[(i + j) % len(values)] for j, f in enumerate(fields)}
        writes.append({"path": ("p", f"g{i % 2}"), "key": key, "value": value, "texts": [("v", key)]})

    class Lookup:
        model, dimension = "lookup-8", 8

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [vectors[t] for t in texts]

        async def aembed(self, texts: list[str]) -> list[list[float]]:
            return self.embed(texts)

    embedder: Any = Lookup()
    client.items.put_many(writes, embedder=embedder)
    query = [rng.gauss(0, 1) for _ in range(8)]
    for field in fields:
        for value in values:
            want = {w["key"] for w in writes if w["value"][field] == value and type(w["value"][field]) is type(value)}
            for flt in ({field: value}, {field: {"$eq": value}}):
                listed = client.items.search(("p",), filter=flt, limit=200)
                assert {h.key for h in listed} == want, (field, value)
                for mode in ("exact", "ann"):
                    hits = client.items.search(
                        ("p",), filter=flt, vector=query, embedder=embedder, limit=200, mode=mode
                    )
                    assert {h.key for h in hits} <= want and (mode == "ann" or {h.key for h in hits} == want)


def test_an_index_search_walks_the_index_whatever_the_planner_estimates(client: pgmem.Client) -> None:
    """Under row-level security the planner estimates a prefix from defaults (one row for a prefix that
    holds every item); the index strategy still walks the HNSW index instead of scoring every item."""
    from pgmem._sync import scope
    from pgmem.planning import items as plan

    rng = random.Random(5)
    dims = 16

    class Random:
        model, dimension = "random-16", dims

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[rng.gauss(0, 1) for _ in range(dims)] for _ in texts]

        async def aembed(self, texts: list[str]) -> list[list[float]]:
            return self.embed(texts)

    embedder: Any = Random()
    for start in range(0, 3000, 500):
        client.items.put_many(
            [
                {"path": ("docs",), "key": f"k{i}", "value": {"n": i}, "texts": [("t", "x")]}
                for i in range(start, start + 500)
            ],
            embedder=embedder,
        )
    model = client.items.model(embedder)
    with client.connection() as conn:
        conn.execute("ANALYZE pgmem.items, pgmem.item_vectors")
        for shape, extra in (((), {}), ((("fk0", "$gte"),), {"fk0": "n", "fv0": "0"})):
            text = plan.search_statement("ann", True, shape, False, model, 10)
            params = {"ns": "test", "limit": 10, "offset": 0, "n": 10, "q": embedder.embed(["q"])[0], **extra}
            params |= plan.path_params(("docs",))
            rows = scope.execute(conn, "test", "EXPLAIN " + text, params).fetchall()
            shown = "\n".join(r[0] for r in rows)
            assert plan.index_name(model) in shown, shown
            assert "Seq Scan on items" not in shown, shown
        # Without a filter the search is prepared: its generic plan (which knows no value) walks the index too.
        text = plan.search_statement("ann", True, (), False, model, 10)
        query = "[" + ",".join(map(str, embedder.embed(["q"])[0])) + "]"
        params = {"ns": "test", "limit": 10, "offset": 0, "q": query, **plan.path_params(("docs",))}
        with conn.transaction():
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            scope.execute(conn, "test", text, params, prepare=True)
            name = conn.execute("SELECT name FROM pg_prepared_statements WHERE statement LIKE '%%item_vectors%%'")
            prepared = name.fetchone()
            assert prepared is not None
            order = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", text)))
            cursor = psycopg.ClientCursor(conn)
            args = ", ".join(f"%({k})s" for k in order)
            rows = cursor.execute(f"EXPLAIN EXECUTE {prepared[0]}({args})", params).fetchall()
            shown = "\n".join(r[0] for r in rows)
            assert plan.index_name(model) in shown and "Seq Scan on items" not in shown, shown


@pytest.mark.parametrize("given", [False, True], ids=["pool", "caller's autocommit connection"])
def test_a_batch_failing_on_the_server_writes_nothing(client: pgmem.Client, dsn: str, given: bool) -> None:
    """The namespace, the item upserts and their vectors go in one round trip, one implicit transaction:
    a failure in the last statement undoes the first (a trigger makes one vector fail)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION public.boom() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN IF NEW.field = 'boom' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END$$"
        )
        conn.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON pgmem.item_vectors FOR EACH ROW EXECUTE FUNCTION public.boom()"
        )

    class Ones:
        model, dimension = "ones-4", 4

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 1.0, 1.0, 1.0] for _ in texts]

        async def aembed(self, texts: list[str]) -> list[list[float]]:
            return self.embed(texts)

    embedder: Any = Ones()
    client.items.put(("a",), "before", {"n": 0}, texts=[("ok", "t")], embedder=embedder)
    counts = table_counts(dsn)
    writes: list[Any] = [
        {"path": ("a",), "key": "before", "value": {"n": 1}, "texts": [("ok", "t")]},
        {"path": ("a",), "key": "k1", "value": {"n": 1}, "texts": [("ok", "t")]},
        {"path": ("a",), "key": "k2", "value": {"n": 2}, "texts": [("boom", "t")]},
    ]
    with psycopg.connect(dsn, autocommit=True) as own:
        own.execute("SET ROLE pgmem_app")
        with pytest.raises(pgmem.PgmemError, match="boom") as raised:  # the trigger's error, translated
            client.items.put_many(writes, embedder=embedder, connection=own if given else None)
        assert isinstance(raised.value.__cause__, psycopg.errors.RaiseException)
        assert table_counts(dsn) == counts
        got = client.items.get(("a",), "before")
        assert got is not None and got.value == {"n": 0}
        client.items.put_many(writes[:2], embedder=embedder, connection=own if given else None)  # usable again
    assert {h.key for h in client.items.search(("a",))} == {"before", "k1"}


def test_searches_without_a_query_are_exact_past_the_newest_items(
    client: pgmem.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search without a query reads the namespace's newest items first (a bounded walk, ties included)
    and sorts every passing item when they hold less than a page: pages equal a full sort either way."""
    import pgmem._sync.items

    monkeypatch.setattr(pgmem._sync.items, "RECENT_WALK", 1)  # the walk: 20 * (offset + limit) items
    keys = [f"k{i:03d}" for i in range(300)]
    rng = random.Random(11)
    rng.shuffle(keys)
    # three batches, one updated_at each: 98 old items with x = 1, then 200 and 2 newer ones with x = 0 (a
    # walk of 60 items ends inside the 200 ties)
    for part, x in ((keys[:98], 1), (keys[98:298], 0), (keys[298:], 0)):
        client.items.put_many([{"path": ("t", k[-1]), "key": k, "value": {"x": x}} for k in part])
    with client.connection() as conn:  # the walk then goes through the index (a backward scan: ties cut)
        conn.execute("ANALYZE pgmem.items")

    def by_path(part: list[str]) -> list[str]:  # ties of updated_at: by path, then key
        return sorted(part, key=lambda k: (k[-1], k))

    newest_first = by_path(keys[298:]) + by_path(keys[98:298]) + by_path(keys[:98])
    for flt, want in ((None, newest_first), ({"x": 1}, by_path(keys[:98])), ({"x": 0}, newest_first[:202])):
        for limit, offset in ((3, 0), (1, 2), (10, 40), (7, 195), (200, 0)):
            page = client.items.search(("t",), filter=flt, limit=limit, offset=offset)
            assert [h.key for h in page] == want[offset : offset + limit], (flt, limit, offset)
    assert [h.key for h in client.items.search(("t", "7"), limit=5)] == [k for k in newest_first if k[-1] == "7"][:5]


async def test_pgmem_namespaces_are_tenants(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="tenant-a") as a, pgmem.connect(dsn, namespace="tenant-b") as b:
        PgmemStore(a).put(("shared",), "k", {"who": "a"})
        PgmemStore(b).put(("shared",), "k", {"who": "b"})
        assert PgmemStore(a).get(("shared",), "k").value == {"who": "a"}  # type: ignore[union-attr]
        assert [i.value for i in PgmemStore(b).search(())] == [{"who": "b"}]


# -- construction, the async store's threads, packaging ------------------------------------------------------


def test_from_conn_string_owns_its_client(dsn: str) -> None:
    with PgmemStore.from_conn_string(dsn, namespace="conn", ttl={"default_ttl": 5}) as store:
        store.setup()
        store.setup()
        store.put(("a",), "b", {"c": 1})
        assert store.client.namespace == "conn"
        assert store.supports_ttl and store.ttl_config == {"default_ttl": 5}
    assert store.client.closed


async def test_async_from_conn_string_and_sync_calls(dsn: str) -> None:
    async with AsyncPgmemStore.from_conn_string(dsn, namespace="conn") as store:
        await store.setup()
        with pytest.raises(asyncio.InvalidStateError):
            store.put(("a",), "b", {"c": 1})
        await asyncio.to_thread(store.put, ("a",), "b", {"c": 1})  # from another thread: fine
        item = await asyncio.to_thread(store.get, ("a",), "b")
        assert item is not None and item.value == {"c": 1}
        got = await asyncio.gather(*(store.aget(("a",), "b") for _ in range(5)), store.aput(("a",), "d", {"e": 2}))
        assert all(g is not None and g.value == {"c": 1} for g in got[:5])
    assert store.client.closed


def test_the_adapter_without_langgraph_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['langgraph'] = None; sys.modules['langgraph.store'] = None\n"
        "import pgmem\n"
        "try:\n    import pgmem.integrations.langgraph\nexcept ImportError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert "pgmem[langgraph]" in done.stdout


def test_search_statements_return_item_hit_rows(dsn: str) -> None:
    from pgmem.planning import items as plan
    from pgmem.planning.rows import ItemHitRow
    from pgmem.planning.search import EmbeddingModel

    model = EmbeddingModel(1, "m", 3, "vector")
    shape = (("fk0", "$eq"), ("fk1", "$gt"))
    with psycopg.connect(dsn) as conn:
        for kind in ("list", "recent", "exact", "ann"):
            text = plan.search_statement(kind, True, shape, True, model if kind in ("exact", "ann") else None, 1)
            params = {
                "ns": "x", "prefix": ["a"], "fk0": "a", "fv0": '"b"', "fc0": '{"a":"b"}',
                "fk1": "c",
                "fv1": "1", "limit": 1, "offset": 0, "q": "[1,2,3]", "n": 1, "walk": 1,
            }  # fmt: skip
            cur = conn.execute(text, params)
            # The hit, then what a refreshing read passes on (the item's id, whether it has a TTL).
            assert tuple(c.name for c in cur.description or ()) == (*ItemHitRow._fields, "id", "ttl")


# -- many processes -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_concurrent_batched_upserts_from_many_processes_never_fail(dsn: str) -> None:
    writers, rounds, keys = 4, 25, 30
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.integration.langgraph_workers", dsn, str(i), str(rounds), str(keys)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        for i in range(writers)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    written: dict[str, set[str]] = {}
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0
        for line in out.splitlines():
            result = json.loads(line)
            assert "error" not in result, result["error"]
            for k, text in result["ok"]:
                written.setdefault(f"k{k}", set()).add(text)
    with psycopg.connect(dsn) as conn:
        items = conn.execute("SELECT key, value->>'text', id FROM pgmem.items").fetchall()
        per_item = dict(conn.execute("SELECT item_id, count(*) FROM pgmem.item_vectors GROUP BY 1").fetchall())
        fields = conn.execute(
            "SELECT i.value->>'text', v.field FROM pgmem.item_vectors v JOIN pgmem.items i ON i.id = v.item_id"
        ).fetchall()
    assert {key for key, _, _ in items} == set(written)
    for key, text, item_id in items:
        assert text in written[key]  # one of the values written: last write wins, nothing mixed
        assert per_item[item_id] == 3  # text + two tags: the vectors of one write, never two writes' worth
    assert {f for _, f in fields} == {"text", "tags[*].0", "tags[*].1"}
