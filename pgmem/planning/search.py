"""Semantic search: what both client flavours share (results, filters, the SQL each query runs).

How a vector search runs (one statement, one round trip):

* ``exact`` — when the filters keep at most ``exact_limit`` rows (counted once and remembered for a few
  seconds; default ``8 * sqrt(stored vectors)``, where the two strategies cost the same, ``20 * sqrt(...)``
  for a search restricted by its namespace alone, whose exact scan is cheaper per row), the candidate
  rows (the memory's entries, the namespace's messages that pass the filters, or with no other filter
  the namespace's vectors of the model) are fetched and their distances computed exactly (no index). This
  is what makes a filter that keeps 1% of the rows return ``k`` results with full recall.
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

Either is multiplied by ``0.5 ** (age / half_life)`` when a recency half-life is given.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, LiteralString, NamedTuple

from psycopg import sql

from pgmem.checks import check_key, check_query_text
from pgmem.embeddings import check_query_vector
from pgmem.errors import EmbeddingError, InvalidInput
from pgmem.models import Message
from pgmem.planning.distances import DEFAULT_DISTANCE, opclass, operator, score_of, score_sql
from pgmem.planning.rows import MessageRow, decode
from pgmem.planning.statements import fragment

if TYPE_CHECKING:  # numpy is imported where vectors are unpacked: a process that never searches never loads it
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "BINARY_ABOVE",
    "HALFVEC_ABOVE",
    "MAX_K",
    "EmbeddingModel",
    "SearchFilters",
    "SearchHit",
]

#: Models with more dimensions are stored as ``halfvec`` (HNSW indexes ``vector`` up to 2,000).
HALFVEC_ABOVE = 2_000
#: Models with more dimensions (HNSW indexes ``halfvec`` up to 4,000) keep full ``vector`` values and are
#: indexed by their binary quantization (one bit per dimension, Hamming distance, HNSW up to 64,000 bits).
BINARY_ABOVE = 4_000
#: A binary-quantized search re-ranks ``max(OVERSAMPLE * k, MIN_CANDIDATES)`` candidates by the exact
#: distance on the full vectors. 4x: recall@10 0.98-0.99 at 4,096 and 8,192 dimensions in
#: benchmarks/vectors.py part E (2x gave 0.97-0.98, 8x 0.99-1.0 at twice the cost; each candidate costs a
#: read of its TOASTed vector, ~20 µs at 4,096 dimensions).
OVERSAMPLE = 4
MIN_CANDIDATES = 40
#: The largest ``k`` a search accepts.
MAX_K = 1_000

Mode = Literal["auto", "exact", "ann"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

MESSAGE_COLUMNS = "m.seq, " + fragment("message_columns")  # a rows.MessageRow, seq the message's own


@dataclass(frozen=True, slots=True)
class EmbeddingModel:
    """A registered embedding model: its id in ``pgmem.embedding_models``, name, dimension, storage and
    distance (one model per distance: its own vectors and its own HNSW index)."""

    id: int
    name: str
    dimension: int
    kind: str  # "vector" | "halfvec": how the values are stored (see storage_kind)
    distance: str = DEFAULT_DISTANCE  # "cosine" | "l2" | "inner_product" (pgmem.planning.distances)

    @property
    def column(self) -> str:
        return "embedding" if self.kind == "vector" else "embedding_half"

    @property
    def quantized(self) -> bool:
        """Whether the model's HNSW index holds binary-quantized vectors (above :data:`BINARY_ABOVE`
        dimensions): a search takes candidates by Hamming distance, then re-ranks them exactly."""
        return self.dimension > BINARY_ABOVE

    @property
    def index_name(self) -> str:
        # sql/vectors.sql (model_indexed) spells this name too
        return f"embeddings_hnsw_m{self.id}"

    def vector_expr(self, alias: str = "e") -> sql.Composed:
        """The stored vector at the model's dimension, e.g. ``(e.embedding::vector(384))``."""
        return sql.SQL("({}.{}::{}({}))").format(
            sql.Identifier(alias), sql.Identifier(self.column), sql.SQL(self.kind), sql.Literal(self.dimension)
        )

    def index_expr(self, alias: str = "e") -> sql.Composed:
        """The indexed expression: :meth:`vector_expr`, or its binary quantization for a quantized model
        (``(binary_quantize(e.embedding::vector(4096))::bit(4096))``)."""
        if not self.quantized:
            return self.vector_expr(alias)
        return sql.SQL("(binary_quantize({})::bit({}))").format(self.vector_expr(alias), sql.Literal(self.dimension))

    def index_order(self, alias: str, q: sql.Composable) -> sql.Composed:
        """The ORDER BY term an index scan serves, for the query vector expression ``q`` (of this model's
        kind and dimension): the model's distance, or Hamming distance between the binary quantizations."""
        if not self.quantized:
            return sql.SQL("{} {} {}").format(self.vector_expr(alias), sql.SQL(operator(self.distance)), q)
        return sql.SQL("{} <~> binary_quantize({})::bit({})").format(
            self.index_expr(alias), q, sql.Literal(self.dimension)
        )

    def param(self, name: str = "q") -> sql.Composed:
        return sql.SQL("{}::{}({})").format(sql.Placeholder(name), sql.SQL(self.kind), sql.Literal(self.dimension))

    def candidates(self, k: sql.Composable) -> sql.Composable:
        """How many rows a binary-quantized index scan yields for re-ranking, for ``k`` results."""
        return sql.SQL("greatest({} * {}, {})").format(k, sql.Literal(OVERSAMPLE), sql.Literal(MIN_CANDIDATES))

    def depth(self, k: int) -> int:
        """How many rows the index scan of a ``k``-result search yields (its ``hnsw.ef_search`` need)."""
        return max(k * OVERSAMPLE, MIN_CANDIDATES) if self.quantized else k

    def index_ddl(self, table: str = "embeddings", name: str | None = None, concurrently: bool = True) -> sql.Composed:
        """``CREATE INDEX CONCURRENTLY`` of the model's partial HNSW index on ``pgmem.<table>`` (run outside a
        transaction: see ``AsyncModelRegistry.build_index``); ``concurrently=False``: the plain statement,
        which holds a SHARE lock on the table (every write waits) until its transaction ends."""
        return sql.SQL("CREATE INDEX {}IF NOT EXISTS {} ON {} USING hnsw ({} {}) WHERE model_id = {}").format(
            sql.SQL("CONCURRENTLY " if concurrently else ""),
            sql.Identifier(name or self.index_name),
            sql.Identifier("pgmem", table),
            self.index_expr(table),
            sql.SQL(self.index_ops),
            sql.Literal(self.id),
        )

    @property
    def index_ops(self) -> str:
        if self.quantized:
            return "bit_hamming_ops"
        return opclass(self.kind, self.distance)


