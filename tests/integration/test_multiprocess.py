"""Many OS processes sharing one memory (``pgmem.integrations.metagpt.Memory(key="team")``).

Every worker is a real process started with the ``spawn`` context (nothing inherited but the
environment): it opens the memory through the process-wide default client, which reads ``PGMEM_DSN``
from the environment the ``default_client_env`` fixture sets. Workers report back through a queue; the
assertions run in the test process, on exact counts in SQL.

The worker functions live at module level so that a spawned child can import them by name.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import traceback
from collections import Counter
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import psycopg
import pytest

import pgmem

CTX = multiprocessing.get_context("spawn")
NAMESPACE = "default"  # the default client's namespace (PGMEM_NAMESPACE unset)
TIMEOUT = 120  # seconds a group of workers may take before the test fails instead of hanging


def _child(target: Callable[..., Any], results: Any, index: int, *args: Any) -> None:
    try:
        value = target(index, *args)
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test with it
        results.put((index, "error", traceback.format_exc()))
        raise
    results.put((index, "ok", value))


def run_processes(target: Callable[..., Any], args: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``target(i, *args[i])`` in one spawned process each; return their results in index order."""
    results = CTX.Queue()
    procs = [CTX.Process(target=_child, args=(target, results, i, *a), daemon=True) for i, a in enumerate(args)]
    for p in procs:
        p.start()
    reports: dict[int, Any] = {}
    errors: list[str] = []
    try:
        for _ in procs:
            try:
                index, status, value = results.get(timeout=TIMEOUT)
            except queue.Empty:
                pytest.fail(f"workers did not report within {TIMEOUT}s ({len(reports)} of {len(procs)} did)")
            if status == "ok":
                reports[index] = value
            else:
                errors.append(f"worker {index}:\n{value}")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    assert not errors, "\n".join(errors)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    return [reports[i] for i in range(len(procs))]


def _team() -> Any:
    from pgmem.integrations.metagpt import Memory

    memory = Memory(key="team")
    memory.count()  # connect (and check the schema) before any barrier
    return memory


def _scalar(dsn: str, query: Any, params: tuple[Any, ...] = ()) -> Any:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, params).fetchone()
        assert row is not None
        return row[0]


def _entry_ids(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT message_id FROM pgmem.memory_entries WHERE namespace = %s AND memory = 'team' ORDER BY seq",
            (NAMESPACE,),
        ).fetchall()
    return [r[0] for r in rows]


# -- concurrent adds ----------------------------------------------------------------------------------

PER_PROCESS = 200
SHARED = 30  # of each process's 200 messages, this many are the same messages in every process


def _shared_message(j: int) -> pgmem.Message:
    return pgmem.Message(id=f"shared-{j:03d}", content=f"shared message {j}", cause_by="Broadcast")


