"""A merging add and the background embedder's merge of a near-duplicate in the same memory at once
(README, "Near-duplicates"): no deadlock, exactly one survivor.

The embedder decides a waiting merge in the transaction that stores the vector, after its store has taken
the memory's row (its vector-log revision) and while it holds its claim on the outbox; a merging add holds
the memory's merge lock from its first statement and then writes those same rows. The embedder therefore
never waits for the merge lock while holding them: it tries it, and when an adder holds it, rolls back and
runs the batch again with the lock taken first (pgmem._async.merging.MergeBusy).

Two real connections interleaved (the add's transaction is held open at its merge lock while the embedder
runs up to it), and a slow test with real processes racing round after round.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem.embeddings import HashingEmbedder, Precomputed
from tests.integration.test_multiprocess import run_processes
from tests.integration.test_near_duplicates import FACTS, VARIANTS, _entries

CTX = multiprocessing.get_context("spawn")
#: Generous: a deadline for progress on a busy machine, never a timing assertion.
PATIENCE = 120.0


def _waiting_for_merge_lock(dsn: str) -> bool:
    """Whether some session waits for a merge lock (advisory, first key 28782)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 28782 AND NOT granted"
        ).fetchone()
    return bool(row and row[0])


def _hold_merge_lock(conn: psycopg.Connection[Any], namespace: str, memory: str) -> None:
    """What a merging add's first statement does (sql/merging.sql merge_lock), in the caller's transaction."""
    conn.execute("SELECT pg_advisory_xact_lock(28782, hashtext(%s || '/' || %s))", (namespace, memory))


def _embed_in_thread(client: pgmem.Client) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(client.vectors.embed_pending())
        except Exception as exc:  # noqa: BLE001 - reported by the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"no progress: {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("exact", [False, True], ids=["near-duplicate", "same-message-given-vector"])
def test_a_merging_add_and_the_embedders_merge_at_once(dsn: str, exact: bool) -> None:
    """The add takes the merge lock; the embedder claims the waiting message, stores its vector and comes to
    the lock; then the add writes (its vector joins the memory's log: the row the embedder's store holds;
    ``exact``: it gives the vector of the very message the embedder claimed, whose outbox row it deletes)."""
    hashing = HashingEmbedder()
    with (
        pgmem.connect(dsn, namespace="test", max_size=2) as embedding,
        pgmem.connect(dsn, namespace="test", max_size=2, embedder=Precomputed(hashing.model, 384)) as writer,
    ):
        embedding.vectors.enable("facts")
        waiting = pgmem.Message(content=VARIANTS[0])
        assert writer.messages.remember("facts", waiting, threshold=0.9).pending  # no vector yet: the embedder's
        near = waiting if exact else pgmem.Message(content=VARIANTS[1])
        vector = hashing.embed([near.content])[0]
        with psycopg.connect(dsn) as conn:
            _hold_merge_lock(conn, "test", "facts")
            thread, outcome = _embed_in_thread(embedding)
            _until(lambda: _waiting_for_merge_lock(dsn) or not thread.is_alive(), "the embedder reaches the lock")
            assert thread.is_alive(), outcome  # it cannot finish: the waiting merge needs the lock held here
            found = embedding.messages.remember("facts", near, threshold=0.9, embedding=vector, connection=conn)
            conn.commit()
        thread.join(PATIENCE)
        assert not thread.is_alive()
        assert not isinstance(outcome[0], Exception), outcome
        embedding.vectors.embed_pending()  # whatever the run left queued (nothing, normally)
    entries = _entries(dsn, "facts")
    assert len(entries) == 1, entries
    if exact:  # the same message: it stays, its merge decided, nothing counted twice
        assert entries == [(VARIANTS[0], 1, False)] and not found.added
    else:  # the add stored its message first (the lock was its); the embedder merged the waiting one into it
        assert found.added and entries == [(VARIANTS[1], 2, True)]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.memory_entries WHERE merge_within IS NOT NULL").fetchone() == (
            0,
        )
        assert conn.execute("SELECT count(*) FROM pgmem.embedding_outbox").fetchone() == (0,)


# -- processes ------------------------------------------------------------------------------------------


def _racer(index: int, dsn: str, barrier: Any, model: str) -> int:
    """Process 0 writes each round's first variant without the model's embedder (left to the embedder);
    then, released together, process 1 embeds the outbox (deciding that merge) while processes 2.. remember
    their variants with their own embedder. Returns how many merges this process saw."""
    hashing = HashingEmbedder()
    embedder = Precomputed(model, 384) if index == 0 else hashing
    merged = 0
    with pgmem.connect(dsn, namespace="test", max_size=1, embedder=embedder) as client:
        client.vectors.pending("race")  # connect before the barrier
        for r, fact in enumerate(FACTS):
            if index == 0:
                client.messages.remember("race", pgmem.Message(content=f"{fact} (agent 0 noted)"), threshold=0.85)
            barrier.wait()
            if index == 1:
                client.vectors.embed_pending()
            elif index > 1:
                found = client.messages.remember(
                    "race", pgmem.Message(content=f"{fact} (agent {index} noted)"), threshold=0.85
                )
                merged += found.merged
            barrier.wait()  # the round is over
            del r
    return merged


@pytest.mark.slow
def test_adders_and_the_embedder_race_to_one_survivor(dsn: str) -> None:
    model = HashingEmbedder().model
    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        client.vectors.enable("race")
    processes = 4
    barrier = CTX.Barrier(processes, timeout=PATIENCE)
    run_processes(_racer, [(dsn, barrier, model)] * processes)
    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        client.vectors.embed_pending()
    with psycopg.connect(dsn) as conn:
        counts = conn.execute(
            "SELECT e.seen_count FROM pgmem.memory_entries e WHERE e.namespace = 'test' AND e.memory = 'race' "
            "ORDER BY e.seq"
        ).fetchall()
        assert counts == [(processes - 1,)] * len(FACTS)  # one survivor per fact: agent 0's and 2..'s
        assert conn.execute("SELECT count(*) FROM pgmem.memory_entries WHERE merge_within IS NOT NULL").fetchone() == (
            0,
        )
