"""a memory's size in O(1), without a row every writer of the memory locks

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29

``messages.count(memory)`` (MetaGPT's ``Memory.count``) counted the memory's entries: 250 ms at a million
(a scan of the memory's index) against 0.5 ms at a thousand. A counter row per memory would make it O(1)
but every writer of a team memory would then wait on that row's lock until the writer before it
commits (issue 38 measures exactly that serialisation on 16 cores).

``pgmem.memory_counts`` holds up to 64 rows per memory: triggers on ``memory_entries`` add each
statement's inserted and deleted entries to the row of shard ``pg_backend_pid() % 64`` (one upsert per
statement, after it). Two writers share a shard, and wait on each other, only when their backends' pids
collide modulo 64; the count is the sum of the memory's rows (at most 64, one range of the primary key).
It is in the writing transaction, so a count sees exactly the entries its snapshot sees. No foreign key:
a key-share lock on the memory's row per upsert would bring the shared row back. A removed memory's rows
sum to zero (its entries' deletion is counted) and stay: deleting them from the memory's own trigger
could run before the cascade's count, and a memory created again under the key would start below zero.

The table is created, the triggers added (which locks memory_entries against writes until this
migration commits: no entry can be written between the backfill and the triggers), and the existing
entries counted into shard 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UPGRADE = """
CREATE TABLE pgmem.memory_counts (
    namespace text NOT NULL,
    memory text NOT NULL,
    shard smallint NOT NULL,
    n bigint NOT NULL,
    CONSTRAINT memory_counts_pkey PRIMARY KEY (namespace, memory, shard)
);
COMMENT ON TABLE pgmem.memory_counts IS
    'How many entries each memory holds: the sum of its rows (one per writer shard; migration 0017).';
ALTER TABLE pgmem.memory_counts ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.memory_counts FORCE ROW LEVEL SECURITY;
CREATE POLICY pgmem_namespace ON pgmem.memory_counts USING (namespace = current_setting('pgmem.namespace', true))
    WITH CHECK (namespace = current_setting('pgmem.namespace', true));
CREATE POLICY pgmem_admin ON pgmem.memory_counts TO CURRENT_USER
    USING (current_setting('pgmem.admin', true) = 'on') WITH CHECK (current_setting('pgmem.admin', true) = 'on');

CREATE OR REPLACE FUNCTION pgmem.count_entries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
        SELECT r.namespace, r.memory, (pg_backend_pid() % 64)::smallint, count(*)
        FROM new_rows AS r GROUP BY r.namespace, r.memory ORDER BY r.namespace, r.memory
        ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
        SELECT r.namespace, r.memory, (pg_backend_pid() % 64)::smallint, -count(*)
        FROM old_rows AS r GROUP BY r.namespace, r.memory ORDER BY r.namespace, r.memory
        ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    ELSE  -- entries moved to another memory (messages.move_oldest): out of one, into the other
        INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
        SELECT d.namespace, d.memory, (pg_backend_pid() % 64)::smallint, sum(d.n)
        FROM (SELECT namespace, memory, 1 AS n FROM new_rows
              UNION ALL SELECT namespace, memory, -1 FROM old_rows) AS d
        GROUP BY d.namespace, d.memory HAVING sum(d.n) <> 0 ORDER BY d.namespace, d.memory
        ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_entries_counted AFTER INSERT ON pgmem.memory_entries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.count_entries();
CREATE TRIGGER memory_entries_uncounted AFTER DELETE ON pgmem.memory_entries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.count_entries();
CREATE TRIGGER memory_entries_recounted AFTER UPDATE ON pgmem.memory_entries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.count_entries();

INSERT INTO pgmem.memory_counts (namespace, memory, shard, n)
SELECT namespace, memory, 0, count(*) FROM pgmem.memory_entries GROUP BY namespace, memory;
"""

_DOWNGRADE = """
DROP TRIGGER memory_entries_recounted ON pgmem.memory_entries;
DROP TRIGGER memory_entries_uncounted ON pgmem.memory_entries;
DROP TRIGGER memory_entries_counted ON pgmem.memory_entries;
DROP FUNCTION pgmem.count_entries();
DROP TABLE pgmem.memory_counts;
"""


def upgrade() -> None:
    op.execute(_UPGRADE)


def downgrade() -> None:
    op.execute(_DOWNGRADE)
