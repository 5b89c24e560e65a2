"""Queues on the real Postgres: order, priority, delay, dedup, leases, retries, dead letters, archive,
NOTIFY wake-up, transactional enqueue, routing — and bad input."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import multiprocessing as mp
import pickle
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem.errors import LeaseLost
from pgmem.planning.queues import QueueItem
from tests.conftest import table_counts


def m(content: str, **fields: object) -> pgmem.Message:
    return pgmem.Message(content=content, **fields)  # type: ignore[arg-type]


def contents(items: list[QueueItem]) -> list[str]:
    return [i.message.content for i in items]


def test_fifo_within_priority_and_lower_priority_first(client: pgmem.Client) -> None:
    q = client.queues
    q.push("jobs", m("low-1"), priority=5)
    q.push("jobs", m("high-1"), priority=-1)
    q.push("jobs", m("low-2"), priority=5)
    q.push_many("jobs", [m("mid-1"), m("mid-2")], priority=0)
    q.push("jobs", m("high-2"), priority=-1)
    assert contents(q.peek("jobs")) == ["high-1", "high-2", "mid-1", "mid-2", "low-1", "low-2"]
    assert contents(q.claim("jobs", n=3)) == ["high-1", "high-2", "mid-1"]
    assert contents(q.claim("jobs", n=10)) == ["mid-2", "low-1", "low-2"]
    assert q.claim("jobs") == []


def test_claim_returns_message_attempts_and_lease(client: pgmem.Client) -> None:
    q = client.queues
    sent = m("payload", cause_by="WriteCode", metadata={"k": 1})
    q.push("jobs", sent)
    (item,) = q.claim("jobs", lease=30)
    assert item.message.id == sent.id and item.message.metadata == {"k": 1} and item.message.cause_by == "WriteCode"
    assert item.attempts == 1 and item.queue == "jobs" and item.lease_until is not None
    assert 25 < (item.lease_until - item.enqueued_at).total_seconds() < 35


def test_delay(client: pgmem.Client) -> None:
    q = client.queues
    q.push("later", m("delayed"), delay=0.4)
    assert q.claim("later") == [] and q.depth("later") == {"ready": 1, "claimable": 0, "dead": 0}
    time.sleep(0.5)
    assert contents(q.claim("later")) == ["delayed"]


def test_dedup_key(client: pgmem.Client) -> None:
    q = client.queues
    first = q.push("jobs", m("a"), dedup_key="build-1")
    again = q.push("jobs", m("b"), dedup_key="build-1")
    assert first.created and first.id is not None
    assert again == (None, False)
    assert q.push_many("jobs", [m("c"), m("d")], dedup_keys=["build-1", "build-2"]) != []
    assert contents(q.peek("jobs")) == ["a", "d"]
    # Claimed but not yet acknowledged: still pending, the key still deduplicates.
    items = q.claim("jobs", n=2)
    assert q.push("jobs", m("e"), dedup_key="build-1").created is False
    q.ack(items)
    assert q.push("jobs", m("f"), dedup_key="build-1").created is True


def test_lease_expiry_and_fenced_ack(client: pgmem.Client) -> None:
    q = client.queues
    q.push("jobs", m("work"))
    (first,) = q.claim("jobs", lease=0.3)
    assert q.claim("jobs") == []  # leased
    time.sleep(0.4)
    (second,) = q.claim("jobs", lease=30)  # the first worker "died": the item came back
    assert second.id == first.id and second.attempts == 2
    with pytest.raises(LeaseLost):
        q.ack(first)
    with pytest.raises(LeaseLost):
        q.nack(first)
    with pytest.raises(LeaseLost):
        q.extend(first, 10)
    q.ack(second)
    with pytest.raises(LeaseLost):
        q.ack(second)  # no item is acknowledged twice
    assert q.depth("jobs")["ready"] == 0


def test_claim_acknowledging_the_previous_batch(client: pgmem.Client, dsn: str) -> None:
    q = client.queues
    q.push_many("jobs", [m(f"j{i}") for i in range(7)])
    first = q.claim("jobs", n=3)
    second = q.claim("jobs", n=3, ack=first)  # one statement: ack first, claim the next three
    assert contents(second) == ["j3", "j4", "j5"]
    assert q.depth("jobs") == {"ready": 4, "claimable": 1, "dead": 0}
    last = q.claim("jobs", n=3, ack=second + second[:1])  # listed twice: acknowledged once
    assert contents(last) == ["j6"]
    assert q.claim("jobs", n=3, ack=last) == [] and q.depth("jobs")["ready"] == 0
    with psycopg.connect(dsn) as conn:
        archived = conn.execute("SELECT count(*), min(attempts), max(attempts) FROM pgmem.queue_archive").fetchone()
    assert archived == (7, 1, 1)


def test_claim_with_a_lost_ack_claims_nothing(client: pgmem.Client) -> None:
    q = client.queues
    q.push_many("jobs", [m("a"), m("b"), m("c")])
    (stale,) = q.claim("jobs", lease=0.2)
    (held,) = q.claim("jobs", lease=30)
    time.sleep(0.3)
    (again,) = q.claim("jobs", lease=30)  # took "a" back from the stale worker
    assert again.id == stale.id
    with pytest.raises(LeaseLost, match=str(stale.id)):
        q.claim("jobs", n=5, ack=[stale, held])
    # "b" was acknowledged all the same; "c" was not claimed, so the caller holds nothing it does not know of.
    assert q.depth("jobs") == {"ready": 2, "claimable": 1, "dead": 0}
    assert contents(q.claim("jobs", n=5, ack=[again])) == ["c"]


@pytest.mark.parametrize("autocommit", [False, True])
def test_a_lost_ack_leaves_the_callers_transaction_usable(client: pgmem.Client, dsn: str, autocommit: bool) -> None:
    """claim(ack=) rolls its statement back when a lease was lost; in a caller's transaction only its
    savepoint is rolled back, and what the caller did before and after commits."""
    q = client.queues
    q.push_many("jobs", [m("a"), m("b"), m("c")])
    (stale,) = q.claim("jobs", lease=0.2)
    (held,) = q.claim("jobs", lease=30)
    time.sleep(0.3)
    (again,) = q.claim("jobs", lease=30)
    with psycopg.connect(dsn, autocommit=autocommit) as conn:
        with conn.transaction() if autocommit else contextlib.nullcontext():
            q.push("other", m("before"), connection=conn)
            with pytest.raises(LeaseLost, match=str(stale.id)):
                q.claim("jobs", n=5, ack=[stale, held], connection=conn)
            q.push("other", m("after"), connection=conn)
        if not autocommit:
            conn.commit()
    assert contents(q.peek("other")) == ["before", "after"]
    assert q.depth("jobs") == {"ready": 2, "claimable": 1, "dead": 0}  # "b" acknowledged, "c" not claimed
    assert contents(q.claim("jobs", n=5, ack=[again])) == ["c"]


def test_claim_with_ack_claims_before_it_waits_on_an_acknowledgement(client: pgmem.Client, dsn: str) -> None:
    """The claim half of claim(ack=) reads the queue as the statement starts, before the acknowledgements
    (which may wait for a row lock): a claim on a stale snapshot locks rows other consumers took meanwhile,
    and their next acknowledgement then waits for it (sql/queues.sql, pre-baseline migration 0012)."""
    q = client.queues
    q.push_many("jobs", [m("a"), m("b"), m("c")])
    (a,) = q.claim("jobs")
    with psycopg.connect(dsn) as blocker, psycopg.connect(dsn, autocommit=True) as monitor:
        blocker.execute("SELECT 1 FROM pgmem.queue_items WHERE id = %s FOR UPDATE", (a.id,))
        with pgmem.connect(dsn, namespace=client.namespace, max_size=1) as other:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                acking = pool.submit(other.queues.claim, "jobs", 1, ack=[a])
                try:
                    assert _eventually(lambda: _waiting_on_a_lock(monitor)) and not acking.done()
                    assert contents(q.claim("jobs")) == ["c"]  # "b" was claimed before the wait began
                finally:
                    blocker.rollback()
                assert contents(acking.result(timeout=10)) == ["b"]
    assert q.depth("jobs")["ready"] == 2


def test_claim_with_ack_runs_again_after_a_deadlock(client: pgmem.Client, dsn: str) -> None:
    """claim(ack=) holds its new claim while it waits for a row it acknowledges; a session holding that row
    which then waits for the new claim closes a cycle. Postgres aborts the claim's statement (its deadlock
    check runs first) and the client runs it again: the caller just gets its items."""
    q = client.queues
    q.push_many("jobs", [m("a"), m("b"), m("c")])
    (a,) = q.claim("jobs")
    b_id = a.id + 1
    with psycopg.connect(dsn) as other, psycopg.connect(dsn, autocommit=True) as monitor:
        try:
            other.execute("SET deadlock_timeout = '30s'")  # so that the claim's check (1 s) finds the cycle
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("setting deadlock_timeout needs a superuser")
        other.execute("SELECT 1 FROM pgmem.queue_items WHERE id = %s FOR UPDATE", (a.id,))
        deadlocks = _deadlocks(monitor)
        with pgmem.connect(dsn, namespace=client.namespace, max_size=1) as consumer:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                acking = pool.submit(consumer.queues.claim, "jobs", 1, ack=[a])
                try:
                    assert _eventually(lambda: _waiting_on_a_lock(monitor))
                    # Waits for the claim of "b" until the claim's statement is aborted, then takes "b".
                    other.execute("SELECT 1 FROM pgmem.queue_items WHERE id = %s FOR UPDATE", (b_id,))
                finally:
                    other.rollback()
                # Run again: "c", or "b" if the retry took it before this session's lock did.
                assert contents(acking.result(timeout=10)) in (["b"], ["c"])
        # The path under test was taken (a backend reports its statistics within a few seconds).
        assert _eventually(lambda: _deadlocks(monitor) > deadlocks, seconds=15)
    assert q.depth("jobs") == {"ready": 2, "claimable": 1, "dead": 0}  # "a" acknowledged once


def _eventually(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Poll ``check`` until it holds (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _deadlocks(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return int(row[0]) if row else 0


def _waiting_on_a_lock(conn: psycopg.Connection) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    ).fetchone()
    return row is not None and row[0] > 0


def test_claim_never_takes_back_what_it_acknowledges(client: pgmem.Client) -> None:
    q = client.queues
    q.push_many("jobs", [m("a"), m("b"), m("c")])
    expired = q.claim("jobs", n=2, lease=0.1)
    time.sleep(0.2)  # their leases ran out: claimable again, yet still acknowledgeable (nobody took them)
    assert contents(q.claim("jobs", n=10, ack=expired)) == ["c"]
    assert q.depth("jobs")["ready"] == 1


def test_claims_and_acks_use_one_plan_per_prepared_statement(client: pgmem.Client, dsn: str) -> None:
    """Postgres keeps a generic plan for the claiming and acknowledging statements instead of planning each
    call: the LIMIT is a literal, and the acknowledged arrays are costed as one row (sql/queues.sql). On a
    queue of thousands of items, claim(ack=) of one item was planned anew every time (0 generic plans)."""
    q = client.queues
    q.push_many("jobs", [m(f"j{i}") for i in range(3000)])
    with psycopg.connect(dsn, autocommit=True) as conn:  # psycopg prepares after 5 runs, Postgres decides after 5 more
        conn.execute("ANALYZE pgmem.queue_items")
        for n in (1, 2):
            items = q.claim("jobs", n=n, connection=conn)
            for _ in range(15):
                items = q.claim("jobs", n=n, ack=items, connection=conn)
            q.ack(items, connection=conn)
        for _ in range(15):
            q.ack(q.claim("jobs", n=1, connection=conn), connection=conn)
        plans = conn.execute(
            "SELECT generic_plans, custom_plans, statement LIKE '%%DELETE%%' FROM pg_prepared_statements"
            " WHERE statement LIKE '%%SKIP LOCKED%%' OR statement LIKE '%%name: ack%%'"
            "    OR statement LIKE '%%Move acknowledged items%%'"
        ).fetchall()
    assert len(plans) == 4, plans  # claim(ack=) at n=1 and n=2, claim at n=1, ack
    assert all(generic > 0 for generic, _, _ in plans), plans


def test_claims_find_their_messages_through_the_hash_index(client: pgmem.Client, dsn: str) -> None:
    """Each claimed item's message is looked up by id through messages_id_hash_idx (pre-baseline migration 0015), not by
    a descent of messages_pkey: at batch 50 those descents were a fifth of a consumer backend's CPU. (Under
    about 5,000 messages the planner reads them all in one sequential scan instead, which is cheaper.)"""
    q = client.queues
    for start in range(0, 12_000, 4000):
        q.push_many("jobs", [m(f"j{i}") for i in range(start, start + 4000)])

    def scans(conn: psycopg.Connection[Any]) -> dict[str, int]:
        rows = conn.execute(
            "SELECT indexrelname, idx_scan FROM pg_stat_user_indexes WHERE relname = 'messages'"
            " AND indexrelname IN ('messages_pkey', 'messages_id_hash_idx')"
        ).fetchall()
        return dict(rows)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgmem.messages, pgmem.queue_items")
        conn.execute("SELECT pg_stat_force_next_flush()")
        before = scans(conn)
        items = q.claim("jobs", n=50, connection=conn)
        claimed = len(items)
        while claimed < 1000:  # past psycopg's 5 unprepared runs and Postgres's 5 custom plans
            items = q.claim("jobs", n=50, ack=items, connection=conn)
            claimed += len(items)
        q.ack(items, connection=conn)
        conn.execute("SELECT pg_stat_force_next_flush()")
        after = scans(conn)
    assert after["messages_id_hash_idx"] - before["messages_id_hash_idx"] >= claimed
    assert after["messages_pkey"] == before["messages_pkey"]


def test_claims_are_hot_updates(client: pgmem.Client, dsn: str) -> None:
    """Claiming every item of full pages rewrites each row once: the page's free space (fillfactor,
    pre-baseline migration 0008) must hold them all, so that no claim adds entries to the table's indexes."""
    q = client.queues
    q.push_many("jobs", [m("x" * 40 + str(i), metadata={"i": i}) for i in range(600)], max_attempts=3)
    with psycopg.connect(dsn) as conn:  # one transaction: its own counters, no stats delay
        pages = conn.execute("SELECT count(DISTINCT (ctid::text::point)[0]) FROM pgmem.queue_items").fetchone()
        assert pages is not None and pages[0] > 10  # several full pages
        items = q.claim("jobs", n=50, connection=conn)
        while items:
            items = q.claim("jobs", n=50, ack=items, connection=conn)
        updated, hot = conn.execute(
            "SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid) "
            "FROM pg_class c WHERE c.oid = 'pgmem.queue_items'::regclass"
        ).fetchone()  # type: ignore[misc]
        conn.commit()
    assert (updated, hot) == (600, 600)


