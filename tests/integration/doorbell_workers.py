"""Processes for the doorbell tests (``tests/integration/test_doorbell.py``), run as ``python -m`` with
``PGMEM_DSN`` in the environment.

Roles:

* ``push INDEX COUNT SEED``: push COUNT items (``p<INDEX>-<i>``) one by one, in bursts with short pauses.
* ``consume WORKER QUOTA SEED``: wait on the queue with a huge ``poll_interval`` (only a notification can
  wake it), record each claimed item in ``doorbell_done`` in the transaction that acknowledges it, and
  exit once QUOTA items are done or a ``stop-*`` item came; prints a JSON report (every wait's duration).
* ``hold REPORT``: take this process's doorbell (:func:`pgmem.doorbell.acquire`), write the backend pid of
  its connection to REPORT once it leads, then sleep until killed.
* ``write REPORT``: a client that stores messages of a memory with vectors on command (one command a line
  on stdin: ``add MEMORY ID CONTENT``), answering each with the memory's head revision (``head_rev``).
* ``ring REPORT``: ``BEGIN; SELECT pgmem.ring_doorbell(0, false)``, report, and sleep until killed with the
  transaction open.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import psycopg

import pgmem
from pgmem import doorbell

NAMESPACE = "test"
QUEUE = "bells"
#: A consumer's wait: a wake-up that only polling could bring would take an hour.
POLL_INTERVAL = 3600.0
WAIT_TIMEOUT = 3600.0
LEASE = 3600.0


def report(path: str, value: object) -> None:
    """Write ``value`` as JSON to ``path`` atomically (the test polls for the file)."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(value))
    tmp.rename(path)


def push(dsn: str, index: int, count: int, seed: int) -> None:
    rng = random.Random(seed)
    with pgmem.connect(dsn, namespace=NAMESPACE, max_size=1) as client:
        i = 0
        while i < count:
            for _ in range(rng.randint(1, 10)):
                if i == count:
                    break
                client.queues.push(QUEUE, pgmem.Message(id=f"p{index}-{i}", content=f"job {index}/{i}"))
                i += 1
            time.sleep(rng.uniform(0, 0.02))


def consume(dsn: str, worker: str, quota: int, seed: int) -> None:
    rng = random.Random(seed)
    waits: list[float] = []
    empty = done = 0
    stopped = False
    with pgmem.connect(dsn, namespace=NAMESPACE, max_size=2) as client, psycopg.connect(dsn, autocommit=True) as log:
        while done < quota and not stopped:
            started = time.monotonic()
            items = client.queues.wait(
                QUEUE, rng.randint(1, 10), timeout=WAIT_TIMEOUT, poll_interval=POLL_INTERVAL, lease=LEASE, worker=worker
            )
            waits.append(time.monotonic() - started)
            if not items:
                empty += 1
                continue
            with log.transaction():  # recorded if and only if acknowledged
                with log.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO doorbell_done (item_id, message_id, worker) VALUES (%s, %s, %s)",
                        [(item.id, item.message.id, worker) for item in items],
                    )
                client.queues.ack(items, connection=log)
            done += len(items)
            stopped = any(item.message.id.startswith("stop-") for item in items)
        bell = client.queues._doorbell
        elections = bell.stats.elections if bell is not None else 0
    print(json.dumps({"worker": worker, "done": done, "empty": empty, "waits": waits, "elections": elections}))


def hold(dsn: str, path: str) -> None:
    bell = doorbell.acquire(dsn)
    deadline = time.monotonic() + 120
    while not bell.leading:
        if time.monotonic() > deadline:
            raise SystemExit("the doorbell was not taken within 120 s")
        time.sleep(0.005)
    conn = bell._conn
    assert conn is not None
    report(path, {"pid": os.getpid(), "backend": conn.info.backend_pid})
    while True:
        time.sleep(3600)


def write(dsn: str, path: str) -> None:
    with pgmem.connect(dsn, namespace=NAMESPACE, max_size=2) as client:
        report(path, {"pid": os.getpid()})
        for line in sys.stdin:
            command, _, rest = line.strip().partition(" ")
            if command == "quit":
                break
            memory, message_id, content = rest.split(" ", 2)
            client.messages.add(memory, pgmem.Message(id=message_id, content=content))
            client.vectors.flush()  # the embedding (and its vector_log revision) is written
            print(json.dumps({"rev": client.vectors.head_rev(memory)}), flush=True)


def ring(dsn: str, path: str) -> None:
    conn = psycopg.connect(dsn)  # not autocommit: the ring's transaction stays open
    row = conn.execute("SELECT pgmem.ring_doorbell(0, false)").fetchone()
    assert row is not None
    report(path, {"pid": os.getpid(), "backend": conn.info.backend_pid, "sent": row[0]})
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    role, args, dsn = sys.argv[1], sys.argv[2:], os.environ["PGMEM_DSN"]
    if role == "push":
        push(dsn, int(args[0]), int(args[1]), int(args[2]))
    elif role == "consume":
        consume(dsn, args[0], int(args[1]), int(args[2]))
    elif role == "hold":
        hold(dsn, args[0])
    elif role == "write":
        write(dsn, args[0])
    elif role == "ring":
        ring(dsn, args[0])
    else:
        raise SystemExit(f"unknown role {role!r}")
