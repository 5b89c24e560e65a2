"""The statements of a vector search of messages: the candidates a set of filters keeps, their count,
and the search itself (one query vector, or many in one statement), exact or through the HNSW index (see
:mod:`pgmem.planning.search`)."""

from __future__ import annotations

from psycopg import sql

from pgmem.planning.distances import operator
from pgmem.planning.search.filters import SearchFilters
from pgmem.planning.search.model import EmbeddingModel
from pgmem.planning.statements import fragment

__all__ = [
    "MESSAGE_COLUMNS",
    "batch_search_sql",
    "candidates_sql",
    "count_sql",
    "entry_filters",
    "fork_guard_sql",
    "guard_sql",
    "hits_sql",
    "vector_search_sql",
]

MESSAGE_COLUMNS = "m.seq, " + fragment("message_columns")  # a rows.MessageRow, seq the message's own
# A fork's lineage (pgmem.lineage, migration 0020): its memories, and each one's bound as a JSON object.
_LINEAGE_MEMORIES = "ARRAY(SELECT l.memory FROM pgmem.lineage(%(ns)s, %(memory)s, %(max_seq)s::bigint) AS l)"
_LINEAGE_BOUNDS = (
    "SELECT jsonb_object_agg(l.memory, l.upto) FROM pgmem.lineage(%(ns)s, %(memory)s, %(max_seq)s::bigint) AS l"
)


def entry_filters(
    f: SearchFilters, entries: str, message: str, probe: bool = False, literal_memory: bool = False
) -> list[sql.Composable]:
    """WHERE terms on a memory_entries alias and a messages alias (both already joined).

    ``probe``: the terms check one row found by its key (the index scan's filter). Their equalities are
    then written ``IS NOT DISTINCT FROM`` (the same for these non-NULL values), which no index serves: with
    ``=``, stale statistics that call the memory rare made Postgres probe through the memory's own index
    (namespace, memory, seq) and filter on the message id, walking the memory once per candidate (0.78 s
    for 5,000 rows right after they were added, against 12 ms through the message id).

    ``literal_memory``: the memory is written into the text as a literal (see :func:`statement`).
    """
    terms: list[sql.Composable] = []
    e, m = sql.Identifier(entries), sql.Identifier(message)
    eq = sql.SQL(" IS NOT DISTINCT FROM ") if probe else sql.SQL(" = ")
    if f.lineage:
        # A fork's memory (migration 0020): the entries of its lineage's memories, each up to its bound. Both
        # subqueries are uncorrelated: Postgres runs each once per statement (an InitPlan), and a row's
        # bound is one lookup in a small JSON object (NULL for a memory outside the lineage: no match).
        if not probe:
            terms.append(sql.SQL("{}.memory = ANY({})").format(e, sql.SQL(_LINEAGE_MEMORIES)))
        terms.append(sql.SQL("{}.seq <= (({}) ->> {}.memory)::bigint").format(e, sql.SQL(_LINEAGE_BOUNDS), e))
    elif f.memory is not None:
        memory = sql.Literal(f.memory) if literal_memory else sql.SQL("%(memory)s")
        terms.append(sql.SQL("{}.memory{}{}").format(e, eq, memory))
    if f.max_seq is not None and not f.lineage:
        terms.append(sql.SQL("{}.seq <= %(max_seq)s").format(e))
    if f.cause_by is not None:
        terms.append(sql.SQL("{}.cause_by{}%(cause_by)s").format(e if f.memory is not None else m, eq))
    if f.role is not None:
        terms.append(sql.SQL("{}.role{}%(role)s").format(m, eq))
    if f.sender is not None:
        terms.append(sql.SQL("{}.sent_from{}%(sender)s").format(m, eq))
    if f.since is not None:
        terms.append(sql.SQL("{}.created_at >= %(since)s").format(m))
    if f.until is not None:
        terms.append(sql.SQL("{}.created_at <= %(until)s").format(m))
    if f.metadata_filter is not None:
        terms += f.metadata_filter.terms(message)
    return terms


def candidates_sql(f: SearchFilters, literal_memory: bool = False) -> sql.Composed:
    """The ids of the messages that pass the filters (``f.filtered`` must be true)."""
    terms = entry_filters(f, "ce", "cm", literal_memory=literal_memory)
    if f.memory is not None:
        join = (
            sql.SQL(" JOIN pgmem.messages cm ON cm.namespace = ce.namespace AND cm.id = ce.message_id")
            if f.on_message
            else sql.SQL("")
        )
        return sql.SQL("SELECT ce.message_id FROM pgmem.memory_entries ce{} WHERE ce.namespace = %(ns)s AND {}").format(
            join, sql.SQL(" AND ").join(terms)
        )
    return sql.SQL("SELECT cm.id AS message_id FROM pgmem.messages cm WHERE {}").format(
        sql.SQL(" AND ").join([sql.SQL("cm.namespace = %(ns)s"), *terms])
    )