def _add_worker(index: int, barrier: Any) -> list[str]:
    """Add 200 messages (170 own, 30 shared, interleaved) with single adds and batches of random size;
    return the ids of the own messages in add order."""
    rng = random.Random(index)
    memory = _team()
    own = [
        pgmem.Message(id=f"p{index}-{i:03d}", content=f"process {index} says {i}", cause_by=f"Role{index}")
        for i in range(PER_PROCESS - SHARED)
    ]
    shared = [_shared_message(j) for j in range(SHARED)]
    rng.shuffle(shared)
    sequence = list(own)
    for message in shared:
        sequence.insert(rng.randrange(len(sequence) + 1), message)
    barrier.wait()
    pos = 0
    while pos < len(sequence):
        size = rng.choice([1, 1, 1, 2, 5, 13, 25])
        chunk = sequence[pos : pos + size]
        if len(chunk) == 1:
            memory.add(chunk[0])
        else:
            memory.add_batch(chunk)
        pos += size
    return [m.id for m in own]


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 8])
def test_concurrent_adds_lose_and_duplicate_nothing(default_client_env: str, processes: int) -> None:
    dsn = default_client_env
    barrier = CTX.Barrier(processes, timeout=TIMEOUT)
    own_orders = run_processes(_add_worker, [(barrier,)] * processes)

    expected = processes * (PER_PROCESS - SHARED) + SHARED
    assert _scalar(dsn, "SELECT count(*) FROM pgmem.messages") == expected
    assert _scalar(dsn, "SELECT count(DISTINCT id) FROM pgmem.messages") == expected
    assert _scalar(dsn, "SELECT count(*) FROM pgmem.memory_entries") == expected
    assert _scalar(dsn, "SELECT count(DISTINCT message_id) FROM pgmem.memory_entries") == expected
    assert _scalar(dsn, "SELECT count(DISTINCT seq) FROM pgmem.memory_entries") == expected
    assert _scalar(dsn, "SELECT count(*) FROM pgmem.memories") == 1
    # Each shared message was stored once, with its content.
    with psycopg.connect(dsn) as conn:
        shared = conn.execute("SELECT id, content FROM pgmem.messages WHERE id LIKE 'shared-%%' ORDER BY id").fetchall()
    assert shared == [(f"shared-{j:03d}", f"shared message {j}") for j in range(SHARED)]

    # Every process's own messages are in the memory in the order that process added them.
    entries = _entry_ids(dsn)
    for index, own in enumerate(own_orders):
        assert [i for i in entries if i.startswith(f"p{index}-")] == own

    # The facade sees the same: every message once.
    with pgmem.connect(dsn, namespace=NAMESPACE, min_size=0, max_size=1) as client:
        from pgmem.integrations.metagpt import Memory

        got = Memory("team", client=client).get()
    assert len(got) == expected
    assert [m.id for m in got] == entries
    assert not [i for i, n in Counter(m.id for m in got).items() if n > 1]


# -- read-your-peer's-writes ---------------------------------------------------------------------------

ROUNDS = 50


def _ping_pong_worker(index: int, conn: Connection, first: bool) -> list[str]:
    """Alternate with the peer at the other end of ``conn``: add a message and send its id; receive the
    peer's id and check, at once, that this process's memory shows it as the newest message."""
    memory = _team()
    problems: list[str] = []

    def check(peer_id: str, round_: int) -> None:
        newest = memory.get(1)
        if not newest or newest[0].id != peer_id:
            problems.append(f"round {round_}: newest is {newest[0].id if newest else None}, expected {peer_id}")
        if peer_id not in {m.id for m in memory.get(3)}:
            problems.append(f"round {round_}: {peer_id} missing from get(3)")
        from pgmem.integrations.metagpt import Memory

        if Memory("team").get_by_position(-1) is None:
            problems.append(f"round {round_}: a second Memory('team') object sees nothing")

    def add(round_: int) -> None:
        message = pgmem.Message(id=f"w{index}-{round_}", content=f"worker {index} round {round_}")
        memory.add(message)
        conn.send(message.id)

    for round_ in range(ROUNDS):
        if first:
            add(round_)
            check(conn.recv(), round_)
        else:
            check(conn.recv(), round_)
            add(round_)
    return problems


@pytest.mark.slow
def test_two_processes_see_each_others_messages_as_soon_as_add_returns(default_client_env: str) -> None:
    a, b = CTX.Pipe()
    problems = run_processes(_ping_pong_worker, [(a, True), (b, False)])
    assert problems == [[], []]
    assert _scalar(default_client_env, "SELECT count(*) FROM pgmem.memory_entries") == 2 * ROUNDS
    # Strict alternation: w0, w1, w0, w1, ...
    assert _entry_ids(default_client_env) == [f"w{i % 2}-{i // 2}" for i in range(2 * ROUNDS)]


# -- concurrent delete_newest ---------------------------------------------------------------------------

POPPED = 300


def _pop_worker(index: int, barrier: Any) -> list[str]:
    memory = _team()
    barrier.wait()
    popped = []
    while (message := memory.delete_newest()) is not None:
        popped.append(message.id)
    return popped


