"""pgmem.integrations.openmanus against the real Postgres: OpenManus's ``Message`` and sliding-window ``Memory``.

The window (``messages``, ``get_recent_messages``) is a view over durable rows: older messages stay in
the database unless the caller purges them, and the window never shows a tool result whose assistant
tool call is not in it (OpenManus issue 744: the OpenAI API rejects such a conversation).
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import psycopg
import pytest

import pgmem
from pgmem.integrations.openmanus import ROLE_VALUES, Function, Memory, Message, Role, ToolCall
from tests.conftest import table_counts


def _rows(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        messages = conn.execute("SELECT count(*) FROM pgmem.messages").fetchone()
        entries = conn.execute("SELECT count(*) FROM pgmem.memory_entries").fetchone()
    assert messages is not None and entries is not None
    return messages[0], entries[0]


def _call(call_id: str, name: str = "bash", arguments: str = "{}") -> ToolCall:
    return ToolCall(id=call_id, function=Function(name=name, arguments=arguments))


# -- Message -------------------------------------------------------------------------------------------


def test_roles() -> None:
    assert [r.value for r in Role] == ["system", "user", "assistant", "tool"]
    assert ROLE_VALUES == ("system", "user", "assistant", "tool")
    assert Message(role=Role.TOOL, content="x").role == "tool"
    with pytest.raises(ValueError):
        Message(role="robot", content="x")  # type: ignore[arg-type]


def test_factories() -> None:
    assert Message.user_message("hi", base64_image="aW1n").to_dict() == {
        "role": "user",
        "content": "hi",
        "base64_image": "aW1n",
    }
    assert Message.system_message("be brief").to_dict() == {"role": "system", "content": "be brief"}
    assert Message.assistant_message().to_dict() == {"role": "assistant"}
    assert Message.assistant_message("done").content == "done"
    tool = Message.tool_message("42", name="calc", tool_call_id="call_1")
    assert tool.to_dict() == {"role": "tool", "content": "42", "name": "calc", "tool_call_id": "call_1"}

    # from_tool_calls takes the LLM response's objects: anything with .id and .function.model_dump().
    raw = [
        SimpleNamespace(id="call_1", function=Function(name="calc", arguments='{"x": 1}')),
        SimpleNamespace(id="call_2", function=Function(name="search", arguments='{"q": "pg"}')),
    ]
    message = Message.from_tool_calls(raw, content=["thinking", "more"], name="manus")
    assert message.role == "assistant" and message.content == "thinking\nmore" and message.name == "manus"
    assert message.tool_calls == [
        _call("call_1", "calc", '{"x": 1}'),
        _call("call_2", "search", '{"q": "pg"}'),
    ]
    assert message.to_dict()["tool_calls"][1] == {
        "id": "call_2",
        "type": "function",
        "function": {"name": "search", "arguments": '{"q": "pg"}'},
    }
    assert Message.from_tool_calls(raw[:1]).content == ""


def test_plus_with_lists_and_messages() -> None:
    a, b, c = Message.user_message("a"), Message.user_message("b"), Message.user_message("c")
    assert a + [b, c] == [a, b, c]
    assert [a, b] + c == [a, b, c]
    assert a + b == [a, b]
    assert [] + a == [a] and a + [] == [a]
    for other in (1, "text", (b,), None):
        with pytest.raises(TypeError):
            a + other  # type: ignore[operator]
        with pytest.raises(TypeError):
            other + a  # type: ignore[operator]


# -- Memory: round trips ---------------------------------------------------------------------------------


def test_every_kind_of_message_round_trips(client: pgmem.Client) -> None:
    sent = [
        Message.system_message("You are Manus"),
        Message.user_message("Look at this", base64_image="iVBORw0KGgo="),
        Message(role="assistant", content=None, tool_calls=[_call("call_1", "browser", '{"url": "x"}')]),
        Message.tool_message("page text", name="browser", tool_call_id="call_1", base64_image="c2NyZWVu"),
        Message.assistant_message(""),
        Message.assistant_message("naïve ✓ 日本語 🎉"),
    ]
    memory = Memory("agent:manus", client=client)
    for m in sent:
        memory.add_message(m)
    got = memory.messages
    assert got == sent
    assert got[2].content is None and got[4].content == ""
    assert got[1].base64_image == "iVBORw0KGgo=" and got[3].base64_image == "c2NyZWVu"
    assert isinstance(got[2].tool_calls[0], ToolCall)  # type: ignore[index]
    assert memory.to_dict_list() == [m.to_dict() for m in sent]
    assert memory.to_dict_list()[2] == {
        "role": "assistant",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "browser", "arguments": '{"url": "x"}'}}
        ],
    }
    assert len(memory) == len(sent)


def test_add_messages_keeps_order_and_is_all_or_nothing(client: pgmem.Client, dsn: str) -> None:
    memory = Memory(client=client)
    memory.add_messages([Message.user_message(f"m{i}") for i in range(5)])
    before = table_counts(dsn)
    with pytest.raises(pgmem.InvalidInput):
        memory.add_messages([Message.user_message("fine"), Message.user_message("nul \x00 byte")])
    with pytest.raises(pgmem.InvalidInput):
        memory.add_message(Message.user_message("lone \ud800 surrogate"))
    with pytest.raises(pgmem.InvalidInput):
        memory.add_message({"role": "user", "content": "a dict"})  # type: ignore[arg-type]
    assert table_counts(dsn) == before
    assert [m.content for m in memory.messages] == [f"m{i}" for i in range(5)]


def test_the_same_message_added_twice_is_two_messages(client: pgmem.Client) -> None:
    memory = Memory(client=client)
    m = Message.user_message("again")
    memory.add_message(m)
    memory.add_message(m)
    memory.add_messages([m, m])
    assert [x.content for x in memory.messages] == ["again"] * 4  # OpenManus appends to a list


def test_get_recent_messages(client: pgmem.Client) -> None:
    memory = Memory(client=client, max_messages=4)
    memory.add_messages([Message.user_message(f"m{i}") for i in range(6)])
    recent = memory.get_recent_messages
    assert [m.content for m in recent(1)] == ["m5"]
    assert [m.content for m in recent(3)] == ["m3", "m4", "m5"]
    assert [m.content for m in recent(4)] == ["m2", "m3", "m4", "m5"]
    assert [m.content for m in recent(100)] == ["m2", "m3", "m4", "m5"]  # never beyond the window
    assert recent(0) == memory.messages  # OpenManus's messages[-0:] is everything
    assert [m.content for m in recent(-1)] == ["m3", "m4", "m5"]  # messages[1:], as OpenManus slices
    assert recent(-9) == []
    for bad in (1.5, "2", True, None):
        with pytest.raises(pgmem.InvalidInput):
            recent(bad)  # type: ignore[arg-type]
    for bad_max in (0, -3, 2.0, True):
        with pytest.raises(pgmem.InvalidInput):
            Memory(client=client, max_messages=bad_max)  # type: ignore[arg-type]


def test_clear_deletes_the_rows(client: pgmem.Client, dsn: str) -> None:
    memory = Memory(client=client)
    other = Memory(client=client)
    memory.add_messages([Message.user_message("a"), Message.user_message("b")])
    other.add_message(Message.user_message("kept"))
    memory.clear()
    assert memory.messages == [] and memory.to_dict_list() == []
    assert _rows(dsn) == (1, 1)
    assert [m.content for m in other.messages] == ["kept"]


# -- Memory: the window is a view -------------------------------------------------------------------------


def test_older_messages_stay_in_the_database(client: pgmem.Client, dsn: str) -> None:
    memory = Memory("agent:a", client=client, max_messages=3)
    for i in range(10):
        memory.add_message(Message.user_message(f"m{i}"))
    assert [m.content for m in memory.messages] == ["m7", "m8", "m9"]
    assert _rows(dsn) == (10, 10)
    # A wider window on the same key sees the history.
    assert len(Memory("agent:a", client=client, max_messages=100).messages) == 10

    assert memory.purge() == 7
    assert _rows(dsn) == (3, 3)
    assert memory.purge() == 0
    assert [m.content for m in Memory("agent:a", client=client).messages] == ["m7", "m8", "m9"]


def test_purge_true_deletes_what_leaves_the_window(client: pgmem.Client, dsn: str) -> None:
    memory = Memory("agent:p", client=client, max_messages=2, purge=True)
    for i in range(5):
        memory.add_message(Message.user_message(f"m{i}"))
        assert _rows(dsn) == (min(i + 1, 2), min(i + 1, 2))
    memory.add_messages([Message.user_message(f"b{i}") for i in range(4)])
    assert _rows(dsn) == (2, 2)
    assert [m.content for m in memory.messages] == ["b2", "b3"]


def test_two_memories_on_one_key_share_messages(client: pgmem.Client, dsn: str) -> None:
    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=1) as second_client:
        mine = Memory("agent:shared", client=client, max_messages=10)
        theirs = Memory("agent:shared", client=second_client, max_messages=2)
        mine.add_message(Message.user_message("from me"))
        theirs.add_message(Message.assistant_message("from them"))
        mine.add_message(Message.user_message("me again"))
        assert [m.content for m in mine.messages] == ["from me", "from them", "me again"]
        assert [m.content for m in theirs.messages] == ["from them", "me again"]
        theirs.clear()
        assert mine.messages == []


def test_default_client(default_client_env: str) -> None:
    Memory("agent:default").add_message(Message.user_message("via the environment"))
    with pgmem.connect(default_client_env, namespace="default") as client:
        assert [m.content for m in Memory("agent:default", client=client).messages] == ["via the environment"]


# -- the window never starts with an orphaned tool result (OpenManus issue 744) ----------------------------


def test_window_drops_tool_results_whose_call_fell_outside(client: pgmem.Client) -> None:
    conversation = [
        Message.user_message("find the bug"),
        Message(role="assistant", content=None, tool_calls=[_call("c1"), _call("c2")]),
        Message.tool_message("out 1", name="bash", tool_call_id="c1"),
        Message.tool_message("out 2", name="bash", tool_call_id="c2"),
        Message.assistant_message("found it"),
    ]
    memory = Memory(client=client, max_messages=100)
    memory.add_messages(conversation)
    windows = {n: [m.content for m in Memory(memory.key, client=client, max_messages=n).messages] for n in range(1, 6)}
    assert windows == {
        1: ["found it"],
        2: ["found it"],  # "out 2" without its assistant call is dropped
        3: ["found it"],
        4: [None, "out 1", "out 2", "found it"],
        5: ["find the bug", None, "out 1", "out 2", "found it"],
    }


def test_window_drops_an_orphan_after_an_interleaved_message(client: pgmem.Client) -> None:
    """Agents sharing a memory interleave: another agent's message can land between an assistant's tool
    results. A window starting there begins with that message, and the tool result after it is still
    an orphan."""
    conversation = [
        Message(role="assistant", content="two calls", tool_calls=[_call("c1"), _call("c2")]),
        Message.tool_message("out 1", name="bash", tool_call_id="c1"),
        Message.user_message("a message from another agent"),
        Message.tool_message("out 2", name="bash", tool_call_id="c2"),
        Message.assistant_message("done"),
    ]
    memory = Memory(client=client, max_messages=3)
    memory.add_messages(conversation)
    assert [m.content for m in memory.messages] == ["a message from another agent", "done"]
    assert [m.content for m in memory.get_recent_messages(2)] == ["done"]
    assert len(Memory(memory.key, client=client, max_messages=5).messages) == 5


def _conversation(rng: random.Random, turns: int) -> list[Message]:
    """A random agent conversation: user turns, plain answers, and assistant tool calls whose results
    follow in any order, sometimes with another agent's message between them."""
    messages: list[Message] = []
    if rng.random() < 0.5:
        messages.append(Message.system_message("system prompt"))
    call = 0
    for turn in range(turns):
        kind = rng.random()
        if kind < 0.25:
            messages.append(Message.user_message(f"user {turn}"))
        elif kind < 0.4:
            messages.append(Message.assistant_message(f"answer {turn}"))
        else:
            calls = []
            for _ in range(rng.randint(1, 3)):
                call += 1
                calls.append(_call(f"call_{call}", rng.choice(["bash", "browser", "python"])))
            messages.append(Message(role="assistant", content=rng.choice([None, f"plan {turn}"]), tool_calls=calls))
            results = list(calls)
            rng.shuffle(results)
            for c in results:
                if rng.random() < 0.15:
                    messages.append(Message.user_message(f"interjection {turn}"))
                messages.append(Message.tool_message(f"result of {c.id}", name=c.function.name, tool_call_id=c.id))
    return messages