def test_claimed_items_build_their_message_on_first_read(client: pgmem.Client) -> None:
    q = client.queues
    sent = m("rich", metadata={"k": [1, {"x": None}]}, tool_calls=[{"id": "t1"}], send_to={"b", "a"})
    q.push("jobs", sent)
    (peeked,) = q.peek("jobs")
    (item,) = q.claim("jobs")
    assert isinstance(item, QueueItem) and repr(item).startswith("QueueItem(id=")
    got = item.message
    assert got is item.message  # built once
    assert (got.content, got.metadata, got.tool_calls, got.send_to) == (
        "rich",
        sent.metadata,
        sent.tool_calls,
        {"a", "b"},
    )
    assert peeked.message == got and peeked != item  # attempts and lease differ
    plain = QueueItem(**{f.name: getattr(item, f.name) for f in dataclasses.fields(QueueItem)})
    assert plain == item and item == plain
    replaced = dataclasses.replace(item, priority=7)
    assert (replaced.priority, item.priority) == (7, 0)  # a new item; the claimed one is unchanged
    assert replaced == dataclasses.replace(plain, priority=7) and replaced.message is got
    assert hash(replaced) == hash(dataclasses.replace(plain, priority=7))
    copied = pickle.loads(pickle.dumps(item))
    assert type(copied) is QueueItem and copied == item
    assert dataclasses.asdict(item) == dataclasses.asdict(plain)
    for field, value in (("message", sent), ("id", 1), ("attempts", 9)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(item, field, value)
    assert (item.id, item.attempts) == (peeked.id, 1)
    q.ack(item)


def test_extend_keeps_the_lease(client: pgmem.Client) -> None:
    q = client.queues
    q.push("jobs", m("long work"))
    (item,) = q.claim("jobs", lease=0.4)
    for _ in range(3):
        time.sleep(0.2)
        item = q.extend(item, 0.4)
    assert q.claim("jobs") == []
    q.ack(item)


def test_nack_backoff_and_dead_letter(client: pgmem.Client, dsn: str) -> None:
    q = client.queues
    q.push("jobs", m("flaky"), max_attempts=3)
    (item,) = q.claim("jobs")
    assert q.nack(item, error="boom") == "ready"  # default backoff: 1 s after the first attempt
    assert q.claim("jobs") == []
    assert q.depth("jobs")["claimable"] == 0
    for expected in ("ready", "dead"):
        time.sleep(0.05)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE pgmem.queue_items SET available_at = now()")  # skip the wait
        (item,) = q.claim("jobs")
        assert q.nack(item, error="boom again", retry_in=0) == expected
    assert item.attempts == 3
    (dead,) = q.dead_letters("jobs")
    assert dead.message.content == "flaky" and q.depth("jobs") == {"ready": 0, "claimable": 0, "dead": 1}
    assert q.claim("jobs") == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT last_error FROM pgmem.queue_items").fetchone() == ("boom again",)
    assert q.requeue("jobs") == 1
    (again,) = q.claim("jobs")
    assert again.attempts == 1
    assert q.nack(again, dead=True) == "dead"
    assert q.requeue("jobs", [again]) == 1


def test_nack_decides_by_the_stored_item(client: pgmem.Client, dsn: str) -> None:
    # nack picks its statement from the item's attempts and max_attempts; the stored ones decide.
    q = client.queues
    q.push("once", m("one try"), max_attempts=1)
    (item,) = q.claim("once")
    assert q.nack(dataclasses.replace(item, max_attempts=9), retry_in=0) == "dead"  # stored: 1 attempt
    q.push("many", m("five tries"), max_attempts=5)
    (item,) = q.claim("many")
    assert q.nack(dataclasses.replace(item, max_attempts=1), retry_in=0) == "ready"  # stored: 5
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT queue, status, died_at IS NOT NULL FROM pgmem.queue_items ORDER BY queue")
        assert rows.fetchall() == [("many", "ready", False), ("once", "dead", True)]
    (item,) = q.claim("many")
    stale = dataclasses.replace(item, attempts=item.attempts - 1)  # an earlier lease of the item
    for dead in (False, True):
        with pytest.raises(LeaseLost):
            q.nack(stale, dead=dead)
    assert q.nack(item, dead=True) == "dead"


def test_ack_archives_and_retention_purges(client: pgmem.Client, dsn: str) -> None:
    q = client.queues
    shared = m("also in a memory")
    client.messages.add("mem", shared)
    q.push("jobs", shared)
    q.push("jobs", m("only queued"))
    q.ack(q.claim("jobs", n=2))
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*), sum(attempts) FROM pgmem.queue_archive").fetchone() == (2, 2)
    assert q.purge_archive(3600) == 0  # too young
    assert q.purge_archive(0) == 2
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT content FROM pgmem.messages").fetchall() == [("also in a memory",)]
    # Clearing the memory now removes the message: nothing refers to it any more.
    client.messages.clear("mem")
    assert table_counts(dsn)["messages"] == 0


