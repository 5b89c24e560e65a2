"""The SQL text of a message search, composed once per shape and reused (so psycopg can prepare it), and
its variant that records what it returned in the retrieval log."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any, LiteralString

from psycopg import sql

from pgmem.planning.distances import DEFAULT_DISTANCE, score_sql
from pgmem.planning.search.filters import SearchFilters
from pgmem.planning.search.hybrid import hybrid_search_sql
from pgmem.planning.search.keyword import keyword_search_sql
from pgmem.planning.search.metadata import MetadataFilter
from pgmem.planning.search.model import EmbeddingModel
from pgmem.planning.search.vector import batch_search_sql, count_sql, vector_search_sql

__all__ = ["hybrid_text_statement", "keyword_statement", "logged_sql", "statement"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


#: The row order each kind of search returns (the logged variant re-sorts the hits it read back).
_ORDER = {
    "vector": "h.distance, h.id",
    "batch": "h.ord, h.distance, h.id",
    "hybrid": "h.score DESC, h.id",
    "keyword": "h.score DESC, h.seq DESC",
}


def logged_sql(kind: str, search: sql.Composable, k: int = 0, distance: str = DEFAULT_DISTANCE) -> sql.Composed:
    """``search`` that also records what it returned in ``pgmem.retrieval_log``, in the same statement.

    The hits go through a CTE; one log row per query (for ``batch``, per query text of
    ``%(log_queries)s``, in order) lists their ids and scores best first. Parameters beyond the search's:
    ``log_label`` and ``log_query`` (``log_queries`` for a batch). Nothing is logged when the memory
    switched models under the search (its rows' ``ok`` is NULL; the caller searches again).
    """
    order = sql.SQL(_ORDER[kind])
    scored = kind in ("hybrid", "keyword")
    score = sql.SQL("h.score") if scored else sql.SQL(score_sql(distance, "h.distance"))
    if kind == "hybrid":
        limit: sql.Composable = sql.SQL("%(limit)s")
    else:
        limit = sql.Literal(k) if k else sql.SQL("%(k)s")
    columns = sql.SQL(
        "coalesce(array_agg(h.id ORDER BY {order}) FILTER (WHERE h.id IS NOT NULL), '{{}}'), "
        "coalesce(array_agg({score} ORDER BY {order}) FILTER (WHERE h.id IS NOT NULL), '{{}}')"
    ).format(order=order, score=score)
    if kind == "batch":
        source = sql.SQL(
            "SELECT %(ns)s, {kind}, %(memory)s::text, %(log_label)s::text, q.text, {limit}::int, {columns} "
            "FROM unnest(%(log_queries)s::text[]) WITH ORDINALITY AS q(text, ord) "
            "LEFT JOIN hits h ON h.ord = q.ord "
            "GROUP BY q.ord, q.text HAVING NOT coalesce(bool_or(h.id IS NOT NULL AND h.ok IS NULL), false) "
            "ORDER BY q.ord"
        )
    else:
        source = sql.SQL(
            "SELECT %(ns)s, {kind}, %(memory)s::text, %(log_label)s::text, %(log_query)s::text, {limit}::int, "
            "{columns} FROM hits h HAVING NOT coalesce(bool_or(h.ok IS NULL), false)"
        )
    return sql.SQL(
        "WITH hits AS MATERIALIZED ({search}), logged AS (INSERT INTO pgmem.retrieval_log "
        "(namespace, kind, memory, label, query, k, message_ids, scores) {source}) "
        "SELECT * FROM hits h ORDER BY {order}"
    ).format(
        search=search,
        source=source.format(kind=sql.Literal(kind), limit=limit, columns=columns),
        order=order,
    )


def _placeholder(shape: tuple[Any, ...], memory: str | None = None) -> SearchFilters:
    """Filters of ``shape`` (:attr:`SearchFilters.shape`) with dummy values, to compose a text from."""
    return SearchFilters(
        memory or ("m" if shape[0] else None),
        "" if shape[1] else None,
        "" if shape[2] else None,
        "" if shape[3] else None,
        _EPOCH if shape[4] else None,
        _EPOCH if shape[5] else None,
        0 if shape[6] else None,
        None if shape[7] is None else MetadataFilter.placeholder(shape[7]),
        lineage=shape[8],
    )


@functools.lru_cache(maxsize=256)
def _keyword_statement(shape: tuple[Any, ...], logged: bool) -> LiteralString:
    composed = keyword_search_sql(_placeholder(shape))
    if logged:
        composed = logged_sql("keyword", composed)
    text: LiteralString = composed.as_string(None)
    return text


def keyword_statement(filters: SearchFilters, *, logged: bool = False) -> LiteralString:
    """The SQL text of a keyword search (:func:`~pgmem.planning.search.keyword.keyword_search_sql`) under
    ``filters``, composed once per set of filters in use; ``logged`` as in :func:`statement`."""
    return _keyword_statement(filters.shape, logged)


@functools.lru_cache(maxsize=256)
def _hybrid_text_statement(shape: tuple[Any, ...], logged: bool) -> LiteralString:
    composed = hybrid_search_sql(None, _placeholder(shape), "exact", "text")
    if logged:
        composed = logged_sql("hybrid", composed)
    text: LiteralString = composed.as_string(None)
    return text


def hybrid_text_statement(filters: SearchFilters, *, logged: bool = False) -> LiteralString:
    """The SQL text of a hybrid search whose vector leg is weighted 0 (``w_vector=0``): its keyword leg
    only, scored as hybrid search scores it (:func:`~pgmem.planning.search.hybrid.hybrid_search_sql`,
    ``legs="text"``); no model. ``logged`` as in :func:`statement`."""
    return _hybrid_text_statement(filters.shape, logged)


@functools.lru_cache(maxsize=1024)
def _statement(
    kind: str,
    model: EmbeddingModel,
    shape: tuple[Any, ...],
    strategy: str,
    k: int,
    bounded: bool,
    logged: bool = False,
    memory: str | None = None,
    legs: str = "both",
) -> LiteralString:
    filters = _placeholder(shape, memory)
    if kind == "count":
        composed = count_sql(filters, model)
    elif kind == "vector":
        composed = vector_search_sql(model, filters, strategy, k, bounded, literal_memory=memory is not None)
    elif kind == "batch":
        composed = batch_search_sql(model, filters, strategy, k)
    else:
        composed = hybrid_search_sql(model, filters, strategy, legs)
    if logged:
        composed = logged_sql(kind, composed, k, model.distance)
    # Only integers (model id, dimension) and memory keys (letters, digits and _.:@/+=#-, checked) are
    # embedded as literals: no quoting context is needed.
    text: LiteralString = composed.as_string(None)
    return text


def statement(
    kind: str,
    model: EmbeddingModel,
    filters: SearchFilters,
    strategy: str = "ann",
    k: int = 0,
    bounded: bool = True,
    *,
    logged: bool = False,
    legs: str = "both",
) -> LiteralString:
    """The SQL text of a search (``kind``: vector, batch, hybrid, or count), composed once per model,
    set of filters in use, strategy, ``k`` (vector and batch searches) and threshold use (``bounded``,
    vector searches), then reused: the same text lets psycopg prepare it on the server. ``logged``: the
    variant that also writes ``pgmem.retrieval_log`` (:func:`logged_sql`). ``legs``: a hybrid search's
    (:func:`~pgmem.planning.search.hybrid.hybrid_search_sql`; ``text`` is :func:`hybrid_text_statement`).

    An exact search of a memory has the memory in its text, as a literal: one statement per memory. With
    the memory a parameter Postgres planned it on every call (0.15 ms at 342 candidates), because the
    generic plan, costed for an average memory, hashes every vector of the model (10.9 ms against 0.8 ms);
    with the literal it keeps one plan per memory, costed for that memory. Such searches only run on
    memories small enough for the exact strategy."""
    shape = filters.shape
    literal = filters.memory if kind == "vector" and strategy == "exact" and not filters.lineage else None
    return _statement(kind, model, shape, strategy, k, bounded, logged, literal, legs)
