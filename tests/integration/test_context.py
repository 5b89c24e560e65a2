"""``client.context``: the context for the next turn under a token budget, read in one statement from
real Postgres (issue 36, item 1). The rules themselves are property-tested in
tests/unit/test_context_rules.py; here the statement feeds them."""

from __future__ import annotations

import random
from typing import Any

import pytest

import pgmem
from pgmem import Message
from pgmem.errors import InvalidInput
from pgmem.summarizer import CompressionPolicy, OfflineSummarizer


def _conversation(client: pgmem.Client, memory: str = "chat", turns: int = 60) -> None:
    client.messages.add(memory, Message(content="You are a careful assistant.", role="system"))
    client.messages.add(memory, Message(content="The user is called Ada.", metadata={"pinned": True}))
    for i in range(turns):
        client.messages.add(memory, Message(content=f"question {i}: how do ladders work in game {i}?", role="user"))
        if i % 10 == 9:
            calls = [{"id": f"call{i}", "type": "function", "function": {"name": "rules", "arguments": "{}"}}]
            client.messages.add(memory, Message(content="", role="assistant", tool_calls=calls))
            client.messages.add(memory, Message(content=f"rules of game {i}", role="tool", tool_call_id=f"call{i}"))
        client.messages.add(memory, Message(content=f"answer {i}: climb the ladder in game {i}", role="assistant"))


def _invariants(ctx: pgmem.planning.context.Context, budget: int, reserve: int = 0) -> None:
    assert ctx.tokens == sum(i.tokens for i in ctx.items) <= budget - reserve
    calls = {c["id"] for m in ctx.messages for c in (m.tool_calls or [])}
    results = {m.tool_call_id for m in ctx.messages if m.tool_call_id}
    assert calls == results
    parts = [i.part for i in ctx.items]
    assert parts == sorted(parts, key=["pinned", "summary", "related", "window"].index)
    window = [i.seq for i in ctx.items if i.part == "window"]
    assert window == sorted(window)


def test_a_context_holds_pins_summary_related_and_the_newest_turns(client: pgmem.Client) -> None:
    _conversation(client)
    client.summaries.compress("chat", OfflineSummarizer(), CompressionPolicy(chunk=20))
    client.vectors.enable("chat")
    client.vectors.flush()
    budget = 400
    ctx = client.context("chat", budget=budget, query="ladders in game 3", reserve=50)
    _invariants(ctx, budget, 50)
    contents = [m.content for m in ctx.messages]
    assert contents[:2] == ["You are a careful assistant.", "The user is called Ada."]
    assert {i.part for i in ctx.items} == {"pinned", "summary", "related", "window"}
    assert contents[-1] == "answer 59: climb the ladder in game 59"  # the newest turn
    related = [i for i in ctx.items if i.part == "related"]
    window_start = min(i.seq for i in ctx.items if i.part == "window")
    assert related and all(i.seq < window_start for i in related)
    assert any("game 3?" in i.message.content or "game 3 " in i.message.content for i in related)
    summary = [i for i in ctx.items if i.part == "summary"]
    assert summary and all(i.covers is not None and i.covers[1] < window_start for i in summary)
    assert summary[0].message.role == "system" and summary[0].message.metadata["pgmem_summary"]["level"] >= 1
    frontier = [(f.first_seq, f.last_seq, f.content) for f in client.summaries.frontier("chat")]
    usable = [f for f in frontier if f[1] < window_start]
    assert [(*i.covers, i.message.content) for i in summary] == usable[-len(summary) :]  # the newest of them
    assert ctx.parts["window"].dropped.get("budget", 0) > 0
    assert [m["role"] for m in ctx.as_openai()][:2] == ["system", "user"]
    # the same data, the same context
    assert client.context("chat", budget=budget, query="ladders in game 3", reserve=50) == ctx


def test_without_a_model_related_messages_come_from_keywords(client: pgmem.Client) -> None:
    _conversation(client, turns=30)
    ctx = client.context("chat", budget=200, query="game 4")
    related = [i.message.content for i in ctx.items if i.part == "related"]
    assert related and all("4" in text for text in related[:1])
    assert "related" not in client.context("chat", budget=200).parts or not [
        i for i in client.context("chat", budget=200).items if i.part == "related"
    ]


