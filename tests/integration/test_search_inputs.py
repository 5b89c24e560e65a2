"""Search as users drive it (issue 37): metadata filters on every search, keyword search with scores and
filters, hybrid search's halves given separately, and rankings that depend on the tenant's own data only.

Every search runs as the client runs it: as ``pgmem_app``, under row-level security.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.errors import InvalidInput

TOPICS = ("billing", "shipping", "returns")


def _seed(client: pgmem.Client, memory: str = "team", n: int = 300) -> list[Message]:
    client.vectors.enable(memory)
    messages = [
        Message(
            content=f"note {i} about {TOPICS[i % 3]}: order {i} customer question",
            role="user" if i % 2 else "assistant",
            cause_by=f"Action{i % 4}",
            sent_from=f"agent{i % 5}",
            metadata={"topic": TOPICS[i % 3], "score": i, "tags": ["a", "b"] if i % 10 == 0 else ["c"]},
        )
        for i in range(n)
    ]
    client.messages.add_many(memory, messages)
    client.vectors.flush()
    return messages


def _meta(hit: Any) -> dict[str, Any]:
    return hit.message.metadata  # type: ignore[no-any-return]


# -- metadata filters ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "exact", "ann"])
def test_vector_search_filters_on_metadata_and_stays_complete(client: pgmem.Client, mode: str) -> None:
    _seed(client)
    hits = client.vectors.search("customer order", memory="team", k=20, metadata={"topic": "billing"}, mode=mode)
    assert len(hits) == 20 and all(_meta(h)["topic"] == "billing" for h in hits)

    ranged = client.vectors.search(
        "customer order", memory="team", k=15, metadata={"score": {"$gte": 100, "$lt": 130}}, mode=mode
    )
    assert len(ranged) == 15 and all(100 <= _meta(h)["score"] < 130 for h in ranged)

    both = client.vectors.search(
        "order", memory="team", k=50, metadata={"topic": "returns", "score": {"$lte": 30}}, mode=mode
    )
    assert sorted(_meta(h)["score"] for h in both) == [i for i in range(31) if i % 3 == 2]

    arrays = client.vectors.search("order", memory="team", k=50, metadata={"tags": ["a", "b"]}, mode=mode)
    assert sorted(_meta(h)["score"] for h in arrays) == list(range(0, 300, 10))

    not_billing = client.vectors.search("order", memory="team", k=40, metadata={"topic": {"$ne": "billing"}})
    assert len(not_billing) == 40 and all(_meta(h)["topic"] != "billing" for h in not_billing)
    # A string is not compared with a number: no message passes, rather than every one.
    assert client.vectors.search("order", memory="team", k=5, metadata={"score": {"$gt": "a"}}) == []


def test_metadata_filters_on_the_namespace_many_queries_and_the_cache(client: pgmem.Client) -> None:
    _seed(client, "team")
    _seed(client, "other", 30)
    hits = client.vectors.search("customer", k=100, metadata={"topic": "shipping", "score": {"$lt": 60}})
    # 20 in team (scores 1, 4, ... 58), 10 in other (1, 4, ..., 28): both memories, one namespace
    assert len(hits) == 30 and all(_meta(h)["topic"] == "shipping" for h in hits)

    batches = client.vectors.search_many(["order 5", "order 7"], memory="team", k=5, metadata={"topic": "returns"})
    assert [len(b) for b in batches] == [5, 5]
    assert all(_meta(h)["topic"] == "returns" for b in batches for h in b)
    users = client.vectors.search_many(["order 5"], memory="team", k=8, role="user", sender="agent1")
    assert len(users[0]) == 8 and all(h.message.role == "user" and h.message.sent_from == "agent1" for h in users[0])

    from pgmem.cache import VectorCache

    with VectorCache(client) as cache:
        cached = cache.search("team", "customer order", k=10, metadata={"topic": "billing"})
        assert len(cached) == 10 and all(_meta(h)["topic"] == "billing" for h in cached)
        direct = client.vectors.search("customer order", memory="team", k=10, metadata={"topic": "billing"})
        assert [h.message.id for h in cached] == [h.message.id for h in direct]
        assert cache.stats.bypassed >= 1
        with pytest.raises(InvalidInput):
            cache.search("team", "order", metadata={"topic": {"$like": "b%"}})


def test_an_index_scan_that_comes_back_short_is_run_again_exactly(
    client: pgmem.Client, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter that keeps few of many rows, searched through the index (``exact_limit=0``) with a walk cut
    short (``hnsw.max_scan_tuples``, as a large shared index cuts it): still k hits."""
    from pgmem._sync import scope, search_planner

    _seed(client, n=2000)
    with psycopg.connect(dsn, autocommit=True) as conn:  # statistics: the index scan is the plan
        for table in ("messages", "memory_entries", "embeddings"):
            conn.execute(f"ANALYZE pgmem.{table}")
    real = search_planner.hnsw_settings
    # the walk cut after 10 vectors (no iterative scan); a sequential scan (which Postgres may prefer at
    # 2,000 rows) ruled out
    cut = {"hnsw.iterative_scan": "off", "hnsw.ef_search": "10", "enable_seqscan": "off"}
    monkeypatch.setattr(search_planner, "hnsw_settings", lambda ef: {**real(ef), **cut})
    rare = {"score": {"$lt": 12}}
    want = client.vectors.search("order", memory="team", k=10, metadata=rare, mode="exact")
    statements: list[str] = []
    run = scope.rows

    def spy(conn: Any, namespace: Any, statement: str, *args: Any, **kwargs: Any) -> Any:
        found = run(conn, namespace, statement, *args, **kwargs)
        if "embeddings e" in statement:
            statements.append(f"{'ann' if kwargs.get('settings') else 'exact'}:{len(found)}")
        return found

    monkeypatch.setattr(scope, "rows", spy)
    got = client.vectors.search("order", memory="team", k=10, metadata=rare, exact_limit=0)
    assert len(want) == 10 and [h.message.id for h in got] == [h.message.id for h in want]
    assert [s.split(":")[0] for s in statements] == ["ann", "exact"] and int(statements[0].split(":")[1]) < 10


