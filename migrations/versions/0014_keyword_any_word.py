"""keyword search: a question matches the messages holding any of its words

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28

``pgmem.fts_query`` followed ``websearch_to_tsquery``: every word of a query was required, so a question
asked in plain language ("what did Caroline research about adoption?") almost never matched anything
(issue 33: keyword search returned nothing for 1,679 of 1,982 questions of a long-conversation benchmark).
A query without search syntax now matches a message holding any of its lexemes (English words stemmed,
stop words out; CJK bigrams as before), and BM25, computed as before, ranks the messages holding more and
rarer ones first. A query with a double quote, a word starting with ``-``, or AND / OR in capitals keeps
the websearch meaning. Only the function changes: ``messages.tsv``, its index and ``fts_terms`` stay.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# sql/text_search.sql's fts_query as of this revision, character for character.
_ANY_WORD = r"""
CREATE OR REPLACE FUNCTION pgmem.fts_query(p_query text) RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT CASE
    WHEN p_query ~ '"|(^|\s)-[[:alpha:]]|(^|\s)(AND|OR)(\s|$)' THEN
        (SELECT CASE WHEN w.q IS NULL THEN c.q WHEN c.q IS NULL THEN w.q ELSE w.q && c.q END
         FROM (SELECT CASE WHEN pgmem.fts_words(p_query) ~ '\w'
                           THEN websearch_to_tsquery('english'::regconfig, pgmem.fts_words(p_query)) END AS q) AS w,
              (SELECT string_agg('''' || g.gram || '''', ' | ')::tsquery AS q
               FROM unnest(pgmem.fts_query_grams(p_query)) AS g(gram)) AS c)
    ELSE
        (SELECT string_agg('''' || replace(replace(t.lexeme, '\', '\\'), '''', '''''') || '''', ' | ')::tsquery
         FROM unnest(pgmem.fts_terms(p_query)) AS t(lexeme))
END
$$;"""

# The function as revision 0003 created it.
_EVERY_WORD = r"""
CREATE OR REPLACE FUNCTION pgmem.fts_query(p_query text) RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT CASE WHEN w.q IS NULL THEN c.q WHEN c.q IS NULL THEN w.q ELSE w.q && c.q END
FROM (SELECT CASE WHEN pgmem.fts_words(p_query) ~ '\w'
                  THEN websearch_to_tsquery('english'::regconfig, pgmem.fts_words(p_query)) END AS q) AS w,
     (SELECT string_agg('''' || g.gram || '''', ' | ')::tsquery AS q
      FROM unnest(pgmem.fts_query_grams(p_query)) AS g(gram)) AS c
$$;"""


def upgrade() -> None:
    op.execute(_ANY_WORD)


def downgrade() -> None:
    op.execute(_EVERY_WORD)
