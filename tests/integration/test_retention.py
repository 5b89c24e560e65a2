"""Retention (``client.retention``): each purge removes exactly the old rows of its own namespace, bad input
deletes nothing, and the sweep keeps the vector log bounded without a round trip when it is not due.

Rows are made old by moving their timestamps back with plain SQL (instead of waiting an hour).
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

import pgmem
import pgmem.admin
import pgmem.errors
from pgmem import Message
from pgmem.cache import VectorCache
from pgmem.summarizer import CompressionPolicy, OfflineSummarizer
from tests.conftest import table_counts
from tests.integration.cache_workers import same

NAMESPACES = ("test", "other")


def _sql(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def _count(dsn: str, table: str, namespace: str) -> int:
    return int(_sql(dsn, f"SELECT count(*) FROM pgmem.{table} WHERE namespace = %s", (namespace,))[0][0])


def _age(dsn: str, table: str, column: str, where: str, params: Any = ()) -> None:
    """Move the rows matching ``where`` two hours back."""
    _sql(dsn, f"UPDATE pgmem.{table} SET {column} = {column} - interval '2 hours' WHERE {where}", params)


def _vectors(client: pgmem.Client, memory: str, n: int, start: int = 0) -> None:
    batch = [Message(id=f"{memory}-{i}", content=f"item {i} colour {i % 11} shape {i % 7}") for i in range(start, n)]
    client.messages.add_many(memory, batch)
    client.vectors.flush()


def _log(dsn: str, namespace: str, memory: str = "m") -> list[int]:
    rows = _sql(
        dsn, "SELECT rev FROM pgmem.vector_log WHERE namespace = %s AND memory = %s ORDER BY rev", (namespace, memory)
    )
    return [int(r[0]) for r in rows]


def test_queue_archive_purge_takes_the_old_items_of_its_namespace_and_queue(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="test") as client:
        for ns in NAMESPACES:
            q = client.with_namespace(ns).queues
            for queue, n in (("a", 3), ("b", 2)):
                q.push_many(queue, [Message(content=f"{ns} {queue} {i}") for i in range(n)])
                q.ack(q.claim(queue, n))
            q.push("a", Message(content=f"{ns} a late"))
            q.ack(q.claim("a"))  # a second, young archive row of queue a
            _age(dsn, "queue_archive_batches", "acked_at", "namespace = %s AND cardinality(message_ids) > 1", (ns,))
        retention = client.retention
        assert retention.purge_queue_archive(3600, queue="b") == 2
        assert retention.purge_queue_archive(timedelta(hours=1)) == 3  # queue a's old row; b's is gone
        assert retention.purge_queue_archive(3600) == 0
        assert _count(dsn, "queue_archive_batches", "test") == 1  # the young one
        # A cutoff may be a moment; the young row goes with one after it.
        assert retention.purge_queue_archive(datetime.now(UTC) + timedelta(minutes=1)) == 1
        assert _count(dsn, "messages", "test") == 0  # nothing else referred to them
        assert _count(dsn, "queue_archive_batches", "other") == 3
        assert _count(dsn, "messages", "other") == 6


def test_expired_brain_purge_is_scoped_to_its_namespace(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="test") as client:
        for ns in NAMESPACES:
            brains = client.with_namespace(ns).brains
            for key in ("chat:1", "chat:2", "chat:3"):
                brains.dump(key, history=[Message(content=f"{ns} {key}")], ttl=3600)
            brains.dump("chat:forever", history=[Message(content="kept")], ttl=None)
            _sql(
                dsn,
                "UPDATE pgmem.brain_memories SET expires_at = now() - interval '1 second' "
                "WHERE namespace = %s AND redis_key <> 'chat:3' AND expires_at IS NOT NULL",
                (ns,),
            )
        assert client.retention.purge_expired_brains(batch_size=1) == 2  # two batches of one, then an empty one
        assert client.retention.purge_expired_brains() == 0
        left = _sql(dsn, "SELECT redis_key FROM pgmem.brain_memories WHERE namespace = 'test' ORDER BY 1")
        assert [r[0] for r in left] == ["chat:3", "chat:forever"]
        assert _count(dsn, "messages", "test") == 2  # the purged brains' history went with them
        assert _count(dsn, "brain_memories", "other") == 4 and _count(dsn, "messages", "other") == 4
        # The old method delegates to retention (same namespace scope).
        assert client.with_namespace("other").brains.purge_expired() == 2


def test_vector_log_purge_removes_a_prefix_of_each_memory_and_keeps_its_head(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="test") as client:
        # The embedding worker runs the client's sweep when due (the first time at once): take that first
        # sweep now, while nothing is old, so the purges below are the test's own.
        assert client.retention.sweep_if_due() is not None
        for ns in NAMESPACES:
            scoped = client.with_namespace(ns)
            scoped.vectors.enable("m")
            _vectors(scoped, "m", 5)
        assert _log(dsn, "test") == [1, 2, 3, 4, 5]
        _age(dsn, "vector_log", "logged_at", "true")  # every namespace's rows are old
        _vectors(client, "m", 7, start=5)  # revisions 6 and 7, young
        retention = client.retention
        assert retention.purge_vector_log(3600) == 5
        assert _log(dsn, "test") == [6, 7]
        assert retention.purge_vector_log(3600) == 0
        # Everything old: the newest revision stays (a cache behind it sees the purge by the gap).
        assert retention.purge_vector_log(0) == 1
        assert _log(dsn, "test") == [7]
        # A revision logged after the cutoff keeps every later one, even an older-stamped one (a long
        # transaction logs the time it began).
        _vectors(client, "m", 10, start=7)
        _age(dsn, "vector_log", "logged_at", "namespace = 'test' AND rev <> 8")
        assert retention.purge_vector_log(3600) == 1
        assert _log(dsn, "test") == [8, 9, 10]
        assert _log(dsn, "other") == [1, 2, 3, 4, 5]  # untouched


def test_retrieval_log_purge_is_scoped_to_its_namespace(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="test", retrieval_log=True) as client:
        for ns in NAMESPACES:
            scoped = client.with_namespace(ns)
            scoped.vectors.enable("m")
            _vectors(scoped, "m", 3)
            for i in range(3):
                scoped.vectors.search(f"item {i}", memory="m", k=2, label=f"q{i}")
        _age(dsn, "retrieval_log", "logged_at", "label <> 'q2'")
        assert client.retention.purge_retrieval_log(3600) == 2
        assert client.retention.purge_retrieval_log(3600) == 0
        assert [r[0] for r in _sql(dsn, "SELECT label FROM pgmem.retrieval_log WHERE namespace = 'test'")] == ["q2"]
        assert _count(dsn, "retrieval_log", "other") == 3


def test_trim_by_count_and_age(client: pgmem.Client, dsn: str) -> None:
    client.messages.add_many("m", [Message(content=str(i)) for i in range(6)])
    client.with_namespace("other").messages.add_many("m", [Message(content=str(i)) for i in range(6)])
    assert client.retention.trim("m", 4) == 2
    assert [m.content for m in client.messages.last("m")] == ["2", "3", "4", "5"]
    _age(dsn, "memory_entries", "added_at", "namespace = 'test' AND seq IN (SELECT min(seq) FROM pgmem.memory_entries)")
    assert client.retention.trim("m", older_than=3600) == 1
    assert client.retention.trim("m", 10, older_than=3600) == 0
    assert client.retention.trim("m", 0) == 3
    assert client.messages.count("m") == 0 and _count(dsn, "messages", "test") == 0
    assert client.with_namespace("other").messages.count("m") == 6


@pytest.mark.parametrize(
    "bad",
    [-1, -0.5, math.nan, math.inf, True, "3600", None, datetime(2026, 1, 1), timedelta(seconds=-1), 1e12],
    ids=repr,
)
def test_bad_cutoffs_raise_invalid_input_and_delete_nothing(client: pgmem.Client, dsn: str, bad: Any) -> None:
    client.vectors.enable("m")
    _vectors(client, "m", 3)
    q = client.queues
    q.push("a", Message(content="x"))
    q.ack(q.claim("a"))
    _age(dsn, "vector_log", "logged_at", "true")
    _age(dsn, "queue_archive_batches", "acked_at", "true")
    before = table_counts(dsn)
    retention = client.retention
    for purge in (
        lambda: retention.purge_queue_archive(bad),
        lambda: retention.purge_vector_log(bad),
        lambda: retention.purge_retrieval_log(bad),
        lambda: q.purge_archive(bad),
    ):
        with pytest.raises(pgmem.InvalidInput):
            purge()
    if bad is not None:
        with pytest.raises(pgmem.InvalidInput):
            retention.trim("m", 1, older_than=bad)
    assert table_counts(dsn) == before


def test_other_bad_input_deletes_nothing(client: pgmem.Client, dsn: str) -> None:
    client.messages.add_many("m", [Message(content=str(i)) for i in range(3)])
    before = table_counts(dsn)
    retention = client.retention
    with pytest.raises(pgmem.InvalidInput, match="keep_last, older_than or both"):
        retention.trim("m")
    for keep in (-1, 1.5, True, "2", 2**63):
        with pytest.raises(pgmem.InvalidInput):
            retention.trim("m", keep)
    with pytest.raises(pgmem.InvalidInput):
        retention.trim("bad key!", 1)
    with pytest.raises(pgmem.InvalidInput):
        retention.purge_queue_archive(0, queue="no spaces")
    for batch in (0, -1, 100_001, True):
        with pytest.raises(pgmem.InvalidInput):
            retention.purge_expired_brains(batch_size=batch)
    assert table_counts(dsn) == before


def test_sweep_if_due_sweeps_once_per_interval_without_a_round_trip_in_between(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGMEM_SWEEP_INTERVAL", "3600")
    monkeypatch.setenv("PGMEM_VECTOR_LOG_RETENTION", "60")
    with psycopg.connect(dsn, autocommit=True) as conn:
        client = pgmem.connect(conn, namespace="test")  # on one connection: closing it cuts the client off
        client.vectors.enable("m")
        _vectors(client, "m", 4)
        _age(dsn, "vector_log", "logged_at", "true")
        assert client.retention.due()
        assert _swept(client.retention.sweep_if_due()) == (3, None)
        assert not client.retention.due()
        _vectors(client, "m", 8, start=4)
        _age(dsn, "vector_log", "logged_at", "true")
        assert client.retention.sweep_if_due() is None  # not due: the old rows stay
        assert _log(dsn, "test") == [4, 5, 6, 7, 8]
        # sweep() itself runs whenever asked.
        assert _swept(client.retention.sweep()) == (4, None)
    # The connection is closed: a round trip would raise ClientClosed. Not due, none is made.
    assert client.retention.sweep_if_due() is None
    with pytest.raises(pgmem.ClientClosed):
        client.retention.sweep()


def _swept(swept: Any) -> tuple[int, int | None]:
    assert swept is not None
    return swept.vector_log, swept.retrieval_log


def test_sweep_purges_the_retrieval_log_only_when_its_retention_is_set(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGMEM_SWEEP_INTERVAL", "0")
    with pgmem.connect(dsn, namespace="test", retrieval_log=True) as client:
        client.vectors.enable("m")
        _vectors(client, "m", 2)
        client.vectors.search("item 1", memory="m", k=1)
        _age(dsn, "retrieval_log", "logged_at", "true")
        swept = client.retention.sweep_if_due()
        assert swept is not None and swept.retrieval_log is None
        assert _count(dsn, "retrieval_log", "test") == 1
        monkeypatch.setenv("PGMEM_RETRIEVAL_LOG_RETENTION", "3600")
        swept = client.retention.sweep_if_due()  # interval 0: due at every call
        assert swept is not None and swept.retrieval_log == 1
        assert _count(dsn, "retrieval_log", "test") == 0


def test_vector_log_stays_bounded_under_repeated_writes_once_sweeps_run(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGMEM_SWEEP_INTERVAL", "0")
    monkeypatch.setenv("PGMEM_VECTOR_LOG_RETENTION", "0")
    with pgmem.connect(dsn, namespace="test") as client:
        for memory in ("a", "b"):
            client.vectors.enable(memory)
        sizes = []
        for i in range(30):
            memory = "ab"[i % 2]
            client.messages.add(memory, Message(content=f"note {i}"))
            client.vectors.flush()
            client.retention.sweep_if_due()
            sizes.append(_count(dsn, "vector_log", "test"))
        # Each sweep leaves one revision per memory (its newest): the log does not grow with the writes.
        assert max(sizes[1:]) == 2, sizes
        assert client.vectors.head_rev("a") == 15


@pytest.mark.parametrize("mode", ["default", "strict"])
def test_a_cache_behind_a_purged_log_reloads_and_answers_exactly(client: pgmem.Client, mode: str) -> None:
    client.vectors.enable("m")
    _vectors(client, "m", 20)
    with VectorCache(client, mode=mode) as cache:  # type: ignore[arg-type]
        query = np.asarray(client.embedder.embed(["item 2 colour 2 shape 2"])[0])
        cache.search_vectors("m", query, 3)
        loads = cache.stats.loads
        _vectors(client, "m", 40, start=20)
        assert client.retention.purge_vector_log(0) == 39  # the cache's revision (20) is gone from the log
        got = cache.search_vectors("m", query, 10)[0]
        exact = [(h.message.id, h.score) for h in client.search(vector=query, memory="m", k=10, mode="exact")]
        assert same(got, exact) and len(got) == 10
        assert cache.stats.loads == loads  # caught up by a reload inside the entry, not a new entry


async def test_the_async_flavour_sweeps_too(aclient: pgmem.AsyncClient, dsn: str) -> None:
    await aclient.vectors.enable("m")
    await aclient.messages.add_many("m", [Message(content=f"item {i}") for i in range(3)])
    await aclient.vectors.flush()  # the embedding worker took the client's first sweep (nothing was old)
    _age(dsn, "vector_log", "logged_at", "true")
    assert await aclient.retention.sweep_if_due() is None  # not due again for PGMEM_SWEEP_INTERVAL
    swept = await aclient.retention.sweep()
    assert swept.vector_log == 2
    assert await aclient.retention.trim("m", 1) == 2


def test_the_embedding_worker_keeps_the_vector_log_bounded(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody calls a purge: the background embedder's sweep (every run here, everything counted old) keeps
    each memory's log at its newest revisions while writes go on."""
    monkeypatch.setenv("PGMEM_SWEEP_INTERVAL", "0")
    monkeypatch.setenv("PGMEM_VECTOR_LOG_RETENTION", "0")
    with pgmem.connect(dsn, namespace="test") as client:
        client.vectors.enable("m")
        for round_ in range(5):
            client.messages.add_many("m", [Message(content=f"round {round_} item {i}") for i in range(10)])
            client.vectors.wait()  # the worker embedded the batch, then swept
        assert client.vectors.head_rev("m") == 50
        assert _log(dsn, "test") == [50]  # each run's sweep left only the memory's newest revision


