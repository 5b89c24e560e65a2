"""Reads and searches as of a point (issue 36, item 2; migration 0020): ``as_of=`` a sequence number, a
time or a mark (``client.mark``) gives what the memory held then, on every read and search kind, and on
forks through what they inherit."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

import pgmem
from pgmem import Message


def _contents(items: list[object]) -> list[str]:
    return [getattr(i, "message", i).content for i in items]  # type: ignore[attr-defined]


def test_every_read_as_of_a_seq_a_time_and_a_mark(client: pgmem.Client) -> None:
    client.messages.add_many("m", [Message(content=f"early {i}", cause_by="Plan", role="assistant") for i in range(3)])
    point = client.messages.at("m", -1).seq  # type: ignore[union-attr]
    mark = client.mark("m", "v1")
    assert mark.seq == point
    time.sleep(0.05)
    moment = datetime.now(UTC)
    time.sleep(0.05)
    client.messages.add_many("m", [Message(content=f"late {i}", cause_by="Code", role="user") for i in range(2)])
    early = ["early 0", "early 1", "early 2"]
    for as_of in (point, moment, "v1"):
        assert _contents(client.messages.last("m", as_of=as_of)) == early, as_of
        assert _contents(client.messages.last("m", 2, as_of=as_of)) == early[1:]
        assert _contents(client.messages.newest("m", 1, as_of=as_of)) == ["early 2"]
        assert client.messages.at("m", -1, as_of=as_of).content == "early 2"  # type: ignore[union-attr]
        assert client.messages.count("m", as_of=as_of) == 3
        assert client.messages.by_action("m", "Code", as_of=as_of) == []
        assert client.messages.by_actions("m", ["Plan", "Code"], as_of=as_of) != []
        assert client.messages.by_role("m", "user", as_of=as_of) == []
        assert client.messages.by_sender("m", "", as_of=as_of) != []
        assert len(client.messages.by_recipient("m", "anyone", as_of=as_of)) == 3
        assert client.messages.by_content("m", "late", as_of=as_of) == []
        assert client.messages.actions("m", as_of=as_of) == ["Plan"]
        assert client.messages.count_actions("m", as_of=as_of) == 1
        assert client.messages.search_text("m", "late", as_of=as_of) == []
        assert len(client.messages.payloads("m", "x", last=0, as_of=as_of)) == 3
        late = client.messages.last("m", 1)[0]
        assert client.messages.new_positions("m", [late.id], as_of=as_of) == [0]
    # Now: everything; a point in the future is now.
    assert client.messages.count("m") == 5 == client.messages.count("m", as_of=10**15)
    assert [m.name for m in client.marks("m")] == ["v1"]


def test_as_of_bad_input(client: pgmem.Client) -> None:
    client.messages.add("m", Message(content="x"))
    client.mark("m", "v1")
    with pytest.raises(pgmem.Conflict):
        client.mark("m", "v1")
    with pytest.raises(pgmem.NotFound):
        client.mark("missing", "v1")
    with pytest.raises(pgmem.NotFound):
        client.messages.last("m", as_of="no-such-mark")
    with pytest.raises(pgmem.InvalidInput):
        client.messages.last("m", as_of=-1)
    with pytest.raises(pgmem.InvalidInput):
        client.messages.last("m", as_of=datetime(2026, 1, 1))  # naive  # noqa: DTZ001
    with pytest.raises(pgmem.InvalidInput):
        client.messages.last("m", as_of=True)  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        client.mark("m", "")
    with pytest.raises(pgmem.InvalidInput):
        client.vectors.keyword_search("x", as_of=1)  # as_of needs a memory


@pytest.mark.parametrize("kind", ["vector", "exact", "keyword", "hybrid"])
def test_searches_as_of_and_on_forks(client: pgmem.Client, kind: str) -> None:
    client.vectors.enable("m")
    client.messages.add_many("m", [Message(content=f"snake game step {i}") for i in range(4)])
    client.mark("m", "v1")
    client.messages.add_many("m", [Message(content=f"snake game later {i}") for i in range(4)])
    client.vectors.wait()
    client.fork("m", "f", at="v1")
    client.messages.add("f", Message(content="snake game in the fork"))
    client.messages.add("m", Message(content="snake game in the parent"))
    client.vectors.wait()

    def search(memory: str, as_of: object = None) -> list[str]:
        if kind == "keyword":
            hits = client.vectors.keyword_search("snake game", k=20, memory=memory, as_of=as_of)  # type: ignore[arg-type]
        elif kind == "hybrid":
            hits = client.vectors.hybrid_search("snake game", k=20, memory=memory, as_of=as_of)  # type: ignore[arg-type]
        else:
            mode = "exact" if kind == "exact" else "ann"
            hits = client.search("snake game", k=20, memory=memory, mode=mode, as_of=as_of)
        return sorted(h.message.content for h in hits)

    early = [f"snake game step {i}" for i in range(4)]
    assert search("m", "v1") == early
    assert search("f") == sorted([*early, "snake game in the fork"])
    assert search("f", "v1") == early  # the fork's lineage as of the parent's mark
    assert "snake game in the parent" in search("m")
    client.messages.delete_oldest("m", 2)  # the parent's removal does not reach the fork's search
    assert search("f") == sorted([*early, "snake game in the fork"])