@pytest.mark.slow
def test_concurrent_delete_newest_never_returns_a_message_twice(default_client_env: str) -> None:
    dsn = default_client_env
    ids = [f"m{i:04d}" for i in range(POPPED)]
    with pgmem.connect(dsn, namespace=NAMESPACE, min_size=0, max_size=1) as client:
        client.messages.add_many("team", [pgmem.Message(id=i, content=f"message {i}") for i in ids])
    workers = 4
    barrier = CTX.Barrier(workers, timeout=TIMEOUT)
    popped = run_processes(_pop_worker, [(barrier,)] * workers)

    everything = [i for p in popped for i in p]
    duplicated = [i for i, n in Counter(everything).items() if n > 1]
    assert not duplicated
    assert sorted(everything) == ids
    # Each process popped newest first: its own list is in descending order.
    for p in popped:
        assert p == sorted(p, reverse=True)
    assert _scalar(dsn, "SELECT count(*) FROM pgmem.memory_entries") == 0
    assert _scalar(dsn, "SELECT count(*) FROM pgmem.messages") == 0


# -- overlapping batches ----------------------------------------------------------------------------------

OVERLAP = 300
OVERLAP_ROUNDS = 8


def _overlap_worker(index: int, barrier: Any) -> None:
    """Add the same messages as every other worker, each time in another order."""
    rng = random.Random(index)
    memory = _team()
    for round_ in range(OVERLAP_ROUNDS):
        barrier.wait()  # every round starts in every worker at once: the batches overlap in time
        batch = [pgmem.Message(id=f"r{round_}-{j:03d}", content=f"round {round_} message {j}") for j in range(OVERLAP)]
        rng.shuffle(batch)
        memory.add_batch(batch)


@pytest.mark.slow
def test_overlapping_batches_in_different_orders_do_not_deadlock(default_client_env: str) -> None:
    """Batches that insert the same messages in different orders once deadlocked in Postgres (and the
    deadlock surfaced as ConnectionFailed); rows are now locked in one global order."""
    dsn = default_client_env
    workers = 4
    barrier = CTX.Barrier(workers, timeout=TIMEOUT)
    run_processes(_overlap_worker, [(barrier,)] * workers)
    expected = OVERLAP * OVERLAP_ROUNDS
    assert _scalar(dsn, "SELECT count(*) FROM pgmem.messages") == expected
    assert _scalar(dsn, "SELECT count(*) FROM pgmem.memory_entries") == expected
    for round_ in range(OVERLAP_ROUNDS):
        assert (
            _scalar(dsn, "SELECT count(*) FROM pgmem.memory_entries WHERE message_id LIKE %s", (f"r{round_}-%",))
            == OVERLAP
        )


def test_a_deadlock_in_the_callers_transactions_is_a_conflict(dsn: str) -> None:
    """Two callers' transactions that add the same two messages in opposite orders deadlock in Postgres;
    the loser gets :class:`pgmem.Conflict` (retry), not ConnectionFailed, and the winner commits."""
    import threading

    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=1) as client:
        x, y = pgmem.Message(id="x", content="x"), pgmem.Message(id="y", content="y")
        # The memory's own row exists first, so that the first adds of both callers do not wait on it.
        client.messages.add("team", pgmem.Message(id="seed", content="seed"))
        conns = [psycopg.connect(dsn) for _ in range(2)]
        outcome: dict[int, BaseException | None] = {}
        both_hold_one = threading.Barrier(2, timeout=30)

        def caller(i: int, first: pgmem.Message, second: pgmem.Message) -> None:
            conn = conns[i]
            try:
                with conn.transaction():
                    client.messages.add("team", first, connection=conn)
                    both_hold_one.wait()
                    client.messages.add("team", second, connection=conn)
                outcome[i] = None
            except BaseException as exc:  # noqa: BLE001 - inspected below
                outcome[i] = exc

        threads = [
            threading.Thread(target=caller, args=(0, x, y)),
            threading.Thread(target=caller, args=(1, y, x)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        for c in conns:
            c.close()
        errors = [e for e in outcome.values() if e is not None]
        assert len(outcome) == 2 and len(errors) == 1, outcome
        assert isinstance(errors[0], pgmem.Conflict) and "retry" in str(errors[0])
        assert [m.id for m in client.messages.last("team")] in (["seed", "x", "y"], ["seed", "y", "x"])
