"""Writer and searcher processes for the FAISS cache consistency test (run as ``python -m``).

Writers add and delete messages of one memory through their own clients (their embeddings follow in the
background). The searcher answers queries from its :class:`pgmem.cache.VectorCache` and compares each
answer with an exact search in Postgres run right after it; a comparison counts only when the memory's
revision did not move around the pair (else it is skipped: the two answers saw different data).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import pgmem
from pgmem.cache import VectorCache

MEMORY = "shared"
WORDS = (
    "snake game board score level player tile merge web cli design review code test bug fix deploy "
    "server queue memory vector index search cache budget latency"
).split()
TOLERANCE = 1e-5


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(4))


def write(dsn: str, index: int, rounds: int) -> None:
    rng = random.Random(index)
    with pgmem.connect(dsn, namespace="test", max_size=2) as client:
        mine: list[str] = []
        for i in range(rounds):
            batch = [
                pgmem.Message(id=f"w{index}-{i}-{j}", content=f"{_text(rng)} w{index}x{i}x{j}")
                for j in range(rng.randint(1, 3))
            ]
            client.messages.add_many(MEMORY, batch)
            mine += [m.id for m in batch]
            if mine and rng.random() < 0.35:
                client.messages.delete(MEMORY, mine.pop(rng.randrange(len(mine))))
            # bursts of writes with pauses: the searcher needs quiet windows to compare in
            time.sleep(rng.uniform(0.05, 0.1) if i % 5 == 4 else rng.uniform(0, 0.01))
        client.vectors.flush()


def same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> bool:
    """Equal up to ties: the same scores position by position, the same ids except among equal scores."""
    if len(got) != len(want):
        return False
    if any(abs(g[1] - w[1]) > TOLERANCE for g, w in zip(got, want, strict=True)):
        return False
    for (gid, gscore), (wid, _) in zip(got, want, strict=True):
        if gid != wid:
            tied = [i for i, s in want if abs(s - gscore) <= TOLERANCE]
            if gid not in tied and not (want and abs(gscore - want[-1][1]) <= TOLERANCE):
                return False
    return True


def search(dsn: str, mode: str, done_flag: str) -> dict[str, object]:
    rng = random.Random(99)
    checked = skipped = 0
    mismatches: list[object] = []
    final_checked = 0
    with pgmem.connect(dsn, namespace="test", max_size=2) as client:
        cache = VectorCache(client, mode=mode)  # type: ignore[arg-type]

        def compare(final: bool) -> bool | None:
            query = client.embedder.embed([_text(rng)])[0]
            before = client.vectors.head_rev(MEMORY)
            if mode == "default" and not cache.wait_announced(MEMORY, before, timeout=30):
                # default mode's bound is notification delivery: compare once it has been delivered
                mismatches.append({"final": final, "rev": before, "undelivered": cache.announced(MEMORY)})
                return False
            got = cache.search_vectors(MEMORY, query, 10)[0]
            hits = client.search(vector=query, memory=MEMORY, k=10, mode="exact")
            want = [(h.message.id, h.score) for h in hits]
            if client.vectors.head_rev(MEMORY) != before:
                return None
            ok = same(got, want)
            if not ok:
                mismatches.append({"final": final, "rev": before, "got": got, "want": want})
            return ok

        while not Path(done_flag).exists():
            result = compare(False)
            if result is None:
                skipped += 1
            else:
                checked += 1
        time.sleep(0.1)
        for _ in range(20):
            if compare(True) is not None:
                final_checked += 1
        stats = cache.stats
        cache.close()
    return {
        "checked": checked,
        "skipped": skipped,
        "final_checked": final_checked,
        "mismatches": mismatches[:5],
        "mismatch_count": len(mismatches),
        "hits": stats.hits,
        "catch_ups": stats.catch_ups,
        "loads": stats.loads,
        "notifications": stats.notifications,
    }


if __name__ == "__main__":
    role, dsn = sys.argv[1], os.environ["PGMEM_DSN"]
    if role == "write":
        write(dsn, int(sys.argv[2]), int(sys.argv[3]))
    else:
        print(json.dumps(search(dsn, sys.argv[2], sys.argv[3])))
