"""The caller's own vectors (issue 37, item 1): a model pgmem never embeds with (``Precomputed``), vectors
given with the messages (``add(embedding=)``, ``add_many(embeddings=)``, ``publish(embedding=)``) and
searched back by ``vector=``; bad vectors write nothing; the background embedder leaves such messages
queued; the FAISS cache sees them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.cache import VectorCache
from pgmem.embeddings import HashingEmbedder, Precomputed
from pgmem.errors import EmbeddingError, InvalidInput
from tests.conftest import table_counts

DIM = 8
MODEL = Precomputed("e5-test", DIM)


def _vectors(n: int, seed: int = 0, dimension: int = DIM) -> np.ndarray:
    """``n`` random unit vectors (far apart enough that each is its own nearest)."""
    rows = np.random.default_rng(seed).standard_normal((n, dimension)).astype(np.float32)
    result: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return result


def _ids(hits: list[pgmem.planning.search.SearchHit]) -> list[str]:
    return [h.message.id for h in hits]


def _stored(dsn: str, model: str = "e5-test") -> dict[str, list[float]]:
    """message id -> stored vector of ``model`` (the owner's view: every namespace)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT e.message_id, coalesce(e.embedding, e.embedding_half::vector)::text FROM pgmem.embeddings e "
            "JOIN pgmem.embedding_models m ON m.id = e.model_id WHERE m.name = %s",
            (model,),
        ).fetchall()
    return {r[0]: [float(x) for x in r[1].strip("[]").split(",")] for r in rows}


def _outbox(dsn: str) -> list[tuple[str, int, str | None]]:
    with psycopg.connect(dsn) as conn:
        return [
            (r[0], int(r[1]), r[2])
            for r in conn.execute(
                "SELECT message_id, attempts, last_error FROM pgmem.embedding_outbox ORDER BY message_id"
            )
        ]


# -- writing and searching back ----------------------------------------------------------------------


def test_add_add_many_and_publish_store_the_vectors_searched_back(client: pgmem.Client, dsn: str) -> None:
    assert client.vectors.enable("docs", MODEL) == "active"
    vectors = _vectors(12)
    assert client.messages.add("docs", Message(id="a0", content="first"), embedding=vectors[0])
    assert client.messages.add("docs", Message(id="a1", content="second"), embedding=vectors[1].tolist())  # a list
    batch = [Message(id=f"b{i}", content=f"batch {i}") for i in range(2, 8)]
    assert client.messages.add_many("docs", batch, embeddings=vectors[2:8]) == 6
    client.messages.add_many(
        "docs", [Message(id=f"l{i}", content=f"list {i}") for i in (8, 9)], embeddings=vectors[8:10].tolist()
    )
    client.queues.subscribe("bob")
    delivery = client.queues.publish(
        "docs", Message(id="p10", content="to bob", send_to={"bob"}), embedding=vectors[10]
    )
    assert delivery.inboxes == ["inbox:bob"]
    assert client.vectors.pending("docs") == {}  # nothing queued: every message came with its vector
    ids = ["a0", "a1", *(m.id for m in batch), "l8", "l9", "p10"]
    stored = _stored(dsn)
    for i, message_id in enumerate(ids):
        assert np.allclose(stored[message_id], vectors[i], atol=1e-6)  # stored as given
        for mode in ("exact", "ann"):
            hits = client.vectors.search(vector=vectors[i], memory="docs", k=3, mode=mode)
            assert _ids(hits)[0] == message_id
            assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert _ids(client.vectors.search_many(vectors=vectors[:3], memory="docs", k=1)[2]) == ["b2"]
    # A vector of another dimension does not fit the model: an EmbeddingError, and an InvalidInput (what a
    # query vector raised before), stored or searched.
    assert issubclass(pgmem.DimensionMismatch, EmbeddingError) and issubclass(pgmem.DimensionMismatch, InvalidInput)
    with pytest.raises(pgmem.DimensionMismatch, match="9 dimensions; the model has 8"):
        client.vectors.search(vector=_vectors(1, dimension=DIM + 1)[0], memory="docs")
    with pytest.raises(pgmem.DimensionMismatch, match="9 dimensions; the model has 8"):
        client.vectors.search_many(vectors=_vectors(2, dimension=DIM + 1), memory="docs")
    with pytest.raises(pgmem.DimensionMismatch, match="'e5-test' of 8 dimensions, not 9"):
        client.messages.add("docs", Message(content="wide"), embedding=_vectors(1, dimension=DIM + 1)[0])