def test_parts_can_be_chosen_and_a_huge_budget_takes_everything(client: pgmem.Client) -> None:
    _conversation(client, turns=10)
    everything = client.context("chat", budget=1_000_000)
    assert len([i for i in everything.items if i.part == "window"]) == client.messages.count("chat") - 2
    only_window = client.context("chat", budget=100, parts=("window",))
    assert {i.part for i in only_window.items} == {"window"}
    assert only_window.messages[-1].content == "answer 9: climb the ladder in game 9"
    tiny = client.context("chat", budget=5)
    assert tiny.items == [] or tiny.tokens <= 5
    empty = client.context("nothing-here", budget=100, query="anything")
    assert empty.items == [] and empty.tokens == 0


def test_a_random_conversation_keeps_the_rules(client: pgmem.Client) -> None:
    rng = random.Random(7)
    for i in range(300):
        kind = rng.choice(["user", "assistant", "call", "tool-orphan", "system"])
        if kind == "call":
            ids = [f"c{i}_{j}" for j in range(rng.randint(1, 3))]
            client.messages.add("r", Message(content="", role="assistant", tool_calls=[{"id": x} for x in ids]))
            for x in ids[: rng.randint(0, len(ids))]:
                client.messages.add("r", Message(content="x" * rng.randint(1, 200), role="tool", tool_call_id=x))
        elif kind == "tool-orphan":
            client.messages.add("r", Message(content="late", role="tool", tool_call_id=f"gone{i}"))
        else:
            client.messages.add("r", Message(content="word " * rng.randint(1, 80), role=kind))
    for budget in (1, 10, 100, 1000, 5000):
        _invariants(client.context("r", budget=budget, query="word"), budget)


