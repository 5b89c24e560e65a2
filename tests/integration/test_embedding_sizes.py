"""Every embedding size on the real Postgres: ``vector`` HNSW up to 2,000 dimensions, ``halfvec`` up to
4,000, binary-quantized HNSW with an exact re-rank above (4,096 and 8,192), each with recall@10 against
exact search; and the model index built concurrently (other tenants' embedding writes go on, a failed
build is rebuilt, a switch waits for its model's index)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem._sync.embedding_models import MODEL_LOCK_KEY
from pgmem.embeddings import HashingEmbedder
from pgmem.planning.search import SearchFilters, statement

# Vectors of every size up to 8,192 dimensions, indexes built: the slow leg (.ci/run).
pytestmark = pytest.mark.slow


class TableEmbedder:
    """The vector of row ``i`` of a table for a text ``"i|..."`` (queries: any row of the table)."""

    def __init__(self, vectors: np.ndarray, name: str) -> None:
        self.vectors = vectors
        self.model = name
        self.dimension = vectors.shape[1]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.vectors[[int(t.split("|", 1)[0]) for t in texts]]

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


def clustered(n: int, dimension: int, seed: int) -> np.ndarray:
    """``n`` unit vectors in clusters, built deterministically: points around 40 centres in a 48-dimension
    space, projected to ``dimension`` by a fixed random matrix (neighbourhoods like an embedding model's,
    not uniform noise, on which no index keeps its recall)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, 48))
    latent = centres[rng.integers(0, 40, n)] + 0.7 * rng.normal(size=(n, 48))
    vectors = (latent @ rng.normal(size=(48, dimension))).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def load(client: pgmem.Client, memory: str, embedder: TableEmbedder, rows: range) -> None:
    client.vectors.enable(memory, embedder)
    client.messages.add_many(memory, [Message(id=f"r{i}", content=f"{i}|row {i}") for i in rows])
    client.vectors.flush(embedder)


def index_of(dsn: str, name: str) -> tuple[str, bool] | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
            (f"pgmem.{name}",),
        ).fetchone()
    return None if row is None else (str(row[0]), bool(row[1]))


@pytest.mark.parametrize(
    ("dimension", "kind", "ops"),
    [
        (384, "vector", "vector_cosine_ops"),
        (3072, "halfvec", "halfvec_cosine_ops"),
        (4096, "vector", "bit_hamming_ops"),
        (8192, "vector", "bit_hamming_ops"),
    ],
)
def test_recall_of_every_size(dsn: str, dimension: int, kind: str, ops: str) -> None:
    n, queries = 2000, 50
    vectors = clustered(n + queries, dimension, seed=dimension)
    embedder = TableEmbedder(vectors, f"synthetic-{dimension}")
    with pgmem.connect(dsn, namespace="test", embedder=embedder, max_size=4) as client:
        load(client, "m", embedder, range(n))
        model = client.vectors.model(embedder)
        assert model.kind == kind
        index = index_of(dsn, model.index_name)
        assert index is not None and index[1] and ops in index[0]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE pgmem.embeddings")
            # the search runs on the model's index (an exact scan would pass any recall bar)
            plan = conn.execute(
                "EXPLAIN " + statement("vector", model, SearchFilters(), "ann", 10, False),
                {"ns": "test", "q": vectors[n].tolist(), **SearchFilters().params()},
            ).fetchall()
            assert any(model.index_name in row[0] for row in plan), plan
        corpus = vectors[:n]
        found = 0
        for q in vectors[n:]:
            want = {f"r{i}" for i in np.argsort(-(corpus @ q))[:10]}
            hits = client.search(vector=q, k=10, mode="ann")
            assert len(hits) == 10
            assert [h.distance for h in hits] == sorted(h.distance for h in hits)  # type: ignore[type-var]
            found += len(want & {h.message.id for h in hits})
        print(f"recall@10 at {dimension} dimensions: {found / (10 * queries):.3f}")
        assert found / (10 * queries) >= 0.95
        # the memory's own searches (exact below the exact limit, the index above it) and hybrid search
        exact = client.search(vector=vectors[n], k=5, memory="m", mode="exact")
        approximate = client.search(vector=vectors[n], k=5, memory="m", mode="ann")
        assert [h.message.id for h in exact][:3] == [h.message.id for h in approximate][:3]
        assert client.vectors.search_many(vectors=vectors[n : n + 3], k=5)[0][0].message.id == exact[0].message.id
        assert client.vectors.hybrid_search(f"{n}|row", k=5, memory="m", embedder=embedder)


