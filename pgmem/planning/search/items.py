"""The item store's search (``client.items.search``, LangGraph's store): its filters and its statements.

An item is a JSON object at ``(path, key)`` inside the client's namespace, with an optional TTL and, per
embedding model, vectors of some of its texts (:mod:`pgmem.planning.items`). A search is one statement:

* without a query vector: the items under a path prefix that pass the filters, newest ``updated_at``
  first (ties by path and key), ``limit`` rows after ``offset``;
* with one, an item scores as its best vector (by the model's distance, scored as LangGraph's
  ``PostgresStore`` scores it: :mod:`pgmem.planning.distances`). ``exact``: every
  candidate's vectors are compared (no index); ``ann``: the model's partial HNSW index on
  ``item_vectors`` is walked with pgvector's iterative scans, the filters applied during the scan, for
  ``n`` vectors (at least ``offset + limit`` items' worth), and the hits ordered exactly. Which of the two
  runs is the planner's choice, the same rule as message search's (:mod:`pgmem.planning.search.plan`,
  ``pgmem._async.search_planner``, counting with :func:`count_statement`); the caller runs the exact
  statement when the index scan came back short, so a page is never short while enough items match
  (:class:`pgmem._async.items.AsyncItemRepository`).

Filters are JSON comparisons on top-level fields of the value, as message search's ``metadata=``
(:mod:`pgmem.planning.search.metadata`): equality (``{"k": v}`` or ``$eq``, JSON equality), ``$ne`` (a
missing field is not equal), and ``$gt $gte $lt $lte`` between values of the same JSON type (numbers
numerically, strings by code point... as ``jsonb`` compares them).
"""

from __future__ import annotations

import functools
from typing import Any, LiteralString

from psycopg import sql

from pgmem.errors import InvalidInput
from pgmem.planning import distances
from pgmem.planning.search.metadata import FILTER_OPERATORS, compile_filter, json_terms
from pgmem.planning.search.model import EmbeddingModel

__all__ = [
    "FILTER_OPERATORS",
    "MAX_ITEM_LIMIT",
    "as_of_statement",
    "check_filter",
    "check_page",
    "count_statement",
    "index_ddl",
    "index_name",
    "path_params",
    "search_statement",
]

#: The largest ``offset + limit`` of a search.
MAX_ITEM_LIMIT = 100_000


def check_page(limit: Any, offset: Any) -> tuple[int, int]:
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(f"{name} must be a non-negative integer, got {value!r}")
    if limit + offset > MAX_ITEM_LIMIT:
        raise InvalidInput(f"offset + limit must be at most {MAX_ITEM_LIMIT}, got {offset + limit}")
    return limit, offset


def check_filter(filter: Any) -> tuple[tuple[tuple[str, str], ...], dict[str, Any]]:
    """``(shape, params)`` of a filter (:func:`pgmem.planning.search.metadata.compile_filter`, parameters
    ``fk<i>``, ``fv<i>``, ``fc<i>``): shape is ``(("fk<i>", operator), ...)`` in order (the statement's
    text depends on the operators only)."""
    operators, params = compile_filter(filter, "f")
    return tuple((f"fk{i}", op) for i, op in enumerate(operators)), params


def path_params(prefix: tuple[str, ...]) -> dict[str, Any]:
    """``prefix`` of a path prefix (None: the empty one): the statements read the paths under it as a range
    of ``path_key`` (:data:`PREFIX_RANGE`)."""
    return {"prefix": list(prefix) if prefix else None}


#: The items ``i`` under ``%(prefix)s``: a range of their path key (migration 0026), which under row-level
#: security is an index condition (text's comparisons are leakproof; the path's, text[]'s, were not).
PREFIX_RANGE = (
    "i.path_key >= pgmem.path_key(%(prefix)s::text[]) AND i.path_key < pgmem.path_prefix_end(%(prefix)s::text[])"
)


def index_name(model: EmbeddingModel) -> str:
    """The name of the model's partial HNSW index on ``item_vectors``."""
    return model.table_index_name("item_vectors")