# -- retention policies (client.retention.set_policy / run) -------------------------------------------------


def test_policies_are_set_listed_replaced_and_removed_per_namespace(client: pgmem.Client, dsn: str) -> None:
    retention = client.retention
    p = retention.set_policy("messages", max_age=timedelta(days=30))
    assert (p.target, p.scope, p.max_age, p.max_count) == ("messages", "*", timedelta(days=30), None)
    retention.set_policy("summaries", scope="role:Alice", max_count=100)
    retention.set_policy("messages", max_age=3600, max_count=5)  # replaces the first one
    listed = [(p.target, p.scope, p.max_age, p.max_count) for p in retention.policies()]
    assert listed == [("messages", "*", timedelta(hours=1), 5), ("summaries", "role:Alice", None, 100)]
    assert [p.target for p in retention.policies("summaries")] == ["summaries"]
    assert client.with_namespace("other").retention.policies() == []
    assert retention.remove_policy("summaries", scope="role:Alice") is True
    assert retention.remove_policy("summaries", scope="role:Alice") is False
    assert _count(dsn, "retention_policies", "test") == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"target": "mesages", "max_age": 1},
        {"target": "messages"},  # neither limit
        {"target": "messages", "max_count": -1},
        {"target": "messages", "max_count": 1.5},
        {"target": "messages", "max_count": True},
        {"target": "messages", "max_age": -5},
        {"target": "messages", "max_age": "7d"},
        {"target": "messages", "max_age": datetime(2026, 1, 1, tzinfo=UTC)},
        {"target": "messages", "scope": "bad scope!", "max_age": 1},
        {"target": "queue_history", "scope": "", "max_age": 1},
    ],
    ids=repr,
)
def test_bad_policies_raise_invalid_input_and_write_nothing(client: pgmem.Client, dsn: str, kwargs: Any) -> None:
    with pytest.raises(pgmem.InvalidInput):
        client.retention.set_policy(**kwargs)
    assert _count(dsn, "retention_policies", "test") == 0
    for bad in ({"target": "nope"}, {"batch_size": 0}, {"batch_size": 10**6}):
        with pytest.raises(pgmem.InvalidInput):
            client.retention.run(**bad)


