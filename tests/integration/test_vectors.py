"""Embeddings and semantic search on the real Postgres: the outbox, provider failures and the backfill,
model switches, halfvec models, filters, hybrid search, bad input."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.embeddings import HashingEmbedder, Vectors
from pgmem.errors import EmbeddingError
from tests.conftest import table_counts


class FlakyEmbedder:
    """The offline embedder behind a switch: while ``down``, every call fails like an unreachable API."""

    def __init__(self, dimension: int = 384) -> None:
        self.inner: HashingEmbedder = HashingEmbedder(dimension)
        self.model = self.inner.model
        self.dimension = dimension
        self.down = False
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        if self.down:
            raise EmbeddingError("provider unreachable (test)")
        return self.inner.embed(texts)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)


class WrongDimension(HashingEmbedder):
    """Claims 384 dimensions, answers with 383."""

    def __init__(self) -> None:
        super().__init__(384)
        self.model = "wrong-dimension"

    def embed(self, texts: Sequence[str]) -> Vectors:
        return super().embed(texts)[:, :383]


def _contents(hits: list[pgmem.planning.search.SearchHit]) -> list[str]:
    return [h.message.content for h in hits]


def test_search_after_background_embedding(client: pgmem.Client) -> None:
    assert client.vectors.enable("role:PM") == "active"
    client.messages.add("role:PM", Message(content="Write a cli snake game", cause_by="UserRequirement"))
    client.messages.add_many(
        "role:PM",
        [
            Message(content="Design the 2048 web game", cause_by="WriteDesign"),
            Message(content="Review the billing service", cause_by="WriteCode"),
        ],
    )
    client.vectors.wait()  # the writer embeds after commit, in the background
    assert client.vectors.pending("role:PM") == {}
    hits = client.search("Write a game of cli snake", memory="role:PM", k=2)
    assert _contents(hits)[0] == "Write a cli snake game"
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)  # same words, another order
    assert hits[0].score >= hits[1].score
    assert hits[0].distance == pytest.approx(1 - hits[0].score)
    # threshold: only hits at least that similar
    assert _contents(client.search("snake game cli write", memory="role:PM", threshold=0.9)) == [
        "Write a cli snake game"
    ]
    # by vector: the same as by text
    vector = client.embedder.embed(["Design the 2048 web game"])[0]
    assert _contents(client.search(vector=vector, memory="role:PM", k=1)) == ["Design the 2048 web game"]


async def test_async_search(aclient: pgmem.AsyncClient) -> None:
    await aclient.vectors.enable("m")
    await aclient.messages.add_many("m", [Message(content=f"note {i} about apples") for i in range(5)])
    await aclient.vectors.wait()
    hits = await aclient.search("note 3 about apples", memory="m", k=3)
    assert hits[0].message.content == "note 3 about apples"
    assert len(hits) == 3


def test_filters(client: pgmem.Client) -> None:
    client.vectors.enable("team")
    client.vectors.enable("other")
    t0 = datetime.now(UTC)
    batch = [
        Message(content="snake game design", role="assistant", cause_by="WriteDesign", sent_from="Architect"),
        Message(content="snake game code", role="assistant", cause_by="WriteCode", sent_from="Engineer"),
        Message(content="snake game requirement", role="user", cause_by="UserRequirement", sent_from="Boss"),
    ]
    client.messages.add_many("team", batch)
    client.messages.add("other", Message(content="snake game elsewhere", cause_by="WriteCode"))
    client.vectors.flush()
    everywhere = client.search("snake game", k=10)
    assert len(everywhere) == 4
    in_team = client.search("snake game", memory="team", k=10)
    assert {h.message.content for h in in_team} == {m.content for m in batch}
    assert _contents(client.search("snake game", memory="team", cause_by="WriteCode")) == ["snake game code"]
    assert _contents(client.search("snake game", cause_by="WriteCode", k=10)) != []
    assert {h.message.content for h in client.search("snake game", cause_by="WriteCode", k=10)} == {
        "snake game code",
        "snake game elsewhere",
    }
    assert _contents(client.search("snake game", memory="team", role="user")) == ["snake game requirement"]
    assert _contents(client.search("snake game", sender="Architect")) == ["snake game design"]
    assert len(client.search("snake game", since=t0 - timedelta(minutes=1), until=datetime.now(UTC))) == 4
    assert client.search("snake game", until=t0 - timedelta(minutes=1)) == []
    # the same filters through the index scan (mode="ann") give the same answers
    for kwargs in ({"memory": "team", "cause_by": "WriteCode"}, {"sender": "Architect"}, {"memory": "other"}):
        exact = client.search("snake game", mode="exact", **kwargs)  # type: ignore[arg-type]
        ann = client.search("snake game", mode="ann", **kwargs)  # type: ignore[arg-type]
        assert _contents(exact) == _contents(ann)


def test_namespaces_are_separate(client: pgmem.Client) -> None:
    other = client.with_namespace("elsewhere")
    client.vectors.enable("m")
    other.vectors.enable("m")
    client.messages.add("m", Message(content="only in test"))
    other.messages.add("m", Message(content="only elsewhere"))
    client.vectors.flush()
    other.vectors.flush()
    assert _contents(client.search("only", k=5)) == ["only in test"]
    assert _contents(other.search("only", memory="m", k=5)) == ["only elsewhere"]


def test_provider_down_then_backfill(dsn: str) -> None:
    flaky = FlakyEmbedder()
    with pgmem.connect(dsn, namespace="test", embedder=flaky) as client:
        client.vectors.enable("m")
        flaky.down = True
        client.messages.add_many("m", [Message(content=f"incident report {i}: disk full") for i in range(20)])
        client.messages.add("m", Message(content="the database is down"))
        client.vectors.wait()
        # saved, searchable by text, not yet by vector
        assert client.messages.count("m") == 21
        assert len(client.messages.search_text("m", "disk", limit=50)) == 20
        assert client.vectors.pending("m") == {flaky.model: 21}
        with pytest.raises(EmbeddingError):  # a text query needs the provider too
            client.search("the database is down", memory="m")
        assert client.search(vector=flaky.inner.embed(["the database is down"])[0], memory="m") == []
        with psycopg.connect(dsn) as conn:
            attempts, error = conn.execute(
                "SELECT min(attempts), min(last_error) FROM pgmem.embedding_outbox"
            ).fetchone()  # type: ignore[misc]
        assert attempts >= 1 and "unreachable" in error
        report = client.vectors.embed_pending()  # still down: reported, nothing lost
        assert report.embedded == 0 and report.remaining == 21
    # the provider is back: `pgmem embed` fills every missing vector
    env = {"PGMEM_DSN": dsn, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "pgmem.ops.cli", "embed", "--namespace", "test"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "21 embedded" in done.stdout
    with pgmem.connect(dsn, namespace="test") as client:
        assert client.vectors.pending("m") == {}
        assert _contents(client.search("the database is down", memory="m", k=1)) == ["the database is down"]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.embeddings").fetchone() == (21,)


def test_model_switch_without_downtime(dsn: str) -> None:
    old, new = HashingEmbedder(384), FlakyEmbedder(256)
    with pgmem.connect(dsn, namespace="test", embedder=old) as client:
        client.vectors.enable("m")
        client.messages.add_many("m", [Message(content=f"fact {i} about oranges") for i in range(30)])
        client.vectors.flush()
        new.down = True  # the new model's backfill cannot finish yet
        assert client.vectors.switch_model("m", new) == "building"
        client.vectors.wait()
        assert client.vectors.models("m") == {old.model: "active", new.model: "building"}
        # while the new model is incomplete, search uses the old one, new messages included
        client.messages.add("m", Message(content="fact 99 about lemons"))
        client.vectors.wait()
        assert _contents(client.search("fact 99 about lemons", memory="m", k=1)) == ["fact 99 about lemons"]
        assert client.vectors.active_model("m").name == old.model  # type: ignore[union-attr]
        assert client.vectors.pending("m") == {new.model: 31}
        # the provider is back: the backfill completes and the memory switches
        new.down = False
        report = client.vectors.embed_pending(new, retry_now=True)
        assert report.embedded == 31
        assert report.promoted == ["m"]
        assert client.vectors.models("m") == {new.model: "active"}
        hits = client.search("fact 99 about lemons", memory="m", k=1, embedder=new)
        assert _contents(hits) == ["fact 99 about lemons"]
    # a client that knew the old model notices the switch (the statement's guard) and answers with the new
    with pgmem.connect(dsn, namespace="test", embedder=old) as stale:
        stale.vectors.model(new)  # it can embed queries of the new model too
        stale.vectors.registry._active["m"] = stale.vectors.model(old)  # and remembers the old one as active
        assert _contents(stale.search("fact 3 about oranges", memory="m", k=1)) == ["fact 3 about oranges"]
        assert stale.vectors.active_model("m").name == new.model  # type: ignore[union-attr]


def test_halfvec_model(client: pgmem.Client, dsn: str) -> None:
    big = HashingEmbedder(3072)
    client.vectors.enable("m", big)
    client.messages.add_many("m", [Message(content=f"large vectors {i}") for i in range(10)])
    client.vectors.flush(big)
    assert _contents(client.search("large vectors 7", memory="m", k=1, embedder=big)) == ["large vectors 7"]
    with psycopg.connect(dsn) as conn:
        kind = conn.execute("SELECT kind FROM pgmem.embedding_models WHERE name = %s", (big.model,)).fetchone()
        assert kind == ("halfvec",)
        assert conn.execute("SELECT count(*) FROM pgmem.embeddings WHERE embedding_half IS NOT NULL").fetchone() == (
            10,
        )
        indexes = [r[0] for r in conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'embeddings'")]
        assert any("hnsw" in d and "halfvec(3072)" in d for d in indexes)


def test_hybrid_search(client: pgmem.Client) -> None:
    client.vectors.enable("m")
    client.messages.add_many(
        "m",
        [
            Message(content="The payment service times out under load"),
            Message(content="Refactor the billing module"),
            Message(content="Lunch menu for Friday"),
        ],
    )
    client.vectors.flush()
    hits = client.vectors.hybrid_search("payment service", memory="m", k=3)
    assert hits[0].message.content == "The payment service times out under load"
    assert all(hits[i].score >= hits[i + 1].score for i in range(len(hits) - 1))
    # convex fusion (the default): closeness (1 for the closest vector) + coverage (1: it holds both words)
    assert hits[0].score == pytest.approx(2.0)
    assert hits[-1].score < 1  # holds neither word: its closeness alone
    text_only = client.vectors.hybrid_search("payment service", memory="m", w_vector=0)
    assert text_only[0].score == pytest.approx(1.0)
    # Coverage weighs each word by its rarity: "payment" and "lunch" are each in one of the three messages
    # (same idf), so a message holding one of them covers half of "payment lunch".
    half = client.vectors.hybrid_search("payment lunch", memory="m", w_vector=0)
    assert [h.score for h in half[:2]] == [pytest.approx(0.5), pytest.approx(0.5)]
    # A common word weighs less than a rare one: two more messages holding "service".
    client.messages.add_many("m", [Message(content="service desk hours"), Message(content="service window")])
    rare = client.vectors.hybrid_search("payment service", memory="m", w_vector=0)
    assert rare[0].score == pytest.approx(1.0)
    by_content = {h.message.content: h.score for h in rare if h.score > 0}
    assert 0 < by_content["service window"] < 0.5
    # reciprocal rank fusion, as before revision 0014: 1/(60 + 1) from each list for the top message
    rrf = client.vectors.hybrid_search("payment service", memory="m", k=3, fusion="rrf")
    assert rrf[0].message.content == "The payment service times out under load"
    assert client.vectors.hybrid_search("payment service", memory="m", w_vector=0, fusion="rrf")[0].score == (
        pytest.approx(1 / 61)
    )
    # recency half-life: a score decays with age (a fresh message keeps almost all of it)
    fresh = client.vectors.hybrid_search("payment service", memory="m", w_vector=0)[0].score
    decayed = client.vectors.hybrid_search("payment service", memory="m", w_vector=0, half_life=timedelta(hours=1))
    assert decayed[0].score == pytest.approx(fresh, rel=1e-2) and decayed[0].score < fresh


class _Counting(HashingEmbedder):
    """The offline embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.texts += len(texts)
        return super().embed(texts)


