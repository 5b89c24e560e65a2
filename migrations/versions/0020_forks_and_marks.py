"""rewind and branch a memory: forks and named marks (issue 36, item 2)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29

``client.fork(memory, into)`` makes a memory that starts as another and then diverges, in O(1): a fork
copies no entry. ``pgmem.memory_forks`` names each fork's parent and the point (a sequence number) up to
which it inherits the parent's entries; reads of a memory read its lineage (``pgmem.lineage``: its own
entries, its parent's up to the point, recursively). Entries leaving a parent (delete, clear, trim, moved)
are copied into the forks that inherit them, with their sequence numbers (trigger
``memory_entries_left_forks``), unless their message is gone (forget, retention): then they leave every
fork. A removal in a fork first copies what it inherits into it (``pgmem.materialize_fork``). Deleting a
parent materialises its forks. ``pgmem.memory_marks`` holds named points (``client.mark``) that reads take
as ``as_of=``.

Both tables get row-level security as migration 0017's table (the default privileges grant pgmem_app the
rest). The functions and triggers are sql/triggers.sql's blocks lineage, materialize_fork,
fork_entries_left and fork_parent_removed, copied character for character.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = """
CREATE TABLE pgmem.memory_forks (
    namespace text NOT NULL,
    memory text NOT NULL,
    parent text NOT NULL,
    upto_seq bigint NOT NULL,
    forked_at timestamptz NOT NULL DEFAULT now(),
    materialized_at timestamptz,
    CONSTRAINT memory_forks_pkey PRIMARY KEY (namespace, memory),
    CONSTRAINT memory_forks_memory_fkey FOREIGN KEY (namespace, memory)
        REFERENCES pgmem.memories (namespace, key) ON DELETE CASCADE,
    CONSTRAINT memory_forks_upto_check CHECK (upto_seq >= 0)
);
CREATE INDEX memory_forks_parent_idx ON pgmem.memory_forks (namespace, parent) WHERE materialized_at IS NULL;
COMMENT ON TABLE pgmem.memory_forks IS
    'Forks of memories (client.fork, migration 0020): a fork reads its parent''s entries up to upto_seq '
    'besides its own, until materialised.';
COMMENT ON COLUMN pgmem.memory_forks.memory IS 'the fork';
COMMENT ON COLUMN pgmem.memory_forks.parent IS 'the memory it was forked from';
COMMENT ON COLUMN pgmem.memory_forks.upto_seq IS 'it inherits the parent''s entries with seq <= this';
COMMENT ON COLUMN pgmem.memory_forks.materialized_at IS
    'when its inherited entries were copied into it (NULL: it still reads them from the parent)';

CREATE TABLE pgmem.memory_marks (
    namespace text NOT NULL,
    memory text NOT NULL,
    name text NOT NULL,
    seq bigint NOT NULL,
    marked_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT memory_marks_pkey PRIMARY KEY (namespace, memory, name),
    CONSTRAINT memory_marks_memory_fkey FOREIGN KEY (namespace, memory)
        REFERENCES pgmem.memories (namespace, key) ON DELETE CASCADE
);
COMMENT ON TABLE pgmem.memory_marks IS
    'Named points of memories (client.mark, migration 0020): reads take as_of=<name>.';
COMMENT ON COLUMN pgmem.memory_marks.seq IS 'the memory''s sequence high-water mark when marked';

ALTER TABLE pgmem.memory_forks ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.memory_forks FORCE ROW LEVEL SECURITY;
CREATE POLICY pgmem_namespace ON pgmem.memory_forks USING (namespace = current_setting('pgmem.namespace', true))
    WITH CHECK (namespace = current_setting('pgmem.namespace', true));
CREATE POLICY pgmem_admin ON pgmem.memory_forks TO CURRENT_USER
    USING (current_setting('pgmem.admin', true) = 'on') WITH CHECK (current_setting('pgmem.admin', true) = 'on');