def _ids(client: pgmem.Client, memory: str) -> list[str]:
    return [m.id for m in client.messages.last(memory)]


def test_namespace_messages_policy_by_age_and_count_forgets_everywhere_but_pending_queue_items(
    client: pgmem.Client, dsn: str
) -> None:
    client.vectors.enable("a")
    client.messages.add_many("a", [Message(id=f"m{i}", content=f"note {i}") for i in range(10)])
    client.messages.add_many("b", [Message(id=f"m{i}", content=f"note {i}") for i in range(3)])
    client.queues.push("jobs", Message(id="m1", content="note 1"))  # still to deliver: kept
    client.vectors.flush()
    other = client.with_namespace("other")
    other.messages.add_many("a", [Message(id=f"m{i}", content=f"note {i}") for i in range(10)])
    _age(dsn, "messages", "created_at", "id IN ('m0', 'm1', 'm2', 'm3')")  # both namespaces
    retention = client.retention
    retention.set_policy("messages", max_age=3600)
    assert retention.run() == {
        "messages": 3,
        "queue_history": 0,
        "summaries": 0,
        "retrieval_log": 0,
        "vector_log": 0,
        "item_history": 0,
    }
    assert _ids(client, "a") == ["m1", *[f"m{i}" for i in range(4, 10)]]
    assert _ids(client, "b") == ["m1"]
    assert _sql(dsn, "SELECT count(*) FROM pgmem.embeddings WHERE namespace = 'test'")[0][0] == 7
    # by count: the newest 4 of the namespace stay (m1 again kept by its queue item)
    retention.set_policy("messages", max_count=4)
    assert retention.run(target="messages", batch_size=2) == {"messages": 2}
    assert _ids(client, "a") == ["m1", "m6", "m7", "m8", "m9"]
    assert other.messages.count("a") == 10
    (scope, counts), *_ = _sql(dsn, "SELECT scope, counts FROM pgmem.forget_audit WHERE namespace = 'test' ORDER BY id")
    assert scope["kind"] == "policy" and counts["messages"] == 3