def count_sql(f: SearchFilters, model: EmbeddingModel) -> sql.Composed:
    """How many messages pass the filters, counting no further than ``%(exact_limit)s + 1``. With no filter
    but the namespace: how many vectors of ``model`` the namespace holds (a range of the primary key)."""
    if not f.filtered:
        return sql.SQL(
            "SELECT count(*) FROM (SELECT 1 FROM pgmem.embeddings ce WHERE ce.namespace = %(ns)s "
            "AND ce.model_id = {} LIMIT %(exact_limit)s + 1) AS c"
        ).format(sql.Literal(model.id))
    return sql.SQL("SELECT count(*) FROM ({} LIMIT %(exact_limit)s + 1) AS c").format(candidates_sql(f))


def _exists_filter(f: SearchFilters) -> sql.Composed:
    """The filters as a condition on an embeddings row ``e`` during the index scan.

    Written as a correlated scalar subquery, ``(SELECT true FROM … LIMIT 1)``, which Postgres can neither
    turn into a join (that could drive the search from the filter's rows) nor hash: it stays a per-row
    primary-key probe of the rows the HNSW scan yields. An ``EXISTS`` here was hashed (the whole memory
    read and hashed per search: 7.7 ms against 1.3 ms for a memory holding all 34k vectors) or, written
    plainly, sometimes planned as a join driven by the memory's entries.
    """
    if f.memory is not None:
        terms: list[sql.Composable] = [sql.SQL("fe.namespace = e.namespace"), sql.SQL("fe.message_id = e.message_id")]
        terms += entry_filters(f, "fe", "fm", probe=True)
        join = (
            sql.SQL(" JOIN pgmem.messages fm ON fm.namespace = fe.namespace AND fm.id = fe.message_id")
            if f.on_message
            else sql.SQL("")
        )
        return sql.SQL(" AND (SELECT true FROM pgmem.memory_entries fe{} WHERE {} LIMIT 1)").format(
            join, sql.SQL(" AND ").join(terms)
        )
    if f.filtered:
        terms = [sql.SQL("fm.namespace = e.namespace"), sql.SQL("fm.id = e.message_id")]
        terms += entry_filters(f, "fe", "fm", probe=True)
        return sql.SQL(" AND (SELECT true FROM pgmem.messages fm WHERE {} LIMIT 1)").format(
            sql.SQL(" AND ").join(terms)
        )
    return sql.Composed([])


def fork_guard_sql(f: SearchFilters) -> sql.Composable:
    """A boolean that is false when the search read only the memory's own entries but it is a fork that
    still inherits (migration 0020): the searcher then runs it again through the lineage. One probe of
    memory_forks' primary key per statement, where asking first cost every search a round trip."""
    if f.memory is None or f.lineage:
        return sql.SQL("true")
    return sql.SQL(
        "NOT EXISTS (SELECT 1 FROM pgmem.memory_forks WHERE namespace = %(ns)s AND memory = %(memory)s "
        "AND materialized_at IS NULL)"
    )


def guard_sql(model: EmbeddingModel, f: SearchFilters) -> sql.Composable:
    """A column that is NULL when the memory is no longer searched with ``model`` (a switch finished), and
    false when it is a fork the statement did not read through its lineage (:func:`fork_guard_sql`)."""
    if f.memory is None:
        return sql.SQL("true")
    return sql.SQL(
        "(SELECT {} FROM pgmem.memory_models WHERE namespace = %(ns)s AND memory = %(memory)s "
        "AND model_id = {} AND status = 'active')"
    ).format(fork_guard_sql(f), sql.Literal(model.id))


