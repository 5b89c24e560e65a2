"""Items as of a time (migration 0022, issue 36 item 2): ``client.items`` reads with ``as_of=`` see each
item as it was then, from ``pgmem.item_history`` (the versions an update replaced or a delete removed)
and the current rows; forgetting and purging remove that history."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import psycopg
import pytest

import pgmem
from pgmem.embeddings import HashingEmbedder
from pgmem.errors import InvalidInput, NotFound
from pgmem.models import Message
from pgmem.planning.items import ItemsForgotten
from tests.conftest import table_counts

P = ("users", "u1")
µs = timedelta(microseconds=1)


def _updated(client: pgmem.Client, key: str, path: tuple[str, ...] = P) -> datetime:
    row = client.items.get(path, key)
    assert row is not None
    return row.updated_at


def _value(client: pgmem.Client, key: str, at: object, path: tuple[str, ...] = P) -> object:
    row = client.items.get(path, key, as_of=at)  # type: ignore[arg-type]
    return None if row is None else row.value


def _history(dsn: str, namespace: str | None = None) -> int:
    with psycopg.connect(dsn) as conn:  # a superuser: every namespace
        row = conn.execute(
            "SELECT count(*) FROM pgmem.item_history WHERE %(ns)s::text IS NULL OR namespace = %(ns)s",
            {"ns": namespace},
        ).fetchone()
        assert row is not None
        return int(row[0])


def test_get_sees_each_version_in_its_time_and_a_deleted_item_before_its_delete(client: pgmem.Client) -> None:
    """Before the first put: absent; between updates: the version then (its own updated_at); after a
    delete: absent now, present as of before it."""
    client.items.put(P, "prefs", {"lang": "fr"})
    t1 = _updated(client, "prefs")
    client.items.put(P, "prefs", {"lang": "de"})
    t2 = _updated(client, "prefs")
    client.items.put(P, "prefs", {"lang": "it"})
    t3 = _updated(client, "prefs")
    assert t1 < t2 < t3
    assert _value(client, "prefs", t1 - µs) is None
    assert _value(client, "prefs", t1) == {"lang": "fr"}
    assert _value(client, "prefs", t2 - µs) == {"lang": "fr"}
    assert _value(client, "prefs", t2) == {"lang": "de"}
    assert _value(client, "prefs", t3) == {"lang": "it"}
    old = client.items.get(P, "prefs", as_of=t2 + µs)
    assert old is not None and old.updated_at == t2 and old.created_at == t1
    client.items.delete(P, "prefs")
    gone_at = datetime.now(t1.tzinfo) + timedelta(seconds=5)  # later than the delete, whatever the clocks
    assert client.items.get(P, "prefs") is None
    assert _value(client, "prefs", t3) == {"lang": "it"}
    assert _value(client, "prefs", gone_at) is None
    # Re-created: a new item (its own created_at), the deleted one still there before.
    client.items.put(P, "prefs", {"lang": "es"})
    t4 = _updated(client, "prefs")
    again = client.items.get(P, "prefs", as_of=t4)
    assert again is not None and again.value == {"lang": "es"} and again.created_at == t4
    assert _value(client, "prefs", t3) == {"lang": "it"}
    got = client.items.get_many(P, ["prefs", "missing"], as_of=t2)
    assert [(r.key, r.value) for r in got] == [("prefs", {"lang": "de"})]


def test_a_ttl_refresh_is_no_version_and_two_puts_in_one_transaction_leave_one(client: pgmem.Client, dsn: str) -> None:
    client.items.put(P, "k", {"v": 1}, ttl=60)
    client.items.get(P, "k", refresh_ttl=True)  # moves expires_at only
    assert _history(dsn) == 0
    with client.transaction() as conn:
        client.items.put(P, "k", {"v": 2}, connection=conn)
        client.items.put(P, "k", {"v": 3}, connection=conn)  # {"v": 2} was never visible
    assert _history(dsn) == 1
    t = _updated(client, "k")
    assert _value(client, "k", t - µs) == {"v": 1}
    assert _value(client, "k", t) == {"v": 3}


def test_a_put_from_an_older_transaction_never_moves_time_back(client: pgmem.Client, dsn: str) -> None:
    """A transaction that started before another one wrote the item, then overwrites it, keeps that
    write's time (updated_at never goes back): one version per instant, none of them twice."""
    client.items.put(P, "x", {"v": "a"})
    t0 = _updated(client, "x")
    with client.transaction() as older:
        client.items.get(P, "x", connection=older)  # its transaction (and its now()) starts here
        client.items.put(P, "x", {"v": "b"})  # another transaction, started later, commits first
        t1 = _updated(client, "x")
        client.items.put(P, "x", {"v": "c"}, connection=older)
    assert _updated(client, "x") == t1  # not the older transaction's earlier now()
    assert _value(client, "x", t0) == {"v": "a"}
    assert _value(client, "x", t1 - µs) == {"v": "a"}
    assert _value(client, "x", t1) == {"v": "c"}  # "b" lived only between the two commits
    assert [h.value for h in client.items.search((), as_of=t1)] == [{"v": "c"}]
    assert _history(dsn) == 1


