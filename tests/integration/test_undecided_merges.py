"""No near-duplicate merge stays undecided (README, "Near-duplicates", "Undecided merges").

An entry waits for its merge (``memory_entries.merge_within`` set) until its vector is stored; whoever
stores the vector decides it. Two ways a vector could come without its decision, and the recovery:

- a process dies between the embedder's commit and its decision of an entry that began waiting after its
  claim ("late"): a real process killed with SIGKILL right there; the next embedder run, or the next
  merging add of the memory, decides the entry;
- a plain add or a publish with the caller's vector (``add(embedding=)``, ``add_many(embeddings=)``,
  ``queues.publish(embedding=)``) of a message whose entry waits: it decides it, on its own connection
  right after its commit, in the caller's transaction when the merge lock is free (else the recovery
  does).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem._sync.outbox import EmbeddingOutbox
from pgmem.embeddings import HashingEmbedder, Precomputed
from tests.integration.test_merge_races import PATIENCE, _hold_merge_lock, _until
from tests.integration.test_near_duplicates import VARIANTS, _entries

CTX = multiprocessing.get_context("spawn")
BASE = np.array([1.0, 0.0, 0.0])
NEAR = BASE + [0.0, 0.05, 0.0]  # cosine similarity 0.9988 with BASE
FAR = np.array([0.0, 0.0, 1.0])


def _waiting(dsn: str) -> list[tuple[str, str]]:
    """(memory, message id) of every entry still waiting for its merge."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT memory, message_id FROM pgmem.memory_entries WHERE merge_within IS NOT NULL ORDER BY memory"
        ).fetchall()
    return [(str(m), str(i)) for m, i in rows]


# -- a process killed between the embedder's commit and its merge ---------------------------------------


class _Telling:
    """The provider of the dying process: while it embeds the claimed batch (after the claim, before the
    store), another writer remembers the claimed message in 'facts' without a vector, so that entry begins
    waiting for the very vector this batch stores: a "late" entry, decided after the commit."""

    def __init__(self, dsn: str, writer: pgmem.Client, message: pgmem.Message) -> None:
        self.dsn = dsn
        self.hashing = HashingEmbedder()
        self.model, self.dimension = self.hashing.model, self.hashing.dimension
        self.writer, self.message, self.told = writer, message, False

    def embed(self, texts: Sequence[str]) -> Any:
        if not self.told:  # in a transaction of a connection of its own: no background run of the writer's
            with psycopg.connect(self.dsn) as conn:  # (which could recover the entry before the kill)
                self.told = self.writer.messages.remember("facts", self.message, threshold=0.9, connection=conn).pending
                conn.commit()
        return self.hashing.embed(texts)

    async def aembed(self, texts: Sequence[str]) -> Any:
        return self.embed(texts)


def _die_at_the_gap(dsn: str, message_id: str, content: str) -> None:
    """A spawned process: embeds the outbox and is killed (SIGKILL, by itself) right after the commit that
    stored the vector, before the transaction that decides the late entry's merge."""
    EmbeddingOutbox._decide_late = lambda *_: os.kill(os.getpid(), signal.SIGKILL)  # type: ignore[method-assign]
    hashing = HashingEmbedder()
    with pgmem.connect(dsn, namespace="test", max_size=1, embedder=Precomputed(hashing.model, 384)) as writer:
        telling = _Telling(dsn, writer, pgmem.Message(id=message_id, content=content))
        with pgmem.connect(dsn, namespace="test", max_size=1, embedder=telling) as client:  # type: ignore[arg-type]
            client.vectors.embed_pending()
    raise SystemExit(3)  # not reached unless the late entry never came


