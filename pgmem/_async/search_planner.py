"""Search planning for message search and item search alike: which strategy a search takes (exact or the
HNSW index), the settings of an index scan, and the planner statistics both rely on. The rule's numbers
and what each kind of search reads are :mod:`pgmem.planning.search.plan` (no I/O); this counts and reads."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, LiteralString

from psycopg import AsyncConnection, sql

from pgmem._async.base import AsyncRepository
from pgmem._async.sessions import SESSION_EF_SEARCH
from pgmem.errors import Conflict
from pgmem.planning import statements
from pgmem.planning.rows import AnalyzeLockRow
from pgmem.planning.search import EmbeddingModel, SearchFilters, statement
from pgmem.planning.search.keyword import NAMESPACE_SIZE
from pgmem.planning.search.plan import (
    COUNT_TTL,
    MAX_COUNTED_VECTORS,
    MAX_EF_SEARCH,
    MESSAGES,
    SCOPE_SIZE_TTL,
    STATISTICS_CHECK_INTERVAL,
    VECTOR_ROWS_TTL,
    Corpus,
    default_exact_limit,
)

if TYPE_CHECKING:
    from pgmem._async.client import AsyncClient

__all__ = [
    "ANALYZE_LOCK_KEY",
    "COUNT_TTL",
    "STATISTICS_CHECK_INTERVAL",
    "AsyncSearchPlanner",
    "hnsw_settings",
]

Q = statements.load("vectors")
log = logging.getLogger("pgmem.vectors")

#: Key of the advisory lock under which one process analyzes the search tables.
ANALYZE_LOCK_KEY = 0x70676D656D03
#: lock_not_available: the analyze lock's lock_timeout ran out (autovacuum holds the table).
_LOCK_NOT_AVAILABLE = "55P03"


class AsyncSearchPlanner(AsyncRepository):
    """Chooses ``exact`` or ``ann`` per search (see :mod:`pgmem.planning.search`) from remembered counts,
    and keeps the search tables' planner statistics from falling far behind them. One per client, shared
    by message search (:meth:`strategy`) and the item store's search (:meth:`choose`)."""

    queries = Q

    def __init__(self, client: AsyncClient) -> None:
        super().__init__(client)
        self._counts: dict[tuple[str, Hashable, int], tuple[int, float]] = {}
        self._vector_rows: dict[tuple[str, int], tuple[float, float]] = {}
        self._namespace_size: tuple[int, float] | None = None
        self._statistics_checked: dict[str, float] = {}

    async def strategy(
        self,
        model: EmbeddingModel,
        filters: SearchFilters,
        mode: str,
        exact_limit: int | None,
        connection: AsyncConnection[Any] | None,
    ) -> str:
        """``exact`` or ``ann`` for a message search (:meth:`choose`). The candidates are the messages that
        pass the filters; with no filter but the namespace, the namespace's vectors of the model."""
        if mode != "auto":
            return mode
        return await self.choose(
            MESSAGES,
            (filters, model.id),
            statement("count", model, filters),
            filters.params(),
            exact_limit,
            connection,
            model_id=model.id,
            namespace_only=not filters.filtered,
        )

    async def choose(
        self,
        corpus: Corpus,
        key: Hashable,
        count: LiteralString,
        params: Mapping[str, Any],
        exact_limit: int | None,
        connection: AsyncConnection[Any] | None,
        *,
        model_id: int,
        namespace_only: bool = False,
        depth: int | None = None,
    ) -> str:
        """``exact`` when at most ``exact_limit`` candidates pass the filters (default
        :func:`~pgmem.planning.search.plan.default_exact_limit` of the namespace's vectors of the model
        ``model_id`` in ``corpus``: the choice depends on the tenant's own data, never on what other
        namespaces hold), else ``ann``.

        ``count`` counts them no further than ``%(exact_limit)s + 1`` (with ``params`` and the namespace);
        the count is remembered under ``key`` (what the filters are) for
        :data:`~pgmem.planning.search.plan.COUNT_TTL` seconds: a stale count can only pick the slower
        strategy for a while, never a wrong answer (both are complete). ``depth``: how many vectors an
        index scan would have to yield; beyond :data:`~pgmem.planning.search.plan.MAX_EF_SEARCH` the
        search is exact.
        """
        if depth is not None and depth > MAX_EF_SEARCH:
            return "exact"
        if exact_limit is None:
            exact_limit = await self._default_exact_limit(corpus, model_id, connection, namespace_only=namespace_only)
        memo = (corpus.name, key, exact_limit)
        now = time.monotonic()
        known = self._counts.get(memo)
        if known is None or now - known[1] > COUNT_TTL:
            bound = {**params, "ns": self.namespace, "exact_limit": exact_limit}
            known = (int(await self._client.executor.scalar(count, bound, connection) or 0), now)
            if len(self._counts) > 10_000:
                self._counts.clear()
            self._counts[memo] = known
        return "exact" if known[0] <= exact_limit else "ann"

    @staticmethod
    def scan_settings(strategy: str, depth: int) -> dict[str, str] | None:
        """The settings a search of ``strategy`` runs with: none for ``exact`` (no index scan), else
        :func:`hnsw_settings` for an index scan that yields ``depth`` vectors."""
        return None if strategy == "exact" else hnsw_settings(depth)

    async def fresh_statistics(self, connection: AsyncConnection[Any] | None, corpus: Corpus = MESSAGES) -> None:
        """Analyze ``corpus``'s tables when their planner statistics are far behind them.

        Autovacuum analyzes a table once it has changed by 10% and the launcher visits the database (every
        minute by default). Until then, statistics taken while a table held a few rows call every column
        unique, and a filtered HNSW search probed a whole namespace per candidate instead of one message
        (seconds per search). Each client checks each corpus at most every
        :data:`~pgmem.planning.search.plan.STATISTICS_CHECK_INTERVAL` seconds (one read of the statistics
        views), on its own connections only, never in a caller's transaction; one process analyzes at a
        time and none waits on another's lock for long (autovacuum may hold it).
        """
        now = time.monotonic()
        if connection is not None or now - self._statistics_checked.get(corpus.name, -math.inf) < (
            STATISTICS_CHECK_INTERVAL
        ):
            return
        if not self._client.owns_transactions:
            return  # a client on the caller's single connection: not ours to analyze from
        self._statistics_checked[corpus.name] = now
        executor = self._client.executor
        # The statistics views are the database's: no namespace.
        found = await executor.rows(Q["stale_statistics"], {"tables": list(corpus.tables)}, scoped=False)
        stale = [row[0] for row in found]
        if not stale:
            return
        try:
            async with executor.transaction() as block:
                lock = await block.one(Q["analyze_lock"], {"key": ANALYZE_LOCK_KEY})
                if lock is not None and AnalyzeLockRow._make(lock).locked:
                    for table in stale:
                        await block.command(sql.SQL("ANALYZE {}").format(sql.Identifier("pgmem", table)))
                    log.info("analyzed %s: planner statistics were far behind", ", ".join(stale))
        except Conflict as exc:
            if exc.sqlstate != _LOCK_NOT_AVAILABLE:
                raise
            log.debug("statistics of %s not refreshed: a vacuum or analyze holds the table", stale)

    async def scope_size(self, memory: str | None, connection: AsyncConnection[Any] | None) -> int | None:
        """BM25's N for keyword search (:mod:`pgmem.planning.search.keyword`) when the statement cannot read
        it itself: for a search without a memory, how many messages the namespace holds, counted at most
        every :data:`~pgmem.planning.search.plan.SCOPE_SIZE_TTL` seconds (an N a minute old changes scores
        by what the namespace grew in that minute). None for a memory: the statement sums its counts."""
        if memory is not None:
            return None
        now = time.monotonic()
        known = self._namespace_size
        if known is None or now - known[1] > SCOPE_SIZE_TTL:
            size = await self._client.executor.scalar(NAMESPACE_SIZE, {"ns": self.namespace}, connection)
            known = self._namespace_size = (int(size or 0), now)
        return known[0]

    async def _default_exact_limit(
        self, corpus: Corpus, model_id: int, connection: AsyncConnection[Any] | None, *, namespace_only: bool
    ) -> int:
        """:func:`~pgmem.planning.search.plan.default_exact_limit` of the number of vectors of ``model_id``
        the namespace holds in ``corpus`` (counted up to
        :data:`~pgmem.planning.search.plan.MAX_COUNTED_VECTORS`, again every
        :data:`~pgmem.planning.search.plan.VECTOR_ROWS_TTL` seconds).

        The namespace's own count, not the table's: with the table's (its planner statistics, until
        revision 0016) a 629-message memory was searched exactly or through the index depending on what
        other namespaces held, and so got other answers."""
        now = time.monotonic()
        key = (corpus.name, model_id)
        known = self._vector_rows.get(key)
        if known is None or now - known[1] > VECTOR_ROWS_TTL:
            params = {"ns": self.namespace, "model": model_id, "cap": MAX_COUNTED_VECTORS}
            counted = await self._client.executor.scalar(corpus.count_vectors, params, connection)
            known = self._vector_rows[key] = (float(counted or 0.0), now)
        return default_exact_limit(known[0], namespace_only=namespace_only)


def hnsw_settings(ef: int) -> dict[str, str]:
    """The settings of an HNSW index scan that wants ``ef`` candidates (at least :data:`SESSION_EF_SEARCH`,
    at most :data:`~pgmem.planning.search.plan.MAX_EF_SEARCH`), with iterative scans on: on for every index
    scan, since the namespace filters even a search with no other filter (the index holds every tenant's
    vectors of the model). They are local to the statement's transaction and go in the statement that sets
    the namespace (:func:`pgmem._async.scope.rows`): no session state, nothing for a distributed planner to
    miss on its workers, no extra round trip."""
    return {
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.ef_search": str(max(SESSION_EF_SEARCH, min(ef, MAX_EF_SEARCH))),
    }
