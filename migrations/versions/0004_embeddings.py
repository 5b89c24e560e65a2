"""embeddings: models, vectors, the embedding outbox and the vector log

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22

Vectors of every model live in one table (``vector`` up to 2,000 dimensions, ``halfvec`` above, so HNSW
can index them); each model gets a partial expression HNSW index when it is first registered (at run
time, by pgmem.vectors, named ``embeddings_hnsw_m<id>``), not here.

Triggers keep three things true for every writer, pgmem or plain SQL:
- a message added to a memory that has embedding models is queued in ``embedding_outbox`` in the same
  transaction (writing a message never waits on the embedding provider);
- every change to the set of vectors of a memory is appended to ``vector_log`` (by
  ``pgmem.log_vector_changes``, once per statement) with a per-memory revision drawn under the memory's
  row lock, so revisions are gapless and in commit order, and ``memories.vec_rev`` is the memory's
  high-water mark;
- each logging transaction sends ``NOTIFY pgmem_vectors, '["<namespace>", "<memory>", <rev>]'`` on commit,
  which FAISS caches in other processes listen to.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import HALFVEC, VECTOR

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TRIGGERS = r"""
CREATE FUNCTION pgmem.log_vector_changes(
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

CREATE FUNCTION pgmem.memory_entries_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgmem.memory_models mm
                   WHERE (mm.namespace, mm.memory) IN (SELECT DISTINCT namespace, memory FROM new_rows)) THEN
        RETURN NULL;
    END IF;
    INSERT INTO pgmem.embedding_outbox (namespace, model_id, message_id)
    SELECT n.namespace, mm.model_id, n.message_id
    FROM new_rows n
    JOIN pgmem.memory_models mm ON mm.namespace = n.namespace AND mm.memory = n.memory
    WHERE NOT EXISTS (SELECT 1 FROM pgmem.embeddings e
                      WHERE e.namespace = n.namespace AND e.model_id = mm.model_id AND e.message_id = n.message_id)
    ORDER BY 1, 2, 3
    ON CONFLICT DO NOTHING;
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT n.namespace, n.memory, n.message_id, mm.model_id, 1::smallint AS op
          FROM new_rows n
          JOIN pgmem.memory_models mm ON mm.namespace = n.namespace AND mm.memory = n.memory
          JOIN pgmem.embeddings e
            ON e.namespace = n.namespace AND e.model_id = mm.model_id AND e.message_id = n.message_id
          ORDER BY n.seq) AS x;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_entries_added AFTER INSERT ON pgmem.memory_entries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.memory_entries_added();

CREATE FUNCTION pgmem.memory_entries_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT o.namespace, o.memory, o.message_id, mm.model_id, (-1)::smallint AS op
          FROM old_rows o
          JOIN pgmem.memory_models mm ON mm.namespace = o.namespace AND mm.memory = o.memory
          ORDER BY o.seq) AS x;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_entries_removed AFTER DELETE ON pgmem.memory_entries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.memory_entries_removed();

CREATE FUNCTION pgmem.embeddings_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT me.namespace, me.memory, n.message_id, n.model_id, 1::smallint AS op
          FROM new_rows n
          JOIN pgmem.memory_entries me ON me.namespace = n.namespace AND me.message_id = n.message_id
          JOIN pgmem.memory_models mm
            ON mm.namespace = me.namespace AND mm.memory = me.memory AND mm.model_id = n.model_id
          ORDER BY me.seq) AS x;
    RETURN NULL;
END $$;

CREATE TRIGGER embeddings_added AFTER INSERT ON pgmem.embeddings
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.embeddings_added();