@pytest.mark.parametrize("recovery", ["embedder", "merging-add"])
def test_a_process_killed_after_the_embedders_commit(dsn: str, recovery: str) -> None:
    hashing = HashingEmbedder()
    told = pgmem.Message(content=VARIANTS[1])
    with (
        pgmem.connect(dsn, namespace="test", max_size=2) as client,
        pgmem.connect(dsn, namespace="test", max_size=2, embedder=Precomputed(hashing.model, 384)) as writer,
    ):
        client.vectors.enable("facts")
        client.vectors.enable("notes")
        assert client.messages.remember("facts", pgmem.Message(content=VARIANTS[0]), threshold=0.9).added
        # client's background run done first: running on, it could embed the next message itself (the
        # dying process then found nothing to claim: a CI run saw it exit 3)
        client.vectors.wait()
        writer.messages.add("notes", told)  # queued: the dying process's embedder claims it
        writer.vectors.wait()  # no background run of these clients is left to recover anything
    process = CTX.Process(target=_die_at_the_gap, args=(dsn, told.id, told.content), daemon=True)
    process.start()
    process.join(PATIENCE)
    assert process.exitcode == -signal.SIGKILL, process.exitcode
    # The gap: the vector is stored and the outbox empty, but the entry still waits: nothing would decide it.
    assert _waiting(dsn) == [("facts", told.id)]
    assert _entries(dsn, "facts") == [(VARIANTS[0], 1, False), (VARIANTS[1], 1, False)]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.embeddings WHERE message_id = %s", (told.id,)).fetchone() == (
            1,
        )
        assert conn.execute("SELECT count(*) FROM pgmem.embedding_outbox").fetchone() == (0,)
    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        if recovery == "embedder":  # the next run of any embedder of the namespace (the background one's too)
            assert client.vectors.embed_pending().embedded == 0
            expected = [(VARIANTS[0], 2, True)]
        else:  # the next merging add of the memory decides it before its own look-up
            assert client.messages.remember("facts", pgmem.Message(content="Bob works in billing"), threshold=0.9).added
            expected = [(VARIANTS[0], 2, True), ("Bob works in billing", 1, False)]
        assert _entries(dsn, "facts") == expected
        client.vectors.embed_pending()  # once more: nothing changes
    assert _entries(dsn, "facts") == expected
    assert _entries(dsn, "notes") == [(VARIANTS[1], 1, False)]  # the message stays: 'notes' holds it
    assert _waiting(dsn) == []


# -- a plain add with the caller's vector --------------------------------------------------------------


@pytest.fixture
def pending(client: pgmem.Client, dsn: str) -> pgmem.Message:
    """'facts' (a model of the caller's vectors) holds a message with its vector, and a near-duplicate
    waiting for its merge (remembered without a vector); 'notes' has the same model."""
    client.vectors.enable("facts", Precomputed("mine", 3))
    client.vectors.enable("notes", Precomputed("mine", 3))
    assert client.messages.remember("facts", pgmem.Message(content="first"), threshold=0.9, embedding=BASE).added
    waiting = pgmem.Message(content="told again")
    assert client.messages.remember("facts", waiting, threshold=0.9).pending
    assert _waiting(dsn) == [("facts", waiting.id)]
    return waiting


@pytest.mark.parametrize("where", ["held", "other-memory", "publish", "batch", "caller-transaction"])
def test_a_plain_add_with_the_vector_decides_the_merge(
    client: pgmem.Client, dsn: str, pending: pgmem.Message, where: str
) -> None:
    if where == "held":  # the memory holds the message: the add stores its vector only
        assert client.messages.add("facts", pending, embedding=NEAR) is False
    elif where == "other-memory":  # the vector comes with an add to another memory
        assert client.messages.add("notes", pending, embedding=NEAR) is True
    elif where == "publish":  # or with a publish to another memory
        assert client.queues.publish("notes", pending, embedding=NEAR).seq is not None
    elif where == "batch":
        other = pgmem.Message(content="unrelated")
        assert client.messages.add_many("facts", [pending, other], embeddings=[NEAR, FAR]) == 1
    else:
        with psycopg.connect(dsn) as conn:
            assert client.messages.add("facts", pending, embedding=NEAR, connection=conn) is False
            assert _waiting(dsn) == [("facts", pending.id)]  # decided in that transaction, not committed yet
            conn.commit()
    assert _waiting(dsn) == []
    facts = _entries(dsn, "facts")
    assert facts[0] == ("first", 2, True)  # merged into the first: one survivor, counted
    assert [content for content, _, _ in facts] == ["first"] + (["unrelated"] if where == "batch" else [])
    with psycopg.connect(dsn) as conn:  # not held by another memory: the merged message is gone
        held = conn.execute("SELECT count(*) FROM pgmem.messages WHERE id = %s", (pending.id,)).fetchone()
    assert held == ((1,) if where in ("other-memory", "publish") else (0,))


