# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""Search planning: which strategy a search takes, and the planner statistics it relies on."""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

from psycopg import Connection, errors, sql

from pgmem._sync import scope
from pgmem._sync.base import Repository
from pgmem.errors import translate
from pgmem.planning import statements
from pgmem.planning.rows import AnalyzeLockRow
from pgmem.planning.search import EmbeddingModel, SearchFilters, statement

if TYPE_CHECKING:
    from pgmem._sync.client import Client

__all__ = ["ANALYZE_LOCK_KEY", "COUNT_TTL", "STATISTICS_CHECK_INTERVAL", "SearchPlanner"]

Q = statements.load("vectors")
log = logging.getLogger("pgmem.vectors")

#: Seconds a filtered search remembers how many candidates its filters keep (it picks the strategy).
COUNT_TTL = 5.0
#: Seconds between two checks of the search tables' planner statistics by one client.
STATISTICS_CHECK_INTERVAL = 10.0
#: An exact search wins below ``FACTOR * sqrt(N)`` candidates, N the stored vectors (see
#: :meth:`AsyncSearchPlanner._default_exact_limit`). A filtered search's exact scan fetches each candidate
#: by key; one restricted by the namespace alone reads the namespace's vectors in index order, about 7x
#: cheaper each (0.6 against 4.5 us), so it stays exact for larger namespaces.
FILTERED_EXACT_FACTOR = 8
NAMESPACE_EXACT_FACTOR = 20

#: Key of the advisory lock under which one process analyzes the search tables.
ANALYZE_LOCK_KEY = 0x70676D656D03


class SearchPlanner(Repository):
    """Chooses ``exact`` or ``ann`` per search (see :mod:`pgmem.planning.search`) from remembered counts,
    and keeps the search tables' planner statistics from falling far behind them."""

    queries = Q

    def __init__(self, client: Client) -> None:
        super().__init__(client)
        self._counts: dict[tuple[SearchFilters, int, int], tuple[int, float]] = {}
        self._vector_rows: tuple[float, float] | None = None
        self._statistics_checked = -math.inf

    def strategy(
        self,
        model: EmbeddingModel,
        filters: SearchFilters,
        mode: str,
        exact_limit: int | None,
        connection: Connection[Any] | None,
    ) -> str:
        """``exact`` or ``ann`` for this search.

        The candidates are counted (no further than ``exact_limit + 1``; with no filter but the namespace,
        the namespace's vectors of the model) and the count is remembered for :data:`COUNT_TTL` seconds: a
        stale count can only pick the slower strategy for a while, never a wrong answer (both are
        complete).
        """
        if mode != "auto":
            return mode
        if exact_limit is None:
            exact_limit = self._default_exact_limit(connection, namespace_only=not filters.filtered)
        key = (filters, exact_limit, model.id)
        now = time.monotonic()
        known = self._counts.get(key)
        if known is None or now - known[1] > COUNT_TTL:
            params = {"ns": self.namespace, "exact_limit": exact_limit, **filters.params()}
            with translate():
                with self._client.connection(connection) as conn:
                    found = scope.rows(conn, self.namespace, statement("count", model, filters), params)
            known = (int(found[0][0]) if found else 0, now)
            if len(self._counts) > 10_000:
                self._counts.clear()
            self._counts[key] = known
        return "exact" if known[0] <= exact_limit else "ann"

    def fresh_statistics(self, connection: Connection[Any] | None) -> None:
        """Analyze the search tables when their planner statistics are far behind them.

        Autovacuum analyzes a table once it has changed by 10% and the launcher visits the database (every
        minute by default). Until then, statistics taken while a table held a few rows call every column
        unique, and a filtered HNSW search probed a whole namespace per candidate instead of one message
        (seconds per search). Each client checks at most every :data:`STATISTICS_CHECK_INTERVAL` seconds
        (one read of the statistics views), on its own connections only, never in a caller's transaction;
        one process analyzes at a time and none waits on another's lock for long (autovacuum may hold it).
        """
        now = time.monotonic()
        if connection is not None or now - self._statistics_checked < STATISTICS_CHECK_INTERVAL:
            return
        if not self._client.owns_transactions:
            return  # a client on the caller's single connection: not ours to analyze from
        self._statistics_checked = now
        with translate():
            with self._client.connection() as conn:
                cur = conn.execute(Q["stale_statistics"])
                stale = [row[0] for row in cur.fetchall()]
                if not stale:
                    return
                try:
                    with self._client.transaction(conn) as tx:
                        cur = tx.execute(Q["analyze_lock"], {"key": ANALYZE_LOCK_KEY})
                        found = cur.fetchone()
                        if found is not None and AnalyzeLockRow._make(found).locked:
                            for table in stale:
                                tx.execute(sql.SQL("ANALYZE {}").format(sql.Identifier("pgmem", table)))
                            log.info("analyzed %s: planner statistics were far behind", ", ".join(stale))
                except errors.LockNotAvailable:
                    log.debug("statistics of %s not refreshed: a vacuum or analyze holds the table", stale)

    def _default_exact_limit(self, connection: Connection[Any] | None, *, namespace_only: bool) -> int:
        """``8 * sqrt(N)`` candidates for a filtered search, ``20 * sqrt(N)`` for one restricted by the
        namespace alone, N the number of stored vectors (planner statistics, re-read every minute); at least
        500, at most 20,000 (50,000 for the namespace).

        A filtered exact search costs about 4.5 µs per candidate (a primary-key fetch and a distance), an
        exact scan of a namespace's vectors about 0.6 µs; an iterative index scan under a filter that keeps
        a fraction s of the rows costs about 0.3 ms / s (measured on 34k MiniLM vectors,
        benchmarks/vectors.py parts B and N). They break even at s = 8.2 / sqrt(N) and 22 / sqrt(N).
        """
        now = time.monotonic()
        if self._vector_rows is None or now - self._vector_rows[1] > 60:
            with translate():
                with self._client.connection(connection) as conn:
                    cur = conn.execute(Q["vector_rows"])
                    row = cur.fetchone()
            self._vector_rows = (max(0.0, float(row[0]) if row else 0.0), now)
        factor, cap = (NAMESPACE_EXACT_FACTOR, 50_000) if namespace_only else (FILTERED_EXACT_FACTOR, 20_000)
        return int(min(cap, max(500, factor * math.sqrt(self._vector_rows[0]))))
