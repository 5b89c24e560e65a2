"""``client.retention.forget``: every copy of the chosen messages goes in one transaction — message rows,
entries in every memory, embeddings, queue items, inbox deliveries, archived items, logged searches, the
FAISS caches of other processes — summaries that covered them are marked stale and stop being served, and
an audit row says who, when, what scope and how many rows, never the content.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.summarizer import CompressionPolicy, OfflineSummarizer

SECRET = "zanzibar-password-7781"
ROOT = Path(__file__).resolve().parents[2]


def _sql(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def _copies(dsn: str, ids: list[str], namespace: str = "test") -> dict[str, int]:
    """Rows anywhere naming one of ``ids``, per table, read in ONE statement (one snapshot)."""
    row = _sql(
        dsn,
        """
        SELECT (SELECT count(*) FROM pgmem.messages WHERE namespace = %(ns)s AND id = ANY(%(ids)s)),
               (SELECT count(*) FROM pgmem.memory_entries WHERE namespace = %(ns)s AND message_id = ANY(%(ids)s)),
               (SELECT count(*) FROM pgmem.embeddings WHERE namespace = %(ns)s AND message_id = ANY(%(ids)s)),
               (SELECT count(*) FROM pgmem.queue_items WHERE namespace = %(ns)s AND message_id = ANY(%(ids)s)),
               (SELECT count(*) FROM pgmem.queue_archive WHERE namespace = %(ns)s AND message_id = ANY(%(ids)s)),
               (SELECT count(*) FROM pgmem.retrieval_log WHERE namespace = %(ns)s AND message_ids && %(ids)s)
        """,
        {"ns": namespace, "ids": ids},
    )[0]
    names = ("messages", "memory_entries", "embeddings", "queue_items", "queue_archive", "retrieval_log")
    return dict(zip(names, (int(n) for n in row), strict=True))


def _anywhere(dsn: str, text: str) -> list[str]:
    """The pgmem tables any of whose rows holds ``text`` (every column, as text)."""
    tables = [r[0] for r in _sql(dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'pgmem'")]
    return [
        t
        for t in tables
        if _sql(dsn, f"SELECT count(*) FROM pgmem.{t} AS r WHERE strpos(r::text, %s) > 0", (text,))[0][0]
    ]


def _scene(client: pgmem.Client) -> None:
    """A secret message everywhere a message can be: two memories (one with summaries), a queue item, an
    inbox delivery, the queue archive, a logged search, a brain's history."""
    client.retrieval_log = True
    client.vectors.enable("a")
    client.vectors.enable("b")
    secret = Message(id="s1", content=f"the vault code is {SECRET}", sent_from="Mallory", metadata={"subject": "u42"})
    other = [Message(id=f"o{i}", content=f"ordinary note {i} about gardens", sent_from="Alice") for i in range(12)]
    client.messages.add_many("a", [*other[:5], secret, *other[5:]])
    client.messages.add_many("b", [secret, other[0]])
    client.vectors.flush()
    client.summaries.compress("a", OfflineSummarizer(), CompressionPolicy(chunk=4, fanout=2))
    q = client.queues
    q.push("jobs", secret)
    q.push("done", secret)
    q.push("done", other[1])
    q.ack(q.claim("done", 2))  # one archive row: the secret and another item
    q.subscribe("bob", addresses=["bob"])
    q.publish("team", Message(id="s2", content=f"psst {SECRET}", send_to={"bob"}, metadata={"subject": "u42"}))
    client.search("vault code", memory="a", k=3)  # logged: returns s1
    client.brains.dump("chat:1", history=[secret, other[2]], historical_summary=f"they said {SECRET}")


def test_forget_by_ids_removes_every_copy_and_audits_without_content(client: pgmem.Client, dsn: str) -> None:
    _scene(client)
    assert SECRET in " ".join(s.content for s in client.summaries.list("a"))
    before = _copies(dsn, ["s1"])
    assert all(before.values()), before
    done = client.retention.forget(["s1", "s2"], actor="ticket-4711")
    assert done.messages == 2 and done.memory_entries == 4  # a, b, the brain's history; team
    assert done.embeddings == 1 and done.queue_items == 2 and done.queue_archive == 1  # team has no vectors
    assert done.retrieval_log == 1 and done.summaries_stale >= 1 and done.brain_summaries == 1
    assert set(done.memories) >= {"a", "b", "team"}
    assert not any(_copies(dsn, ["s1", "s2"]).values())
    # Nothing of the content is left anywhere: summaries emptied, brain summary cleared, no audit content.
    assert _anywhere(dsn, SECRET) == []
    # The rest is intact: the other archived item, the other messages.
    assert _copies(dsn, ["o1"])["queue_archive"] == 1
    assert client.messages.count("a") == 12 and client.messages.count("b") == 1
    assert all(hit.message.id != "s1" for hit in client.search("vault code", memory="a", k=12))
    # The audit row: who, when, scope and counts.
    (actor, label, scope, counts), *_ = _sql(
        dsn,
        "SELECT actor, label, scope, counts FROM pgmem.forget_audit WHERE namespace = 'test' AND id = %s",
        (done.audit_id,),
    )
    assert actor and label == "ticket-4711"
    assert scope == {"kind": "ids", "ids": ["s1", "s2"]}
    assert counts == done.counts()