def test_a_leg_weighted_zero_does_not_run_and_brings_no_message(client: pgmem.Client) -> None:
    """w_vector=0: no query embedded, only the keyword leg's messages (they were joined by the vector
    leg's candidates at score 0); w_text=0: only the vector leg's; both 0 or a negative weight: refused."""
    client.vectors.enable("m")
    client.messages.add_many("m", [Message(id=f"f{i}", content=f"filler{i} note") for i in range(60)])
    client.vectors.flush()
    embedder = _Counting()
    text_only = client.vectors.hybrid_search("filler7", memory="m", w_vector=0, k=10, embedder=embedder)
    assert [h.message.id for h in text_only] == ["f7"]  # was f7 then 9 vector candidates at score 0
    assert text_only[0].distance is None and text_only[0].score == pytest.approx(1.0)
    assert embedder.texts == 0  # the vector leg did not run: nothing embedded
    rrf = client.vectors.hybrid_search("filler7", memory="m", w_vector=0, fusion="rrf", embedder=embedder)
    assert [h.message.id for h in rrf] == ["f7"] and rrf[0].score == pytest.approx(1 / 61)
    assert embedder.texts == 0
    client.vectors.hybrid_search("filler7", memory="m", k=10, embedder=embedder)
    assert embedder.texts == 1  # both legs: the query is embedded once
    # A memory without vectors has no vector leg to run: keywords alone work there.
    client.messages.add("plain", Message(id="p1", content="filler7 without vectors"))
    assert [h.message.id for h in client.vectors.hybrid_search("filler7", memory="plain", w_vector=0)] == ["p1"]

    # w_text=0: a message outside the vector leg's 40 candidates (k=10) that the keyword leg finds.
    query = client.vectors.search("filler0 note", memory="m", k=1)[0].message.content
    candidates = {h.message.id for h in client.vectors.search(query, memory="m", k=40)}
    outside = next(f"f{i}" for i in range(60) if f"f{i}" not in candidates)
    word = f"filler{outside[1:]}"
    both = client.vectors.hybrid_search(query, keyword_query=word, memory="m", k=10)
    assert outside in {h.message.id for h in both}  # the FULL JOIN of both legs (coverage 1)
    vector_only = client.vectors.hybrid_search(query, keyword_query=word, memory="m", k=10, w_text=0)
    nearest = [h.message.id for h in client.vectors.search(query, memory="m", k=10)]
    assert [h.message.id for h in vector_only] == nearest and outside not in nearest
    assert all(h.distance is not None for h in vector_only) and vector_only[0].score == pytest.approx(1.0)
    # The keyword half is not needed then: a vector alone does.
    vector = HashingEmbedder().embed([query])[0]
    assert [h.message.id for h in client.vectors.hybrid_search(vector=vector, memory="m", w_text=0)] == nearest

    for weights in ({"w_vector": 0, "w_text": 0}, {"w_vector": -1}, {"w_text": -0.5}, {"w_text": float("nan")}):
        with pytest.raises(pgmem.InvalidInput):
            client.vectors.hybrid_search("filler7", memory="m", **weights)