def test_an_archived_batch_of_50_stays_inline_and_uncompressed(client: pgmem.Client, dsn: str) -> None:
    """Past 2 kB Postgres would compress the row's arrays and move them to TOAST inside the acknowledging
    statement; toast_tuple_target (pre-baseline migration 0014) keeps rows of up to ~80 items as they are."""
    q = client.queues
    q.push_many("jobs", [m(f"j{i}") for i in range(50)])
    q.ack(q.claim("jobs", n=50))
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT pg_column_size(b.*), pg_relation_size(c.reltoastrelid) FROM pgmem.queue_archive_batches AS b,"
            " pg_class AS c WHERE c.oid = 'pgmem.queue_archive_batches'::regclass"
        ).fetchone()
    assert row is not None
    size, toast = row
    assert size > 2100 and toast == 0, row  # before pre-baseline migration 0014: compressed, then partly moved to TOAST


def test_archived_messages_outlive_their_memory_until_every_queue_purges_them(client: pgmem.Client, dsn: str) -> None:
    q = client.queues
    kept = m("archived by two queues")
    client.messages.add("mem", kept)
    q.push("a", kept)
    q.push("b", kept)
    q.ack(q.claim("a") + q.claim("b"))  # one acknowledgement, one archive row per queue
    client.messages.clear("mem")
    assert table_counts(dsn)["messages"] == 1  # still archived: kept
    assert q.purge_archive(0, queue="a") == 1
    assert table_counts(dsn)["messages"] == 1  # queue b's history still refers to it
    assert q.purge_archive(0) == 1
    assert table_counts(dsn)["messages"] == 0


