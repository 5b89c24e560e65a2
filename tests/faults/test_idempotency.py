"""Idempotency keys of pushes, without faults: they hold after the item was acknowledged, per namespace,
until purged; a bad key is refused before anything is written."""

from __future__ import annotations

import pytest

import pgmem
from pgmem.planning import statements
from pgmem.resilience import reads_only


def test_a_key_holds_after_ack_and_until_purged(client: pgmem.Client) -> None:
    message = pgmem.Message(content="once")
    first = client.queues.push("q", message, idempotency_key="k1")
    assert first.created and first.id is not None
    [item] = client.queues.claim("q")
    client.queues.ack(item)
    again = client.queues.push("q", message, idempotency_key="k1")
    assert again.id == first.id  # the first push's item, archived by now
    assert client.queues.depth("q")["ready"] == 0
    # Keys are per namespace.
    other = client.with_namespace("other").queues.push("q", message, idempotency_key="k1")
    assert other.id != first.id
    assert client.queues.purge_idempotency_keys(0) == 1
    assert client.queues.push("q", message, idempotency_key="k1").id not in (None, first.id)


def test_a_bad_key_writes_nothing(client: pgmem.Client) -> None:
    with pytest.raises(pgmem.InvalidInput):
        client.queues.push("q", pgmem.Message(content="x"), idempotency_key="")
    with pytest.raises(pgmem.InvalidInput):
        client.queues.purge_idempotency_keys(-1)
    assert client.queues.depth("q")["ready"] == 0


def test_which_statements_are_retried() -> None:
    assert reads_only("-- a comment may say INSERT or call\nSELECT count(*) FROM pgmem.messages")
    assert reads_only("WITH x AS (SELECT 1) SELECT * FROM x")
    assert not reads_only("WITH x AS (INSERT INTO t VALUES (1) RETURNING 1) SELECT * FROM x")
    assert not reads_only("SELECT id FROM pgmem.queue_items FOR UPDATE SKIP LOCKED")
    assert not reads_only("SELECT pg_notify('c', 'x')")
    assert not reads_only("SELECT pgmem.fts_document('x')")  # pgmem's own functions count as writes
    assert not reads_only("UPDATE pgmem.queue_items SET attempts = 1")
    assert not reads_only("SELECT pgmem.materialize_fork('ns', 'm')")
    # pgmem.lineage (STABLE) only reads: the reads of a memory's entries, which all call it, stay reads
    messages = statements.load("messages")
    assert all(reads_only(messages[name]) for name in ("count", "last_k", "by_role", "at_position"))
    assert "pgmem.lineage(" in messages["count"]
