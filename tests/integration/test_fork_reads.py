"""The last reads of a fork through its lineage (issue 36, item 2): payload pages, ``memories(nonempty=)``,
``client.context`` (window, pinned, related, summaries; ``as_of=``), a fork's summaries and a brain whose
history is a fork. In each, the parent changes after the fork and the fork does not see it."""

from __future__ import annotations

import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.summarizer import CompressionPolicy, OfflineSummarizer


def _payload(i: int, prefix: str = "m") -> Message:
    return Message(content=f"{prefix}{i}", metadata={"obj": {"n": f"{prefix}{i}"}})


def _names(values: list[object]) -> list[str]:
    return [v["n"] if isinstance(v, dict) and "n" in v else v["content"] for v in values]  # type: ignore[index]


def test_payload_pages_read_a_fork_through_its_lineage_and_as_of(client: pgmem.Client) -> None:
    client.messages.add_many("p", [_payload(i) for i in range(6)])
    client.mark("p", "six")
    client.fork("p", "f")
    client.messages.add("p", _payload(99, "parent-"))
    client.messages.delete_oldest("p", 1)  # the fork keeps m0
    client.messages.add_many("f", [_payload(i, "f") for i in range(3)])
    page = client.messages.payloads
    assert _names(page("f", "obj")) == [f"m{i}" for i in range(6)] + ["f0", "f1", "f2"]
    assert _names(page("f", "obj", offset=4, limit=3)) == ["m4", "m5", "f0"]
    assert _names(page("f", "obj", limit=2)) == ["m0", "m1"]
    assert _names(page("p", "obj", offset=4)) == ["m5", "parent-99"]
    # as of a mark the fork inherits, and a sequence number
    assert _names(page("f", "obj", offset=1, as_of="six")) == [f"m{i}" for i in range(1, 6)]
    assert _names(page("p", "obj", as_of="six")) == [f"m{i}" for i in range(1, 6)]  # m0 left p for good
    # merged_with, through both lineages: what move_oldest moved out of a fork reads back in order
    moved = client.messages.move_oldest("f", "f:archive", 2)
    assert [m.content for m in moved] == ["m0", "m1"]
    assert _names(page("f", "obj", merged_with="f:archive")) == [f"m{i}" for i in range(6)] + ["f0", "f1", "f2"]
    client.fork("f", "g")
    client.messages.add("f", _payload(7, "f"))
    assert _names(page("g", "obj", merged_with="f:archive", offset=1, limit=3)) == ["m1", "m2", "m3"]
    assert _names(page("g", "obj", merged_with="f:archive"))[-1] == "f2"  # not f7: added to f after g
    f2 = client.messages.last("f", 2)[0].seq
    assert _names(page("f", "obj", merged_with="f:archive", as_of=f2))[-2:] == ["f1", "f2"]


def test_nonempty_memories_include_forks_that_only_inherit(client: pgmem.Client) -> None:
    client.messages.add_many("p", [Message(content="a"), Message(content="b")])
    client.fork("p", "p:fork")
    client.fork("p:fork", "p:fork:fork")
    client.messages.clear("p")  # the forks keep what they inherit (copied into the first one)
    client.fork("p", "p:empty")  # forked from an empty memory
    assert client.messages.memories(prefix="p", nonempty=True) == ["p:fork", "p:fork:fork"]
    assert client.messages.memories(nonempty=True) == ["p:fork", "p:fork:fork"]
    client.messages.add("p", Message(content="c"))
    assert client.messages.memories(prefix="p", nonempty=True) == ["p", "p:fork", "p:fork:fork"]  # p:empty sees none
    client.messages.clear("p:fork:fork")
    assert client.messages.memories(prefix="p:", nonempty=True) == ["p:fork"]


def _context_parts(ctx: pgmem.planning.context.Context) -> dict[str, list[str]]:
    parts: dict[str, list[str]] = {}
    for item in ctx.items:
        parts.setdefault(item.part, []).append(item.message.content)
    return parts