def test_stale_summaries_are_not_served_and_are_recomputed_without_the_content(client: pgmem.Client) -> None:
    _scene(client)
    listed = client.summaries.list("a")
    done = client.retention.forget(sender="Mallory")
    assert done.messages == 1 and done.summaries_stale >= 1
    stale = client.summaries.stale("a")
    assert len(stale) == done.summaries_stale and all(s.content == "" for s in stale)
    served = client.summaries.list("a") + client.summaries.frontier("a")
    assert {s.id for s in stale}.isdisjoint(s.id for s in served)
    assert all(SECRET not in s.content for s in served)
    # Recompute from what is left: same ranges, fresh content, no secret, nothing stale.
    rebuilt = client.summaries.recompute("a", OfflineSummarizer())
    assert {(s.level, s.first_seq, s.last_seq) for s in rebuilt} == {(s.level, s.first_seq, s.last_seq) for s in stale}
    assert all(s.content and SECRET not in s.content for s in rebuilt)
    assert client.summaries.stale("a") == []
    assert len(client.summaries.list("a")) == len(listed)
    # The brain reads as unsummarised, without the secret.
    state = client.brains.load("chat:1")
    assert state is not None and state.historical_summary == ""
    assert [m.id for m in state.history] == ["o2"]


def test_each_selector(client: pgmem.Client, dsn: str) -> None:
    _scene(client)
    other = client.with_namespace("other")
    other.messages.add_many("a", [Message(id="s1", content=SECRET, sent_from="Mallory", metadata={"subject": "u42"})])
    # subject: s1 and s2 carry {"subject": "u42"}
    assert client.retention.forget(subject="u42").messages == 2
    # memory: every message of memory b goes (o0 also out of a)
    assert client.retention.forget(memory="b").messages == 1
    assert client.messages.count("a") == 11
    # sender: the rest of Alice's notes
    assert client.retention.forget(sender="Alice").messages == 11
    assert client.messages.count("a") == 0
    # no match: an audit row all the same, with zero counts
    nothing = client.retention.forget(ids=["nope"])
    assert nothing.messages == 0 and nothing.audit_id
    kinds = [
        r[0] for r in _sql(dsn, "SELECT scope->>'kind' FROM pgmem.forget_audit WHERE namespace = 'test' ORDER BY id")
    ]
    assert kinds == ["subject", "memory", "sender", "ids"]
    # another tenant's message with the same id, sender and subject is untouched
    assert other.messages.count("a") == 1
    assert _sql(dsn, "SELECT count(*) FROM pgmem.forget_audit WHERE namespace = 'other'")[0][0] == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"ids": ["x"], "sender": "Alice"},
        {"memory": "a", "subject": "u42"},
        {"ids": []},
        {"ids": "s1"},
        {"ids": [1, 2]},
        {"ids": ["ok", ""]},
        {"ids": ["a\x00b"]},
        {"memory": "not a key!"},
        {"sender": ""},
        {"sender": 5},
        {"subject": {"nested": 1}},
        {"ids": ["o1"], "actor": 7},
    ],
    ids=repr,
)
def test_bad_selectors_raise_invalid_input_and_delete_nothing(client: pgmem.Client, dsn: str, kwargs: Any) -> None:
    client.messages.add_many("a", [Message(id="o1", content="keep me", sent_from="Alice")])
    with pytest.raises(pgmem.InvalidInput):
        client.retention.forget(**kwargs)
    assert client.messages.count("a") == 1
    assert _sql(dsn, "SELECT count(*) FROM pgmem.forget_audit")[0][0] == 0


def test_forget_inside_the_callers_transaction_rolls_back_with_it(client: pgmem.Client, dsn: str) -> None:
    client.messages.add_many("a", [Message(id="o1", content="keep me")])
    with psycopg.connect(dsn) as conn:
        done = pgmem.Client(namespace="test", connection=conn).retention.forget(["o1"])
        assert done.messages == 1
        conn.rollback()
    assert client.messages.count("a") == 1
    assert _sql(dsn, "SELECT count(*) FROM pgmem.forget_audit")[0][0] == 0


