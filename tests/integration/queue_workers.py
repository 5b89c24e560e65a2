"""Producer and consumer processes for the queue stress test (run as ``python -m``)."""

from __future__ import annotations

import os
import sys

import psycopg

import pgmem

QUEUE = "stress"


def produce(dsn: str, index: int, count: int) -> None:
    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        for start in range(0, count, 100):
            batch = [
                pgmem.Message(id=f"p{index}-{i}", content=f"job {index}/{i}")
                for i in range(start, min(count, start + 100))
            ]
            client.queues.push_many(QUEUE, batch)


def consume(dsn: str, worker: str) -> None:
    # Odd workers acknowledge with a separate ack; even ones with the next claim (claim(ack=...)), so a
    # SIGKILL lands between processing and acknowledging on both paths.
    separate_ack = int(worker.lstrip("w")) % 2 == 1
    with pgmem.connect(dsn, namespace="test", max_size=1) as client, psycopg.connect(dsn, autocommit=True) as log:
        items: list[pgmem.planning.queues.QueueItem] = []
        while True:
            try:
                items = client.queues.wait(
                    QUEUE, n=10, timeout=5, lease=2, poll_interval=1, worker=worker, ack=None if separate_ack else items
                )
            except pgmem.planning.queues.LeaseLost:
                items = []  # the others were acknowledged; another worker holds the lost ones
                continue
            for item in items:
                # "Processing": recorded before the ack, so a SIGKILL in between means processed twice
                # but acknowledged once.
                log.execute(
                    "INSERT INTO stress_done (message_id, item_id, attempt, worker) VALUES (%s, %s, %s, %s)",
                    (item.message.id, item.id, item.attempts, worker),
                )
            if items and separate_ack:
                try:
                    client.queues.ack(items)
                except pgmem.planning.queues.LeaseLost:
                    pass  # another worker holds them now; it will acknowledge them


if __name__ == "__main__":
    role, dsn = sys.argv[1], os.environ["PGMEM_DSN"]
    if role == "produce":
        produce(dsn, int(sys.argv[2]), int(sys.argv[3]))
    else:
        consume(dsn, sys.argv[2])
