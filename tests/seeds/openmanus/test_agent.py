"""OpenManus 0.1.0's real ``ToolCallAgent`` loop on pgmem's memory, beside the same loop on OpenManus's own.

The agent, its ``think``/``act`` steps, ``BaseAgent.messages`` and ``LLM.format_messages`` are
OpenManus's code; only the LLM is scripted (it answers from a list and records each request).
"""

from __future__ import annotations

import multiprocessing as mp
import uuid
from typing import Any

import pytest

pytest.importorskip("app.schema", reason="OpenManus is not installed (bash .ci/seeds installs openmanus==0.1.0)")

import pgmem  # noqa: E402
from pgmem.openmanus import Memory as PgMemory  # noqa: E402
from tests.seeds.openmanus.upstream import (  # noqa: E402
    AgentState,
    InvalidRequest,
    Memory,
    Message,
    ScriptedLLM,
    agent_process,
    check_request,
    make_agent,
    run_agent,
    script,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _run(memory: Any) -> tuple[ScriptedLLM, Any]:
    llm = ScriptedLLM(script())
    agent = make_agent(memory, llm)
    result = run_agent(agent, "Add 1+2 and 3+4, then add the results.")
    assert agent.state == AgentState.IDLE and agent.current_step == 3, result
    return llm, agent


def test_pgmem_memory_is_the_agents_memory_field(client: pgmem.Client) -> None:
    memory = PgMemory("agent:calc", client=client)
    assert isinstance(memory, Memory)  # OpenManus's BaseAgent would replace anything else
    llm = ScriptedLLM([])
    agent = make_agent(memory, llm)
    assert agent.memory is memory
    agent.messages += [Message.user_message("hello")]  # BaseAgent.messages' setter assigns memory.messages
    assert PgMemory("agent:calc", client=client).messages == [Message.user_message("hello")]
    assert agent.model_dump()["memory"] == {
        "messages": [Message.user_message("hello").model_dump()],
        "max_messages": 100,
    }


def test_the_real_loop_sends_the_same_requests_on_both_memories(client: pgmem.Client) -> None:
    upstream_llm, upstream_agent = _run(Memory())
    llm, agent = _run(PgMemory("agent:calc", client=client))
    assert len(llm.requests) == 3
    assert llm.requests == upstream_llm.requests
    for request in llm.requests:
        check_request(request)
    # What the tools answered reached the next request.
    assert [m["content"] for m in llm.requests[1] if m["role"] == "tool"] == [
        "Observed output of cmd `add` executed:\n3",
        "Observed output of cmd `add` executed:\n7",
    ]
    # The memory holds the conversation durably, as OpenManus's class, in OpenManus's order.
    stored = PgMemory("agent:calc", client=client).messages
    assert all(type(m) is Message for m in stored)
    assert stored == upstream_agent.memory.messages
    roles = "user user assistant tool tool user assistant tool user assistant tool".split()
    assert [m.role for m in stored] == roles


def test_a_small_window_never_starts_with_a_tool_result(client: pgmem.Client) -> None:
    """OpenManus issue 744 in the real loop: with max_messages=4 OpenManus's third request starts with a
    tool result (the API rejects it); pgmem's drops the orphaned result."""
    upstream_llm, _ = _run(Memory(max_messages=4))
    with pytest.raises(InvalidRequest, match="does not follow its call"):
        check_request(upstream_llm.requests[2])
    assert upstream_llm.requests[2][1]["role"] == "tool"  # [0] is the system prompt

    llm, _ = _run(PgMemory("agent:small", client=client, max_messages=4))
    assert len(llm.requests) == 3
    for request in llm.requests:
        check_request(request)
    # Otherwise the window is OpenManus's: its last messages.
    assert llm.requests[2][-1] == upstream_llm.requests[2][-1]


@pytest.mark.slow
def test_two_agent_processes_share_one_memory(dsn: str) -> None:
    key = f"agent:team-{uuid.uuid4().hex[:8]}"
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=agent_process, args=(dsn, key, name, start, out)) for name in ("alice", "bob")]
    for p in procs:
        p.start()
    start.set()
    reports = {}
    for _ in procs:
        report = out.get(timeout=120)
        reports[report["name"]] = report
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    saw_the_other = []
    for name, report in reports.items():
        assert report["error"] is None, report["error"]
        assert len(report["requests"]) == 3, name
        assert report["problems"] == [None, None, None], report["problems"]
        other = "bob" if name == "alice" else "alice"
        seen = {m.get("content") for request in report["requests"] for m in request}
        calls = [call["id"] for r in report["requests"] for m in r for call in m.get("tool_calls") or ()]
        saw_the_other.append(f"{other}: add the numbers" in seen or any(c.startswith(other) for c in calls))
    # The memory is shared: at least the agent whose loop ran later saw the other's work (both do when their
    # steps interleave; when one process finishes before the other starts, only the later one can).
    assert any(saw_the_other), reports
    with pgmem.connect(dsn, namespace="openmanus") as client:
        stored = PgMemory(key, client=client).messages
    # Both conversations, whole: 2 x (request, 3 x next-step prompt, 3 assistant messages, 4 tool results).
    assert len(stored) == 22
    check_request([m.to_dict() for m in stored])