def test_a_concurrent_reader_never_sees_a_half_forgotten_message(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("a")
    ids = [f"m{i}" for i in range(1500)]
    notes = [Message(id=i, content=f"note {i} subject u7", metadata={"subject": "u7"}) for i in ids]
    client.messages.add_many("a", notes)
    client.messages.add_many("b", notes[:700])  # the same messages in a second memory: one row, two entries
    client.queues.push_many("jobs", notes[:300])
    client.vectors.flush()
    seen: list[tuple[int, ...]] = []
    stop = threading.Event()

    def read() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                row = conn.execute(
                    """
                    SELECT (SELECT count(*) FROM pgmem.messages WHERE namespace = 'test'),
                           (SELECT count(*) FROM pgmem.memory_entries WHERE namespace = 'test'),
                           (SELECT count(*) FROM pgmem.embeddings WHERE namespace = 'test'),
                           (SELECT count(*) FROM pgmem.queue_items WHERE namespace = 'test')
                    """
                ).fetchone()
                assert row is not None
                seen.append(tuple(int(n) for n in row))

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.2)
    done = client.retention.forget(subject="u7")
    time.sleep(0.2)
    stop.set()
    reader.join()
    assert done.messages == 1500 and done.memory_entries == 2200 and done.queue_items == 300
    assert set(seen) == {(1500, 2200, 1500, 300), (0, 0, 0, 0)}, set(seen)


def test_the_cache_of_another_process_drops_forgotten_vectors(client: pgmem.Client, dsn: str) -> None:
    client.vectors.enable("a")
    client.messages.add_many("a", [Message(id=f"m{i}", content=f"apple pie recipe number {i}") for i in range(20)])
    client.vectors.flush()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.forget_workers", dsn],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert worker.stdin is not None and worker.stdout is not None
    try:
        first = json.loads(worker.stdout.readline())
        assert {"m3", "m4"} <= set(first["hits"])
        done = client.retention.forget(["m3", "m4"])
        worker.stdin.write(json.dumps({"rev": client.vectors.head_rev("a")}) + "\n")
        worker.stdin.flush()
        second = json.loads(worker.stdout.readline())
        assert second["caught_up"] and second["served_from_cache"]
        assert done.embeddings == 2
        assert not {"m3", "m4"} & set(second["hits"]) and len(second["hits"]) == 18
    finally:
        worker.stdin.close()
        worker.wait(timeout=30)
        worker.stdout.close()


def test_a_file_stores_forgotten_chunks_are_read_again_from_the_file_or_dropped_with_it(
    client: pgmem.Client, tmp_path: Path
) -> None:
    """A file store's index listed the forgotten chunks with the file's hash, so its refresh called the file
    unchanged and served it without them for good. Now the file is re-indexed while it exists (forgetting
    cannot reach the file itself), and its remaining chunks go when it is deleted."""
    from pgmem.integrations.chatdev import FileMemoryStore, build_stores

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "alice.md").write_text("Alice's phone number is 555-0100.")
    (docs / "bob.md").write_text("Bob prefers tea. " * 60)  # more than one chunk
    config = [{"name": "docs", "type": "file", "config": {"file_sources": [{"path": str(docs)}]}}]
    (store,) = build_stores(config, client=client).values()
    assert isinstance(store, FileMemoryStore)
    chunks = {Path(i.metadata["file_path"]).name: i for i in store.items()}
    bob = [i for i in store.items() if i.metadata["file_name"] == "bob.md"]
    assert len(bob) >= 2
    done = client.retention.forget([chunks["alice.md"].id, bob[0].id])
    assert done.store_files == 2 and done.messages == 2
    assert store.files() == {str(docs / "alice.md"): 0, str(docs / "bob.md"): len(bob) - 1}
    (docs / "alice.md").write_text("Alice moved; no number on file.")
    (docs / "bob.md").unlink()
    report = store.refresh()
    assert report.updated == [str(docs / "alice.md")] and report.removed == [str(docs / "bob.md")]
    assert [i.content_summary for i in store.items()] == ["Alice moved; no number on file."]
    assert store.count_memories() == 1
    # Unchanged on disk, a file whose chunk was forgotten is indexed again from the file.
    (docs / "carol.md").write_text("Carol's note.")
    store.refresh()
    (carol,) = [i for i in store.items() if i.metadata["file_name"] == "carol.md"]
    assert client.retention.forget([carol.id]).store_files == 1
    assert store.refresh().updated == [str(docs / "carol.md")]
    assert sorted(i.content_summary for i in store.items()) == ["Alice moved; no number on file.", "Carol's note."]
