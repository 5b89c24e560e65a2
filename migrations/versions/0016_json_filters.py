"""metadata filters served by an index under row-level security

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29

Message search filters on metadata and the item store on its values (``{"topic": "billing"}``): an
equality is jsonb containment. Under row-level security Postgres may only use an index for a condition
whose operator is leakproof (otherwise it must apply the namespace's policy first), and jsonb's ``@>`` is
not declared so: a GIN index on the column could never serve pgmem's application role, and every row of
the namespace was tested.

This adds ``pgmem.@>``, jsonb containment through ``pgmem.jsonb_contains``: the built-in function
``jsonb_contains`` declared LEAKPROOF (it raises no error and has no side effect for any two jsonb values,
so it reveals nothing about a row the policy hides), a GIN operator class ``pgmem.jsonb_contains_ops`` (the
support functions of ``jsonb_path_ops``, containment as strategy 7), and GIN indexes with it on
``messages.metadata`` (new) and ``items.value`` (rebuilt: its ``jsonb_path_ops`` index served only roles
that bypass row-level security, and was otherwise only written).

Declaring a function LEAKPROOF, writing one in ``internal`` and creating an operator class are a
superuser's: a migrating role that is not one gets the operator over a plain SQL function (the same
results) and no index; the filters are then tested per candidate row, as before this revision, until a
superuser runs ``pgmem migrate`` (``pgmem.ops.migrate.FILTER_INDEXES``; ``pgmem doctor`` warns meanwhile).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UPGRADE = """
DO $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        CREATE FUNCTION pgmem.jsonb_contains(jsonb, jsonb) RETURNS boolean
            LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'jsonb_contains';
    ELSE
        RAISE NOTICE 'pgmem: not a superuser, so metadata filters get no index (see migration 0016)';
        CREATE FUNCTION pgmem.jsonb_contains(jsonb, jsonb) RETURNS boolean
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT $1 @> $2';
    END IF;
END $$;
CREATE OPERATOR pgmem.@> (
    LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = pgmem.jsonb_contains,
    RESTRICT = matchingsel, JOIN = matchingjoinsel
);
DO $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        CREATE OPERATOR CLASS pgmem.jsonb_contains_ops FOR TYPE jsonb USING gin AS
            OPERATOR 7 pgmem.@>,
            FUNCTION 1 btint4cmp(int4, int4),
            FUNCTION 2 gin_extract_jsonb_path(jsonb, internal, internal),
            FUNCTION 3 gin_extract_jsonb_query_path(jsonb, internal, int2, internal, internal, internal, internal),
            FUNCTION 4 gin_consistent_jsonb_path(internal, int2, jsonb, int4, internal, internal, internal, internal),
            FUNCTION 6 gin_triconsistent_jsonb_path(internal, int2, jsonb, int4, internal, internal, internal),
            STORAGE int4;
        CREATE INDEX messages_metadata_idx ON pgmem.messages USING gin (metadata pgmem.jsonb_contains_ops);
        DROP INDEX IF EXISTS pgmem.items_value_idx;
        CREATE INDEX items_value_idx ON pgmem.items USING gin (value pgmem.jsonb_contains_ops);
    END IF;
END $$;
"""

_DOWNGRADE = """
DROP INDEX IF EXISTS pgmem.items_value_idx;
CREATE INDEX items_value_idx ON pgmem.items USING gin (value jsonb_path_ops);
DROP INDEX IF EXISTS pgmem.messages_metadata_idx;
DROP OPERATOR CLASS IF EXISTS pgmem.jsonb_contains_ops USING gin;
DROP OPERATOR FAMILY IF EXISTS pgmem.jsonb_contains_ops USING gin;
DROP OPERATOR IF EXISTS pgmem.@> (jsonb, jsonb);
DROP FUNCTION IF EXISTS pgmem.jsonb_contains(jsonb, jsonb);
"""


def upgrade() -> None:
    op.execute(_UPGRADE)


def downgrade() -> None:
    op.execute(_DOWNGRADE)
