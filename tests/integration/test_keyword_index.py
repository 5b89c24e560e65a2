"""Keyword search served by its GIN index under row-level security (migration 0027).

For the application's role a condition whose operator is not leakproof is tested after the namespace's
policy, never in an index: ``tsv @@ query`` read every message of the namespace. ``pgmem.@@`` is leakproof
and ``messages_tsv_idx``'s operator class (``pgmem.tsvector_match_ops``) serves it, and still serves the
built-in ``@@`` for SQL of the owner's (analytics)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.planning import statements

WORDS = ["order", "payment", "refund", "invoice", "shipping", "account"]


@pytest.fixture
def busy(client: pgmem.Client, dsn: str) -> pgmem.Client:
    """A namespace of 4,000 messages in two memories where "zeppelin" is in 3, beside another namespace
    that holds it too."""
    for memory, n in (("big", 3500), ("small", 500)):
        client.messages.add_many(
            memory,
            [
                Message(content=f"{WORDS[i % 6]} {WORDS[i % 5]} note {i}" + (" zeppelin" if i % 1000 == 7 else ""))
                for i in range(n)
            ],
        )
    with pgmem.connect(dsn, namespace="other") as other:
        other.messages.add("big", Message(content="the other tenant's zeppelin"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgmem.messages")
        conn.execute("ANALYZE pgmem.memory_entries")
    return client


def _plan(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> str:
    return "\n".join(str(r[0]) for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + query, params))  # type: ignore[call-overload]


def test_a_rare_word_is_found_through_the_index_as_the_application_role(busy: pgmem.Client, dsn: str) -> None:
    q = statements.load("messages")["search_text"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET ROLE pgmem_app")
        conn.execute("SELECT set_config('pgmem.namespace', %s, false)", (busy.namespace,))
        # At 4,000 messages a scan is cheaper; what is tested is that the index can serve at all (a
        # condition that is not leakproof never could, so the plan was a scan whatever this said).
        conn.execute("SET enable_seqscan = off")
        params = {"ns": busy.namespace, "memory": "big", "query": "zeppelin", "upto": None, "limit": 10}
        plan = _plan(conn, q, params)
        assert "Index Cond: (tsv OPERATOR(pgmem.@@)" in plan, plan
        assert "Seq Scan on messages" not in plan, plan
        leakproof = conn.execute("SELECT proleakproof FROM pg_proc WHERE oid = 'pgmem.ts_match'::regproc").fetchone()
        assert leakproof == (True,)
    hits = busy.messages.search_text("big", "zeppelin")
    want = sorted(f"{WORDS[i % 6]} {WORDS[i % 5]} note {i} zeppelin" for i in (7, 1007, 2007, 3007))
    assert sorted(m.content for m in hits) == want
    found = busy.vectors.keyword_search("zeppelin", k=10)  # the namespace, through the keyword leg
    assert len(found) == 5 and all("other tenant" not in h.message.content for h in found)


@pytest.mark.parametrize(
    "query", ["zeppelin", "refund invoice", '"order payment"', "order -payment", "shipping OR zeppelin"]
)
def test_the_same_matches_as_the_built_in_operator(busy: pgmem.Client, dsn: str, query: str) -> None:
    """pgmem.@@ through the index, as the application's role, against the built-in @@ read by a table scan
    as the owner: the same messages of the namespace for every query form."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET enable_indexscan = off")
        conn.execute("SET enable_bitmapscan = off")
        (want,) = conn.execute(
            "SELECT array_agg(id ORDER BY id) FROM pgmem.messages WHERE namespace = %s AND tsv @@ pgmem.fts_query(%s)",
            (busy.namespace, query),
        ).fetchone()  # type: ignore[misc]
        conn.execute("RESET ALL")
        conn.execute("SET ROLE pgmem_app")
        conn.execute("SELECT set_config('pgmem.namespace', %s, false)", (busy.namespace,))
        sql = (
            "SELECT array_agg(id ORDER BY id) FROM pgmem.messages"
            " WHERE namespace = %s AND tsv OPERATOR(pgmem.@@) pgmem.fts_query(%s)"
        )
        (got,) = conn.execute(sql, (busy.namespace, query)).fetchone()  # type: ignore[misc]
    assert got == want and want


def test_the_index_still_serves_the_built_in_operator_for_the_owner(busy: pgmem.Client, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = _plan(conn, "SELECT id FROM pgmem.messages WHERE tsv @@ to_tsquery('simple', %(w)s)", {"w": "zeppelin"})
        assert "messages_tsv_idx" in plan, plan