def test_a_busy_merge_lock_leaves_it_to_the_recovery(client: pgmem.Client, dsn: str, pending: pgmem.Message) -> None:
    """In the caller's transaction the add only tries the merge lock (its vector store holds the memory's
    row, which a merging adder holding the lock may wait for): a merging add holds it, the add does not
    wait, and the next embedder run decides the entry."""
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn) as conn:
        _hold_merge_lock(holder, "test", "facts")
        assert client.messages.add("notes", pending, embedding=NEAR, connection=conn) is True
        conn.commit()
        holder.rollback()
    assert _waiting(dsn) == [("facts", pending.id)]
    client.vectors.embed_pending()
    assert _waiting(dsn) == []
    assert _entries(dsn, "facts") == [("first", 2, True)]


def test_two_recoveries_at_once_decide_once(dsn: str) -> None:
    """Two processes' recoveries of the same entry (real connections, both waiting for the merge lock):
    one decides it, the other finds it decided; seen_count grows once."""
    with pgmem.connect(dsn, namespace="test", max_size=2) as client:
        client.vectors.enable("facts", Precomputed("mine", 3))
        client.vectors.enable("notes", Precomputed("mine", 3))
        assert client.messages.remember("facts", pgmem.Message(content="first"), threshold=0.9, embedding=BASE).added
        waiting = pgmem.Message(content="told again")
        assert client.messages.remember("facts", waiting, threshold=0.9).pending
        with psycopg.connect(dsn) as holder, psycopg.connect(dsn) as conn:
            _hold_merge_lock(holder, "test", "facts")  # the add below cannot decide: left undecided
            client.messages.add("notes", waiting, embedding=NEAR, connection=conn)
            conn.commit()
            clients = [pgmem.connect(dsn, namespace="test", max_size=1) for _ in range(2)]
            errors: list[BaseException] = []

            def recover(c: pgmem.Client) -> None:
                try:
                    c.vectors.embed_pending()
                except BaseException as exc:  # noqa: BLE001 - reported by the test
                    errors.append(exc)

            threads = [threading.Thread(target=recover, args=(c,), daemon=True) for c in clients]
            for t in threads:
                t.start()
            # At least 2: the first client's background embedder may be woken by the add and wait too.
            _until(lambda: _lock_waiters(dsn) >= 2 or not any(t.is_alive() for t in threads), "both wait")
            holder.rollback()
            for t in threads:
                t.join(PATIENCE)
            for c in clients:
                c.close()
        assert not errors, errors
    assert _waiting(dsn) == []
    assert _entries(dsn, "facts") == [("first", 2, True)]


def test_a_busy_settle_lock_leaves_the_merge_lock_free(client: pgmem.Client, dsn: str, pending: pgmem.Message) -> None:
    """In the caller's transaction the recovery tries the merge lock, then the settle lock (a fork of the
    memory being taken holds it): with the second busy it takes neither, so merging adds of the memory do
    not wait for the caller's commit; the next embedder run decides the entry."""
    with psycopg.connect(dsn) as forking, psycopg.connect(dsn) as conn, psycopg.connect(dsn) as other:
        forking.execute("SELECT pg_advisory_xact_lock(28781, hashtext('test' || '/' || 'facts'))")
        assert client.messages.add("notes", pending, embedding=NEAR, connection=conn) is True
        merge_lock = other.execute("SELECT pg_try_advisory_xact_lock(28782, hashtext('test' || '/' || 'facts'))")
        assert merge_lock.fetchone() == (True,)  # free while the caller's transaction is still open
        other.rollback()
        conn.commit()
        forking.rollback()
    assert _waiting(dsn) == [("facts", pending.id)]
    client.vectors.embed_pending()
    assert _waiting(dsn) == []
    assert _entries(dsn, "facts") == [("first", 2, True)]


def _lock_waiters(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 28782 AND NOT granted"
        ).fetchone()
    return int(row[0]) if row else 0