def test_a_memory_messages_policy_keeps_messages_other_memories_share(client: pgmem.Client, dsn: str) -> None:
    client.messages.add_many("a", [Message(id=f"m{i}", content=f"note {i}") for i in range(6)])
    client.messages.add_many("b", [Message(id="m0", content="note 0")])  # shared
    retention = client.retention
    retention.set_policy("messages", scope="a", max_count=2)
    assert retention.run()["messages"] == 4
    assert _ids(client, "a") == ["m4", "m5"]
    assert _ids(client, "b") == ["m0"]  # the shared message stays, referenced by b
    assert _count(dsn, "messages", "test") == 3  # m1-m3 had no other reference: gone
    # by age (added_at)
    _age(dsn, "memory_entries", "added_at", "memory = 'a' AND message_id = 'm4'")
    retention.set_policy("messages", scope="a", max_age=3600)
    assert retention.run()["messages"] == 1
    assert _ids(client, "a") == ["m5"]


def test_queue_history_policy_by_age_and_count(client: pgmem.Client, dsn: str) -> None:
    q = client.queues
    for queue in ("x", "y"):
        for i in range(4):
            q.push(queue, Message(content=f"{queue} {i}"))
            q.ack(q.claim(queue))  # one archive row per item
    _age(
        dsn,
        "queue_archive_batches",
        "acked_at",
        "queue = 'x' AND batch IN (SELECT min(batch) FROM pgmem.queue_archive_batches WHERE queue = 'x')",
    )
    retention = client.retention
    retention.set_policy("queue_history", scope="x", max_age=3600)
    assert retention.run()["queue_history"] == 1
    retention.set_policy("queue_history", max_count=3)  # the namespace: the newest 3 items stay
    assert retention.run()["queue_history"] == 4
    left = _sql(dsn, "SELECT queue, count(*) FROM pgmem.queue_archive WHERE namespace = 'test' GROUP BY 1 ORDER BY 1")
    assert left == [("y", 3)]
    assert _count(dsn, "messages", "test") == 3  # the archived items' messages went with them