def _expected_window(conversation: list[Message], n: int) -> list[Message]:
    """The README's rule: the last n messages; a tool result counts when its call is earlier in them (the
    first result of a call), and follows its call, in the order of the calls; an assistant message shows
    its answered calls only, and is left out when it has neither content nor an answered call."""
    window = conversation[-n:]
    called: set[str] = set()
    answers: dict[str, Message] = {}
    for m in window:
        if m.role == "tool":
            if m.tool_call_id in called and m.tool_call_id not in answers:
                answers[m.tool_call_id] = m  # type: ignore[index]
        else:
            called.update(c.id for c in m.tool_calls or [])
    kept: list[Message] = []
    for m in window:
        if m.role == "tool":
            continue
        if m.tool_calls:
            answered = [c for c in m.tool_calls if c.id in answers]
            if not answered and not m.content:
                continue
            kept.append(m.model_copy(update={"tool_calls": answered or None}))
            kept.extend(answers[c.id] for c in answered)
        else:
            kept.append(m)
    return kept


def _check_window(window: list[Message]) -> None:
    """What the OpenAI chat API requires of tool messages: each answers a call of the assistant message
    right before its block, and every call of that message is answered before anything else."""
    pending: list[str] = []
    for m in window:
        if m.role == "tool":
            assert m.tool_call_id in pending, f"tool result {m.tool_call_id} does not follow its call"
            pending.remove(m.tool_call_id)  # type: ignore[arg-type]
            continue
        assert not pending, f"calls {pending} unanswered before the next message"
        pending = [c.id for c in m.tool_calls or []]
    assert not pending