@pytest.mark.parametrize("known", [True, False], ids=["client-knows-the-fork", "another-client-forked"])
def test_a_forks_context_holds_what_it_inherits(client: pgmem.Client, dsn: str, known: bool) -> None:
    client.messages.add("p", Message(content="You are terse.", role="system"))
    client.messages.add("p", Message(content="profile: likes tea", metadata={"pinned": True}))
    client.messages.add_many(
        "p", [Message(content=f"old note {i} about zebras" if i == 3 else f"chat {i}") for i in range(40)]
    )
    client.mark("p", "forked-here")
    if known:
        client.fork("p", "f")
    else:
        with pgmem.connect(dsn, namespace="test") as other:  # this client never saw "f" made
            other.fork("p", "f")
    client.messages.add("p", Message(content="parent later, zebras too"))
    client.messages.add("p", Message(content="parent pinned later", metadata={"pinned": True}))
    client.messages.add_many("f", [Message(content=f"fork turn {i}") for i in range(3)])
    ctx = client.context("f", budget=120, query="zebras", related_share=0.9)
    parts = _context_parts(ctx)
    assert parts["pinned"] == ["You are terse.", "profile: likes tea"]
    assert parts["window"][-3:] == ["fork turn 0", "fork turn 1", "fork turn 2"]
    assert "chat 39" in parts["window"]  # inherited entries fill the window
    assert parts["related"] == ["old note 3 about zebras"]  # found among what it inherits, before the window
    every = [item.message.content for item in ctx.items]
    assert not any(c.startswith("parent") for c in every)
    # As of a point: the mark (the parent's, inherited), a sequence number; on the parent too.
    for memory in ("f", "p"):
        then = _context_parts(
            client.context(memory, budget=120, query="zebras", related_share=0.9, as_of="forked-here")
        )
        assert then["window"][-1] == "chat 39"
        assert then["related"] == ["old note 3 about zebras"]
        assert not any(c.startswith(("parent", "fork")) for p in then.values() for c in p)
    first = client.messages.at("p", 3)
    assert first is not None and first.seq is not None
    early = _context_parts(client.context("f", budget=1000, as_of=first.seq))
    assert early == {"pinned": ["You are terse.", "profile: likes tea"], "window": ["chat 0", "chat 1"]}
    nothing = client.context("f", budget=100, query="zebras", as_of=0)
    assert nothing.items == []
    with pytest.raises(pgmem.NotFound):
        client.context("f", budget=100, as_of="no-such-mark")
    with pytest.raises(pgmem.InvalidInput):
        client.context("f", budget=100, as_of=-1)


def test_a_forks_context_searches_its_lineage_with_a_model(client: pgmem.Client) -> None:
    client.vectors.enable("p")
    client.messages.add_many("p", [Message(content=f"filler message {i}") for i in range(30)])
    client.messages.add("p", Message(content="the zebra escaped from the zoo"))
    client.messages.add_many("p", [Message(content=f"more filler {i}") for i in range(30)])
    client.vectors.flush()
    client.fork("p", "f")
    client.messages.add("p", Message(content="a second zebra escaped later"))
    client.messages.add("f", Message(content="what escaped?"))
    client.vectors.flush()
    ctx = client.context("f", budget=80, query="zebra escaped", related_share=0.9)
    related = [i.message.content for i in ctx.items if i.part == "related"]
    assert "the zebra escaped from the zoo" in related
    assert all("second zebra" not in i.message.content for i in ctx.items)


