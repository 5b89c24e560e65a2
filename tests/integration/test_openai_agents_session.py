"""The OpenAI Agents SDK's Session on pgmem: the scenarios of the SDK's tests/memory/test_session.py and
test_sqlalchemy_session.py, run against PgmemSession, with the SDK's own Runner (on a local model)."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from typing import Any

import psycopg
import pytest

import pgmem
from tests.conftest import table_counts

pytest.importorskip("agents", reason="the OpenAI Agents SDK is not installed: pip install 'pgmem[openai-agents]'")

from agents import Agent, ModelResponse, Runner, SessionSettings, Usage, set_tracing_disabled  # noqa: E402
from agents.memory.session import SessionABC  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402

from pgmem.integrations.openai_agents import PgmemSession  # noqa: E402

set_tracing_disabled(True)  # no trace export: no test calls the network


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


ITEMS: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "input_text", "text": "look at "}, {"type": "input_text", "text": "this"}]},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Calling a tool. 🌍", "annotations": []}],
    },
    {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"q": "x"}', "id": "fc_1"},
    {"type": "function_call_output", "call_id": "call_1", "output": "found it"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
]


def rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            """SELECT e.memory, m.role, m.content, m.name, m.tool_call_id
               FROM pgmem.memory_entries e JOIN pgmem.messages m ON m.namespace = e.namespace AND m.id = e.message_id
               ORDER BY e.seq"""
        ).fetchall()


async def test_items_round_trip_and_fill_the_columns(client: pgmem.Client, dsn: str) -> None:
    session = PgmemSession("s1", client=client)
    assert isinstance(session, SessionABC)
    assert await session.get_items() == []
    await session.add_items(ITEMS)
    assert await session.get_items() == ITEMS
    assert [r[1:] for r in rows(dsn)] == [
        ("system", "be brief", None, None),
        ("user", "look at this", None, None),
        ("assistant", "Calling a tool. 🌍", None, None),
        ("assistant", "", "lookup", "call_1"),
        ("tool", "found it", None, "call_1"),
        ("assistant", "", None, None),
    ]
    assert {r[0] for r in rows(dsn)} == {"agents:s1"}


async def test_limits(client: pgmem.Client) -> None:
    session = PgmemSession("s", client=client)
    await session.add_items([user(f"m{i}") for i in range(10)])
    assert [i["content"] for i in await session.get_items(3)] == ["m7", "m8", "m9"]
    assert await session.get_items(0) == []
    assert len(await session.get_items(100)) == 10
    assert len(await session.get_items()) == 10
    with pytest.raises(pgmem.InvalidInput):
        await session.get_items(-1)
    limited = PgmemSession("s", client=client, session_settings=SessionSettings(limit=2))
    assert [i["content"] for i in await limited.get_items()] == ["m8", "m9"]
    assert len(await limited.get_items(5)) == 5  # an explicit limit wins
    from_dict = PgmemSession("s", client=client, session_settings={"limit": 4})
    assert isinstance(from_dict.session_settings, SessionSettings)
    assert len(await from_dict.get_items()) == 4
    with pytest.raises(TypeError):
        PgmemSession("s", client=client, session_settings={"limit": 1, "unknown": True})


async def test_pop_add_duplicates_clear(client: pgmem.Client) -> None:
    session = PgmemSession("s", client=client)
    other = PgmemSession("other", client=client)
    assert await session.pop_item() is None
    same = {"id": "msg_same", "type": "message", "role": "assistant", "content": "again", "status": "completed"}
    await session.add_items([user("a"), same])
    await session.add_items([same])
    await session.add_items([])  # a no-op
    await other.add_items([user("elsewhere")])
    assert await session.get_items() == [user("a"), same, same]
    assert await session.pop_item() == same
    assert await session.pop_item() == same
    assert await session.get_items() == [user("a")]
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    assert await other.get_items() == [user("elsewhere")]
    session.close()


@pytest.mark.parametrize("session_id", ["conv_1", "spaces and ünïcødé 会话", "#hash", "y" * 200])
async def test_any_session_id(client: pgmem.Client, session_id: str) -> None:
    session = PgmemSession(session_id, client=client)
    await session.add_items([user(session_id)])
    assert await PgmemSession(session_id, client=client).get_items() == [user(session_id)]
    assert session.session_id == session_id


@pytest.mark.parametrize("session_id", ["", "z" * 201, "a\x00b"])
def test_bad_session_ids(client: pgmem.Client, session_id: str) -> None:
    with pytest.raises(pgmem.InvalidInput):
        PgmemSession(session_id, client=client)


class Opaque:
    pass


@pytest.mark.parametrize(
    "bad",
    [
        user("nul \x00"),
        {"role": "user", "content": "nan", "score": math.nan},
        {"role": "user", "content": "infinity", "score": -math.inf},
        {"role": "user", "content": "object", "x": Opaque()},
        user("big " * (1 << 18)),
        "not an item",
    ],
)
async def test_bad_items_write_nothing(client: pgmem.Client, dsn: str, bad: Any) -> None:
    session = PgmemSession("s", client=client)
    await session.add_items([user("before")])
    counts = table_counts(dsn)
    with pytest.raises(pgmem.InvalidInput):
        await session.add_items([user("fine"), bad])
    assert table_counts(dsn) == counts
    assert await session.get_items() == [user("before")]


async def test_with_an_async_client(aclient: pgmem.AsyncClient) -> None:
    session = PgmemSession("s", async_client=aclient)
    await session.add_items(ITEMS)
    assert await session.get_items(2) == ITEMS[-2:]
    assert await session.pop_item() == ITEMS[-1]
    await session.clear_session()
    assert await session.get_items() == []


def test_fresh_event_loops_per_call(client: pgmem.Client) -> None:
    """asyncio.run per call, as Runner.run_sync does: the sync client in a thread works from each."""
    session = PgmemSession("s", client=client)
    asyncio.run(session.add_items([user("one")]))
    asyncio.run(session.add_items([user("two")]))
    assert asyncio.run(session.get_items()) == [user("one"), user("two")]
    assert asyncio.run(session.pop_item()) == user("two")


def test_the_default_client(default_client_env: str) -> None:
    asyncio.run(PgmemSession("s").add_items([user("hi")]))
    assert asyncio.run(PgmemSession("s").get_items()) == [user("hi")]


async def test_items_added_through_the_core(client: pgmem.Client) -> None:
    client.messages.add("agents:s", pgmem.Message(content="from elsewhere", role="user"))
    assert await PgmemSession("s", client=client).get_items() == [{"role": "user", "content": "from elsewhere"}]
    assert await PgmemSession("s", client=client).pop_item() == {"role": "user", "content": "from elsewhere"}


# -- the SDK's agent loop -----------------------------------------------------------------------------------


class EchoModel(Model):
    """A local model: answers with the number of user messages it was given and the last one."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(input)
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        users = [i for i in items if i.get("role") == "user"]
        text = f"{len(users)}: {users[-1]['content']}"
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_runner_run_sync_keeps_the_conversation(client: pgmem.Client) -> None:
    model = EchoModel()
    agent = Agent(name="echo", model=model)
    session = PgmemSession("runner", client=client)
    # run_sync runs on the thread's default event loop and leaves it open on purpose; give it one this
    # test closes (an unclosed loop would surface as a ResourceWarning in a later test).
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        assert Runner.run_sync(agent, "first", session=session).final_output == "1: first"
        assert Runner.run_sync(agent, "second", session=session).final_output == "2: second"
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    items = asyncio.run(session.get_items())
    assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
    assert items[0]["content"] == "first"
    # The model saw the history the session gave back.
    assert [i.get("content") for i in model.inputs[1] if i.get("role") == "user"] == ["first", "second"]