def test_no_window_ever_starts_with_or_holds_an_orphaned_tool_result(client: pgmem.Client) -> None:
    rng = random.Random(744)
    for case in range(12):
        conversation = _conversation(rng, rng.randint(3, 10))
        key = f"agent:case{case}"
        # Half the conversations arrive in one batch, the others message by message.
        if case % 2:
            Memory(key, client=client).add_messages(conversation)
        else:
            for m in conversation:
                Memory(key, client=client).add_message(m)
        for n in range(1, len(conversation) + 2):
            memory = Memory(key, client=client, max_messages=n)
            window = memory.messages
            _check_window(window)
            assert window == _expected_window(conversation, n), (case, n)
            assert memory.to_dict_list() == [m.to_dict() for m in window]
            k = rng.randint(1, n)
            recent = memory.get_recent_messages(k)
            _check_window(recent)
            assert recent == _expected_window(conversation, k)


# -- messages is assignable, and Memory is a pydantic model -----------------------------------------------


def test_assigning_an_extension_of_the_window_appends(client: pgmem.Client, dsn: str) -> None:
    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=1) as second_client:
        mine = Memory("agent:assign", client=client, max_messages=3)
        theirs = Memory("agent:assign", client=second_client)
        mine.add_messages([Message.user_message(f"m{i}") for i in range(5)])
        window = mine.messages
        assert [m.content for m in window] == ["m2", "m3", "m4"]
        theirs.add_message(Message.user_message("from them"))  # lands after mine read its window
        mine.messages = window + [Message.assistant_message("mine")]  # what `messages += [...]` does
        everything = [m.content for m in theirs.messages]
        assert everything == ["m0", "m1", "m2", "m3", "m4", "from them", "mine"]  # nothing lost or repeated
        mine.messages += [Message.user_message("again")]
        assert [m.content for m in theirs.messages][-2:] == ["mine", "again"]


