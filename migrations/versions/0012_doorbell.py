"""the doorbell: writers ring a table instead of sending NOTIFY; one elected process announces

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28

A transaction that sends NOTIFY takes a cluster-wide lock at commit (PreCommit_Notify) and holds it
through its WAL flush, so notifying commits never share a flush and wait in line for each other: with a
``pg_notify`` in each, 8 processes committing single-row inserts on 2 cores managed 5.7k tx/s against 13.8k
without it, 86% of the busy backends waiting on ``Lock``/``object``. Every push, publish, stored vector and
model switch notified.

``pgmem.doorbell`` (UNLOGGED, no index: a ring is one heap insert and no WAL) takes a row per queue or
memory rung, written by the writer in its own transaction. ``pgmem.ring_doorbell(wait_ms, beat)``, called in
a loop by the one process per database that holds the doorbell's advisory lock (``pgmem.doorbell``), waits
for committed rows, deletes them and sends the notifications, coalesced per queue or memory, in its own
transaction: only that transaction takes the lock, and with nothing logged it commits without a flush.
``pgmem.log_vector_changes`` rings instead of notifying; the queue statements and the model switch ring in
their own CTEs (sql/queues.sql, sql/vectors.sql). Forced row-level security and revision 0004's two
policies, as every table keyed by namespace; ``ring_doorbell`` runs as its owner with ``pgmem.admin`` on
(the owner's policy), so it reads every namespace's rings, and sends nothing but tags. The application
role may insert rings and read its own, not update, lock or delete them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SCOPED = "namespace = current_setting('pgmem.namespace', true)"
_ADMIN = "current_setting('pgmem.admin', true) = 'on'"

# sql/triggers.sql's ring_doorbell and log_vector_changes as of this revision (function bodies are stored as
# written: copied character for character). ring_doorbell is 0021's since then: it set pgmem.admin with a
# SET clause, which only a superuser may declare on PostgreSQL 15+, so this migration failed for an owner
# that is not one (a managed service's); databases that ran it before get 0021's from 0021.
_RING_DOORBELL = r"""
CREATE OR REPLACE FUNCTION pgmem.ring_doorbell(p_wait_ms integer, p_beat boolean) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- At most a second: the call's snapshot holds back vacuum while it waits.
    deadline timestamptz := clock_timestamp() + least(greatest(p_wait_ms, 0), 1000) * interval '1 millisecond';
    sent integer;
    admin_was text := current_setting('pgmem.admin', true);
BEGIN
    PERFORM set_config('pgmem.admin', 'on', true);
    -- Rows another transaction holds locked (a ring of its own, not yet committed) are passed by, never
    -- waited for: one open transaction must not stop every tenant's wake-ups. They stay for a later round.
    WHILE NOT EXISTS (SELECT 1 FROM pgmem.doorbell FOR UPDATE SKIP LOCKED) AND clock_timestamp() < deadline LOOP
        -- A latch wait of 1 ms, the shortest there is: pg_sleep rounds the time left up to whole
        -- milliseconds, and asked for 0.001 s it slept 2 ms (2,056 us per call, 0.0005 s: 1,090 us).
        PERFORM pg_sleep(0.0005);
    END LOOP;
    WITH rung AS (
        DELETE FROM pgmem.doorbell
        WHERE ctid = ANY (ARRAY(SELECT ctid FROM pgmem.doorbell FOR UPDATE SKIP LOCKED))
        RETURNING namespace, channel, name, rev
    ), merged AS (
        SELECT channel, pgmem.notify_tag(namespace, name) AS tag, max(rev) AS head, min(rev) AS low
        FROM rung GROUP BY namespace, channel, name
    )
    SELECT count(*) INTO sent FROM (
        SELECT pg_notify(channel, tag) FROM merged WHERE channel = 'pgmem_queue'
        UNION ALL
        SELECT pg_notify(channel, json_build_array(tag, -1)::text) FROM merged
        WHERE channel = 'pgmem_vectors' AND low < 0
        UNION ALL
        SELECT pg_notify(channel, json_build_array(tag, head)::text) FROM merged
        WHERE channel = 'pgmem_vectors' AND head >= 0
    ) AS notified;
    IF p_beat THEN
        PERFORM pg_notify('pgmem_vectors', 'beat');
    END IF;
    PERFORM set_config('pgmem.admin', coalesce(admin_was, ''), true);
    RETURN sent;