def test_item_store_at_4096_dimensions(dsn: str) -> None:
    vectors = clustered(300, 4096, seed=7)
    embedder = TableEmbedder(vectors, "synthetic-items-4096")
    with pgmem.connect(dsn, namespace="test", max_size=4) as client:
        for i in range(299):
            client.items.put(("docs",), f"d{i}", {"text": f"{i}|doc"}, texts=[("text", f"{i}|doc")], embedder=embedder)
        model = client.items.model(embedder)
        index = index_of(dsn, f"item_vectors_hnsw_m{model.id}")
        assert index is not None and index[1] and "bit_hamming_ops" in index[0]
        want = [f"d{i}" for i in np.argsort(-(vectors[:299] @ vectors[299]))[:5]]
        hits = client.items.search(("docs",), query="299|query", limit=5, embedder=embedder, mode="ann")
        assert [h.key for h in hits][:3] == want[:3]


def _failed_build(dsn: str, model_id: int) -> None:
    """Leave the model's index INVALID as a concurrent build that failed does: the build starts (its
    catalog entry commits), then times out waiting for a transaction that holds the table."""
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as builder:
        holder.execute("LOCK TABLE pgmem.embeddings IN ROW EXCLUSIVE MODE")
        builder.execute("SET statement_timeout = '500ms'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            builder.execute(
                f"CREATE INDEX CONCURRENTLY embeddings_hnsw_m{model_id} ON pgmem.embeddings "
                f"USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE model_id = {model_id}"
            )
        holder.rollback()


def test_index_build_does_not_block_other_tenants_writes(dsn: str, tmp_path: Path) -> None:
    """A failed build is found INVALID and built again, concurrently: a second process writing embeddings
    in another namespace all along stores them while the build runs."""
    n = 12_000
    vectors = clustered(n, 384, seed=1)
    embedder = TableEmbedder(vectors, "synthetic-384")
    with pgmem.connect(dsn, namespace="big", embedder=embedder, max_size=4) as client:
        model = client.vectors.model(embedder)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP INDEX pgmem.{model.index_name}")  # loads faster without it
        load(client, "m", embedder, range(n))
    _failed_build(dsn, model.id)
    index = index_of(dsn, model.index_name)
    assert index is not None and not index[1]

    out, stop = tmp_path / "writes", tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-m", "tests.integration.embedding_workers", dsn, str(out), str(stop)])
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and len(out.read_text().splitlines()) > 5):
            assert writer.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        with pgmem.connect(dsn, namespace="big", embedder=embedder, max_size=2) as client:
            started = time.time()
            client.vectors.model(embedder)  # finds the INVALID index, drops it, builds it concurrently
            ended = time.time()
    finally:
        stop.touch()
        writer.wait(30)
    assert writer.returncode == 0
    index = index_of(dsn, model.index_name)
    assert index is not None and index[1]
    writes = [tuple(map(float, line.split())) for line in out.read_text().splitlines()[1:]]
    during = [end - start for start, end in writes if started <= start and end <= ended]
    before = [end - start for start, end in writes if end < started]
    print(
        f"build {ended - started:.2f} s; other tenant's embedded writes: {len(during)} during it, "
        f"p50 {1000 * np.median(during):.1f} ms (before: p50 {1000 * np.median(before):.1f} ms)"
    )
    assert len(during) >= 3  # stored while the index was being built: not blocked by it
    with pgmem.connect(dsn, namespace="big", embedder=embedder) as client:
        assert client.search(vector=vectors[5], k=1, mode="ann")[0].message.id == "r5"


def test_switch_waits_for_the_new_models_index(dsn: str) -> None:
    old, new = HashingEmbedder(384), HashingEmbedder(4096)
    with pgmem.connect(dsn, namespace="test", embedder=old, max_size=4) as client:
        client.vectors.enable("m")
        client.messages.add_many("m", [Message(content=f"fact {i} about pears") for i in range(20)])
        client.vectors.flush()
        # switched inside the caller's transaction: the index cannot be built there
        with psycopg.connect(dsn) as conn:
            assert client.vectors.switch_model("m", new, connection=conn) == "building"
        model = client.vectors.registry._models[new.model, new.dimension, "cosine"]
        assert index_of(dsn, model.index_name) is None
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (MODEL_LOCK_KEY,))  # another process is building
            report = client.vectors.embed_pending(new)
            assert report.embedded == 20 and report.promoted == []
            assert client.vectors.models("m") == {old.model: "active", new.model: "building"}
            assert client.vectors.active_model("m", refresh=True).name == old.model  # type: ignore[union-attr]
            assert client.search("fact 3 about pears", memory="m", k=1)[0].message.content == "fact 3 about pears"
            other.execute("SELECT pg_advisory_unlock(%s)", (MODEL_LOCK_KEY,))
        report = client.vectors.embed_pending(new)
        assert report.promoted == ["m"]
        index = index_of(dsn, model.index_name)
        assert index is not None and index[1] and "bit_hamming_ops" in index[0]
        hits = client.search("fact 3 about pears", memory="m", k=1, embedder=new, mode="ann")
        assert hits[0].message.content == "fact 3 about pears"
