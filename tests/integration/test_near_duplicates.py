"""Near-duplicates merged (``messages.add(merge="near")``, ``messages.remember``; README, "Near-duplicates").

Single-process semantics, exact duplicates, bad input, the merge the background embedder decides when the
vector comes later, tenants apart, a search boosted by ``seen_count``, MetaGPT's long-term storage, and the
race: 8 real processes adding near-duplicates of one fact at once, of which exactly one is stored.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem import EmbeddingError, InvalidInput
from pgmem.embeddings import HashingEmbedder, Precomputed
from pgmem.merging import Remembered
from tests.conftest import table_counts
from tests.integration.test_multiprocess import run_processes

CTX = multiprocessing.get_context("spawn")
FACT = "Alice's favourite colour is blue"
#: Each one's cosine similarity with another (the offline embedder) is about 0.93.
VARIANTS = [f"{FACT}, noted by agent {i}" for i in range(8)]


def _entries(dsn: str, memory: str, namespace: str = "test") -> list[tuple[str, int, bool]]:
    """(content, seen_count, last_seen_at set) of the memory's entries, in order (read as the owner)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT m.content, e.seen_count, e.last_seen_at IS NOT NULL FROM pgmem.memory_entries e "
            "JOIN pgmem.messages m ON m.namespace = e.namespace AND m.id = e.message_id "
            "WHERE e.namespace = %s AND e.memory = %s ORDER BY e.seq",
            (namespace, memory),
        ).fetchall()
    return [(str(c), int(n), bool(s)) for c, n, s in rows]


