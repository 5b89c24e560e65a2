"""The retrieval log: searches record what they returned only when it is on (one setting)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.cache import VectorCache

TEXTS = [
    "Write a cli snake game",
    "Design the snake game's board and loop",
    "Review the snake movement code",
    "Plan the quarterly budget",
    "Book a flight to Lisbon",
]


def _fill(client: pgmem.Client) -> None:
    client.vectors.enable("role:Eng")
    client.messages.add_many(
        "role:Eng", [Message(id=f"m{i}", content=t, sent_from="PM", cause_by="WritePRD") for i, t in enumerate(TEXTS)]
    )
    client.vectors.flush()


def _log(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT namespace, kind, memory, label, query, k, message_ids, scores FROM pgmem.retrieval_log ORDER BY id"
        ).fetchall()


def test_off_by_default_records_nothing(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGMEM_RETRIEVAL_LOG", raising=False)
    with pgmem.connect(dsn, namespace="t") as client:
        assert client.retrieval_log is False
        _fill(client)
        assert client.vectors.search("snake game", memory="role:Eng", k=2, label="plan")
        client.vectors.search_many(["snake", "budget"], memory="role:Eng", k=2, label="plan")
        client.vectors.hybrid_search("snake game", memory="role:Eng", k=2, label="plan")
        with VectorCache(client) as cache:
            assert cache.search("role:Eng", "snake game", k=2, label="plan")
    assert _log(dsn) == []


def test_on_records_each_search_with_its_hits_scores_and_label(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_RETRIEVAL_LOG", "1")
    with pgmem.connect(dsn, namespace="t") as client:
        assert client.retrieval_log is True
        _fill(client)
        hits = client.vectors.search("snake game", memory="role:Eng", k=3, label="stage:design")
        many = client.vectors.search_many(["snake", "flight"], memory="role:Eng", k=2, label="batch")
        fused = client.vectors.hybrid_search("snake game", memory="role:Eng", k=2, label="hybrid\x00label")
        whole = client.vectors.search(vector=client.embedder.embed(["budget"])[0], k=1)
        with VectorCache(client) as cache:
            cached = cache.search("role:Eng", "snake game", k=2, label="cached")
    rows = _log(dsn)
    assert [r[1] for r in rows] == ["vector", "batch", "batch", "hybrid", "vector", "cache"]
    assert all(r[0] == "t" for r in rows)
    first = rows[0]
    assert first[2:6] == ("role:Eng", "stage:design", "snake game", 3)
    assert first[6] == [h.message.id for h in hits]
    assert first[7] == pytest.approx([h.score for h in hits])
    expected = [(q, [h.message.id for h in hs]) for q, hs in zip(["snake", "flight"], many, strict=True)]
    assert [(r[4], r[6]) for r in rows[1:3]] == expected
    assert rows[3][3] == "hybrid\ufffdlabel" and rows[3][5] == 2
    assert rows[3][6] == [h.message.id for h in fused] and rows[3][7] == pytest.approx([h.score for h in fused])
    assert rows[4][2:5] == (None, None, None) and rows[4][6] == [h.message.id for h in whole]
    assert rows[5][2:6] == ("role:Eng", "cached", "snake game", 2) and rows[5][6] == [h.message.id for h in cached]
    # "What did the agent see before it answered?"
    with psycopg.connect(dsn) as conn:
        seen = conn.execute(
            "SELECT rank, message_id, content, sender FROM pgmem.retrieval_hits"
            " WHERE namespace = 't' AND label = 'stage:design' ORDER BY rank"
        ).fetchall()
    assert seen == [(i + 1, h.message.id, h.message.content, "PM") for i, h in enumerate(hits)]


def test_per_client_override(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_RETRIEVAL_LOG", "1")
    with pgmem.connect(dsn, namespace="t", retrieval_log=False) as client:
        _fill(client)
        client.vectors.search("snake", memory="role:Eng", k=2)
        assert _log(dsn) == []
        client.retrieval_log = True
        client.with_namespace("u").vectors.search(vector=client.embedder.embed(["snake"])[0], k=1, label="u")
        client.vectors.search("snake", memory="role:Eng", k=2, label="on")
        client.retrieval_log = False
        client.vectors.search("snake", memory="role:Eng", k=2, label="off")
    assert [(r[0], r[3]) for r in _log(dsn)] == [("u", "u"), ("t", "on")]


async def test_async_client_logs_too(dsn: str) -> None:
    async with await pgmem.aconnect(dsn, namespace="a", retrieval_log=True) as client:
        await client.vectors.enable("m")
        await client.messages.add("m", Message(content="snake game"))
        await client.vectors.flush()
        hits = await client.vectors.search("snake", memory="m", k=1, label="async")
    rows = _log(dsn)
    assert [(r[1], r[3], r[6]) for r in rows] == [("vector", "async", [hits[0].message.id])]


def test_a_batch_of_vectors_and_a_large_k_are_logged(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="t", retrieval_log=True) as client:
        _fill(client)
        vectors = client.embedder.embed(["snake", "flight"])
        many = client.vectors.search_many(vectors=list(vectors), memory="role:Eng", k=2, label="vecs")
        # k above the session's ef_search: the search runs in its own transaction block.
        wide = client.vectors.search("snake", memory="role:Eng", k=50, label="wide", mode="ann")
    rows = _log(dsn)
    assert [(r[1], r[3], r[4], r[5]) for r in rows] == [
        ("batch", "vecs", None, 2),
        ("batch", "vecs", None, 2),
        ("vector", "wide", "snake", 50),
    ]
    assert [r[6] for r in rows] == [[h.message.id for h in hs] for hs in [*many, wide]]
    assert len(rows[2][6]) == len(TEXTS)
