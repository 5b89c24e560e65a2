"""A writer process for the concurrent-summarisation test (run as ``python -m``).

``python -m tests.integration.summary_workers <dsn> <worker> <messages>``: adds messages one at a time to
the shared memory, some in transactions it holds open for a moment (so entries commit out of number order).
"""

from __future__ import annotations

import random
import sys
import time

import psycopg

import pgmem

MEMORY = "team"


def write(dsn: str, worker: int, messages: int) -> None:
    rng = random.Random(worker)
    with pgmem.connect(dsn, namespace="test", max_size=2) as client, psycopg.connect(dsn) as conn:
        for i in range(messages):
            message = pgmem.Message(content=f"w{worker} message {i}")
            if rng.random() < 0.3:  # numbered now, committed a little later
                client.messages.add(MEMORY, message, connection=conn)
                time.sleep(rng.uniform(0.001, 0.02))
                conn.commit()
            else:
                client.messages.add(MEMORY, message)


if __name__ == "__main__":
    write(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