def test_depth_and_clear_of_a_queue_read_only_its_items(client: pgmem.Client, dsn: str) -> None:
    """depth and clear find a queue's items on the partial indexes: a small queue beside a big one costs
    its own rows. depth used to read the whole table (every queue of every namespace) on every call, so
    a producer throttling on depth slowed as the table bloated, and MessageQueue.empty() did the same."""
    q = client.queues
    for start in range(0, 6000, 3000):
        q.push_many("big", [m(f"b{i}") for i in range(start, start + 3000)])
    q.push_many("small", [m(f"s{i}") for i in range(10)], delay=60)
    q.push("small", m("due"), max_attempts=1)
    q.nack(q.claim("small")[0])  # dead-lettered
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgmem.queue_items")
    with psycopg.connect(dsn) as conn:  # one transaction: its own counters, no stats delay

        def table_reads() -> tuple[int, int]:
            row = conn.execute(
                "SELECT seq_scan, seq_tup_read FROM pg_stat_xact_user_tables"
                " WHERE schemaname = 'pgmem' AND relname = 'queue_items'"
            ).fetchone()
            assert row is not None
            return row[0], row[1]

        before = table_reads()
        assert q.depth("small", connection=conn) == {"ready": 10, "claimable": 0, "dead": 1}
        assert q.clear("small", connection=conn) == 11
        assert table_reads() == before
        assert q.depth("small", connection=conn) == {"ready": 0, "claimable": 0, "dead": 0}
        conn.commit()
    assert q.depth("big") == {"ready": 6000, "claimable": 6000, "dead": 0}
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE pgmem.queue_items SET status = 'done' WHERE queue = 'big'")


