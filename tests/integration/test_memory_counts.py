"""A memory's size in O(1) (issue 34, item 2; migration 0017): ``messages.count`` sums the memory's rows
of ``pgmem.memory_counts``, which triggers keep in the writing transactions, one row per writer shard.
The count must equal the entries whatever wrote or removed them, from many processes at once."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import psycopg
import pytest

import pgmem
from pgmem import Message


def _exact(dsn: str, namespace: str, memory: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pgmem.memory_entries WHERE namespace = %s AND memory = %s", (namespace, memory)
        ).fetchone()
        assert row is not None
        return int(row[0])


def test_every_way_of_writing_and_removing_keeps_the_count(client: pgmem.Client, dsn: str) -> None:
    rng = random.Random(3)
    memories = ["a", "b", "c"]
    for step in range(120):
        memory = rng.choice(memories)
        op = rng.choice(["add", "add_many", "append", "delete_oldest", "delete_newest", "trim", "move", "clear"])
        if op == "add":
            client.messages.add(memory, Message(content=f"m{step}"))
        elif op == "add_many":
            client.messages.add_many(memory, [Message(content=f"b{step}.{i}") for i in range(rng.randint(0, 20))])
        elif op == "append":
            client.messages.append(memory, [Message(content=f"p{step}.{i}") for i in range(3)])
        elif op == "delete_oldest":
            client.messages.delete_oldest(memory, rng.randint(1, 5))
        elif op == "delete_newest":
            client.messages.delete_newest(memory)
        elif op == "trim":
            client.messages.trim(memory, rng.randint(0, 10))
        elif op == "move":
            client.messages.move_oldest(memory, rng.choice([m for m in memories if m != memory]), rng.randint(1, 5))
        elif op == "clear" and rng.random() < 0.2:
            client.messages.clear(memory)
        for m in memories:
            assert client.messages.count(m) == _exact(dsn, client.namespace, m), (step, op, m)
    # A message forgotten everywhere leaves every memory holding it.
    shared = Message(content="shared")
    for m in memories:
        client.messages.add(m, shared)
    client.retention.forget([shared.id])
    for m in memories:
        assert client.messages.count(m) == _exact(dsn, client.namespace, m)


def test_a_caller_s_rolled_back_transaction_counts_nothing(client: pgmem.Client, dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        with pytest.raises(RuntimeError), conn.transaction():
            client.messages.add_many("r", [Message(content=f"x{i}") for i in range(10)], connection=conn)
            raise RuntimeError
    assert client.messages.count("r") == 0
    client.messages.add("r", Message(content="kept"))
    assert client.messages.count("r") == 1


def test_the_count_reads_the_counts_not_the_entries(client: pgmem.Client, dsn: str) -> None:
    client.messages.add_many("big", [Message(content=f"m{i}") for i in range(3000)])
    with psycopg.connect(dsn) as conn:
        conn.execute("SET ROLE pgmem_app")
        conn.execute("SELECT set_config('pgmem.namespace', %s, false)", (client.namespace,))
        text = pgmem.planning.statements.load("messages")["count"]
        params = {"ns": client.namespace, "memory": "big", "upto": None}
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + text, params))
    assert "memory_counts" in plan and "memory_entries" not in plan
    assert client.messages.count("big") == 3000


_WRITER = textwrap.dedent(
    """
    import random, sys
    import pgmem
    dsn, worker = sys.argv[1], int(sys.argv[2])
    rng = random.Random(worker)
    with pgmem.connect(dsn, namespace="team", max_size=2) as client:
        for i in range(60):
            if rng.random() < 0.7:
                batch = [pgmem.Message(content=f"w{worker}.{i}.{j}") for j in range(rng.randint(1, 5))]
                client.messages.add_many("shared", batch)
            else:
                client.messages.delete_oldest("shared", rng.randint(1, 3))
    """
)


@pytest.mark.slow
def test_eight_processes_writing_one_memory_keep_its_count(dsn: str) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, dsn, str(w)], stderr=subprocess.PIPE, text=True)
        for w in range(8)
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    with pgmem.connect(dsn, namespace="team") as client:
        assert client.messages.count("shared") == _exact(dsn, "team", "shared") > 0
    with psycopg.connect(dsn) as conn:
        shards = conn.execute(
            "SELECT count(*) FROM pgmem.memory_counts WHERE namespace = 'team' AND memory = 'shared'"
        ).fetchone()
    assert shards is not None and 1 <= shards[0] <= 64
