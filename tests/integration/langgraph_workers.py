"""Writer processes for the LangGraph store's concurrency test (run as ``python -m``).

Each writer puts batches of items through its own ``PgmemStore`` (with an index: every put also replaces
vectors), the keys of a batch overlapping other writers' in a shuffled order, and prints one JSON line
per batch: the values it wrote, or the error it got.
"""

from __future__ import annotations

import json
import random
import sys
import traceback

import pgmem

DIMS = 8


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic, non-zero vectors: the letters of the text folded into 8 buckets."""
    out = []
    for text in texts:
        v = [1.0] + [0.0] * (DIMS - 1)
        for c in text:
            v[ord(c) % DIMS] += 1.0
        out.append(v)
    return out


def write(dsn: str, index: int, rounds: int, keys: int) -> None:
    from langgraph.store.base import PutOp

    from pgmem.integrations.langgraph import PgmemStore

    rng = random.Random(index)
    with pgmem.connect(dsn, namespace="test", max_size=2) as client:
        store = PgmemStore(client, index={"dims": DIMS, "embed": embed, "fields": ["text", "tags[*]"]})
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()  # start together
        for r in range(rounds):
            chosen = rng.sample(range(keys), k=rng.randint(5, keys))
            ops = [
                PutOp(("shared", f"p{k % 3}"), f"k{k}", {"text": f"w{index} r{r} k{k}", "tags": ["a", f"w{index}"]})
                for k in chosen
            ]
            try:
                store.batch(ops)
                sys.stdout.write(json.dumps({"ok": [[k, f"w{index} r{r} k{k}"] for k in chosen]}) + "\n")
            except Exception:  # noqa: BLE001 - reported to the test, which fails on it
                sys.stdout.write(json.dumps({"error": traceback.format_exc()}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    write(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
