"""Forks (issue 36, item 2; migration 0020): the cost of ``client.fork`` of a big memory, and reads of the
fork against the same reads of the original, side by side in one run.

    python -m benchmarks.forks                     # 100k messages
    python -m benchmarks.forks --size 20000 --iterations 50

Part 1: ``fork`` of a memory of ``--size`` messages (a new fork each call; O(1): one statement, no entry
copied). Target: p50 <= 50 ms at 100k.

Part 2, interleaved: ``last(20)``, ``by_action`` (a rare action: 20 messages) and ``search_text`` on the
original and on a fork taken after all its messages were added (which reads them through its lineage, the
parent's range of memory_entries_order_key) plus 20 messages of its own. Target: the fork within 1.2x.
Both parts run quiet and beside ``--busy`` CPU-bound processes (under load).

Part 3 (``--plain``, quiet only): what forks cost a memory that is no fork (1,000 messages with vectors,
k=10), interleaved. Search: the first pass asked whether the memory is a fork in a statement before every
search (emulated here by running that statement, ``inherits``, then the search) against now (the question
is a column of the search's own statement). Delete of one message: the statement alone (no fork check),
``materialize_fork`` then the statement, each its own round trip (before the fork race's fix), and
``messages.delete`` now (the parent's settle lock, shared, and ``materialize_fork`` in one statement, then the
delete, in one pipeline: sql/forks.sql ``removing``). Up to ``--iterations`` 330 (1,000 messages).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

import psycopg

import pgmem
from benchmarks._common import bench_database, busy_processes, timed, timed_together, write_json


def _load(client: pgmem.Client, memory: str, n: int) -> None:
    for start in range(0, n, 10_000):
        batch = [
            pgmem.Message(content=f"{memory} message {i}", cause_by="Rare" if i % (n // 20 or 1) == 0 else "Common")
            for i in range(start, min(n, start + 10_000))
        ]
        client.messages.add_many(memory, batch)


def _run(client: pgmem.Client, size: int, iterations: int, label: str) -> dict[str, Any]:
    forks = itertools.count()
    fork = timed(lambda: client.fork("big", f"f{label}{next(forks)}"), iterations=iterations, warmup=3)
    reads = timed_together(
        {
            "last(20) original": lambda: client.messages.last("big", 20),
            "last(20) fork": lambda: client.messages.last("fork", 20),
            "by_action original": lambda: client.messages.by_action("big", "Rare"),
            "by_action fork": lambda: client.messages.by_action("fork", "Rare"),
            "search_text original": lambda: client.messages.search_text("big", "message 777", limit=10),
            "search_text fork": lambda: client.messages.search_text("fork", "message 777", limit=10),
        },
        iterations=iterations,
        warmup=5,
    )
    return {"fork": fork, "reads": reads}


def _plain(client: pgmem.Client, iterations: int) -> dict[str, Any]:
    client.vectors.enable("plain")
    client.messages.add_many("plain", [pgmem.Message(content=f"plain fact number {i}") for i in range(1_000)])
    client.vectors.flush()
    ids = iter([m.id for m in client.messages.last("plain", 0)])
    q = client.embedder.embed(["plain fact number 500"])[0]

    def asked_first() -> None:
        client.forks.inherits("plain", None)  # the first pass's extra statement
        client.vectors.search(vector=q, memory="plain", k=10)

    def delete_bare() -> None:  # the delete statement alone: no fork check
        client.messages._scalar("delete", {"memory": "plain", "id": next(ids)}, None)

    def delete_two_trips() -> None:  # before the fork race's fix: materialize_fork, then the delete, apart
        client.forks.materialize("plain", None)
        client.messages._scalar("delete", {"memory": "plain", "id": next(ids)}, None)

    searches = timed_together(
        {
            "search, fork asked first (first pass)": asked_first,
            "search, guard in the statement (now)": lambda: client.vectors.search(vector=q, memory="plain", k=10),
        },
        iterations=iterations * 3,
        warmup=20,
    )
    deletes = timed_together(
        {
            "delete, statement alone": delete_bare,
            "delete, materialize_fork then delete (two round trips, before)": delete_two_trips,
            "delete, settle lock + materialize_fork, delete (one pipeline, now)": lambda: client.messages.delete(
                "plain", next(ids)
            ),
        },
        iterations=iterations,
        warmup=5,
    )
    return {**searches, **deletes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--busy", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/forks.json"))
    parser.add_argument("--plain", action="store_true", help="part 3 only: a plain memory's search and delete")
    args = parser.parse_args()
    results: dict[str, Any] = {"size": args.size}
    with bench_database(args.dsn, "_forks") as dsn:
        if args.plain:
            with pgmem.connect(dsn, namespace="bench") as client:
                results["plain"] = _plain(client, args.iterations)
            for name, figures in results["plain"].items():
                print(f"[plain] {name:<40} p50 {figures['p50_us']:8.1f} us  p99 {figures['p99_us']:8.1f} us")
            write_json(args.out.with_name("forks_plain.json"), results)
            return
        with pgmem.connect(dsn, namespace="bench") as client:
            _load(client, "big", args.size)
            client.fork("big", "fork")
            client.messages.add_many("fork", [pgmem.Message(content=f"own {i}") for i in range(20)])
            with psycopg.connect(dsn, autocommit=True) as raw:
                raw.execute("ANALYZE pgmem.memory_entries, pgmem.messages")
            results["quiet"] = _run(client, args.size, args.iterations, "q")
            with busy_processes(args.busy):
                results["busy"] = _run(client, args.size, args.iterations, "b")
    for load in ("quiet", "busy"):
        part = results[load]
        print(f"[{load}] fork of {args.size:,}: p50 {part['fork']['p50_us'] / 1000:.2f} ms (target <= 50 ms)")
        for read in ("last(20)", "by_action", "search_text"):
            o, f = part["reads"][f"{read} original"]["p50_us"], part["reads"][f"{read} fork"]["p50_us"]
            part[f"{read} fork / original"] = round(f / o, 3)
            print(f"[{load}] {read:<12} original {o / 1000:.3f} ms  fork {f / 1000:.3f} ms  ratio {f / o:.2f}x")
    write_json(args.out, results)


if __name__ == "__main__":
    main()
