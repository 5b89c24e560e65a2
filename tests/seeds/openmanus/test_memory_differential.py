"""OpenManus 0.1.0's ``app.schema.Memory`` and pgmem's, driven by the same random operation sequences.

Where OpenManus's window is a conversation the chat API accepts, pgmem's is the same list of the same
``app.schema.Message`` objects. The documented differences (README, "OpenManus's Memory"):

* pgmem's window is always the last ``max_messages``; OpenManus trims only in ``add_message``, so after
  ``add_messages`` or an assignment its list can be longer. The oracle is OpenManus's memory with its list
  cut to the window after every operation (the tests count how often that cut changed something).
* pgmem's window is a valid conversation: a tool result without its call in the window is dropped
  (OpenManus issue 744), and an assistant message shows only its answered calls.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("app.schema", reason="OpenManus is not installed (bash .ci/seeds installs openmanus==0.1.0)")

import pgmem  # noqa: E402
from pgmem.openmanus import Memory as PgMemory  # noqa: E402
from tests.seeds.openmanus.upstream import InvalidRequest, Memory, Message, check_request, tool_call  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SEQUENCES = 100
OPERATIONS = 25


def _valid(messages: list[Any]) -> bool:
    try:
        check_request([m.to_dict() for m in messages], contents=False)
    except InvalidRequest:
        return False
    return True


class Generator:
    def __init__(self, rng: random.Random, tools: bool) -> None:
        self.rng = rng
        self.tools = tools
        self.calls = 0

    def text(self) -> str:
        return self.rng.choice(["", "ok", "日本語 ✓", "line\nbreak", "x" * 50]) + str(self.rng.randrange(5))

    def plain(self) -> Message:
        kind = self.rng.randrange(4)
        if kind == 0:
            return Message.system_message(self.text())
        if kind == 1:
            return Message.assistant_message(self.rng.choice([None, self.text()]))
        return Message.user_message(self.text())

    def exchange(self) -> list[Message]:
        """An assistant message calling 1-2 tools and their results (sometimes one left unanswered)."""
        calls = []
        for _ in range(self.rng.randint(1, 2)):
            self.calls += 1
            calls.append(tool_call(f"call_{self.calls}", "add", a=self.calls, b=1))
        out = [Message.from_tool_calls(calls, content=self.rng.choice(["", "thinking"]))]
        answered = calls if self.rng.random() < 0.85 else calls[:-1]
        out += [Message.tool_message(f"{c.id} done", name="add", tool_call_id=c.id) for c in answered]
        return out

    def messages(self, n: int) -> list[Message]:
        out: list[Message] = []
        while len(out) < n:
            out += self.exchange() if self.tools and self.rng.random() < 0.4 else [self.plain()]
        return out

    def operation(self) -> tuple[Any, ...]:
        r = self.rng.random()
        if r < 0.35:
            return ("add_message", self.messages(1))
        if r < 0.55:
            return ("add_messages", self.messages(self.rng.randint(0, 4)))
        if r < 0.75:
            return ("extend", self.messages(self.rng.randint(1, 3)))  # the agent's `messages += [...]`
        if r < 0.82:
            return ("replace", self.rng.randint(0, 3))  # `messages = messages[k:]` (see the test)
        if r < 0.86:
            return ("clear",)
        return ("recent", self.rng.randint(-3, 8))


def apply(memory: Any, op: tuple[Any, ...]) -> Any:
    name = op[0]
    if name == "add_message":
        for m in op[1]:
            memory.add_message(m)
    elif name == "add_messages":
        memory.add_messages(op[1])
    elif name == "extend":
        memory.messages = memory.messages + op[1]
    elif name == "assign":
        memory.messages = list(op[1])
    elif name == "clear":
        memory.clear()
    elif name == "recent":
        return memory.get_recent_messages(op[1])
    return None


def _said(messages: list[Message]) -> list[tuple[str, str | None]]:
    """Role and content of the messages that say something (not a tool result, not a bare call)."""
    return [(m.role, m.content) for m in messages if m.role != "tool" and (m.content or not m.tool_calls)]


@pytest.mark.parametrize("tools", [False, True], ids=["plain", "with-tools"])
def test_random_operation_sequences(client: pgmem.Client, tools: bool) -> None:
    rng = random.Random(744 + tools)
    compared = identical = cut = 0
    for sequence in range(SEQUENCES):
        max_messages = rng.choice([1, 2, 3, 5, 8, 100])
        gen = Generator(rng, tools)
        upstream = Memory(max_messages=max_messages)
        key = f"om:{tools:d}:{sequence}"
        ours = PgMemory(key, client=client, max_messages=max_messages)
        for _ in range(OPERATIONS):
            op = gen.operation()
            if op[0] == "replace":
                # Both get the same list: where pgmem's window differs (a dropped orphan), slicing each
                # memory's own window would give them different contents from here on.
                new = ours.messages[op[1] :]
                op = ("assign", new)
            expected = apply(upstream, op)
            got = apply(ours, op)
            if len(upstream.messages) > max_messages:
                upstream.messages = upstream.messages[-max_messages:]
                cut += 1
            window = upstream.messages
            if op[0] == "recent":
                if _valid(expected):
                    assert got == expected, (sequence, op)
                assert _valid(got)
            current = ours.messages
            other_process_view = PgMemory(key, client=client, max_messages=max_messages).messages
            assert other_process_view == current
            assert all(type(m) is Message for m in current)
            assert _valid(current), (sequence, op, [m.to_dict() for m in current])
            compared += 1
            if _valid(window):
                assert current == window, (sequence, op)
                assert ours.to_dict_list() == [m.to_dict() for m in window]
                assert ours.model_dump(include={"messages", "max_messages"}) == {
                    "messages": [m.model_dump() for m in window],
                    "max_messages": max_messages,
                }
                identical += 1
            else:
                # Only tool results and calls differ: every other message is kept, in order.
                assert _said(current) == _said(window), (sequence, op)
    assert compared == SEQUENCES * OPERATIONS
    assert cut > 0  # the sequences do reach OpenManus's untrimmed paths
    if not tools:
        assert identical == compared  # without tools OpenManus's window is always valid
    else:
        assert identical > compared // 2


def test_constructor_and_dump_match(client: pgmem.Client) -> None:
    messages = [Message.system_message("be brief"), Message.user_message("hi"), Message.assistant_message(None)]
    upstream = Memory(messages=messages, max_messages=5)
    ours = PgMemory("om:ctor", client=client, messages=messages, max_messages=5)
    assert ours.messages == upstream.messages
    assert ours.model_dump(include={"messages", "max_messages"}) == upstream.model_dump()
    assert ours.to_dict_list() == upstream.to_dict_list()
    # Constructing with messages replaces what the key held; without, it opens what is there.
    PgMemory("om:ctor", client=client, messages=[Message.user_message("new")])
    assert PgMemory("om:ctor", client=client).messages == [Message.user_message("new")]
