"""Commit-to-searchable latency, and search latency with and without embedding the query.

    python -m benchmarks.latency                         # offline embedder and MiniLM, 200 / 60 rounds
    python -m benchmarks.latency --embedders hashing --rounds 50 --busy 2

Part 1, commit to searchable: a writer process adds a message to a memory with vectors on and notes the
moment ``messages.add`` returned; a reader process, told the message's text, searches for it until the
message is the top hit, and notes the moment it was. The latency is the difference (both processes read
the machine's monotonic clock). One message in flight at a time; the reader searches as an agent would,
back to back:

* ``keyword`` — ``client.vectors.keyword_search(marker, memory=…)``, the message's one rare word (a
  question's common words make any keyword search slow, README, "Keyword search"): the text is indexed in
  the writing transaction, so this is commit plus one search;
* ``vector`` — ``client.vectors.search(text, memory=…)``: the writer's background embedder embeds the
  message after commit, so this adds the embedding and its write;
* ``cache`` — ``VectorCache.search`` in the reader process: the vector reaches the FAISS mirror through
  the change notification.

Part 2, search latency: ``client.vectors.search`` p50/p99 with the query's text (embedded in the call) and
with its vector (embedded beforehand), on a memory of 10,000 messages, per embedder.

Embedders: ``hashing`` (pgmem's offline default) and ``minilm`` (all-MiniLM-L6-v2 in numpy,
``benchmarks/minilm.py``; a MiniLM-class local model, as ``SentenceTransformerEmbedder`` would run).
The published figures of the memory systems agents use: 0.15-0.5 s a search, 4-20 s from a write to the
memory being searchable (their LLM extraction runs in the write path; pgmem has none).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._common import bench_database, busy_processes, texts, timed_together, write_json

MEMORY = "team:latency"
KINDS = ("keyword", "vector", "cache")


def _embedder(name: str) -> Any:
    if name == "minilm":
        from benchmarks.minilm import MiniLM

        return MiniLM()
    from pgmem.embeddings import HashingEmbedder

    return HashingEmbedder()


def _writer(dsn: str, embedder: str, namespace: str, jobs: Any, done: Any, rounds: int) -> None:
    import pgmem

    lines = [t for t in texts() if len(t.split()) >= 6]
    with pgmem.connect(dsn, namespace=namespace, embedder=_embedder(embedder)) as client:
        done.recv()  # the reader is ready
        for i in range(rounds):
            marker = uuid.uuid4().hex[:12]
            text = f"{lines[i * 7919 % len(lines)]} (note {marker})"
            message = pgmem.Message(content=text)
            client.messages.add(MEMORY, message)
            jobs.send((message.id, text, marker, time.monotonic()))
            done.recv()  # found: the next one
        jobs.send(None)


def _reader(dsn: str, embedder: str, namespace: str, kind: str, jobs: Any, done: Any, out: Any) -> None:
    import pgmem
    from pgmem.cache import VectorCache

    latencies = []
    with pgmem.connect(dsn, namespace=namespace, embedder=_embedder(embedder)) as client:
        cache = VectorCache(client) if kind == "cache" else None
        if cache is not None:
            cache.search(MEMORY, "warm up", k=1)
        if kind == "vector":
            client.vectors.search("warm up", memory=MEMORY, k=1)
        done.send(True)
        while (job := jobs.recv()) is not None:
            message_id, text, marker, added = job
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if kind == "keyword":
                    hits = client.vectors.keyword_search(marker, memory=MEMORY, k=1)
                elif kind == "vector":
                    hits = client.vectors.search(text, memory=MEMORY, k=1)
                else:
                    assert cache is not None
                    hits = cache.search(MEMORY, text, k=1)
                if hits and hits[0].message.id == message_id:
                    latencies.append(time.monotonic() - added)
                    break
            done.send(True)
        if cache is not None:
            cache.close()
    out.send(latencies)


def commit_to_searchable(dsn: str, embedder: str, kind: str, rounds: int) -> dict[str, float]:
    """p50 / p99 / max ms from a writer's add returning to a reader finding the message by ``kind``."""
    import pgmem

    namespace = f"latency-{embedder}-{kind}"
    with pgmem.connect(dsn, namespace=namespace, embedder=_embedder(embedder)) as client:
        client.vectors.enable(MEMORY)
        client.messages.add_many(MEMORY, [pgmem.Message(content=t) for t in texts()[:2000]])
        client.vectors.flush()
    ctx = mp.get_context("spawn")
    jobs_w, jobs_r = ctx.Pipe()
    done_r, done_w = ctx.Pipe()
    out_r, out_w = ctx.Pipe(duplex=False)
    writer = ctx.Process(target=_writer, args=(dsn, embedder, namespace, jobs_w, done_w, rounds))
    reader = ctx.Process(target=_reader, args=(dsn, embedder, namespace, kind, jobs_r, done_r, out_w))
    writer.start()
    reader.start()
    samples = sorted(1000 * s for s in out_r.recv())
    writer.join(60)
    reader.join(60)
    if not samples:
        return {"n": 0}
    return {
        "p50_ms": round(samples[len(samples) // 2], 2),
        "p99_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))], 2),
        "max_ms": round(samples[-1], 2),
        "mean_ms": round(statistics.fmean(samples), 2),
        "n": len(samples),
    }


def search_latency(dsn: str, embedder: str, iterations: int) -> dict[str, dict[str, float]]:
    """``search`` p50/p99 with the query's text and with its vector, on 10,000 messages."""
    import pgmem

    model = _embedder(embedder)
    lines = texts()
    queries = [lines[-(i + 1)] for i in range(50)]
    with pgmem.connect(dsn, namespace=f"search-{embedder}", embedder=model) as client:
        client.vectors.enable(MEMORY)
        client.messages.add_many(MEMORY, [pgmem.Message(content=t) for t in lines[:10_000]])
        client.vectors.flush()
        vectors = model.embed(queries)
        state = {"i": 0}

        def by_text() -> None:
            state["i"] += 1
            client.vectors.search(queries[state["i"] % 50], memory=MEMORY, k=10)

        def by_vector() -> None:
            state["i"] += 1
            client.vectors.search(vector=vectors[state["i"] % 50], memory=MEMORY, k=10)

        return timed_together({"text (embedded in the call)": by_text, "vector": by_vector}, iterations=iterations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="server to use (default: $PGMEM_BENCH_DSN, else embedded)")
    parser.add_argument("--embedders", default="hashing,minilm")
    parser.add_argument("--rounds", type=int, default=0, help="messages per kind (default 200 hashing, 60 minilm)")
    parser.add_argument("--iterations", type=int, default=200, help="searches per variant in part 2")
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes running meanwhile")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/latency.json"))
    args = parser.parse_args()
    results: dict[str, Any] = {"busy": args.busy}
    with bench_database(args.dsn, "_latency") as dsn:
        with busy_processes(args.busy) if args.busy else contextlib.nullcontext():
            for embedder in args.embedders.split(","):
                rounds = args.rounds or (200 if embedder == "hashing" else 60)
                for kind in KINDS:
                    found = commit_to_searchable(dsn, embedder, kind, rounds)
                    results.setdefault("commit_to_searchable", {}).setdefault(embedder, {})[kind] = found
                    print(f"commit -> searchable, {embedder:8} {kind:8}", found, flush=True)
                timings = search_latency(dsn, embedder, args.iterations)
                results.setdefault("search", {})[embedder] = timings
                for name, t in timings.items():
                    p50, p99 = t["p50_us"] / 1000, t["p99_us"] / 1000
                    print(f"search, {embedder:8} {name:30} p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    write_json(args.out, results)


if __name__ == "__main__":
    main()