def test_assigning_another_list_replaces_the_contents(client: pgmem.Client, dsn: str) -> None:
    memory = Memory("agent:replace", client=client, max_messages=3)
    memory.add_messages([Message.user_message(f"m{i}") for i in range(5)])
    memory.messages = memory.messages[1:]  # drops m2 and the history before the window
    assert [m.content for m in Memory("agent:replace", client=client, max_messages=10).messages] == ["m3", "m4"]
    memory.messages = []
    assert Memory("agent:replace", client=client).messages == []
    before = table_counts(dsn)
    memory.messages = [Message.user_message("kept")]
    after = table_counts(dsn)
    for bad in ("text", None, 3, [Message.user_message("fine"), "not a message"], [Message.user_message("\x00")]):
        with pytest.raises(pgmem.InvalidInput):
            memory.messages = bad  # type: ignore[assignment]
    assert table_counts(dsn) == after != before
    assert [m.content for m in memory.messages] == ["kept"]


def test_memory_is_a_pydantic_field(client: pgmem.Client) -> None:
    from pydantic import BaseModel, ConfigDict, Field

    class Agent(BaseModel):
        model_config = ConfigDict(arbitrary_types_allowed=True)
        memory: Memory = Field(default_factory=lambda: Memory(client=client, max_messages=4))

    agent = Agent()
    agent.memory.messages += [Message.user_message("hi")]
    assert agent.model_dump()["memory"]["messages"] == [Message.user_message("hi").model_dump()]
    assert agent.memory.model_dump(include={"messages", "max_messages"}) == {
        "messages": [Message.user_message("hi").model_dump()],
        "max_messages": 4,
    }
    seeded = Memory(client=client, messages=[Message.system_message("be brief"), Message.user_message("go")])
    assert [m.content for m in Memory(seeded.key, client=client).messages] == ["be brief", "go"]
    assert Memory(seeded.key, client=client)  # truthy even when the window is empty, as OpenManus's
    assert bool(Memory(client=client)) and len(Memory(client=client)) == 0


