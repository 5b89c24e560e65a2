"""Every distance: ``client.search`` ranks and scores by the distance a memory's model was registered with
(cosine, L2, inner product) as numpy does on vectors that are not normalised (so the three rank
differently), through the exact strategy and the HNSW index (the operator class of that distance), with
filters, for ``vector``, ``halfvec`` and binary-quantized models; the FAISS cache hands other distances to
Postgres; bad distance names are ``InvalidInput``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.embeddings import Vectors
from pgmem.errors import InvalidInput

DISTANCES = ("cosine", "l2", "inner_product")
ROWS = 240
K = 8


class TableEmbedder:
    """The vector of row ``i`` for a text ``"i|..."``: random directions with lengths from 0.2 to 5."""

    def __init__(self, vectors: np.ndarray, model: str = "distance-table") -> None:
        self.vectors = vectors
        self.model = model
        self.dimension = vectors.shape[1]

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self.vectors[[int(t.split("|", 1)[0]) for t in texts]]

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)


def _vectors(rows: int, dimension: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    directions = rng.normal(size=(rows, dimension))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return np.asarray(directions * rng.uniform(0.2, 5.0, (rows, 1)), dtype=np.float32)


def _numpy_scores(vectors: np.ndarray, q: np.ndarray, distance: str) -> np.ndarray:
    """The score of every row for ``q``, as LangGraph's PostgresStore scores ``distance``."""
    v, q64 = vectors.astype(np.float64), q.astype(np.float64)
    scores: np.ndarray = v @ q64
    if distance == "cosine":
        scores = scores / (np.linalg.norm(v, axis=1) * np.linalg.norm(q64))
    elif distance == "l2":
        scores = -np.linalg.norm(v - q64, axis=1)
    return scores


def _top(scores: np.ndarray, rows: np.ndarray, k: int) -> list[str]:
    return [f"r{i}" for i in rows[np.argsort(-scores[rows], kind="stable")[:k]]]


def _fill(client: pgmem.Client, embedder: TableEmbedder, distance: str, rows: int) -> None:
    assert client.vectors.enable("mem", embedder, distance=distance) == "active"
    client.messages.add_many(
        "mem", [Message(id=f"r{i}", content=f"{i}|row {i}", cause_by=f"A{i % 4}") for i in range(rows)]
    )
    client.vectors.flush(embedder)
    assert client.vectors.pending("mem") == {}


@pytest.fixture
def clients(dsn: str) -> Iterator[dict[str, pgmem.Client]]:
    """A client per distance, each in its namespace (the same messages in each)."""
    opened = {d: pgmem.connect(dsn, namespace=f"d-{d}", max_size=2) for d in DISTANCES}
    try:
        yield opened
    finally:
        for c in opened.values():
            c.close()


def test_search_ranks_and_scores_by_each_distance_like_numpy(clients: dict[str, pgmem.Client], dsn: str) -> None:
    vectors = _vectors(ROWS, 24)
    embedder = TableEmbedder(vectors)
    queries = _vectors(6, 24, seed=11)
    everything = np.arange(ROWS)
    action = np.flatnonzero(np.arange(ROWS) % 4 == 1)  # cause_by A1: a quarter of the rows
    tops: dict[str, list[list[str]]] = {}
    for distance, client in clients.items():
        _fill(client, embedder, distance, ROWS)
        model = client.vectors.active_model("mem")
        assert model is not None and model.distance == distance
        tops[distance] = []
        for q in queries:
            scores = _numpy_scores(vectors, q, distance)
            tops[distance].append(_top(scores, everything, K))
            for kwargs, rows in (({"memory": "mem"}, everything), ({"memory": "mem", "cause_by": "A1"}, action)):
                want = _top(scores, rows, K)
                for mode in ("exact", "ann"):
                    hits = client.search(vector=q, k=K, mode=mode, **kwargs)
                    got = [h.message.id for h in hits]
                    assert len(got) == K, (distance, mode, kwargs)  # always k, the filter applied in the scan
                    if mode == "exact":
                        assert got == want, (distance, kwargs)
                    else:
                        assert len(set(got) & set(want)) >= K - 1, (distance, kwargs, got, want)
                    for h in hits:
                        i = int(h.message.id[1:])
                        assert h.score == pytest.approx(scores[i], rel=1e-4, abs=1e-4), (distance, mode)
                        offset = 1.0 if distance == "cosine" else 0.0
                        assert h.distance == pytest.approx(offset - h.score, abs=1e-6)
                    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            # the namespace's vectors of the model with that distance, without a memory
            alone = client.search(vector=q, k=K, distance=distance, embedder=embedder, mode="exact")
            assert [h.message.id for h in alone] == tops[distance][-1]
            # many queries at once rank the same way
            (batch,) = client.vectors.search_many(vectors=[q], k=K, memory="mem")
            assert [h.message.id for h in batch] == tops[distance][-1]
    # unnormalised vectors: the three distances disagree (otherwise this test would prove little)
    assert tops["cosine"] != tops["l2"] != tops["inner_product"] != tops["cosine"]
    with psycopg.connect(dsn) as conn:
        indexes: dict[str, str] = dict(
            conn.execute(
                "SELECT m.distance, i.indexdef FROM pgmem.embedding_models m "
                "JOIN pg_indexes i ON i.schemaname = 'pgmem' AND i.indexname = 'embeddings_hnsw_m' || m.id "
                "WHERE m.name = %s",
                (embedder.model,),
            ).fetchall()
        )
    assert set(indexes) == set(DISTANCES)
    for distance, ops in (("cosine", "vector_cosine_ops"), ("l2", "vector_l2_ops"), ("inner_product", "vector_ip_ops")):
        assert ops in indexes[distance]


