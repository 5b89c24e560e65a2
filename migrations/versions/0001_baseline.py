"""baseline: pgmem's schema as of 2026-11-24, the sixteen revisions of the first three days squashed into one

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-24

A snapshot of the head schema, nothing read from anywhere else: the tables of ``pgmem/ops/schema.py`` with
their constraints, indexes, identity sequences, storage parameters and comments, then the functions and
triggers of ``sql/triggers.sql`` and the views of ``sql/triggers.sql`` and ``sql/views.sql``, their text
copied here as of this revision. A migration never imports the runtime's SQL files or modules: the next
edit of one would change what this revision creates. A change to a table goes in a new revision (and in
``schema.py``; the drift test compares them); a change to a function, trigger or view goes in a new
revision that inlines the new text (and in the ``sql/`` file; tests/migrations/test_database_code.py
compares them).

Why the settings are what they are (fillfactor 45, unthrottled autovacuum, toast_tuple_target, the hash
index on messages.id, the covering memory_entries_message_idx, …) is told beside their declarations in
``schema.py`` and ``sql/``; the measurements behind them are in the docstrings of the revisions squashed
here, which git keeps (``git show d80c997:migrations/versions``).

Per-model HNSW indexes on ``pgmem.embeddings`` (``embeddings_hnsw_m<id>``) are created at run time, when a
model is first registered, not here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import HALFVEC, VECTOR
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "pgmem"


def _now() -> sa.TextClause:
    return sa.text("now()")


def _memory_fkey(name: str, columns: list[str]) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        columns, ["pgmem.memories.namespace", "pgmem.memories.key"], name=name, ondelete="CASCADE"
    )


def _message_fkey(name: str, ondelete: str | None = "CASCADE") -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["namespace", "message_id"], ["pgmem.messages.namespace", "pgmem.messages.id"], name=name, ondelete=ondelete
    )


def _model_fkey(name: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["model_id"], ["pgmem.embedding_models.id"], name=name)


def _messages_and_memories() -> None:
    op.create_table(
        "memories",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), server_default=sa.text("'memory'"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column(
            "vec_rev",
            sa.BigInteger(),
            server_default=sa.text("0"),
            nullable=False,
            comment="high-water mark of pgmem.vector_log for this memory (the FAISS cache's strict mode reads it)",
        ),
        sa.PrimaryKeyConstraint("namespace", "key", name="memories_pkey"),
        schema=SCHEMA,
        comment="A named memory (e.g. one role's memory); holds references to messages.",
    )
    op.create_table(
        "messages",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.LargeBinary(), nullable=False, comment="sha256 of the UTF-8 content"),
        sa.Column("instruct_content", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("role", sa.Text(), server_default=sa.text("'user'"), nullable=False),
        sa.Column("cause_by", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("sent_from", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("send_to", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{<all>}'::text[]"), nullable=False),
        sa.Column(
            "metadata", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("tool_calls", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("tool_call_id", sa.Text(), nullable=True),
        sa.Column("message_class", sa.Text(), nullable=True, comment="module.ClassName of the caller's message class"),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column(
            "tsv",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('english'::regconfig, left(content, 200000))", persisted=True),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("namespace", "id", name="messages_pkey"),
        schema=SCHEMA,
        comment="Every message, stored once per namespace; memories refer to it through memory_entries.",
    )
    op.create_index("messages_id_hash_idx", "messages", ["id"], schema=SCHEMA, postgresql_using="hash")
    op.create_index("messages_namespace_seq_key", "messages", ["namespace", "seq"], unique=True, schema=SCHEMA)
    op.create_index("messages_cause_by_idx", "messages", ["namespace", "cause_by", "seq"], schema=SCHEMA)
    op.create_index("messages_role_idx", "messages", ["namespace", "role", "seq"], schema=SCHEMA)
    op.create_index("messages_sent_from_idx", "messages", ["namespace", "sent_from", "seq"], schema=SCHEMA)
    op.create_index("messages_content_hash_idx", "messages", ["namespace", "content_hash"], schema=SCHEMA)
    op.create_index("messages_send_to_idx", "messages", ["send_to"], schema=SCHEMA, postgresql_using="gin")
    op.create_index("messages_tsv_idx", "messages", ["tsv"], schema=SCHEMA, postgresql_using="gin")
    op.create_index("messages_created_idx", "messages", ["namespace", "created_at"], schema=SCHEMA)
    op.create_table(
        "memory_entries",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("memory", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column(
            "cause_by", sa.Text(), nullable=False, comment="copy of messages.cause_by (immutable) for index scans"
        ),
        sa.Column("added_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        _memory_fkey("memory_entries_memory_fkey", ["namespace", "memory"]),
        _message_fkey("memory_entries_message_fkey"),
        sa.PrimaryKeyConstraint("namespace", "memory", "message_id", name="memory_entries_pkey"),
        schema=SCHEMA,
        comment="Which messages a memory holds, in the order they were added.",
    )
    op.create_index(
        "memory_entries_order_key", "memory_entries", ["namespace", "memory", "seq"], unique=True, schema=SCHEMA
    )
    op.create_index(
        "memory_entries_cause_by_idx", "memory_entries", ["namespace", "memory", "cause_by", "seq"], schema=SCHEMA
    )
    op.create_index(
        "memory_entries_message_idx",
        "memory_entries",
        ["namespace", "message_id"],
        schema=SCHEMA,
        postgresql_include=["memory"],
    )


def _queues() -> None:
    op.create_table(
        "queue_items",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column(
            "priority", sa.Integer(), server_default=sa.text("0"), nullable=False, comment="lower is served first"
        ),
        sa.Column("status", sa.Text(), server_default=sa.text("'ready'"), nullable=False, comment="ready | dead"),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column(
            "available_at",
            sa.DateTime(timezone=True),
            server_default=_now(),
            nullable=False,
            comment="claimable from then on: the delay, the retry backoff, or the end of the current lease",
        ),
        sa.Column(
            "attempts", sa.Integer(), server_default=sa.text("0"), nullable=False, comment="claims so far; fences ack"
        ),
        sa.Column("max_attempts", sa.Integer(), server_default=sa.text("5"), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("dedup_key", sa.Text(), nullable=True),
        sa.Column("died_at", sa.DateTime(timezone=True), nullable=True),
        _message_fkey("queue_items_message_fkey", ondelete=None),
        sa.CheckConstraint("status IN ('ready', 'dead')", name="queue_items_status_check"),
        sa.PrimaryKeyConstraint("namespace", "id", name="queue_items_pkey"),
        schema=SCHEMA,
        comment="Live queue items (ready, leased or dead); acknowledged items move to queue_archive.",
        # In the order the squashed revisions left them (pg_dump prints them in stored order).
        postgresql_with={
            "autovacuum_vacuum_scale_factor": "0.01",
            "autovacuum_vacuum_insert_scale_factor": "0.01",
            "autovacuum_analyze_scale_factor": "0.02",
            "autovacuum_vacuum_cost_delay": "0",
            "fillfactor": "45",
        },
    )
    op.create_index(
        "queue_items_claim_idx",
        "queue_items",
        ["namespace", "queue", "priority", "id"],
        schema=SCHEMA,
        postgresql_where=sa.text("status = 'ready'"),
    )
    op.create_index(
        "queue_items_dead_idx",
        "queue_items",
        ["namespace", "queue", "died_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("status = 'dead'"),
    )
    op.create_index(
        "queue_items_dedup_key",
        "queue_items",
        ["namespace", "queue", "dedup_key"],
        unique=True,
        schema=SCHEMA,
        postgresql_where=sa.text("dedup_key IS NOT NULL AND status = 'ready'"),
    )
    op.create_index("queue_items_message_idx", "queue_items", ["namespace", "message_id"], schema=SCHEMA)
    op.create_table(
        "queue_archive_batches",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("batch", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("acked_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("ids", postgresql.ARRAY(sa.BigInteger()), nullable=False, comment="the items' ids"),
        sa.Column("message_ids", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("priorities", postgresql.ARRAY(sa.Integer()), nullable=False),
        sa.Column("enqueued_at", postgresql.ARRAY(sa.DateTime(timezone=True)), nullable=False),
        sa.Column("claimed_at", postgresql.ARRAY(sa.DateTime(timezone=True)), nullable=False),
        sa.Column("attempts", postgresql.ARRAY(sa.Integer()), nullable=False),
        sa.Column("claimed_by", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("dedup_keys", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.CheckConstraint(
            "cardinality(ids) > 0 AND cardinality(message_ids) = cardinality(ids)"
            " AND cardinality(priorities) = cardinality(ids) AND cardinality(enqueued_at) = cardinality(ids)"
            " AND cardinality(claimed_at) = cardinality(ids) AND cardinality(attempts) = cardinality(ids)"
            " AND cardinality(claimed_by) = cardinality(ids) AND cardinality(dedup_keys) = cardinality(ids)",
            name="queue_archive_batches_arrays_check",
        ),
        sa.PrimaryKeyConstraint("namespace", "batch", name="queue_archive_batches_pkey"),
        schema=SCHEMA,
        comment="Acknowledged queue items, one row per acknowledgement and queue (the items' columns as arrays, "
        "in the same order); pgmem.queue_archive unnests it. Kept until the retention policy purges them.",
        postgresql_with={"toast_tuple_target": "8160"},
    )
    op.create_index(
        "queue_archive_batches_acked_brin",
        "queue_archive_batches",
        ["acked_at"],
        schema=SCHEMA,
        postgresql_using="brin",
    )
    op.create_index(
        "queue_archive_batches_message_idx",
        "queue_archive_batches",
        ["message_ids"],
        schema=SCHEMA,
        postgresql_using="gin",
    )
    op.create_table(
        "subscriptions",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("subscriber", sa.Text(), nullable=False),
        sa.Column(
            "addresses",
            postgresql.ARRAY(sa.Text()),
            nullable=False,
            comment="names the subscriber answers to (send_to)",
        ),
        sa.Column(
            "watch",
            postgresql.ARRAY(sa.Text()),
            nullable=True,
            comment="actions (cause_by) it takes broadcasts of; NULL: all",
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "subscriber", name="subscriptions_pkey"),
        schema=SCHEMA,
        comment="Who receives published messages in an inbox queue (inbox:<subscriber>).",
    )


def _embeddings() -> None:
    op.create_table(
        "embedding_models",
        sa.Column("id", sa.SmallInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=False, comment="the provider's model name, e.g. text-embedding-3-small"),
        sa.Column("dimension", sa.Integer(), nullable=False),
        sa.Column(
            "kind", sa.Text(), nullable=False, comment="vector, or halfvec above 2,000 dimensions (HNSW's limit)"
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.CheckConstraint("dimension BETWEEN 1 AND 16000", name="embedding_models_dimension_check"),
        sa.CheckConstraint("kind IN ('vector', 'halfvec')", name="embedding_models_kind_check"),
        sa.PrimaryKeyConstraint("id", name="embedding_models_pkey"),
        schema=SCHEMA,
        comment="Embedding models in use; each has a partial HNSW index on pgmem.embeddings (embeddings_hnsw_m<id>).",
    )
    op.create_index("embedding_models_name_key", "embedding_models", ["name"], unique=True, schema=SCHEMA)
    op.create_table(
        "memory_models",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("memory", sa.Text(), nullable=False),
        sa.Column("model_id", sa.SmallInteger(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False, comment="active (searched) | building (being back-filled)"),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.CheckConstraint("status IN ('active', 'building')", name="memory_models_status_check"),
        _memory_fkey("memory_models_memory_fkey", ["namespace", "memory"]),
        _model_fkey("memory_models_model_fkey"),
        sa.PrimaryKeyConstraint("namespace", "memory", "model_id", name="memory_models_pkey"),
        schema=SCHEMA,
        comment="Which embedding models a memory's messages are embedded with; new entries are queued for each.",
    )
    op.create_table(
        "embeddings",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("model_id", sa.SmallInteger(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("embedding", VECTOR(), nullable=True, comment="models up to 2,000 dimensions"),
        sa.Column("embedding_half", HALFVEC(), nullable=True, comment="models above 2,000 dimensions"),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.CheckConstraint("(embedding IS NULL) <> (embedding_half IS NULL)", name="embeddings_one_vector_check"),
        _message_fkey("embeddings_message_fkey"),
        _model_fkey("embeddings_model_fkey"),
        sa.PrimaryKeyConstraint("namespace", "model_id", "message_id", name="embeddings_pkey"),
        schema=SCHEMA,
        comment="One vector per (message, model); a partial expression HNSW index per model.",
    )
    op.create_table(
        "embedding_outbox",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("model_id", sa.SmallInteger(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("available_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        # No foreign key to messages (see schema.py).
        _model_fkey("embedding_outbox_model_fkey"),
        sa.PrimaryKeyConstraint("namespace", "model_id", "message_id", name="embedding_outbox_pkey"),
        schema=SCHEMA,
        comment="Messages waiting for an embedding, queued in the transaction that stored them (no FK to messages).",
    )
    op.create_index(
        "embedding_outbox_claim_idx",
        "embedding_outbox",
        ["namespace", "model_id", "available_at", "message_id"],
        schema=SCHEMA,
    )
    op.create_table(
        "vector_log",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("memory", sa.Text(), nullable=False),
        sa.Column(
            "rev", sa.BigInteger(), nullable=False, comment="per memory, gapless, in commit order (memories.vec_rev)"
        ),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("model_id", sa.SmallInteger(), nullable=False),
        sa.Column("op", sa.SmallInteger(), nullable=False, comment="+1: the vector joined the memory; -1: it left"),
        sa.Column("logged_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "memory", "rev", name="vector_log_pkey"),
        schema=SCHEMA,
        comment="Changes to the set of vectors of each memory, written by triggers; FAISS caches replay it.",
    )
    op.create_index("vector_log_logged_brin", "vector_log", ["logged_at"], schema=SCHEMA, postgresql_using="brin")


def _summaries_brains_stores() -> None:
    op.create_table(
        "summaries",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("memory", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column(
            "level", sa.SmallInteger(), nullable=False, comment="1: summarises messages; n > 1: summarises level n-1"
        ),
        sa.Column(
            "first_seq",
            sa.BigInteger(),
            nullable=False,
            comment="first memory_entries.seq covered (level >= 2: the first of its child summaries)",
        ),
        sa.Column(
            "last_seq",
            sa.BigInteger(),
            nullable=False,
            comment="last memory_entries.seq covered (level >= 2: the last of its child summaries)",
        ),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column(
            "source_chars", sa.BigInteger(), nullable=False, comment="characters of the text that was summarised"
        ),
        sa.Column("source_tokens", sa.Integer(), nullable=False, comment="tokens of the text that was summarised"),
        sa.Column("summary_tokens", sa.Integer(), nullable=False),
        sa.Column(
            "tokenizer", sa.Text(), server_default=sa.text("''"), nullable=False, comment="what counted the tokens"
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.CheckConstraint("level >= 1", name="summaries_level_check"),
        sa.CheckConstraint("first_seq <= last_seq", name="summaries_range_check"),
        _memory_fkey("summaries_memory_fkey", ["namespace", "memory"]),
        sa.PrimaryKeyConstraint("namespace", "memory", "id", name="summaries_pkey"),
        schema=SCHEMA,
        comment="Summaries of a memory's messages (level 1) and of summaries (level 2+); the raw messages stay.",
    )
    op.create_index(
        "summaries_range_key", "summaries", ["namespace", "memory", "level", "first_seq"], unique=True, schema=SCHEMA
    )
    op.create_index("summaries_last_seq_idx", "summaries", ["namespace", "memory", "level", "last_seq"], schema=SCHEMA)
    op.create_table(
        "brain_memories",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False, comment="the memory (pgmem.memories.key) holding the history"),
        sa.Column("redis_key", sa.Text(), nullable=False, comment="the caller's key (MetaGPT's redis key)"),
        sa.Column("historical_summary", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column(
            "summarized_seq",
            sa.BigInteger(),
            server_default=sa.text("0"),
            nullable=False,
            comment="history is the memory's entries after this seq (the earlier ones are summarised)",
        ),
        sa.Column("last_history_id", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("last_talk", sa.Text(), nullable=True),
        sa.Column(
            "version", sa.BigInteger(), server_default=sa.text("0"), nullable=False, comment="bumped by every dumps"
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True, comment="TTL; NULL: never"),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        _memory_fkey("brain_memories_memory_fkey", ["namespace", "key"]),
        sa.PrimaryKeyConstraint("namespace", "key", name="brain_memories_pkey"),
        schema=SCHEMA,
        comment="MetaGPT BrainMemory state (in Redis there); history and knowledge are memories of messages.",
    )
    op.create_index(
        "brain_memories_expires_idx",
        "brain_memories",
        ["expires_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.create_table(
        "memory_stores",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False, comment="simple | file | blackboard | a registered type"),
        sa.Column(
            "config", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", name="memory_stores_pkey"),
        schema=SCHEMA,
        comment="ChatDev-style memory stores (pgmem.stores); items are messages of the memory store:<name>.",
    )
    op.create_table(
        "store_files",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("store", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.LargeBinary(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column(
            "chunk_ids",
            postgresql.ARRAY(sa.Text()),
            nullable=False,
            comment="message ids of the file's chunks, in order",
        ),
        sa.Column("indexed_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["namespace", "store"],
            ["pgmem.memory_stores.namespace", "pgmem.memory_stores.name"],
            name="store_files_store_fkey",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("namespace", "store", "path", name="store_files_pkey"),
        schema=SCHEMA,
        comment="Files indexed by a file store, with the hash they were indexed at (re-indexed when it changes).",
    )


def _retrieval_log() -> None:
    op.create_table(
        "retrieval_log",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("logged_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False, comment="vector | batch | hybrid | cache: which search answered"),
        sa.Column("memory", sa.Text(), nullable=True, comment="the memory searched (NULL: the whole namespace)"),
        sa.Column("label", sa.Text(), nullable=True, comment="the caller's label, e.g. the prompt or the stage"),
        sa.Column("query", sa.Text(), nullable=True, comment="the query text (NULL for a query vector)"),
        sa.Column("k", sa.Integer(), nullable=False, comment="how many hits were asked for"),
        sa.Column(
            "message_ids", postgresql.ARRAY(sa.Text()), nullable=False, comment="the hits, best first (rank = position)"
        ),
        sa.Column(
            "scores",
            postgresql.ARRAY(postgresql.DOUBLE_PRECISION()),
            nullable=False,
            comment="their scores, in the same order",
        ),
        sa.PrimaryKeyConstraint("namespace", "id", name="retrieval_log_pkey"),
        schema=SCHEMA,
        comment="Searches and what they returned (opt-in: PGMEM_RETRIEVAL_LOG=1); pgmem.retrieval_hits unnests it.",
    )
    op.create_index("retrieval_log_logged_idx", "retrieval_log", ["namespace", "logged_at"], schema=SCHEMA)
    op.create_index("retrieval_log_label_idx", "retrieval_log", ["namespace", "label", "logged_at"], schema=SCHEMA)


# The functions and triggers of sql/triggers.sql as of this revision (the text of a function body is stored
# as written, so it is copied character for character).
_FUNCTIONS_AND_TRIGGERS = r"""
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

