"""a removal in a fork racing a forget in its ancestor: the fork's copy skips the forgotten message

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29

A removal in a fork first copies what the fork inherits into it (``pgmem.materialize_fork``). A forget in
its parent, running at the same moment, deletes one of those messages: the copy's foreign key check then
waited for the forget and failed once it committed, and the removal in the fork (of another message) was
refused with ``NotFound``. The copy now locks the messages first, as the foreign key would
(``FOR KEY SHARE``): a message deleted meanwhile drops out (the forget's ``fork_entries_left`` counted it
out of the fork), one whose forget rolls back is copied.

The function is sql/triggers.sql's block materialize_fork, copied character for character.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CODE = r"""
-- name: materialize_fork
-- Copy what a fork inherits into the fork's own entries (keeping their sequence numbers) and cut it from
-- its parent: done before a removal in the fork, and for the forks of a memory being deleted. Its size
-- does not change (the copies were counted when it was forked). Returns the entries copied. The messages
-- are locked first, as the copy's foreign key would lock them (migration 0025): one a forget in an ancestor
-- is deleting drops out once the forget commits (whose fork_entries_left counted it out of the fork)
-- instead of failing the copy's foreign key check, which failed the removal in the fork with NotFound.
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
    WITH alive AS MATERIALIZED (
        SELECT e.message_id, e.seq, e.cause_by, e.added_at
        FROM pgmem.lineage(p_ns, p_memory, NULL) AS l
        JOIN pgmem.memory_entries AS e ON e.namespace = p_ns AND e.memory = l.memory AND e.seq <= l.upto
        JOIN pgmem.messages AS m ON m.namespace = p_ns AND m.id = e.message_id
        WHERE l.memory <> p_memory
        ORDER BY e.message_id
        FOR KEY SHARE OF m
    ), inherited AS (
        INSERT INTO pgmem.memory_entries (namespace, memory, message_id, seq, cause_by, added_at)
        SELECT p_ns, p_memory, a.message_id, a.seq, a.cause_by, a.added_at
        FROM alive AS a
        ORDER BY a.message_id
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
"""

_DOWNGRADE = r"""
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
"""


def upgrade() -> None:
    op.execute(_CODE)


def downgrade() -> None:
    op.execute(_DOWNGRADE)
