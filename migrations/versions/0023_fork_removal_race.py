"""forks and removals at the same moment: a fork's size stays exact (issue 36, item 2)

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29

A fork counted its parent's size in its statement's snapshot while a removal in the parent (a forget, a
delete) could be running: the removal's trigger (``pgmem.fork_entries_left``) did not see the fork, which
was not committed yet, and the fork's snapshot did not see the removal, which was not committed yet; the
fork's size was then one more than it held (and a deleted entry it should have kept was not copied into
it). The trigger now takes the parent's settle lock shared, as writers do, before it looks for forks; the
fork takes it exclusively in a statement of its own and reads its parent in the next one, a fresh
snapshot (sql/forks.sql ``settle_parent``, ``fork``): one of the two waits for the other to commit.

The function is sql/triggers.sql's block fork_entries_left, copied character for character.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CODE = r"""
-- name: fork_entries_left
-- Entries leaving a memory that has forks (deleted, or moved to another memory): a fork keeps what it
-- inherited. An entry at or below a fork's point is copied into the fork (its seq kept; counted there
-- already); grandchildren inherit the copy through it. An entry whose message is gone (forget, retention)
-- is not copied: it leaves every fork, whose sizes drop by one. Nothing to do, after one probe of an
-- index, when the namespace has no fork. First the writers' settle lock of each memory the entries leave,
-- shared (migration 0023): a fork takes it exclusively before it reads its parent (sql/forks.sql), so a
-- fork committed before this lock is seen below, and one made after it waits for this transaction and
-- counts without what it removed; a fork and a removal (a forget) at the same moment left its size off.
CREATE OR REPLACE FUNCTION pgmem.fork_entries_left() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(28781, hashtext(o.namespace || '/' || o.memory))
    FROM (SELECT DISTINCT x.namespace, x.memory FROM old_rows AS x ORDER BY 1, 2) AS o;
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
"""

# migration 0020's function, for the downgrade
_DOWNGRADE = r"""
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
"""


def upgrade() -> None:
    op.execute(_CODE)


def downgrade() -> None:
    op.execute(_DOWNGRADE)
