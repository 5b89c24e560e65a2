"""Forks racing other writers (issue 36, item 2; migrations 0020, 0023): a fork and a removal (a forget,
each removal of the message repository, a brain's delete, a memory's retention policy, the embedder's
near-duplicate merge) or a move into the forked memory at the same moment, on two connections
interleaved deterministically (one holds its transaction open until the other is seen waiting for it), and
a fork taken while other processes add to its parent."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.embeddings import HashingEmbedder, Precomputed
from pgmem.planning.forks import Fork
from tests.integration.test_near_duplicates import VARIANTS

ROOT = Path(__file__).resolve().parents[2]


def _held(dsn: str, memory: str) -> set[str]:
    """The message ids a memory holds, read from the tables through its lineage (the reference)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT e.message_id FROM pgmem.lineage('test', %s, NULL) AS l JOIN pgmem.memory_entries AS e "
            "ON e.namespace = 'test' AND e.memory = l.memory AND e.seq <= l.upto",
            (memory,),
        ).fetchall()
    return {str(r[0]) for r in rows}


def _wait_for_a_waiter(dsn: str, done: threading.Event, locktype: str = "advisory") -> None:
    """Until a backend waits for a lock of ``locktype`` (any: None) or the other side finished without waiting."""
    deadline = time.monotonic() + 60  # generous: only a failure waits this long
    with psycopg.connect(dsn, autocommit=True) as watch:
        while not done.is_set() and time.monotonic() < deadline:
            row = watch.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = coalesce(%s, locktype) AND NOT granted", (locktype,)
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            time.sleep(0.01)


def _in_thread(fn: Any) -> tuple[threading.Thread, threading.Event, list[Any]]:
    done, out = threading.Event(), []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 (handed to the test, which re-raises or asserts on it)
            out.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done, out


@pytest.mark.parametrize("removal", ["forget", "delete"])
def test_a_fork_taken_while_a_removal_is_in_flight_counts_without_it(
    dsn: str, client: pgmem.Client, removal: str
) -> None:
    client.messages.add_many("p", [Message(id=f"m{i}", content=f"m{i}") for i in range(5)])
    with psycopg.connect(dsn) as conn:  # a transaction left open: the removal has run, not committed
        if removal == "forget":
            client.retention.forget(["m2"], actor="test", connection=conn)
        else:
            client.messages.delete("p", "m2", connection=conn)
        thread, done, out = _in_thread(lambda: client.fork("p", "f"))
        _wait_for_a_waiter(dsn, done)
        conn.commit()
    thread.join(60)
    (fork,) = out
    assert isinstance(fork, Fork), fork
    want = {"m0", "m1", "m3", "m4"}  # the fork came after the removal, either kind
    assert _held(dsn, "f") == want
    assert fork.size == client.messages.count("f") == len(want)


@pytest.mark.parametrize("removal", ["forget", "delete"])
def test_a_removal_while_a_fork_is_in_flight_reaches_the_fork(dsn: str, client: pgmem.Client, removal: str) -> None:
    client.messages.add_many("p", [Message(id=f"m{i}", content=f"m{i}") for i in range(5)])
    with psycopg.connect(dsn) as conn:  # the fork made, not committed
        client.fork("p", "f", connection=conn)

        def remove() -> Any:
            if removal == "forget":
                return client.retention.forget(["m2"], actor="test")
            return client.messages.delete("p", "m2")

        thread, done, out = _in_thread(remove)
        _wait_for_a_waiter(dsn, done)
        conn.commit()
    thread.join(60)
    assert not isinstance(out[0], BaseException), out[0]
    # A forget takes the message from every fork. A delete takes it from the parent only: it waited for
    # the fork (the parent's settle lock, shared, in a statement before its own: sql/forks.sql removing),
    # so its statement saw the fork, kept the message and copied the entry into it. (With the lock in the
    # delete's statement, whose snapshot predates it, the message went, and the fork lost it.)
    want = {"m0", "m1", "m3", "m4"} if removal == "forget" else {f"m{i}" for i in range(5)}
    assert _held(dsn, "f") == want
    assert client.messages.count("f") == len(want)
    assert _held(dsn, "p") == {"m0", "m1", "m3", "m4"}


