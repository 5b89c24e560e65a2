"""items keyed by a text of their path: get and list_paths use their index under row-level security

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29

Under row-level security Postgres uses an index only for conditions whose operators are leakproof: text's
comparisons are, text[]'s are not. The item store's primary key led with its path (``text[]``), so for
the application's role (``pgmem_app``, which the policies bind) a path was never an index condition: a
``get`` skipped through every distinct path of the namespace with the key alone (201 index searches for
one item among 100 paths; 0.3 ms, growing with the namespace's paths), and ``list_paths``' loose index scan
read the whole namespace once per path (540-570 ms for 101 paths of 100k items).

``path_key`` (``pgmem.path_key(path)``, a stored generated column of ``items`` and ``item_history``) is
the path as one text in collation "C": each label followed by U+0001, its U+0001 and U+0002 escaped behind
U+0002. It is ordered as the paths are, and the paths under a prefix are one range of it. The primary keys
now lead with it (``(namespace, path_key, key)``, ``(namespace, path_key, key, id)``): the same rows are
unique (the key is one-to-one with the path), and no index is added for writes to update. Adding the
columns rewrites both tables (an ACCESS EXCLUSIVE lock while it runs).

The functions are sql/triggers.sql's blocks path_key and path_prefix_end (a prefix's range), copied
character for character.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CODE = r"""
-- name: path_key
-- An item's path as one text in collation "C" (migration 0026): the stored column path_key of pgmem.items
-- and pgmem.item_history, which their primary keys lead with. Under row-level security Postgres uses an
-- index only for conditions whose operators are leakproof, and text's are where text[]'s are not: an item's
-- get probed every distinct path of the namespace, and list_paths read every item once per path. Each
-- label followed by U+0001, its U+0001 and U+0002 escaped behind U+0002: one text per path, ordered as
-- the paths are, and the paths under a prefix P are the keys in [key(P), key(P) with its last U+0001 made
-- U+0002).
CREATE OR REPLACE FUNCTION pgmem.path_key(p_path text[]) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT coalesce(string_agg(replace(replace(l, E'\x02', E'\x02\x02'), E'\x01', E'\x02\x01') || E'\x01', ''
                           ORDER BY n), '')
FROM unnest(p_path) WITH ORDINALITY AS u(l, n)
$$;

-- name: path_prefix_end
-- Where the paths under the prefix p_prefix end (migration 0026): they are the path keys in
-- [pgmem.path_key(p_prefix), pgmem.path_prefix_end(p_prefix)). NULL for the empty prefix (every path).
CREATE OR REPLACE FUNCTION pgmem.path_prefix_end(p_prefix text[]) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT CASE WHEN cardinality(p_prefix) > 0 THEN left(pgmem.path_key(p_prefix), -1) || E'\x02' END
$$;
"""

_COMMENT = "the path as one text (pgmem.path_key): what the primary key and every path condition use"


def upgrade() -> None:
    op.execute(_CODE)
    for table in ("items", "item_history"):
        op.execute(
            f'ALTER TABLE pgmem.{table} ADD COLUMN path_key text COLLATE "C" NOT NULL '
            "GENERATED ALWAYS AS (pgmem.path_key(path)) STORED"
        )
        op.execute(f"COMMENT ON COLUMN pgmem.{table}.path_key IS '{_COMMENT}'")
    op.execute(
        "ALTER TABLE pgmem.items DROP CONSTRAINT items_pkey, "
        "ADD CONSTRAINT items_pkey PRIMARY KEY (namespace, path_key, key)"
    )
    op.execute(
        "ALTER TABLE pgmem.item_history DROP CONSTRAINT item_history_pkey, "
        "ADD CONSTRAINT item_history_pkey PRIMARY KEY (namespace, path_key, key, id)"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE pgmem.item_history DROP CONSTRAINT item_history_pkey, "
        "ADD CONSTRAINT item_history_pkey PRIMARY KEY (namespace, path, key, id)"
    )
    op.execute(
        "ALTER TABLE pgmem.items DROP CONSTRAINT items_pkey, "
        "ADD CONSTRAINT items_pkey PRIMARY KEY (namespace, path, key)"
    )
    for table in ("items", "item_history"):
        op.execute(f"ALTER TABLE pgmem.{table} DROP COLUMN path_key")
    op.execute("DROP FUNCTION pgmem.path_prefix_end(text[])")
    op.execute("DROP FUNCTION pgmem.path_key(text[])")
