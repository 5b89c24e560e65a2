"""What keeping items' history (migration 0022) costs their writes, and what a read as of a time costs.

    python -m benchmarks.item_history
    python -m benchmarks.item_history --items 10000 --iterations 400

Two databases on one server, the same schema, the history triggers disabled in the second by the owner
(what a put cost before 0022). Interleaved, in each: ``items.put`` of a new item (no history: an
insert), ``items.put`` over an existing one (the trigger stores the old version), ``put_many`` of 10
updates, and ``delete`` (the trigger stores the deleted version). Then, in the first, ``get`` and a
filtered ``search`` now and ``as_of`` a time before the updates. ``--items`` items are loaded first
under 10 paths and updated once each (their history then holds as many versions); the cost of a write
does not grow with them (one row and two index entries per version), a read as of a time scans the
prefix's current rows and versions.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

import psycopg

import pgmem
from benchmarks._common import bench_database, timed_together, write_json


def _load(client: pgmem.Client, n: int) -> None:
    for start in range(0, n, 1000):
        writes: list[Any] = [
            {"path": ("docs", f"p{i % 10}"), "key": f"k{i}", "value": {"i": i, "tag": f"t{i % 50}"}}
            for i in range(start, min(n, start + 1000))
        ]
        client.items.put_many(writes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--items", type=int, default=5_000)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/item_history.json"))
    args = parser.parse_args()
    results: dict[str, Any] = {"items": args.items, "iterations": args.iterations}
    with bench_database(args.dsn, "_item_history") as dsn, bench_database(dsn, "_item_history_off") as off_dsn:
        with psycopg.connect(off_dsn, autocommit=True) as owner:
            owner.execute("ALTER TABLE pgmem.items DISABLE TRIGGER items_history_updated")
            owner.execute("ALTER TABLE pgmem.items DISABLE TRIGGER items_history_deleted")
        with pgmem.connect(dsn, namespace="bench") as on, pgmem.connect(off_dsn, namespace="bench") as off:
            for c in (on, off):
                _load(c, args.items)
            before = on.items.get(("docs", "p0"), "k0")
            assert before is not None
            for c in (on, off):
                _load(c, args.items)  # every item updated once: the history holds --items versions
            counter = itertools.count()

            def put_new(c: pgmem.Client) -> None:
                c.items.put(("w",), f"n{next(counter)}", {"v": 1})

            def update(c: pgmem.Client) -> None:
                c.items.put(("u",), f"k{next(counter) % 20}", {"v": next(counter)})

            def update_10(c: pgmem.Client) -> None:
                n = next(counter)
                c.items.put_many([{"path": ("m",), "key": f"k{i}", "value": {"v": n}} for i in range(10)])

            def delete(c: pgmem.Client) -> None:
                key = f"d{next(counter)}"
                c.items.put(("d",), key, {"v": 1})
                c.items.delete(("d",), key)

            writes = timed_together(
                {
                    "put (new item), history kept": lambda: put_new(on),
                    "put (new item), no history": lambda: put_new(off),
                    "put (update), history kept": lambda: update(on),
                    "put (update), no history": lambda: update(off),
                    "put_many 10 updates, history kept": lambda: update_10(on),
                    "put_many 10 updates, no history": lambda: update_10(off),
                    "put + delete, history kept": lambda: delete(on),
                    "put + delete, no history": lambda: delete(off),
                },
                iterations=args.iterations,
                shuffle=True,
            )
            at = before.updated_at
            reads = timed_together(
                {
                    "get": lambda: on.items.get(("docs", "p0"), "k0"),
                    "get as_of": lambda: on.items.get(("docs", "p0"), "k0", as_of=at),
                    "search prefix + filter": lambda: on.items.search(("docs", "p0"), filter={"tag": "t0"}),
                    "search prefix + filter as_of": lambda: on.items.search(
                        ("docs", "p0"), filter={"tag": "t0"}, as_of=at
                    ),
                },
                iterations=max(50, args.iterations // 3),
                shuffle=True,
            )
            # The check that the two differ only in it: the triggers' versions in the first, none in the second.
            versions = {}
            for name, d in (("history kept", dsn), ("no history", off_dsn)):
                with psycopg.connect(d) as owner:
                    row = owner.execute("SELECT count(*) FROM pgmem.item_history").fetchone()
                    versions[name] = int(row[0]) if row else 0
            assert versions["no history"] == 0 < versions["history kept"], versions
    results["writes"], results["reads"], results["versions"] = writes, reads, versions
    print(f"versions stored: {versions}")
    for name, t in {**writes, **reads}.items():
        print(f"{name:<40} p50 {t['p50_us'] / 1000:8.3f} ms  p99 {t['p99_us'] / 1000:8.3f} ms")
    for n in ("put (new item)", "put (update)", "put_many 10 updates", "put + delete"):
        ratio = writes[f"{n}, history kept"]["p50_us"] / writes[f"{n}, no history"]["p50_us"]
        results[f"{n} with / without"] = round(ratio, 3)
        print(f"{n}: with history / without: {ratio:.3f}x")
    write_json(args.out, results)


if __name__ == "__main__":
    main()