def index_ddl(model: EmbeddingModel) -> sql.Composed:
    """The model's partial HNSW index on ``item_vectors`` (the operator class of its distance;
    binary-quantized above 4,000 dimensions, as the messages' index), built concurrently."""
    return model.index_ddl("item_vectors")


# -- statements ---------------------------------------------------------------------------------------------

_ROW = "i.path, i.key, i.value, i.created_at, i.updated_at"


def _item_terms(prefix: bool, shape: tuple[tuple[str, str], ...], omit_expired: bool) -> list[sql.Composable]:
    """WHERE terms on an ``items`` alias ``i`` (the namespace's term excluded): the filters first, then the
    prefix. Under row-level security the filters' equalities (the GIN index of migration 0016,
    :mod:`pgmem.planning.search.metadata`) and the prefix's range of path keys can be index conditions;
    what is not one is tested on every candidate item, in this order (terms of equal cost keep it)."""
    terms = json_terms(sql.SQL("i.value"), tuple(op for _, op in shape), "f")
    if prefix:
        terms.append(sql.SQL(PREFIX_RANGE))
    if omit_expired:
        terms.append(sql.SQL("(i.expires_at IS NULL OR i.expires_at > now())"))
    return terms


def _and(terms: list[sql.Composable]) -> sql.Composable:
    return sql.SQL("").join(sql.SQL(" AND {}").format(t) for t in terms)


def _text(composed: sql.Composable) -> LiteralString:
    # Only the model's id and dimension are literals (integers): no quoting context is needed.
    text: LiteralString = composed.as_string(None)
    return text


@functools.lru_cache(maxsize=512)
def count_statement(prefix: bool, shape: tuple[tuple[str, str], ...], omit_expired: bool) -> LiteralString:
    """How many items pass the filters, counted no further than ``%(exact_limit)s + 1``."""
    return _text(
        sql.SQL(
            "SELECT count(*) FROM (SELECT 1 FROM pgmem.items AS i WHERE i.namespace = %(ns)s{} "
            "LIMIT %(exact_limit)s + 1) AS c"
        ).format(_and(_item_terms(prefix, shape, omit_expired)))
    )