def storage_kind(dimension: int) -> str:
    """How a model's vectors are stored: ``halfvec`` from 2,001 to 4,000 dimensions (HNSW indexes
    ``halfvec`` there, not ``vector``), else ``vector`` (above 4,000 the index is binary-quantized and the
    re-rank reads the full single-precision values)."""
    return "halfvec" if HALFVEC_ABOVE < dimension <= BINARY_ABOVE else "vector"


class SearchHit(NamedTuple):
    """One search result: the message, its score (higher is closer) and, for vector search, the distance
    (pgmem.planning.distances: ``1 - score`` for cosine). A named tuple: cheap to build by the hundred."""

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
            if value is not None:
                check_query_text(value, name)
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


def check_exact_limit(exact_limit: int | None) -> int | None:
    if exact_limit is not None and (
        isinstance(exact_limit, bool) or not isinstance(exact_limit, int) or not 0 <= exact_limit <= 1_000_000
    ):
        raise InvalidInput(f"exact_limit must be an integer in [0, 1000000], got {exact_limit!r}")
    return exact_limit


def check_mode(mode: str) -> Mode:
    if mode not in ("auto", "exact", "ann"):
        raise InvalidInput(f"mode must be 'auto', 'exact' or 'ann', got {mode!r}")
    return mode  # type: ignore[return-value]


#: How hybrid search fuses its two legs (module docstring), the default first.
FUSIONS = ("convex", "rrf")