def test_a_text_only_hybrid_search_reads_a_fork_through_its_lineage(client: pgmem.Client) -> None:
    client.messages.add_many("p", [Message(id="a", content="payment timeout"), Message(id="b", content="lunch")])
    client.fork("p", "f")
    client.forks.known.clear()  # a fork this client does not know: its statement says so, it runs again
    assert [h.message.id for h in client.vectors.hybrid_search("payment", memory="f", w_vector=0)] == ["a"]
    assert "f" in client.forks.known


def test_bad_input(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("m")
    client.messages.add("m", Message(content="hello"))
    client.vectors.flush()
    before = table_counts(dsn)
    with pytest.raises(pgmem.InvalidInput):
        client.search("x", memory="m", k=0)
    with pytest.raises(pgmem.InvalidInput):
        client.search("x", memory="m", k=10_001)
    with pytest.raises(pgmem.InvalidInput):
        client.search("x", memory="m", threshold=1.5)
    with pytest.raises(pgmem.InvalidInput):
        client.search("x", memory="m", mode="fast")
    with pytest.raises(pgmem.InvalidInput):
        client.search(memory="m")  # neither text nor vector
    with pytest.raises(pgmem.InvalidInput):
        client.search(vector=np.ones(12), memory="m")  # wrong dimension
    with pytest.raises(pgmem.InvalidInput):
        client.search(vector=np.full(384, np.nan), memory="m")
    with pytest.raises(pgmem.InvalidInput):
        client.search("x", memory="never-enabled")
    with pytest.raises(pgmem.InvalidInput):
        client.search("x", since=datetime(2026, 1, 1))  # naive datetime
    with pytest.raises(pgmem.InvalidInput):
        client.vectors.hybrid_search("  ", memory="m")
    with pytest.raises(pgmem.InvalidInput):
        client.vectors.hybrid_search("x", memory="m", half_life=-1)
    with pytest.raises(pgmem.InvalidInput, match="fusion must be one of convex, rrf"):
        client.vectors.hybrid_search("x", memory="m", fusion="max")
    assert table_counts(dsn) == before


def test_wrong_dimension_from_provider(client: pgmem.Client) -> None:
    wrong = WrongDimension()
    client.vectors.enable("m", wrong)
    client.messages.add("m", Message(content="hello"))
    client.vectors.wait()  # the background attempt fails and backs off
    report = client.vectors.embed_pending(wrong, retry_now=True)
    assert report.embedded == 0 and report.failed == 1
    assert "383" in report.errors[0] and "384" in report.errors[0]
    assert client.vectors.pending("m") == {"wrong-dimension": 1}


def test_deleted_before_embedding(dsn: str) -> None:
    flaky = FlakyEmbedder()
    with pgmem.connect(dsn, namespace="test", embedder=flaky) as client:
        client.vectors.enable("m")
        flaky.down = True
        client.messages.add_many("m", [Message(id=f"x{i}", content=f"queued {i}") for i in range(3)])
        client.vectors.wait()
        client.messages.delete("m", "x1")  # never waits on the embedder; its queued row is left behind
        assert client.vectors.pending("m") == {flaky.model: 2}
        flaky.down = False
        report = client.vectors.embed_pending(retry_now=True)
        assert report.embedded == 2 and report.remaining == 0
        client.vectors.embed_pending()  # nothing claimable is left: orphans are purged
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.embedding_outbox").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pgmem.embeddings").fetchone() == (2,)


