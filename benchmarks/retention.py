"""Retention policy runs: rows/s and how long a concurrent writer waits, by batch size.

A memory holding N messages with vectors (each entry removal logs its vector leaving the memory, under the
memory's row lock, which a writer adding a vector to that memory also needs) is purged by a policy run,
while one writer keeps adding a message with its vector to the same memory. Side by side, in the same
run, on the same data size:

  * ``trim``: the unbatched statement users had before (``client.retention.trim``: one DELETE, one
    transaction holding every lock to the end);
  * ``run(batch_size=b)`` of a memory policy (``entries_batch``) for several b;
  * ``run(batch_size=b)`` of a namespace messages policy (the forget machinery: entries, embeddings, queue
    items, archive, logged searches, messages, several statements per batch).

Reported: rows/s of the purge, and the writer's p50, p99 and worst time for one add (an add waits for the
batch holding the memory's lock: what a lock held for a whole batch, or the whole purge, costs it).
Cost grows linearly with N; a batch's lock hold with b.

    python -m benchmarks.retention            # N = 10,000, batch sizes 250, 1000, 4000
    python -m benchmarks.retention --n 2000   # quick
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

import pgmem
from benchmarks._common import bench_database, write_json
from pgmem import Message

RESULTS = Path(__file__).parent / "results" / "retention.json"


def _fill(client: pgmem.Client, n: int, dsn: str) -> None:
    client.vectors.enable("a")
    client.vectors.enable("src")  # the writer's messages, embedded beforehand
    client.messages.add_many("src", [Message(id=f"w{i}", content=f"writer note {i}") for i in range(5000)])
    for start in range(0, n, 1000):
        client.messages.add_many(
            "a",
            [
                Message(id=f"m{i}", content=f"note {i} about subject {i % 97}")
                for i in range(start, min(n, start + 1000))
            ],
        )
    client.vectors.flush()
    with psycopg.connect(dsn, autocommit=True) as conn:  # everything old
        conn.execute(
            "UPDATE pgmem.memory_entries SET added_at = added_at - interval '2 hours' WHERE namespace = %s",
            (client.namespace,),
        )
        conn.execute(
            "UPDATE pgmem.messages SET created_at = created_at - interval '2 hours'"
            " WHERE namespace = %s AND id LIKE 'm%%'",
            (client.namespace,),
        )


def _with_writer(dsn: str, namespace: str, purge: Any) -> tuple[float, list[float]]:
    """Run ``purge`` while a writer adds messages with vectors to memory ``a``; its seconds and the writer's
    waits (seconds per add)."""
    waits: list[float] = []
    done = threading.Event()
    ready = threading.Event()

    def write() -> None:
        # Adds an already embedded message to memory a: its vector joins a's vector log, under a's row
        # lock (the lock every purge batch of a holds to its commit). No embedding in the timed add.
        with pgmem.connect(dsn, namespace=namespace, max_size=1) as writer:
            writer.messages.add("a", Message(id="w0", content="writer note 0"))
            i = 1
            ready.set()
            while not done.is_set() and i < 5000:
                t = time.perf_counter()
                writer.messages.add("a", Message(id=f"w{i}", content=f"writer note {i}"))
                waits.append(time.perf_counter() - t)
                i += 1

    thread = threading.Thread(target=write)
    thread.start()
    ready.wait()
    time.sleep(0.2)
    t = time.perf_counter()
    purge()
    seconds = time.perf_counter() - t
    done.set()
    thread.join()
    return seconds, waits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--batches", default="250,1000,4000")
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    sizes = [int(b) for b in args.batches.split(",")]
    rows: list[dict[str, Any]] = []
    with bench_database(args.dsn, "retention") as dsn, pgmem.connect(dsn, namespace="bench") as root:
        cases: list[tuple[str, Any]] = [("trim (one statement)", None)]
        cases += [(f"memory policy, batch {b}", ("a", b)) for b in sizes]
        cases += [(f"namespace policy, batch {b}", ("*", b)) for b in sizes]
        for k, (name, case) in enumerate(cases):
            ns = f"r{k}"
            client = root.with_namespace(ns)
            _fill(client, args.n, dsn)
            if case is None:
                purge: Any = lambda c=client: c.retention.trim("a", older_than=3600)  # noqa: E731
            else:
                scope, b = case
                client.retention.set_policy("messages", scope=scope, max_age=3600)
                purge = lambda c=client, b=b: c.retention.run(batch_size=b)  # noqa: E731
            seconds, waits = _with_writer(dsn, ns, purge)
            waits.sort()
            rows.append(
                {
                    "case": name,
                    "rows": args.n,
                    "seconds": round(seconds, 3),
                    "rows_per_s": round(args.n / seconds),
                    "writer_adds": len(waits),
                    "writer_p50_ms": round(1000 * statistics.median(waits), 2) if waits else None,
                    "writer_p99_ms": round(1000 * waits[int(0.99 * (len(waits) - 1))], 2) if waits else None,
                    "writer_max_ms": round(1000 * waits[-1], 2) if waits else None,
                }
            )
    table = Table(title=f"retention: purge {args.n:,} old entries with vectors, a writer on the same memory")
    for column in rows[0]:
        table.add_column(column, justify="left" if column == "case" else "right")
    for row in rows:
        table.add_row(*[str(v) for v in row.values()])
    Console(width=200).print(table)
    write_json(RESULTS, {"n": args.n, "rows": rows})


if __name__ == "__main__":
    main()
