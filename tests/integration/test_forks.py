"""Forks of memories (issue 36, item 2; migration 0020): ``client.fork`` makes a memory that starts as
another at a point and then diverges, copying no entry; removals on either side never reach the other,
forgetting reaches every fork, and counts stay exact."""

from __future__ import annotations

import psycopg
import pytest

import pgmem
from pgmem import Message


def _ids(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


def _exact(dsn: str, namespace: str, memory: str) -> list[str]:
    """What the memory holds, read from the tables by lineage (the reference the repository must match)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT m.content FROM pgmem.lineage(%s, %s, NULL) AS l JOIN pgmem.memory_entries AS e "
            "ON e.namespace = %s AND e.memory = l.memory AND e.seq <= l.upto "
            "JOIN pgmem.messages AS m ON m.namespace = e.namespace AND m.id = e.message_id ORDER BY e.seq",
            (namespace, memory, namespace),
        ).fetchall()
    return [str(r[0]) for r in rows]


def _entry_rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgmem.memory_entries").fetchone()
    assert row is not None
    return int(row[0])


def _fill(client: pgmem.Client, memory: str, n: int, prefix: str = "m") -> None:
    client.messages.add_many(memory, [Message(content=f"{prefix}{i}", cause_by="Act") for i in range(n)])


def test_a_fork_starts_as_its_parent_and_diverges_both_ways(client: pgmem.Client, dsn: str) -> None:
    _fill(client, "p", 5)
    rows_before = _entry_rows(dsn)
    fork = client.fork("p", "f")
    assert (fork.memory, fork.parent, fork.size) == ("f", "p", 5)
    assert _entry_rows(dsn) == rows_before  # nothing copied
    assert _ids(client.messages.last("f")) == ["m0", "m1", "m2", "m3", "m4"]
    client.messages.add("p", Message(content="parent-only"))
    client.messages.add("f", Message(content="fork-only"))
    assert _ids(client.messages.last("p", 2)) == ["m4", "parent-only"]
    assert _ids(client.messages.last("f", 2)) == ["m4", "fork-only"]
    assert client.messages.count("p") == client.messages.count("f") == 6
    # Every read goes through the lineage.
    assert len(client.messages.by_action("f", "Act")) == 5
    assert _ids(client.messages.by_role("f", "user"))[-1] == "fork-only"
    assert client.messages.at("f", 0) is not None and client.messages.at("f", 0).content == "m0"  # type: ignore[union-attr]
    assert client.messages.at("f", -1).content == "fork-only"  # type: ignore[union-attr]
    assert _ids(client.messages.newest("f", 2)) == ["fork-only", "m4"]
    assert _ids(client.messages.by_content("f", "m3")) == ["m3"]
    assert client.messages.actions("f") == ["Act"] and client.messages.count_actions("f") == 1
    assert [m.content for m in client.messages.search_text("f", "m2")] == ["m2"]
    inherited, new = client.messages.at("f", 0), Message(content="new")
    assert inherited is not None
    assert client.messages.find_news("f", [inherited, new]) == [new]
    assert client.messages.new_positions("f", [client.messages.last("f", 0)[0].id, "x"]) == [1]
    # Adding a message the fork inherits is a duplicate, as one of its own.
    first = client.messages.at("p", 0)
    assert first is not None
    assert client.messages.add("f", first) is False
    assert client.messages.add_many("f", [first]) == 0
    assert client.messages.count("f") == 6


def test_a_fork_into_the_key_of_a_deleted_memory_counts_right(client: pgmem.Client, dsn: str) -> None:
    """A deleted memory's count rows stay (their sum 0: its entries' deletions were counted, by whichever
    backend's shard ran them); a fork into its key adds to them, whichever shard they are in."""
    client.messages.add_many("p", [Message(content=f"p{i}") for i in range(3)])
    client.messages.add_many("x", [Message(content=f"x{i}") for i in range(2)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgmem.memories WHERE namespace = 'test' AND key = 'x'")
        # the rows a deletion in shard 0 leaves (1 time in 64 a backend's pid lands there)
        conn.execute(
            "INSERT INTO pgmem.memory_counts (namespace, memory, shard, n) VALUES ('test', 'x', 0, 0) "
            "ON CONFLICT DO NOTHING"
        )
    fork = client.fork("p", "x")
    assert fork.size == 3 and client.messages.count("x") == 3
    assert [m.content for m in client.messages.last("x")] == ["p0", "p1", "p2"]


def test_removals_in_the_parent_do_not_reach_the_fork(client: pgmem.Client, dsn: str) -> None:
    _fill(client, "p", 8)
    client.fork("p", "f")
    client.messages.delete_oldest("p", 2)
    client.messages.delete("p", client.messages.at("p", 0).id)  # type: ignore[union-attr]
    client.messages.trim("p", 3)
    client.messages.delete_newest("p")
    client.messages.move_oldest("p", "elsewhere", 1)
    client.messages.clear("p")
    assert client.messages.count("p") == 0
    assert _ids(client.messages.last("f")) == [f"m{i}" for i in range(8)]
    assert client.messages.count("f") == 8 == len(_exact(dsn, client.namespace, "f"))
    # The messages nothing else held stay: the fork holds them (its copies).
    assert len(client.messages.get_messages([m.id for m in client.messages.last("f")])) == 8


def test_removals_in_the_fork_do_not_reach_the_parent(client: pgmem.Client) -> None:
    _fill(client, "p", 6)
    client.fork("p", "f")
    client.messages.delete_oldest("f", 2)
    client.messages.delete_newest("f")
    assert _ids(client.messages.last("f")) == ["m2", "m3", "m4"]
    assert client.messages.count("f") == 3
    assert _ids(client.messages.last("p")) == [f"m{i}" for i in range(6)]
    assert client.messages.count("p") == 6
    client.messages.clear("f")
    assert client.messages.count("f") == 0 and client.messages.last("f") == []
    assert client.messages.count("p") == 6


def test_a_fork_of_a_fork_and_forks_at_a_point(client: pgmem.Client, dsn: str) -> None:
    _fill(client, "p", 4)
    point = client.messages.at("p", 1).seq  # type: ignore[union-attr]
    f1 = client.fork("p", "f1", at=point)
    assert f1.size == 2 and _ids(client.messages.last("f1")) == ["m0", "m1"]
    client.messages.add("f1", Message(content="f1-a"))
    f2 = client.fork("f1", "f2")
    assert f2.size == 3
    client.messages.add("f2", Message(content="f2-a"))
    client.messages.delete_oldest("p", 4)  # copied into f1, seen by f2 through it
    client.messages.delete_newest("f1")  # materialises f1; f2 keeps f1-a
    assert _ids(client.messages.last("f2")) == ["m0", "m1", "f1-a", "f2-a"]
    assert _ids(client.messages.last("f1")) == ["m0", "m1"]
    for memory in ("p", "f1", "f2"):
        assert client.messages.count(memory) == len(_exact(dsn, client.namespace, memory)), memory
    # A future point is the parent's newest entry: later writes to the parent stay out of the fork.
    client.messages.add("p", Message(content="late"))
    f3 = client.fork("p", "f3", at=10**15)
    client.messages.add("p", Message(content="later"))
    assert _ids(client.messages.last("f3")) == ["late"] and f3.size == 1


def test_forget_reaches_every_fork_and_is_audited(client: pgmem.Client, dsn: str) -> None:
    _fill(client, "p", 3)
    client.fork("p", "f1")
    client.fork("f1", "f2")
    client.messages.delete_oldest("p", 1)  # m0: now f1's own copy
    gone = [m.id for m in client.messages.last("f2", 0)[:2]]  # m0 (f1's copy) and m1 (p's, inherited)
    client.retention.forget(gone, actor="test")
    for memory in ("p", "f1", "f2"):
        assert "m0" not in _ids(client.messages.last(memory)) and "m1" not in _ids(client.messages.last(memory))
        assert client.messages.count(memory) == len(_exact(dsn, client.namespace, memory)), memory
    assert _ids(client.messages.last("f2")) == ["m2"]
    with psycopg.connect(dsn) as conn:
        audits = conn.execute("SELECT counts FROM pgmem.forget_audit WHERE label = 'test'").fetchall()
    assert len(audits) == 1


def test_forget_of_a_fork_forgets_what_it_inherits_and_of_a_memory_only_its_own(client: pgmem.Client) -> None:
    """forget(memory=) reads a memory that is no fork by its own entries and a fork through its lineage."""
    _fill(client, "p", 3)
    client.fork("p", "f")
    client.messages.add("f", Message(content="fork-only"))
    client.messages.add("p", Message(content="parent-later"))
    client.messages.add("q", Message(content="elsewhere"))
    assert client.retention.forget(memory="f", actor="test").messages == 4  # m0-m2 inherited, and its own
    assert _ids(client.messages.last("p")) == ["parent-later"] and client.messages.count("f") == 0
    assert client.retention.forget(memory="p", actor="test").messages == 1
    assert _ids(client.messages.last("q")) == ["elsewhere"]


def test_forget_resets_the_brain_summaries_of_every_fork_that_inherits_the_message(
    client: pgmem.Client, dsn: str
) -> None:
    """A brain whose history is a fork (or a fork of a fork) inherits the forgotten message: its summary
    may quote it, so it is reset as the original brain's is; a fork taken before the message keeps its own."""
    history = [Message(id=f"h{i}", content=f"talk {i}") for i in range(3)]
    client.brains.dump("b1", history=history[:1], historical_summary="b1 summary")
    early = client.fork(client.brains.keys("b1")[0], client.brains.keys("early")[0])  # before h1
    client.brains.dump("b1", history=history[1:], historical_summary="b1 said talk 1")
    client.fork(client.brains.keys("b1")[0], client.brains.keys("b2")[0])
    client.fork(client.brains.keys("b2")[0], client.brains.keys("b3")[0])  # a fork of the fork
    for brain in ("early", "b2", "b3"):
        client.brains.dump(brain, historical_summary=f"{brain} said talk 1")
    done = client.retention.forget(["h1"], actor="brains")
    assert done.brain_summaries == 3  # b1, b2, b3
    for brain in ("b1", "b2", "b3"):
        state = client.brains.load(brain)
        assert state is not None and state.historical_summary == "", brain
        assert "talk 1" not in [m.content for m in state.history], brain
    kept = client.brains.load("early")
    assert kept is not None and kept.historical_summary == "early said talk 1" and early.size == 1
    with psycopg.connect(dsn) as conn:
        (counts,) = conn.execute("SELECT counts FROM pgmem.forget_audit WHERE label = 'brains'").fetchone() or [{}]
    assert counts["brain_summaries"] == 3


def test_retention_of_a_fork_trims_what_it_inherits(client: pgmem.Client) -> None:
    _fill(client, "p", 6)
    client.fork("p", "f")
    assert client.retention.trim("f", 2) == 4
    assert _ids(client.messages.last("f")) == ["m4", "m5"]
    assert client.messages.count("p") == 6


def test_deleting_a_parent_materialises_its_forks(client: pgmem.Client, dsn: str) -> None:
    _fill(client, "p", 3)
    client.fork("p", "f")
    with psycopg.connect(dsn) as conn:
        conn.execute("DELETE FROM pgmem.memories WHERE key = 'p'")
    assert _ids(client.messages.last("f")) == ["m0", "m1", "m2"]
    assert client.messages.count("f") == 3


def test_bad_fork_input(client: pgmem.Client) -> None:
    _fill(client, "p", 1)
    client.fork("p", "f")
    with pytest.raises(pgmem.Conflict):
        client.fork("p", "f")
    with pytest.raises(pgmem.NotFound):
        client.fork("missing", "g")
    with pytest.raises(pgmem.InvalidInput):
        client.fork("p", "p")
    with pytest.raises(pgmem.InvalidInput):
        client.fork("p", "g", at=-1)
    with pytest.raises(pgmem.NotFound):
        client.fork("p", "g", at="no-such-mark")
    assert client.messages.memories() == ["f", "p"]


async def test_the_async_client_forks_too(aclient: pgmem.AsyncClient) -> None:
    await aclient.messages.add_many("p", [Message(content=f"m{i}") for i in range(3)])
    fork = await aclient.fork("p", "f")
    assert fork.size == 3
    assert [m.content for m in await aclient.messages.last("f")] == ["m0", "m1", "m2"]
