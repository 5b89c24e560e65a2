"""Semantic search: what both client flavours share (results, filters, the SQL each query runs).

How a vector search runs (one statement, one round trip):

* ``exact`` — the candidate rows (the memory's entries, or the namespace's messages that pass the
  filters) are fetched first, at most ``exact_limit + 1`` of them; when they are no more than
  ``exact_limit``, their distances are computed exactly (no index) and the best ``k`` returned. This is
  what makes a filter that keeps 1% of the rows return ``k`` results with full recall.
* ``ann`` — otherwise the model's partial HNSW index is scanned with pgvector's iterative index scans
  (``hnsw.iterative_scan = relaxed_order``), which keep walking the graph until ``k`` rows have passed the
  filters; the final order is exact (``ORDER BY distance`` over the hits).

Both branches are in the same statement; a one-time filter on the candidate count runs only one of them.
Scores are cosine similarities in [-1, 1] (``1 - cosine distance``); ``threshold`` keeps hits with a
score at or above it.

Hybrid search fuses the vector ranking with Postgres full-text ranking by reciprocal rank fusion:
``score = w_vector / (rrf_k + rank_vector) + w_text / (rrf_k + rank_text)`` (a list a message is missing
from contributes 0), multiplied by ``0.5 ** (age / half_life)`` when a recency half-life is given.
Defaults: ``w_vector = w_text = 1``, ``rrf_k = 60`` (the constant of Cormack et al., 2009), each list cut
at ``max(4 k, 40)`` candidates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import numpy as np
from psycopg import sql

from pgmem._rows import check_key
from pgmem.errors import InvalidInput
from pgmem.models import Message

__all__ = [
    "DEFAULT_EXACT_LIMIT",
    "HALFVEC_ABOVE",
    "MAX_K",
    "EmbeddingModel",
    "SearchFilters",
    "SearchHit",
]

#: Filtered candidate sets up to this size are searched exactly (see the module docstring).
DEFAULT_EXACT_LIMIT = 2_000
#: Models with more dimensions are stored as ``halfvec`` (HNSW indexes ``vector`` up to 2,000).
HALFVEC_ABOVE = 2_000
#: The largest ``k`` a search accepts.
MAX_K = 1_000

Mode = Literal["auto", "exact", "ann"]

MESSAGE_COLUMNS = (
    "m.seq, m.id, m.content, m.instruct_content, m.role, m.cause_by, m.sent_from, m.send_to, m.metadata, "
    "m.tool_calls, m.name, m.tool_call_id, m.message_class, m.created_at"
)


@dataclass(frozen=True, slots=True)
class EmbeddingModel:
    """A registered embedding model: its id in ``pgmem.embedding_models``, name, dimension and storage."""

    id: int
    name: str
    dimension: int
    kind: str  # "vector" | "halfvec"

    @property
    def column(self) -> str:
        return "embedding" if self.kind == "vector" else "embedding_half"

    @property
    def index_name(self) -> str:
        return f"embeddings_hnsw_m{self.id}"

    def vector_expr(self, alias: str = "e") -> sql.Composed:
        """The indexed expression, e.g. ``(e.embedding::vector(384))``."""
        return sql.SQL("({}.{}::{}({}))").format(
            sql.Identifier(alias), sql.Identifier(self.column), sql.SQL(self.kind), sql.Literal(self.dimension)
        )

    def param(self, name: str = "q") -> sql.Composed:
        return sql.SQL("{}::{}({})").format(sql.Placeholder(name), sql.SQL(self.kind), sql.Literal(self.dimension))

    def index_ddl(self) -> sql.Composed:
        ops = "vector_cosine_ops" if self.kind == "vector" else "halfvec_cosine_ops"
        return sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON pgmem.embeddings USING hnsw ({} {}) WHERE model_id = {}"
        ).format(sql.Identifier(self.index_name), self.vector_expr("embeddings"), sql.SQL(ops), sql.Literal(self.id))


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result: the message, its score (higher is closer) and, for vector search, the cosine
    distance (``1 - score``)."""

    message: Message
    score: float
    distance: float | None = None


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """What a search is restricted to, besides the client's namespace. ``None`` means no restriction."""

    memory: str | None = None
    cause_by: str | None = None
    role: str | None = None
    sender: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    #: Only the memory's entries up to this sequence number (RoleZero's long-term part); needs ``memory``.
    max_seq: int | None = None

    def __post_init__(self) -> None:
        if self.memory is not None:
            check_key(self.memory)
        if self.max_seq is not None:
            if self.memory is None:
                raise InvalidInput("max_seq needs a memory")
            if isinstance(self.max_seq, bool) or not isinstance(self.max_seq, int):
                raise InvalidInput(f"max_seq must be an integer, got {self.max_seq!r}")
        for name in ("cause_by", "role", "sender"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or "\x00" in value or len(value) > 1000):
                raise InvalidInput(f"{name} must be a string of at most 1,000 characters without NUL bytes")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise InvalidInput(f"{name} must be a timezone-aware datetime, got {value!r}")
        if self.since is not None and self.until is not None and self.since > self.until:
            raise InvalidInput("since is after until")

    @property
    def on_message(self) -> bool:
        """Whether any filter needs the messages table (role, sender, time)."""
        return any(v is not None for v in (self.role, self.sender, self.since, self.until))

    @property
    def filtered(self) -> bool:
        return self.memory is not None or self.cause_by is not None or self.on_message

    @property
    def cacheable(self) -> bool:
        """Only the memory restricts the search: a vector cache of the memory can answer it."""
        return self.memory is not None and self.cause_by is None and self.max_seq is None and not self.on_message

    def params(self) -> dict[str, Any]:
        return {
            "memory": self.memory,
            "cause_by": self.cause_by,
            "role": self.role,
            "sender": self.sender,
            "since": self.since,
            "until": self.until,
            "max_seq": self.max_seq,
        }