def test_summaries_retrieval_log_and_vector_log_policies(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="test", retrieval_log=True) as client:
        client.vectors.enable("m")
        _vectors(client, "m", 12)
        for i in range(6):
            client.search(f"item {i}", memory="m", k=2)
        client.summaries.compress("m", OfflineSummarizer(), CompressionPolicy(chunk=3, max_level=1))
        assert len(client.summaries.list("m")) == 4
        retention = client.retention
        # summaries: by count (newest 3), then by age
        retention.set_policy("summaries", scope="m", max_count=3)
        assert retention.run()["summaries"] == 1
        _age(dsn, "summaries", "created_at", "id IN (SELECT min(id) FROM pgmem.summaries)")
        retention.set_policy("summaries", scope="m", max_age=3600, max_count=3)
        assert retention.run()["summaries"] == 1
        assert len(client.summaries.list("m")) == 2
        # retrieval log: by age, then by count over the namespace
        _age(dsn, "retrieval_log", "logged_at", "id IN (SELECT min(id) FROM pgmem.retrieval_log)")
        retention.set_policy("retrieval_log", max_age=3600)
        assert retention.run(target="retrieval_log") == {"retrieval_log": 1}
        retention.set_policy("retrieval_log", max_count=2)
        assert retention.run(target="retrieval_log") == {"retrieval_log": 3}
        assert _count(dsn, "retrieval_log", "test") == 2
        # vector log: by count per memory (newest 5 revisions), then by age (the head always stays)
        assert _log(dsn, "test") == list(range(1, 13))
        retention.set_policy("vector_log", max_count=5)
        assert retention.run(target="vector_log", batch_size=3) == {"vector_log": 7}
        assert _log(dsn, "test") == list(range(8, 13))
        _age(dsn, "vector_log", "logged_at", "true")
        retention.set_policy("vector_log", max_age=3600)
        assert retention.run(target="vector_log") == {"vector_log": 4}
        assert _log(dsn, "test") == [12]