def hits_sql(
    model: EmbeddingModel,
    f: SearchFilters,
    strategy: str,
    q: sql.Composable,
    shared_cand: bool = False,
    k: int = 0,
    literal_memory: bool = False,
) -> sql.Composed:
    """``(message_id, distance)`` of the best ``k`` rows (0: ``%(k)s``) for the query vector expression ``q``.

    The exact strategy reads the candidates from a CTE ``cand`` when ``shared_cand`` (many queries), else
    from a subquery the planner merges into the join. A literal ``k`` lets Postgres keep one generic plan
    costed for that limit (a ``LIMIT $n`` generic plan is costed as 10% of the table): 1.27 -> 1.11 ms
    per unfiltered HNSW search at 34k MiniLM vectors here."""
    vec = model.vector_expr("e")
    parts: dict[str, sql.Composable] = {
        "vec": vec,
        "q": q,
        "model": sql.Literal(model.id),
        "k": sql.Literal(k) if k else sql.SQL("%(k)s"),
        "op": sql.SQL(operator(model.distance)),
    }
    if strategy == "exact":
        # The bare column, not the indexed expression: its cast to vector(n) copies every row's vector.
        parts["vec"] = sql.SQL("e.{}").format(sql.Identifier(model.column))
        if not f.filtered:
            # The namespace's vectors of the model: a range of the primary key, every distance computed.
            return sql.SQL(
                "SELECT e.message_id, {vec} {op} {q} AS distance FROM pgmem.embeddings e "
                "WHERE e.namespace = %(ns)s AND e.model_id = {model} ORDER BY distance LIMIT {k}"
            ).format(**parts)
        parts["cand"] = (
            sql.SQL("cand") if shared_cand else sql.SQL("({}) AS cand").format(candidates_sql(f, literal_memory))
        )
        return sql.SQL(
            "SELECT e.message_id, {vec} {op} {q} AS distance FROM {cand} "
            "JOIN pgmem.embeddings e ON e.namespace = %(ns)s AND e.model_id = {model} "
            "AND e.message_id = cand.message_id ORDER BY distance LIMIT {k}"
        ).format(**parts)
    if model.quantized:
        # Candidates by Hamming distance between binary quantizations (the index), then the exact
        # distance of each on its full vector (the bare column: no copy), best k of them.
        return sql.SQL(
            "SELECT c.message_id, c.distance FROM (SELECT e.message_id, e.{col} {op} {q} AS distance "
            "FROM pgmem.embeddings e WHERE e.namespace = %(ns)s AND e.model_id = {model}{filters} "
            "ORDER BY {order} LIMIT {n}) AS c ORDER BY c.distance LIMIT {k}"
        ).format(
            col=sql.Identifier(model.column),
            order=model.index_order("e", q),
            n=model.candidates(parts["k"]),
            filters=_exists_filter(f),
            **parts,
        )
    return sql.SQL(
        "SELECT e.message_id, {vec} {op} {q} AS distance FROM pgmem.embeddings e "
        "WHERE e.namespace = %(ns)s AND e.model_id = {model}{filters} ORDER BY {vec} {op} {q} LIMIT {k}"
    ).format(filters=_exists_filter(f), **parts)


def vector_search_sql(
    model: EmbeddingModel, f: SearchFilters, strategy: str, k: int, bounded: bool, literal_memory: bool = False
) -> sql.Composed:
    """One statement: ``(seq, id, …, created_at, distance, ok)`` rows, closest first (the caller orders
    ties by id: a second sort key here costs an incremental sort, ~5% of an HNSW search).

    ``strategy``: ``exact`` (distances of every candidate) or ``ann`` (the model's HNSW index, filters
    applied during an iterative scan). ``bounded``: keep rows within ``%(max_distance)s``. Parameters: ns,
    q, max_distance and the filters'. ``ok`` is NULL on every row when the memory's active model is no
    longer ``model``.
    """
    return sql.SQL(
        "SELECT {cols}, h.distance, {guard} AS ok FROM ({hits}) AS h "
        "JOIN pgmem.messages m ON m.namespace = %(ns)s AND m.id = h.message_id{bound} ORDER BY h.distance"
    ).format(
        cols=sql.SQL(MESSAGE_COLUMNS),
        guard=guard_sql(model, f),
        hits=hits_sql(model, f, strategy, model.param("q"), k=k, literal_memory=literal_memory),
        bound=sql.SQL(" WHERE h.distance <= %(max_distance)s") if bounded else sql.SQL(""),
    )


def batch_search_sql(model: EmbeddingModel, f: SearchFilters, strategy: str, k: int) -> sql.Composed:
    """Many query vectors (``%(qs)s``, a ``vector[]``) in one statement: ``(ord, seq, id, …, distance,
    ok)`` rows, per query closest first (one LATERAL search per query)."""
    qv = sql.SQL("qs.v::{}({})").format(sql.SQL(model.kind), sql.Literal(model.dimension))
    with_cand = (
        sql.SQL("cand AS MATERIALIZED ({}), ").format(candidates_sql(f))
        if strategy == "exact" and f.filtered
        else sql.SQL("")
    )
    return sql.SQL(
        "WITH {with_cand}qs AS (SELECT q.v, q.ord FROM unnest(%(qs)s::vector[]) WITH ORDINALITY AS q(v, ord)) "
        "SELECT qs.ord, {cols}, h.distance, {guard} AS ok FROM qs CROSS JOIN LATERAL ({hits}) AS h "
        "JOIN pgmem.messages m ON m.namespace = %(ns)s AND m.id = h.message_id "
        "WHERE h.distance <= %(max_distance)s ORDER BY qs.ord, h.distance, m.id"
    ).format(
        with_cand=with_cand,
        cols=sql.SQL(MESSAGE_COLUMNS),
        guard=guard_sql(model, f),
        hits=hits_sql(model, f, strategy, qv, shared_cand=True, k=k),
    )