def test_clear_take_and_messages_kept_while_queued(client: pgmem.Client, dsn: str) -> None:
    q = client.queues
    msg = m("queued and remembered")
    client.messages.add("mem", msg)
    q.push("jobs", msg)
    client.messages.clear("mem")  # the queue still refers to it: the row stays
    assert contents(q.take("jobs")) == ["queued and remembered"]
    q.push_many("jobs", [m("x"), m("y")])
    assert q.clear("jobs") == 2 and q.take("jobs") == []


def _consumer(dsn: str, queue: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    with pgmem.connect(dsn, namespace="test") as client:
        out.put(("ready", time.time()))
        items = client.queues.wait(queue, timeout=20, poll_interval=30)
        out.put(("got", time.time(), [i.message.content for i in items]))


def test_notify_wakes_a_waiting_consumer_in_another_process(client: pgmem.Client, dsn: str) -> None:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_consumer, args=(dsn, "wake", out))
    proc.start()
    try:
        assert out.get(timeout=30)[0] == "ready"
        time.sleep(0.5)  # let it block in LISTEN (poll_interval is 30 s: only NOTIFY can wake it)
        pushed = time.time()
        client.queues.push("wake", m("hello"))
        kind, received, got = out.get(timeout=15)
        assert kind == "got" and got == ["hello"]
        latency = received - pushed
        print(f"NOTIFY wake-up latency: {latency * 1000:.1f} ms")
        assert latency < 5.0
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()


