"""keyword search: a question matches the messages holding any of its words

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28

``pgmem.fts_query`` followed ``websearch_to_tsquery``: every word of a query was required, so a question
asked in plain language ("what did Caroline research about adoption?") almost never matched anything
(issue 33: keyword search returned nothing for 1,679 of 1,982 questions of a long-conversation benchmark).
Now plain words match a message holding any of them (English words stemmed, stop words out; CJK bigrams
as before), and BM25, computed as before, ranks the messages holding more and rarer ones first. A quoted
phrase is required and a ``-word`` or ``-"phrase"`` excluded, the other words staying optional (a question
quoting a title finds the messages holding the title); AND or OR in capitals keeps websearch's boolean
rules. ``fts_terms`` leaves the excluded words out of BM25. Only the two functions change:
``messages.tsv`` and its index stay.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# sql/text_search.sql's fts_terms, fts_any and fts_query as of this revision, character for character.
_TERMS = r"""
CREATE OR REPLACE FUNCTION pgmem.fts_terms(p_query text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT tsvector_to_array(to_tsvector('english'::regconfig, pgmem.fts_words(w.q))) || pgmem.fts_query_grams(w.q)
FROM (SELECT regexp_replace(p_query, '(^|\s)-("[^"]*"|[[:alpha:]]\S*)', ' ', 'g') AS q) AS w
$$;"""

_ANY = r"""
CREATE OR REPLACE FUNCTION pgmem.fts_any(p_text text) RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT string_agg('''' || replace(replace(t.lexeme, '\', '\\'), '''', '''''') || '''', ' | ')::tsquery
FROM unnest(pgmem.fts_terms(p_text)) AS t(lexeme)
$$;"""

_ANY_WORD = r"""
CREATE OR REPLACE FUNCTION pgmem.fts_query(p_query text) RETURNS tsquery
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    required tsquery;
    excluded tsquery;
    part tsquery;
    phrase text;
    rest text;
BEGIN
    IF p_query ~ '(^|\s)(AND|OR)(\s|$)' THEN
        RETURN (SELECT CASE WHEN w.q IS NULL THEN c.q WHEN c.q IS NULL THEN w.q ELSE w.q && c.q END
                FROM (SELECT CASE WHEN pgmem.fts_words(p_query) ~ '\w'
                                  THEN websearch_to_tsquery('english'::regconfig, pgmem.fts_words(p_query))
                             END AS q) AS w,
                     (SELECT string_agg('''' || g.gram || '''', ' | ')::tsquery AS q
                      FROM unnest(pgmem.fts_query_grams(p_query)) AS g(gram)) AS c);
    END IF;
    -- Quoted phrases: each required, or excluded after a dash. An unclosed quote is no phrase.
    FOR phrase IN SELECT m[1] || m[2] FROM regexp_matches(p_query, '(-?)"([^"]*)"', 'g') AS m LOOP
        part := (SELECT CASE WHEN pgmem.fts_words(phrase) ~ '\w'
                             THEN phraseto_tsquery('english'::regconfig, pgmem.fts_words(phrase)) END);
        IF numnode(part) = 0 THEN
            part := NULL;  -- stop words only
        END IF;
        part := (SELECT CASE WHEN part IS NULL THEN g.q WHEN g.q IS NULL THEN part ELSE part && g.q END
                 FROM (SELECT string_agg('''' || x.gram || '''', ' & ')::tsquery AS q
                       FROM unnest(pgmem.fts_query_grams(phrase)) AS x(gram)) AS g);
        IF part IS NULL THEN
            CONTINUE;
        ELSIF left(phrase, 1) = '-' THEN
            excluded := CASE WHEN excluded IS NULL THEN part ELSE excluded || part END;
        ELSE
            required := CASE WHEN required IS NULL THEN part ELSE required && part END;
        END IF;
    END LOOP;
    rest := replace(regexp_replace(p_query, '-?"[^"]*"', ' ', 'g'), '"', ' ');
    -- Excluded words: -word (a letter after the dash, so "-5" and "e-mail" are words).
    FOR phrase IN SELECT m[1] FROM regexp_matches(rest, '(?:^|\s)-([[:alpha:]]\S*)', 'g') AS m LOOP
        part := pgmem.fts_any(phrase);
        IF part IS NOT NULL THEN
            excluded := CASE WHEN excluded IS NULL THEN part ELSE excluded || part END;
        END IF;
    END LOOP;
    -- Without a phrase, the other words: any of them.
    IF required IS NULL THEN
        required := pgmem.fts_any(rest);
    END IF;
    IF required IS NULL OR excluded IS NULL THEN
        RETURN required;
    END IF;
    RETURN required && !! excluded;
END
$$;"""

# The functions as revision 0003 created them.
_EVERY_WORD_TERMS = r"""
CREATE OR REPLACE FUNCTION pgmem.fts_terms(p_query text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT tsvector_to_array(to_tsvector('english'::regconfig, pgmem.fts_words(p_query))) || pgmem.fts_query_grams(p_query)
$$;"""

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
    op.execute(_TERMS)
    op.execute(_ANY)
    op.execute(_ANY_WORD)


def downgrade() -> None:
    op.execute(_EVERY_WORD_TERMS)
    op.execute(_EVERY_WORD)
    op.execute("DROP FUNCTION pgmem.fts_any(text)")