def test_threshold_is_a_score_of_the_distance(clients: dict[str, pgmem.Client]) -> None:
    vectors = _vectors(60, 8)
    embedder = TableEmbedder(vectors)
    q = _vectors(1, 8, seed=3)[0]
    for distance in ("l2", "inner_product"):
        client = clients[distance]
        _fill(client, embedder, distance, 60)
        scores = np.sort(_numpy_scores(vectors, q, distance))[::-1]
        cut = float((scores[4] + scores[5]) / 2)  # five rows score above it
        for mode in ("exact", "ann"):
            assert len(client.search(vector=q, k=20, memory="mem", threshold=cut, mode=mode)) == 5
        assert [len(h) for h in client.vectors.search_many(vectors=[q], k=20, memory="mem", threshold=cut)] == [5]
    with pytest.raises(InvalidInput, match="Euclidean"):
        clients["l2"].search(vector=q, k=3, memory="mem", threshold=0.5)  # l2 scores are <= 0
    assert clients["inner_product"].search(vector=q, k=3, memory="mem", threshold=-5) != []  # any finite number


@pytest.mark.parametrize("dimension", [2100, 4100])
def test_halfvec_and_binary_quantized_models_rank_by_their_distance(
    clients: dict[str, pgmem.Client], dsn: str, dimension: int
) -> None:
    """halfvec models (2,001-4,000 dimensions) are indexed with ``halfvec_*_ops``; above 4,000 the index is
    binary-quantized and its candidates are re-ranked exactly by the model's distance."""
    rows = 80
    vectors = _vectors(rows, dimension)
    embedder = TableEmbedder(vectors, model=f"distance-table-{dimension}")
    q = _vectors(1, dimension, seed=5)[0]
    for distance in ("l2", "inner_product"):
        client = clients[distance]
        _fill(client, embedder, distance, rows)
        stored = vectors.astype(np.float16).astype(np.float32) if dimension <= 4000 else vectors
        query = q.astype(np.float16).astype(np.float32) if dimension <= 4000 else q
        scores = _numpy_scores(stored, query, distance)
        exact = client.search(vector=q, k=K, memory="mem", mode="exact")
        assert [h.message.id for h in exact] == _top(scores, np.arange(rows), K)
        ann = client.search(vector=q, k=K, memory="mem", mode="ann")
        assert len(ann) == K
        for h in ann:  # whatever the candidates, each is scored exactly by the model's distance
            assert h.score == pytest.approx(scores[int(h.message.id[1:])], rel=1e-3, abs=1e-3)
        assert [h.score for h in ann] == sorted((h.score for h in ann), reverse=True)
    with psycopg.connect(dsn) as conn:
        defs = [
            r[0]
            for r in conn.execute(
                "SELECT i.indexdef FROM pgmem.embedding_models m JOIN pg_indexes i "
                "ON i.schemaname = 'pgmem' AND i.indexname = 'embeddings_hnsw_m' || m.id WHERE m.name = %s "
                "ORDER BY m.distance",
                (embedder.model,),
            )
        ]
    if dimension <= 4000:
        assert ["halfvec_ip_ops" in defs[0], "halfvec_l2_ops" in defs[1]] == [True, True]
    else:
        assert all("bit_hamming_ops" in d for d in defs) and len(defs) == 2


