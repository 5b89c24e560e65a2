"""Keyword search of messages (BM25, README, "Keyword search") under the same filters as vector search:
the ranking hybrid search fuses and ``keyword_search`` returns.

Every number BM25 uses belongs to the search's scope, never to the tables: N is the number of messages
the scope holds (the memory's size, read in the statement from ``pgmem.memory_counts``, O(1) since
migration 0017; or the namespace's messages, ``%(scope_n)s``, counted by the client's planner and
remembered for a minute), df is counted among the scope's hits, and a message's length against the mean
over the hits. So a tenant's ranking depends on its own messages only: neither
its order nor its scores say anything of what other namespaces or memories hold.
"""

from __future__ import annotations

from psycopg import sql

from pgmem.planning.search.filters import SearchFilters
from pgmem.planning.search.vector import MESSAGE_COLUMNS, entry_filters, fork_guard_sql
from pgmem.planning.statements import fragment

__all__ = ["NAMESPACE_SIZE", "keyword_hits_sql", "keyword_search_sql"]


#: How many messages the namespace holds (BM25's N for a search without a memory). Parameters: ns.
NAMESPACE_SIZE = "SELECT count(*) FROM pgmem.messages WHERE namespace = %(ns)s"
#: BM25's N for a search in a memory: its size, in the statement (the sum of its rows of memory_counts).
_MEMORY_SCOPE = (
    "SELECT coalesce(sum(c.n), 0)::float8 AS n FROM pgmem.memory_counts AS c "
    "WHERE c.namespace = %(ns)s AND c.memory = %(memory)s"
)


def keyword_hits_sql(f: SearchFilters) -> sql.Composed:
    """``(id, seq, score, rank, coverage)`` of the best ``%(k)s`` messages of the scope matching
    ``%(text)s`` (README, "Keyword search"), best first (ties: newest first; seq is the memory's entry's
    with a memory, else the message's own).

    score is BM25; coverage the idf of the query's lexemes the message holds over the idf of them all (a
    lexeme no hit holds counts with df 0), 1 for a message holding every word (hybrid search's text
    score). Parameters: ns, text, k, the filters' and, without a memory, scope_n."""
    terms: list[sql.Composable] = [
        sql.SQL("m.namespace = %(ns)s"),
        sql.SQL("m.tsv OPERATOR(pgmem.@@) pgmem.fts_query(%(text)s)"),
    ]
    terms += entry_filters(f, "te", "m")
    if f.memory is not None:
        text_from = sql.SQL(
            "pgmem.memory_entries te JOIN pgmem.messages m ON m.namespace = te.namespace AND m.id = te.message_id"
        )
        terms.insert(0, sql.SQL("te.namespace = %(ns)s"))
        seq = sql.SQL("te.seq")
        scope = sql.SQL(_MEMORY_SCOPE)
    else:
        text_from = sql.SQL("pgmem.messages m")
        seq = sql.SQL("m.seq")
        scope = sql.SQL("SELECT %(scope_n)s::float8 AS n")
    return sql.SQL(
        "WITH q AS MATERIALIZED (SELECT pgmem.fts_terms(%(text)s) AS terms), "
        "scope AS ({scope}), "
        "hit AS MATERIALIZED (SELECT m.id, {seq} AS seq, {hit} FROM q, {text_from} WHERE {terms}), "
        "{bm25}, "
        "cover AS (SELECT sum(ln(1 + (s.n - coalesce(df.df, 0) + 0.5) / (coalesce(df.df, 0) + 0.5))) AS total "
        "FROM (SELECT DISTINCT unnest(q.terms) AS lexeme FROM q) AS t CROSS JOIN stats AS s "
        "LEFT JOIN df ON df.lexeme = t.lexeme) "
        # The best k first (a top-k heap), then ranked: a window over every hit sorted them all.
        "SELECT b.id, b.seq, b.score, row_number() OVER (ORDER BY b.score DESC, b.seq DESC) AS rank, "
        "b.matched / nullif(c.total, 0) AS coverage "
        "FROM (SELECT * FROM bm25 ORDER BY bm25.score DESC, bm25.seq DESC LIMIT %(k)s) AS b CROSS JOIN cover AS c "
        "ORDER BY rank"
    ).format(
        scope=scope,
        seq=seq,
        hit=sql.SQL(fragment("bm25_hit")),
        text_from=text_from,
        terms=sql.SQL(" AND ").join(terms),
        bm25=sql.SQL(fragment("bm25")),
    )


def keyword_search_sql(f: SearchFilters) -> sql.Composed:
    """One statement: ``(seq, id, …, created_at, distance, score, ok)`` rows (hybrid search's row, the
    distance NULL, ok false when the memory is a fork not read through its lineage: see
    :func:`pgmem.planning.search.vector.fork_guard_sql`), best BM25 first, ``%(k)s`` of them."""
    return sql.SQL(
        "SELECT h.seq, {cols}, NULL::float8 AS distance, h.score, {ok} AS ok FROM ({hits}) AS h "
        "JOIN pgmem.messages m ON m.namespace = %(ns)s AND m.id = h.id ORDER BY h.rank"
    ).format(cols=sql.SQL(MESSAGE_COLUMNS.removeprefix("m.seq, ")), hits=keyword_hits_sql(f), ok=fork_guard_sql(f))
