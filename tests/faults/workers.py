"""Worker processes of the fault tests (run as ``python -m tests.faults.workers ...``).

``load OUT SECONDS INDEX``: push to the embedded server (``PGMEM_HOME``) for SECONDS, each push with an
idempotency key and pushed again after any error until it succeeds; write what happened to OUT (JSON).

``consume DSN NAMESPACE MODE WORK MARKER``: claim items one at a time and apply each one's effect (a row
in ``public.effects``), until the queue is empty; MARKER is created once the first item is claimed. MODE
``atomic``: the effect and the ack in one transaction (the exactly-once consumer pattern);
``effect_then_ack``: the effect committed, then the ack.
"""

from __future__ import annotations

import json
import sys
import time

import psycopg

import pgmem
from pgmem.errors import LeaseLost, PgmemError

QUEUE = "q"


def load(out: str, seconds: float, index: int) -> None:
    successes: list[float] = []
    errors: list[tuple[float, str, bool]] = []
    end = time.time() + seconds
    while True:  # a process may start while the server is down: connecting raises a typed error too
        try:
            client = pgmem.connect(namespace="kill", timeout=2, max_size=2)
            break
        except PgmemError as exc:
            errors.append((time.time(), type(exc).__name__, True))
            time.sleep(0.1)
    with client:
        n = 0
        while time.time() < end:
            key = f"w{index}-{n}"
            while True:
                try:
                    client.queues.push(QUEUE, pgmem.Message(content=key), idempotency_key=key)
                    break
                except Exception as exc:  # noqa: BLE001 - recorded: the test wants typed errors only
                    errors.append((time.time(), type(exc).__name__, isinstance(exc, PgmemError)))
                    time.sleep(0.05)
            successes.append(time.time())
            if n == 0:
                open(out + ".ready", "w").close()  # noqa: SIM115 - a marker file
            n += 1
    with open(out, "w") as f:
        json.dump({"pushed": n, "successes": successes, "errors": errors}, f)


def consume(dsn: str, namespace: str, mode: str, work: float, marker: str) -> None:
    with pgmem.connect(dsn, namespace=namespace, max_size=1) as client, psycopg.connect(dsn) as conn:
        idle, working = 0, False
        while idle < 20:
            items = client.queues.claim(QUEUE, n=1, lease=2)
            if not items:
                idle = idle + 1 if client.queues.depth(QUEUE)["ready"] == 0 else 0
                time.sleep(0.1)
                continue
            idle = 0
            if not working:  # tells the test this process is past its start-up: worth killing
                open(marker, "w").close()  # noqa: SIM115 - a marker file
                working = True
            item = items[0]
            if mode == "atomic":
                try:
                    with conn.transaction():
                        conn.execute("INSERT INTO effects (message_id) VALUES (%s)", (item.message.id,))
                        time.sleep(work)  # the work between the effect and its commit
                        client.queues.ack(item, connection=conn)
                except LeaseLost:
                    pass  # rolled back with the effect: another worker holds the item
            else:
                with conn.transaction():
                    conn.execute("INSERT INTO effects (message_id) VALUES (%s)", (item.message.id,))
                time.sleep(work)
                try:
                    client.queues.ack(item)
                except LeaseLost:
                    pass


if __name__ == "__main__":
    if sys.argv[1] == "load":
        load(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
    else:
        consume(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6])
