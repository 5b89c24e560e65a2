"""The one statement behind ``client.context`` (:mod:`pgmem.planning.context`): a memory's pinned
messages, its newest messages up to an estimate of the budget, the frontier of its summaries, and the
messages older than those that match the query (hybrid search, or keyword search without a model), in one
round trip. Rows: ``(part, seq, score, first_seq, last_seq, <message columns>, ok)``.
"""

from __future__ import annotations

import functools
from typing import LiteralString

from psycopg import sql

from pgmem.planning.search import EmbeddingModel, SearchFilters, hybrid_search_sql, keyword_search_sql
from pgmem.planning.statements import fragment

__all__ = ["CONTEXT_COLUMNS", "WINDOW_MARGIN", "context_statement"]

#: The columns before a row's message columns.
CONTEXT_COLUMNS = ("part", "seq", "score", "first_seq", "last_seq")
#: The window is read up to an estimate of its tokens against WINDOW_MARGIN times the budget; the exact
#: count is the tokenizer's, in Python. The estimate: a quarter token per single-byte character (tiktoken
#: makes 4 to 4.5 characters of English a token) and 1.5 per character of 2 bytes or more (CJK text: 3 bytes
#: a character, 1 to 2 tokens each), each character of 2+ bytes counted as the bytes it adds, over 2.
WINDOW_MARGIN = 1.3

_MESSAGE = sql.SQL(fragment("message_columns"))
_ESTIMATE = sql.SQL(
    "((char_length(m.content) - (octet_length(m.content) - char_length(m.content)) / 2) / 4"
    " + (octet_length(m.content) - char_length(m.content)) * 3 / 4"
    " + 4 + coalesce(octet_length(m.tool_calls::text) / 4, 0))"
)

# The newest entries of the memory, each with the estimated tokens of the entries after it (so the rows
# beyond the budget's estimate are never sent), then their messages. The ORDER BY … LIMIT walks the
# memory's (namespace, memory, seq) index backwards from its end; OFFSET 0 keeps each message a probe by
# its key (flattened into a join, Postgres hashed every message of the namespace: 5.8 ms at 20k).
_WINDOW = sql.SQL(
    "w AS MATERIALIZED (SELECT x.* FROM (SELECT e.seq, mm.*, "
    "sum(mm.estimate) OVER (ORDER BY e.seq DESC ROWS UNBOUNDED PRECEDING) - mm.estimate AS before "
    "FROM (SELECT seq, message_id FROM pgmem.memory_entries WHERE namespace = %(ns)s AND memory = %(memory)s "
    "ORDER BY seq DESC LIMIT %(window_max)s) AS e "
    "CROSS JOIN LATERAL (SELECT {message}, {estimate} AS estimate FROM pgmem.messages AS m "
    "WHERE m.namespace = %(ns)s AND m.id = e.message_id OFFSET 0) AS mm) AS x "
    "WHERE x.before < %(window_tokens)s), "
    "cut AS (SELECT coalesce(min(w.seq), 9223372036854775807) AS seq FROM w)"
).format(message=_MESSAGE, estimate=_ESTIMATE)
# Pinned: the roles asked for (messages_role_idx) or metadata {"pinned": true} (messages_metadata_idx),
# then their entries in the memory. Planned on its own (MATERIALIZED, no ORDER BY … LIMIT inside): with
# one, Postgres walked the memory's entries in order looking for the few pinned ones (40 ms at 20k
# entries) instead of finding them by the indexes (the cap and the order come after).
_PINNED = sql.SQL(
    "pin0 AS MATERIALIZED (SELECT e.seq, {message} FROM pgmem.messages AS m "
    "JOIN pgmem.memory_entries AS e ON e.namespace = %(ns)s AND e.message_id = m.id AND e.memory = %(memory)s "
    "WHERE m.namespace = %(ns)s AND (m.role = ANY(%(pinned_roles)s::text[]) "
    "OR m.metadata OPERATOR(pgmem.@>) '{{\"pinned\": true}}'::jsonb)), "
    "pin AS (SELECT * FROM pin0 ORDER BY seq LIMIT %(pinned_max)s)"
).format(message=_MESSAGE)
# The frontier of the memory's summaries (sql/summaries.sql, frontier: what no live higher summary
# covers) that may end before the window: the window's first message is chosen later, among the rows of w,
# so the newest 32 (more never fit: each is a few hundred tokens) besides one per row of w. The
# summaries of a level do not overlap, so a summary's parent is the one of the next level with the greatest
# first_seq at or below its own: one probe of summaries_range_key each (the frontier's NOT EXISTS compared
# every pair, 1 ms at 250 summaries).
_SUMMARIES = sql.SQL(
    "summ AS (SELECT s.id, s.level, s.first_seq, s.last_seq, s.content, s.created_at FROM pgmem.summaries AS s "
    "WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND s.stale_at IS NULL "
    "AND s.last_seq < (SELECT max(w.seq) FROM w) "
    "AND NOT coalesce((SELECT p.last_seq >= s.first_seq AND p.stale_at IS NULL FROM pgmem.summaries AS p "
    "WHERE p.namespace = %(ns)s AND p.memory = s.memory AND p.level = s.level + 1 AND p.first_seq <= s.first_seq "
    "ORDER BY p.first_seq DESC LIMIT 1), false) "
    "ORDER BY s.last_seq DESC LIMIT 32 + (SELECT count(*) FROM w))"
)
# A summary as a row of message columns: its id, content and time; the rest empty.
_SUMMARY_ROW = sql.SQL(
    "SELECT 'summary', s.last_seq, s.level::float8, s.first_seq, s.last_seq, s.id::text, s.content, NULL::text, "
    "'system', '', '', '{{}}'::text[], NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, s.created_at, "
    "true FROM summ AS s"
)
_NAMES = [name.strip() for name in fragment("message_column_names").split(",")]


