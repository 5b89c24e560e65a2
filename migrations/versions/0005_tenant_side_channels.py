"""tenant side channels: per-namespace notification keys, the embedding-model registry keyed by definition

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

NOTIFY payloads named a tenant's queues and memories to every connection that listened
(``pgmem_queue``: ``"<namespace>/<queue>"``, ``pgmem_vectors``: ``["<namespace>", "<memory>", rev]``).
They now carry a tag, ``left(encode(sha256(key || name), 'hex'), 32)`` (``pgmem.notify_tag``), keyed by a
random ``uuid`` per namespace in ``pgmem.namespace_keys`` (row-level security as every namespaced table:
only the namespace's own clients read its key; ``pgmem.notify_key`` creates it on first use, race-safe).
``pgmem_vectors`` payloads are ``["<tag>", rev]``. Processes of an older release listening during the
upgrade stop matching notifications: their waits fall back to polling, their caches to catch-up reads.

``pgmem.embedding_models`` was unique by name: tenant A's 4-dimension ``acme-embed`` made tenant B's
8-dimension one fail. A model is now its definition, unique on ``(name, dimension)`` (the kind follows
from the dimension): the same definition is one row (and one HNSW index) whoever registers it, another
dimension is another model. Downgrade restores the unique name, and fails while two rows share a name.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_RLS = """
ALTER TABLE pgmem.namespace_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.namespace_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY pgmem_namespace ON pgmem.namespace_keys
    USING (namespace = current_setting('pgmem.namespace', true))
    WITH CHECK (namespace = current_setting('pgmem.namespace', true));
CREATE POLICY pgmem_admin ON pgmem.namespace_keys TO CURRENT_USER
    USING (current_setting('pgmem.admin', true) = 'on') WITH CHECK (current_setting('pgmem.admin', true) = 'on');
"""

#: The same, offline: row-level security on the new table only where it is forced on pgmem.messages (0004).
_RLS_IF_FORCED = """
DO $rls$
BEGIN
    IF (SELECT relforcerowsecurity FROM pg_class WHERE oid = 'pgmem.messages'::regclass) THEN
        ALTER TABLE pgmem.namespace_keys ENABLE ROW LEVEL SECURITY;
        ALTER TABLE pgmem.namespace_keys FORCE ROW LEVEL SECURITY;
        CREATE POLICY pgmem_namespace ON pgmem.namespace_keys
            USING (namespace = current_setting('pgmem.namespace', true))
            WITH CHECK (namespace = current_setting('pgmem.namespace', true));
        CREATE POLICY pgmem_admin ON pgmem.namespace_keys TO CURRENT_USER
            USING (current_setting('pgmem.admin', true) = 'on')
            WITH CHECK (current_setting('pgmem.admin', true) = 'on');
    END IF;
END $rls$
"""

# sql/triggers.sql's notify_key, notify_tag and log_vector_changes as of this revision (function bodies are
# stored as written: copied character for character).
_FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION pgmem.notify_key(p_ns text) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    k uuid;
BEGIN
    SELECT notify_key INTO k FROM pgmem.namespace_keys WHERE namespace = p_ns;
    IF k IS NULL THEN
        INSERT INTO pgmem.namespace_keys (namespace) VALUES (p_ns) ON CONFLICT (namespace) DO NOTHING
        RETURNING notify_key INTO k;
        IF k IS NULL THEN
            SELECT notify_key INTO k FROM pgmem.namespace_keys WHERE namespace = p_ns;
        END IF;
    END IF;
    RETURN k;
END $$;

CREATE OR REPLACE FUNCTION pgmem.notify_tag(p_ns text, p_name text) RETURNS text LANGUAGE sql AS $$
SELECT left(encode(sha256(convert_to(pgmem.notify_key(p_ns)::text || p_name, 'UTF8')), 'hex'), 32)
$$;

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

# log_vector_changes as 0001 created it (its notification named the namespace and the memory).
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
    SELECT count(pg_notify('pgmem_vectors', json_build_array(b.namespace, b.key, b.head)::text))
    INTO announced
    FROM bumped b;
END $$;
"""


def upgrade() -> None:
    op.create_table(
        "namespace_keys",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column(
            "notify_key",
            sa.Uuid(as_uuid=False),
            nullable=False,
            server_default=sa.text("gen_random_uuid()"),
            comment="NOTIFY payloads name a queue or memory by sha256(key || name) (pgmem.notify_tag)",
        ),
        sa.PrimaryKeyConstraint("namespace", name="namespace_keys_pkey"),
        schema="pgmem",
        comment="A random key per namespace (row-level security: only the namespace's own clients read it).",
    )
    if context.is_offline_mode():
        # A script printed for a DBA (`pgmem migrate --sql`) cannot ask the database: the server decides
        # the same thing when it runs the script.
        op.execute(_RLS_IF_FORCED)
    else:
        forced = (
            op.get_bind()
            .execute(sa.text("SELECT relforcerowsecurity FROM pg_class WHERE oid = 'pgmem.messages'::regclass"))
            .scalar()
        )
        if forced:
            for statement in _RLS.split(";"):
                if statement.strip():
                    op.execute(statement)
    op.execute(_FUNCTIONS)
    op.create_index(
        "embedding_models_definition_key", "embedding_models", ["name", "dimension"], unique=True, schema="pgmem"
    )
    op.drop_index("embedding_models_name_key", "embedding_models", schema="pgmem")


def downgrade() -> None:
    op.create_index("embedding_models_name_key", "embedding_models", ["name"], unique=True, schema="pgmem")
    op.drop_index("embedding_models_definition_key", "embedding_models", schema="pgmem")
    op.execute(_OLD_LOG_VECTOR_CHANGES)
    op.execute("DROP FUNCTION pgmem.notify_tag(text, text)")
    op.execute("DROP FUNCTION pgmem.notify_key(text)")
    op.drop_table("namespace_keys", schema="pgmem")