def test_an_item_expired_at_as_of_is_absent(client: pgmem.Client) -> None:
    """The current row and a replaced version alike: present while their TTL ran, absent once it had."""
    client.items.put(P, "live", {"v": 1}, ttl=1)  # a minute
    t = _updated(client, "live")
    assert _value(client, "live", t + timedelta(seconds=30)) == {"v": 1}
    assert _value(client, "live", t + timedelta(seconds=61)) is None
    client.items.put(P, "short", {"v": 1}, ttl=0.001)  # 60 ms
    t1 = _updated(client, "short")
    time.sleep(0.2)  # past its expiry before it is replaced (ordering, not a timing assertion)
    client.items.put(P, "short", {"v": 2})
    t2 = _updated(client, "short")
    assert t2 - t1 > timedelta(milliseconds=60)
    assert _value(client, "short", t1) == {"v": 1}
    assert _value(client, "short", t1 + timedelta(milliseconds=100)) is None  # expired, not yet replaced
    assert _value(client, "short", t2) == {"v": 2}
    hits = client.items.search(("users",), as_of=t1 + timedelta(milliseconds=100))
    assert [h.key for h in hits] == ["live"]
    # A swept item's last version stays readable as of before it expired.
    client.items.put(P, "swept", {"v": 1}, ttl=0.001)
    t3 = _updated(client, "swept")
    time.sleep(0.2)
    assert client.items.sweep() == 1
    assert _value(client, "swept", t3) == {"v": 1}


def test_search_lists_and_filters_as_of(client: pgmem.Client) -> None:
    """The prefix and the filter as of a time: the filter tests the version valid then, never an older
    one; newest updated_at first; offset and limit page it."""
    client.items.put(("users", "a"), "p", {"lang": "fr", "n": 1})
    client.items.put(("users", "b"), "p", {"lang": "fr", "n": 2})
    client.items.put(("teams", "t"), "p", {"lang": "fr", "n": 3})
    t0 = _updated(client, "p", ("teams", "t"))
    client.items.put(("users", "a"), "p", {"lang": "de", "n": 1})
    client.items.delete(("users", "b"), "p")
    client.items.put(("users", "c"), "p", {"lang": "fr", "n": 4})
    now = client.items.search(("users",), filter={"lang": "fr"})
    assert [tuple(h.path) for h in now] == [("users", "c")]
    then = client.items.search(("users",), filter={"lang": "fr"}, as_of=t0)
    assert [(tuple(h.path), h.value["n"]) for h in then] == [(("users", "b"), 2), (("users", "a"), 1)]
    assert all(h.score is None for h in then)
    assert [tuple(h.path) for h in client.items.search((), as_of=t0)] == [
        ("teams", "t"),
        ("users", "b"),
        ("users", "a"),
    ]
    assert [tuple(h.path) for h in client.items.search((), as_of=t0, limit=1, offset=1)] == [("users", "b")]
    assert client.items.search(("users",), filter={"lang": "de"}, as_of=t0) == []
    assert client.items.search(("users",), filter={"n": {"$gte": 2}}, as_of=t0)[0].path == ["users", "b"]
    assert client.items.search((), as_of=t0, limit=0) == []