ALTER TABLE pgmem.memory_marks ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.memory_marks FORCE ROW LEVEL SECURITY;
CREATE POLICY pgmem_namespace ON pgmem.memory_marks USING (namespace = current_setting('pgmem.namespace', true))
    WITH CHECK (namespace = current_setting('pgmem.namespace', true));
CREATE POLICY pgmem_admin ON pgmem.memory_marks TO CURRENT_USER
    USING (current_setting('pgmem.admin', true) = 'on') WITH CHECK (current_setting('pgmem.admin', true) = 'on');
"""

# sql/triggers.sql's blocks as of this revision (copied character for character).
_CODE = r"""
-- name: lineage
-- What a memory holds, as (memory, upto) rows (migration 0020): the memory's own entries, and for a fork
-- those of its parent with seq <= the fork's point, recursively (a fork of a fork takes the smaller point).
-- p_upto bounds every row (a read as of a sequence number; NULL: now). A memory that is no fork gives
-- one row. Forks that were materialised (pgmem.materialize_fork) hold their entries themselves.
CREATE OR REPLACE FUNCTION pgmem.lineage(p_ns text, p_memory text, p_upto bigint)
RETURNS TABLE (memory text, upto bigint) LANGUAGE sql STABLE ROWS 2 AS $$
    WITH RECURSIVE up (memory, upto, depth) AS (
        SELECT p_memory, coalesce(p_upto, 9223372036854775807), 0
        UNION ALL
        SELECT f.parent, least(up.upto, f.upto_seq), up.depth + 1
        FROM up JOIN pgmem.memory_forks AS f
          ON f.namespace = p_ns AND f.memory = up.memory AND f.materialized_at IS NULL
        WHERE up.depth < 64
    )
    SELECT up.memory, up.upto FROM up
$$;

