-- Keyword search in any language the seeds' users write: the functions that turn a message into the
-- tsvector of pgmem.messages.tsv (its generated column) and a query into a tsquery and the lexemes BM25
-- ranks by. README, "Keyword search", tells what they match and how hits are ranked.
--
-- Text outside CJK scripts goes through Postgres's `english` configuration, as before (a message without
-- CJK characters gets exactly to_tsvector('english', content)). CJK runs (Han, Hiragana, Katakana,
-- Hangul: scripts written without spaces between words) are cut into characters: each character and each
-- pair of neighbours in a run (overlapping bigrams) is a lexeme as the `simple` configuration would make it
-- (no stemming, no stop words; CJK has no case), the character and the bigram it starts sharing one
-- position, consecutive within a run, a gap between runs. The embedded server has no other parser (no
-- zhparser, no pg_bigm, no pg_trgm), and needs none: everything here is SQL and PL/pgSQL.
--
-- Declaration only: migrations never read this file (migrations 0003 and 0008 hold copies of it, compared by
-- tests/migrations/test_database_code.py). pgmem.fts_document computes a stored generated column: a
-- change to what it returns needs a migration that also recomputes the column (as 0003 does).
--
-- The character class, written out in each function (a constant the planner folds):
--   U+1100-11FF Hangul Jamo, U+3005-3007 々〆〇, U+3040-309F Hiragana, U+30A0-30FA and U+30FC-30FF
--   Katakana (without ・, a separator), U+3130-318F Hangul compatibility Jamo, U+31F0-31FF Katakana
--   extensions, U+3400-4DBF and U+4E00-9FFF CJK ideographs, U+AC00-D7AF Hangul syllables, U+F900-FAFF
--   compatibility ideographs, U+FF66-FF9F half-width Katakana, U+20000-3FFFF ideograph extensions.
-- Punctuation (，。「」、！…) and full-width Latin are not in it: they separate runs.

-- name: fts_words
-- The text with every CJK run replaced by a space: what the `english` configuration reads.
CREATE OR REPLACE FUNCTION pgmem.fts_words(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT regexp_replace(p_text, '[\u1100-\u11FF\u3005-\u3007\u3040-\u309F\u30A0-\u30FA\u30FC-\u30FF\u3130-\u318F\u31F0-\u31FF\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\uFF66-\uFF9F\U00020000-\U0003FFFF]+', ' ', 'g')
$$;

-- name: fts_cjk_grams
-- The CJK lexemes of a text with their positions: every character of a CJK run and every bigram, the
-- bigram at the position of its first character. Positions stop at 16383, Postgres's largest tsvector
-- position (so about the first 16,000 CJK characters are indexed; the worst case, all of them distinct,
-- stays under half of the 1 MB a tsvector may hold).
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

-- name: fts_document
-- The tsvector of a message (pgmem.messages.tsv): the `english` one of its other words, then its CJK
-- lexemes (positions after the English ones). Without CJK characters, exactly to_tsvector('english', …).
-- PL/pgSQL, not SQL (migration 0008): the column's expression is planned again for every INSERT
-- statement, and a SQL function that cannot be inlined (this one has a subquery) had its body parsed and
-- planned again each time, ~140 us of every statement that stores messages; PL/pgSQL keeps the compiled
-- function and its plans for the session. Cost per message: ~10 us for an English line (to_tsvector), ~50 us
-- for a 25-character Chinese one.
CREATE OR REPLACE FUNCTION pgmem.fts_document(p_text text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    IF p_text !~ '[\u1100-\u11FF\u3005-\u3007\u3040-\u309F\u30A0-\u30FA\u30FC-\u30FF\u3130-\u318F\u31F0-\u31FF\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\uFF66-\uFF9F\U00020000-\U0003FFFF]' THEN
        RETURN to_tsvector('english'::regconfig, p_text);
    END IF;
    RETURN to_tsvector('english'::regconfig, pgmem.fts_words(p_text))
        || coalesce((SELECT string_agg(g.lexeme || ':' || g.pos, ' ')::tsvector FROM pgmem.fts_cjk_grams(p_text) AS g),
                    to_tsvector('english'::regconfig, ''));
END
$$;

-- name: fts_query_grams
-- The CJK lexemes a query looks for: the bigrams of each CJK run, or the character of a run of one.
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

-- name: fts_terms
-- The lexemes of a query that BM25 scores: its English ones (stemmed) and its CJK lexemes, none of what it
-- excludes (`-word`, `-"phrase"`).
CREATE OR REPLACE FUNCTION pgmem.fts_terms(p_query text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT tsvector_to_array(to_tsvector('english'::regconfig, pgmem.fts_words(w.q))) || pgmem.fts_query_grams(w.q)
FROM (SELECT regexp_replace(p_query, '(^|\s)-("[^"]*"|[[:alpha:]]\S*)', ' ', 'g') AS q) AS w
$$;

-- name: fts_any
-- A tsquery matching a message that holds any lexeme of the text (pgmem.fts_terms); NULL when it has none.
CREATE OR REPLACE FUNCTION pgmem.fts_any(p_text text) RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT string_agg('''' || replace(replace(t.lexeme, '\', '\\'), '''', '''''') || '''', ' | ')::tsquery
FROM unnest(pgmem.fts_terms(p_text)) AS t(lexeme)
$$;

-- name: fts_query
-- The tsquery of a keyword query (README, "Keyword search"). Plain words, as agents ask ("what did
-- Caroline research?"), match a message holding ANY of them (pgmem.fts_terms: English words stemmed, stop
-- words out, CJK bigrams); BM25 ranks the messages holding more and rarer ones first. A "quoted phrase" is
-- required (its English words in order, every bigram of its CJK), a `-word` or `-"phrase"` excluded, and
-- the other words stay optional. AND or OR in capitals asks for boolean search: websearch_to_tsquery's
-- rules for the English words (every word, "a phrase", OR, -not), AND any one of the CJK lexemes. NULL,
-- which matches nothing, when nothing is asked for (only stop words, punctuation or exclusions).
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
$$;