def test_one_statement_once_the_client_knows_the_memory(client: pgmem.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgmem._sync import scope

    _conversation(client, turns=5)
    client.vectors.enable("chat")
    client.vectors.flush()
    client.context("chat", budget=300, query="ladders")  # learns the model, the counts
    run, statements = scope.rows, []

    def spy(*args: Any, **kwargs: Any) -> Any:
        statements.append(args[2])
        return run(*args, **kwargs)

    monkeypatch.setattr(scope, "rows", spy)
    client.context("chat", budget=300, query="ladders")
    assert len(statements) == 1


def _digest(ctx: pgmem.planning.context.Context) -> list[tuple[str, str, int, int]]:
    return [(i.part, i.message.id, i.seq, i.tokens) for i in ctx.items] + [
        (p, str(sorted(r.dropped.items())), r.kept, r.tokens) for p, r in sorted(ctx.parts.items())
    ]


def test_the_summary_part_is_the_newest_of_the_frontier_with_stale_summaries(client: pgmem.Client) -> None:
    """The statement finds the frontier in one pass (a summary is covered when the live summaries of the
    next level reach it); with summaries stale after a forget (their children take their place) and a
    level built only in part, it is still the frontier ``client.summaries.frontier`` gives."""
    client.messages.add_many("s", [Message(content=f"turn {i} of the long talk", role="user") for i in range(230)])
    client.summaries.compress("s", OfflineSummarizer(), CompressionPolicy(chunk=5, fanout=3, max_level=4))
    victim = client.messages.by_content("s", "turn 52 of the long talk")[0]
    client.retention.forget([victim.id])  # stales the summaries over it at every level
    assert client.summaries.stale("s")
    frontier = [(f.first_seq, f.last_seq) for f in client.summaries.frontier("s")]
    for budget in (60, 150, 400, 1500, 6000):
        ctx = client.context("s", budget=budget, parts=("summary", "window"))
        start = min(i.seq for i in ctx.items if i.part == "window")
        got = [i.covers for i in ctx.items if i.part == "summary"]
        usable = [f for f in frontier if f[1] < start]
        assert got == usable[len(usable) - len(got) :], budget  # the newest of them, in order
        assert len(got) == len(usable) or ctx.parts["summary"].dropped.get("budget"), budget
    # What the statement reads: the frontier's summaries ending before the window's newest entry
    from pgmem.planning.context_sql import context_statement

    text = context_statement(("summary", "window"), None, "exact")
    for window in (1, 20, 200):
        params = {"ns": client.namespace, "memory": "s", "upto": None, "window_max": window, "window_tokens": 10**6}
        rows = client.executor.rows(text, params)
        newest = max(r[1] for r in rows if r[0] == "window")
        read = sorted((r[3], r[4]) for r in rows if r[0] == "summary")
        before = [f for f in frontier if f[1] < newest]
        assert read == before[-(32 + window) :] and read, window


def test_pinned_messages_are_found_either_way(client: pgmem.Client) -> None:
    """The pinned part probes the namespace's pinned candidates when they are few against the memory, and
    walks the memory's entries when they are many: the same messages either way, in order."""
    _conversation(client, "small", turns=3)
    for i in range(40):  # system prompts elsewhere in the namespace
        client.messages.add(f"other{i}", Message(content=f"You are agent {i}.", role="system"))
    client.messages.add("small", Message(content="Keep answers short.", role="system"))
    # 43 candidates in the namespace, 9 entries in the memory: its entries are walked
    ctx = client.context("small", budget=10_000, parts=("pinned",))
    assert [m.content for m in ctx.messages] == [
        "You are a careful assistant.",
        "The user is called Ada.",
        "Keep answers short.",
    ]
    _conversation(client, "big", turns=60)  # 45 candidates, 134 entries: the candidates are probed
    ctx = client.context("big", budget=10_000, parts=("pinned",))
    assert [m.content for m in ctx.messages] == ["You are a careful assistant.", "The user is called Ada."]
    odd = ("it's", 'a "b"', "x,y", "{z}", "back\\slash")
    for role in odd:
        client.messages.add("roles", Message(content=f"as {role}", role=role))
    client.messages.add("roles", Message(content="plain", role="user"))
    ctx = client.context("roles", budget=1000, parts=("pinned",), pinned_roles=odd)
    assert [m.content for m in ctx.messages] == [f"as {role}" for role in odd]


def test_a_context_never_depends_on_the_last_one(client: pgmem.Client, dsn: str) -> None:
    """The window is read up to what the memory's last context predicts the budget holds (long messages: a
    few): when its messages turn short, the read that cap allows is not enough and the context reads on,
    so it equals what a client that never saw the memory builds."""
    for i in range(30):
        client.messages.add("shape", Message(content="long " * 200 + str(i), role="user"))
    client.context("shape", budget=2000)  # learns: about 250 tokens a message
    for i in range(300):
        client.messages.add("shape", Message(content=f"ok {i}", role="assistant"))
    seen = client.context("shape", budget=2000)
    with pgmem.connect(dsn, namespace=client.namespace) as fresh:
        assert _digest(seen) == _digest(fresh.context("shape", budget=2000))
    assert seen.parts["window"].kept > 150


def test_a_window_of_cjk_text_fills_its_budget(client: pgmem.Client) -> None:
    """The window is read by an estimate of each message's tokens; under pgmem's own tokenizer that is its
    count, so text of 3-byte characters fills the budget (estimated for tiktoken, it filled two thirds)."""
    from pgmem.summarizer import get_tokenizer

    if not get_tokenizer().name.startswith("approx"):
        pytest.skip("tiktoken counts these messages differently; the estimate's margin covers it")
    for i in range(100):
        client.messages.add("cjk", Message(content="漢字" * 30 + str(i % 10), role="user"))  # 181 bytes: 50 tokens
    ctx = client.context("cjk", budget=1000, parts=("window",))
    assert ctx.parts["window"].kept == 20 and ctx.tokens == 1000


def test_a_context_in_the_callers_transaction_leaves_its_settings(client: pgmem.Client) -> None:
    """On its own connections a context without a query runs with a generic plan (a setting local to its
    transaction); in the caller's transaction that setting would outlive the call, so it is not made."""
    _conversation(client, turns=3)
    with client.transaction() as conn:
        ctx = client.context("chat", budget=200, connection=conn)
        assert ctx.parts["window"].kept > 0
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)


async def test_async_context(aclient: pgmem.AsyncClient) -> None:
    await aclient.messages.add("chat", Message(content="system prompt", role="system"))
    await aclient.messages.add("chat", Message(content="hello there", role="user"))
    ctx = await aclient.context("chat", budget=50, query="hello")
    assert [i.part for i in ctx.items] == ["pinned", "window"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"budget": 0},
        {"budget": 10, "reserve": 10},
        {"budget": 10, "parts": ("everything",)},
        {"budget": 10, "query": "   "},
        {"budget": 10, "query": "a\x00b"},
        {"budget": 10, "related_share": 2},
        {"budget": 10, "pinned_roles": "system"},
    ],
)
def test_bad_input_is_invalid_input(client: pgmem.Client, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        client.context("chat", **kwargs)
    with pytest.raises(InvalidInput):
        client.context("bad key with spaces", budget=10)