@functools.lru_cache(maxsize=1024)
def search_statement(
    kind: str,
    prefix: bool,
    shape: tuple[tuple[str, str], ...],
    omit_expired: bool,
    model: EmbeddingModel | None = None,
    n: int = 0,
) -> LiteralString:
    """One search: rows.ItemHitRow (the item, its score, and for ``ann`` how many vectors the index scan
    returned, to tell a short scan), then the item's id and whether it has a live TTL (what a read that
    refreshes TTLs passes to ``items.refresh``). ``kind``: ``list`` (no query), ``recent`` (no query,
    among the namespace's newest ``%(walk)s`` items only), ``exact`` or ``ann`` (``model``'s vectors,
    query ``%(q)s``). Parameters: ns, limit, offset, the prefix's and the filter's. ``n``: for ``ann``, how
    many vectors the scan reads, written into the text (as a parameter, its LIMIT made the same search
    ~20% slower at 34k items, planned with its value all the same). Run unprepared (see
    ``AsyncItemRepository``).

    A search never writes: refreshing TTLs inside it (an UPDATE in a CTE) cost every search ~0.7 ms
    (34k items, RLS), most of it for stores that hold no item with a TTL."""
    terms = _and(_item_terms(prefix, shape, omit_expired))
    if kind in ("list", "recent"):
        # The page first, then its order numbered: a window over every row that passes would sort them
        # all (34k items under a prefix: an external sort, 62 ms) where LIMIT keeps a top-N heap.
        source = sql.SQL("pgmem.items AS i WHERE i.namespace = %(ns)s")
        if kind == "recent":
            # The namespace's newest %(walk)s items (ties included: every item left out is older than every
            # one walked), newest first through items_updated_idx, then the filters. Under row-level
            # security the planner estimates a prefix at one row and would rather sort every item under it
            # (see _item_terms); this walk is bounded, and its page is exact whenever it is full.
            source = sql.SQL(
                "(SELECT * FROM pgmem.items AS i WHERE i.namespace = %(ns)s "
                "ORDER BY i.updated_at DESC FETCH FIRST %(walk)s ROWS WITH TIES) AS i WHERE TRUE"
            )
        body = sql.SQL(
            "SELECT p.*, row_number() OVER (ORDER BY p.updated_at DESC, p.path, p.key) AS rn FROM ("
            "SELECT {row}, NULL::float8 AS score, NULL::bigint AS scanned, i.id, i.ttl_minutes IS NOT NULL AS ttl "
            "FROM {source}{terms} "
            "ORDER BY i.updated_at DESC, i.path, i.key LIMIT %(limit)s OFFSET %(offset)s) AS p"
        ).format(row=sql.SQL(_ROW), source=source, terms=terms)
    else:
        assert model is not None
        vec = model.vector_expr("v")
        q = model.param("q")
        op = sql.SQL(distances.operator(model.distance))
        if kind == "exact":
            # One index probe of item_vectors per candidate item (a correlated subquery): the exact strategy
            # runs for small candidate sets, which a hash join over every vector of the model would read
            # in full (measured at 34k items, 1% filter: 8.3 ms as a join, 2-3 ms so).
            body = sql.SQL(
                "SELECT {row}, {score} AS score, NULL::bigint AS scanned, i.id, "
                "i.ttl_minutes IS NOT NULL AS ttl, row_number() OVER (ORDER BY i.distance, i.path, i.key) AS rn FROM ("
                "SELECT i.*, (SELECT min({vec} {op} {q}) FROM pgmem.item_vectors AS v "
                "WHERE v.namespace = i.namespace AND v.item_id = i.id AND v.model_id = {m}) AS distance "
                "FROM pgmem.items AS i WHERE i.namespace = %(ns)s{terms}) AS i "
                "WHERE i.distance IS NOT NULL "
                "ORDER BY i.distance, i.path, i.key LIMIT %(limit)s OFFSET %(offset)s"
            ).format(
                row=sql.SQL(_ROW),
                score=sql.SQL(distances.score_sql(model.distance, "i.distance")),
                vec=vec,
                op=op,
                q=q,
                m=sql.Literal(model.id),
                terms=terms,
            )
        else:
            # The filters are a probe of the item per vector the index scan returns, kept a subplan (OFFSET
            # 0: not pulled up into a join). Under row-level security the planner may not read statistics
            # through the filters' operators (not leakproof), so it estimates a prefix or filter from
            # defaults (a prefix holding all 34k items: 1 row), and as a join it chose to compute the
            # distance of every item under the prefix (80 ms against 3 ms walking the index). The
            # strategy already counted that many items pass: the index walk is the plan wanted.
            exists = (
                sql.SQL(
                    " AND EXISTS (SELECT 1 FROM pgmem.items AS i "
                    "WHERE i.namespace = v.namespace AND i.id = v.item_id{} OFFSET 0)"
                ).format(terms)
                if prefix or shape or omit_expired
                else sql.SQL("")
            )
            scan: sql.Composable = sql.SQL(
                "SELECT v.item_id, {vec} {op} {q} AS distance "
                "FROM pgmem.item_vectors AS v WHERE v.namespace = %(ns)s AND v.model_id = {m}{exists} "
                "ORDER BY {order} LIMIT {n}"
            ).format(
                vec=sql.SQL("v.{}").format(sql.Identifier(model.column)) if model.quantized else vec,
                op=op,
                q=q,
                m=sql.Literal(model.id),
                exists=exists,
                order=model.index_order("v", q),
                n=model.candidates(sql.Literal(n)) if model.quantized else sql.Literal(n),
            )
            if model.quantized:
                # candidates by Hamming distance (the binary-quantized index), the best n by exact distance
                scan = sql.SQL("SELECT r.item_id, r.distance FROM ({}) AS r ORDER BY r.distance LIMIT {}").format(
                    scan, sql.Literal(n)
                )
            best = sql.SQL(
                # The window sums the groups' sizes: how many vectors the scan returned (a window in the
                # scan itself would count before LIMIT and defeat the index).
                "SELECT s.item_id, min(s.distance) AS distance, (sum(count(*)) OVER ())::bigint AS scanned "
                "FROM ({}) AS s GROUP BY s.item_id"
            ).format(scan)
            # Each hit's item is one probe of items_id_key (a LATERAL subquery the planner keeps apart
            # from the join order: as a join it may hash all the namespace's items, not knowing how
            # few rows LIMIT n leaves).
            body = sql.SQL(
                "SELECT {row}, {score} AS score, b.scanned, i.id, i.ttl_minutes IS NOT NULL AS ttl, "
                "row_number() OVER (ORDER BY b.distance, i.path, i.key) AS rn "
                "FROM ({best}) AS b CROSS JOIN LATERAL ("
                "SELECT * FROM pgmem.items AS i WHERE i.namespace = %(ns)s AND i.id = b.item_id OFFSET 0) AS i "
                "ORDER BY b.distance, i.path, i.key LIMIT %(limit)s OFFSET %(offset)s"
            ).format(row=sql.SQL(_ROW), score=sql.SQL(distances.score_sql(model.distance, "b.distance")), best=best)
    columns = sql.SQL("h.path, h.key, h.value, h.created_at, h.updated_at, h.score, h.scanned, h.id, h.ttl")
    return _text(sql.SQL("SELECT {} FROM ({}) AS h ORDER BY h.rn").format(columns, body))


