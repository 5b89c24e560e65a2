"""pgmem as an MCP server (``pgmem mcp``): any MCP-capable agent shares memory with Python agents.

Built on the official ``mcp`` SDK (``pip install 'pgmem[mcp]'``). One server serves one namespace: it
connects like any client (row-level security applies to it as to any other), so two servers for two
tenants see nothing of each other. Tools:

* ``remember(memory, content, role, cause_by, sent_from)``: store a message (its embedding follows in the
  background, so ``search`` finds it by meaning too);
* ``search(query, memory, k)``: hybrid search (keywords and vectors fused), or the namespace's when no
  memory is named;
* ``recent(memory, n)``: the memory's last ``n`` messages, oldest first;
* ``list_memories(prefix)``: the memories holding messages;
* ``forget(memory | ids)``: forget messages everywhere, audited (``pgmem.forget_audit``, actor ``mcp``).

A pgmem error becomes an MCP tool error (``isError``) whose text names its type (``InvalidInput: …``), with
no password in it; the server keeps serving.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import pgmem
from pgmem.checks import check_key, check_namespace
from pgmem.errors import InvalidInput, PgmemError, redact

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["build_server", "serve"]

#: The most results one search or read returns through MCP (a model's context is the limit, not the database).
MAX_RESULTS = 200


def _message(m: pgmem.Message, score: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": m.id,
        "role": m.role,
        "content": m.content,
        "cause_by": m.cause_by,
        "sent_from": m.sent_from,
        "created_at": m.created_at.isoformat(),
    }
    if score is not None:
        out["score"] = round(float(score), 6)
    return out


def _count(value: int, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_RESULTS:
        raise InvalidInput(f"{name} must be an integer from {low} to {MAX_RESULTS}")
    return value


def build_server(dsn: str, namespace: str, *, vectors: bool = True) -> MCPServer:
    """An MCP server over the namespace ``namespace`` of the database at ``dsn`` (not started).

    ``vectors``: enable embeddings on every memory ``remember`` writes to (the configured embedder,
    ``PGMEM_EMBEDDER``), so ``search`` finds by meaning; without, search is by keywords only.
    """
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    check_namespace(namespace)
    state: dict[str, Any] = {"enabled": set()}

    @asynccontextmanager
    async def lifespan(server: MCPServer[Any]) -> AsyncIterator[dict[str, Any]]:
        async with await pgmem.aconnect(dsn, namespace=namespace, min_size=0, max_size=4) as client:
            state["client"] = client
            yield {}

    server: MCPServer[Any] = MCPServer(
        "pgmem",
        instructions=(
            f"Durable memory shared with other agents (namespace {namespace!r}). remember stores a message in "
            "a memory (a key such as 'role:PM' or 'chat:42'); search finds messages by meaning and keywords; "
            "recent reads a memory's latest messages; forget removes messages everywhere."
        ),
        version=pgmem.__version__,
        lifespan=lifespan,
    )

    def client() -> pgmem.AsyncClient:
        return state["client"]  # type: ignore[no-any-return]

    async def run(call: Any) -> Any:
        try:
            return await call
        except PgmemError as exc:
            raise ToolError(f"{type(exc).__name__}: {redact(str(exc))}") from None

    @server.tool()
    async def remember(
        memory: str, content: str, role: str = "user", cause_by: str = "", sent_from: str = ""
    ) -> dict[str, Any]:
        """Store a message in a memory; returns its id. Other agents (MCP or Python) see it at once."""

        async def go() -> dict[str, Any]:
            message = pgmem.Message(content=content, role=role, cause_by=cause_by, sent_from=sent_from)
            if vectors and memory not in state["enabled"]:
                check_key(memory)
                await client().vectors.enable(memory)
                state["enabled"].add(memory)
            stored = await client().messages.add(memory, message)
            return {"id": message.id, "memory": memory, "stored": stored}

        return await run(go())  # type: ignore[no-any-return]

    @server.tool()
    async def search(query: str, memory: str | None = None, k: int = 5) -> list[dict[str, Any]]:
        """Find messages related to the query (keywords and meaning fused), best first; in one memory, or
        in every memory of the namespace when none is named."""

        async def go() -> list[dict[str, Any]]:
            _count(k, "k")
            if memory is not None and await client().vectors.active_model(memory) is None:
                # A memory nobody enabled embeddings for is still searchable by its words.
                return [_message(m) for m in await client().messages.search_text(memory, query, limit=k)]
            hits = await client().vectors.hybrid_search(query, k=k, memory=memory)
            return [_message(h.message, h.score) for h in hits if h.score > 0]

        return await run(go())  # type: ignore[no-any-return]

    @server.tool()
    async def recent(memory: str, n: int = 20) -> list[dict[str, Any]]:
        """The memory's last n messages, oldest first."""

        async def go() -> list[dict[str, Any]]:
            return [_message(m) for m in await client().messages.last(memory, _count(n, "n"))]

        return await run(go())  # type: ignore[no-any-return]

    @server.tool()
    async def list_memories(prefix: str = "") -> list[str]:
        """The memories of this namespace that hold messages (those starting with prefix)."""
        return await run(client().messages.memories(prefix=prefix, nonempty=True))  # type: ignore[no-any-return]

    @server.tool()
    async def forget(memory: str | None = None, ids: list[str] | None = None) -> dict[str, Any]:
        """Forget messages everywhere (every memory, embeddings, queues, logs), audited: every message of
        a memory, or the messages with these ids. Give exactly one."""

        async def go() -> dict[str, Any]:
            if (memory is None) == (ids is None):
                raise InvalidInput("forget needs exactly one of memory or ids")
            done = await client().retention.forget(ids=ids, memory=memory, actor="mcp")
            return {"messages": done.messages, "memory_entries": done.memory_entries, "audit_id": done.audit_id}

        return await run(go())  # type: ignore[no-any-return]

    return server


def serve(
    dsn: str,
    namespace: str,
    *,
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    vectors: bool = True,
) -> None:
    """Run the server until its client disconnects (stdio) or it is stopped (HTTP, at ``/mcp``)."""
    server = build_server(dsn, namespace, vectors=vectors)
    if transport == "stdio":
        server.run("stdio")
    elif transport == "http":
        server.run("streamable-http", host=host, port=port)
    else:
        raise InvalidInput(f"transport must be stdio or http, got {transport!r}")
