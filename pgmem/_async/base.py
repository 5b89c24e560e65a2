"""What every repository shares: its client, its namespace, and running one named query (through the
client's executor, :mod:`pgmem._async.executor`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, LiteralString

from psycopg import AsyncConnection

from pgmem import tracing

if TYPE_CHECKING:
    from pgmem._async.client import AsyncClient


class AsyncRepository:
    """Base of the repositories: named queries of one ``sql/<group>.sql`` file, scoped to the namespace."""

    queries: dict[str, LiteralString]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A span per public call of the client's repositories when OpenTelemetry is installed; without it
        # the methods stay the functions written (pgmem.tracing).
        super().__init_subclass__(**kwargs)
        tracing.instrument(cls)

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    @property
    def namespace(self) -> str:
        return self._client.namespace

    async def _rows(
        self, name: str, params: dict[str, Any], connection: AsyncConnection[Any] | None
    ) -> list[tuple[Any, ...]]:
        """Run the named query (``%(ns)s`` is the client's namespace) and return its rows: in a transaction
        scoped to the namespace, under the call's deadline, once more when its connection is lost and that
        is harmless (:meth:`AsyncExecutor.rows <pgmem._async.executor.AsyncExecutor.rows>`)."""
        return await self._client.executor.rows(self.queries[name], {"ns": self.namespace, **params}, connection)

    async def _scalar(self, name: str, params: dict[str, Any], connection: AsyncConnection[Any] | None) -> Any:
        """The value of a one-column statement's first row (None when it returned no row)."""
        rows = await self._rows(name, params, connection)
        return rows[0][0] if rows else None

    async def _column(self, name: str, params: dict[str, Any], connection: AsyncConnection[Any] | None) -> list[Any]:
        """The values of a one-column statement, one per row. (Statements of several columns return a
        row type of :mod:`pgmem.planning.rows`: build it with ``RowType._make(row)``.)"""
        return [row[0] for row in await self._rows(name, params, connection)]