-- name: materialize_fork
-- Copy what a fork inherits into the fork's own entries (keeping their sequence numbers) and cut it from
-- its parent: done before a removal in the fork, and for the forks of a memory being deleted. Its size
-- does not change (the copies were counted when it was forked). Returns the entries copied.
CREATE OR REPLACE FUNCTION pgmem.materialize_fork(p_ns text, p_memory text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    copied bigint;
BEGIN
    -- Concurrent materialisers of one fork: the second finds it materialised once the first commits.
    PERFORM 1 FROM pgmem.memory_forks
    WHERE namespace = p_ns AND memory = p_memory AND materialized_at IS NULL
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH inherited AS (
        INSERT INTO pgmem.memory_entries (namespace, memory, message_id, seq, cause_by, added_at)
        SELECT p_ns, p_memory, e.message_id, e.seq, e.cause_by, e.added_at
        FROM pgmem.lineage(p_ns, p_memory, NULL) AS l
        JOIN pgmem.memory_entries AS e ON e.namespace = p_ns AND e.memory = l.memory AND e.seq <= l.upto
        WHERE l.memory <> p_memory
        ORDER BY e.message_id
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT count(*) INTO copied FROM inherited;
    IF copied > 0 THEN
        INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
        VALUES (p_ns, p_memory, (pg_backend_pid() % 64)::smallint, -copied)
        ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    UPDATE pgmem.memory_forks SET materialized_at = now()
    WHERE namespace = p_ns AND memory = p_memory;
    RETURN copied;
END $$;

-- name: fork_entries_left
-- Entries leaving a memory that has forks (deleted, or moved to another memory): a fork keeps what it
-- inherited. An entry at or below a fork's point is copied into the fork (its seq kept; counted there
-- already); grandchildren inherit the copy through it. An entry whose message is gone (forget, retention)
-- is not copied: it leaves every fork, whose sizes drop by one. Nothing to do, after one probe of an
-- index, when the namespace has no fork.
CREATE OR REPLACE FUNCTION pgmem.fork_entries_left() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgmem.memory_forks AS f WHERE f.materialized_at IS NULL) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM (SELECT DISTINCT o.namespace, o.memory FROM old_rows AS o) AS o
                   JOIN pgmem.memory_forks AS f
                     ON f.namespace = o.namespace AND f.parent = o.memory AND f.materialized_at IS NULL) THEN
        RETURN NULL;
    END IF;
    WITH copied AS (
        INSERT INTO pgmem.memory_entries (namespace, memory, message_id, seq, cause_by, added_at)
        SELECT o.namespace, f.memory, o.message_id, o.seq, o.cause_by, o.added_at
        FROM old_rows AS o
        JOIN pgmem.memory_forks AS f
          ON f.namespace = o.namespace AND f.parent = o.memory AND f.materialized_at IS NULL AND o.seq <= f.upto_seq
        WHERE EXISTS (SELECT 1 FROM pgmem.messages AS m WHERE m.namespace = o.namespace AND m.id = o.message_id)
        ORDER BY 1, 2, 3
        ON CONFLICT DO NOTHING
        RETURNING namespace, memory
    )
    INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
    SELECT x.namespace, x.memory, (pg_backend_pid() % 64)::smallint, -count(*)
    FROM copied AS x GROUP BY x.namespace, x.memory ORDER BY x.namespace, x.memory
    ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    WITH RECURSIVE lost (namespace, memory, seq) AS (
        SELECT f.namespace, f.memory, o.seq
        FROM old_rows AS o
        JOIN pgmem.memory_forks AS f
          ON f.namespace = o.namespace AND f.parent = o.memory AND f.materialized_at IS NULL AND o.seq <= f.upto_seq
        WHERE NOT EXISTS (SELECT 1 FROM pgmem.messages AS m WHERE m.namespace = o.namespace AND m.id = o.message_id)
        UNION ALL
        SELECT f.namespace, f.memory, lost.seq
        FROM lost
        JOIN pgmem.memory_forks AS f
          ON f.namespace = lost.namespace AND f.parent = lost.memory AND f.materialized_at IS NULL
         AND lost.seq <= f.upto_seq
    )
    INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
    SELECT lost.namespace, lost.memory, (pg_backend_pid() % 64)::smallint, -count(*)
    FROM lost GROUP BY lost.namespace, lost.memory ORDER BY lost.namespace, lost.memory
    ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_entries_left_forks AFTER DELETE ON pgmem.memory_entries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.fork_entries_left();

CREATE TRIGGER memory_entries_moved_forks AFTER UPDATE ON pgmem.memory_entries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.fork_entries_left();

-- name: fork_parent_removed
-- A memory deleted while forks inherit from it: they are materialised first (they keep what they held).
CREATE OR REPLACE FUNCTION pgmem.fork_parent_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmem.materialize_fork(f.namespace, f.memory)
    FROM pgmem.memory_forks AS f
    WHERE f.namespace = OLD.namespace AND f.parent = OLD.key AND f.materialized_at IS NULL
    ORDER BY f.memory;
    RETURN OLD;
END $$;

CREATE TRIGGER memories_forks_kept BEFORE DELETE ON pgmem.memories
    FOR EACH ROW EXECUTE FUNCTION pgmem.fork_parent_removed();
"""

_DOWNGRADE = """
DROP TRIGGER memories_forks_kept ON pgmem.memories;
DROP TRIGGER memory_entries_moved_forks ON pgmem.memory_entries;
DROP TRIGGER memory_entries_left_forks ON pgmem.memory_entries;
DROP FUNCTION pgmem.fork_parent_removed();
DROP FUNCTION pgmem.fork_entries_left();
DROP FUNCTION pgmem.materialize_fork(text, text);
DROP FUNCTION pgmem.lineage(text, text, bigint);
DROP TABLE pgmem.memory_marks;
DROP TABLE pgmem.memory_forks;
"""


def upgrade() -> None:
    op.execute(_TABLES)
    op.execute(_CODE)


def downgrade() -> None:
    op.execute(_DOWNGRADE)