def test_a_forks_summaries_are_its_parents_up_to_the_point_and_its_own(client: pgmem.Client, dsn: str) -> None:
    llm, policy = OfflineSummarizer(), CompressionPolicy(chunk=10, fanout=100)
    client.messages.add_many("p", [Message(content=f"early {i}") for i in range(25)])
    client.summaries.compress("p", llm, policy)
    parent_summaries = [(s.level, s.first_seq, s.last_seq) for s in client.summaries.list("p")]
    assert [level for level, _, _ in parent_summaries] == [1, 1]  # 20 of 25 entries summarised
    client.mark("p", "m")
    fork = client.fork("p", "f")
    # The parent goes on: its new summaries are not the fork's.
    client.messages.add_many("p", [Message(content=f"parent {i}") for i in range(10)])
    client.summaries.compress("p", llm, policy)
    assert len(client.summaries.list("p")) == 3
    assert [(s.level, s.first_seq, s.last_seq) for s in client.summaries.list("f")] == parent_summaries
    # The fork summarises what it inherits after them, then its own.
    client.messages.add_many("f", [Message(content=f"fork {i}") for i in range(10)])
    pending = [m.content for m in client.summaries.unsummarized("f")]
    assert pending[:1] == ["early 20"] and pending[-1] == "fork 9"
    # a page of them, across the fork's point (inherited, then its own), and after a sequence number
    assert [m.content for m in client.summaries.unsummarized("f", limit=7)] == pending[:7]
    seqs = [m.seq for m in client.summaries.unsummarized("f")]
    assert [m.content for m in client.summaries.unsummarized("f", limit=3, after_seq=seqs[4])] == pending[5:8]
    new = client.summaries.compress("f", llm, policy)
    assert new and new[0].first_seq <= fork.upto_seq < new[0].last_seq  # early 20..24 and fork 0..4
    assert "early 20" in new[0].content and "fork 4" in new[0].content and "parent" not in new[0].content
    ctx = client.context("f", budget=100, parts=("summary", "window"))  # the window leaves room for a summary
    summaries = [i for i in ctx.items if i.part == "summary"]
    fork_ranges = {(s.first_seq, s.last_seq) for s in client.summaries.list("f")}
    parent_only = {(s.first_seq, s.last_seq) for s in client.summaries.list("p")} - fork_ranges
    assert summaries and all(i.covers in fork_ranges for i in summaries)
    assert not any(i.covers in parent_only for i in summaries)
    assert all("parent" not in i.message.content for i in ctx.items)
    # The fork keeps its summaries when the parent goes; forgetting an inherited message stales them.
    client.messages.delete_oldest("f", 1)  # a removal: the fork takes its entries
    with psycopg.connect(dsn) as conn:
        conn.execute("DELETE FROM pgmem.memories WHERE namespace = 'test' AND key = 'p'")
    assert len(client.summaries.list("f")) == 3
    early3 = client.messages.by_content("f", "early 3")
    client.retention.forget([early3[0].id])
    assert [(s.first_seq, s.last_seq) for s in client.summaries.stale("f")] == [parent_summaries[0][1:]]


def test_forgetting_stales_a_lazy_forks_copied_summary(client: pgmem.Client) -> None:
    client.messages.add_many("p", [Message(content=f"early {i}") for i in range(10)])
    client.summaries.compress("p", OfflineSummarizer(), CompressionPolicy(chunk=10))
    client.fork("p", "f")
    client.fork("f", "g")
    victim = client.messages.by_content("p", "early 4")[0]
    client.retention.forget([victim.id])
    for memory in ("p", "f", "g"):
        assert len(client.summaries.stale(memory)) == 1, memory
        assert client.summaries.list(memory) == []
    rebuilt = client.summaries.recompute("g", OfflineSummarizer())
    assert len(rebuilt) == 1 and "early 4" not in rebuilt[0].content and "early 5" in rebuilt[0].content


def test_clearing_an_expired_brain_whose_history_is_a_fork(client: pgmem.Client, dsn: str) -> None:
    key = "chat:user:fork"
    history, _ = client.brains.keys(key)
    client.messages.add_many("p", [Message(content="inherited 1"), Message(content="inherited 2")])
    client.fork("p", history)
    client.brains.dump(key, history=[Message(content="own talk")])
    state = client.brains.load(key)
    assert state is not None
    assert [m.content for m in state.history] == ["inherited 1", "inherited 2", "own talk"]
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pgmem.brain_memories SET expires_at = now() - interval '1 second'")
    client.brains.dump(key, history=[Message(content="after expiry")])  # starts the brain over
    state = client.brains.load(key)
    assert state is not None
    assert [m.content for m in state.history] == ["after expiry"]
    assert [m.content for m in client.messages.last("p")] == ["inherited 1", "inherited 2"]
