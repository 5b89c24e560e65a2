"""Keyword search of messages (BM25, README, "Keyword search") under the same filters as vector search:
the ranking hybrid search fuses and ``keyword_search`` returns.

Every number BM25 uses belongs to the search's scope, never to the tables: N is the number of messages
the scope holds (the memory's entries, or the namespace's messages; ``%(scope_n)s``, counted by the
client's planner and remembered for a minute), df is counted among the scope's hits, and a message's
length against the mean over the hits. So a tenant's ranking depends on its own messages only: neither
its order nor its scores say anything of what other namespaces or memories hold.
"""

from __future__ import annotations

from psycopg import sql

from pgmem.planning.search.filters import SearchFilters
from pgmem.planning.search.vector import MESSAGE_COLUMNS, entry_filters
from pgmem.planning.statements import fragment

__all__ = ["keyword_hits_sql", "keyword_search_sql", "scope_size_sql"]


def scope_size_sql(memory: bool) -> str:
    """How many messages a keyword search's scope holds (BM25's N): the memory's entries, or the
    namespace's messages. Parameters: ns (and memory)."""
    if memory:  # O(1): the memory's counts (migration 0017)
        return "SELECT coalesce(sum(n), 0) FROM pgmem.memory_counts WHERE namespace = %(ns)s AND memory = %(memory)s"
    return "SELECT count(*) FROM pgmem.messages WHERE namespace = %(ns)s"


def keyword_hits_sql(f: SearchFilters) -> sql.Composed:
    """``(id, seq, score, rank, coverage)`` of the best ``%(k)s`` messages of the scope matching
    ``%(text)s`` (README, "Keyword search"), best first (ties: newest first; seq is the memory's entry's
    with a memory, else the message's own).

    score is BM25; coverage the idf of the query's lexemes the message holds over the idf of them all (a
    lexeme no hit holds counts with df 0), 1 for a message holding every word (hybrid search's text
    score). Parameters: ns, text, k, scope_n and the filters'."""
    terms: list[sql.Composable] = [
        sql.SQL("m.namespace = %(ns)s"),
        sql.SQL("m.tsv @@ pgmem.fts_query(%(text)s)"),
    ]
    terms += entry_filters(f, "te", "m")
    if f.memory is not None:
        text_from = sql.SQL(
            "pgmem.memory_entries te JOIN pgmem.messages m ON m.namespace = te.namespace AND m.id = te.message_id"
        )
        terms.insert(0, sql.SQL("te.namespace = %(ns)s"))
        seq = sql.SQL("te.seq")
    else:
        text_from = sql.SQL("pgmem.messages m")
        seq = sql.SQL("m.seq")
    return sql.SQL(
        "WITH q AS MATERIALIZED (SELECT pgmem.fts_terms(%(text)s) AS terms), "
        "scope AS (SELECT %(scope_n)s::float8 AS n), "
        "hit AS MATERIALIZED (SELECT m.id, {seq} AS seq, {hit} FROM q, {text_from} WHERE {terms}), "
        "{bm25}, "
        "cover AS (SELECT sum(ln(1 + (s.n - coalesce(df.df, 0) + 0.5) / (coalesce(df.df, 0) + 0.5))) AS total "
        "FROM (SELECT DISTINCT unnest(q.terms) AS lexeme FROM q) AS t CROSS JOIN stats AS s "
        "LEFT JOIN df ON df.lexeme = t.lexeme) "
        "SELECT b.id, b.seq, b.score, row_number() OVER (ORDER BY b.score DESC, b.seq DESC) AS rank, "
        "b.matched / nullif(c.total, 0) AS coverage FROM bm25 AS b CROSS JOIN cover AS c "
        "ORDER BY rank LIMIT %(k)s"
    ).format(
        seq=seq,
        hit=sql.SQL(fragment("bm25_hit")),
        text_from=text_from,
        terms=sql.SQL(" AND ").join(terms),
        bm25=sql.SQL(fragment("bm25")),
    )


def keyword_search_sql(f: SearchFilters) -> sql.Composed:
    """One statement: ``(seq, id, …, created_at, distance, score, ok)`` rows (hybrid search's row, the
    distance NULL, ok true), best BM25 first, ``%(k)s`` of them."""
    return sql.SQL(
        "SELECT h.seq, {cols}, NULL::float8 AS distance, h.score, true AS ok FROM ({hits}) AS h "
        "JOIN pgmem.messages m ON m.namespace = %(ns)s AND m.id = h.id ORDER BY h.rank"
    ).format(cols=sql.SQL(MESSAGE_COLUMNS.removeprefix("m.seq, ")), hits=keyword_hits_sql(f))
