"""Search: what both client flavours share, for messages and for the item store (LangGraph's): the
models and filters, the SQL each search runs, the exact-or-index rule, the results.

Where things are: :mod:`~pgmem.planning.search.model` (the embedding model: storage, index, SQL
expressions), :mod:`~pgmem.planning.search.filters` (a message search's filters and argument checks),
:mod:`~pgmem.planning.search.metadata` (filters on JSON: a message's metadata, an item's value),
:mod:`~pgmem.planning.search.keyword` (keyword search: BM25 under the same filters),
:mod:`~pgmem.planning.search.plan` (the exact-or-index rule's numbers, what each search reads),
:mod:`~pgmem.planning.search.vector` (message vector search statements),
:mod:`~pgmem.planning.search.hybrid` (hybrid search), :mod:`~pgmem.planning.search.compose` (the text of a
message search, composed once, and its logged variant), :mod:`~pgmem.planning.search.hits` (rows to
hits), :mod:`~pgmem.planning.search.items` (the item store's filters and search statements); distances
and scores are :mod:`pgmem.planning.distances`. The I/O (counting candidates, planner statistics, running
the statements) is the core's: the planner (``pgmem._async.search_planner``) decides for both searches.

How a vector search runs (one statement, one round trip), for messages and items alike:

* ``exact`` — when the filters keep at most ``exact_limit`` rows (counted once and remembered for a few
  seconds; default ``8 * sqrt(stored vectors)``, where the two strategies cost the same, ``20 * sqrt(...)``
  for a message search restricted by its namespace alone, whose exact scan is cheaper per row), the
  candidate rows (the memory's entries, the namespace's messages that pass the filters, or with no other
  filter the namespace's vectors of the model; for the item store, the items under the prefix that pass
  its filters) are fetched and their distances computed exactly (no index). This is what makes a filter
  that keeps 1% of the rows return ``k`` results with full recall.
* ``ann`` — otherwise the model's partial HNSW index is scanned with pgvector's iterative index scans
  (``hnsw.iterative_scan = relaxed_order``), which keep walking the graph until ``k`` rows have passed the
  filters; the final order is exact (``ORDER BY distance`` over the hits).

The namespace is a filter like any other: the index holds every tenant's vectors of a model, so a search
with no other filter is planned the same way (a tenant holding 1% of a model's vectors is searched
exactly; a plain index scan post-filtered on the namespace came back short).
Each model ranks by the distance it was registered with (cosine, L2 or inner product); scores follow
LangGraph's (:mod:`pgmem.planning.distances`): cosine similarity ``1 - distance`` by default, ``-distance``
for the other two. ``threshold`` keeps hits with a score at or above it.

Hybrid search ranks each message by both legs, the vector search and the keyword search (BM25, README,
"Keyword search"), each cut at ``max(4 k, 40)`` candidates, then fuses them (``fusion``):

* ``convex`` (default): ``w_vector * closeness + w_text * coverage``. Closeness is the vector distance
  scaled over the leg's candidates (the closest 1, the farthest 0), so every distance and every model's
  range of scores fuse alike; coverage is the share of the query's words the message holds, each word
  weighted by its rarity (BM25's idf), so a message holding every word has 1 and one holding a single
  common word little. A message missing from a leg gets 0 from it. Chosen over RRF by measurement
  (benchmarks/README.md, "Search quality"): rank fusion gives a leg's first hit the same weight
  whether it matched the whole question or one common word of it, so a weak leg drags the fused list
  down; coverage says how well the keyword leg matched, and closeness keeps the vector leg's margins.
* ``rrf``: reciprocal rank fusion, ``w_vector / (rrf_k + rank_vector) + w_text / (rrf_k + rank_text)``
  (``rrf_k = 60``, the constant of Cormack et al., 2009), the default before revision 0014.

Either is multiplied by ``0.5 ** (age / half_life)`` when a recency half-life is given. A leg weighted 0
is left out of the statement: it does not run (``w_vector=0`` embeds no query) and brings no candidates.
"""

from __future__ import annotations

from pgmem.planning.search.compose import hybrid_text_statement, keyword_statement, logged_sql, statement
from pgmem.planning.search.filters import MAX_K, Mode, SearchFilters, check_exact_limit, check_k, check_mode
from pgmem.planning.search.hits import (
    MESSAGE_WIDTH,
    MODEL_SWITCH_ATTEMPTS,
    SearchHit,
    as_query_vector,
    batch_hits,
    forked,
    hybrid_hit,
    log_text,
    retrieval_params,
    still_switching,
    switched,
    unpack_vectors,
    vector_hit,
    vector_hits,
)
from pgmem.planning.search.hybrid import FUSIONS, LEGS, check_fusion, check_half_life, hybrid_legs, hybrid_search_sql
from pgmem.planning.search.keyword import keyword_search_sql
from pgmem.planning.search.metadata import MetadataFilter
from pgmem.planning.search.model import (
    BINARY_ABOVE,
    HALFVEC_ABOVE,
    MIN_CANDIDATES,
    OVERSAMPLE,
    EmbeddingModel,
    model_of,
    storage_kind,
)
from pgmem.planning.search.vector import (
    MESSAGE_COLUMNS,
    batch_search_sql,
    candidates_sql,
    count_sql,
    vector_search_sql,
)

__all__ = [
    "BINARY_ABOVE",
    "FUSIONS",
    "HALFVEC_ABOVE",
    "LEGS",
    "MAX_K",
    "MESSAGE_COLUMNS",
    "MESSAGE_WIDTH",
    "MIN_CANDIDATES",
    "MODEL_SWITCH_ATTEMPTS",
    "OVERSAMPLE",
    "EmbeddingModel",
    "MetadataFilter",
    "Mode",
    "SearchFilters",
    "SearchHit",
    "as_query_vector",
    "batch_hits",
    "forked",
    "batch_search_sql",
    "candidates_sql",
    "check_exact_limit",
    "check_fusion",
    "check_half_life",
    "check_k",
    "check_mode",
    "count_sql",
    "hybrid_hit",
    "hybrid_legs",
    "hybrid_search_sql",
    "hybrid_text_statement",
    "keyword_search_sql",
    "keyword_statement",
    "log_text",
    "logged_sql",
    "model_of",
    "retrieval_params",
    "statement",
    "still_switching",
    "storage_kind",
    "switched",
    "unpack_vectors",
    "vector_hit",
    "vector_hits",
    "vector_search_sql",
]
