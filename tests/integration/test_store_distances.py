"""LangGraph's ``distance_type`` on pgmem, against LangGraph's own ``PostgresStore`` (langgraph-checkpoint-
postgres) on the same server: the same puts, updates and deletes, then the same searches (with and without
a query, an equality filter, a prefix, several fields per item), on vectors that are not normalised (so cosine, L2
and inner product rank differently); the keys, their order and the scores must agree.

``PostgresStore`` runs with ``ann_index_config={"kind": "flat"}`` (no index: its searches are exact
scans, the reference). With an HNSW index it cuts candidates before filtering and may come back short
(benchmarks/integrations_store.py): that is a property of its index, not of its scores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

import pgmem

pytest.importorskip("langgraph.store.postgres", reason="langgraph-checkpoint-postgres is not installed")

from langchain_core.embeddings import Embeddings  # noqa: E402
from langgraph.store.base import Op, PutOp, SearchItem, SearchOp  # noqa: E402
from langgraph.store.postgres import PostgresStore  # noqa: E402

from pgmem.integrations.langgraph import AsyncPgmemStore, PgmemStore  # noqa: E402

DIMS = 12
DISTANCES = ("cosine", "l2", "inner_product")


class HashedEmbeddings(Embeddings):
    """A vector per text, drawn from a generator seeded by the text: a random direction with a length from
    0.2 to 5 (the same in both stores whatever order they embed in)."""

    def _one(self, text: str) -> list[float]:
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))
        direction = rng.normal(size=DIMS)
        return [float(x) for x in direction / np.linalg.norm(direction) * rng.uniform(0.2, 5.0)]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def _index(distance: str, **more: Any) -> dict[str, Any]:
    return {"dims": DIMS, "embed": HashedEmbeddings(), "fields": ["text", "title"], "distance_type": distance, **more}


def _writes() -> list[list[Op]]:
    """One batch per write (so that every write has its own updated_at in both stores)."""
    batches: list[list[Op]] = []
    for i in range(36):
        value: dict[str, Any] = {"text": f"note {i} on topic {i % 5}", "kind": "x" if i % 3 else "y", "topic": i % 5}
        if i % 4 == 0:
            value["title"] = f"title {i}"  # a second vector: the item scores as its better one
        batches.append([PutOp(("docs", "a" if i % 2 else "b"), f"k{i}", value)])
    batches.append([PutOp(("docs", "a"), "k1", {"text": "note 1 rewritten", "kind": "y", "topic": 2})])
    batches.append([PutOp(("docs", "b"), "k2", None)])  # deleted, with its vectors
    batches.append([PutOp(("other",), "k0", {"text": "elsewhere, note 0", "kind": "x", "topic": 2})])
    return batches


def _searches() -> list[SearchOp]:
    ops = []
    for query in ("topic 3", "a question about note 7", "title 12"):
        ops += [
            SearchOp(("docs",), query=query, limit=6),
            SearchOp(("docs", "a"), query=query, limit=4),
            SearchOp(("docs",), filter={"kind": "y"}, query=query, limit=5),
            SearchOp((), filter={"kind": "x", "topic": 2}, query=query, limit=7),
            SearchOp((), query=query, limit=40),  # every item
        ]
    ops += [SearchOp(("docs",), filter={"kind": "x"}, limit=5), SearchOp((), limit=3)]  # no query: newest first
    return ops


def _rows(results: list[Any]) -> list[list[tuple[tuple[str, ...], str, float | None]]]:
    """``(namespace, key, score)`` of LangGraph's SearchItems (or of client.items' hits, whose namespace is
    their path)."""
    out = []
    for found in results:
        out.append(
            [
                (tuple(item.namespace if isinstance(item, SearchItem) else item.path), item.key, item.score)
                for item in found
            ]
        )
    return out


def _assert_same(pgmem_rows: list[Any], langgraph_rows: list[Any], ops: list[SearchOp]) -> None:
    for op, mine, theirs in zip(ops, pgmem_rows, langgraph_rows, strict=True):
        assert [r[:2] for r in mine] == [r[:2] for r in theirs], op
        if op.query is None:
            assert all(r[2] is None for r in mine + theirs), op
        else:
            assert [r[2] for r in mine] == pytest.approx([r[2] for r in theirs], rel=1e-5, abs=1e-5), op


@pytest.fixture
def langgraph_store(dsn: str, single_database: bool) -> Iterator[Any]:
    """A factory of LangGraph ``PostgresStore`` s in the test database (their tables in ``public``)."""
    stack: list[Any] = []

    def make(distance: str) -> PostgresStore:
        index = _index(distance, ann_index_config={"kind": "flat"})
        context = PostgresStore.from_conn_string(dsn, index=index)  # type: ignore[arg-type]
        store = context.__enter__()
        stack.append(context)
        store.setup()
        with psycopg.connect(dsn, autocommit=True) as conn:  # each distance starts from empty tables
            conn.execute("TRUNCATE public.store CASCADE")
        return store

    yield make
    for context in stack:
        context.__exit__(None, None, None)
    if single_database:  # the one database is reused: take LangGraph's tables away
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "DROP TABLE IF EXISTS public.store_vectors, public.store, public.store_migrations, "
                "public.vector_migrations CASCADE"
            )


@pytest.mark.parametrize("distance", DISTANCES)
def test_pgmem_store_scores_like_postgres_store(dsn: str, langgraph_store: Any, distance: str) -> None:
    reference = langgraph_store(distance)
    searches = _searches()
    with pgmem.connect(dsn, namespace=f"lg-{distance}") as client:
        store = PgmemStore(client, index=_index(distance))  # type: ignore[arg-type]
        store.setup()
        for batch in _writes():
            reference.batch(batch)
            store.batch(batch)
        theirs = _rows(reference.batch(searches))
        mine = _rows(store.batch(searches))
        # the index scan too: pgmem's own planning, forced
        forced = _rows([client.items.search(**_kwargs(op), mode="ann", **store._search_kwargs) for op in searches])
    _assert_same(mine, theirs, searches)
    _assert_same(forced, theirs, searches)


def _kwargs(op: SearchOp) -> dict[str, Any]:
    """``client.items.search`` arguments of a SearchOp (the query embedded as the store embeds it)."""
    kwargs: dict[str, Any] = {"prefix": op.namespace_prefix, "filter": op.filter, "limit": op.limit}
    if op.query is not None:
        kwargs["vector"] = HashedEmbeddings().embed_query(op.query)
    return kwargs


async def test_async_pgmem_store_scores_like_postgres_store(dsn: str, langgraph_store: Any) -> None:
    searches = _searches()
    for distance in ("l2", "inner_product"):
        reference = langgraph_store(distance)
        async with await pgmem.aconnect(dsn, namespace=f"alg-{distance}") as client:
            store = AsyncPgmemStore(client, index=_index(distance))  # type: ignore[arg-type]
            await store.setup()
            for batch in _writes():
                reference.batch(batch)
                await store.abatch(batch)
            _assert_same(_rows(await store.abatch(searches)), _rows(reference.batch(searches)), searches)


def test_the_three_distances_rank_these_items_differently(dsn: str, langgraph_store: Any) -> None:
    """The data above tells the distances apart: a store that ignored distance_type would fail."""
    firsts = {}
    op = SearchOp((), query="a question about note 7", limit=10)
    for distance in DISTANCES:
        reference = langgraph_store(distance)
        for batch in _writes():
            reference.batch(batch)
        (found,) = reference.batch([op])
        firsts[distance] = [item.key for item in found]
    assert len({tuple(keys) for keys in firsts.values()}) == 3, firsts
