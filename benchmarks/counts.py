"""A memory's size (``messages.count``, MetaGPT's ``Memory.count``) at 1,000 and 1,000,000 messages, and
what keeping it costs a write.

    python -m benchmarks.counts                    # 1k and 1M
    python -m benchmarks.counts --big 200000 --iterations 100

Part 1, interleaved: ``count`` of a memory of 1,000 and of one of ``--big`` messages (the sum of the
memory's rows of ``pgmem.memory_counts``, migration 0017), beside counting the entries as pgmem did before
(``SELECT count(*)`` of the memory's entries, what it costs now to anyone who counts by hand).
Target (issue 34): count at 1M within 2x of count at 1k.

Part 2, interleaved: ``messages.add`` of one message and ``add_many`` of 10, with the count's triggers and
without them (disabled in a second memory's database by the owner: the same schema otherwise).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

import psycopg

import pgmem
from benchmarks._common import bench_database, timed_together, write_json

_ENTRIES = "SELECT count(*) FROM pgmem.memory_entries WHERE namespace = %s AND memory = %s"


def _load(client: pgmem.Client, memory: str, n: int) -> None:
    for start in range(0, n, 10_000):
        batch = [pgmem.Message(content=f"{memory} {i}") for i in range(start, min(n, start + 10_000))]
        client.messages.add_many(memory, batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/counts.json"))
    args = parser.parse_args()
    results: dict[str, Any] = {"big": args.big}
    # The second database on the first's server: the same server, the two schemas differing only in it.
    with bench_database(args.dsn, "_counts") as dsn, bench_database(dsn, "_counts_off") as off_dsn:
        with pgmem.connect(dsn, namespace="bench") as client, psycopg.connect(dsn) as raw:
            _load(client, "small", 1_000)
            _load(client, "big", args.big)
            raw.execute("ANALYZE pgmem.memory_entries")
            raw.execute("SET ROLE pgmem_app")
            raw.execute("SELECT set_config('pgmem.namespace', 'bench', false)")

            def by_hand(memory: str) -> Any:
                return raw.execute(_ENTRIES, ("bench", memory)).fetchone()

            part1 = timed_together(
                {
                    "count 1k": lambda: client.messages.count("small"),
                    f"count {args.big:,}": lambda: client.messages.count("big"),
                    "count(*) of the entries, 1k": lambda: by_hand("small"),
                    f"count(*) of the entries, {args.big:,}": lambda: by_hand("big"),
                },
                iterations=max(20, args.iterations // 10) if args.big > 200_000 else args.iterations,
                warmup=3,
            )
        with psycopg.connect(off_dsn, autocommit=True) as owner:
            owner.execute("ALTER TABLE pgmem.memory_entries DISABLE TRIGGER memory_entries_counted")
        counter = itertools.count()
        with pgmem.connect(dsn, namespace="bench") as on, pgmem.connect(off_dsn, namespace="bench") as off:

            def add(c: pgmem.Client, n: int) -> None:
                batch = [pgmem.Message(content=f"w {next(counter)}") for _ in range(n)]
                if n == 1:
                    c.messages.add("w", batch[0])
                else:
                    c.messages.add_many("w", batch)

            part2 = timed_together(
                {
                    "add 1, count kept": lambda: add(on, 1),
                    "add 1, no count trigger": lambda: add(off, 1),
                    "add_many 10, count kept": lambda: add(on, 10),
                    "add_many 10, no count trigger": lambda: add(off, 10),
                },
                iterations=args.iterations,
                shuffle=True,
            )
    results["count"], results["writes"] = part1, part2
    small, big = part1["count 1k"]["p50_us"], part1[f"count {args.big:,}"]["p50_us"]
    results["ratio_big_to_small"] = round(big / small, 2)
    for name, t in {**part1, **part2}.items():
        print(f"{name:<40} p50 {t['p50_us'] / 1000:8.3f} ms  p99 {t['p99_us'] / 1000:8.3f} ms")
    print(f"count at {args.big:,} / count at 1k: {results['ratio_big_to_small']}x (target <= 2)")
    for n in ("add 1", "add_many 10"):
        cost = part2[f"{n}, count kept"]["p50_us"] / part2[f"{n}, no count trigger"]["p50_us"]
        results[f"{n} with / without"] = round(cost, 3)
        print(f"{n}: with the count / without: {cost:.3f}x")
    write_json(args.out, results)


if __name__ == "__main__":
    main()