def test_wait_times_out_and_catches_delayed_items(client: pgmem.Client) -> None:
    q = client.queues
    t0 = time.monotonic()
    assert q.wait("empty", timeout=0.3) == []
    assert 0.25 < time.monotonic() - t0 < 5
    q.push("soon", m("delayed"), delay=0.3)
    assert contents(q.wait("soon", timeout=5, poll_interval=30)) == ["delayed"]  # sleeps until available_at


def test_consume_iterates_until_idle(client: pgmem.Client) -> None:
    q = client.queues
    q.push_many("stream", [m(f"e{i}") for i in range(5)])
    seen = []
    for item in q.consume("stream", n=2, idle_timeout=0.3):
        seen.append(item.message.content)
        q.ack(item)
    assert seen == [f"e{i}" for i in range(5)]


async def test_async_wait_and_ack(aclient: pgmem.AsyncClient) -> None:
    q = aclient.queues
    await q.push("aq", m("async job"))
    items = await q.wait("aq", timeout=5)
    assert contents(items) == ["async job"]
    await q.push("aq", m("next"))
    items = await q.wait("aq", timeout=5, ack=items)
    assert contents(items) == ["next"]
    await q.ack(items)
    assert (await q.depth("aq"))["ready"] == 0
    seen = [i.message.content async for i in q.consume("aq", idle_timeout=0.2)]
    assert seen == []