def test_a_text_search_of_a_precomputed_model_says_where_vectors_come_from(client: pgmem.Client) -> None:
    client.vectors.enable("docs", MODEL)
    client.messages.add("docs", Message(content="x"), embedding=_vectors(1)[0])
    with pytest.raises(EmbeddingError, match=r"does not compute the vectors of model 'e5-test'.*embedding="):
        client.vectors.search("a text query", memory="docs")
    with pytest.raises(EmbeddingError, match="does not compute the vectors"):
        client.vectors.hybrid_search("a text query", memory="docs")
    # Hybrid search takes its halves apart: your vector, and the words to look for.
    hits = client.vectors.hybrid_search(vector=_vectors(1)[0], keyword_query="x", memory="docs", k=1)
    assert [h.message.content for h in hits] == ["x"]
    with pytest.raises(EmbeddingError, match="Precomputed"):
        MODEL.embed(["x"])


def test_the_vector_goes_to_the_named_model_and_other_models_embed_as_before(client: pgmem.Client, dsn: str) -> None:
    """A memory with the client's embedder active and a Precomputed model being built: ``model=`` names the
    latter; the active one embeds the message in the background; the switch finishes once every entry has
    a vector of the new model (given with a second add of the held messages)."""
    client.vectors.enable("m")  # the client's hashing embedder, 384 dimensions
    client.messages.add("m", Message(id="old", content="already there"))
    client.vectors.flush()
    assert client.vectors.enable("m", MODEL) == "building"
    assert client.vectors.pending("m") == {"e5-test": 1}
    vectors = _vectors(2)
    assert client.messages.add("m", Message(id="new", content="fresh"), embedding=vectors[1], model="e5-test")
    client.vectors.wait()
    assert client.vectors.pending("m") == {"e5-test": 1}  # "old" still waits for its vector
    client.vectors.flush()
    assert client.vectors.models("m") == {"pgmem-hash-384": "active", "e5-test": "building"}
    # The held message gets its vector by the same add (False: the memory held it).
    assert not client.messages.add(
        "m", Message(id="old", content="already there"), embedding=vectors[0], model="e5-test"
    )
    assert client.vectors.pending("m") == {}
    client.vectors.flush()  # (or the background embedder, first) finishes the switch
    assert client.vectors.models("m") == {"e5-test": "active"}
    assert _ids(client.vectors.search(vector=vectors[0], memory="m", k=1)) == ["old"]
    # A vector already stored stays: another one for the same message and model is ignored.
    client.messages.add("m", Message(id="old", content="already there"), embedding=vectors[1])
    assert np.allclose(_stored(dsn)["old"], vectors[0], atol=1e-6)
    assert np.allclose(_stored(dsn, "pgmem-hash-384")["old"], HashingEmbedder().embed(["already there"])[0], atol=1e-6)
    assert _ids(client.vectors.search(vector=vectors[0], memory="m", k=1)) == ["old"]


