"""What surviving faults costs on the hot paths (docs/reliability.md), interleaved in one run.

    python -m benchmarks.faults [--iterations N]

1. queues.push with an idempotency key (one more row, in pgmem.idempotency_keys, and a sequence value
   taken in the statement) against a plain push; O(log n) in the keys kept, like the items.
2. The idle check pgmem runs on every pool checkout (one ``poll`` of the socket) against psycopg_pool's
   ``check_connection`` (a round trip), measured on their own and through a read
   (``client.messages.count``) on a pool with and without the round-trip check.
3. The deadline: a read through a client with a timeout (its connection's waits end at the deadline)
   against one without (psycopg's own wait).
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool
from rich.console import Console
from rich.table import Table

import pgmem
from benchmarks._common import bench_database, timed_together, write_json
from pgmem.resilience import idle_broken

OUT = Path(__file__).parent / "results" / "faults.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--iterations", type=int, default=3000)
    args = parser.parse_args()
    n = args.iterations
    results: dict[str, Any] = {"iterations": n}
    with bench_database(args.dsn, "faults") as dsn:
        with pgmem.connect(dsn, namespace="bench", max_size=2) as client:
            message = pgmem.Message(content="x" * 200)
            results["push"] = timed_together(
                {
                    "push": lambda: client.queues.push("plain", message),
                    "push+key": lambda: client.queues.push("keyed", message, idempotency_key=uuid.uuid4().hex),
                },
                iterations=n,
            )
            client.messages.add("m", message)
            untimed = client.with_timeout(None)
            results["deadline"] = timed_together(
                {
                    "count, timeout=30": lambda: client.messages.count("m"),
                    "count, timeout=None": lambda: untimed.messages.count("m"),
                },
                iterations=n,
            )
            with ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
                with pool.connection() as conn:
                    results["check"] = timed_together(
                        {
                            "poll (pgmem)": lambda: idle_broken(conn),
                            "check_connection (round trip)": lambda: ConnectionPool.check_connection(conn),
                        },
                        iterations=n,
                    )
    write_json(OUT, results)
    table = Table(title=f"faults: cost on hot paths ({n} interleaved iterations, us)")
    for col in ("part", "case", "p50", "p99", "ratio p50"):
        table.add_column(col)
    for part in ("push", "deadline", "check"):
        cases = results[part]
        base = next(iter(cases.values()))["p50_us"]
        for case, t in cases.items():
            table.add_row(part, case, f"{t['p50_us']:.1f}", f"{t['p99_us']:.1f}", f"{t['p50_us'] / base:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