def test_a_near_duplicate_is_counted_not_stored(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("facts")
    first = pgmem.Message(content=VARIANTS[0])
    assert client.messages.add("facts", first, merge="near", threshold=0.9) is True
    assert client.messages.add("facts", pgmem.Message(content=VARIANTS[1]), merge="near", threshold=0.9) is False
    found = client.messages.remember("facts", pgmem.Message(content=VARIANTS[2]), threshold=0.9)
    assert found == Remembered(first.id, added=False, merged=True)
    other = client.messages.remember("facts", pgmem.Message(content="Bob drives a red car"), threshold=0.9)
    assert other.added and not other.merged and not other.pending
    assert _entries(dsn, "facts") == [(VARIANTS[0], 3, True), ("Bob drives a red car", 1, False)]
    with psycopg.connect(dsn) as conn:  # the merged messages are not stored at all, nor their vectors
        assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (2,)
        assert conn.execute("SELECT count(*) FROM pgmem.embeddings").fetchone() == (2,)
    # A stricter threshold stores it; a plain add never merges.
    assert client.messages.add("facts", pgmem.Message(content=VARIANTS[3]), merge="near", threshold=0.99) is True
    assert client.messages.add("facts", pgmem.Message(content=VARIANTS[4])) is True
    assert len(_entries(dsn, "facts")) == 4


def test_exact_duplicates_keep_their_semantics(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("facts")
    message = pgmem.Message(content=FACT)
    assert client.messages.add("facts", message, merge="near", threshold=0.5) is True
    assert client.messages.add("facts", message, merge="near", threshold=0.5) is False
    assert client.messages.remember("facts", message, threshold=0.5) == Remembered(message.id, added=False)
    assert client.messages.add("facts", message) is False
    assert _entries(dsn, "facts") == [(FACT, 1, False)]  # no count grows for an exact duplicate
    clash = pgmem.Message(id=message.id, content="other content")
    with pytest.raises(pgmem.Conflict):
        client.messages.add("facts", clash, merge="near", threshold=0.5)


def test_given_vectors_and_the_models_distance(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("v", Precomputed("mine", 3), distance="l2")
    base = np.array([1.0, 0.0, 0.0])
    a, b, c = pgmem.Message(content="a"), pgmem.Message(content="b"), pgmem.Message(content="c")
    assert client.messages.remember("v", a, threshold=-0.1, embedding=base).added
    # l2: the threshold is a negated Euclidean distance; 0.05 away merges, 0.5 away does not.
    assert client.messages.remember("v", b, threshold=-0.1, embedding=base + [0, 0.05, 0]).id == a.id
    assert client.messages.remember("v", c, threshold=-0.1, embedding=base + [0, 0.5, 0]).added
    assert _entries(dsn, "v") == [("a", 2, True), ("c", 1, False)]
    with pytest.raises(InvalidInput):  # l2 scores are <= 0
        client.messages.add("v", pgmem.Message(content="d"), embedding=base, merge="near", threshold=0.5)


def test_bad_input_writes_nothing(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("facts")
    client.messages.add("empty", pgmem.Message(content="no model here"))
    before = table_counts(dsn)
    message = pgmem.Message(content=FACT)
    for merge, threshold, error in [
        ("fuzzy", 0.9, InvalidInput),
        (True, 0.9, InvalidInput),
        ("near", None, InvalidInput),
        ("exact", 0.9, InvalidInput),
        (None, 0.9, InvalidInput),
        ("near", 1.5, InvalidInput),  # a cosine similarity is in [-1, 1]
        ("near", float("nan"), InvalidInput),
        ("near", "0.9", InvalidInput),
    ]:
        with pytest.raises(error):
            client.messages.add("facts", message, merge=merge, threshold=threshold)
    with pytest.raises(EmbeddingError):  # nothing to compare: the memory has no model
        client.messages.add("empty", message, merge="near", threshold=0.9)
    with pytest.raises(EmbeddingError):
        client.messages.remember("facts", message, threshold=0.9, model="no-such-model")
    assert table_counts(dsn) == before


def test_the_embedder_merges_when_the_vector_comes_later(dsn: str) -> None:
    """A writer without the model's embedder (a Precomputed stand-in of its name) leaves the merge to the
    background embedder of another process's client, which decides it when it stores the vectors."""
    hashing = HashingEmbedder()
    with (
        pgmem.connect(dsn, namespace="test", max_size=2) as embedding,
        pgmem.connect(dsn, namespace="test", max_size=2, embedder=Precomputed(hashing.model, 384)) as writer,
    ):
        embedding.vectors.enable("facts")
        found = [writer.messages.remember("facts", pgmem.Message(content=v), threshold=0.9) for v in VARIANTS[:3]]
        assert all(f.added and f.pending and not f.merged for f in found)
        assert writer.vectors.pending("facts") == {hashing.model: 3}
        assert len(_entries(dsn, "facts")) == 3
        embedding.vectors.kick()  # the background worker, as after one of its own writes
        embedding.vectors.wait()
        assert embedding.vectors.pending("facts") == {}
        assert _entries(dsn, "facts") == [(VARIANTS[0], 3, True)]
        with psycopg.connect(dsn) as conn:
            assert conn.execute(
                "SELECT count(*) FROM pgmem.memory_entries WHERE merge_within IS NOT NULL"
            ).fetchone() == (0,)
        # A later near-duplicate, with the vector at hand, merges into the survivor at once.
        assert embedding.messages.remember("facts", pgmem.Message(content=VARIANTS[5]), threshold=0.9).merged
        assert _entries(dsn, "facts") == [(VARIANTS[0], 4, True)]


def test_tenants_are_apart(dsn: str) -> None:
    with (
        pgmem.connect(dsn, namespace="a", max_size=2) as a,
        pgmem.connect(dsn, namespace="b", max_size=2) as b,
    ):
        for c in (a, b):
            c.vectors.enable("facts")
        assert a.messages.add("facts", pgmem.Message(content=VARIANTS[0]), merge="near", threshold=0.9)
        # b's memory of the same key holds nothing (row-level security: a's vectors are not b's neighbours)
        assert b.messages.add("facts", pgmem.Message(content=VARIANTS[1]), merge="near", threshold=0.9)
        assert not b.messages.add("facts", pgmem.Message(content=VARIANTS[2]), merge="near", threshold=0.9)
    assert _entries(dsn, "facts", "a") == [(VARIANTS[0], 1, False)]
    assert _entries(dsn, "facts", "b") == [(VARIANTS[1], 2, True)]


def test_search_boosts_what_was_seen_more_often(client: pgmem.Client) -> None:
    client.vectors.enable("facts")
    client.messages.add("facts", pgmem.Message(content="the deploy runs on Fridays at noon"))
    often = pgmem.Message(content="the deploy runs on Fridays")
    client.messages.add("facts", often, merge="near", threshold=0.97)
    for _ in range(3):
        client.messages.add("facts", pgmem.Message(content="the deploy runs on Fridays!"), merge="near", threshold=0.97)
    client.vectors.wait()
    plain = client.vectors.search("deploy on Fridays at noon", memory="facts", k=2)
    assert plain[0].message.content == "the deploy runs on Fridays at noon"
    assert plain[0].seen_count is None  # not read unless asked
    boosted = client.vectors.search("deploy on Fridays at noon", memory="facts", k=2, boost_seen=1.0)
    assert [(h.message.id, h.seen_count) for h in boosted][0] == (often.id, 4)
    assert boosted[0].last_seen_at is not None
    with pytest.raises(InvalidInput):
        client.vectors.search("deploy", k=2, boost_seen=1.0)  # a memory's counts: memory= is needed


def test_metagpt_long_term_storage_merges(client: pgmem.Client, dsn: str) -> None:
    from pgmem.metagpt import MemoryStorage

    storage = MemoryStorage(client=client, merge="near")  # MetaGPT's threshold 0.1: cosine >= 0.95
    storage.recover_memory("Alice")
    assert storage.add(pgmem.Message(content="the deploy runs on Fridays")) is True
    assert storage.add(pgmem.Message(content="the deploy runs on Fridays!")) is False
    assert storage.add(pgmem.Message(content="lunch is at one")) is True
    assert [(c, n) for c, n, _ in _entries(dsn, storage.key)] == [
        ("the deploy runs on Fridays", 2),
        ("lunch is at one", 1),
    ]
    with pytest.raises(InvalidInput):
        MemoryStorage(client=client, merge="close")


# -- 8 processes at once ------------------------------------------------------------------------------


#: The facts raced for, one after another (each round is another chance for a race to show); process i
#: tells fact r as f"{FACTS[r]} (agent {i} noted)": cosine similarity >= 0.90 with another process's
#: variant of the fact, <= 0.53 with any variant of another fact (the offline embedder).
FACTS = [
    "Alice prefers blue notebooks",
    "the build server restarts nightly",
    "invoices are due within thirty days",
    "Bob owns a vintage motorcycle",
    "the cafeteria serves soup on Mondays",
    "our API rate limit is generous",
    "Carol speaks fluent Portuguese",
    "backups live in the Frankfurt region",
    "the quarterly review moved to April",
    "Dave trains for marathons",
    "staging uses a smaller database",
    "the office closes early on Fridays",
]
ROUNDS = len(FACTS)


def _racer(index: int, dsn: str, barrier: Any, given: bool) -> list[tuple[str, bool, bool]]:
    """Round r: remember this process's variant of fact r, all processes released at once."""
    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        client.vectors.pending("race")  # connect before the barrier
        rng = np.random.default_rng(index)
        results = []
        for r in range(ROUNDS):
            message = pgmem.Message(content=f"{FACTS[r]} (agent {index} noted)")
            embedding = None
            if given:  # fact r's direction, a little off: cosine similarity > 0.99 with the other variants
                embedding = np.eye(16)[r] + rng.normal(0, 0.01, 16)
            barrier.wait()
            found = client.messages.remember("race", message, threshold=0.85, embedding=embedding)
            results.append((found.id, found.added, found.merged))
        return results


@pytest.mark.slow
@pytest.mark.parametrize("given", [True, False], ids=["given-vectors", "embedded-by-the-caller"])
def test_eight_processes_store_one(dsn: str, given: bool) -> None:
    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        client.vectors.enable("race", Precomputed("race-model", 16) if given else None)
    processes = 8
    barrier = CTX.Barrier(processes, timeout=120)
    results = run_processes(_racer, [(dsn, barrier, given)] * processes)
    survivors = []
    for r in range(ROUNDS):
        told = [by_process[r] for by_process in results]
        added = [t for t in told if t[1]]
        assert len(added) == 1, (r, told)
        survivors.append(added[0][0])
        assert all(t == (added[0][0], False, True) for t in told if not t[1]), (r, told)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT message_id, seen_count FROM pgmem.memory_entries WHERE namespace = 'test' AND memory = 'race' "
            "ORDER BY seq"
        ).fetchall()
        assert rows == [(s, processes) for s in survivors]
        assert conn.execute("SELECT count(*) FROM pgmem.messages WHERE namespace = 'test'").fetchone() == (ROUNDS,)


# -- add_many(merge="near") ------------------------------------------------------------------------------


def test_a_batch_merges_against_the_memory_and_itself(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("facts")
    first = pgmem.Message(content=VARIANTS[0])
    held = pgmem.Message(content="Bob drives a red car")
    assert client.messages.add_many("facts", [first, held]) == 2  # no merge: a plain int, as ever
    client.vectors.flush()  # their vectors stored (the background embedder's), as the merge compares them
    bob, carol = pgmem.Message(content="Carol speaks Portuguese"), pgmem.Message(content="Dave runs marathons")
    batch = [
        pgmem.Message(content=VARIANTS[1]),  # near the memory's first: merged into it
        bob,
        pgmem.Message(content="Carol speaks Portuguese"),  # near (equal to) the batch's bob: merged into it
        held,  # the memory holds it: an exact duplicate, nothing counted
        carol,
        carol,  # repeated in the batch: the first counts
    ]
    told = client.messages.add_many("facts", batch, merge="near", threshold=0.9)
    assert told == 2 and isinstance(told, int)
    assert told.remembered == (
        Remembered(first.id, added=False, merged=True),
        Remembered(bob.id, added=True),
        Remembered(bob.id, added=False, merged=True),
        Remembered(held.id, added=False),
        Remembered(carol.id, added=True),
        Remembered(carol.id, added=False),
    )
    assert _entries(dsn, "facts") == [
        (VARIANTS[0], 2, True),
        ("Bob drives a red car", 1, False),
        ("Carol speaks Portuguese", 2, True),
        ("Dave runs marathons", 1, False),
    ]
    with psycopg.connect(dsn) as conn:  # merged messages are not stored, nor their vectors; none waits
        assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (4,)
        assert conn.execute("SELECT count(*) FROM pgmem.embeddings").fetchone() == (4,)
        assert conn.execute("SELECT count(*) FROM pgmem.memory_entries WHERE merge_within IS NOT NULL").fetchone() == (
            0,
        )
    # The batch's order decides among its own: the later near-duplicates merge into the first of them.
    again = client.messages.add_many(
        "facts", [pgmem.Message(content=v) for v in VARIANTS[2:5]], merge="near", threshold=0.99
    )
    assert again == 3  # 0.99: none is near another
    assert client.messages.add_many("facts", [], merge="near", threshold=0.9).remembered == ()


def test_a_batch_of_given_vectors(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("v", Precomputed("mine", 3), distance="l2")
    base = np.array([1.0, 0.0, 0.0])
    a, b, c = (pgmem.Message(content=x) for x in "abc")
    told = client.messages.add_many(
        "v", [a, b, c], embeddings=[base, base + [0, 0.05, 0], base + [0, 0.5, 0]], merge="near", threshold=-0.1
    )
    assert [(r.id, r.added, r.merged) for r in told.remembered] == [
        (a.id, True, False),
        (a.id, False, True),
        (c.id, True, False),
    ]
    assert _entries(dsn, "v") == [("a", 2, True), ("c", 1, False)]


def test_a_bad_batch_writes_nothing(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("facts")
    client.messages.add("empty", pgmem.Message(content="no model here"))
    stored = pgmem.Message(content="stored once")
    client.messages.add("facts", stored)
    client.vectors.wait()  # its background embedding is done before counting (it raced the count)
    before = table_counts(dsn)
    batch = [pgmem.Message(content=v) for v in VARIANTS[:3]]
    for merge, threshold in [("fuzzy", 0.9), ("near", None), (None, 0.9), ("near", 1.5), ("near", float("nan"))]:
        with pytest.raises(InvalidInput):
            client.messages.add_many("facts", batch, merge=merge, threshold=threshold)
    with pytest.raises(EmbeddingError):  # nothing to compare: the memory has no model
        client.messages.add_many("empty", batch, merge="near", threshold=0.9)
    with pytest.raises(EmbeddingError):  # two vectors for three messages
        client.messages.add_many("facts", batch, embeddings=np.ones((2, 384)), merge="near", threshold=0.9)
    with pytest.raises(pgmem.Conflict):  # one message of the batch clashes with a stored one: none is written
        client.messages.add_many(
            "facts", [*batch, pgmem.Message(id=stored.id, content="other")], merge="near", threshold=0.9
        )
    assert table_counts(dsn) == before


def test_the_embedder_merges_a_batch_when_the_vectors_come_later(dsn: str) -> None:
    hashing = HashingEmbedder()
    with (
        pgmem.connect(dsn, namespace="test", max_size=2) as embedding,
        pgmem.connect(dsn, namespace="test", max_size=2, embedder=Precomputed(hashing.model, 384)) as writer,
    ):
        embedding.vectors.enable("facts")
        told = writer.messages.add_many(
            "facts", [pgmem.Message(content=v) for v in VARIANTS[:3]], merge="near", threshold=0.9
        )
        assert told == 3 and all(r.pending for r in told.remembered)
        embedding.vectors.kick()
        embedding.vectors.wait()
        assert _entries(dsn, "facts") == [(VARIANTS[0], 3, True)]


def test_metagpt_long_term_storage_merges_a_batch(client: pgmem.Client, dsn: str) -> None:
    from pgmem.metagpt import MemoryStorage

    storage = MemoryStorage(client=client, merge="near")
    storage.recover_memory("Bob")
    storage.add(pgmem.Message(content="the deploy runs on Fridays"))
    batch = ["the deploy runs on Fridays!", "lunch is at one", "lunch is at one!"]
    assert storage.add_batch([pgmem.Message(content=c) for c in batch]) == 1
    assert [(c, n) for c, n, _ in _entries(dsn, storage.key)] == [
        ("the deploy runs on Fridays", 2),
        ("lunch is at one", 2),
    ]


@pytest.mark.parametrize(("distance", "threshold"), [("cosine", 0.97), ("l2", -0.35), ("inner_product", 0.9)])
def test_a_batch_decides_as_merging_adds_one_by_one(dsn: str, distance: str, threshold: float) -> None:
    """add_many(merge="near") decides its batch in one look-up and one write; the same messages added one
    by one with merge="near" (each look-up seeing the decisions before it) are the reference: the same
    entries, in the same order, with the same seen counts, the same answers, the same messages kept.
    Random batches near each other and near what the memory holds, with exact copies (ties: the oldest)."""
    rng = np.random.default_rng({"cosine": 1, "l2": 2, "inner_product": 3}[distance])
    for round_ in range(4):
        old = rng.normal(size=(30, 6))
        bases = np.concatenate([old[rng.choice(30, 4)], rng.normal(size=(6, 6))])
        picks = rng.choice(len(bases), 40)
        vectors = bases[picks] + rng.normal(0, 0.02, (40, 6)) * (rng.random((40, 1)) < 0.7)
        if distance == "inner_product":  # its scores grow with the norm: unit vectors keep them comparable
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            old /= np.linalg.norm(old, axis=1, keepdims=True)
        held = [pgmem.Message(content=f"old {round_} {i}") for i in range(30)]
        batch = [pgmem.Message(content=f"new {round_} {i}") for i in range(40)]
        answers = {}
        for namespace in ("batch", "one-by-one"):
            with pgmem.connect(dsn, namespace=namespace, max_size=1) as client:
                memory = f"m{round_}"
                client.vectors.enable(memory, Precomputed("given", 6), distance=distance)
                client.messages.add_many(memory, held, embeddings=old)
                if namespace == "batch":
                    told = client.messages.add_many(
                        memory, batch, embeddings=vectors, merge="near", threshold=threshold
                    )
                    answers[namespace] = [(r.id, r.added, r.merged) for r in told.remembered]
                else:
                    answers[namespace] = []
                    for message, vector in zip(batch, vectors, strict=True):
                        r = client.messages.remember(memory, message, threshold=threshold, embedding=vector)
                        answers[namespace].append((r.id, r.added, r.merged))
        merged = sum(1 for _, _, m in answers["batch"] if m)
        assert 5 < merged < 40, merged  # the batch merges into the memory and into itself, not everything
        assert answers["batch"] == answers["one-by-one"], round_
        assert _entries(dsn, f"m{round_}", "batch") == _entries(dsn, f"m{round_}", "one-by-one")
        with psycopg.connect(dsn) as conn:
            kept = [
                conn.execute(
                    "SELECT array_agg(content ORDER BY content) FROM pgmem.messages WHERE namespace = %s", (ns,)
                ).fetchone()
                for ns in ("batch", "one-by-one")
            ]
        assert kept[0] == kept[1]


def test_a_batch_breaks_ties_for_the_oldest(client: pgmem.Client, dsn: str) -> None:
    """Equally near neighbours (l2 distances of exactly 1): the oldest wins, whether it is in the memory or
    an earlier entry of the batch that stayed, as merging adds one by one decide."""
    client.vectors.enable("t", Precomputed("given", 3), distance="l2")
    x = pgmem.Message(content="x")
    client.messages.add_many("t", [x], embeddings=[[1.0, 0.0, 10.0]])
    contents = ["y", "z", "y1", "y2", "w"]
    vectors = [[-1.0, 0.0, 10.0], [0.0, 0.0, 10.0], [0.0, 5.0, 11.0], [0.0, 5.0, 9.0], [0.0, 5.0, 10.0]]
    # y stays (2 from x); z is 1 from x and from y: x, the older; y1 and y2 stay (2 apart, far from the
    # rest); w is 1 from each: y1, the older of the two.
    batch = [pgmem.Message(content=c) for c in contents]
    told = client.messages.add_many("t", batch, embeddings=vectors, merge="near", threshold=-1.5)
    by_id = {m.id: m.content for m in [x, *batch]}
    assert [(by_id[r.id], r.merged) for r in told.remembered] == [
        ("y", False),
        ("x", True),
        ("y1", False),
        ("y2", False),
        ("y1", True),
    ]
    assert _entries(dsn, "t") == [("x", 2, True), ("y", 1, False), ("y1", 2, True), ("y2", 1, False)]


def test_the_embedders_merges_decide_as_adds_with_the_vector_at_hand(dsn: str) -> None:
    """Merges left to the embedder (no vector at the add), each with its own threshold, decided when it
    stores the vectors (one look-up and one write per memory): the same entries and seen counts as the
    same adds made where the vector was at hand (each decided at once, in order)."""
    rng = np.random.default_rng(5)
    facts = [FACT, "Bob moved to Paris last spring", "The deploy key rotates every month"]
    order = rng.permutation([(f, i) for f in range(3) for i in range(6)])
    messages = [(f"{facts[f]}, noted by agent {i}", float(rng.choice([0.88, 0.92, 0.96]))) for f, i in order]
    hashing = HashingEmbedder()
    with (
        pgmem.connect(dsn, namespace="later", max_size=2) as embedding,
        pgmem.connect(dsn, namespace="later", max_size=2, embedder=Precomputed(hashing.model, 384)) as writer,
        pgmem.connect(dsn, namespace="at-hand", max_size=2) as reference,
    ):
        embedding.vectors.enable("facts")
        reference.vectors.enable("facts")
        for content, threshold in messages:
            assert writer.messages.remember("facts", pgmem.Message(content=content), threshold=threshold).pending
            reference.messages.remember("facts", pgmem.Message(content=content), threshold=threshold)
        embedding.vectors.kick()
        embedding.vectors.wait()
        assert embedding.vectors.pending("facts") == {}
    decided = _entries(dsn, "facts", "later")
    assert decided == _entries(dsn, "facts", "at-hand")
    assert 3 <= len(decided) < len(messages)  # some merged, some stayed apart