@pytest.mark.slow
def test_a_fork_taken_while_processes_add_holds_exactly_the_parent_up_to_its_point(dsn: str) -> None:
    """Four processes add to the parent while forks are taken: each fork holds exactly the parent's entries
    with seq <= its point (none after, none missing), and its size is their number."""
    with pgmem.connect(dsn, namespace="test") as client:
        client.messages.add("p", Message(id="seed", content="seed"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = (
        "import sys, pgmem\n"
        "w = sys.argv[1]\n"
        "with pgmem.connect(sys.argv[2], namespace='test') as c:\n"
        "    for i in range(300):\n"
        "        c.messages.add('p', pgmem.Message(id=f'{w}-{i}', content=f'{w} {i}'))\n"
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(w), dsn], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True
        )
        for w in range(4)
    ]
    forks = []
    try:
        with pgmem.connect(dsn, namespace="test") as client:
            while any(w.poll() is None for w in writers) and len(forks) < 40:
                forks.append(client.fork("p", f"f{len(forks)}"))
                time.sleep(0.02)
    finally:
        for w in writers:
            _, err = w.communicate(timeout=300)
            assert w.returncode == 0, err
    assert len(forks) >= 2
    with psycopg.connect(dsn) as conn:
        parent = dict(
            conn.execute("SELECT message_id, seq FROM pgmem.memory_entries WHERE namespace = 'test' AND memory = 'p'")
        )
    with pgmem.connect(dsn, namespace="test") as client:
        for fork in forks:
            want = {i for i, seq in parent.items() if seq <= fork.upto_seq}
            assert _held(dsn, fork.memory) == want, fork
            assert fork.size == client.messages.count(fork.memory) == len(want), fork


