"""Hybrid search reads only its candidates' messages, whatever the namespace holds.

The fused list of candidates (each leg's hits, full-joined on the message id) was joined with
``pgmem.messages`` on ``coalesce(vector id, keyword id)``, whose rows the planner cannot estimate: it
hashed every message of the namespace, so a hybrid search of a memory of 20 cost a scan of every message
beside it (42 ms of 52 beside 200k). Each candidate's message is now one index probe."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pgvector.psycopg import register_vector

import pgmem
from pgmem import Message
from pgmem._sync.searcher import Searcher


def test_a_small_memory_beside_a_big_one_probes_its_candidates(
    client: pgmem.Client, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for memory, n in (("big", 3000), ("small", 20)):
        client.vectors.enable(memory)
        client.messages.add_many(memory, [Message(content=f"{memory} note {i} about topic {i % 17}") for i in range(n)])
    client.vectors.flush()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgmem.messages, pgmem.memory_entries, pgmem.embeddings")
    plans: list[Any] = []
    execute = Searcher._execute

    def spy(self: Searcher, plan: Any, connection: Any) -> Any:
        plans.append(plan)
        return execute(self, plan, connection)

    monkeypatch.setattr(Searcher, "_execute", spy)
    hits = client.vectors.hybrid_search("note 3 about topic 3", memory="small", k=5)
    assert hits and all(h.message.content.startswith("small note") for h in hits)
    (plan,) = plans
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET ROLE pgmem_app")
        conn.execute("SELECT set_config('pgmem.namespace', %s, false)", (client.namespace,))
        statement = plan.statement if isinstance(plan.statement, str) else plan.statement.decode()
        text = "EXPLAIN (ANALYZE, COSTS OFF) " + statement
        explained = "\n".join(str(r[0]) for r in conn.execute(text, plan.params[0]))  # type: ignore[call-overload]
    assert "Seq Scan on messages" not in explained, explained
    assert "(id = f.id)" in explained, explained  # each candidate's message by its id