@pytest.mark.parametrize(
    "bad",
    [
        "topic=billing",
        {"topic": {"$like": "bill%"}},
        {1: "x"},
        {"topic": float("nan")},
        {f"k{i}": i for i in range(65)},
    ],
)
def test_bad_metadata_filters_are_invalid_input(client: pgmem.Client, bad: Any) -> None:
    client.vectors.enable("team")
    for search in (
        lambda: client.vectors.search("x", memory="team", metadata=bad),
        lambda: client.vectors.keyword_search("x", memory="team", metadata=bad),
        lambda: client.vectors.hybrid_search("x", memory="team", metadata=bad),
    ):
        with pytest.raises(InvalidInput):
            search()


def test_the_metadata_index_serves_the_application_role(client: pgmem.Client, dsn: str) -> None:
    """Under row-level security a non-leakproof operator is never an index condition: jsonb's own ``@>``
    tested every row of the namespace. ``pgmem.@>`` (migration 0016) is leakproof and has a GIN index."""
    client.messages.add_many(
        "big", [Message(content=f"m{i}", metadata={"topic": "rare" if i < 5 else f"t{i % 50}"}) for i in range(5000)]
    )
    client.items.put(("docs",), "k", {"topic": "rare"})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgmem.messages")
        conn.execute("ANALYZE pgmem.items")
        conn.execute("SET ROLE pgmem_app")
        conn.execute("SELECT set_config('pgmem.namespace', %s, false)", (client.namespace,))
        plan = "\n".join(
            str(r[0])
            for r in conn.execute(
                "EXPLAIN SELECT id FROM pgmem.messages m WHERE m.metadata OPERATOR(pgmem.@>) %s::jsonb",
                ('{"topic": "rare"}',),
            )
        )
        assert "messages_metadata_idx" in plan, plan
        found = conn.execute(
            "SELECT count(*) FROM pgmem.messages m WHERE m.metadata OPERATOR(pgmem.@>) %s::jsonb",
            ('{"topic": "rare"}',),
        ).fetchone()
        assert found == (5,)
        leakproof = conn.execute(
            "SELECT proleakproof FROM pg_proc WHERE oid = 'pgmem.jsonb_contains'::regproc"
        ).fetchone()
        assert leakproof == (True,)


def test_the_item_store_filters_use_the_same_operator(client: pgmem.Client) -> None:
    for i in range(20):
        client.items.put(("docs",), f"k{i}", {"topic": TOPICS[i % 3], "n": i})
    found = client.items.search(("docs",), filter={"topic": "billing", "n": {"$gte": 6}})
    assert sorted(hit.value["n"] for hit in found) == [6, 9, 12, 15, 18]


# -- keyword search -----------------------------------------------------------------------------------


