"""Tenant A writes through every path; tenant B reads through the same paths and gets nothing.

Tenant B is both a client of its own (``pgmem.connect(namespace="tenantB")``) and one derived from A's
(``a.with_namespace("tenantB")``, sharing A's pool). The paths: the messages repository, vector search
(single, many, hybrid), the FAISS cache, queues (push, claim, inbox, subscriptions), summaries, brains,
stores, items, the analytics views, the CLI, and LISTEN (notification payloads name nothing of A's). The
embedding-model registry is shared only by identical definitions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.cache import VectorCache
from pgmem.embeddings import Vectors
from pgmem.planning import notify

MEMORY = "secret-memory-name"
QUEUE = "secret-queue-name"
STORE = "secret-store-name"
BRAIN = "secret-brain-key"
SUBSCRIBER = "secret-subscriber"
#: Strings of A's that must reach B through no path (the namespace, names, contents).
SECRETS = ("tenantA", MEMORY, QUEUE, STORE, BRAIN, SUBSCRIBER, "launch codes", "ActSecret")

#: The analytics views (sql/views.sql and sql/triggers.sql's queue_archive).
VIEWS = (
    "queue_archive",
    "conversation_facts",
    "role_activity",
    "action_activity",
    "action_flow",
    "who_talks_to_whom",
    "queue_health",
    "queue_throughput",
    "retrieval_hits",
    "summary_compression",
)


def _write_as_a(a: pgmem.Client) -> list[Message]:
    """Tenant A's writes through every path; returns its messages."""
    a.vectors.enable(MEMORY)
    messages = [
        Message(content=f"the launch codes are {i}", cause_by="ActSecret", sent_from="alice", send_to={SUBSCRIBER})
        for i in range(5)
    ]
    a.messages.add_many(MEMORY, messages)
    a.vectors.flush()
    a.queues.push(QUEUE, Message(content="launch codes in the queue"))
    a.queues.subscribe(SUBSCRIBER)
    a.queues.publish(MEMORY, Message(content="launch codes for the subscriber", send_to={SUBSCRIBER}))
    seqs = [m.seq for m in a.messages.last(MEMORY)]
    a.summaries.add(
        MEMORY,
        level=1,
        first_seq=min(seqs),
        last_seq=max(seqs),
        content="summary of the launch codes",
        source_chars=100,
        source_tokens=20,
    )
    a.brains.dump(BRAIN, history=messages[:2], historical_summary="the launch codes, summarised")
    a.stores.register(STORE, "simple", {"note": "launch codes"})
    a.items.put(("docs",), "k1", {"text": "launch codes"}, texts=[("text", "launch codes")], embedder=a.embedder)
    a.vectors.search("launch codes", memory=MEMORY, k=3, label="ActSecret")  # a retrieval-log row when on
    return messages


def _read_as_b(b: pgmem.Client, a_messages: list[Message]) -> None:
    """Tenant B reads through every path and finds nothing of A's."""
    # messages
    assert b.messages.last(MEMORY) == []
    assert b.messages.count(MEMORY) == 0
    assert b.messages.by_action(MEMORY, "ActSecret") == []
    assert b.messages.search_text(MEMORY, "launch codes") == []
    with pytest.raises(pgmem.NotFound):
        b.messages.get_message(a_messages[0].id)
    assert b.messages.memories() == []
    # every observed message is news to B: none of A's counts as already seen
    assert [m.id for m in b.messages.find_news(MEMORY, a_messages)] == [m.id for m in a_messages]
    # vector search: with no filter but the namespace, and by memory (B's has no model)
    assert b.search("launch codes", k=5) == []
    assert b.vectors.search_many(["launch codes", "codes"], k=5) == [[], []]
    assert b.vectors.hybrid_search("launch codes", k=5) == []
    with pytest.raises(pgmem.InvalidInput):
        b.search("launch codes", memory=MEMORY, k=5)
    # queues, inbox, subscriptions
    assert set(b.queues.depth(QUEUE).values()) == {0}
    assert b.queues.peek(QUEUE) == []
    assert b.queues.claim(QUEUE, 10) == []
    assert b.queues.take(QUEUE, 10) == []
    assert b.queues.dead_letters(QUEUE) == []
    assert b.queues.inbox(SUBSCRIBER, 10) == []
    assert b.queues.wait(QUEUE, timeout=0.05) == []
    # summaries, brains, stores, items
    assert b.summaries.list(MEMORY) == []
    assert b.brains.load(BRAIN) is None
    assert b.stores.list() == []
    assert b.stores.files(STORE) == []
    assert b.items.get(("docs",), "k1") is None
    assert b.items.search(("docs",), query="launch codes", embedder=b.embedder) == []
    assert b.items.list_paths() == []
    # the analytics views and every table, as the application role scoped to B
    with b.transaction() as conn:
        for view in VIEWS:
            assert conn.execute(f"SELECT count(*) FROM pgmem.{view}").fetchone() == (0,), view  # noqa: S608
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'namespace'"
                " WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'r'"
            )
        ]
        assert "messages" in tables and "namespace_keys" in tables
        for table in tables:
            rows = conn.execute(f"SELECT DISTINCT namespace FROM pgmem.{table}").fetchall()  # noqa: S608
            assert set(rows) <= {("tenantB",)}, (table, rows)