async def test_runner_run_with_an_async_client(aclient: pgmem.AsyncClient) -> None:
    agent = Agent(name="echo", model=EchoModel())
    session = PgmemSession("runner", async_client=aclient, session_settings={"limit": 2})
    await Runner.run(agent, "one", session=session)
    await Runner.run(agent, "two", session=session)
    result = await Runner.run(agent, "three", session=session)
    assert result.final_output == "2: three"  # limit 2: the model saw the last two items and the new one
    assert len(await session.get_items(10)) == 6


# -- several processes ----------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_concurrent_pops_from_processes_return_each_item_once(client: pgmem.Client, dsn: str) -> None:
    session = PgmemSession("shared", client=client)
    count = 300
    await session.add_items([user(f"item {i}") for i in range(count)])
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.integration.session_workers", "agents", dsn, "shared"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    popped: list[str] = []
    for worker in workers:
        out, _ = worker.communicate(timeout=120)
        assert worker.returncode == 0
        popped += [json.loads(line)["content"] for line in out.splitlines()]
    assert sorted(popped) == sorted(f"item {i}" for i in range(count))
    assert await session.get_items() == []


def test_without_the_sdk_the_import_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['agents'] = None\n"
        "try:\n    import pgmem.integrations.openai_agents\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pgmem[openai-agents]" in out
