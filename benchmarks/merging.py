"""Near-duplicate merge in batches (issue 36, item 3): ``add_many(merge="near")`` of 100 messages against
100 merging ``add`` calls and a plain ``add_many``, into an empty memory and into one of 5,000 entries.

    python -m benchmarks.merging                  # 100 messages, 5,000 entries, 7 rounds
    python -m benchmarks.merging --rounds 3

Given 64-dimension vectors (a Precomputed model, cosine): the database's work alone, no provider. Each
batch holds 50 facts told twice (the second a little off the first: cosine > 0.99), so half of it merges.
The three ways run interleaved, each round into its own memories (empty) or into memories of 5,000
entries loaded once (which grow by <= 100 entries a round). Times are whole calls, p50 over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

import pgmem
from benchmarks._common import bench_database, write_json
from pgmem.embeddings import Precomputed

DIM = 64
MODEL = Precomputed("bench-64", DIM)


def _batch(rng: np.random.Generator, n: int) -> tuple[list[pgmem.Message], np.ndarray]:
    facts = rng.normal(size=(n // 2, DIM))
    vectors = np.concatenate([facts, facts + rng.normal(0, 0.01, facts.shape)])
    order = rng.permutation(len(vectors))
    return [pgmem.Message(content=f"fact {rng.integers(1 << 60)}") for _ in order], vectors[order]


def _load(client: pgmem.Client, memory: str, size: int, rng: np.random.Generator) -> None:
    client.vectors.enable(memory, MODEL)
    for start in range(0, size, 1_000):
        k = min(1_000, size - start)
        client.messages.add_many(
            memory,
            [pgmem.Message(content=f"{memory} {start + i}") for i in range(k)],
            embeddings=rng.normal(size=(k, DIM)),
        )


def _key(prefix: str, way: str) -> str:
    return f"{prefix}-" + "".join(c if c.isalnum() else "_" for c in way)


def _ways(client: pgmem.Client, threshold: float) -> dict[str, Any]:
    def batch_near(memory: str, messages: list[pgmem.Message], vectors: np.ndarray) -> None:
        client.messages.add_many(memory, messages, embeddings=vectors, merge="near", threshold=threshold)

    def adds_near(memory: str, messages: list[pgmem.Message], vectors: np.ndarray) -> None:
        for message, vector in zip(messages, vectors, strict=True):
            client.messages.add(memory, message, embedding=vector, merge="near", threshold=threshold)

    def batch_plain(memory: str, messages: list[pgmem.Message], vectors: np.ndarray) -> None:
        client.messages.add_many(memory, messages, embeddings=vectors)

    return {"add_many(merge='near')": batch_near, "100 x add(merge='near')": adds_near, "add_many()": batch_plain}


def run(dsn: str | None, n: int, size: int, rounds: int) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    results: dict[str, Any] = {"n": n, "size": size, "rounds": rounds}
    with bench_database(dsn, "_merging") as bench, pgmem.connect(bench, namespace="bench", max_size=2) as client:
        ways = _ways(client, threshold=0.95)
        for name in ways:
            _load(client, _key("big", name), size, rng)
        times: dict[str, dict[str, list[float]]] = {"empty": {w: [] for w in ways}, "5k": {w: [] for w in ways}}
        for r in range(rounds + 1):  # the first round warms up
            for name, way in ways.items():
                for where, memory in (("empty", _key(f"empty{r}", name)), ("5k", _key("big", name))):
                    if where == "empty":
                        client.vectors.enable(memory, MODEL)
                    messages, vectors = _batch(rng, n)
                    start = time.perf_counter()
                    way(memory, messages, vectors)
                    elapsed = time.perf_counter() - start
                    if r:
                        times[where][name].append(elapsed * 1_000)
        for where, by_way in times.items():
            results[where] = {
                w: {"p50_ms": round(statistics.median(t), 1), "all_ms": [round(x, 1) for x in t]}
                for w, t in by_way.items()
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--size", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/merging.json"))
    args = parser.parse_args()
    results = run(args.dsn, args.n, args.size, args.rounds)
    write_json(args.out, results)
    for where in ("empty", "5k"):
        for way, figures in results[where].items():
            print(f"{where:6} {way:26} p50 {figures['p50_ms']:8.1f} ms")


if __name__ == "__main__":
    main()