def check_k(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise InvalidInput(f"k must be an integer in [1, {MAX_K}], got {k!r}")
    return k


def check_threshold(threshold: float | None) -> float | None:
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not math.isfinite(threshold):
        raise InvalidInput(f"threshold must be a finite number, got {threshold!r}")
    if not -1.0 <= threshold <= 1.0:
        raise InvalidInput(f"threshold is a cosine similarity in [-1, 1], got {threshold}")
    return float(threshold)


def check_mode(mode: str) -> Mode:
    if mode not in ("auto", "exact", "ann"):
        raise InvalidInput(f"mode must be 'auto', 'exact' or 'ann', got {mode!r}")
    return mode  # type: ignore[return-value]


def check_half_life(half_life: timedelta | float | None) -> float | None:
    if half_life is None:
        return None
    seconds = half_life.total_seconds() if isinstance(half_life, timedelta) else half_life
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInput(f"half_life must be a positive duration, got {half_life!r}")
    return float(seconds)


def _entry_filters(f: SearchFilters, entries: str, message: str) -> list[sql.Composable]:
    """WHERE terms on a memory_entries alias and a messages alias (both already joined)."""
    terms: list[sql.Composable] = []
    e, m = sql.Identifier(entries), sql.Identifier(message)
    if f.memory is not None:
        terms.append(sql.SQL("{}.memory = %(memory)s").format(e))
    if f.max_seq is not None:
        terms.append(sql.SQL("{}.seq <= %(max_seq)s").format(e))
    if f.cause_by is not None:
        terms.append(sql.SQL("{}.cause_by = %(cause_by)s").format(e if f.memory is not None else m))
    if f.role is not None:
        terms.append(sql.SQL("{}.role = %(role)s").format(m))
    if f.sender is not None:
        terms.append(sql.SQL("{}.sent_from = %(sender)s").format(m))
    if f.since is not None:
        terms.append(sql.SQL("{}.created_at >= %(since)s").format(m))
    if f.until is not None:
        terms.append(sql.SQL("{}.created_at <= %(until)s").format(m))
    return terms


def candidates_sql(f: SearchFilters) -> sql.Composed:
    """The ids of the messages that pass the filters (at most ``%(exact_limit)s + 1`` of them)."""
    terms = _entry_filters(f, "ce", "cm")
    if f.memory is not None:
        join = (
            sql.SQL(" JOIN pgmem.messages cm ON cm.namespace = ce.namespace AND cm.id = ce.message_id")
            if f.on_message
            else sql.SQL("")
        )
        return sql.SQL(
            "SELECT ce.message_id FROM pgmem.memory_entries ce{} WHERE ce.namespace = %(ns)s AND {} "
            "LIMIT %(exact_limit)s + 1"
        ).format(join, sql.SQL(" AND ").join(terms))
    return sql.SQL(
        "SELECT cm.id AS message_id FROM pgmem.messages cm WHERE cm.namespace = %(ns)s AND {} LIMIT %(exact_limit)s + 1"
    ).format(sql.SQL(" AND ").join(terms))


def _exists_filter(f: SearchFilters) -> sql.Composed:
    """The filters as EXISTS terms on an embeddings row ``e`` (for the index scan)."""
    parts: list[sql.Composable] = []
    if f.memory is not None:
        terms: list[sql.Composable] = [sql.SQL("fe.namespace = e.namespace"), sql.SQL("fe.message_id = e.message_id")]
        terms += _entry_filters(f, "fe", "fm")
        join = (
            sql.SQL(" JOIN pgmem.messages fm ON fm.namespace = fe.namespace AND fm.id = fe.message_id")
            if f.on_message
            else sql.SQL("")
        )
        parts.append(
            sql.SQL("EXISTS (SELECT 1 FROM pgmem.memory_entries fe{} WHERE {})").format(
                join, sql.SQL(" AND ").join(terms)
            )
        )
    elif f.filtered:
        terms = [sql.SQL("fm.namespace = e.namespace"), sql.SQL("fm.id = e.message_id")]
        terms = list[sql.Composable](terms)
        terms += _entry_filters(f, "fe", "fm")
        parts.append(sql.SQL("EXISTS (SELECT 1 FROM pgmem.messages fm WHERE {})").format(sql.SQL(" AND ").join(terms)))
    return sql.SQL("").join(sql.SQL(" AND ") + p for p in parts)


def vector_search_sql(model: EmbeddingModel, f: SearchFilters, mode: Mode) -> sql.Composed:
    """One statement: ``(seq, id, …, created_at, distance)`` rows, closest first, ties by id.

    Parameters: ns, q, k, max_distance, exact_limit and the filters' (see :meth:`SearchFilters.params`).
    The first row is a sentinel with every column NULL when the memory's active model is no longer
    ``model`` (the caller refreshes its model and retries).
    """
    vec = model.vector_expr("e")
    q = model.param("q")
    ann_scan = sql.SQL(
        "SELECT e.message_id, {vec} <=> {q} AS distance FROM pgmem.embeddings e "
        "WHERE e.namespace = %(ns)s AND e.model_id = {model}{filters} ORDER BY {vec} <=> {q} LIMIT %(k)s"
    )
    parts = {"vec": vec, "q": q, "model": sql.Literal(model.id), "filters": _exists_filter(f)}
    hits: sql.Composable
    if not f.filtered or mode == "ann":
        hits = sql.SQL("hits AS (") + ann_scan.format(**parts) + sql.SQL(")")
    else:
        exact = sql.SQL(
            "SELECT e.message_id, {vec} <=> {q} AS distance FROM cand "
            "JOIN pgmem.embeddings e ON e.namespace = %(ns)s AND e.model_id = {model} "
            "AND e.message_id = cand.message_id"
        ).format(**parts)
        if mode == "exact":
            hits = sql.SQL("cand AS MATERIALIZED ({cand}), hits AS ({exact} ORDER BY distance LIMIT %(k)s)").format(
                cand=candidates_sql(f), exact=exact
            )
        else:
            hits = sql.SQL(
                "cand AS MATERIALIZED ({cand}), small AS (SELECT count(*) <= %(exact_limit)s AS yes FROM cand), "
                "exact AS ({exact} WHERE (SELECT yes FROM small) ORDER BY distance LIMIT %(k)s), "
                "ann AS (SELECT * FROM ({ann}) a WHERE NOT (SELECT yes FROM small)), "
                "hits AS (SELECT * FROM exact UNION ALL SELECT * FROM ann)"
            ).format(cand=candidates_sql(f), exact=exact, ann=ann_scan.format(**parts))
    guard: sql.Composable = sql.SQL("TRUE")
    if f.memory is not None:
        guard = sql.SQL(
            "EXISTS (SELECT 1 FROM pgmem.memory_models WHERE namespace = %(ns)s AND memory = %(memory)s "
            "AND model_id = {} AND status = 'active')"
        ).format(sql.Literal(model.id))
    return sql.SQL(
        "WITH {hits}, guard AS (SELECT {guard} AS ok) "
        "(SELECT NULL::bigint, NULL, NULL, NULL::jsonb, NULL, NULL, NULL, NULL::text[], NULL::jsonb, NULL::jsonb, "
        "NULL, NULL, NULL, NULL::timestamptz, NULL::float8 WHERE NOT (SELECT ok FROM guard)) "
        "UNION ALL "
        "(SELECT {cols}, h.distance FROM hits h JOIN pgmem.messages m ON m.namespace = %(ns)s AND m.id = h.message_id "
        "WHERE (SELECT ok FROM guard) AND h.distance <= %(max_distance)s ORDER BY h.distance, m.id)"
    ).format(hits=hits, guard=guard, cols=sql.SQL(MESSAGE_COLUMNS))


def batch_search_sql(model: EmbeddingModel, f: SearchFilters) -> sql.Composed:
    """Many query vectors (``%(qs)s``, a ``vector[]``) in one statement: ``(ord, seq, id, …, distance)``
    rows, per query closest first. Exact over the candidates when they are few, else one HNSW scan per
    query (a LATERAL join). A single row with a NULL ``ord`` is the model-switch sentinel."""
    vec = model.vector_expr("e")
    qv = sql.SQL("qs.v::{}({})").format(sql.SQL(model.kind), sql.Literal(model.dimension))
    parts = {"vec": vec, "qv": qv, "model": sql.Literal(model.id), "filters": _exists_filter(f)}
    if f.filtered:
        hits = sql.SQL(
            "cand AS MATERIALIZED ({cand}), small AS (SELECT count(*) <= %(exact_limit)s AS yes FROM cand), "
            "cv AS MATERIALIZED (SELECT e.message_id, {vec} AS v FROM cand JOIN pgmem.embeddings e "
            "ON e.namespace = %(ns)s AND e.model_id = {model} AND e.message_id = cand.message_id "
            "WHERE (SELECT yes FROM small)), "
            "hits AS (SELECT qs.ord, h.message_id, h.distance FROM qs CROSS JOIN LATERAL "
            "(SELECT cv.message_id, cv.v <=> {qv} AS distance FROM cv ORDER BY distance LIMIT %(k)s) h "
            "WHERE (SELECT yes FROM small) "
            "UNION ALL "
            "SELECT qs.ord, h.message_id, h.distance FROM qs CROSS JOIN LATERAL "
            "(SELECT e.message_id, {vec} <=> {qv} AS distance FROM pgmem.embeddings e "
            "WHERE e.namespace = %(ns)s AND e.model_id = {model}{filters} ORDER BY {vec} <=> {qv} LIMIT %(k)s) h "
            "WHERE NOT (SELECT yes FROM small))"
        ).format(cand=candidates_sql(f), **parts)
    else:
        hits = sql.SQL(
            "hits AS (SELECT qs.ord, h.message_id, h.distance FROM qs CROSS JOIN LATERAL "
            "(SELECT e.message_id, {vec} <=> {qv} AS distance FROM pgmem.embeddings e "
            "WHERE e.namespace = %(ns)s AND e.model_id = {model} ORDER BY {vec} <=> {qv} LIMIT %(k)s) h)"
        ).format(**parts)
    guard: sql.Composable = sql.SQL("TRUE")
    if f.memory is not None:
        guard = sql.SQL(
            "EXISTS (SELECT 1 FROM pgmem.memory_models WHERE namespace = %(ns)s AND memory = %(memory)s "
            "AND model_id = {} AND status = 'active')"
        ).format(sql.Literal(model.id))
    return sql.SQL(
        "WITH qs AS (SELECT q.v, q.ord FROM unnest(%(qs)s::vector[]) WITH ORDINALITY AS q(v, ord)), {hits}, "
        "guard AS (SELECT {guard} AS ok) "
        "(SELECT NULL::bigint, NULL::bigint, NULL, NULL, NULL::jsonb, NULL, NULL, NULL, NULL::text[], NULL::jsonb, "
        "NULL::jsonb, NULL, NULL, NULL, NULL::timestamptz, NULL::float8 WHERE NOT (SELECT ok FROM guard)) "
        "UNION ALL "
        "(SELECT h.ord, {cols}, h.distance FROM hits h JOIN pgmem.messages m ON m.namespace = %(ns)s "
        "AND m.id = h.message_id WHERE (SELECT ok FROM guard) AND h.distance <= %(max_distance)s "
        "ORDER BY h.ord, h.distance, m.id)"
    ).format(hits=hits, guard=guard, cols=sql.SQL(MESSAGE_COLUMNS))


def hybrid_search_sql(model: EmbeddingModel, f: SearchFilters) -> sql.Composed:
    """Vector and full-text rankings fused by reciprocal rank fusion, in one statement.

    Parameters: those of :func:`vector_search_sql` (``k`` here is each list's depth) plus ``text``,
    ``w_vector``, ``w_text``, ``rrf_k``, ``half_life`` (seconds or NULL) and ``limit``.
    """
    vector_part = vector_search_sql(model, f, "auto")
    # The text ranking honours the same filters through the same candidate rules.
    terms: list[sql.Composable] = [
        sql.SQL("m.namespace = %(ns)s"),
        sql.SQL("m.tsv @@ websearch_to_tsquery('english', %(text)s)"),
    ]
    terms += _entry_filters(f, "te", "m")
    if f.memory is not None:
        text_from = sql.SQL(
            "pgmem.memory_entries te JOIN pgmem.messages m ON m.namespace = te.namespace AND m.id = te.message_id"
        )
        terms.insert(0, sql.SQL("te.namespace = %(ns)s"))
    else:
        text_from = sql.SQL("pgmem.messages m")
    text_part = sql.SQL(
        "SELECT m.id, row_number() OVER (ORDER BY ts_rank_cd(m.tsv, websearch_to_tsquery('english', %(text)s)) DESC, "
        "m.seq DESC) AS rank FROM {} WHERE {} ORDER BY rank LIMIT %(k)s"
    ).format(text_from, sql.SQL(" AND ").join(terms))
    return sql.SQL(
        "WITH v AS MATERIALIZED ({vector_part}), "
        "vr AS (SELECT v.id, row_number() OVER (ORDER BY v.distance, v.id) AS rank, v.distance FROM v "
        "WHERE v.id IS NOT NULL), "
        "tr AS MATERIALIZED ({text_part}), "
        "fused AS (SELECT coalesce(vr.id, tr.id) AS id, "
        "coalesce(%(w_vector)s / (%(rrf_k)s + vr.rank), 0) + coalesce(%(w_text)s / (%(rrf_k)s + tr.rank), 0) AS score, "
        "vr.distance FROM vr FULL JOIN tr ON tr.id = vr.id) "
        "SELECT {cols}, f.distance, f.score * CASE WHEN %(half_life)s::float8 IS NULL THEN 1 ELSE "
        "power(0.5, extract(epoch FROM now() - m.created_at) / %(half_life)s::float8) END AS score, "
        "(SELECT count(*) FROM v WHERE v.id IS NULL) AS stale "
        "FROM fused f JOIN pgmem.messages m ON m.namespace = %(ns)s AND m.id = f.id "
        "ORDER BY score DESC, m.id LIMIT %(limit)s"
    ).format(
        vector_part=_renamed(vector_part),
        text_part=text_part,
        cols=sql.SQL(MESSAGE_COLUMNS),
    )


def _renamed(vector_part: sql.Composable) -> sql.Composed:
    """The vector search's rows as ``(id, distance)``; the sentinel row has a NULL id."""
    return (
        sql.SQL("SELECT s.id, s.distance FROM (")
        + vector_part
        + sql.SQL(
            ") AS s(seq, id, content, instruct_content, role, cause_by, sent_from, send_to, metadata, tool_calls, "
            "name, tool_call_id, message_class, created_at, distance)"
        )
    )


def as_query_vector(vector: Any, dimension: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A caller's query vector as a float32 row of ``dimension`` finite values."""
    from pgmem.embeddings import check_query_vector

    return check_query_vector(vector, dimension)