def test_stored_vectors_find_their_memories_by_message_id(client: pgmem.Client, dsn: str) -> None:
    """Storing vectors logs them per memory for the caches (trigger ``embeddings_added``), which looks up the
    memories holding each message. Planned from statistics taken while memory_entries held one row, the join
    read the whole table (here: 1,500 rows to log 3 vectors; elsewhere it walked the memory's entries), so
    the trigger's cost grew with the data; each vector probes the message index instead (pre-baseline
    migration 0010)."""
    with psycopg.connect(dsn) as conn:  # the tables' owner (the client acts as pgmem_app)
        conn.execute("ALTER TABLE pgmem.memory_entries SET (autovacuum_enabled = off)")
    client.vectors.enable("big")
    client.messages.add("big", Message(id="b0", content="the first entry"))
    client.vectors.flush()
    with client.transaction() as conn:
        conn.execute("ANALYZE pgmem.memory_entries")  # one row: every memory looks unique
    client.messages.add_many("big", [Message(id=f"b{i}", content=f"entry {i}") for i in range(1, 1500)])
    client.vectors.flush()
    ids = ["b10", "b500", "b1400"]
    with psycopg.connect(dsn) as conn:  # a new session plans the trigger's queries afresh
        conn.execute(
            "CREATE TEMP TABLE kept AS"
            " SELECT * FROM pgmem.embeddings WHERE namespace = 'test' AND message_id = ANY(%s)",
            (ids,),
        )
        conn.execute("DELETE FROM pgmem.embeddings WHERE namespace = 'test' AND message_id = ANY(%s)", (ids,))
        head = conn.execute("SELECT vec_rev FROM pgmem.memories WHERE namespace = 'test' AND key = 'big'").fetchone()
        conn.execute("INSERT INTO pgmem.embeddings SELECT * FROM kept")
        reads = dict(
            conn.execute(
                "SELECT relname, pg_stat_get_xact_tuples_returned(oid) FROM pg_class"
                " WHERE relname IN ('memory_entries', 'memory_entries_order_key', 'memory_entries_message_idx')"
            ).fetchall()
        )
        logged = conn.execute(
            "SELECT message_id FROM pgmem.vector_log WHERE namespace = 'test' AND memory = 'big' AND rev > %s"
            " ORDER BY rev",
            head,
        ).fetchall()
        conn.rollback()
    assert [r[0] for r in logged] == ids  # in the memory's order
    assert reads == {"memory_entries": 0, "memory_entries_order_key": 0, "memory_entries_message_idx": len(ids)}