def test_keyword_search_scores_and_filters(client: pgmem.Client) -> None:
    client.messages.add_many(
        "chat",
        [
            Message(content="the snake game is ready", role="assistant", cause_by="Write", sent_from="Engineer"),
            Message(content="snake snake: a game about a snake", role="user", cause_by="Ask", metadata={"lang": "en"}),
            Message(content="write tests for the game", role="user", cause_by="Ask", sent_from="QA"),
            Message(content="lunch at noon", role="user", cause_by="Ask"),
        ],
    )
    hits = client.vectors.keyword_search("snake game", memory="chat")
    assert [h.message.content for h in hits][:2] == ["snake snake: a game about a snake", "the snake game is ready"]
    assert all(h.distance is None for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True) and hits[-1].score > 0
    # the same ranking as search_text, which returns the messages only
    assert [h.message.id for h in hits] == [m.id for m in client.messages.search_text("chat", "snake game")]

    def contents(**filters: Any) -> list[str]:
        return [h.message.content for h in client.vectors.keyword_search("snake game", memory="chat", **filters)]

    assert contents(role="assistant") == ["the snake game is ready"]
    assert contents(cause_by="Ask") == ["snake snake: a game about a snake", "write tests for the game"]
    assert contents(sender="QA") == ["write tests for the game"]
    assert contents(metadata={"lang": "en"}) == ["snake snake: a game about a snake"]
    assert contents(since=datetime.now(UTC) + timedelta(hours=1)) == []
    assert contents(until=datetime.now(UTC) + timedelta(hours=1))[:1] == ["snake snake: a game about a snake"]
    assert len(client.vectors.keyword_search("game", memory="chat", k=1)) == 1
    assert client.vectors.keyword_search("zebra", memory="chat") == []
    assert client.vectors.keyword_search("game")[0].message.content.startswith("snake")  # the namespace
    for bad in ("", "   ", None, "a\x00b"):
        with pytest.raises(InvalidInput):
            client.vectors.keyword_search(bad, memory="chat")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        client.vectors.keyword_search("game", memory="chat", k=0)


async def test_keyword_search_async(aclient: pgmem.AsyncClient) -> None:
    await aclient.messages.add_many("chat", [Message(content="snake game"), Message(content="lunch")])
    hits = await aclient.vectors.keyword_search("snake", memory="chat", role="user")
    assert [h.message.content for h in hits] == ["snake game"] and hits[0].score > 0


# -- statistics that belong to the tenant ---------------------------------------------------------------


def _ranking(client: pgmem.Client, query: str, memory: str | None) -> list[tuple[str, float]]:
    return [(h.message.id, round(h.score, 9)) for h in client.vectors.keyword_search(query, memory=memory, k=20)]


def test_keyword_scores_depend_on_the_tenant_s_own_messages(dsn: str) -> None:
    """Other namespaces, and other memories of the namespace for a memory's search, change neither the
    order nor the scores of a keyword search (BM25's N is the scope's own: issue 37, item 6)."""
    words = ["payment", "timeout", "retry", "invoice", "refund", "order", "shipping", "customer"]
    with pgmem.connect(dsn, namespace="tenant-a") as a:
        a.messages.add_many(
            "chat", [Message(content=f"{words[i % 8]} {words[i * 3 % 8]} case {i}") for i in range(400)]
        )
        queries = ["payment timeout", "refund for the customer", "retry the invoice"]
        before = {q: (_ranking(a, q, "chat"), _ranking(a, q, None)) for q in queries}
    with pgmem.connect(dsn, namespace="tenant-b") as b:
        b.messages.add_many("chat", [Message(content=f"payment {words[i % 3]} b{i}") for i in range(6000)])
    with pgmem.connect(dsn, namespace="tenant-a") as a:
        assert {q: (_ranking(a, q, "chat"), _ranking(a, q, None)) for q in queries} == before
        a.messages.add_many("elsewhere", [Message(content=f"timeout {i}") for i in range(3000)])
    with pgmem.connect(dsn, namespace="tenant-a") as a:
        assert {q: _ranking(a, q, "chat") for q in queries} == {q: before[q][0] for q in queries}
        # the namespace's own ranking does change: its scope grew
        assert _ranking(a, "payment timeout", None) != before["payment timeout"][1]


# Thousands of vectors in two tenants, an index built: the slow leg (.ci/run).
@pytest.mark.slow
def test_the_exact_or_index_choice_depends_on_the_tenant_s_own_vectors(dsn: str) -> None:
    """A 629-message memory was searched exactly or through the index depending on what other namespaces
    held (the table's row count decided): the choice is now made on the namespace's own vectors."""

    def strategy(namespace: str) -> tuple[str, str]:
        with pgmem.connect(dsn, namespace=namespace) as c:
            model = c.vectors.active_model("chat")
            assert model is not None
            from pgmem.planning.search import SearchFilters

            return (
                c.vectors.planner.strategy(model, SearchFilters("chat"), "auto", None, None),
                c.vectors.planner.strategy(model, SearchFilters(), "auto", None, None),
            )

    with pgmem.connect(dsn, namespace="small") as small:
        small.vectors.enable("chat")
        small.messages.add_many("chat", [Message(content=f"small tenant note {i}") for i in range(629)])
        small.vectors.flush()
    alone = strategy("small")
    with pgmem.connect(dsn, namespace="large") as large:
        large.vectors.enable("chat")
        large.messages.add_many("chat", [Message(content=f"large tenant note {i}") for i in range(12_000)])
        large.vectors.flush()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgmem.embeddings")
    assert strategy("small") == alone == ("ann", "exact")
    assert strategy("large") == ("ann", "ann")


