"""MetaGPT 0.8.2's real ``Role`` loop (``_observe``, ``react``, ``_act``) on pgmem's ``Memory`` and
``MessageQueue``, beside the same role on MetaGPT's own; the action is scripted (no LLM)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("metagpt.roles", reason="MetaGPT is not installed (bash .ci/seeds installs metagpt==0.8.2)")

import pgmem  # noqa: E402
from pgmem.metagpt import Memory as PgMemory  # noqa: E402
from pgmem.metagpt import MessageQueue as PgMessageQueue  # noqa: E402
from tests.seeds.metagpt.upstream import Message, MessageQueue, Role, UserRequirement, WritePRD  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class ScriptedWritePRD(WritePRD):
    async def run(self, *args: Any, **kwargs: Any) -> str:
        return "PRD: a snake game in the terminal"


def _role() -> Role:
    role = Role(name="Alice", profile="Product Manager")
    role.set_actions([ScriptedWritePRD])
    role._watch([UserRequirement])
    return role


def _said(messages: list[Message]) -> list[tuple[str, str, str, str]]:
    return [(m.content, m.role, m.cause_by, m.sent_from) for m in messages]


def test_a_real_role_runs_on_pgmem_memory(client: pgmem.Client) -> None:
    upstream = _role()
    ours = _role()
    ours.rc.memory = PgMemory("role:Alice", client=client)
    ours.rc.msg_buffer = PgMessageQueue("inbox:Alice", client=client)
    request = Message(content="Write a cli snake game", cause_by=UserRequirement)
    for role in (upstream, ours):
        role.put_message(request.model_copy())
        role.put_message(request.model_copy())  # queued twice
        reply = asyncio.run(role.run())
        assert isinstance(reply, Message) and reply.content == "PRD: a snake game in the terminal"
    stored = PgMemory("role:Alice", client=client).get()
    assert all(type(m) is Message for m in stored)
    assert _said(stored) == _said(upstream.rc.memory.get())
    assert stored[-1].cause_by == "tests.seeds.metagpt.test_role.ScriptedWritePRD"
    assert PgMemory("role:Alice", client=client).get_by_action(ScriptedWritePRD)[0].content.startswith("PRD")


def test_message_queue_beside_metagpts(client: pgmem.Client) -> None:
    upstream, ours = MessageQueue(), PgMessageQueue(client=client)
    messages = [Message(content=f"m{i}", cause_by=WritePRD) for i in range(3)]
    for mq in (upstream, ours):
        for m in messages:
            mq.push(m)
    assert ours.pop() == upstream.pop() == messages[0]
    assert ours.pop_all() == upstream.pop_all() == messages[1:]
    assert ours.empty() and upstream.empty()
    assert ours.pop() is None and upstream.pop() is None
    # Documented difference: the seed's queue ignores a message already queued; 0.8.2's queues it twice.
    upstream.push(messages[0])
    upstream.push(messages[0])
    ours.push(messages[0])
    ours.push(messages[0])
    assert len(upstream.pop_all()) == 2 and len(ours.pop_all()) == 1
