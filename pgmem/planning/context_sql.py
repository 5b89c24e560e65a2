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
from pgmem.planning.search.vector import fork_guard_sql
from pgmem.planning.statements import fragment

__all__ = ["CONTEXT_COLUMNS", "WINDOW_MARGIN", "context_statement", "window_margin"]

#: The columns before a row's message columns.
CONTEXT_COLUMNS = ("part", "seq", "score", "first_seq", "last_seq")
#: The window is read up to an estimate of its tokens against WINDOW_MARGIN times the budget; the exact
#: count is the tokenizer's, in Python. The estimate for tiktoken: a quarter token per single-byte
#: character (tiktoken makes 4 to 4.5 characters of English a token) and 1.5 per character of 2 bytes or
#: more (CJK text: 3 bytes a character, 1 to 2 tokens each), each character of 2+ bytes counted as the bytes
#: it adds, over 2.
WINDOW_MARGIN = 1.3
#: With pgmem's own estimate as the tokenizer (one token per 4 UTF-8 bytes) the statement counts what
#: Python counts, but a message's tool calls as Postgres prints them (a few more bytes than Python's
#: compact JSON): a smaller margin (fewer rows read and sent), and no CJK text cut at half the budget.
APPROX_MARGIN = 1.1

_MESSAGE = sql.SQL(fragment("message_columns"))
_ESTIMATES = {
    False: sql.SQL(
        "((char_length(m.content) - (octet_length(m.content) - char_length(m.content)) / 2) / 4"
        " + (octet_length(m.content) - char_length(m.content)) * 3 / 4"
        " + 4 + coalesce(octet_length(m.tool_calls::text) / 4, 0))"
    ),
    True: sql.SQL("((octet_length(m.content) + 3) / 4 + 4 + coalesce((octet_length(m.tool_calls::text) + 3) / 4, 0))"),
}


def window_margin(approx: bool) -> float:
    """The window's margin over the budget for the tokenizer: pgmem's estimate (``approx``) or tiktoken."""
    return APPROX_MARGIN if approx else WINDOW_MARGIN


