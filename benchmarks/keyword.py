"""Keyword search under row-level security with its GIN index (migration 0027) and without it.

    python -m benchmarks.keyword                       # a memory of 100k messages beside one of 50
    python -m benchmarks.keyword --big 200000 --busy 2

A namespace holding a memory of ``--big`` messages (real texts of ../shared/data) and one of 50, read as
the application's role (``pgmem_app``, which the namespace's policy binds). ``search_text``'s statement
runs as pgmem has it, matching with ``pgmem.@@`` (leakproof: ``messages_tsv_idx`` serves it), beside the
same statement with the built-in ``@@`` (what it ran before 0027: not leakproof, so the policy comes first
and every message of the namespace is read), interleaved; then the public calls; then hybrid search of
the 50-message memory, its statement beside the same with the candidates' messages joined as before (a
hash of every message of the namespace). Queries: a word in no
message, one in 5 messages, one in about 1% of them, one in every message (each text gets " report").
``--busy N``: N CPU-bound processes beside it, as other agents on the same cores.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from pgvector.psycopg import register_vector

import pgmem
from benchmarks._common import bench_database, busy_processes, texts, timed_together, write_json
from pgmem._sync.searcher import Searcher
from pgmem.planning import statements

#: (label, query): how many of the big memory's messages hold it.
QUERIES = (
    ("a word in no message", "zeppelin"),
    ("a word in 5 messages", "quixotic"),
    ("a word in ~1% of the messages", "error"),
    ("a word in every message", "report"),
)


def _load(client: pgmem.Client, n: int) -> None:
    lines = texts()
    for start in range(0, n, 10_000):
        batch = []
        for i in range(start, min(n, start + 10_000)):
            extra = " quixotic" if i % (n // 5) == 3 else ""
            batch.append(pgmem.Message(content=f"{lines[i % len(lines)]}{extra} report"))
        client.messages.add_many("big", batch)
    client.messages.add_many("small", [pgmem.Message(content=f"{lines[i]} report") for i in range(50)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--busy", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/keyword.json"))
    args = parser.parse_args()
    indexed = statements.load("messages")["search_text"]
    scanned = indexed.replace("OPERATOR(pgmem.@@)", "@@")
    assert scanned != indexed
    results: dict[str, Any] = {"big": args.big, "busy": args.busy, "statement": {}, "calls": {}}
    with bench_database(args.dsn, "_keyword") as dsn:
        with pgmem.connect(dsn, namespace="bench") as client, psycopg.connect(dsn, autocommit=True) as raw:
            _load(client, args.big)
            raw.execute("ANALYZE pgmem.messages")
            raw.execute("ANALYZE pgmem.memory_entries")
            raw.prepare_threshold = None  # as pgmem runs it: planned for the query's lexemes each time
            raw.execute("SET ROLE pgmem_app")
            raw.execute("SELECT set_config('pgmem.namespace', 'bench', false)")

            def run(stmt: str, memory: str, query: str) -> Any:
                params = {"ns": "bench", "memory": memory, "query": query, "upto": None, "limit": 10}
                return raw.execute(stmt, params).fetchall()

            with busy_processes(args.busy) if args.busy else contextlib.nullcontext():
                for memory in ("big", "small"):
                    for label, query in QUERIES:
                        assert run(indexed, memory, query) == run(scanned, memory, query)
                        heavy = query == "report" and memory == "big"
                        pair: dict[str, Callable[[], Any]] = {
                            "pgmem.@@ (indexed)": functools.partial(run, indexed, memory, query),
                            "@@ (before 0027)": functools.partial(run, scanned, memory, query),
                        }
                        timings = timed_together(
                            pair,
                            iterations=max(5, args.iterations // 5) if heavy else args.iterations,
                            warmup=2,
                        )
                        key = f"{memory}: {label}"
                        results["statement"][key] = timings
                        new, old = timings["pgmem.@@ (indexed)"]["p50_us"], timings["@@ (before 0027)"]["p50_us"]
                        print(
                            f"search_text {key:<40} indexed {new / 1000:8.2f} ms  before {old / 1000:8.2f} ms"
                            f"  before / indexed {old / new:6.2f}x"
                        )
                calls = timed_together(
                    {
                        f"{name}, {label}": call
                        for label, query in QUERIES[:3]
                        for name, call in (
                            ("keyword_search, the namespace", lambda q=query: client.vectors.keyword_search(q, k=10)),
                            ("search_text, big", lambda q=query: client.messages.search_text("big", q, limit=10)),
                        )
                    },
                    iterations=args.iterations,
                    warmup=2,
                )
                results["calls"] = calls
                for name, t in calls.items():
                    print(f"{name:<70} p50 {t['p50_us'] / 1000:8.2f} ms  p99 {t['p99_us'] / 1000:8.2f} ms")
                results["hybrid"] = _hybrid(client, raw, args.iterations)
    write_json(args.out, results)


#: The fused candidates' join with their messages before the probe per candidate (and fused inlined).
_JOINED = "JOIN pgmem.messages m ON m.namespace = %(ns)s AND m.id = f.id "
_PROBED = (
    "CROSS JOIN LATERAL (SELECT * FROM pgmem.messages AS x WHERE x.namespace = %(ns)s AND x.id = f.id OFFSET 0) AS m "
)


def _hybrid(client: pgmem.Client, raw: psycopg.Connection[Any], iterations: int) -> dict[str, Any]:
    """Hybrid search of the 50-message memory (vectors on) beside the big one: the statement pgmem runs,
    each candidate's message by one index probe, beside it joined as before (the planner hashed every
    message of the namespace), as pgmem_app, interleaved."""
    client.vectors.enable("small")
    client.vectors.flush()
    raw.execute("RESET ROLE")
    raw.execute("ANALYZE pgmem.embeddings")
    raw.execute("SET ROLE pgmem_app")
    register_vector(raw)
    plans: list[Any] = []
    execute = Searcher._execute

    def spy(self: Searcher, plan: Any, connection: Any) -> Any:
        plans.append(plan)
        return execute(self, plan, connection)

    out: dict[str, Any] = {}
    for label, query in QUERIES[:3]:
        Searcher._execute = spy  # type: ignore[method-assign]
        try:
            client.vectors.hybrid_search(f"{query} note", memory="small", k=10)
        finally:
            Searcher._execute = execute  # type: ignore[method-assign]
        plan = plans.pop()
        probed = plan.statement if isinstance(plan.statement, str) else plan.statement.decode()
        joined = probed.replace(_PROBED, _JOINED).replace("fused AS MATERIALIZED", "fused AS")
        assert joined != probed
        params = plan.params[0]
        assert raw.execute(probed, params).fetchall() == raw.execute(joined, params).fetchall()
        timings = timed_together(
            {
                "probed": lambda s=probed, p=params: raw.execute(s, p).fetchall(),
                "joined (before)": lambda s=joined, p=params: raw.execute(s, p).fetchall(),
            },
            iterations=iterations,
            warmup=2,
        )
        out[label] = timings
        new, old = timings["probed"]["p50_us"], timings["joined (before)"]["p50_us"]
        print(f"hybrid_search small, {label:<34} probed {new / 1000:8.2f} ms  before {old / 1000:8.2f} ms")
    return out


if __name__ == "__main__":
    main()