END $$;
"""

_LOG_VECTOR_CHANGES = r"""
CREATE OR REPLACE FUNCTION pgmem.log_vector_changes(
    p_ns text[], p_memory text[], p_message text[], p_model smallint[], p_op smallint[]
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_ns IS NULL OR cardinality(p_ns) = 0 THEN
        RETURN;
    END IF;
    -- One row lock per memory, in key order (no deadlock between two loggers), held to commit: the
    -- revisions of a memory follow commit order. NO KEY UPDATE (what the vec_rev update takes anyway), not
    -- UPDATE: it does not conflict with the key-share locks of foreign-key checks, so a message being
    -- added to the memory never waits for a vector being logged, nor the other way round.
    PERFORM 1 FROM pgmem.memories m
    WHERE (m.namespace, m.key) IN (SELECT DISTINCT c.ns, c.memory FROM unnest(p_ns, p_memory) AS c(ns, memory))
    ORDER BY m.namespace, m.key
    FOR NO KEY UPDATE;
    WITH changes AS (
        SELECT c.ns, c.memory, c.message_id, c.model_id, c.op,
               row_number() OVER (PARTITION BY c.ns, c.memory ORDER BY c.ord) AS n
        FROM unnest(p_ns, p_memory, p_message, p_model, p_op) WITH ORDINALITY
             AS c(ns, memory, message_id, model_id, op, ord)
    ), counts AS (
        SELECT ns, memory, count(*) AS n FROM changes GROUP BY ns, memory
    ), bumped AS (
        UPDATE pgmem.memories m SET vec_rev = m.vec_rev + counts.n
        FROM counts
        WHERE m.namespace = counts.ns AND m.key = counts.memory
        RETURNING m.namespace, m.key, m.vec_rev - counts.n AS base, m.vec_rev AS head
    ), logged AS (
        INSERT INTO pgmem.vector_log (namespace, memory, rev, message_id, model_id, op)
        SELECT c.ns, c.memory, b.base + c.n, c.message_id, c.model_id, c.op
        FROM changes c JOIN bumped b ON b.namespace = c.ns AND b.key = c.memory
    )
    INSERT INTO pgmem.doorbell (namespace, channel, name, rev)
    SELECT b.namespace, 'pgmem_vectors', b.key, b.head FROM bumped b;
END $$;
"""

# log_vector_changes as 0005 left it (it notified in the writer's transaction).
_OLD_LOG_VECTOR_CHANGES = r"""
CREATE OR REPLACE FUNCTION pgmem.log_vector_changes(
    p_ns text[], p_memory text[], p_message text[], p_model smallint[], p_op smallint[]
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    announced bigint;
BEGIN
    IF p_ns IS NULL OR cardinality(p_ns) = 0 THEN
        RETURN;
    END IF;
    -- One row lock per memory, in key order (no deadlock between two loggers), held to commit: the
    -- revisions of a memory follow commit order. NO KEY UPDATE (what the vec_rev update takes anyway), not
    -- UPDATE: it does not conflict with the key-share locks of foreign-key checks, so a message being
    -- added to the memory never waits for a vector being logged, nor the other way round.
    PERFORM 1 FROM pgmem.memories m
    WHERE (m.namespace, m.key) IN (SELECT DISTINCT c.ns, c.memory FROM unnest(p_ns, p_memory) AS c(ns, memory))
    ORDER BY m.namespace, m.key
    FOR NO KEY UPDATE;
    WITH changes AS (
        SELECT c.ns, c.memory, c.message_id, c.model_id, c.op,
               row_number() OVER (PARTITION BY c.ns, c.memory ORDER BY c.ord) AS n
        FROM unnest(p_ns, p_memory, p_message, p_model, p_op) WITH ORDINALITY
             AS c(ns, memory, message_id, model_id, op, ord)
    ), counts AS (
        SELECT ns, memory, count(*) AS n FROM changes GROUP BY ns, memory
    ), bumped AS (
        UPDATE pgmem.memories m SET vec_rev = m.vec_rev + counts.n
        FROM counts
        WHERE m.namespace = counts.ns AND m.key = counts.memory
        RETURNING m.namespace, m.key, m.vec_rev - counts.n AS base, m.vec_rev AS head
    ), logged AS (
        INSERT INTO pgmem.vector_log (namespace, memory, rev, message_id, model_id, op)
        SELECT c.ns, c.memory, b.base + c.n, c.message_id, c.model_id, c.op
        FROM changes c JOIN bumped b ON b.namespace = c.ns AND b.key = c.memory
    )
    SELECT count(pg_notify('pgmem_vectors', json_build_array(pgmem.notify_tag(b.namespace, b.key), b.head)::text))
    INTO announced
    FROM bumped b;
END $$;
"""


def upgrade() -> None:
    op.create_table(
        "doorbell",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False, comment="pgmem_queue or pgmem_vectors: where it is announced"),
        sa.Column("name", sa.Text(), nullable=False, comment="the queue or memory rung for"),
        sa.Column(
            "rev",
            sa.BigInteger(),
            nullable=False,
            server_default=sa.text("0"),
            comment="pgmem_vectors: the memory's vector revision (vec_rev) after the write; -1: its model switched",
        ),
        sa.CheckConstraint("channel IN ('pgmem_queue', 'pgmem_vectors')", name="doorbell_channel_check"),
        schema="pgmem",
        prefixes=["UNLOGGED"],
        comment="Wake-ups not yet announced: written by writers in their own transaction instead of a NOTIFY, read "
        "and deleted by pgmem.ring_doorbell in the one process elected per database, which notifies.",
    )
    op.execute("ALTER TABLE pgmem.doorbell ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE pgmem.doorbell FORCE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY pgmem_namespace ON pgmem.doorbell USING ({_SCOPED}) WITH CHECK ({_SCOPED})")
    op.execute(f"CREATE POLICY pgmem_admin ON pgmem.doorbell TO CURRENT_USER USING ({_ADMIN}) WITH CHECK ({_ADMIN})")
    # Writers only insert rings; only ring_doorbell (as its owner) deletes them. Without UPDATE the
    # application role cannot lock rings either (SELECT ... FOR UPDATE needs it).
    op.execute(
        "DO $$ BEGIN IF to_regrole('pgmem_app') IS NOT NULL THEN"
        " REVOKE UPDATE, DELETE ON pgmem.doorbell FROM pgmem_app; END IF; END $$"
    )
    op.execute(_RING_DOORBELL)
    op.execute(_LOG_VECTOR_CHANGES)


def downgrade() -> None:
    op.execute(_OLD_LOG_VECTOR_CHANGES)
    op.execute("DROP FUNCTION pgmem.ring_doorbell(integer, boolean)")
    op.drop_table("doorbell", schema="pgmem")