@functools.lru_cache(maxsize=256)
def as_of_statement(prefix: bool, shape: tuple[tuple[str, str], ...]) -> LiteralString:
    """A search without a query as of ``%(at)s`` (migration 0022): the items under the prefix as they were
    then, those that pass the filters, newest ``updated_at`` (the version's) first, rows as
    :func:`search_statement`'s (score and scanned NULL; ttl false: a read of the past refreshes nothing).

    A current row counts when it was written by then, a version of ``pgmem.item_history`` when it was
    valid then; either, when it had expired then, not. Of two versions of one item valid at once (an item
    deleted and re-created by a transaction that started before the delete), the later-written one. The
    filters test that version (after the choice: an older version passing them must not stand in)."""
    pre = sql.SQL(" AND " + PREFIX_RANGE) if prefix else sql.SQL("")
    filters = _and(json_terms(sql.SQL("v.value"), tuple(op for _, op in shape), "f"))
    return _text(
        sql.SQL(
            "SELECT v.path, v.key, v.value, v.created_at, v.updated_at, NULL::float8 AS score, NULL::bigint AS "
            "scanned, v.id, false AS ttl FROM ("
            "SELECT DISTINCT ON (u.path, u.key) u.* FROM ("
            "SELECT i.path, i.key, i.value, i.created_at, i.updated_at, i.id FROM pgmem.items AS i "
            "WHERE i.namespace = %(ns)s{pre} AND i.updated_at <= %(at)s "
            "AND (i.expires_at IS NULL OR i.expires_at > %(at)s) "
            "UNION ALL "
            "SELECT i.path, i.key, i.value, i.created_at, i.valid_from, i.item_id FROM pgmem.item_history AS i "
            "WHERE i.namespace = %(ns)s{pre} AND i.valid_from <= %(at)s AND i.valid_to > %(at)s "
            "AND (i.expires_at IS NULL OR i.expires_at > %(at)s)"
            ") AS u ORDER BY u.path, u.key, u.updated_at DESC) AS v WHERE TRUE{filters} "
            "ORDER BY v.updated_at DESC, v.path, v.key LIMIT %(limit)s OFFSET %(offset)s"
        ).format(pre=pre, filters=filters)
    )