def _related(model: EmbeddingModel | None, strategy: str) -> sql.Composable:
    """The related messages' search, restricted to the entries before the window (``cut``)."""
    filters = SearchFilters("m", max_seq=0)
    search = keyword_search_sql(filters) if model is None else hybrid_search_sql(model, filters, strategy)
    text: str = search.as_string(None)
    # The bound is the window's first entry, known only inside the statement: the searches take it as the
    # parameter max_seq, replaced here by the CTE that computes it (the name is the searches' only use).
    assert "%(max_seq)s" in text
    return sql.SQL(text.replace("%(max_seq)s", "(SELECT c.seq - 1 FROM cut AS c)"))


def _rows(part: str, alias: str, scored: bool = False) -> sql.Composable:
    """A part's rows from the CTE ``alias`` (seq and the message columns), in the statement's row shape
    (``scored``: the CTE's score and ok columns, a search's)."""
    a = sql.Identifier(alias)
    return sql.SQL(
        "SELECT {part}, {a}.seq, {score}, NULL::bigint, NULL::bigint, {cols}, {ok} FROM {cte} AS {a}"
    ).format(
        part=sql.Literal(part),
        a=a,
        score=sql.SQL("{}.score").format(a) if scored else sql.SQL("NULL::float8"),
        cols=sql.SQL(", ").join(sql.SQL("{}.{}").format(a, sql.Identifier(n)) for n in _NAMES),
        ok=sql.SQL("{}.ok").format(a) if scored else sql.SQL("true"),
        cte=sql.Identifier({"p": "pin", "w": "w", "r": "rel"}[alias]),
    )


@functools.lru_cache(maxsize=64)
def context_statement(parts: tuple[str, ...], model: EmbeddingModel | None, strategy: str) -> LiteralString:
    """The statement for the ``parts`` asked for; with ``related``, the search of ``model`` (None: keyword
    search) with ``strategy``. Parameters: ns, memory, window_max, window_tokens, pinned_roles,
    pinned_max, and for related those of the search (text, k, limit, scope_n, q…)."""
    ctes: list[sql.Composable] = [_WINDOW]
    selects: list[sql.Composable] = []
    if "pinned" in parts:
        ctes.append(_PINNED)
        selects.append(_rows("pinned", "p"))
    selects.append(_rows("window", "w"))  # the window bounds the summaries and the related part too
    if "summary" in parts:
        ctes.append(_SUMMARIES)
        selects.append(_SUMMARY_ROW)
    if "related" in parts:
        ctes.append(sql.SQL("rel AS ({})").format(_related(model, strategy)))
        selects.append(_rows("related", "r", scored=True))
    composed = sql.SQL("WITH {} {}").format(sql.SQL(", ").join(ctes), sql.SQL(" UNION ALL ").join(selects))
    # Only the model's id and dimension are literals (integers), and the parts' names: no quoting context.
    text: LiteralString = composed.as_string(None)
    return text
