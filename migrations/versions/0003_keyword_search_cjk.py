"""keyword search in Chinese, Japanese and Korean: messages.tsv through pgmem.fts_document

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25

The functions of ``sql/text_search.sql`` as of this revision (``pgmem.fts_document``, ``fts_query``,
``fts_terms`` and their helpers: English words through the ``english`` configuration as before, CJK runs
as characters and overlapping bigrams), and ``pgmem.messages.tsv`` computed by ``pgmem.fts_document``.

Cost: the column is dropped and added again (with its GIN index), which rewrites ``pgmem.messages``
under an ACCESS EXCLUSIVE lock: every read and write of messages waits until the migration commits.
Measured on the embedded server (2 shared cores, benchmarks/vectors.py part K): 64,197 messages (34k
English lines, 30k generated Chinese/Japanese ones of ~60 characters) in 7.8 s, column and GIN index
(the same column computed the old way: 3.3 s). The function costs ~10 us per English line and ~50 us
per short Chinese one: plan about two minutes per million short messages, more for long ones, and run
it in a maintenance window on a big table. A message without CJK characters keeps exactly the
tsvector it had (to_tsvector('english', ...)).
"""

# ruff: noqa: E501  (the functions' text is sql/text_search.sql character for character, its CJK class on one line)

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION pgmem.fts_words(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT regexp_replace(p_text, '[\u1100-\u11FF\u3005-\u3007\u3040-\u309F\u30A0-\u30FA\u30FC-\u30FF\u3130-\u318F\u31F0-\u31FF\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\uFF66-\uFF9F\U00020000-\U0003FFFF]+', ' ', 'g')
$$;

CREATE OR REPLACE FUNCTION pgmem.fts_cjk_grams(p_text text) RETURNS TABLE (lexeme text, pos integer)
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT g.lexeme, x.pos
FROM (
    SELECT r.base + c.j AS pos, c.ch AS uni, c.ch || lead(c.ch) OVER (PARTITION BY r.k ORDER BY c.j) AS bi
    FROM (
        SELECT s.m[1] AS run, s.k, sum(char_length(s.m[1]) + 1) OVER (ORDER BY s.k) - char_length(s.m[1]) - 1 AS base
        FROM regexp_matches(p_text, '[\u1100-\u11FF\u3005-\u3007\u3040-\u309F\u30A0-\u30FA\u30FC-\u30FF\u3130-\u318F\u31F0-\u31FF\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\uFF66-\uFF9F\U00020000-\U0003FFFF]+', 'g')
             WITH ORDINALITY AS s(m, k)
    ) AS r, string_to_table(r.run, NULL) WITH ORDINALITY AS c(ch, j)
) AS x, LATERAL (VALUES (x.uni), (x.bi)) AS g(lexeme)
WHERE g.lexeme IS NOT NULL AND x.pos <= 16383
$$;

CREATE OR REPLACE FUNCTION pgmem.fts_document(p_text text) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT CASE
    WHEN p_text !~ '[\u1100-\u11FF\u3005-\u3007\u3040-\u309F\u30A0-\u30FA\u30FC-\u30FF\u3130-\u318F\u31F0-\u31FF\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\uFF66-\uFF9F\U00020000-\U0003FFFF]'
        THEN to_tsvector('english'::regconfig, p_text)
    ELSE to_tsvector('english'::regconfig, pgmem.fts_words(p_text))
        || coalesce((SELECT string_agg(g.lexeme || ':' || g.pos, ' ')::tsvector FROM pgmem.fts_cjk_grams(p_text) AS g),
                    to_tsvector('english'::regconfig, ''))
END
$$;

CREATE OR REPLACE FUNCTION pgmem.fts_query_grams(p_query text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT coalesce(array_agg(DISTINCT g.gram ORDER BY g.gram), '{}')
FROM (
    SELECT CASE WHEN char_length(s.m[1]) = 1 THEN c.ch
                ELSE c.ch || lead(c.ch) OVER (PARTITION BY s.k ORDER BY c.j) END AS gram
    FROM regexp_matches(p_query, '[\u1100-\u11FF\u3005-\u3007\u3040-\u309F\u30A0-\u30FA\u30FC-\u30FF\u3130-\u318F\u31F0-\u31FF\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\uFF66-\uFF9F\U00020000-\U0003FFFF]+', 'g')
         WITH ORDINALITY AS s(m, k), string_to_table(s.m[1], NULL) WITH ORDINALITY AS c(ch, j)
) AS g
WHERE g.gram IS NOT NULL
$$;

CREATE OR REPLACE FUNCTION pgmem.fts_query(p_query text) RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT CASE WHEN w.q IS NULL THEN c.q WHEN c.q IS NULL THEN w.q ELSE w.q && c.q END
FROM (SELECT CASE WHEN pgmem.fts_words(p_query) ~ '\w'
                  THEN websearch_to_tsquery('english'::regconfig, pgmem.fts_words(p_query)) END AS q) AS w,
     (SELECT string_agg('''' || g.gram || '''', ' | ')::tsquery AS q
      FROM unnest(pgmem.fts_query_grams(p_query)) AS g(gram)) AS c
$$;

CREATE OR REPLACE FUNCTION pgmem.fts_terms(p_query text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT tsvector_to_array(to_tsvector('english'::regconfig, pgmem.fts_words(p_query))) || pgmem.fts_query_grams(p_query)
$$;
"""

_DROP_FUNCTIONS = (
    "DROP FUNCTION pgmem.fts_terms(text), pgmem.fts_query(text), pgmem.fts_query_grams(text),"
    " pgmem.fts_document(text), pgmem.fts_cjk_grams(text), pgmem.fts_words(text)"
)


def _recompute_tsv(expression: str) -> None:
    # DROP + ADD rather than ALTER COLUMN ... SET EXPRESSION, which needs PostgreSQL 17: both rewrite the table.
    op.execute("DROP INDEX pgmem.messages_tsv_idx")
    op.execute("ALTER TABLE pgmem.messages DROP COLUMN tsv")
    op.execute(f"ALTER TABLE pgmem.messages ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({expression}) STORED")
    op.execute("CREATE INDEX messages_tsv_idx ON pgmem.messages USING gin (tsv)")


def upgrade() -> None:
    op.execute(_FUNCTIONS)
    _recompute_tsv("pgmem.fts_document(left(content, 200000))")


def downgrade() -> None:
    _recompute_tsv("to_tsvector('english'::regconfig, left(content, 200000))")
    op.execute(_DROP_FUNCTIONS)