def test_list_paths_as_of(client: pgmem.Client, dsn: str) -> None:
    """The paths that held an item then, by get's rule: a path emptied since is listed, one created later
    is not, an item expired then counts for nothing; prefix, suffix, max_depth and paging as without as_of."""
    client.items.put(("users", "a"), "p", {"v": 1})
    client.items.put(("users", "b"), "p", {"v": 1})
    client.items.put(("teams", "t", "x"), "p", {"v": 1})
    client.items.put(("tmp", "gone"), "p", {"v": 1}, ttl=0.001)  # 60 ms
    t0 = _updated(client, "p", ("tmp", "gone"))
    t1 = t0 + timedelta(milliseconds=150)  # tmp expired then
    time.sleep(0.2)  # the changes below come after t1 (ordering, not a timing assertion)
    client.items.delete(("users", "b"), "p")  # users/b now only in the history
    client.items.put(("users", "c"), "p", {"v": 1})  # after t0 and t1
    client.items.put(("users", "a"), "p", {"v": 2})  # a new version: the path was there all along
    assert client.items.list_paths(omit_expired=True) == [("teams", "t", "x"), ("users", "a"), ("users", "c")]
    assert client.items.list_paths(as_of=t0) == [("teams", "t", "x"), ("tmp", "gone"), ("users", "a"), ("users", "b")]
    assert client.items.list_paths(as_of=t1) == [("teams", "t", "x"), ("users", "a"), ("users", "b")]  # tmp expired
    assert client.items.list_paths(prefix=("users",), as_of=t0) == [("users", "a"), ("users", "b")]
    assert client.items.list_paths(suffix=("*", "b"), as_of=t0) == [("users", "b")]
    assert client.items.list_paths(max_depth=1, as_of=t0) == [("teams",), ("tmp",), ("users",)]
    assert client.items.list_paths(as_of=t0, limit=2, offset=1) == [("tmp", "gone"), ("users", "a")]
    before = t0 - timedelta(days=1)
    assert client.items.list_paths(as_of=before) == []
    # A mark's time, as get and search take it.
    client.messages.add("chat", Message(content="hello"))
    client.mark("chat", "now")
    client.items.forget(("users", "b"))  # gone for good, history included
    assert client.items.list_paths(prefix=("users",), as_of=("chat", "now")) == [("users", "a"), ("users", "c")]
    for bad in (5, datetime(2026, 1, 1)):  # noqa: DTZ001 - naive on purpose
        with pytest.raises(InvalidInput):
            client.items.list_paths(as_of=bad)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        client.items.list_paths(as_of=("chat", "nope"))


def test_as_of_a_mark(client: pgmem.Client) -> None:
    """A Mark (its marked_at) or (memory, name): the mark's time; an unknown mark is NotFound."""
    client.messages.add("chat", Message(content="hello"))
    client.items.put(P, "prefs", {"lang": "fr"})
    mark = client.mark("chat", "before-tools")
    client.items.put(P, "prefs", {"lang": "de"})
    assert _value(client, "prefs", mark) == {"lang": "fr"}
    assert _value(client, "prefs", ("chat", "before-tools")) == {"lang": "fr"}
    assert [h.value for h in client.items.search(("users",), as_of=("chat", "before-tools"))] == [{"lang": "fr"}]
    with pytest.raises(NotFound, match="no mark named 'nope'"):
        client.items.get(P, "prefs", as_of=("chat", "nope"))


def test_bad_as_of_is_refused(client: pgmem.Client) -> None:
    client.items.put(P, "prefs", {"lang": "fr"})
    embedder = HashingEmbedder(8)
    bad: list[tuple[object, str]] = [
        (datetime(2026, 1, 1), "timezone-aware"),  # noqa: DTZ001 - naive on purpose
        (5, "no sequence numbers"),
        ("before-tools", r"as_of=\(memory, 'before-tools'\)"),
        (("chat",), "timezone-aware datetime, a Mark"),
        (("bad key!", "m"), "invalid memory key"),
        (True, "timezone-aware datetime, a Mark"),
    ]
    for as_of, message in bad:
        with pytest.raises(InvalidInput, match=message):
            client.items.get(P, "prefs", as_of=as_of)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match=message):
            client.items.search(("users",), as_of=as_of)  # type: ignore[arg-type]
    at = _updated(client, "prefs")
    with pytest.raises(InvalidInput, match="no query or vector"):
        client.items.search(("users",), query="french", embedder=embedder, as_of=at)
    with pytest.raises(InvalidInput, match="refreshes no TTL"):
        client.items.get(P, "prefs", refresh_ttl=True, as_of=at)
    with pytest.raises(InvalidInput, match="refreshes no TTL"):
        client.items.search(("users",), refresh_ttl=True, as_of=at)