CREATE FUNCTION pgmem.memory_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A memory created again under the same key starts at revision 0.
    DELETE FROM pgmem.vector_log l USING old_rows o WHERE l.namespace = o.namespace AND l.memory = o.key;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_removed AFTER DELETE ON pgmem.memories
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.memory_removed();
"""

DROP_TRIGGERS = """
DROP TRIGGER IF EXISTS memory_removed ON pgmem.memories;
DROP TRIGGER IF EXISTS memory_entries_added ON pgmem.memory_entries;
DROP TRIGGER IF EXISTS memory_entries_removed ON pgmem.memory_entries;
DROP FUNCTION IF EXISTS pgmem.memory_removed();
DROP FUNCTION IF EXISTS pgmem.memory_entries_added();
DROP FUNCTION IF EXISTS pgmem.memory_entries_removed();
DROP FUNCTION IF EXISTS pgmem.embeddings_added() CASCADE;
DROP FUNCTION IF EXISTS pgmem.log_vector_changes(text[], text[], text[], smallint[], smallint[]);
"""


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.add_column(
        "memories",
        sa.Column(
            "vec_rev",
            sa.BigInteger(),
            server_default=sa.text("0"),
            nullable=False,
            comment="high-water mark of pgmem.vector_log for this memory (the FAISS cache's strict mode reads it)",
        ),
        schema="pgmem",
    )
    op.create_table(
        "embedding_models",
        sa.Column("id", sa.SmallInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=False, comment="the provider's model name, e.g. text-embedding-3-small"),
        sa.Column("dimension", sa.Integer(), nullable=False),
        sa.Column(
            "kind", sa.Text(), nullable=False, comment="vector, or halfvec above 2,000 dimensions (HNSW's limit)"
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("dimension BETWEEN 1 AND 16000", name="embedding_models_dimension_check"),
        sa.CheckConstraint("kind IN ('vector', 'halfvec')", name="embedding_models_kind_check"),
        sa.PrimaryKeyConstraint("id", name="embedding_models_pkey"),
        schema="pgmem",
        comment="Embedding models in use; each has a partial HNSW index on pgmem.embeddings (embeddings_hnsw_m<id>).",
    )
    op.create_index("embedding_models_name_key", "embedding_models", ["name"], unique=True, schema="pgmem")
    op.create_table(
        "memory_models",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("memory", sa.Text(), nullable=False),
        sa.Column("model_id", sa.SmallInteger(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False, comment="active (searched) | building (being back-filled)"),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("status IN ('active', 'building')", name="memory_models_status_check"),
        sa.ForeignKeyConstraint(
            ["namespace", "memory"],
            ["pgmem.memories.namespace", "pgmem.memories.key"],
            name="memory_models_memory_fkey",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["model_id"], ["pgmem.embedding_models.id"], name="memory_models_model_fkey"),
        sa.PrimaryKeyConstraint("namespace", "memory", "model_id", name="memory_models_pkey"),
        schema="pgmem",
        comment="Which embedding models a memory's messages are embedded with; new entries are queued for each.",
    )
    op.create_table(
        "embeddings",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("model_id", sa.SmallInteger(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("embedding", VECTOR(), nullable=True, comment="models up to 2,000 dimensions"),
        sa.Column("embedding_half", HALFVEC(), nullable=True, comment="models above 2,000 dimensions"),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("(embedding IS NULL) <> (embedding_half IS NULL)", name="embeddings_one_vector_check"),
        sa.ForeignKeyConstraint(
            ["namespace", "message_id"],
            ["pgmem.messages.namespace", "pgmem.messages.id"],
            name="embeddings_message_fkey",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["model_id"], ["pgmem.embedding_models.id"], name="embeddings_model_fkey"),
        sa.PrimaryKeyConstraint("namespace", "model_id", "message_id", name="embeddings_pkey"),
        schema="pgmem",
        comment="One vector per (message, model); a partial expression HNSW index per model.",
    )
    op.create_table(
        "embedding_outbox",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("model_id", sa.SmallInteger(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("available_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["model_id"], ["pgmem.embedding_models.id"], name="embedding_outbox_model_fkey"),
        sa.PrimaryKeyConstraint("namespace", "model_id", "message_id", name="embedding_outbox_pkey"),
        schema="pgmem",
        comment="Messages waiting for an embedding, queued in the transaction that stored them (no FK to messages).",
    )
    op.create_index("embedding_outbox_ready_idx", "embedding_outbox", ["model_id", "available_at"], schema="pgmem")
    op.create_table(
        "vector_log",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("memory", sa.Text(), nullable=False),
        sa.Column(
            "rev",
            sa.BigInteger(),
            nullable=False,
            comment="per memory, gapless, in commit order (memories.vec_rev)",
        ),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("model_id", sa.SmallInteger(), nullable=False),
        sa.Column("op", sa.SmallInteger(), nullable=False, comment="+1: the vector joined the memory; -1: it left"),
        sa.Column("logged_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "memory", "rev", name="vector_log_pkey"),
        schema="pgmem",
        comment="Changes to the set of vectors of each memory, written by triggers; FAISS caches replay it.",
    )
    op.create_index("vector_log_logged_brin", "vector_log", ["logged_at"], schema="pgmem", postgresql_using="brin")
    op.execute(TRIGGERS)


def downgrade() -> None:
    op.execute(DROP_TRIGGERS)
    op.drop_table("vector_log", schema="pgmem")
    op.drop_table("embedding_outbox", schema="pgmem")
    op.drop_table("embeddings", schema="pgmem")
    op.drop_table("memory_models", schema="pgmem")
    op.drop_table("embedding_models", schema="pgmem")
    op.drop_column("memories", "vec_rev", schema="pgmem")
