"""The exact-or-index rule that message search and item search share, without I/O: how many candidates
an exact search may have, how long a count of them is remembered, how deep an index scan may go, and
which tables each kind of search reads. The core's planner (``pgmem._async.search_planner``) counts the
candidates, reads the planner statistics and decides with these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import LiteralString

__all__ = [
    "COUNT_TTL",
    "FILTERED_EXACT_FACTOR",
    "ITEMS",
    "MAX_EF_SEARCH",
    "MAX_COUNTED_VECTORS",
    "MESSAGES",
    "NAMESPACE_EXACT_FACTOR",
    "NAMESPACE_EXACT_FLOOR",
    "SCOPE_SIZE_TTL",
    "STATISTICS_CHECK_INTERVAL",
    "VECTOR_ROWS_TTL",
    "Corpus",
    "default_exact_limit",
]

#: Seconds a filtered search remembers how many candidates its filters keep (it picks the strategy).
COUNT_TTL = 5.0
#: Seconds between two checks of the search tables' planner statistics by one client.
STATISTICS_CHECK_INTERVAL = 10.0
#: Seconds a client remembers how many vectors of a model its namespace holds.
VECTOR_ROWS_TTL = 60.0
#: The most vectors counted for that (about 40 ms at this bound; beyond it the rule's limits are capped
#: anyway, or nearly: 8 * sqrt(1M) = 8,000 of the 20,000).
MAX_COUNTED_VECTORS = 1_000_000
#: Seconds a client remembers how many messages a memory (or its namespace) holds: keyword search's N.
SCOPE_SIZE_TTL = 60.0
#: An exact search wins below ``FACTOR * sqrt(N)`` candidates, N the stored vectors (see
#: :func:`default_exact_limit`). A filtered search's exact scan fetches each candidate by key; one
#: restricted by the namespace alone reads the namespace's vectors in index order, about 7x cheaper each
#: (0.6 against 4.5 us), so it stays exact for larger namespaces.
FILTERED_EXACT_FACTOR = 8
NAMESPACE_EXACT_FACTOR = 20
#: A namespace of at most this many vectors of a model is searched exactly (1.2 ms at 0.6 us each, about
#: one index search): N being the namespace's own count, the ``20 * sqrt(N)`` rule alone would send every
#: namespace above 500 vectors to the index, which holds every tenant's vectors, where a small tenant's
#: walk is long.
NAMESPACE_EXACT_FLOOR = 2_000
#: The largest ``hnsw.ef_search`` an index scan is given. A search that wants more candidates still
#: walks on (iterative scans); the item store's deeper pages are searched exactly instead.
MAX_EF_SEARCH = 1000


def default_exact_limit(vectors: float, *, namespace_only: bool) -> int:
    """``8 * sqrt(N)`` candidates for a filtered search, ``20 * sqrt(N)`` for one restricted by the
    namespace alone, N the number of vectors of the model the namespace holds; at least 500 (2,000 for the
    namespace), at most 20,000 (50,000 for the namespace).

    A filtered exact search costs about 4.5 µs per candidate (a primary-key fetch and a distance), an
    exact scan of a namespace's vectors about 0.6 µs; an iterative index scan under a filter that keeps
    a fraction s of the rows costs about 0.3 ms / s (measured on 34k MiniLM vectors, benchmarks/vectors.py
    parts B and N). They break even at s = 8.2 / sqrt(N) and 22 / sqrt(N).
    """
    factor, floor, cap = (
        (NAMESPACE_EXACT_FACTOR, NAMESPACE_EXACT_FLOOR, 50_000)
        if namespace_only
        else (FILTERED_EXACT_FACTOR, 500, 20_000)
    )
    return int(min(cap, max(floor, factor * math.sqrt(max(0.0, vectors)))))


@dataclass(frozen=True, slots=True)
class Corpus:
    """What one kind of search reads: ``vectors``, the table of its vectors, and ``tables``, those whose
    planner statistics its statements rely on (analyzed when they fall far behind)."""

    name: str
    vectors: str
    tables: tuple[str, ...]
    #: How many vectors of model ``%(model)s`` the namespace holds, up to ``%(cap)s``.
    count_vectors: LiteralString


#: Message search: the memory's entries, the messages, their vectors.
MESSAGES = Corpus(
    "messages",
    "embeddings",
    ("messages", "memory_entries", "embeddings"),
    "SELECT count(*) FROM (SELECT 1 FROM pgmem.embeddings "
    "WHERE namespace = %(ns)s AND model_id = %(model)s LIMIT %(cap)s) AS c",
)
#: The item store's search (LangGraph's store): the items, their vectors. An item search is always a
#: filtered one (each candidate item is probed for its vectors), whatever its filters.
ITEMS = Corpus(
    "items",
    "item_vectors",
    ("items", "item_vectors"),
    "SELECT count(*) FROM (SELECT 1 FROM pgmem.item_vectors "
    "WHERE namespace = %(ns)s AND model_id = %(model)s LIMIT %(cap)s) AS c",
)