def test_switching_a_memory_to_another_distance(client: pgmem.Client) -> None:
    """Another distance is another model: enabling it on a memory is a switch (its vectors are filled in,
    then it becomes the active one); enabling again without a distance keeps the memory's."""
    vectors = _vectors(50, 8)
    embedder = TableEmbedder(vectors)
    q = _vectors(1, 8, seed=9)[0]
    _fill(client, embedder, "cosine", 50)
    assert client.vectors.enable("mem", embedder, distance="l2") == "building"
    assert client.vectors.models("mem") == {embedder.model: "active", f"{embedder.model} (l2)": "building"}
    client.vectors.flush(embedder)
    model = client.vectors.active_model("mem", refresh=True)
    assert model is not None and model.distance == "l2"
    hits = client.search(vector=q, k=5, memory="mem")
    assert [h.message.id for h in hits] == _top(_numpy_scores(vectors, q, "l2"), np.arange(50), 5)
    assert client.vectors.enable("mem", embedder) == "active"  # no distance: the memory's (l2), no switch
    model = client.vectors.active_model("mem", refresh=True)
    assert model is not None and model.distance == "l2"


def test_the_cache_hands_other_distances_to_postgres(clients: dict[str, pgmem.Client]) -> None:
    from pgmem.cache import VectorCache

    vectors = _vectors(40, 8)
    embedder = TableEmbedder(vectors)
    q = _vectors(1, 8, seed=4)[0]
    for distance in DISTANCES:
        client = clients[distance]
        _fill(client, embedder, distance, 40)
        with VectorCache(client) as cache:
            want = client.search(vector=q, k=5, memory="mem", mode="exact")
            got = cache.search("mem", q, k=5)
            assert [h.message.id for h in got] == [h.message.id for h in want]
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-5)
            assert [h.distance for h in got] == pytest.approx([h.distance for h in want], abs=1e-5)
            bypassed = 0 if distance == "cosine" else 1
            assert (cache.stats.bypassed, len(cache)) == (bypassed, 1 - bypassed)
            if distance == "l2":
                cut = (want[2].score + want[3].score) / 2
                assert [i for i, _ in cache.search_vectors("mem", q, 5, threshold=cut)[0]] == [
                    h.message.id for h in want[:3]
                ]
                with pytest.raises(InvalidInput):
                    cache.search_vectors("mem", q, 5, threshold=0.5)


def test_retrieval_log_records_the_distance_scores(dsn: str) -> None:
    vectors = _vectors(30, 8)
    embedder = TableEmbedder(vectors)
    q = _vectors(1, 8, seed=2)[0]
    with pgmem.connect(dsn, namespace="logged", retrieval_log=True) as client:
        _fill(client, embedder, "l2", 30)
        hits = client.search(vector=q, k=4, memory="mem")
        with psycopg.connect(dsn) as conn:
            (scores,) = conn.execute("SELECT scores FROM pgmem.retrieval_log ORDER BY id DESC LIMIT 1").fetchone()  # type: ignore[misc]
    assert scores == pytest.approx([h.score for h in hits]) and all(s < 0 for s in scores)


def test_bad_distance_names_are_invalid_input(client: pgmem.Client) -> None:
    for bad in ("euclidean", "L2", "ip", "hamming", "", 2):
        with pytest.raises(InvalidInput, match="distance must be one of"):
            client.vectors.enable("mem", distance=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="distance must be one of"):
            client.vectors.model(distance=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="distance must be one of"):
            client.search("anything", distance=bad)
    assert client.vectors.models("mem") == {}
    client.vectors.enable("mem", distance="l2")
    with pytest.raises(InvalidInput, match="searched by 'l2' distance"):
        client.search("anything", memory="mem", distance="cosine")
    assert client.search("anything", memory="mem", distance="l2") == []


def test_index_scans_use_the_index_of_the_model_distance(clients: dict[str, pgmem.Client]) -> None:
    """The ann statement orders by the distance's operator, which only its operator class serves: a model's
    index of another class would leave every search a scan and sort of the model's vectors."""
    from pgmem.planning.search import SearchFilters, statement

    vectors = _vectors(300, 16)
    embedder = TableEmbedder(vectors)
    for distance, client in clients.items():
        _fill(client, embedder, distance, 300)
        model = client.vectors.active_model("mem")
        assert model is not None
        for filters in (SearchFilters("mem"), SearchFilters(None, cause_by="A2")):
            text = statement("vector", model, filters, "ann", 10, False)
            params = {"ns": f"d-{distance}", "q": vectors[0], **filters.params()}
            with client.transaction() as conn:
                conn.execute("ANALYZE pgmem.memory_entries, pgmem.embeddings, pgmem.messages")
                conn.execute("SET LOCAL enable_seqscan = off")  # 300 rows: make the planner consider the index
                plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (COSTS OFF) " + text, params).fetchall())
            assert f"Index Scan using {model.index_name} " in plan, (distance, plan)