def test_messages_come_back_as_the_callers_class(client: pgmem.Client) -> None:
    from pydantic import BaseModel

    class Chat(BaseModel):  # a message class of the caller's own, OpenAI-shaped
        role: str
        content: str | None = None
        tool_calls: list[ToolCall] | None = None
        tool_call_id: str | None = None

    memory = Memory(client=client)
    memory.add_message(Chat(role="assistant", tool_calls=[_call("c1")]))
    memory.add_message(Chat(role="tool", content="out", tool_call_id="c1"))
    back = memory.messages
    assert [type(m) for m in back] == [Chat, Chat]
    assert back[0].content is None and isinstance(back[0].tool_calls[0], ToolCall)  # type: ignore[index]


@pytest.mark.slow
def test_processes_appending_by_assignment_lose_nothing(dsn: str) -> None:
    """Two processes each run `messages += [msg]` 40 times on one memory: all 80 messages are stored,
    once each, in each process's order."""
    import multiprocessing

    from tests.integration.openmanus_workers import append_by_assignment

    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=append_by_assignment, args=(dsn, "agent:race", n, 40, start)) for n in ("a", "b")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with pgmem.connect(dsn, namespace="test") as client:
        contents = [m.content for m in Memory("agent:race", client=client, max_messages=1000).messages]
    assert sorted(contents) == sorted(f"{n} {i}" for n in "ab" for i in range(40))
    for name in "ab":
        assert [c for c in contents if c.startswith(name)] == [f"{name} {i}" for i in range(40)]


def test_the_context_under_a_budget_comes_back_as_openmanus_messages(client: pgmem.Client) -> None:
    memory = Memory("agent:ctx", client=client)
    sent = [Message.system_message("You are Manus")]
    for i in range(20):
        sent += [Message.user_message(f"step {i}: open the page"), Message.assistant_message(f"opened page {i}")]
    sent += [
        Message(role="assistant", content=None, tool_calls=[_call("call_9", "browser", '{"url": "x"}')]),
        Message.tool_message("page text", name="browser", tool_call_id="call_9"),
    ]
    memory.add_messages(sent)
    got = memory.context(60)
    assert got[0] == sent[0] and got[-2:] == sent[-2:]  # the system prompt, the call with its result
    assert all(m in sent for m in got) and len(got) < len(sent)
    assert memory.context(100_000) == sent
