"""LangGraph's store: pgmem's ``PgmemStore`` vs LangGraph's ``PostgresStore`` (langgraph-checkpoint-postgres,
HNSW, cosine), on the same server, each in a fresh database, with the same data, interleaved.

Data: the first ``items`` (default 34,000) CPython comments of ``../shared/data/minilm-cpython-comments``
with their MiniLM vectors (384 dimensions), served by a lookup embedder (a text ``"<row>|..."`` gets row
``row``'s vector: no model runs, both stores pay the same nothing); queries are the data set's last 1,000
vectors. Each value is ``{"text": ..., "bucket": row % 8, "pct": row % 100}``, the text indexed.

Measured (p50 / p99 in µs; ratios are PostgresStore's time over pgmem's, >1 = pgmem faster):

* put of a batch of 100 (the load itself, alternating batches between the stores; grows with the table:
  one HNSW insert per vector, O(log n) each), put of one new item, get of one item;
* search without a query (newest 10 under a prefix);
* vector search, limit 10: unfiltered, and with filters keeping 12.5% and 1% of the items — with the
  hits returned (PostgresStore cuts candidates to 2*limit+1 before filtering: short answers) and recall
  against an exact numpy search over the same items.

Cache: each store's hot set at 34k items is ~120 MB (its vectors' heap and HNSW index), so the two do
not fit together in the embedded server's default 128 MB of ``shared_buffers``: interleaved searches evict
each other's pages (measured: PostgresStore read 161 of its ~930 buffers per search from outside the
cache). Without ``--dsn`` the benchmark starts its own embedded server with ``shared_buffers`` of
``--shared-buffers`` (default 512MB), the same for both stores; with ``--dsn`` the server's setting is used
as it is. The setting and each database's vector heap + index size are reported.

Run: ``python -m benchmarks.integrations_store [--items N] [--samples N] [--dsn DSN] [--shared-buffers S]
[--json PATH]``;
``run_store(dsn, items=..., samples=...)`` returns the figures as a dict for another runner.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

import pgmem
from benchmarks._common import DATA, bench_database, timed_together, write_json
from pgmem.ops import server

K = 10
BATCH = 100
#: User paths (one item each) for the many-paths reads.
PATHS = 2_000
FILTERS: dict[str, tuple[dict[str, Any], Callable[[int], bool]]] = {
    "unfiltered": ({}, lambda row: True),
    "filter 12.5%": ({"bucket": 3}, lambda row: row % 8 == 3),
    "filter 1%": ({"pct": 7}, lambda row: row % 100 == 7),
}


def _data(items: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    texts = json.loads((DATA / "texts.json").read_text())
    vectors = np.load(DATA / "embeddings-f16.npy").astype(np.float32)
    corpus, queries = vectors[:-1000], vectors[-1000:]
    items = min(items, len(corpus))
    return texts[:items], corpus[:items], queries


def _value(row: int, text: str) -> dict[str, Any]:
    return {"text": f"{row}|{text}", "bucket": row % 8, "pct": row % 100}


@contextlib.contextmanager
def _server(dsn: str | None, shared_buffers: str) -> Iterator[str | None]:
    """``dsn`` (or ``PGMEM_BENCH_DSN``) as given, else a throwaway embedded server restarted with
    ``shared_buffers`` (a setting that needs a restart)."""
    if dsn is not None or os.environ.get("PGMEM_BENCH_DSN"):
        yield dsn
        return
    home = Path(tempfile.mkdtemp(prefix="pgmem-bench-"))
    try:
        admin = server.ensure_server(home)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER SYSTEM SET shared_buffers = {}").format(sql.Literal(shared_buffers)))
        server.stop(home)
        yield server.ensure_server(home)
    finally:
        server.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def _hot_mb(target: str, tables: tuple[str, ...]) -> float:
    """The size of ``tables`` with their indexes, in MB."""
    with psycopg.connect(target, autocommit=True) as conn:
        total = 0
        for table in tables:
            row = conn.execute("SELECT pg_total_relation_size(to_regclass(%s))", (table,)).fetchone()
            total += int(row[0] or 0) if row else 0
    return round(total / 2**20, 1)


def run_store(
    dsn: str | None = None, *, items: int = 34_000, samples: int = 300, shared_buffers: str = "512MB"
) -> dict[str, Any]:
    """Both stores on ``dsn``'s server (default: ``PGMEM_BENCH_DSN``, else a throwaway embedded server with
    ``shared_buffers``); returns the figures (µs) and ratios."""
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    from pgmem.integrations.langgraph import PgmemStore

    texts, corpus, queries = _data(items)
    items = len(texts)
    table = np.concatenate([corpus, queries])
    unit = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)

    def embed(batch: list[str]) -> list[list[float]]:
        return table[[int(t.split("|", 1)[0]) for t in batch]].tolist()

    index: Any = {"dims": 384, "embed": embed, "fields": ["text"], "distance_type": "cosine"}
    out: dict[str, Any] = {"items": items, "samples": samples, "dimensions": 384}
    with (
        _server(dsn, shared_buffers) as dsn,
        bench_database(dsn, "_lgstore") as lg_dsn,
        bench_database(dsn, "_pgstore") as pg_dsn,
        PostgresStore.from_conn_string(lg_dsn, index={**index, "ann_index_config": {"kind": "hnsw"}}) as lg,
        pgmem.connect(pg_dsn, namespace="bench") as client,
    ):
        lg.setup()
        pg = PgmemStore(client, index={**index, "model": "all-MiniLM-L6-v2-lookup"})
        pg.setup()
        stores: dict[str, Any] = {"langgraph": lg, "pgmem": pg}
        ns = ("bench", "docs")

        # The load: batches of 100, alternating which store goes first.
        batch_times: dict[str, list[float]] = {"langgraph": [], "pgmem": []}
        for n, start in enumerate(range(0, items, BATCH)):
            ops = [PutOp(ns, f"r{i}", _value(i, texts[i])) for i in range(start, min(items, start + BATCH))]
            order = ["langgraph", "pgmem"] if n % 2 == 0 else ["pgmem", "langgraph"]
            for name in order:
                t0 = time.perf_counter_ns()
                stores[name].batch(ops)
                batch_times[name].append((time.perf_counter_ns() - t0) / 1000)
        for name, values in batch_times.items():
            values.sort()
            out[f"{name} put batch of 100"] = {
                "p50_us": round(values[len(values) // 2], 1),
                "p99_us": round(values[min(len(values) - 1, int(len(values) * 0.99))], 1),
            }
        # Planner statistics as autovacuum gives them a minute after a load.
        for target in (lg_dsn, pg_dsn):
            with psycopg.connect(target, autocommit=True) as conn:
                conn.execute("ANALYZE")
                row = conn.execute("SHOW shared_buffers").fetchone()
                out["shared_buffers"] = row[0] if row else None
        out["hot MB (vectors, with indexes)"] = {
            "langgraph": _hot_mb(lg_dsn, ("public.store_vectors",)),
            "pgmem": _hot_mb(pg_dsn, ("pgmem.item_vectors",)),
        }

        rng = np.random.default_rng(0)
        fresh = iter(range(10**9))
        keys = iter(rng.integers(0, items, samples * 50).tolist())
        qrows = iter(rng.integers(0, len(queries), samples * 50).tolist())

        def put_one(store: Any) -> Callable[[], Any]:
            return lambda: store.put(("bench", "new"), f"n{next(fresh)}", _value(next(keys), "new item"))

        def get_one(store: Any) -> Callable[[], Any]:
            return lambda: store.get(ns, f"r{next(keys)}")

        def recent(store: Any) -> Callable[[], Any]:
            return lambda: store.search(ns, limit=K)

        # Many paths: one profile item per user (LangGraph's per-user namespaces), then a get among them and
        # a listing of them. Under row-level security a path was never an index condition for pgmem before
        # migration 0026 (text[]'s comparisons are not leakproof).
        users = PATHS
        for start in range(0, users, BATCH):
            ops = [PutOp(("users", f"u{u}"), "profile", {"n": u}, index=False) for u in range(start, start + BATCH)]
            for store in stores.values():
                store.batch(ops)
        picks = iter(rng.integers(0, users, samples * 50).tolist())

        def get_user(store: Any) -> Callable[[], Any]:
            return lambda: store.get(("users", f"u{next(picks)}"), "profile")

        def list_users(store: Any) -> Callable[[], Any]:
            return lambda: store.list_namespaces(prefix=("users",), limit=100)

        def list_few(store: Any) -> Callable[[], Any]:
            return lambda: store.list_namespaces(prefix=("bench",))

        for label, make in (
            ("put one", put_one),
            ("get", get_one),
            ("search without query", recent),
            (f"get among {PATHS:,} paths", get_user),
            (f"list_namespaces, 100 of {PATHS:,}", list_users),
            ("list_namespaces, 1 beside them", list_few),
        ):
            t = timed_together({name: make(s) for name, s in stores.items()}, iterations=samples)
            for name in stores:
                out[f"{name} {label}"] = {"p50_us": t[name]["p50_us"], "p99_us": t[name]["p99_us"]}

        for label, (flt, keep) in FILTERS.items():
            mask = np.array([keep(row) for row in range(items)])
            hits: dict[str, list[int]] = {name: [] for name in stores}
            recalls: dict[str, list[float]] = {name: [] for name in stores}

            answers: dict[str, list[tuple[int, list[str]]]] = {name: [] for name in stores}

            def search(name: str, store: Any) -> Callable[[], Any]:
                # Only the search is timed: the exact answer (a 34k x 384 product and a sort, ~5 ms) is
                # computed afterwards (until 2026-11-24 it ran inside the timed call, on both sides).
                def run() -> None:
                    q = next(qrows)
                    found = store.search(ns, query=f"{items + q}|query", filter=flt or None, limit=K)
                    answers[name].append((q, [h.key for h in found]))

                return run

            t = timed_together({name: search(name, s) for name, s in stores.items()}, iterations=samples)
            for name, answered in answers.items():
                for q, found_keys in answered:
                    scores = unit @ (queries[q] / np.linalg.norm(queries[q]))
                    scores[~mask] = -np.inf
                    want = {f"r{i}" for i in np.argsort(-scores)[:K]}
                    hits[name].append(len(found_keys))
                    recalls[name].append(len(set(found_keys) & want) / K)
            for name in stores:
                out[f"{name} vector search {label}"] = {
                    "p50_us": t[name]["p50_us"],
                    "p99_us": t[name]["p99_us"],
                    "hits": round(float(np.mean(hits[name])), 2),
                    "recall": round(float(np.mean(recalls[name])), 3),
                }
    labels = ["put batch of 100", "put one", "get", "search without query", f"get among {PATHS:,} paths"]
    labels += [f"list_namespaces, 100 of {PATHS:,}", "list_namespaces, 1 beside them"]
    labels += [f"vector search {label}" for label in FILTERS]
    out["ratios (PostgresStore / pgmem, p50)"] = {
        label: round(out[f"langgraph {label}"]["p50_us"] / out[f"pgmem {label}"]["p50_us"], 2) for label in labels
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="server to create the two databases on (default: embedded)")
    parser.add_argument("--items", type=int, default=34_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument(
        "--shared-buffers", default="512MB", help="of the throwaway embedded server (ignored with --dsn)"
    )
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/integrations_store.json"))
    args = parser.parse_args()
    result = run_store(args.dsn, items=args.items, samples=args.samples, shared_buffers=args.shared_buffers)
    write_json(args.json, result)
    print(f"shared_buffers {result['shared_buffers']}, hot MB {result['hot MB (vectors, with indexes)']}")
    print(f"{'':28} {'PostgresStore p50/p99':>24} {'pgmem p50/p99':>22} {'ratio':>6}  hits/recall")
    for label, ratio in result["ratios (PostgresStore / pgmem, p50)"].items():
        lg, pg = result[f"langgraph {label}"], result[f"pgmem {label}"]
        extra = ""
        if "hits" in lg:
            extra = f"  {lg['hits']}/{lg['recall']} vs {pg['hits']}/{pg['recall']}"
        print(
            f"{label:28} {lg['p50_us']:>12.0f}/{lg['p99_us']:<11.0f} {pg['p50_us']:>10.0f}/{pg['p99_us']:<11.0f}"
            f" {ratio:>6}{extra}"
        )


if __name__ == "__main__":
    main()
