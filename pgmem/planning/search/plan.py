"""The exact-or-index rule that message search and item search share, without I/O: how many candidates
an exact search may have, how long a count of them is remembered, how deep an index scan may go, and
which tables each kind of search reads. The core's planner (``pgmem._async.search_planner``) counts the
candidates, reads the planner statistics and decides with these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "COUNT_TTL",
    "FILTERED_EXACT_FACTOR",
    "ITEMS",
    "MAX_EF_SEARCH",
    "MESSAGES",
    "NAMESPACE_EXACT_FACTOR",
    "STATISTICS_CHECK_INTERVAL",
    "VECTOR_ROWS_TTL",
    "Corpus",
    "default_exact_limit",
]

#: Seconds a filtered search remembers how many candidates its filters keep (it picks the strategy).
COUNT_TTL = 5.0
#: Seconds between two checks of the search tables' planner statistics by one client.
STATISTICS_CHECK_INTERVAL = 10.0
#: Seconds a client remembers how many vectors a search table holds (planner statistics).
VECTOR_ROWS_TTL = 60.0
#: An exact search wins below ``FACTOR * sqrt(N)`` candidates, N the stored vectors (see
#: :func:`default_exact_limit`). A filtered search's exact scan fetches each candidate by key; one
#: restricted by the namespace alone reads the namespace's vectors in index order, about 7x cheaper each
#: (0.6 against 4.5 us), so it stays exact for larger namespaces.
FILTERED_EXACT_FACTOR = 8
NAMESPACE_EXACT_FACTOR = 20
#: The largest ``hnsw.ef_search`` an index scan is given. A search that wants more candidates still
#: walks on (iterative scans); the item store's deeper pages are searched exactly instead.
MAX_EF_SEARCH = 1000


def default_exact_limit(vectors: float, *, namespace_only: bool) -> int:
    """``8 * sqrt(N)`` candidates for a filtered search, ``20 * sqrt(N)`` for one restricted by the
    namespace alone, N the number of stored vectors; at least 500, at most 20,000 (50,000 for the
    namespace).

    A filtered exact search costs about 4.5 µs per candidate (a primary-key fetch and a distance), an
    exact scan of a namespace's vectors about 0.6 µs; an iterative index scan under a filter that keeps
    a fraction s of the rows costs about 0.3 ms / s (measured on 34k MiniLM vectors, benchmarks/vectors.py
    parts B and N). They break even at s = 8.2 / sqrt(N) and 22 / sqrt(N).
    """
    factor, cap = (NAMESPACE_EXACT_FACTOR, 50_000) if namespace_only else (FILTERED_EXACT_FACTOR, 20_000)
    return int(min(cap, max(500, factor * math.sqrt(max(0.0, vectors)))))


@dataclass(frozen=True, slots=True)
class Corpus:
    """What one kind of search reads: ``vectors``, the table of its vectors (its planner statistics say
    how many there are), and ``tables``, those whose planner statistics its statements rely on (analyzed
    when they fall far behind)."""

    name: str
    vectors: str
    tables: tuple[str, ...]

    @property
    def vectors_table(self) -> str:
        """The qualified name of the vectors' table (for ``::regclass``)."""
        return f"pgmem.{self.vectors}"


#: Message search: the memory's entries, the messages, their vectors.
MESSAGES = Corpus("messages", "embeddings", ("messages", "memory_entries", "embeddings"))
#: The item store's search (LangGraph's store): the items, their vectors. An item search is always a
#: filtered one (each candidate item is probed for its vectors), whatever its filters.
ITEMS = Corpus("items", "item_vectors", ("items", "item_vectors"))