# Where the window and the pinned part read entries, as of %(upto)s (NULL: now). A memory that is no fork:
# its own range of the (namespace, memory, seq) index, as before forks (measured: reading every memory
# through pgmem.lineage made a plain memory's context 18-26% slower at 20k). A fork (``lineage``): each
# range of its lineage (pgmem.lineage, migration 0020), its parent's up to the fork's point too.
_OWN_NEWEST = sql.SQL(
    "SELECT seq, message_id FROM pgmem.memory_entries WHERE namespace = %(ns)s AND memory = %(memory)s "
    "AND seq <= coalesce(%(upto)s::bigint, 9223372036854775807) ORDER BY seq DESC LIMIT %(window_max)s"
)
_LINEAGE_NEWEST = sql.SQL(
    "SELECT y.seq, y.message_id FROM pgmem.lineage(%(ns)s, %(memory)s, %(upto)s::bigint) AS l "
    "CROSS JOIN LATERAL (SELECT seq, message_id FROM pgmem.memory_entries "
    "WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto "
    "ORDER BY seq DESC LIMIT %(window_max)s) AS y ORDER BY y.seq DESC LIMIT %(window_max)s"
)
# The newest entries of the memory, each with the estimated tokens of the entries after it (so the rows
# beyond the budget's estimate are never sent), then their messages. The ORDER BY … LIMIT walks the
# memory's (namespace, memory, seq) index backwards from its end (from the point); OFFSET 0 keeps each
# message a probe by its key (flattened into a join, Postgres hashed every message of the namespace:
# 5.8 ms at 20k). `cut`: the window's first entry; without a window, just past the point (the related part
# then searches everything up to it).
_WINDOW = (
    "w AS MATERIALIZED (SELECT x.* FROM (SELECT e.seq, mm.*, "
    "sum(mm.estimate) OVER (ORDER BY e.seq DESC ROWS UNBOUNDED PRECEDING) - mm.estimate AS before "
    "FROM ({newest}) AS e "
    "CROSS JOIN LATERAL (SELECT {message}, {estimate} AS estimate FROM pgmem.messages AS m "
    "WHERE m.namespace = %(ns)s AND m.id = e.message_id OFFSET 0) AS mm) AS x "
    "WHERE x.before < %(window_tokens)s), "
    "cut AS (SELECT coalesce(min(w.seq), least(%(upto)s::bigint, 9223372036854775806) + 1, "
    "9223372036854775807) AS seq FROM w)"
)
# Pinned: the roles asked for or metadata {"pinned": true}, two ways, the cheaper for the data chosen inside
# the statement (its plan is generic, made once for every namespace and memory, so no choice may rest on
# the planner's estimates): the namespace's pinned candidates found by messages_role_idx and
# messages_pinned_idx (migration 0024), each probed for its entry in the memory (two queries, each with its
# index: as one, a plan made with few rows in the table read every message of the namespace); or, when the namespace
# holds more candidates than half the memory's entries (pgmem.memory_counts), the memory's entries walked,
# each message probed. Measured at 20k entries: the walk 6.7 ms, the probes 0.02 ms; with the statistics
# of a table analyzed when small, Postgres chose the walk in both its custom and generic plans. The roles
# are a literal of the statement, not a parameter, for the same reason.
_PINNED_WHERE = "(m.role = ANY({roles}::text[]) OR m.metadata OPERATOR(pgmem.@>) '{{\"pinned\": true}}'::jsonb)"
_OWN_RANGE = (
    "(SELECT seq, message_id FROM pgmem.memory_entries WHERE namespace = %(ns)s AND memory = %(memory)s "
    "AND seq <= coalesce(%(upto)s::bigint, 9223372036854775807))"
)
_OWN_SIZE = "SELECT coalesce(sum(n), 0) FROM pgmem.memory_counts WHERE namespace = %(ns)s AND memory = %(memory)s"
_OWN_PROBE = (
    "SELECT e.seq FROM pgmem.memory_entries AS e WHERE e.namespace = %(ns)s AND e.message_id = c.id "
    "AND e.memory = %(memory)s AND e.seq <= coalesce(%(upto)s::bigint, 9223372036854775807)"
)
_LINEAGE_RANGE = (
    "(SELECT y.seq, y.message_id FROM pin_lin AS l JOIN pgmem.memory_entries AS y "
    "ON y.namespace = %(ns)s AND y.memory = l.memory AND y.seq <= l.upto)"
)
_LINEAGE_SIZE = (
    "SELECT coalesce(sum(c.n), 0) FROM pin_lin AS l JOIN pgmem.memory_counts AS c "
    "ON c.namespace = %(ns)s AND c.memory = l.memory"
)
_LINEAGE_PROBE = (
    "SELECT e.seq FROM pin_lin AS l JOIN pgmem.memory_entries AS e ON e.namespace = %(ns)s "
    "AND e.message_id = c.id AND e.memory = l.memory AND e.seq <= l.upto"
)
#: Pinned candidates of a namespace read at most: beyond, the memory's entries are walked.
PINNED_PROBES = 10_000
_PINNED = (
    "{lineage}"
    "pinc AS MATERIALIZED ((SELECT m.id FROM pgmem.messages AS m WHERE m.namespace = %(ns)s "
    "AND m.role = ANY({roles}::text[]) LIMIT {probes}) UNION (SELECT m.id FROM pgmem.messages AS m "
    "WHERE m.namespace = %(ns)s AND m.metadata OPERATOR(pgmem.@>) '{{\"pinned\": true}}'::jsonb LIMIT {probes})), "
    "pin_probe AS MATERIALIZED (SELECT (SELECT count(*) FROM pinc) < least({probes}, ({size}) / 2) AS few), "
    "pin0 AS MATERIALIZED ("
    "SELECT e.seq, {message} FROM pinc AS c "
    "CROSS JOIN LATERAL ({probe} OFFSET 0) AS e "
    "CROSS JOIN LATERAL (SELECT * FROM pgmem.messages AS m WHERE m.namespace = %(ns)s AND m.id = c.id OFFSET 0) AS m "
    "WHERE (SELECT few FROM pin_probe) "
    "UNION ALL "
    "SELECT e.seq, {message} FROM {range} AS e "
    "CROSS JOIN LATERAL (SELECT * FROM pgmem.messages AS m WHERE m.namespace = %(ns)s AND m.id = e.message_id "
    "AND {where} OFFSET 0) AS m "
    "WHERE NOT (SELECT few FROM pin_probe)), "
    "pin AS (SELECT * FROM pin0 ORDER BY seq LIMIT %(pinned_max)s)"
)


