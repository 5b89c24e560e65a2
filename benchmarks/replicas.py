"""Read replicas on one machine: search throughput with 0, 1 and 2 streaming replicas, and how much of the
reading leaves the primary.

Setup: a private primary and two streaming replicas (``pg_basebackup -R``, tests/integration/
_replica_cluster.py) from the embedded package's binaries, all on this machine's cores. One memory holds
``--vectors`` real MiniLM vectors (384 dimensions, CPython comments, ../shared/data) with its HNSW index.
``--processes`` client processes each search it (k=10, vector queries from the held-out rows) for
``--seconds``, once per configuration: no replica, one, two.

Reported per configuration: searches per second (all processes), p50/p99 of one search, the share of
searches the replicas served (the clients' ``replica_stats()``), and each server's CPU (its processes'
user + system time over the run) per 1,000 searches. On one machine the replicas share the primary's
cores, so throughput is not expected to grow here: the figures that matter are the share off the primary
and the primary's CPU per search. Cost growth: an HNSW search is O(log n) per server; a replica adds
nothing per search but the WAL it replays (O(writes)).

A second scenario times read-your-writes: two clients side by side, one reading the primary and one a
replica, their rounds interleaved (the machine's noise lands on both alike); a round writes a message (and
its embedding), searches for it, and searches again. Reported: whether each found its write, the search's
p50/p99 after a write (with a replica: the position check on the primary and any wait for the replay
included) and after a read (no check), and how often the replica client waited.

    python -m benchmarks.replicas             # 10k vectors, 4 processes, 8 s per configuration
    python -m benchmarks.replicas --quick     # 3k vectors, 2 processes, 3 s
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from benchmarks._common import DATA, write_json

RESULTS = Path(__file__).resolve().parent / "results"
K = 10


class LookupEmbedder:
    """The data set's vector for a text ``"<row>|..."`` (the vectors MiniLM gave these texts)."""

    model = "all-MiniLM-L6-v2-lookup"
    dimension = 384

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.vectors[[int(t.split("|", 1)[0]) for t in texts]]

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


def _vectors() -> tuple[list[str], np.ndarray]:
    texts = json.loads((DATA / "texts.json").read_text())
    return texts, np.load(DATA / "embeddings-f16.npy").astype(np.float32)


def _load(dsn: str, n: int) -> None:
    """``n`` messages with their vectors in memory ``m`` (pgmem's own write path, embedded in the background)."""
    import pgmem

    texts, vectors = _vectors()
    with pgmem.connect(dsn, namespace="bench", embedder=LookupEmbedder(vectors), max_size=2) as client:
        client.vectors.enable("m")
        for start in range(0, n, 500):
            batch = [pgmem.Message(content=f"{i}|{texts[i]}") for i in range(start, min(n, start + 500))]
            client.messages.add_many("m", batch)
        client.vectors.flush()


def _searcher(
    dsn: str, replicas: list[str], seconds: float, seed: int, ready: Any, go: Any, out: Any, done: Any
) -> None:
    """One client process: warm up, wait for the others, search for ``seconds``; counts and latencies to
    ``out``; keep its connections (the servers' backends, whose CPU is read) until ``done``."""
    import pgmem

    _, vectors = _vectors()
    queries = vectors[-1000:]
    rng = np.random.default_rng(seed)
    with pgmem.connect(dsn, namespace="bench", replicas=replicas, max_size=2) as client:
        for _ in range(200):
            client.vectors.search(vector=queries[rng.integers(0, 1000)], memory="m", k=K)
        ready.put(seed)
        go.wait()
        before = client.replica_stats()
        samples = []
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            start = time.perf_counter()
            client.vectors.search(vector=queries[rng.integers(0, 1000)], memory="m", k=K)
            samples.append(time.perf_counter() - start)
        after = client.replica_stats()
        served = 0
        if after is not None and before is not None:
            served = sum(a.reads - b.reads for a, b in zip(after.replicas, before.replicas, strict=True))
        out.put({"samples": samples, "replica_reads": served})
        done.wait()


