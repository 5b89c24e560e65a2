"""A namespace is a filter like any other: a search inside one tenant returns k hits, whatever the
tenant's share of the model's vectors.

One model, 24,000 real MiniLM vectors (``../shared/data/minilm-cpython-comments``) in twelve namespaces
of skewed sizes: 50%, 10%, 1% and 0.1% of the vectors, the rest spread over eight others. The model's HNSW
index holds every tenant's vectors; a plain index scan post-filtered on the namespace (what a search with
no other filter ran before) came back with 4.2 of 10 hits on average, 1 at worst, for the tenant holding
10% of them. Every search, ``search_many`` and hybrid search's vector leg must return k hits with
recall@10 >= 0.95 against exact search inside the namespace.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

import pgmem
from pgmem import Message
from pgmem.embeddings import Vectors


def _data_dir() -> Path:
    """$PGMEM_SHARED_DATA, else ../shared/data beside the checkout, else /work/shared/data."""
    candidates = [Path(os.environ["PGMEM_SHARED_DATA"])] if os.environ.get("PGMEM_SHARED_DATA") else []
    candidates += [Path(__file__).resolve().parents[3] / "shared" / "data", Path("/work/shared/data")]
    for base in candidates:
        if (base / "minilm-cpython-comments").exists():
            return base / "minilm-cpython-comments"
    return candidates[0] / "minilm-cpython-comments"


DATA = _data_dir()
TOTAL = 24_000
#: The four namespaces under test and their shares of the model's vectors; eight others hold the rest.
SHARES = {"t50": 0.5, "t10": 0.1, "t1": 0.01, "t01": 0.001}
OTHERS = 8
QUERIES = 50


class LookupEmbedder:
    """The data set's vector for a text ``"<row>|..."``."""

    model = "minilm-tenant-lookup"
    dimension = 384

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self.vectors[[int(t.split("|", 1)[0]) for t in texts]]

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)


def _layout() -> dict[str, np.ndarray]:
    """Rows of each namespace: the tested ones by share, the rest in ``OTHERS`` namespaces (shuffled)."""
    order = np.random.default_rng(7).permutation(TOTAL)
    out: dict[str, np.ndarray] = {}
    start = 0
    for ns, share in SHARES.items():
        n = round(TOTAL * share)
        out[ns] = order[start : start + n]
        start += n
    for i, part in enumerate(np.array_split(order[start:], OTHERS)):
        out[f"other{i}"] = part
    return out


def _recall(got: list[str], want: list[str]) -> float:
    return len(set(got) & set(want)) / len(want)


@pytest.mark.slow
def test_every_tenant_gets_k_hits_whatever_its_share(dsn: str) -> None:
    if not DATA.exists():
        pytest.skip(f"data set not found at {DATA}")
    texts = json.loads((DATA / "texts.json").read_text())
    vectors = np.load(DATA / "embeddings-f16.npy").astype(np.float32)
    queries = vectors[-QUERIES:]  # rows never stored: the data set's last rows
    embedder = LookupEmbedder(vectors)
    layout = _layout()
    with pgmem.connect(dsn, namespace="other0", embedder=embedder, max_size=2) as root:
        model = root.vectors.model(embedder)
        # The index is built once the vectors are in (a bulk build: a few seconds, against a minute of
        # inserts into the graph one by one); searches meanwhile would not use it.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP INDEX pgmem.{model.index_name}")
        for ns, rows in layout.items():
            client = root.with_namespace(ns)
            client.messages.add_many("m", [Message(id=f"r{i}", content=f"{i}|{texts[i]}") for i in rows])
        # The vectors are stored in one statement per namespace (what the embedder stores, without its
        # batches); then the memories are enabled, which finds nothing to queue.
        with psycopg.connect(dsn, autocommit=True) as conn:
            register_vector(conn)
            for ns, rows in layout.items():
                conn.execute(
                    "INSERT INTO pgmem.embeddings (namespace, model_id, message_id, embedding)"
                    " SELECT %s, %s, 'r' || v.i, v.e FROM unnest(%s::int[], %s::vector[]) AS v(i, e)",
                    (ns, model.id, [int(i) for i in rows], list(vectors[rows])),
                    binary=True,
                )
            conn.execute(model.index_ddl(concurrently=False))
            conn.execute("ANALYZE pgmem.embeddings; ANALYZE pgmem.memory_entries; ANALYZE pgmem.messages")

        for ns in SHARES:
            client = root.with_namespace(ns)
            client.vectors.enable("m", embedder)
            assert client.vectors.pending() == {}
            mine = layout[ns]
            ids = np.array([f"r{i}" for i in mine])
            k = min(10, len(mine))
            truths = [list(ids[np.argsort(-(vectors[mine] @ q))[:k]]) for q in queries]
            single = [client.search(vector=q, k=k) for q in queries]
            many = client.vectors.search_many(vectors=queries, k=k)
            # Hybrid search's vector leg: with the text weight 0 the fused ranking is the vector ranking.
            hybrid = [
                client.vectors.hybrid_search(f"{len(vectors) - QUERIES + j}|{texts[-QUERIES + j]}", k=k, w_text=0)
                for j in range(QUERIES)
            ]
            own = set(ids)
            for name, found in (("search", single), ("search_many", many), ("hybrid", hybrid)):
                lengths = [len(hits) for hits in found]
                assert min(lengths) == k, (ns, name, lengths)
                got = [[h.message.id for h in hits] for hits in found]
                assert all(set(g) <= own for g in got), (ns, name)  # nothing from another tenant
                mean = float(np.mean([_recall(g, t) for g, t in zip(got, truths, strict=True)]))
                assert mean >= 0.95, (ns, name, mean)