def _summaries(dsn: str) -> dict[str, list[str]]:
    """Each memory's summaries' contents ('' once stale: a forget empties what may quote the message)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT memory, content FROM pgmem.summaries ORDER BY memory, level, first_seq").fetchall()
    out: dict[str, list[str]] = {}
    for memory, content in rows:
        out.setdefault(str(memory), []).append(str(content))
    return out


def _summarised(client: pgmem.Client, memory: str) -> None:
    """A level-1 summary of the whole memory, quoting every message (a fork copies it when forked)."""
    entries = client.messages.last(memory, 0)
    text = " ".join(m.content for m in entries)
    client.summaries.add(
        memory,
        level=1,
        first_seq=entries[0].seq or 1,
        last_seq=entries[-1].seq or 1,
        content=f"they said {text}",
        source_chars=len(text),
        source_tokens=len(entries),
    )


def _exists(dsn: str, memory: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT 1 FROM pgmem.memories WHERE key = %s", (memory,)).fetchone() is not None


@pytest.mark.parametrize("first", ["delete", "fork"])
def test_a_parent_deleted_while_a_fork_is_taken(dsn: str, client: pgmem.Client, first: str) -> None:
    """The parent memory deleted (a brain's delete: its history and the memory) on one connection while
    it is forked on another, each order: the fork holds the whole parent at its point, or fails with
    NotFound and leaves no memory; never a fork that lost entries."""
    history = [Message(id=f"m{i}", content=f"m{i}") for i in range(5)]
    client.brains.dump("b", history=history)
    parent = client.brains.keys("b")[0]
    with psycopg.connect(dsn) as conn:
        if first == "delete":
            client.brains.delete("b", connection=conn)
            thread, done, out = _in_thread(lambda: client.fork(parent, "f"))
        else:
            client.fork(parent, "f", connection=conn)
            thread, done, out = _in_thread(lambda: client.brains.delete("b"))
        _wait_for_a_waiter(dsn, done)
        conn.commit()
    thread.join(60)
    assert not _exists(dsn, parent)
    if first == "delete":
        assert isinstance(out[0], pgmem.NotFound), out  # the fork found no parent
        assert not _exists(dsn, "f")
    else:
        assert out == [True], out
        assert _held(dsn, "f") == {m.id for m in history}
        assert client.messages.count("f") == 5
        assert [m.content for m in client.messages.last("f")] == [m.content for m in history]


@pytest.mark.parametrize("first", ["forget", "fork"])
def test_a_parent_forgotten_while_a_fork_is_taken(dsn: str, client: pgmem.Client, first: str) -> None:
    """forget(memory=parent) and a fork of it, each order: forgetting erases everywhere, so the fork ends
    empty either way (taken after: an empty parent; taken before: the forget reached it), its count exact
    and the summary it copied emptied."""
    client.messages.add_many("p", [Message(id=f"m{i}", content=f"m{i}") for i in range(5)])
    _summarised(client, "p")
    with psycopg.connect(dsn) as conn:
        if first == "forget":
            client.retention.forget(memory="p", actor="test", connection=conn)
            thread, done, out = _in_thread(lambda: client.fork("p", "f"))
        else:
            client.fork("p", "f", connection=conn)
            thread, done, out = _in_thread(lambda: client.retention.forget(memory="p", actor="test"))
        _wait_for_a_waiter(dsn, done)
        conn.commit()
    thread.join(60)
    assert not isinstance(out[0], BaseException), out[0]
    assert _held(dsn, "f") == set() and client.messages.count("f") == 0
    if first == "forget":  # forked at 0 (an empty parent): no summary ends there
        assert out[0].size == 0 and out[0].upto_seq == 0
        assert _summaries(dsn) == {"p": [""]}
    else:  # the copy it took of the parent's summary is emptied too
        assert _summaries(dsn) == {"f": [""], "p": [""]}


@pytest.mark.parametrize("first", ["forget", "fork"])
def test_a_grandparents_forget_while_its_grandchild_is_forked(dsn: str, client: pgmem.Client, first: str) -> None:
    """A message of g forgotten while c (a fork of g) is forked into gc, each order: the message leaves gc
    too, gc's size counts without it, and the summaries that quoted it are emptied in g, c and gc."""
    client.messages.add_many("g", [Message(id=f"m{i}", content=f"m{i}") for i in range(5)])
    _summarised(client, "g")
    client.fork("g", "c")
    with psycopg.connect(dsn) as conn:
        if first == "forget":
            client.retention.forget(["m2"], actor="test", connection=conn)
            thread, done, out = _in_thread(lambda: client.fork("c", "gc"))
        else:
            client.fork("c", "gc", connection=conn)
            thread, done, out = _in_thread(lambda: client.retention.forget(["m2"], actor="test"))
        _wait_for_a_waiter(dsn, done)
        conn.commit()
    thread.join(60)
    assert not isinstance(out[0], BaseException), out[0]
    want = {"m0", "m1", "m3", "m4"}
    for memory in ("g", "c", "gc"):
        assert _held(dsn, memory) == want, memory
        assert client.messages.count(memory) == len(want), memory
    if first == "forget":
        assert out[0].size == len(want)
    assert _summaries(dsn) == {"c": [""], "g": [""], "gc": [""]}


# Each removal of a message repository's: what it does to "p" (on the connection given, None: the client's
# own) and the ids it takes out of it, of m0..m4.
_REMOVALS: dict[str, tuple[Any, set[str]]] = {
    "delete": (lambda c, conn: c.messages.delete("p", "m2", connection=conn), {"m2"}),
    "delete_many": (lambda c, conn: c.messages.delete_many("p", ["m1", "m3"], connection=conn), {"m1", "m3"}),
    "delete_at": (lambda c, conn: c.messages.delete_at("p", 1, connection=conn), {"m1"}),
    "delete_newest": (lambda c, conn: c.messages.delete_newest("p", connection=conn), {"m4"}),
    "delete_oldest": (lambda c, conn: c.messages.delete_oldest("p", 2, connection=conn), {"m0", "m1"}),
    "move_oldest": (lambda c, conn: c.messages.move_oldest("p", "q", 2, connection=conn), {"m0", "m1"}),
    "clear": (lambda c, conn: c.messages.clear("p", connection=conn), {f"m{i}" for i in range(5)}),
    "trim": (lambda c, conn: c.messages.trim("p", 2, connection=conn), {"m0", "m1", "m2"}),
}


@pytest.mark.parametrize("first", ["removal", "fork"])
@pytest.mark.parametrize(
    "removal",
    # delete and clear in the default run; the other removals share their path (forks.removing), in the slow leg
    [r if r in ("delete", "clear") else pytest.param(r, marks=pytest.mark.slow) for r in sorted(_REMOVALS)],
)
def test_a_removal_in_the_parent_racing_a_fork(dsn: str, client: pgmem.Client, removal: str, first: str) -> None:
    """A message removal in the parent on one connection and a fork of it on another, each holding its
    transaction open until the other is seen waiting: the fork taken first holds every entry the parent
    held at its point (messages readable, size exact) while the parent loses them; taken after, it holds
    the parent without them. Never a committed fork that lost entries it inherited (a delete used to take
    the message from the fork too: its statement's snapshot, taken before the fork committed, saw the
    message as nobody else's and deleted it)."""
    history = [Message(id=f"m{i}", content=f"m{i}") for i in range(5)]
    client.messages.add_many("p", history)
    remove, gone = _REMOVALS[removal]
    with psycopg.connect(dsn) as conn:
        if first == "removal":
            remove(client, conn)
            thread, done, out = _in_thread(lambda: client.fork("p", "f"))
        else:
            client.fork("p", "f", connection=conn)
            thread, done, out = _in_thread(lambda: remove(client, None))
        _wait_for_a_waiter(dsn, done)
        conn.commit()
    thread.join(60)
    assert out and not isinstance(out[0], BaseException), out
    everything = {m.id for m in history}
    kept = everything if first == "fork" else everything - gone
    assert _held(dsn, "f") == kept
    assert client.messages.count("f") == len(kept)
    assert [m.id for m in client.messages.last("f")] == [m.id for m in history if m.id in kept]
    if first == "removal":
        assert out[0].size == len(kept) and (out[0].upto_seq > 0) == bool(kept)
    assert _held(dsn, "p") == everything - gone
    assert client.messages.count("p") == len(everything - gone)


# -- the other writers that take entries out of a memory, or move them into one (the README's
# -- "Concurrency" bullet): a memory's retention policy, the near-duplicate merge, move_oldest's destination


@pytest.mark.parametrize("first", ["policy", "fork"])
def test_a_memorys_retention_policy_racing_a_fork(dsn: str, client: pgmem.Client, first: str) -> None:
    """A messages policy scoped to the parent (keep the newest 2) run on one connection while the parent is
    forked on another, each order: the fork taken first keeps all 5 entries it inherited (their messages
    too), taken after it holds the 2 the policy kept; its size exact either way. (Each batch of the run is
    its own statement: its snapshot predated the fork, so it deleted the messages as nobody else's.)"""
    history = [Message(id=f"m{i}", content=f"m{i}") for i in range(5)]
    client.messages.add_many("p", history)
    client.retention.set_policy("messages", scope="p", max_count=2)
    with psycopg.connect(dsn) as conn:
        if first == "policy":  # the run's batches inside this connection's transaction, left open
            conn.execute("SELECT 1")
            assert pgmem.connect(conn, namespace="test").retention.run(target="messages") == {"messages": 3}
            thread, done, out = _in_thread(lambda: client.fork("p", "f"))
        else:
            client.fork("p", "f", connection=conn)
            thread, done, out = _in_thread(lambda: client.retention.run(target="messages"))
        _wait_for_a_waiter(dsn, done)
        conn.commit()
    thread.join(60)
    assert out and not isinstance(out[0], BaseException), out
    everything, newest = {m.id for m in history}, {"m3", "m4"}
    kept = everything if first == "fork" else newest
    assert _held(dsn, "f") == kept
    assert client.messages.count("f") == len(kept)
    assert [m.id for m in client.messages.last("f")] == [m.id for m in history if m.id in kept]
    if first == "policy":
        assert out[0].size == len(kept)
    else:
        assert out[0] == {"messages": 3}
    assert _held(dsn, "p") == newest and client.messages.count("p") == 2


@pytest.mark.parametrize("first", ["merge", "fork"])
def test_the_embedders_merge_racing_a_fork(dsn: str, first: str) -> None:
    """A near-duplicate left waiting for the embedder (no vector when it was remembered), merged by the
    embedder into the fact the memory held while the memory is forked, each order: the fork taken first
    keeps both entries it inherited (the merged message stays, it is the fork's), taken after it holds the
    survivor only; its size exact either way. (The merge's statement deleted the message as nobody else's:
    its snapshot predated the fork, whose lock only its trigger waited for.)"""
    model = HashingEmbedder().model
    with (
        pgmem.connect(dsn, namespace="test", max_size=2) as client,
        pgmem.connect(dsn, namespace="test", max_size=2, embedder=Precomputed(model, 384)) as deferred,
    ):
        client.vectors.enable("p")
        fact = Message(id="fact", content=VARIANTS[1])
        assert client.messages.remember("p", fact, threshold=0.9).added
        again = Message(id="again", content=VARIANTS[0])
        assert deferred.messages.remember("p", again, threshold=0.9).pending  # the embedder decides it
        with psycopg.connect(dsn) as conn:
            if first == "merge":  # the embedder's transaction inside this connection's, left open
                conn.execute("SELECT 1")
                assert pgmem.connect(conn, namespace="test").vectors.embed_pending().embedded == 1
                assert _held(dsn, "p") == {"fact", "again"}  # not committed yet
                thread, done, out = _in_thread(lambda: client.fork("p", "f"))
            else:
                client.fork("p", "f", connection=conn)
                thread, done, out = _in_thread(client.vectors.embed_pending)
            _wait_for_a_waiter(dsn, done)
            conn.commit()
        thread.join(60)
        assert out and not isinstance(out[0], BaseException), out
        kept = {"fact", "again"} if first == "fork" else {"fact"}
        assert _held(dsn, "f") == kept
        assert client.messages.count("f") == len(kept)
        assert {m.id for m in client.messages.last("f")} == kept
        if first == "merge":
            assert out[0].size == 1
        assert _held(dsn, "p") == {"fact"} and client.messages.count("p") == 1


@pytest.mark.parametrize("first", ["move", "fork"])
def test_a_move_into_a_memory_racing_its_fork(dsn: str, client: pgmem.Client, first: str) -> None:
    """move_oldest(s, d) on one connection while d is forked on another, each order. The moved entries keep
    their sequence numbers, below the fork's point: the fork taken first holds d as it was (the moved
    entries arrived after it), taken after it holds them too, in d's order; never some of them, its size
    exact. (The move did not lock d: a fork read d without them and inherited them when the move committed,
    its size three for five entries.)"""
    client.messages.add_many("s", [Message(id=f"s{i}", content=f"s{i}") for i in range(3)])
    client.messages.add_many("d", [Message(id=f"d{i}", content=f"d{i}") for i in range(3)])
    with psycopg.connect(dsn) as conn:
        if first == "move":
            client.messages.move_oldest("s", "d", 2, connection=conn)
            thread, done, out = _in_thread(lambda: client.fork("d", "f"))
        else:
            client.fork("d", "f", connection=conn)
            thread, done, out = _in_thread(lambda: client.messages.move_oldest("s", "d", 2))
        _wait_for_a_waiter(dsn, done)
        conn.commit()
    thread.join(60)
    assert out and not isinstance(out[0], BaseException), out
    order = ["s0", "s1", "d0", "d1", "d2"]  # by sequence number: the moved entries kept theirs
    kept = order if first == "move" else order[2:]
    assert _held(dsn, "f") == set(kept)
    assert client.messages.count("f") == len(kept)
    assert [m.id for m in client.messages.last("f")] == kept
    if first == "move":
        assert out[0].size == len(kept)
    assert [m.id for m in client.messages.last("d")] == order and client.messages.count("d") == 5
    assert _held(dsn, "s") == {"s2"}


def test_a_move_into_a_forked_memory_leaves_its_forks_as_they_were(client: pgmem.Client) -> None:
    """Entries moved into a memory keep their (older) sequence numbers: its forks, and a fork of a fork, taken
    before still hold the memory as it was when they were taken (they inherited every entry up to their
    point, and the moved ones would have joined them), their sizes unchanged; a fork taken after holds them."""
    client.messages.add_many("s", [Message(id=f"s{i}", content=f"s{i}") for i in range(3)])
    client.messages.add_many("d", [Message(id=f"d{i}", content=f"d{i}") for i in range(3)])
    client.fork("d", "f")
    client.fork("f", "g")
    client.fork("d", "early", at=client.messages.last("d")[0].seq or 0)  # d0 only
    client.messages.move_oldest("s", "d", 2)
    for memory, want in (("f", ["d0", "d1", "d2"]), ("g", ["d0", "d1", "d2"]), ("early", ["d0"])):
        assert [m.id for m in client.messages.last(memory)] == want, memory
        assert client.messages.count(memory) == len(want), memory
    after = client.fork("d", "after")
    assert [m.id for m in client.messages.last("after")] == ["s0", "s1", "d0", "d1", "d2"]
    assert after.size == client.messages.count("after") == 5