# -- hybrid search's halves -----------------------------------------------------------------------------


def test_hybrid_search_takes_its_halves_separately(client: pgmem.Client) -> None:
    _seed(client, n=60)
    client.messages.add("team", Message(content="the zebra escaped", metadata={"topic": "zoo"}))
    client.vectors.flush()
    text = "customer order question"
    plain = client.vectors.hybrid_search(text, memory="team", k=5)
    embedder = client.vectors.embedder_for(client.vectors.active_model("team").name)  # type: ignore[union-attr]
    assert embedder is not None
    vector = embedder.embed([text])[0]
    own = client.vectors.hybrid_search(text, vector=vector, memory="team", k=5)
    assert [h.message.id for h in own] == [h.message.id for h in plain]
    assert [round(h.score, 9) for h in own] == [round(h.score, 9) for h in plain]
    # the vector half alone from the caller's vector, the keyword half from the caller's rewrite
    rewritten = client.vectors.hybrid_search(vector=vector, keyword_query="zebra", memory="team", k=5)
    assert "the zebra escaped" in [h.message.content for h in rewritten]
    assert "the zebra escaped" not in [h.message.content for h in plain]
    for mode in ("exact", "ann"):
        assert len(client.vectors.hybrid_search(text, memory="team", k=5, mode=mode)) == 5
    filtered = client.vectors.hybrid_search(text, memory="team", k=10, metadata={"topic": "returns"})
    assert len(filtered) == 10 and all(_meta(h)["topic"] == "returns" for h in filtered)
    with pytest.raises(InvalidInput):
        client.vectors.hybrid_search(memory="team")
    with pytest.raises(InvalidInput):
        client.vectors.hybrid_search(vector=vector, memory="team")  # no keywords
    with pytest.raises(InvalidInput):
        client.vectors.hybrid_search(text, memory="team", mode="fast")
    with pytest.raises(pgmem.EmbeddingError):
        client.vectors.hybrid_search(text, vector=[0.1, 0.2], memory="team")


def _filter_check(dsn: str) -> str:
    from pgmem.ops import doctor

    (status,) = [c.status for c in doctor.run_checks(dsn, embedder=False) if c.name == "metadata filters"]
    return status


def test_a_database_without_the_leakproof_operator_filters_alike_and_a_superuser_s_migrate_adds_it(
    client: pgmem.Client, dsn: str
) -> None:
    """Declaring a function LEAKPROOF and creating an operator class are a superuser's: migration 0016 run
    by another role leaves the operator over a plain SQL function and no index. Filters give the same
    answers there (each candidate tested), doctor warns, and the next ``pgmem migrate`` a superuser runs
    adds what is missing."""
    from pgmem.ops import migrate

    _seed(client, n=60)
    want = [h.message.id for h in client.vectors.search("order", memory="team", k=50, metadata={"topic": "billing"})]
    items = {"topic": "billing"}
    client.items.put(("docs",), "a", items)
    with psycopg.connect(dsn, autocommit=True) as conn:  # what 0016 leaves when not run by a superuser
        conn.execute(
            "DROP INDEX pgmem.messages_metadata_idx; DROP INDEX pgmem.items_value_idx;"
            " DROP OPERATOR CLASS pgmem.jsonb_contains_ops USING gin;"
            " DROP OPERATOR FAMILY pgmem.jsonb_contains_ops USING gin;"
            " CREATE INDEX items_value_idx ON pgmem.items USING gin (value jsonb_path_ops);"
            " CREATE OR REPLACE FUNCTION pgmem.jsonb_contains(jsonb, jsonb) RETURNS boolean"
            " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT $1 @> $2'"
        )
    assert _filter_check(dsn) == "warn"
    client.vectors.planner._counts.clear()
    assert [h.message.id for h in client.vectors.search("order", memory="team", k=50, metadata=items)] == want
    assert [h.key for h in client.items.search(("docs",), filter=items)] == ["a"]
    migrate.upgrade(dsn)
    assert _filter_check(dsn) == "ok"
    with psycopg.connect(dsn, autocommit=True) as conn:
        opclass = conn.execute(
            "SELECT o.opcname FROM pg_index AS i JOIN pg_opclass AS o ON o.oid = i.indclass[0]"
            " WHERE i.indexrelid = 'pgmem.items_value_idx'::regclass"
        ).fetchone()
        assert opclass == ("jsonb_contains_ops",)
    assert [h.message.id for h in client.vectors.search("order", memory="team", k=50, metadata=items)] == want
