"""keyword search served by its GIN index under row-level security

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29

Keyword search (``search_text``, ``keyword_search``, the keyword leg of every hybrid search) finds the
messages whose ``tsv`` matches a ``tsquery``. Under row-level security Postgres may only use an index for a
condition whose operator is leakproof (otherwise it must apply the namespace's policy first), and
``tsvector @@ tsquery`` is not declared so: for the application's role (``pgmem_app``) ``messages_tsv_idx``
was never used, and every search read every message of the namespace (a word in no message, 200k messages:
33-48 ms).

This adds ``pgmem.@@``, the match through ``pgmem.ts_match``: the built-in ``ts_match_vq`` declared
LEAKPROOF (it raises no error and has no side effect for any tsvector and tsquery, so it reveals nothing
about a row the policy hides), a GIN operator class ``pgmem.tsvector_match_ops`` (``tsvector_ops``'s
support functions, with both ``@@`` and ``@@@`` besides ``pgmem.@@``: the index still serves SQL written
with the built-in operators, e.g. analytics as the owner), and ``messages_tsv_idx`` rebuilt with it:
reads go on, writes to ``messages`` wait while it builds (a SHARE lock; 0.24 s for 200k messages).

Declaring a function LEAKPROOF, writing one in ``internal`` and creating an operator class are a
superuser's: a migrating role that is not one gets the operator over a SQL function (the same results) and
the index as it was, which serves only roles that bypass row-level security, until a superuser runs
``pgmem migrate`` (``pgmem.ops.migrate.LEAKPROOF_INDEXES``; ``pgmem doctor`` warns meanwhile).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UPGRADE = """
DO $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        CREATE FUNCTION pgmem.ts_match(tsvector, tsquery) RETURNS boolean
            LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'ts_match_vq';
    ELSE
        RAISE NOTICE 'pgmem: not a superuser, so keyword search gets no index (see migration 0027)';
        CREATE FUNCTION pgmem.ts_match(tsvector, tsquery) RETURNS boolean
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT $1 @@ $2';
    END IF;
END $$;
CREATE OPERATOR pgmem.@@ (
    LEFTARG = tsvector, RIGHTARG = tsquery, FUNCTION = pgmem.ts_match,
    RESTRICT = tsmatchsel, JOIN = tsmatchjoinsel
);
DO $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        CREATE OPERATOR CLASS pgmem.tsvector_match_ops FOR TYPE tsvector USING gin AS
            OPERATOR 1 pg_catalog.@@ (tsvector, tsquery),
            OPERATOR 2 pg_catalog.@@@ (tsvector, tsquery),
            OPERATOR 3 pgmem.@@ (tsvector, tsquery),
            FUNCTION 1 gin_cmp_tslexeme(text, text),
            FUNCTION 2 gin_extract_tsvector(tsvector, internal, internal),
            FUNCTION 3 gin_extract_tsquery(tsvector, internal, int2, internal, internal, internal, internal),
            FUNCTION 4 gin_tsquery_consistent(internal, int2, tsvector, int4, internal, internal, internal, internal),
            FUNCTION 5 gin_cmp_prefix(text, text, int2, internal),
            FUNCTION 6 gin_tsquery_triconsistent(internal, int2, tsvector, int4, internal, internal, internal),
            STORAGE text;
        DROP INDEX pgmem.messages_tsv_idx;
        CREATE INDEX messages_tsv_idx ON pgmem.messages USING gin (tsv pgmem.tsvector_match_ops);
    END IF;
END $$;
"""

_DOWNGRADE = """
DROP INDEX IF EXISTS pgmem.messages_tsv_idx;
CREATE INDEX messages_tsv_idx ON pgmem.messages USING gin (tsv);
DROP OPERATOR CLASS IF EXISTS pgmem.tsvector_match_ops USING gin;
DROP OPERATOR FAMILY IF EXISTS pgmem.tsvector_match_ops USING gin;
DROP OPERATOR IF EXISTS pgmem.@@ (tsvector, tsquery);
DROP FUNCTION IF EXISTS pgmem.ts_match(tsvector, tsquery);
"""


def upgrade() -> None:
    op.execute(_UPGRADE)


def downgrade() -> None:
    op.execute(_DOWNGRADE)
