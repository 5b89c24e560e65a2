"""A removal in a fork (which first copies what the fork inherits into it: ``materialize_fork``) racing a
removal in its parent, and a parent deleted by someone's own SQL while it is forked, on two connections
interleaved deterministically: one holds its transaction open until the other is seen waiting for it (or
has finished without waiting)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem import Message
from tests.integration.test_fork_races import _held, _in_thread, _wait_for_a_waiter

_PARENT: dict[str, Callable[[pgmem.Client, Any], Any]] = {
    "forget": lambda c, conn: c.retention.forget(["m2"], actor="test", connection=conn),
    "delete": lambda c, conn: c.messages.delete("p", "m2", connection=conn),
}


@pytest.mark.parametrize("first", ["fork", "parent"])
@pytest.mark.parametrize("parent_removal", sorted(_PARENT))
def test_a_removal_in_a_fork_racing_one_in_its_parent(
    dsn: str, client: pgmem.Client, parent_removal: str, first: str
) -> None:
    """The fork loses m1 (its own removal, which copies m0-m4 in first) while its parent loses m2 (a delete:
    the fork keeps it; a forget: gone everywhere), each order: both commit, and the fork holds exactly what
    is left, its size exact."""
    history = [Message(id=f"m{i}", content=f"m{i}") for i in range(5)]
    client.messages.add_many("p", history)
    client.fork("p", "f")
    in_parent = _PARENT[parent_removal]

    def in_fork(conn: Any) -> Any:
        return client.messages.delete("f", "m1", connection=conn)

    with psycopg.connect(dsn) as conn:
        if first == "fork":
            in_fork(conn)
            thread, done, out = _in_thread(lambda: in_parent(client, None))
        else:
            in_parent(client, conn)
            thread, done, out = _in_thread(lambda: in_fork(None))
        _wait_for_a_waiter(dsn, done, None)
        conn.commit()
    thread.join(60)
    assert out and not isinstance(out[0], BaseException), out
    everything = {m.id for m in history}
    kept_by_fork = everything - {"m1"} - ({"m2"} if parent_removal == "forget" else set())
    assert _held(dsn, "f") == kept_by_fork
    assert client.messages.count("f") == len(kept_by_fork)
    assert [m.id for m in client.messages.last("f")] == [m.id for m in history if m.id in kept_by_fork]
    assert _held(dsn, "p") == everything - {"m2"}
    assert client.messages.count("p") == 4


@pytest.mark.parametrize("first", ["fork", "delete"])
def test_a_raw_sql_delete_of_the_parent_racing_a_fork(dsn: str, client: pgmem.Client, first: str) -> None:
    """Someone's own SQL deletes the parent memory while it is forked: the fork taken first keeps all it
    inherited; taken after, the fork fails (the parent is gone) and nothing is left half made."""
    history = [Message(id=f"m{i}", content=f"m{i}") for i in range(5)]
    client.messages.add_many("p", history)

    def raw_delete(conn: Any) -> None:
        conn.execute("DELETE FROM pgmem.memories WHERE namespace = 'test' AND key = 'p'")

    with psycopg.connect(dsn) as conn:
        if first == "fork":
            client.fork("p", "f", connection=conn)

            def other() -> Any:
                with psycopg.connect(dsn, autocommit=True) as c:
                    raw_delete(c)

            thread, done, out = _in_thread(other)
        else:
            raw_delete(conn)
            thread, done, out = _in_thread(lambda: client.fork("p", "f"))
        _wait_for_a_waiter(dsn, done, None)
        conn.commit()
    thread.join(60)
    assert out
    if first == "fork":
        assert not isinstance(out[0], BaseException), out
        assert _held(dsn, "f") == {m.id for m in history}
        assert client.messages.count("f") == 5
        assert [m.id for m in client.messages.last("f")] == [m.id for m in history]
    else:
        assert isinstance(out[0], pgmem.errors.NotFound), out
        assert "f" not in client.messages.memories()