def test_background_embedder_leaves_precomputed_messages_queued(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("docs", MODEL)
    client.messages.add("docs", Message(id="bare", content="no vector given"))
    client.messages.add_many("docs", [Message(id=f"m{i}", content=f"bare {i}") for i in range(3)])
    client.vectors.wait()
    report = client.vectors.flush()
    assert (report.embedded, report.failed, report.errors) == (0, 0, [])
    assert report.remaining == 4
    assert client.vectors.pending("docs") == {"e5-test": 4}
    assert all(attempts == 0 and error is None for _, attempts, error in _outbox(dsn))  # never tried
    assert client.vectors.search(vector=_vectors(1)[0], memory="docs") == []
    assert not client.messages.add("docs", Message(id="bare", content="no vector given"), embedding=_vectors(1)[0])
    assert client.vectors.pending("docs") == {"e5-test": 3}
    assert _ids(client.vectors.search(vector=_vectors(1)[0], memory="docs")) == ["bare"]


def test_halfvec_and_inner_product_models(client: pgmem.Client) -> None:
    """A model above 2,000 dimensions stores halfvec values; the distance is the memory's."""
    wide = Precomputed("wide", 2048)
    client.vectors.enable("wide", wide)
    vectors = _vectors(3, dimension=2048)
    client.messages.add_many("wide", [Message(id=f"w{i}", content=f"w {i}") for i in range(3)], embeddings=vectors)
    assert _ids(client.vectors.search(vector=vectors[2], memory="wide", k=1)) == ["w2"]
    with pytest.raises(EmbeddingError, match="halfvec"):
        client.messages.add("wide", Message(content="too large"), embedding=vectors[0] * 1e7)
    client.vectors.enable("ip", Precomputed("ip-model", DIM), distance="inner_product")
    v = _vectors(2, seed=3)
    client.messages.add_many("ip", [Message(id="x", content="x"), Message(id="y", content="y")], embeddings=v * 3)
    hits = client.vectors.search(vector=v[1], memory="ip", k=1)
    assert _ids(hits) == ["y"] and hits[0].score == pytest.approx(3.0, abs=1e-4)


# -- bad input writes nothing ------------------------------------------------------------------------

BAD: dict[str, tuple[Callable[[np.ndarray], Any], str]] = {
    "wrong dimension": (lambda v: v[: DIM - 1], "8 dimensions"),
    "NaN": (lambda v: np.where(np.arange(DIM) == 2, np.nan, v), "NaN"),
    "infinite": (lambda v: [1e39, *v[1:].tolist()], "NaN or infinite"),
    "zero": (lambda v: np.zeros(DIM), "is zero"),
    "two vectors": (lambda v: np.stack([v, v]), "one vector"),
    "not numbers": (lambda v: ["a"] * DIM, "not a vector"),
    "ragged": (lambda v: [[1.0, 2.0], [1.0]], "not a vector"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_embedding_writes_nothing(client: pgmem.Client, dsn: str, case: str) -> None:
    client.vectors.enable("docs", MODEL)
    client.queues.subscribe("bob")
    before = table_counts(dsn)
    make, reason = BAD[case]
    bad = make(_vectors(1)[0])
    with pytest.raises(EmbeddingError, match=reason):
        client.messages.add("docs", Message(content="x"), embedding=bad)
    with pytest.raises(EmbeddingError, match=reason):
        client.queues.publish("docs", Message(content="x", send_to={"bob"}), embedding=bad)
    assert table_counts(dsn) == before


@pytest.mark.parametrize(
    ("embeddings", "reason"),
    [
        (_vectors(2), "expected 3 vectors"),  # too few
        (_vectors(4), "expected 3 vectors"),  # too many
        (_vectors(3, dimension=DIM + 1), "e5-test.*8 dimensions, not 9"),
        (np.vstack([_vectors(2), np.full((1, DIM), np.nan)]), "NaN"),
        (_vectors(1)[0], "expected 3 vectors"),  # one vector for three messages
    ],
)
def test_bad_embeddings_of_a_batch_write_nothing(
    client: pgmem.Client, dsn: str, embeddings: np.ndarray, reason: str
) -> None:
    client.vectors.enable("docs", MODEL)
    before = table_counts(dsn)
    with pytest.raises(EmbeddingError, match=reason):
        client.messages.add_many("docs", [Message(content=f"m{i}") for i in range(3)], embeddings=embeddings)
    assert table_counts(dsn) == before


def test_an_unknown_model_or_a_memory_without_one_writes_nothing(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("docs", MODEL)
    v = _vectors(1)[0]
    before = table_counts(dsn)
    with pytest.raises(EmbeddingError, match="no model 'other'.*'e5-test'"):
        client.messages.add("docs", Message(content="x"), embedding=v, model="other")
    with pytest.raises(EmbeddingError, match="no model 'other'"):
        client.messages.add_many("docs", [Message(content="x")], embeddings=[v], model="other")
    with pytest.raises(EmbeddingError, match="has no embedding model.*Precomputed"):
        client.messages.add("plain", Message(content="x"), embedding=v)
    with pytest.raises(InvalidInput, match="model"):
        client.messages.add("docs", Message(content="x"), model="e5-test")  # a model, no vector
    with pytest.raises(InvalidInput, match="model"):
        client.messages.add("docs", Message(content="x"), embedding=v, model="")
    with pytest.raises(EmbeddingError, match="0 vectors"):
        client.messages.add_many("docs", [], embeddings=[v])
    assert client.messages.add_many("docs", [], embeddings=[]) == 0
    assert table_counts(dsn) == before


def test_a_model_switch_the_client_missed_fails_the_write(client: pgmem.Client, dsn: str) -> None:
    """The client remembers a memory's active model; when another client's switch finished since, the
    statement finds the memory without that model and fails itself: nothing written, EmbeddingError."""
    client.vectors.enable("docs", MODEL)
    client.messages.add("docs", Message(id="first", content="x"), embedding=_vectors(1)[0])  # remembers e5-test
    with pgmem.connect(dsn, namespace="test") as other:
        other.vectors.enable("docs", Precomputed("e5-next", DIM))
        other.messages.add("docs", Message(id="first", content="x"), embedding=_vectors(1)[0], model="e5-next")
        other.vectors.flush()
        assert other.vectors.models("docs") == {"e5-next": "active"}
    before = table_counts(dsn)
    with pytest.raises(EmbeddingError, match="no model 'e5-test' of 8 dimensions any more"):
        client.messages.add("docs", Message(content="y"), embedding=_vectors(1, seed=1)[0])
    assert table_counts(dsn) == before
    # The client looked again: the next add goes to the new active model.
    assert client.messages.add("docs", Message(id="second", content="y"), embedding=_vectors(1, seed=1)[0])
    assert _ids(client.vectors.search(vector=_vectors(1, seed=1)[0], memory="docs", k=1)) == ["second"]


def test_all_or_nothing_in_the_callers_transaction(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("docs", MODEL)
    before = table_counts(dsn)
    vectors = _vectors(3)
    with pytest.raises(RuntimeError), psycopg.connect(dsn) as conn:
        with conn.transaction():
            client.messages.add("docs", Message(id="t0", content="x"), embedding=vectors[0], connection=conn)
            client.messages.add_many(
                "docs",
                [Message(id="t1", content="y"), Message(id="t2", content="z")],
                embeddings=vectors[1:],
                connection=conn,
            )
            raise RuntimeError("rolled back")
    assert table_counts(dsn) == before
    with psycopg.connect(dsn) as conn, conn.transaction():
        client.messages.add("docs", Message(id="t0", content="x"), embedding=vectors[0], connection=conn)
        client.messages.add_many(
            "docs",
            [Message(id="t1", content="y"), Message(id="t2", content="z")],
            embeddings=vectors[1:],
            connection=conn,
        )
    assert _ids(client.vectors.search(vector=vectors[2], memory="docs", k=1)) == ["t2"]
    assert client.vectors.pending("docs") == {}


def test_the_cache_sees_a_vector_given_with_add(client: pgmem.Client) -> None:
    client.vectors.enable("docs", MODEL)
    vectors = _vectors(6)
    client.messages.add_many("docs", [Message(id=f"c{i}", content=f"c {i}") for i in range(5)], embeddings=vectors[:5])
    with VectorCache(client) as cache:
        assert cache.search_vectors("docs", vectors[3], 1)[0][0][0] == "c3"
        client.messages.add("docs", Message(id="fresh", content="fresh"), embedding=vectors[5])
        hit = cache.search_vectors("docs", vectors[5], 1)[0][0]  # no wait: the client's own write
        assert hit[0] == "fresh" and hit[1] == pytest.approx(1.0, abs=1e-5)


async def test_async_twin(aclient: pgmem.AsyncClient, dsn: str) -> None:
    await aclient.vectors.enable("docs", MODEL)
    vectors = _vectors(4)
    assert await aclient.messages.add("docs", Message(id="a", content="a"), embedding=vectors[0])
    assert (
        await aclient.messages.add_many(
            "docs", [Message(id="b", content="b"), Message(id="c", content="c")], embeddings=vectors[1:3]
        )
        == 2
    )
    await aclient.queues.publish("docs", Message(id="d", content="d"), embedding=vectors[3])
    for i, message_id in enumerate("abcd"):
        assert _ids(await aclient.vectors.search(vector=vectors[i], memory="docs", k=1)) == [message_id]
    before = table_counts(dsn)
    with pytest.raises(EmbeddingError, match="8 dimensions"):
        await aclient.messages.add("docs", Message(content="e"), embedding=vectors[0][:4])
    with pytest.raises(EmbeddingError, match="expected 2 vectors"):
        await aclient.messages.add_many("docs", [Message(content="e"), Message(content="f")], embeddings=vectors[:1])
    assert table_counts(dsn) == before
    assert await aclient.vectors.pending("docs") == {}


def test_precomputed_checks_its_arguments() -> None:
    assert pgmem.Precomputed is Precomputed
    assert (MODEL.model, MODEL.dimension) == ("e5-test", DIM)
    for bad in (0, 16001, True, 8.0):
        with pytest.raises(InvalidInput, match="dimension"):
            Precomputed("m", bad)  # type: ignore[arg-type]
    for name in ("", " ", None, "a\x00b"):
        with pytest.raises(InvalidInput, match="name"):
            Precomputed(name, DIM)  # type: ignore[arg-type]
