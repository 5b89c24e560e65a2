"""A process with a FAISS cache for test_forget (run as ``python -m tests.integration.forget_workers DSN``).

It searches memory ``a`` of namespace ``test`` from its cache and prints the hit ids (ids from the cache
alone: :meth:`VectorCache.search_vectors` reads no message back, so a stale cache would show); then it reads
a revision on stdin, waits until its cache knows it (NOTIFY), searches again and prints the hits, whether it
caught up, and whether the answer came from the cache without a reload.
"""

from __future__ import annotations

import json
import sys

import pgmem
from pgmem.cache import VectorCache


def main(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="test", max_size=2) as client, VectorCache(client) as cache:
        query = client.embedder.embed(["apple pie recipe"])[0]
        (hits,) = cache.search_vectors("a", query, 50)
        print(json.dumps({"hits": [i for i, _ in hits]}), flush=True)
        rev = json.loads(sys.stdin.readline())["rev"]
        caught_up = cache.wait_announced("a", rev, timeout=10)
        loads = cache.stats.loads
        (hits,) = cache.search_vectors("a", query, 50)
        answer = {"hits": [i for i, _ in hits], "caught_up": caught_up, "served_from_cache": cache.stats.loads == loads}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