def test_tenants_history_apart_as_the_app_role(dsn: str) -> None:
    """Every test client acts as pgmem_app: one namespace's versions are invisible to another's reads,
    and a raw connection as pgmem_app sees only its namespace's rows of pgmem.item_history."""
    with pgmem.connect(dsn, namespace="a", max_size=2) as a, pgmem.connect(dsn, namespace="b", max_size=2) as b:
        a.items.put(P, "secret", {"v": "a1"})
        t = _updated(a, "secret")
        a.items.put(P, "secret", {"v": "a2"})
        a.items.delete(P, "secret")
        assert _value(a, "secret", t) == {"v": "a1"}
        assert _value(b, "secret", t) is None
        assert b.items.search((), as_of=t) == []
        assert b.items.purge_history() == 0
        assert b.items.forget(P) == ItemsForgotten(0, 0)
        assert _history(dsn, "a") == 2
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET ROLE pgmem_app")
        conn.execute("SELECT set_config('pgmem.namespace', 'b', false)")
        assert conn.execute("SELECT count(*) FROM pgmem.item_history").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO pgmem.item_history (namespace, path, key, item_id, value, created_at, valid_from, "
                "valid_to) VALUES ('a', '{x}', 'k', 1, '{}', now(), now() - interval '1 s', now())"
            )
        conn.execute("SELECT set_config('pgmem.namespace', 'a', false)")
        assert conn.execute("SELECT count(*) FROM pgmem.item_history").fetchone() == (2,)


def test_forget_and_purge_remove_the_history(client: pgmem.Client, dsn: str) -> None:
    """forget: the items and every version of them (deleted ones' too), nothing else; purge_history:
    versions by prefix, keys or age; the retention target item_history: versions by age."""
    for key in ("a", "b"):
        client.items.put(P, key, {"v": 1})
        client.items.put(P, key, {"v": 2})
    client.items.put(("other",), "c", {"v": 1})
    t = _updated(client, "c", ("other",))
    client.items.put(("other",), "c", {"v": 2})
    client.items.put(P, "gone", {"v": 1})
    client.items.delete(P, "gone")
    assert _history(dsn) == 4
    assert client.items.forget(P, ["a"]) == ItemsForgotten(items=1, versions=2)  # its old one and its last
    assert client.items.get(P, "a") is None and _value(client, "a", t) is None
    assert client.items.forget(P) == ItemsForgotten(items=1, versions=3)  # b (2) and the deleted one
    assert [tuple(h.path) for h in client.items.search((), as_of=t)] == [("other",)]
    assert _history(dsn) == 1
    assert client.items.purge_history(("other",), older_than=timedelta(hours=1)) == 0
    assert client.items.purge_history(("other",), ["c"]) == 1
    assert _value(client, "c", t) is None
    assert client.items.get(("other",), "c") is not None  # the current item stays
    client.items.put(("other",), "c", {"v": 3})
    client.retention.set_policy("item_history", max_age=0)
    assert client.retention.run(target="item_history") == {"item_history": 1}
    assert _history(dsn) == 0
    with pytest.raises(InvalidInput, match="max_age only"):
        client.retention.set_policy("item_history", max_count=3)
    with pytest.raises(InvalidInput, match="scope is '\\*'"):
        client.retention.set_policy("item_history", scope="chat", max_age=60)
    with pytest.raises(InvalidInput, match="prefix"):
        client.items.forget(())
    with pytest.raises(InvalidInput, match="give it as prefix"):
        client.items.purge_history((), ["c"])
    with pytest.raises(InvalidInput, match="timezone-aware"):
        client.items.purge_history(older_than=datetime(2026, 1, 1))  # noqa: DTZ001 - naive on purpose
    before = table_counts(dsn)
    with pytest.raises(InvalidInput):
        client.items.forget(P, "a")  # a bare string is not a list of keys
    assert table_counts(dsn) == before


async def test_async_reads_forget_and_purge(aclient: pgmem.AsyncClient) -> None:
    await aclient.items.put(P, "prefs", {"lang": "fr"})
    first = await aclient.items.get(P, "prefs")
    assert first is not None
    await aclient.items.put(P, "prefs", {"lang": "de"})
    then = await aclient.items.get(P, "prefs", as_of=first.updated_at)
    assert then is not None and then.value == {"lang": "fr"}
    hits = await aclient.items.search(("users",), filter={"lang": "fr"}, as_of=first.updated_at)
    assert [h.value for h in hits] == [{"lang": "fr"}]
    with pytest.raises(InvalidInput, match="timezone-aware"):
        await aclient.items.get(P, "prefs", as_of=datetime(2026, 1, 1))  # noqa: DTZ001 - naive on purpose
    assert await aclient.items.purge_history(P) == 1
    assert await aclient.items.get(P, "prefs", as_of=first.updated_at) is None
    assert await aclient.items.forget(P) == ItemsForgotten(items=1, versions=1)