def test_tenant_b_gets_nothing_of_tenant_a(dsn: str, tmp_path: Path) -> None:
    # LISTEN on a connection of its own before A writes: what any tenant's connection could hear
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgmem_queue")
        listener.execute("LISTEN pgmem_vectors")
        with (
            pgmem.connect(dsn, namespace="tenantA", max_size=2, retrieval_log=True) as a,
            pgmem.connect(dsn, namespace="tenantB", max_size=2) as b,
        ):
            cache_b = VectorCache(b)
            cache_a = VectorCache(a)
            try:
                a_messages = _write_as_a(a)
                assert [h.message.id for h in cache_a.search(MEMORY, "launch codes", k=3)]  # A's cache sees them
                _read_as_b(b, a_messages)
                with a.with_namespace("tenantB") as derived:  # closing it closes its queue listener
                    _read_as_b(derived, a_messages)
                # the FAISS cache of B: B's memory of that name has no model; nothing of A's was announced to it
                with pytest.raises(pgmem.InvalidInput):
                    cache_b.search(MEMORY, "launch codes", k=3)
                assert cache_b.stats.notifications == 0
                # A's own cache did hear its memory's notifications (the tags match for A)
                a.messages.add(MEMORY, Message(content="one more launch code"))
                a.vectors.flush()
                deadline = time.monotonic() + 120  # generous: only a failure waits this long
                while cache_a.stats.notifications == 0 and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert cache_a.stats.notifications > 0
            finally:
                cache_a.close()
                cache_b.close()
            with a.transaction() as conn:
                (key_a,) = conn.execute("SELECT pgmem.notify_key('tenantA')::text").fetchone()  # type: ignore[misc]
            with b.transaction() as conn:
                (key_b,) = conn.execute("SELECT pgmem.notify_key('tenantB')::text").fetchone()  # type: ignore[misc]
                # B cannot read A's key (row-level security: B's own row only)
                keys = conn.execute("SELECT namespace FROM pgmem.namespace_keys").fetchall()
                assert keys == [("tenantB",)]
        payloads = [n.payload for n in listener.notifies(timeout=0.5, stop_after=1000)]
    # LISTEN: the payloads name nothing of A's, and B's key maps none of them to a name
    assert payloads
    for payload in payloads:
        assert not any(secret in payload for secret in SECRETS), payload
    names = (MEMORY, QUEUE, f"inbox:{SUBSCRIBER}")
    tags = {json.loads(p)[0] if p.startswith("[") else p for p in payloads}
    assert not tags & {notify.tag(key_b, name) for name in names}
    assert notify.tag(key_a, QUEUE) in tags and notify.tag(key_a, f"inbox:{SUBSCRIBER}") in tags
    assert notify.tag(key_a, MEMORY) in tags
    # the CLI, scoped to B, prints nothing of A's
    for args in (["stats"], ["report", "--out", str(tmp_path / "b.html")]):
        done = subprocess.run(
            [sys.executable, "-m", "pgmem.ops.cli", *args, "--dsn", dsn, "--namespace", "tenantB"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        shown = done.stdout + done.stderr + ((tmp_path / "b.html").read_text() if args[0] == "report" else "")
        assert not any(secret in shown for secret in SECRETS), args


class AcmeEmbedder:
    """A provider's model of a few dimensions: the vector of a text is its character counts by residue."""

    model = "acme-embed"

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.ones((len(texts), self.dimension), np.float32)
        for row, text in enumerate(texts):
            for ch in text:
                out[row, ord(ch) % self.dimension] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)


def test_registry_entries_are_shared_only_by_identical_definitions(dsn: str) -> None:
    """Tenant A's 4-dimension ``acme-embed`` used to make tenant B's 8-dimension one fail."""

    found: dict[str, Any] = {}
    with pgmem.connect(dsn, namespace="tenantA", max_size=2) as root:
        for ns, dimension in (("tenantA", 4), ("tenantB", 8), ("tenantC", 4)):
            client = root.with_namespace(ns)
            embedder = AcmeEmbedder(dimension)
            client.vectors.enable("m", embedder)
            client.messages.add("m", Message(content=f"hello from {ns}"))
            client.vectors.flush(embedder)
            hits = client.search("hello", memory="m", k=5, embedder=embedder)
            assert [h.message.content for h in hits] == [f"hello from {ns}"]
            found[ns] = client.vectors.active_model("m")
    assert (found["tenantA"].dimension, found["tenantB"].dimension) == (4, 8)
    assert found["tenantA"].id != found["tenantB"].id  # another definition, another model
    assert found["tenantA"].id == found["tenantC"].id  # the same definition, one row (and one index)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT name, dimension FROM pgmem.embedding_models WHERE name = 'acme-embed' ORDER BY dimension"
        ).fetchall()
    assert rows == [("acme-embed", 4), ("acme-embed", 8)]
