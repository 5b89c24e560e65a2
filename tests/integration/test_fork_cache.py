"""The FAISS cache (``pgmem.cache.VectorCache``) on forks (issue 36, item 2; migration 0020): a fork's cached
answers equal ``client.vectors.search(..., memory=fork)`` exactly, before and after its parent's writes and
removals, a forget, and the fork's own writes; in both consistency modes, with the writes made by another
client (announced by NOTIFY, not seen as own writes). Also: plain searches that find a memory is a fork
after all (its statement's guard) read it through its lineage."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.cache import VectorCache
from tests.integration.cache_workers import same


def _fill(client: pgmem.Client, memory: str, n: int, prefix: str) -> list[str]:
    batch = [Message(id=f"{prefix}{i}", content=f"{prefix} item {i} colour {i % 5}") for i in range(n)]
    client.messages.add_many(memory, batch)
    client.vectors.flush()
    return [m.id for m in batch]


def _exact(client: pgmem.Client, memory: str, query: np.ndarray, k: int) -> list[tuple[str, float]]:
    return [(h.message.id, h.score) for h in client.vectors.search(vector=query, memory=memory, k=k, mode="exact")]


@pytest.mark.parametrize("mode", ["default", "strict"])
def test_a_forks_cache_answers_as_postgres_through_every_change(dsn: str, client: pgmem.Client, mode: str) -> None:
    client.vectors.enable("p")
    parent = _fill(client, "p", 30, "p")
    client.fork("p", "f")
    queries = [client.embedder.embed([f"p item {i} colour {i % 5}"])[0] for i in (1, 7, 12)]
    k = 40  # more than the memory holds: every vector it has is compared

    with VectorCache(client, mode=mode) as cache, pgmem.connect(dsn, namespace="test") as other:

        def check(step: str) -> None:
            for q in queries:
                got = cache.search_vectors("f", q, k)[0]
                assert same(got, _exact(client, "f", q, k)), step
                assert same(cache.search_vectors("p", q, k)[0], _exact(client, "p", q, k)), step

        def announced(memory: str) -> None:
            if mode == "default":  # strict mode reads the marks itself; the default mode waits to hear them
                assert cache.wait_announced(memory, other.vectors.head_rev(memory), timeout=30)

        check("fresh fork")
        assert {i for i, _ in cache.search_vectors("f", queries[0], k)[0]} == set(parent)

        _fill(other, "p", 5, "late")  # the parent's later writes must not reach the fork
        announced("p")
        check("parent wrote")
        assert not any(i.startswith("late") for i, _ in cache.search_vectors("f", queries[0], k)[0])

        _fill(other, "f", 3, "own")  # the fork's own writes do
        announced("f")
        check("fork wrote")
        assert sum(i.startswith("own") for i, _ in cache.search_vectors("f", queries[0], k)[0]) == 3

        other.messages.delete("p", parent[1])  # a removal in the parent: the fork keeps it
        announced("p")
        check("parent removed")
        assert parent[1] in {i for i, _ in cache.search_vectors("f", queries[0], k)[0]}

        other.retention.forget([parent[7]], actor="test")  # a forget reaches the fork
        announced("p")
        check("forgot")
        assert parent[7] not in {i for i, _ in cache.search_vectors("f", queries[1], k)[0]}

        other.messages.delete("f", parent[12])  # the fork's own removal materialises it first
        announced("f")
        check("fork removed")
        assert parent[12] not in {i for i, _ in cache.search_vectors("f", queries[2], k)[0]}
        _fill(other, "p", 2, "later")  # after materialising, still nothing of the parent's later writes
        announced("p")
        check("parent wrote again")


def test_a_fork_of_a_fork_in_the_cache_and_own_writes(client: pgmem.Client) -> None:
    """Own writes (through the cache's client) to a memory a cached fork inherits from mark the fork stale
    too; a fork of a fork reads both ranges."""
    client.vectors.enable("p")
    _fill(client, "p", 10, "p")
    client.fork("p", "f1")
    _fill(client, "f1", 4, "f1-")
    client.fork("f1", "f2")
    q = client.embedder.embed(["p item 3 colour 3"])[0]
    with VectorCache(client) as cache:
        assert same(cache.search_vectors("f2", q, 20)[0], _exact(client, "f2", q, 20))
        assert len(cache.search_vectors("f2", q, 20)[0]) == 14
        client.retention.forget(["p3"], actor="test")
        got = cache.search_vectors("f2", q, 20)[0]
        assert "p3" not in {i for i, _ in got} and same(got, _exact(client, "f2", q, 20))
        client.messages.delete("f1", "f1-0")  # f2 inherited it from f1: it keeps it
        assert "f1-0" in {i for i, _ in cache.search_vectors("f2", q, 20)[0]}
        assert same(cache.search_vectors("f2", q, 20)[0], _exact(client, "f2", q, 20))


def test_a_memory_recreated_as_a_fork_is_searched_through_its_lineage(dsn: str, client: pgmem.Client) -> None:
    """Fork status is remembered per client, but only "is a fork": a key another process deletes and
    creates again as a fork is found to be one by the next search's own statement (vector, batch, keyword,
    hybrid, and the cache's search in Postgres), with no statement asked first for a plain memory."""
    client.vectors.enable("p")
    _fill(client, "p", 6, "p")
    client.vectors.enable("x")
    _fill(client, "x", 2, "x")
    q = client.embedder.embed(["p item 2 colour 2"])[0]
    assert {h.message.id for h in client.vectors.search(vector=q, memory="x", k=10)} == {"x0", "x1"}
    assert {h.message.id for h in client.vectors.keyword_search("item", memory="x", k=10)} == {"x0", "x1"}
    assert "x" not in client.forks.known
    with psycopg.connect(dsn, autocommit=True) as admin:  # another process drops the memory ...
        admin.execute("DELETE FROM pgmem.memories WHERE namespace = 'test' AND key = 'x'")
    with pgmem.connect(dsn, namespace="test") as other:  # ... and makes the key a fork
        other.fork("p", "x")
        _fill(other, "x", 1, "y")
    want = {"p0", "p1", "p2", "p3", "p4", "p5", "y0"}
    assert {h.message.id for h in client.vectors.search(vector=q, memory="x", k=10)} == want
    assert "x" in client.forks.known
    with pgmem.connect(dsn, namespace="test") as fresh:
        assert {h.message.id for h in fresh.vectors.keyword_search("item", memory="x", k=10)} == want
    with pgmem.connect(dsn, namespace="test") as fresh:
        assert {h.message.id for h in fresh.vectors.hybrid_search("p item 2", memory="x", k=10)} == want
    with pgmem.connect(dsn, namespace="test") as fresh:
        (batch,) = fresh.vectors.search_many(vectors=[q], memory="x", k=10)
        assert {h.message.id for h in batch} == want
    with pgmem.connect(dsn, namespace="test") as fresh, VectorCache(fresh) as cache:
        # a search filtered on metadata runs in Postgres (the cache holds no metadata)
        assert {i for i, _ in cache.search_vectors("x", q, 10, metadata={})[0]} == want


def test_search_many_takes_as_of(client: pgmem.Client) -> None:
    client.vectors.enable("p")
    _fill(client, "p", 4, "p")
    point = client.mark("p", "four")
    _fill(client, "p", 2, "late")
    q = client.embedder.embed(["late item 0 colour 0"])[0]
    for as_of in ("four", point.seq):
        (hits,) = client.vectors.search_many(vectors=[q], memory="p", k=10, as_of=as_of)
        assert {h.message.id for h in hits} == {"p0", "p1", "p2", "p3"}


def test_a_sampled_search_of_a_fork_is_checked_against_the_same_lineage(dsn: str) -> None:
    """Recall sampling (issue 36, item 4) records the filters a search ran with, its lineage and its
    as_of bound included: the checker's exact answer is over what the fork held then, so recall is 1 and
    the exact ids are the fork's (not its own entries only, not the parent's later writes)."""
    with pgmem.connect(dsn, namespace="test", recall_sample=1.0) as client:
        client.vectors.enable("p")
        _fill(client, "p", 8, "p")
        client.fork("p", "f")
        _fill(client, "f", 2, "own")
        client.mark("f", "then")
        _fill(client, "f", 2, "after")
        _fill(client, "p", 3, "late")
        q = client.embedder.embed(["p item 3 colour 3"])[0]
        served = [h.message.id for h in client.vectors.search(vector=q, memory="f", k=20, mode="exact")]
        as_of = [h.message.id for h in client.vectors.search(vector=q, memory="f", k=20, as_of="then")]
        assert set(served) == {f"p{i}" for i in range(8)} | {"own0", "own1", "after0", "after1"}
        assert set(as_of) == {f"p{i}" for i in range(8)} | {"own0", "own1"}
        assert client.vectors.recall.check() == 2
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT served_ids, exact_ids, recall FROM pgmem.recall_samples WHERE memory = 'f' ORDER BY id"
        ).fetchall()
    assert [(set(s), set(e), r) for s, e, r in rows] == [(set(served), set(served), 1.0), (set(as_of), set(as_of), 1.0)]
