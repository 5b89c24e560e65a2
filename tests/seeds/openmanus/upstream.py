"""OpenManus's real agent loop with a scripted LLM, and a check of what it sends to the chat API.

Importing this module needs OpenManus (``openmanus==0.1.0``); test modules import it after
``pytest.importorskip``. OpenManus reads ``config/config.toml`` beside its ``app`` package when
``app.llm`` is imported; a venv made by ``.ci/seeds`` has none, so :func:`ensure_config` writes one whose
LLM is never called (the scripted LLM replaces it; nothing goes to the network).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any

_CONFIG = """\
# Written by pgmem's seed tests: OpenManus loads this at import; the tests' scripted LLM never calls it.
[llm]
model = "scripted"
base_url = "http://127.0.0.1:9/v1"
api_key = "unused"
"""


def ensure_config() -> None:
    spec = importlib.util.find_spec("app")
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations))).parent
    folder = root / "config"
    if not (folder / "config.toml").exists() and not (folder / "config.example.toml").exists():
        folder.mkdir(exist_ok=True)
        (folder / "config.toml").write_text(_CONFIG)


ensure_config()
with warnings.catch_warnings():
    # OpenManus 0.1.0's models use pydantic v1's `class Config`.
    warnings.simplefilter("ignore", DeprecationWarning)
    from app.agent.toolcall import ToolCallAgent
    from app.llm import LLM
    from app.schema import AgentState, Function, Memory, Message, ToolCall
    from app.tool import Terminate, ToolCollection
    from app.tool.base import BaseTool

__all__ = [
    "LLM",
    "AgentState",
    "Calculator",
    "Memory",
    "Message",
    "ScriptedLLM",
    "ToolCall",
    "check_request",
    "make_agent",
    "tool_call",
]


class InvalidRequest(AssertionError):
    """A request the OpenAI chat API would reject."""


def check_request(messages: list[dict[str, Any]], *, contents: bool = True) -> None:
    """Raise :class:`InvalidRequest` unless the OpenAI chat API accepts ``messages``' structure.

    Every message has a known role and content (or, for an assistant, tool calls); an assistant message
    with tool calls is followed at once by one tool message per call, answering exactly those calls; a
    tool message answers a call of the assistant message before it. ``contents=False`` skips the check
    of an assistant message's content (OpenManus stores ``assistant_message(None)`` as it is given).
    """
    pending: list[str] = []  # calls of the last assistant message not answered yet
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise InvalidRequest(f"message {i}: role {role!r}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                raise InvalidRequest(f"message {i}: tool result for {call_id!r} does not follow its call")
            pending.remove(call_id)
            if not isinstance(message.get("content"), str):
                raise InvalidRequest(f"message {i}: tool result without content")
            continue
        if pending:
            raise InvalidRequest(f"message {i}: calls {pending} were not answered before a {role} message")
        calls = message.get("tool_calls") or []
        if role == "assistant":
            if contents and not calls and message.get("content") is None:
                raise InvalidRequest(f"message {i}: an assistant message with neither content nor tool calls")
            pending = [call["id"] for call in calls]
            if len(set(pending)) != len(pending):
                raise InvalidRequest(f"message {i}: repeated tool call ids")
        elif calls or not isinstance(message.get("content"), str):
            raise InvalidRequest(f"message {i}: a {role} message needs content and no tool calls")
    if pending:
        raise InvalidRequest(f"the request ends with unanswered calls {pending}")


def tool_call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, function=Function(name=name, arguments=json.dumps(arguments)))


class Response:
    """What OpenManus reads of ``LLM.ask_tool``'s answer (an OpenAI ``ChatCompletionMessage``)."""

    def __init__(self, content: str | None, tool_calls: list[ToolCall] | None) -> None:
        self.content = content
        self.tool_calls = tool_calls


class ScriptedLLM(LLM):
    """OpenManus's ``LLM`` whose ``ask_tool`` answers from a script and records every request.

    The request is built as ``LLM.ask_tool`` builds it (system messages, then ``LLM.format_messages`` of
    the conversation, which raises ``TypeError`` for a message class other than ``app.schema.Message``).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> ScriptedLLM:
        return object.__new__(cls)  # not LLM's per-config singleton

    def __init__(self, script: list[Response]) -> None:
        self.script = list(script)
        self.requests: list[list[dict[str, Any]]] = []

    async def ask_tool(  # type: ignore[override]
        self, messages: list[Any], system_msgs: list[Any] | None = None, **kwargs: Any
    ) -> Response:
        request = (self.format_messages(system_msgs) if system_msgs else []) + self.format_messages(messages)
        self.requests.append(request)
        if not self.script:
            return Response(
                "nothing more to do", [tool_call(f"end{len(self.requests)}", "terminate", status="success")]
            )
        return self.script.pop(0)


class Calculator(BaseTool):
    """Adds two numbers, slowly enough that two agents' steps interleave."""

    name: str = "add"
    description: str = "Add two integers."
    parameters: dict = {  # noqa: RUF012 - OpenManus's tools declare their schema so
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    delay: float = 0.0

    async def execute(self, a: int, b: int) -> str:
        await asyncio.sleep(self.delay)
        return str(a + b)


def script(prefix: str = "c") -> list[Response]:
    """A three-step tool conversation: two calls at once, one call, then terminate."""
    return [
        Response(
            "Adding both pairs.", [tool_call(f"{prefix}1", "add", a=1, b=2), tool_call(f"{prefix}2", "add", a=3, b=4)]
        ),
        Response(None, [tool_call(f"{prefix}3", "add", a=3, b=7)]),
        Response("The total is 10.", [tool_call(f"{prefix}4", "terminate", status="success")]),
    ]


def make_agent(memory: Any, llm: ScriptedLLM, *, delay: float = 0.0, name: str = "calc") -> ToolCallAgent:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return ToolCallAgent(
            name=name,
            llm=llm,
            memory=memory,
            available_tools=ToolCollection(Calculator(delay=delay), Terminate()),
            max_steps=8,
        )


def run_agent(agent: ToolCallAgent, request: str) -> str:
    with warnings.catch_warnings():
        # OpenManus's Message.to_dict calls pydantic's deprecated `.dict()`.
        warnings.simplefilter("ignore", DeprecationWarning)
        return asyncio.run(agent.run(request))


def agent_process(dsn: str, key: str, name: str, start: Any, out: Any) -> None:
    """One OpenManus agent process on the shared pgmem memory ``key``: runs the script and reports every
    request it sent (and whether each was valid) on ``out``."""
    import pgmem
    from pgmem.openmanus import Memory as PgMemory

    with pgmem.connect(dsn, namespace="openmanus", max_size=2) as client:
        llm = ScriptedLLM(script(prefix=f"{name}-"))
        agent = make_agent(PgMemory(key, client=client), llm, delay=0.02, name=name)
        start.wait(30)
        try:
            result = run_agent(agent, f"{name}: add the numbers")
            error = None
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
            result, error = "", f"{type(exc).__name__}: {exc}"
        problems = []
        for request in llm.requests:
            try:
                check_request(request)
                problems.append(None)
            except InvalidRequest as exc:
                problems.append(str(exc))
        out.put({"name": name, "result": result, "error": error, "requests": llm.requests, "problems": problems})
