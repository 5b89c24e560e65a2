"""The retrieval log: what searches answered outside Postgres returned (``pgmem.retrieval_log``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from pgmem._async.base import AsyncRepository
from pgmem.planning import statements
from pgmem.planning.search import retrieval_params

__all__ = ["AsyncRetrievalLog"]


class AsyncRetrievalLog(AsyncRepository):
    """Records searches in ``pgmem.retrieval_log``. Searches run in Postgres record themselves in their
    own statement (:func:`pgmem.planning.search.logged_sql`); this records the others (the FAISS cache's)."""

    queries = statements.load("vectors")

    async def record(
        self,
        kind: str,
        memory: str | None,
        query: str | None,
        k: int,
        hits: Sequence[tuple[str, float]],
        *,
        label: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> None:
        """One statement. ``hits``: ``(message id, score)``, best first."""
        await self._rows("log_retrieval", retrieval_params(kind, memory, query, k, hits, label), connection)