def check_fusion(fusion: str) -> str:
    if fusion not in FUSIONS:
        raise InvalidInput(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
    return fusion


def check_half_life(half_life: timedelta | float | None) -> float | None:
    if half_life is None:
        return None
    seconds = half_life.total_seconds() if isinstance(half_life, timedelta) else half_life
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInput(f"half_life must be a positive duration, got {half_life!r}")
    return float(seconds)


def _entry_filters(
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
    if f.memory is not None:
        memory = sql.Literal(f.memory) if literal_memory else sql.SQL("%(memory)s")
        terms.append(sql.SQL("{}.memory{}{}").format(e, eq, memory))
    if f.max_seq is not None:
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
    return terms


def candidates_sql(f: SearchFilters, literal_memory: bool = False) -> sql.Composed:
    """The ids of the messages that pass the filters (``f.filtered`` must be true)."""
    terms = _entry_filters(f, "ce", "cm", literal_memory=literal_memory)
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
        terms += _entry_filters(f, "fe", "fm", probe=True)
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
        terms += _entry_filters(f, "fe", "fm", probe=True)
        return sql.SQL(" AND (SELECT true FROM pgmem.messages fm WHERE {} LIMIT 1)").format(
            sql.SQL(" AND ").join(terms)
        )
    return sql.Composed([])


def _guard(model: EmbeddingModel, f: SearchFilters) -> sql.Composable:
    """A column that is NULL when the memory is no longer searched with ``model`` (a switch finished)."""
    if f.memory is None:
        return sql.SQL("true")
    return sql.SQL(
        "(SELECT true FROM pgmem.memory_models WHERE namespace = %(ns)s AND memory = %(memory)s "
        "AND model_id = {} AND status = 'active')"
    ).format(sql.Literal(model.id))


def _hits_sql(
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
        guard=_guard(model, f),
        hits=_hits_sql(model, f, strategy, model.param("q"), k=k, literal_memory=literal_memory),
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
        guard=_guard(model, f),
        hits=_hits_sql(model, f, strategy, qv, shared_cand=True, k=k),
    )


def hybrid_search_sql(model: EmbeddingModel, f: SearchFilters, strategy: str) -> sql.Composed:
    """Vector and full-text rankings fused in one statement (module docstring: convex or RRF fusion).

    Parameters: those of :func:`vector_search_sql` (``k`` here is each list's depth) plus ``text``,
    ``fusion`` (``convex`` or ``rrf``), ``w_vector``, ``w_text``, ``rrf_k``, ``half_life`` (seconds or
    NULL) and ``limit``. Rows: ``(seq, id, …, created_at, distance, score, ok)``.
    """
    terms: list[sql.Composable] = [
        sql.SQL("m.namespace = %(ns)s"),
        sql.SQL("m.tsv @@ pgmem.fts_query(%(text)s)"),
    ]
    terms += _entry_filters(f, "te", "m")
    if f.memory is not None:
        text_from = sql.SQL(
            "pgmem.memory_entries te JOIN pgmem.messages m ON m.namespace = te.namespace AND m.id = te.message_id"
        )
        terms.insert(0, sql.SQL("te.namespace = %(ns)s"))
        scope = sql.SQL(fragment("bm25_entries"))
    else:
        text_from = sql.SQL("pgmem.messages m")
        scope = sql.SQL(fragment("bm25_messages"))
    # The keyword ranking of search_text (sql/messages.sql): BM25, df among the hits (the filters apply),
    # and each hit's coverage: the idf of the query's lexemes it holds over the idf of them all (a lexeme
    # no hit holds counts with df 0), 1 for a message holding every word of the query.
    text_part = sql.SQL(
        "WITH q AS MATERIALIZED (SELECT pgmem.fts_terms(%(text)s) AS terms), scope AS ({scope}), "
        "hit AS MATERIALIZED (SELECT m.id, m.seq, {hit} FROM q, {text_from} WHERE {terms}), "
        "{bm25}, "
        "cover AS (SELECT sum(ln(1 + (s.n - coalesce(df.df, 0) + 0.5) / (coalesce(df.df, 0) + 0.5))) AS total "
        "FROM (SELECT DISTINCT unnest(q.terms) AS lexeme FROM q) AS t CROSS JOIN stats AS s "
        "LEFT JOIN df ON df.lexeme = t.lexeme) "
        "SELECT b.id, row_number() OVER (ORDER BY b.score DESC, b.seq DESC) AS rank, "
        "b.matched / nullif(c.total, 0) AS coverage FROM bm25 AS b CROSS JOIN cover AS c "
        "ORDER BY rank LIMIT %(k)s"
    ).format(
        scope=scope,
        hit=sql.SQL(fragment("bm25_hit")),
        text_from=text_from,
        terms=sql.SQL(" AND ").join(terms),
        bm25=sql.SQL(fragment("bm25")),
    )
    # closeness: the vector candidates' distances scaled to [0, 1] over the list (closest 1, farthest 0;
    # 1 when they are all equal), so any distance and any model's range of scores fuse alike.
    return sql.SQL(
        "WITH v AS MATERIALIZED ({hits}), "
        "vr AS (SELECT v.message_id AS id, row_number() OVER (ORDER BY v.distance, v.message_id) AS rank, v.distance, "
        "coalesce((max(v.distance) OVER () - v.distance) "
        "/ nullif(max(v.distance) OVER () - min(v.distance) OVER (), 0), 1) AS closeness FROM v), "
        "tr AS MATERIALIZED ({text_part}), "
        "fused AS (SELECT coalesce(vr.id, tr.id) AS id, "
        "CASE WHEN %(fusion)s::text = 'rrf' "
        "THEN coalesce(%(w_vector)s / (%(rrf_k)s + vr.rank), 0) + coalesce(%(w_text)s / (%(rrf_k)s + tr.rank), 0) "
        "ELSE coalesce(%(w_vector)s * vr.closeness, 0) + coalesce(%(w_text)s * tr.coverage, 0) END AS score, "
        "vr.distance FROM vr FULL JOIN tr ON tr.id = vr.id) "
        "SELECT {cols}, f.distance, f.score * CASE WHEN %(half_life)s::float8 IS NULL THEN 1 ELSE "
        "power(0.5, extract(epoch FROM now() - m.created_at) / %(half_life)s::float8) END AS score, {guard} AS ok "
        "FROM fused f JOIN pgmem.messages m ON m.namespace = %(ns)s AND m.id = f.id "
        "ORDER BY score DESC, m.id LIMIT %(limit)s"
    ).format(
        hits=_hits_sql(model, f, strategy, model.param("q")),
        text_part=text_part,
        cols=sql.SQL(MESSAGE_COLUMNS),
        guard=_guard(model, f),
    )


#: The row order each kind of search returns (the logged variant re-sorts the hits it read back).
_ORDER = {
    "vector": "h.distance, h.id",
    "batch": "h.ord, h.distance, h.id",
    "hybrid": "h.score DESC, h.id",
}


def logged_sql(kind: str, search: sql.Composable, k: int = 0, distance: str = DEFAULT_DISTANCE) -> sql.Composed:
    """``search`` that also records what it returned in ``pgmem.retrieval_log``, in the same statement.

    The hits go through a CTE; one log row per query (for ``batch``, per query text of
    ``%(log_queries)s``, in order) lists their ids and scores best first. Parameters beyond the search's:
    ``log_label`` and ``log_query`` (``log_queries`` for a batch). Nothing is logged when the memory
    switched models under the search (its rows' ``ok`` is NULL; the caller searches again).
    """
    order = sql.SQL(_ORDER[kind])
    score = sql.SQL("h.score") if kind == "hybrid" else sql.SQL(score_sql(distance, "h.distance"))
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


@functools.lru_cache(maxsize=1024)
def _statement(
    kind: str,
    model: EmbeddingModel,
    shape: tuple[bool, ...],
    strategy: str,
    k: int,
    bounded: bool,
    logged: bool = False,
    memory: str | None = None,
) -> LiteralString:
    filters = SearchFilters(
        memory or ("m" if shape[0] else None),
        "" if shape[1] else None,
        "" if shape[2] else None,
        "" if shape[3] else None,
        _EPOCH if shape[4] else None,
        _EPOCH if shape[5] else None,
        0 if shape[6] else None,
    )
    if kind == "count":
        composed = count_sql(filters, model)
    elif kind == "vector":
        composed = vector_search_sql(model, filters, strategy, k, bounded, literal_memory=memory is not None)
    elif kind == "batch":
        composed = batch_search_sql(model, filters, strategy, k)
    else:
        composed = hybrid_search_sql(model, filters, strategy)
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
) -> LiteralString:
    """The SQL text of a search (``kind``: vector, batch, hybrid, or count), composed once per model,
    set of filters in use, strategy, ``k`` (vector and batch searches) and threshold use (``bounded``,
    vector searches), then reused: the same text lets psycopg prepare it on the server. ``logged``: the
    variant that also writes ``pgmem.retrieval_log`` (:func:`logged_sql`).

    An exact search of a memory has the memory in its text, as a literal: one statement per memory. With
    the memory a parameter Postgres planned it on every call (0.15 ms at 342 candidates), because the
    generic plan, costed for an average memory, hashes every vector of the model (10.9 ms against 0.8 ms);
    with the literal it keeps one plan per memory, costed for that memory. Such searches only run on
    memories small enough for the exact strategy."""
    shape = tuple(
        v is not None
        for v in (
            filters.memory,
            filters.cause_by,
            filters.role,
            filters.sender,
            filters.since,
            filters.until,
            filters.max_seq,
        )
    )
    literal = filters.memory if kind == "vector" and strategy == "exact" else None
    return _statement(kind, model, shape, strategy, k, bounded, logged, literal)


def as_query_vector(vector: Any, dimension: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A caller's query vector as a float32 row of ``dimension`` finite values."""
    return check_query_vector(vector, dimension)


# -- rows of the search statements ---------------------------------------------------------------------
# A search row is the message's columns (pgmem.planning.rows.decode), then the distance; a hybrid row has
# its fused score after the distance; every row ends with ``ok`` (see vector_search_sql).

#: Columns of the message at the start of every search row (rows.MessageRow), then the distance (and for
#: hybrid search the fused score); positions taken once from the row type, rows stay plain tuples.
MESSAGE_WIDTH = len(MessageRow._fields)
_ID = MessageRow._fields.index("id")
_DISTANCE = MESSAGE_WIDTH
_SCORE = MESSAGE_WIDTH + 1


def switched(row: tuple[Any, ...]) -> bool:
    """Whether a search row says the memory's active model changed under the search (``ok`` is NULL)."""
    return row[-1] is None


def vector_hit(row: tuple[Any, ...], kind: str = DEFAULT_DISTANCE) -> SearchHit:
    """The hit of a vector search row of a model of distance ``kind``."""
    distance = float(row[_DISTANCE])
    return SearchHit(decode(row[:MESSAGE_WIDTH]), score_of(kind, distance), distance)


def vector_hits(rows: list[tuple[Any, ...]], kind: str = DEFAULT_DISTANCE) -> list[SearchHit]:
    """Hits of vector search rows ordered by distance, ties ordered by message id (the statement leaves
    them: a second sort key there costs an incremental sort, ~5% of an HNSW search)."""
    for i in range(1, len(rows)):
        if rows[i][_DISTANCE] == rows[i - 1][_DISTANCE]:
            rows = sorted(rows, key=lambda r: (r[_DISTANCE], r[_ID]))
            break
    return [vector_hit(row, kind) for row in rows]


def batch_hits(rows: list[tuple[Any, ...]], count: int, kind: str = DEFAULT_DISTANCE) -> list[list[SearchHit]]:
    """Hits per query of batch search rows (``ord`` first, then a vector search row)."""
    out: list[list[SearchHit]] = [[] for _ in range(count)]
    for row in rows:  # (ord, *vector search row): ord is the query's 1-based place
        out[int(row[0]) - 1].append(vector_hit(row[1:], kind))
    return out


def hybrid_hit(row: tuple[Any, ...]) -> SearchHit:
    """The hit of a hybrid search row (``distance`` None for text-only hits)."""
    distance = row[_DISTANCE]
    return SearchHit(decode(row[:MESSAGE_WIDTH]), float(row[_SCORE]), None if distance is None else float(distance))


def log_text(value: str | None) -> str | None:
    """A label or query text as the retrieval log stores it: NUL bytes (which Postgres ``text`` rejects)
    become U+FFFD and lone surrogates ``?``; nothing is cut."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"a search label must be a string, not {type(value).__name__}")
    return value.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def retrieval_params(
    kind: str, memory: str | None, query: str | None, k: int, hits: Sequence[tuple[str, float]], label: str | None
) -> dict[str, Any]:
    """Parameters of ``log_retrieval`` (sql/vectors.sql) for a search answered outside Postgres.
    ``hits``: ``(message id, score)``, best first."""
    return {
        "kind": kind,
        "memory": memory,
        "label": log_text(label),
        "query": log_text(query),
        "k": k,
        "ids": [h[0] for h in hits],
        "scores": [float(h[1]) for h in hits],
    }


def unpack_vectors(blobs: Sequence[bytes], dimension: int) -> npt.NDArray[np.float32]:
    """pgvector's binary send format (int16 dimension, int16 unused, big-endian float32s) to a matrix."""
    import numpy as np

    if not blobs:
        return np.zeros((0, dimension), np.float32)
    raw = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(blobs), dimension + 1)
    return np.ascontiguousarray(raw[:, 1:], dtype=np.float32)


def model_of(row: Any) -> EmbeddingModel:
    """The model a row of a model statement names (rows.EmbeddingModelRow, MemoryModelRow, PendingModelRow)."""
    return EmbeddingModel(int(row.id), str(row.name), int(row.dimension), str(row.kind), str(row.distance))


#: How many times a search runs again when its memory's embedding model switched under it (the first try
#: may use a remembered model, the next ones look it up afresh). The searcher and the FAISS cache share it.
MODEL_SWITCH_ATTEMPTS = 3


def still_switching(memory: str | None) -> EmbeddingError:
    """The error of a search whose memory switched models at every attempt."""
    return EmbeddingError(f"memory {memory!r} keeps switching embedding models; try again")
