"""The rules that choose a context under a token budget (:mod:`pgmem.planning.context`), as properties:
never over budget, no tool call without all its results nor a result without its call, conversation order
kept, a window without holes, the same context for the same data."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgmem.errors import InvalidInput
from pgmem.models import Message
from pgmem.planning.context import PARTS, Candidate, Context, check_context_args, choose


@st.composite
def conversations(draw: Any) -> tuple[list[Candidate], dict[str, Any]]:
    """Window candidates with tool calls (some answered, some not, some results orphaned), pinned messages,
    summaries ending before various points, and scored related messages older than the window."""
    seq = 1000
    window: list[Candidate] = []
    for i in range(draw(st.integers(0, 40))):
        seq += 1
        kind = draw(st.sampled_from(["user", "assistant", "call", "orphan"]))
        tokens = draw(st.integers(1, 60))
        if kind == "call":
            ids = [f"c{i}_{j}" for j in range(draw(st.integers(1, 3)))]
            call = Message(content="", role="assistant", tool_calls=[{"id": x, "type": "function"} for x in ids])
            window.append(Candidate("window", call, seq, tokens))
            answered = draw(st.integers(0, len(ids)))
            for x in ids[:answered]:
                seq += 1
                result = Message(content="r", role="tool", tool_call_id=x)
                window.append(Candidate("window", result, seq, draw(st.integers(1, 30))))
        elif kind == "orphan":
            window.append(Candidate("window", Message(content="r", role="tool", tool_call_id=f"gone{i}"), seq, tokens))
        else:
            window.append(Candidate("window", Message(content=f"m{i}", role=kind), seq, tokens))
    pinned = [
        Candidate("pinned", Message(content=f"p{i}", role="system"), 10 + i, draw(st.integers(1, 50)))
        for i in range(draw(st.integers(0, 3)))
    ]
    summaries = []
    start = 100
    for i in range(draw(st.integers(0, 4))):
        end = start + draw(st.integers(1, 400))
        summary = Message(id=f"summary:{i}", content=f"s{i}", role="system")
        summaries.append(Candidate("summary", summary, end, draw(st.integers(1, 80)), None, (start, end)))
        start = end + 1
    related = [
        Candidate("related", Message(content=f"r{i}", role="user"), 500 + i, draw(st.integers(1, 40)), 1.0 / (i + 1))
        for i in range(draw(st.integers(0, 8)))
    ]
    args = {
        "budget": draw(st.integers(1, 1500)),
        "related_k": draw(st.integers(0, 6)),
        "related_share": draw(st.sampled_from([0.0, 0.25, 0.5, 1.0])),
        "parts": tuple(p for p in PARTS if draw(st.booleans())) or PARTS,
    }
    args["reserve"] = draw(st.integers(0, args["budget"] - 1))
    return pinned + summaries + related + window, args


def _check(ctx: Context, candidates: list[Candidate], args: dict[str, Any]) -> None:
    assert ctx.tokens == sum(i.tokens for i in ctx.items) <= args["budget"] - args["reserve"]
    parts = [i.part for i in ctx.items]
    assert parts == sorted(parts, key=PARTS.index), "parts out of order"
    assert all(i.part in args["parts"] for i in ctx.items)
    for part in PARTS:
        seqs = [i.seq for i in ctx.items if i.part == part]
        assert seqs == sorted(seqs), f"{part} out of conversation order"
    ids = [i.message.id for i in ctx.items]
    assert len(ids) == len(set(ids)), "a message twice"
    messages = [i.message for i in ctx.items]
    calls = {x["id"] for m in messages for x in (m.tool_calls or [])}
    results = {m.tool_call_id for m in messages if m.tool_call_id}
    assert results <= calls, "a tool result without its call"
    assert calls <= results, "a tool call without all its results"
    window = [c for c in candidates if c.part == "window"]
    kept = [i.seq for i in ctx.items if i.part == "window"]
    if kept:  # no hole: every complete unit between the window's first message and the end is in it
        first = kept[0]
        later = [c for c in window if c.seq >= first]
        complete = {c.seq for c in later if c.message.tool_call_id is None and not c.message.tool_calls}
        assert complete <= set(kept), "the window has a hole"
    for item in ctx.items:
        if item.part == "summary":
            assert item.covers is not None and (not kept or item.covers[1] < kept[0])
    for part, report in ctx.parts.items():
        assert report.kept == sum(1 for i in ctx.items if i.part == part)


@settings(max_examples=400, deadline=None)
@given(conversations())
def test_a_context_keeps_every_rule(drawn: tuple[list[Candidate], dict[str, Any]]) -> None:
    candidates, args = drawn
    ctx = choose(candidates, **args)
    _check(ctx, candidates, args)
    assert choose(list(candidates), **args) == ctx  # deterministic


def test_the_newest_turn_comes_before_older_ones_and_a_summary_replaces_the_oldest() -> None:
    window = [Candidate("window", Message(content=f"m{i}", role="user"), 1000 + i, 10) for i in range(10)]
    summary = Candidate("summary", Message(id="summary:1", content="s", role="system"), 999, 25, None, (1, 999))
    ctx = choose([summary, *window], budget=100)
    assert [i.part for i in ctx.items] == ["summary"] + ["window"] * 7
    assert [i.seq for i in ctx.items if i.part == "window"] == list(range(1003, 1010))
    assert ctx.parts["window"].dropped == {"budget": 3}
    alone = choose([summary, *window], budget=100, parts=("window",))
    assert [i.seq for i in alone.items] == list(range(1000, 1010))


def test_a_call_travels_with_its_results_or_not_at_all() -> None:
    call = Message(content="", role="assistant", tool_calls=[{"id": "a"}, {"id": "b"}])
    ra, rb = Message(content="A", role="tool", tool_call_id="a"), Message(content="B", role="tool", tool_call_id="b")
    last = Message(content="done", role="assistant")
    rows = [Candidate("window", m, 10 + i, 10) for i, m in enumerate([call, ra, rb, last])]
    assert [i.message for i in choose(rows, budget=40).items] == [call, ra, rb, last]
    assert [i.message for i in choose(rows, budget=39).items] == [last]  # the unit of 30 does not fit
    missing = choose(rows[:2] + rows[3:], budget=100)
    assert [i.message for i in missing.items] == [last]
    assert missing.parts["window"].dropped == {"tool call without all its results": 2}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 0, 5, 0.25, ("window",)), "budget"),
        ((10, 10, 5, 0.25, ("window",)), "reserve"),
        ((10, 0, -1, 0.25, ("window",)), "related_k"),
        ((10, 0, 5, 1.5, ("window",)), "related_share"),
        ((10, 0, 5, 0.25, ("windows",)), "parts"),
        ((10, 0, 5, 0.25, ()), "parts"),
        ((True, 0, 5, 0.25, ("window",)), "budget"),
    ],
)
def test_bad_arguments_are_invalid_input(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        check_context_args(*args)