def _cpu(pid: int) -> float:
    """User + system CPU seconds of a postmaster and its live children (backends, walsender, startup...)."""
    try:
        root = psutil.Process(pid)
        total = 0.0
        for proc in [root, *root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
        return total
    except psutil.NoSuchProcess:
        return 0.0


def _throughput(cluster: Any, replicas: list[str], processes: int, seconds: float) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    ready, go, out, done = ctx.Queue(), ctx.Event(), ctx.Queue(), ctx.Event()
    servers = [cluster.primary, *cluster.replicas]
    workers = [
        ctx.Process(target=_searcher, args=(cluster.primary.dsn, replicas, seconds, seed, ready, go, out, done))
        for seed in range(processes)
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=300)
    cpu_before = [_cpu(s.process.pid) for s in servers]
    go.set()
    results = [out.get(timeout=seconds + 120) for _ in workers]
    cpu_after = [_cpu(s.process.pid) for s in servers]
    done.set()
    for w in workers:
        w.join()
    samples = sorted(s for r in results for s in r["samples"])
    searches = len(samples)
    served = sum(r["replica_reads"] for r in results)
    cpu = [round(max(0.0, a - b), 2) for a, b in zip(cpu_after, cpu_before, strict=True)]
    return {
        "replicas": len(replicas),
        "processes": processes,
        "searches": searches,
        "searches_per_s": round(searches / seconds, 1),
        "p50_us": round(samples[len(samples) // 2] * 1e6, 1),
        "p99_us": round(samples[int(len(samples) * 0.99)] * 1e6, 1),
        "off_primary": round(served / searches, 4) if searches else 0.0,
        "cpu_s": {"primary": cpu[0], **{f"replica{i + 1}": c for i, c in enumerate(cpu[1:])}},
        "primary_cpu_ms_per_1k": round(cpu[0] / searches * 1e6, 1) if searches else None,
        "replicas_cpu_ms_per_1k": round(sum(cpu[1:]) / searches * 1e6, 1) if searches else None,
    }


def _read_your_writes(cluster: Any, replica: str, rounds: int, base: int) -> dict[str, Any]:
    """Two clients side by side, one reading the primary and one a replica, their rounds interleaved so the
    machine's noise lands on both alike: each round writes a message (and its embedding) and searches for
    it, then searches again (a read after a read). Latency of both searches, and whether the write was found.
    """
    import pgmem

    texts, vectors = _vectors()
    kinds = {"primary": [], "replica": []}
    clients = {
        kind: pgmem.connect(
            cluster.primary.dsn,
            namespace="bench",
            embedder=LookupEmbedder(vectors),
            replicas=[replica] if kind == "replica" else None,
            max_size=2,
        )
        for kind in kinds
    }
    out: dict[str, Any] = {}
    try:
        after_write: dict[str, list[float]] = {k: [] for k in kinds}
        after_read: dict[str, list[float]] = {k: [] for k in kinds}
        found = dict.fromkeys(kinds, 0)
        for kind, client in clients.items():
            client.vectors.enable(f"w-{kind}")
        for i in range(rounds):
            order = list(kinds) if i % 2 == 0 else list(reversed(kinds))
            for j, kind in enumerate(order):
                client, memory = clients[kind], f"w-{kind}"
                row = base + 2 * i + j
                message = pgmem.Message(content=f"{row}|{texts[row]}")
                client.messages.add(memory, message)
                client.vectors.flush()
                start = time.perf_counter()
                hits = client.vectors.search(vector=vectors[row], memory=memory, k=1)
                after_write[kind].append(time.perf_counter() - start)
                found[kind] += bool(hits) and hits[0].message.id == message.id
                start = time.perf_counter()
                client.vectors.search(vector=vectors[row], memory=memory, k=1)
                after_read[kind].append(time.perf_counter() - start)
        stats = clients["replica"].replica_stats()
        assert stats is not None
        for kind in kinds:
            w, r = sorted(after_write[kind]), sorted(after_read[kind])
            out[kind] = {
                "found_own_write": found[kind],
                "after_write_p50_us": round(w[len(w) // 2] * 1e6, 1),
                "after_write_p99_us": round(w[int(len(w) * 0.99)] * 1e6, 1),
                "after_read_p50_us": round(r[len(r) // 2] * 1e6, 1),
                "after_read_p99_us": round(r[int(len(r) * 0.99)] * 1e6, 1),
            }
        out["replica"].update(
            served_by_replica=sum(r.reads for r in stats.replicas),
            waited_for_replay=sum(r.waited for r in stats.replicas),
            position_checks=stats.position_checks,
            primary_fallbacks=stats.primary,
        )
    finally:
        for client in clients.values():
            client.close()
    return {"rounds": rounds, **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "replicas.json")
    args = parser.parse_args()
    if args.quick:
        args.vectors, args.processes, args.seconds, args.rounds = 3_000, 2, 3.0, 50

    from pgmem.ops.migrate import upgrade
    from tests.integration._replica_cluster import Cluster

    cluster = Cluster().start()
    try:
        upgrade(cluster.primary.dsn)
        started = time.monotonic()
        _load(cluster.primary.dsn, args.vectors)
        print(f"loaded {args.vectors} vectors in {time.monotonic() - started:.1f} s")
        cluster.add_replica()
        cluster.add_replica()
        dsns = [r.dsn for r in cluster.replicas]
        runs = []
        for n in (0, 1, 2):
            run = _throughput(cluster, dsns[:n], args.processes, args.seconds)
            runs.append(run)
            print(json.dumps(run))
        # Rows the load did not use (a memory ignores a message it holds).
        ryw = _read_your_writes(cluster, dsns[0], args.rounds, base=args.vectors)
        print(json.dumps(ryw))
    finally:
        cluster.close()

    print()
    print(
        f"{'replicas':>8} {'searches/s':>11} {'p50 us':>9} {'p99 us':>9} {'off primary':>12} "
        f"{'primary CPU ms/1k':>18} {'replicas CPU ms/1k':>19}"
    )
    for r in runs:
        print(
            f"{r['replicas']:>8} {r['searches_per_s']:>11} {r['p50_us']:>9} {r['p99_us']:>9} "
            f"{r['off_primary']:>12.1%} {r['primary_cpu_ms_per_1k']:>18} {r['replicas_cpu_ms_per_1k']:>19}"
        )
    print()
    print(f"{'reads from':>10} {'found':>9} {'after write p50/p99 us':>23} {'after read p50/p99 us':>22}")
    for kind in ("primary", "replica"):
        r = ryw[kind]
        print(
            f"{kind:>10} {r['found_own_write']:>4}/{ryw['rounds']:<4} "
            f"{r['after_write_p50_us']:>11}/{r['after_write_p99_us']:<11} "
            f"{r['after_read_p50_us']:>10}/{r['after_read_p99_us']:<11}"
        )
    extra = {
        k: ryw["replica"][k] for k in ("served_by_replica", "waited_for_replay", "position_checks", "primary_fallbacks")
    }
    print(f"replica client: {extra}")
    write_json(
        args.out,
        {
            "benchmark": "replicas",
            "machine": {"cpus": psutil.cpu_count(), "python": platform.python_version()},
            "vectors": args.vectors,
            "processes": args.processes,
            "seconds": args.seconds,
            "throughput": runs,
            "read_your_writes": ryw,
        },
    )
    print(f"\nwritten {args.out}")


if __name__ == "__main__":
    main()
