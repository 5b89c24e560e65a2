"""keyword search: pgmem.fts_document in PL/pgSQL

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

``pgmem.messages.tsv`` is computed by ``pgmem.fts_document``, and Postgres plans a stored generated
column's expression again for every INSERT statement. As a SQL function with a subquery it could not be
inlined, so its body was parsed and planned again each time: ~140 us of server time in every statement
that stores messages, more than the rest of the row's indexes together (benchmarks/README.md, "Framework
adapters"). The same function in PL/pgSQL, whose compiled body and plans live for the session, returns
exactly the same tsvector for every text: same name, arguments, volatility and strictness, so the column,
its stored values and its index stay as they are. No rewrite, no lock beyond the function's own row.
"""

# ruff: noqa: E501  (the function's text is sql/text_search.sql character for character, its CJK class on one line)

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PLPGSQL = r"""
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
"""

# Revision 0003's definition.
_SQL = r"""
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
"""


def upgrade() -> None:
    op.execute(_PLPGSQL)


def downgrade() -> None:
    op.execute(_SQL)