CREATE OR REPLACE FUNCTION pgmem.memory_entries_added() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION pgmem.memory_entries_removed() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION pgmem.embeddings_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT me.namespace, me.memory, n.message_id, n.model_id, 1::smallint AS op
          FROM new_rows n
          CROSS JOIN LATERAL (
              SELECT e.namespace, e.memory, e.seq FROM pgmem.memory_entries e
              WHERE e.namespace = n.namespace AND e.message_id = n.message_id
              OFFSET 0
          ) AS me
          JOIN pgmem.memory_models mm
            ON mm.namespace = me.namespace AND mm.memory = me.memory AND mm.model_id = n.model_id
          ORDER BY me.seq) AS x;
    RETURN NULL;
END $$;

CREATE TRIGGER embeddings_added AFTER INSERT ON pgmem.embeddings
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.embeddings_added();

CREATE OR REPLACE FUNCTION pgmem.memory_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A memory created again under the same key starts at revision 0.
    DELETE FROM pgmem.vector_log l USING old_rows o WHERE l.namespace = o.namespace AND l.memory = o.key;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_removed AFTER DELETE ON pgmem.memories
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.memory_removed();

CREATE OR REPLACE FUNCTION pgmem.queue_lease_lost(acknowledged bigint[], held bigint[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'lease lost on item(s) %',
        ARRAY(SELECT h FROM unnest(held) AS h WHERE h <> ALL(coalesce(acknowledged, '{}')) ORDER BY h)
        USING ERRCODE = 'PGM01',
              HINT = 'the statement was rolled back; acknowledge the items on their own';
END
$$;

COMMENT ON FUNCTION pgmem.queue_lease_lost(bigint[], bigint[]) IS
    'Raises SQLSTATE PGM01: a claim(ack=) statement found an acknowledgement that no longer held.';
"""

# The views, in an order that creates each after the views it reads: pgmem.queue_archive (sql/triggers.sql),
# then those of sql/views.sql, in file order, as of this revision.
_VIEWS: tuple[str, ...] = (
    r"""
CREATE OR REPLACE VIEW pgmem.queue_archive AS
SELECT b.namespace, u.id, b.queue, b.message_ids[u.i] AS message_id, b.priorities[u.i] AS priority,
       b.enqueued_at[u.i] AS enqueued_at, b.claimed_at[u.i] AS claimed_at, b.acked_at,
       b.attempts[u.i] AS attempts, b.claimed_by[u.i] AS claimed_by, b.dedup_keys[u.i] AS dedup_key, b.batch
FROM pgmem.queue_archive_batches AS b
CROSS JOIN LATERAL unnest(b.ids) WITH ORDINALITY AS u(id, i);

COMMENT ON VIEW pgmem.queue_archive IS
    'Acknowledged queue items, one row per item (pgmem.queue_archive_batches unnested).'""",
    r"""
CREATE VIEW pgmem.conversation_facts AS
SELECT m.namespace,
       e.memory,
       e.seq,
       m.seq AS message_seq,
       m.id AS message_id,
       m.role,
       m.sent_from AS sender,
       m.send_to AS recipients,
       m.cause_by AS action,
       regexp_replace(m.cause_by, '^.*\.', '') AS action_name,
       m.metadata ->> 'reply_to' AS reply_to,
       m.created_at,
       e.added_at,
       length(m.content) AS characters,
       m.tokens,
       coalesce(m.tokens, ceil(length(m.content) / 4.0)::integer) AS tokens_estimated
FROM pgmem.messages AS m
LEFT JOIN pgmem.memory_entries AS e ON e.namespace = m.namespace AND e.message_id = m.id""",
    r"""
CREATE VIEW pgmem.role_activity AS
SELECT m.namespace,
       coalesce(nullif(m.sent_from, ''), m.role) AS agent,
       date_bin('1 minute', m.created_at, timestamptz '2000-01-01 00:00:00+00') AS minute,
       count(*) AS messages,
       sum(length(m.content)) AS characters,
       sum(m.tokens) AS tokens,
       sum(coalesce(m.tokens, ceil(length(m.content) / 4.0)::integer)) AS tokens_estimated,
       min(m.created_at) AS first_seen,
       max(m.created_at) AS last_seen
FROM pgmem.messages AS m
GROUP BY 1, 2, 3""",
    r"""
CREATE VIEW pgmem.action_activity AS
SELECT m.namespace,
       m.cause_by AS action,
       regexp_replace(m.cause_by, '^.*\.', '') AS action_name,
       date_bin('1 minute', m.created_at, timestamptz '2000-01-01 00:00:00+00') AS minute,
       count(*) AS messages,
       sum(length(m.content)) AS characters,
       sum(m.tokens) AS tokens,
       sum(coalesce(m.tokens, ceil(length(m.content) / 4.0)::integer)) AS tokens_estimated,
       min(m.created_at) AS first_seen,
       max(m.created_at) AS last_seen
FROM pgmem.messages AS m
GROUP BY 1, 2, 3, 4""",
    r"""
CREATE VIEW pgmem.action_flow AS
WITH steps AS (
    SELECT e.namespace, e.memory, e.seq, e.cause_by, m.created_at, m.metadata ->> 'reply_to' AS reply_to,
           lag(e.cause_by) OVER w AS previous_action,
           lag(m.created_at) OVER w AS previous_at
    FROM pgmem.memory_entries AS e
    JOIN pgmem.messages AS m ON m.namespace = e.namespace AND m.id = e.message_id
    WINDOW w AS (PARTITION BY e.namespace, e.memory ORDER BY e.seq)
), edges AS (
    SELECT s.namespace, s.memory, s.seq,
           CASE WHEN s.reply_to IS NULL THEN s.previous_action ELSE src.cause_by END AS from_action,
           s.cause_by AS to_action,
           extract(epoch FROM s.created_at
                   - CASE WHEN s.reply_to IS NULL THEN s.previous_at ELSE src.created_at END) AS delay_s,
           s.created_at
    FROM steps AS s
    LEFT JOIN pgmem.messages AS src ON src.namespace = s.namespace AND src.id = s.reply_to
)
SELECT namespace,
       memory,
       from_action,
       to_action,
       regexp_replace(from_action, '^.*\.', '') AS from_action_name,
       regexp_replace(to_action, '^.*\.', '') AS to_action_name,
       count(*) AS edges,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY delay_s) AS median_delay_s,
       min(delay_s) AS min_delay_s,
       max(delay_s) AS max_delay_s,
       min(seq) AS first_seq,
       min(created_at) AS first_at,
       max(created_at) AS last_at
FROM edges
WHERE from_action IS NOT NULL
GROUP BY namespace, memory, from_action, to_action""",
    r"""
CREATE VIEW pgmem.who_talks_to_whom AS
SELECT m.namespace,
       m.sent_from AS sender,
       r.recipient,
       count(*) AS messages,
       sum(coalesce(m.tokens, ceil(length(m.content) / 4.0)::integer)) AS tokens_estimated,
       min(m.created_at) AS first_at,
       max(m.created_at) AS last_at
FROM pgmem.messages AS m
CROSS JOIN LATERAL unnest(m.send_to) AS r(recipient)
GROUP BY 1, 2, 3""",
    r"""
CREATE VIEW pgmem.queue_health AS
WITH items AS (
    SELECT namespace, queue, status, enqueued_at, available_at, lease_until, attempts,
           NULL::timestamptz AS acked_at
    FROM pgmem.queue_items
    UNION ALL
    SELECT namespace, queue, 'acked', enqueued_at, NULL, NULL, attempts, acked_at
    FROM pgmem.queue_archive
)
SELECT namespace,
       queue,
       count(*) FILTER (WHERE status = 'ready') AS depth,
       count(*) FILTER (WHERE status = 'ready' AND available_at <= now()) AS available,
       count(*) FILTER (WHERE status = 'ready' AND lease_until > now()) AS leased,
       count(*) FILTER (WHERE status = 'ready' AND available_at > now()
                          AND (lease_until IS NULL OR lease_until <= now())) AS delayed,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       count(*) FILTER (WHERE status = 'acked') AS acked,
       extract(epoch FROM now() - min(enqueued_at) FILTER (WHERE status = 'ready')) AS oldest_pending_s,
       coalesce(sum(attempts), 0) AS claims,
       coalesce(sum(greatest(attempts - 1, 0)), 0) AS retries,
       count(*) FILTER (WHERE status = 'acked' AND acked_at > now() - interval '1 minute') AS acked_last_minute,
       round(count(*) FILTER (WHERE status = 'acked' AND acked_at > now() - interval '10 minutes') / 10.0, 2)
           AS acked_per_minute_10m,
       max(acked_at) AS last_acked_at
FROM items
GROUP BY namespace, queue""",
    r"""
CREATE VIEW pgmem.queue_throughput AS
SELECT namespace,
       queue,
       date_bin('1 minute', acked_at, timestamptz '2000-01-01 00:00:00+00') AS minute,
       count(*) AS acked,
       sum(attempts) AS claims,
       avg(extract(epoch FROM claimed_at - enqueued_at)) AS mean_wait_s,
       avg(extract(epoch FROM acked_at - claimed_at)) AS mean_processing_s
FROM pgmem.queue_archive
GROUP BY 1, 2, 3""",
    r"""
CREATE VIEW pgmem.retrieval_hits AS
SELECT l.namespace,
       l.id AS search_id,
       l.logged_at,
       l.kind,
       l.memory,
       l.label,
       l.query,
       l.k,
       h.rank,
       h.message_id,
       h.score,
       m.sent_from AS sender,
       m.cause_by AS action,
       m.created_at AS message_created_at,
       m.content
FROM pgmem.retrieval_log AS l
CROSS JOIN LATERAL unnest(l.message_ids, l.scores) WITH ORDINALITY AS h(message_id, score, rank)
LEFT JOIN pgmem.messages AS m ON m.namespace = l.namespace AND m.id = h.message_id""",
    r"""
CREATE VIEW pgmem.summary_compression AS
SELECT s.namespace,
       s.memory,
       s.level,
       count(*) AS summaries,
       min(s.first_seq) AS first_seq,
       max(s.last_seq) AS last_seq,
       sum(s.source_chars) AS source_chars,
       sum(length(s.content)) AS summary_chars,
       sum(s.source_tokens) AS source_tokens,
       sum(s.summary_tokens) AS summary_tokens,
       round(sum(s.source_chars)::numeric / nullif(sum(length(s.content)), 0), 2) AS char_ratio,
       round(sum(s.source_tokens)::numeric / nullif(sum(s.summary_tokens), 0), 2) AS token_ratio,
       min(s.created_at) AS first_created_at,
       max(s.created_at) AS last_created_at
FROM pgmem.summaries AS s
GROUP BY s.namespace, s.memory, s.level""",
)


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    _messages_and_memories()
    _queues()
    _embeddings()
    _summaries_brains_stores()
    _retrieval_log()
    op.execute(_FUNCTIONS_AND_TRIGGERS)
    for view in _VIEWS:
        op.execute(view)


def downgrade() -> None:
    # Everything upgrade created but the vector extension (other schemas may use it) and pgmem's schema
    # itself, which holds alembic's version table. Dropping a table drops its triggers.
    op.execute(
        "DROP VIEW pgmem.summary_compression, pgmem.retrieval_hits, pgmem.queue_throughput, pgmem.queue_health,"
        " pgmem.who_talks_to_whom, pgmem.action_flow, pgmem.action_activity, pgmem.role_activity,"
        " pgmem.conversation_facts, pgmem.queue_archive"
    )
    op.execute(
        "DROP TABLE pgmem.retrieval_log, pgmem.store_files, pgmem.memory_stores, pgmem.brain_memories,"
        " pgmem.summaries, pgmem.vector_log, pgmem.embedding_outbox, pgmem.embeddings, pgmem.memory_models,"
        " pgmem.embedding_models, pgmem.subscriptions, pgmem.queue_archive_batches, pgmem.queue_items,"
        " pgmem.memory_entries, pgmem.messages, pgmem.memories"
    )
    op.execute(
        "DROP FUNCTION pgmem.queue_lease_lost(bigint[], bigint[]), pgmem.memory_removed(),"
        " pgmem.embeddings_added(), pgmem.memory_entries_removed(), pgmem.memory_entries_added(),"
        " pgmem.log_vector_changes(text[], text[], text[], smallint[], smallint[])"
    )
