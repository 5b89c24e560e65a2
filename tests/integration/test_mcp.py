"""``pgmem mcp`` (issue 35): the server in a real process, driven by the official SDK's own client over stdio
and over streamable HTTP; what agents share through it, tenants kept apart, errors as MCP tool errors."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

import pgmem

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'pgmem[mcp]'")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402


def _server_args(dsn: str, namespace: str, *extra: str) -> list[str]:
    return ["-m", "pgmem.ops.cli", "mcp", "--dsn", dsn, "--namespace", namespace, *extra]


@asynccontextmanager
async def stdio_session(dsn: str, namespace: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=_server_args(dsn, namespace), env=dict(os.environ))
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_server(dsn: str, namespace: str) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, *_server_args(dsn, namespace, "--transport", "http", "--port", str(port))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120  # a busy machine starts Python slowly; progress, not speed, is tested
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the MCP server did not start: {proc.stderr.read()!r}") from None  # type: ignore[union-attr]
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()  # type: ignore[union-attr]


def payload(result: Any) -> Any:
    """A tool result's value: its structured content when given, else the JSON of its text."""
    assert not result.is_error, result.content
    if result.structured_content is not None:
        value = result.structured_content
        return value.get("result", value) if isinstance(value, dict) and set(value) == {"result"} else value
    return json.loads(result.content[0].text)


def error_text(result: Any) -> str:
    assert result.is_error
    return " ".join(c.text for c in result.content)


async def test_agents_share_memory_through_stdio(dsn: str) -> None:
    async with stdio_session(dsn, "team") as session:
        names = {t.name for t in (await session.list_tools()).tools}
        assert names == {"remember", "search", "recent", "list_memories", "forget"}
        first = payload(await session.call_tool("remember", {"memory": "chat:1", "content": "Deploy on Friday at 5pm"}))
        await session.call_tool("remember", {"memory": "chat:1", "content": "The payment service times out"})
        await session.call_tool("remember", {"memory": "notes", "content": "Lunch menu", "role": "assistant"})
        assert first["stored"] is True and first["memory"] == "chat:1"
        recent = payload(await session.call_tool("recent", {"memory": "chat:1", "n": 10}))
        assert [m["content"] for m in recent] == ["Deploy on Friday at 5pm", "The payment service times out"]
        found = payload(await session.call_tool("search", {"query": "when do we deploy?", "memory": "chat:1"}))
        assert found[0]["content"] == "Deploy on Friday at 5pm" and found[0]["score"] > 0
        assert payload(await session.call_tool("list_memories", {})) == ["chat:1", "notes"]
        # A Python agent of the same namespace sees what the MCP agent stored, and the other way round.
        with pgmem.connect(dsn, namespace="team") as client:
            assert [m.content for m in client.messages.last("chat:1", 5)][0] == "Deploy on Friday at 5pm"
            client.messages.add("chat:1", pgmem.Message(content="Friday moved to Monday", role="assistant"))
        recent = payload(await session.call_tool("recent", {"memory": "chat:1", "n": 1}))
        assert recent[0]["content"] == "Friday moved to Monday" and recent[0]["role"] == "assistant"
        # Forget, audited; then it is gone for everyone.
        gone = payload(await session.call_tool("forget", {"ids": [first["id"]]}))
        assert gone["messages"] == 1 and gone["audit_id"] > 0
        assert "Deploy on Friday at 5pm" not in [
            m["content"] for m in payload(await session.call_tool("recent", {"memory": "chat:1"}))
        ]
        # Bad input: a typed tool error, nothing stored, and the server keeps serving.
        bad = await session.call_tool("remember", {"memory": "", "content": "x"})
        assert "InvalidInput" in error_text(bad)
        assert "InvalidInput" in error_text(await session.call_tool("recent", {"memory": "chat:1", "n": 0}))
        assert "exactly one" in error_text(await session.call_tool("forget", {}))
        assert payload(await session.call_tool("list_memories", {})) == ["chat:1", "notes"]


async def test_http_server_serves_one_namespace_only(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="other") as client:
        client.messages.add("secrets", pgmem.Message(content="launch codes 0000"))
    with http_server(dsn, "mine") as url:
        async with streamable_http_client(url) as streams, ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            await session.call_tool("remember", {"memory": "plan", "content": "ship the launch on Monday"})
            assert payload(await session.call_tool("list_memories", {})) == ["plan"]
            found = payload(await session.call_tool("search", {"query": "launch codes", "k": 5}))
            assert [m["content"] for m in found] == ["ship the launch on Monday"]  # never the other tenant's
            assert "InvalidInput" in error_text(await session.call_tool("search", {"query": " ", "k": 5}))


async def test_keyword_search_when_a_memory_has_no_embeddings(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="plain") as client:
        client.messages.add("log", pgmem.Message(content="the disk filled up at noon"))
    async with stdio_session(dsn, "plain") as session:
        found = payload(await session.call_tool("search", {"query": "when did the disk fill?", "memory": "log"}))
        assert [m["content"] for m in found] == ["the disk filled up at noon"]
