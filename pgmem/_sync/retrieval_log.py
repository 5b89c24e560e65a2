# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The retrieval log: what searches answered outside Postgres returned (``pgmem.retrieval_log``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection

from pgmem._sync.base import Repository
from pgmem.planning import statements
from pgmem.planning.search import retrieval_params

__all__ = ["RetrievalLog"]


class RetrievalLog(Repository):
    """Records searches in ``pgmem.retrieval_log``. Searches run in Postgres record themselves in their
    own statement (:func:`pgmem.planning.search.logged_sql`); this records the others (the FAISS cache's)."""

    queries = statements.load("vectors")

    def record(
        self,
        kind: str,
        memory: str | None,
        query: str | None,
        k: int,
        hits: Sequence[tuple[str, float]],
        *,
        label: str | None = None,
        connection: Connection[Any] | None = None,
    ) -> None:
        """One statement. ``hits``: ``(message id, score)``, best first."""
        self._rows("log_retrieval", retrieval_params(kind, memory, query, k, hits, label), connection)
