"""What ordering three more writers with a fork costs them (README, "Concurrency"), each against its path
before the fix, interleaved in one run on one database (quiet; p50/p99 in microseconds).

    python -m benchmarks.fork_races
    python -m benchmarks.fork_races --iterations 100

* A memory's messages policy, one batch of ``entries_batch`` (10 entries of a 20,000-entry memory): the
  statement alone, its own transaction (before), against ``sql/forks.sql`` ``removing`` then the batch
  in one pipeline (now).
* A merging add (``messages.remember`` with the caller's vector, no neighbour within the threshold, in a
  memory of 200 facts): ``merge_lock`` without the settle lock (before) against with it (now).
* ``move_oldest`` of one entry between two memories of 5,000 entries, neither forked: ``removing`` of the
  source and ``materialize`` of the destination, then the move (before), against ``removing`` of both and
  ``arriving``, then the move (now); one pipeline each.
"""

from __future__ import annotations

import argparse
import random
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pgmem
from benchmarks._common import bench_database, timed_together, write_json
from pgmem.embeddings import HashingEmbedder
from pgmem.planning import statements

F = statements.load("forks")
MSG = statements.load("messages")
MERGING = statements.load("merging")  # the dict pgmem's merging module reads its statements from
#: merge_lock before the fix: the same statement without its settle lock.
MERGE_LOCK_BEFORE = re.sub(r",\s*pg_advisory_xact_lock_shared\([^;]*?AS settled", "", MERGING["merge_lock"])


def _add(client: pgmem.Client, memory: str, n: int, prefix: str) -> None:
    for start in range(0, n, 5_000):
        batch = [pgmem.Message(content=f"{prefix} {i}") for i in range(start, min(n, start + 5_000))]
        client.messages.add_many(memory, batch)


def _policy(client: pgmem.Client, iterations: int) -> dict[str, Any]:
    n = max(20_000, (iterations + 10) * 10)
    for memory in ("pa", "pb"):
        _add(client, memory, n, memory)
    retention = client.retention
    params = {"age": None, "bound": 2**62, "limit": 10}

    def before() -> None:
        assert retention._scalar("entries_batch", {**params, "memory": "pa"}, None) == 10

    def now() -> None:
        assert retention._removal("pb", "entries_batch", {**params, "memory": "pb"}, None) == 10

    return timed_together(
        {"policy batch, statement alone (before)": before, "policy batch, removing + batch, one pipeline (now)": now},
        iterations=iterations,
        warmup=5,
        shuffle=True,
    )


@contextmanager
def _merge_lock(text: str) -> Iterator[None]:
    kept = MERGING["merge_lock"]
    MERGING["merge_lock"] = text  # type: ignore[assignment]  # LiteralString: the benchmark's own text
    try:
        yield
    finally:
        MERGING["merge_lock"] = kept


def _merging(client: pgmem.Client, iterations: int) -> dict[str, Any]:
    client.vectors.enable("facts")
    hashing = HashingEmbedder()
    rng = random.Random(0)  # words of their own per fact: no neighbour within the threshold, never merged
    texts = iter(" ".join(f"w{rng.getrandbits(40):x}" for _ in range(8)) for _ in range(10**6))
    for _ in range(200):
        text = next(texts)
        vector = hashing.embed([text])[0]
        client.messages.remember("facts", pgmem.Message(content=text), threshold=0.99, embedding=vector)

    def remember(text: str) -> Callable[[], None]:
        def run() -> None:
            t = next(texts)
            with _merge_lock(text):
                assert client.messages.remember(
                    "facts", pgmem.Message(content=t), threshold=0.99, embedding=hashing.embed([t])[0]
                ).added

        return run

    return timed_together(
        {
            "merging add, merge lock alone (before)": remember(MERGE_LOCK_BEFORE),
            "merging add, merge lock + settle lock (now)": remember(MERGING["merge_lock"]),
        },
        iterations=iterations,
        warmup=5,
        shuffle=True,
    )


def _move(client: pgmem.Client, iterations: int) -> dict[str, Any]:
    n = max(5_000, iterations + 10)
    for memory in ("sa", "sb", "da", "db"):
        _add(client, memory, n, memory)
    ns = client.namespace

    def before() -> None:  # the statements move_oldest ran before the fix, in one pipeline
        with client.executor.transaction(None, pipeline=True) as block:
            block.command(F["removing"], {"ns": ns, "memory": "sa"})
            block.command(F["materialize"], {"ns": ns, "memory": "da"})
            assert len(block.rows(MSG["move_oldest"], {"ns": ns, "memory": "sa", "to": "da", "n": 1})) == 1

    def now() -> None:
        assert len(client.messages.move_oldest("sb", "db", 1)) == 1

    return timed_together(
        {"move_oldest, source locked (before)": before, "move_oldest, both locked + arriving (now)": now},
        iterations=iterations,
        warmup=5,
        shuffle=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/fork_races.json"))
    args = parser.parse_args()
    assert MERGE_LOCK_BEFORE != MERGING["merge_lock"], "merge_lock's settle lock not found"
    results: dict[str, Any] = {}
    with bench_database(args.dsn, "_fork_races") as dsn, pgmem.connect(dsn, namespace="bench") as client:
        results.update(_policy(client, args.iterations))
        results.update(_merging(client, args.iterations))
        results.update(_move(client, args.iterations))
    for name, figures in results.items():
        print(f"{name:<56} p50 {figures['p50_us']:8.1f} us  p99 {figures['p99_us']:8.1f} us")
    write_json(args.out, results)


if __name__ == "__main__":
    main()