def test_embedding_batches_read_their_rows_not_the_backlog(client: pgmem.Client, dsn: str) -> None:
    """An embedder claims its batch in index order (pre-baseline migration 0011): it reads the rows it takes, not a
    backlog of 3,000 messages waiting out a retry backoff; it takes the available ones first, and the
    backfill (``retry_now``) then embeds the rest."""
    client.vectors.enable("m")
    with psycopg.connect(dsn) as conn:  # the caller's transaction: no background embedding
        client.messages.add_many(
            "m", [Message(id=f"old{i}", content=f"backlog {i}") for i in range(3000)], connection=conn
        )
        conn.execute("UPDATE pgmem.embedding_outbox SET available_at = now() + interval '1 hour', attempts = 1")
        conn.commit()
        client.messages.add_many(
            "m", [Message(id=f"new{i:02}", content=f"fresh {i}") for i in range(20)], connection=conn
        )
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:  # as autovacuum would (the update left dead rows)
        conn.execute("VACUUM ANALYZE pgmem.embedding_outbox")
    model = client.vectors.active_model("m")
    assert model is not None
    claim = pgmem.planning.statements.load("vectors")["claim_outbox"]
    # A new session: the statistics functions count what a backend has not yet reported, which here
    # would include the setup's reads.
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(claim, {"ns": "test", "model": model.id, "n": 8}).fetchall()
        read = dict(
            conn.execute(
                "SELECT relname, pg_stat_get_xact_tuples_returned(oid) FROM pg_class WHERE relname IN"
                " ('embedding_outbox', 'embedding_outbox_claim_idx', 'messages', 'messages_pkey')"
            ).fetchall()
        )
        conn.rollback()
    assert [r[0] for r in rows] == [f"new{i:02}" for i in range(8)]
    # no table read sequentially; 8 entries of each index (9: the scan looks one row past the batch)
    assert read["embedding_outbox"] == read["messages"] == 0
    assert 8 <= read["embedding_outbox_claim_idx"] <= 9 and read["messages_pkey"] == 8
    assert client.vectors.embed_pending().embedded == 20  # the backlog waits out its backoff
    report = client.vectors.embed_pending(retry_now=True, batch_size=500)
    assert (report.embedded, report.remaining) == (3000, 0)