def _window(lineage: bool, approx: bool) -> sql.Composable:
    newest = _LINEAGE_NEWEST if lineage else _OWN_NEWEST
    return sql.SQL(_WINDOW).format(newest=newest, message=_MESSAGE, estimate=_ESTIMATES[approx])


def _pinned(lineage: bool, roles: tuple[str, ...]) -> sql.Composable:
    where = sql.SQL(_PINNED_WHERE).format(roles=sql.Literal(list(roles)))
    return sql.SQL(_PINNED).format(
        lineage=sql.SQL(
            "pin_lin AS MATERIALIZED (SELECT * FROM pgmem.lineage(%(ns)s, %(memory)s, %(upto)s::bigint)), "
            if lineage
            else ""
        ),
        where=where,
        roles=sql.Literal(list(roles)),
        probes=sql.Literal(PINNED_PROBES),
        size=sql.SQL(_LINEAGE_SIZE if lineage else _OWN_SIZE),
        probe=sql.SQL(_LINEAGE_PROBE if lineage else _OWN_PROBE),
        range=sql.SQL(_LINEAGE_RANGE if lineage else _OWN_RANGE),
        message=_MESSAGE,
    )


# The frontier of the memory's summaries (sql/summaries.sql, frontier: what no live higher summary
# covers) that may end before the window: the window's first message is chosen later, among the rows of w,
# so the newest 32 (more never fit: each is a few hundred tokens) besides one per row of w. The summaries
# of a level do not overlap, so a summary is covered when the live summaries of the next level that start
# at or before it reach it: one pass over the memory's summaries, each also as a parent of the level below
# (its end, when live), a running maximum per level in start order. A probe of summaries_range_key per
# summary cost 0.64 ms of a 0.97 ms statement at 100k messages (256 summaries).
_SUMMARIES = sql.SQL(
    "summ AS (SELECT y.id, y.level, y.first_seq, y.last_seq, y.content, y.created_at FROM ("
    "SELECT x.*, max(x.parent_end) OVER (PARTITION BY x.child_level ORDER BY x.first_seq, x.parent DESC "
    "ROWS UNBOUNDED PRECEDING) AS covered_to FROM ("
    "SELECT s.id, s.level, s.first_seq, s.last_seq, s.content, s.created_at, s.stale_at, s.level AS child_level, "
    "false AS parent, NULL::bigint AS parent_end FROM pgmem.summaries AS s "
    "WHERE s.namespace = %(ns)s AND s.memory = %(memory)s "
    "UNION ALL SELECT p.id, p.level, p.first_seq, p.last_seq, NULL, NULL, p.stale_at, p.level - 1, true, "
    "CASE WHEN p.stale_at IS NULL THEN p.last_seq END FROM pgmem.summaries AS p "
    "WHERE p.namespace = %(ns)s AND p.memory = %(memory)s AND p.level > 1) AS x) AS y "
    "WHERE NOT y.parent AND y.stale_at IS NULL AND coalesce(y.covered_to, -1) < y.first_seq "
    "AND y.last_seq < (SELECT max(w.seq) FROM w) "
    "ORDER BY y.last_seq DESC LIMIT 32 + (SELECT count(*) FROM w))"
)
# A summary as a row of message columns: its id, content and time; the rest empty.
_SUMMARY_ROW = sql.SQL(
    "SELECT 'summary', s.last_seq, s.level::float8, s.first_seq, s.last_seq, s.id::text, s.content, NULL::text, "
    "'system', '', '', '{{}}'::text[], NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, s.created_at, "
    "true FROM summ AS s"
)
_NAMES = [name.strip() for name in fragment("message_column_names").split(",")]