def test_a_run_in_many_batches_lets_a_concurrent_writer_progress(client: pgmem.Client, dsn: str) -> None:
    """Each batch is its own short transaction: a writer adding to the very memory being purged (whose
    vector-log row lock every batch takes) gets through between batches instead of waiting for the run."""
    client.vectors.enable("a")
    client.messages.add_many("a", [Message(id=f"old{i}", content=f"old note {i}") for i in range(3000)])
    client.vectors.flush()
    _age(dsn, "memory_entries", "added_at", "memory = 'a'")
    client.retention.set_policy("messages", scope="a", max_age=3600)
    running = threading.Event()
    finished = threading.Event()
    during: list[int] = []

    def write() -> None:
        with pgmem.connect(dsn, namespace="test", max_size=1) as writer:
            running.wait(10)
            i = 0
            while not finished.is_set():
                writer.messages.add("a", Message(id=f"new{i}", content=f"new note {i}"))
                writer.vectors.flush()  # its vector joins the memory's log: the lock each batch takes
                during.append(i)
                i += 1

    thread = threading.Thread(target=write)
    thread.start()
    running.set()
    removed = client.retention.run(batch_size=50)  # 60 batches
    finished.set()
    thread.join()
    assert removed["messages"] == 3000
    assert len(during) >= 3, during  # the writer got through while the run was going on
    assert _ids(client, "a") == [f"new{i}" for i in range(len(during))]


def test_cli_retention_run(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="alpha") as client:
        client.messages.add_many("a", [Message(content=f"n{i}") for i in range(5)])
        client.retention.set_policy("messages", scope="a", max_count=2)
        client.with_namespace("beta").messages.add_many("a", [Message(content=f"n{i}") for i in range(5)])
        client.with_namespace("beta").retention.set_policy("messages", scope="a", max_count=1)
    cli = [sys.executable, "-m", "pgmem.ops.cli", "retention", "run", "--dsn", dsn]
    out = subprocess.run([*cli, "-n", "alpha"], capture_output=True, text=True, check=True).stdout
    assert "removed 3 rows in 1 namespace" in out
    out = subprocess.run([*cli, "--all-namespaces"], capture_output=True, text=True, check=True).stdout
    assert "removed 4 rows in 2 namespaces" in out  # alpha had nothing left to remove
    bad = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "--all-namespaces" in bad.stderr