def test_a_database_error_while_storing_is_raised_not_taken_for_the_provider(client: pgmem.Client, dsn: str) -> None:
    """Only the provider's failures put a batch into retry backoff (reported, not raised); a failure of the
    database while storing the vectors is raised, and the batch stays queued as it was, nothing stored."""
    flaky = FlakyEmbedder()
    client.vectors.enable("m", flaky)
    with psycopg.connect(dsn) as conn:  # the caller's transaction: no background embedding
        client.messages.add_many("m", [Message(content=f"note {i}") for i in range(5)], connection=conn)
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION public.fail_store() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'no space left on device (test)'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER fail_store BEFORE INSERT ON pgmem.embeddings"
            " FOR EACH ROW EXECUTE FUNCTION public.fail_store()"
        )
    with pytest.raises(pgmem.PgmemError, match="no space left") as raised:
        client.vectors.embed_pending(flaky)
    assert isinstance(raised.value.__cause__, psycopg.errors.RaiseException)  # the trigger's, chained
    with psycopg.connect(dsn) as conn:
        queued = conn.execute(
            "SELECT count(*), max(attempts), bool_and(available_at <= now()) FROM pgmem.embedding_outbox"
        )
        assert queued.fetchone() == (5, 0, True)  # no backoff, no attempt counted
        assert conn.execute("SELECT count(*) FROM pgmem.embeddings").fetchone() == (0,)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TRIGGER fail_store ON pgmem.embeddings")
    assert client.vectors.embed_pending(flaky).embedded == 5
    flaky.down = True  # the provider's failures are still reported, with a backoff
    client.messages.add("m", Message(content="one more"))
    client.vectors.wait()
    report = client.vectors.embed_pending(flaky, retry_now=True)
    assert (report.embedded, report.failed, report.remaining) == (0, 1, 1) and "unreachable" in report.errors[0]