def _related(model: EmbeddingModel | None, strategy: str, lineage: bool) -> sql.Composable:
    """The related messages' search, restricted to the entries before the window (``cut``); ``lineage``:
    through the memory's lineage (a fork), else its own entries (the window's ``ok`` column then says
    whether it is a fork: :func:`context_statement`)."""
    filters = SearchFilters("m", max_seq=0, lineage=lineage)
    search = keyword_search_sql(filters) if model is None else hybrid_search_sql(model, filters, strategy)
    text: str = search.as_string(None)
    # The bound is the window's first entry, known only inside the statement: the searches take it as the
    # parameter max_seq, replaced here by the CTE that computes it (the name is the searches' only use).
    assert "%(max_seq)s" in text
    return sql.SQL(text.replace("%(max_seq)s", "(SELECT c.seq - 1 FROM cut AS c)"))


def _rows(
    part: str, alias: str, scored: bool = False, ok: sql.Composable | None = None, score: str | None = None
) -> sql.Composable:
    """A part's rows from the CTE ``alias`` (seq and the message columns), in the statement's row shape
    (``scored``: the CTE's score and ok columns, a search's; ``ok``: the ok column otherwise, true when
    None; ``score``: a column of the CTE as the score otherwise)."""
    a = sql.Identifier(alias)
    return sql.SQL(
        "SELECT {part}, {a}.seq, {score}, NULL::bigint, NULL::bigint, {cols}, {ok} FROM {cte} AS {a}"
    ).format(
        part=sql.Literal(part),
        a=a,
        score=(
            sql.SQL("{}.score").format(a)
            if scored
            else sql.SQL("{}.{}::float8").format(a, sql.Identifier(score))
            if score
            else sql.SQL("NULL::float8")
        ),
        cols=sql.SQL(", ").join(sql.SQL("{}.{}").format(a, sql.Identifier(n)) for n in _NAMES),
        ok=sql.SQL("{}.ok").format(a) if scored else (ok or sql.SQL("true")),
        cte=sql.Identifier({"p": "pin", "w": "w", "r": "rel"}[alias]),
    )


@functools.lru_cache(maxsize=64)
def context_statement(
    parts: tuple[str, ...],
    model: EmbeddingModel | None,
    strategy: str,
    lineage: bool = False,
    pinned_roles: tuple[str, ...] = ("system",),
    approx: bool = False,
) -> LiteralString:
    """The statement for the ``parts`` asked for; with ``related``, the search of ``model`` (None: keyword
    search) with ``strategy``; every part through the memory's lineage when ``lineage`` (a fork: its
    parent's entries up to the fork's point too); ``pinned_roles`` the roles of the pinned part; ``approx``:
    the window estimates tokens as pgmem's own tokenizer counts them (else as tiktoken might). Parameters:
    ns, memory, upto (NULL: now), window_max, window_tokens, pinned_max, and for related those of the search
    (text, k, limit, scope_n, q…). A window row's score is the estimate of its tokens the window was read
    by.

    Without ``lineage`` the statement reads the memory's own entries, and its window rows' ``ok`` column is
    false when the memory is a fork that inherits after all (:func:`pgmem.planning.search.vector.fork_guard_sql`,
    as the searches do): the caller then runs it again with ``lineage`` (and, when no row came back, asks).
    A fork's summaries are its own rows (sql/forks.sql copies the parent's when it forks)."""
    ctes: list[sql.Composable] = [_window(lineage, approx)]
    selects: list[sql.Composable] = []
    if "pinned" in parts:
        ctes.append(_pinned(lineage, pinned_roles))
        selects.append(_rows("pinned", "p"))
    guard = None if lineage else fork_guard_sql(SearchFilters("m"))
    # the window bounds the summaries and the related part too
    selects.append(_rows("window", "w", ok=guard, score="estimate"))
    if "summary" in parts:
        ctes.append(_SUMMARIES)
        selects.append(_SUMMARY_ROW)
    if "related" in parts:
        ctes.append(sql.SQL("rel AS ({})").format(_related(model, strategy, lineage)))
        selects.append(_rows("related", "r", scored=True))
    composed = sql.SQL("WITH {} {}").format(sql.SQL(", ").join(ctes), sql.SQL(" UNION ALL ").join(selects))
    # The literals: the model's id and dimension (integers), the parts' names and the pinned roles (an array
    # of text that psycopg quotes the same in any context).
    text: LiteralString = composed.as_string(None)
    return text