# -- cross-tenant maintenance is an administrator's operation ------------------------------------------------


def test_a_scoped_purge_of_expired_brains_never_touches_another_tenant(client: pgmem.Client, dsn: str) -> None:
    """The issue's report: client.with_namespace("tenantC").brains.purge_expired() deleted tenant A's brain."""
    client.with_namespace("tenantA").brains.dump("chat:1", history=[Message(content="a's talk")], ttl=1)
    _sql(dsn, "UPDATE pgmem.brain_memories SET expires_at = now() - interval '1 hour'")
    assert client.with_namespace("tenantC").brains.purge_expired() == 0
    assert client.with_namespace("tenantC").retention.purge_expired_brains() == 0
    assert _count(dsn, "brain_memories", "tenantA") == 1
    # The administrator's purge of every namespace takes it, as the tables' owner.
    with psycopg.connect(dsn, autocommit=True) as owner:
        assert pgmem.admin.purge_expired(owner) == {"tenantA": 1}
    assert _count(dsn, "brain_memories", "tenantA") == 0


def test_cross_tenant_maintenance_refuses_a_role_that_does_not_own_the_tables(client: pgmem.Client, dsn: str) -> None:
    client.with_namespace("tenantA").brains.dump("chat:1", history=[Message(content="a's talk")], ttl=1)
    client.with_namespace("tenantA").retention.set_policy("messages", max_count=0)
    _sql(dsn, "UPDATE pgmem.brain_memories SET expires_at = now() - interval '1 hour'")
    before = table_counts(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET ROLE pgmem_app")  # the application role every client acts as
        for admin_call in (
            pgmem.admin.purge_expired,
            pgmem.admin.run_retention,
            pgmem.admin.namespaces,
            pgmem.admin.namespaces_with_pending,
        ):
            with pytest.raises(pgmem.errors.PermissionDenied):
                admin_call(conn)
    assert table_counts(dsn) == before


def test_the_embedding_backfill_of_every_namespace_is_an_administrators_listing(dsn: str) -> None:
    """A client saw every tenant's name through ``vectors.namespaces_with_pending()``; the listing is now
    ``pgmem.admin``'s (the tables' owner), and ``pgmem embed`` without ``--namespace`` goes through it."""
    with psycopg.connect(dsn, autocommit=True) as conn:  # a client on a caller's connection embeds nothing
        for ns in ("tenantA", "tenantB"):
            tenant = pgmem.Client(namespace=ns, connection=conn)
            tenant.vectors.enable("notes")
            tenant.messages.add_many("notes", [Message(content=f"{ns} note {i}") for i in range(3)])
        assert pgmem.admin.namespaces_with_pending(conn) == ["tenantA", "tenantB"]
    with pgmem.connect(dsn, namespace="tenantB") as b:
        assert not hasattr(b.vectors, "namespaces_with_pending")
        assert b.vectors.pending() == {b.embedder.model: 3}  # its own queue only
    cli = [sys.executable, "-m", "pgmem.ops.cli", "embed", "--dsn", dsn]
    out = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
    assert "6 embedded" in out and "0 still queued" in out, out
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert pgmem.admin.namespaces_with_pending(conn) == []
    assert _sql(dsn, "SELECT namespace, count(*) FROM pgmem.embeddings GROUP BY 1 ORDER BY 1") == [
        ("tenantA", 3),
        ("tenantB", 3),
    ]


async def test_the_async_admin_twins(aclient: pgmem.AsyncClient, dsn: str) -> None:
    await aclient.with_namespace("tenantA").retention.set_policy("messages", scope="a", max_count=1)
    await aclient.with_namespace("tenantA").messages.add_many("a", [Message(content=f"n{i}") for i in range(3)])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as owner:
        removed = await pgmem.admin.aio.run_retention(owner)
    assert removed["tenantA"]["messages"] == 2