def test_transactional_enqueue(client: pgmem.Client, dsn: str) -> None:
    before = table_counts(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(RuntimeError), conn.transaction():
            client.queues.push("jobs", m("rolled back"), connection=conn)
            raise RuntimeError
        assert table_counts(dsn) == before
        with conn.transaction():
            client.queues.push("jobs", m("committed"), connection=conn)
            assert client.queues.claim("jobs") == []  # not visible to others before commit
    assert contents(client.queues.claim("jobs")) == ["committed"]


def test_dropped_connection_mid_claim_leaves_items_claimable(client: pgmem.Client, dsn: str) -> None:
    q = client.queues
    q.push_many("jobs", [m("a"), m("b")])
    conn = psycopg.connect(dsn)
    pid = conn.info.backend_pid
    items = q.claim("jobs", n=2, connection=conn)  # inside the connection's open transaction
    assert len(items) == 2
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        conn.commit()
    again = q.claim("jobs", n=2)
    assert contents(again) == ["a", "b"] and [i.attempts for i in again] == [1, 1]


def test_routing_to_inboxes(client: pgmem.Client, dsn: str) -> None:
    q = client.queues
    q.subscribe("Architect", watch=["WritePRD"])
    q.subscribe("Engineer", addresses=["Engineer", "Alex"], watch=["WriteDesign"])
    q.subscribe("Logger")  # watch=None: every broadcast
    prd = m("prd", cause_by="WritePRD")
    assert sorted(q.publish("team", prd).inboxes) == ["inbox:Architect", "inbox:Logger"]
    assert sorted(q.publish("team", m("to alex", cause_by="Chat", send_to={"Alex"})).inboxes) == ["inbox:Engineer"]
    assert q.publish("team", m("to nobody", cause_by="Chat", send_to={"Nobody"})).inboxes == []
    assert q.publish("team", prd) == (None, [])  # already in the memory: delivered once only
    assert client.messages.count("team") == 3
    assert contents(q.inbox("Architect")) == ["prd"]
    assert contents(q.inbox("Logger")) == ["prd"]
    assert contents(q.inbox("Engineer")) == ["to alex"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = table_counts(dsn)
        with pytest.raises(RuntimeError), conn.transaction():
            q.publish("team", m("atomic", cause_by="WritePRD"), connection=conn)
            raise RuntimeError
        assert table_counts(dsn) == before
    q.unsubscribe("Logger")
    assert sorted(q.publish("team", m("prd 2", cause_by="WritePRD")).inboxes) == ["inbox:Architect"]


def test_inbox_redelivery_after_a_crash_is_idempotent(client: pgmem.Client) -> None:
    from pgmem.integrations.metagpt import Memory

    q = client.queues
    q.subscribe("QA")
    q.publish("team", m("test this"))
    own = Memory("role:QA", client=client)
    (first,) = q.inbox("QA", lease=0.2)
    own.add(first.message)  # the worker saw it, then crashed before acknowledging
    time.sleep(0.3)
    (again,) = q.inbox("QA")
    assert again.message.id == first.message.id and again.attempts == 2
    own.add(again.message)
    q.ack(again)
    assert own.count() == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.push("bad name", pgmem.Message(content="x")),
        lambda q: q.push("q", pgmem.Message(content="x"), priority=2**31),
        lambda q: q.push("q", pgmem.Message(content="x"), priority=1.5),
        lambda q: q.push("q", pgmem.Message(content="x"), delay=-1),
        lambda q: q.push("q", pgmem.Message(content="x"), delay=math.nan),
        lambda q: q.push("q", pgmem.Message(content="x"), delay=10**12),
        lambda q: q.push("q", pgmem.Message(content="x"), max_attempts=0),
        lambda q: q.push("q", pgmem.Message(content="x"), dedup_key="has space"),
        lambda q: q.push_many("q", [pgmem.Message(content="x")], dedup_keys=["a", "b"]),
        lambda q: q.claim("q", n=0),
        lambda q: q.claim("q", n=1001),
        lambda q: q.claim("q", lease=0),
        lambda q: q.claim("q", lease=-5),
        lambda q: q.claim("q", lease=math.inf),
        lambda q: q.claim("q", lease=25 * 3600),
        lambda q: q.ack("not an item"),
        lambda q: q.nack(42),
        lambda q: q.wait("q", timeout=-1),
        lambda q: q.peek("q", limit=0),
    ],
)
def test_bad_queue_input(client: pgmem.Client, dsn: str, call: object) -> None:
    before = table_counts(dsn)
    with pytest.raises(pgmem.InvalidInput):
        call(client.queues)  # type: ignore[operator]
    assert table_counts(dsn) == before


def test_acknowledging_a_forged_item_is_refused(client: pgmem.Client, dsn: str) -> None:
    """An item whose id or attempts are not integers (made up, not claimed) is refused before any SQL."""
    client.queues.push("q", pgmem.Message(content="x"))
    (item,) = client.queues.claim("q")
    before = table_counts(dsn)
    for forged in (dataclasses.replace(item, id="1,2"), dataclasses.replace(item, attempts=True)):
        with pytest.raises(pgmem.InvalidInput, match="not a claimed item"):
            client.queues.ack(forged)
        with pytest.raises(pgmem.InvalidInput, match="not a claimed item"):
            client.queues.claim("q", ack=[forged])
    assert table_counts(dsn) == before
    client.queues.ack(item)
