"""The one schema declaration (SQLAlchemy Core), which alembic compares migrations against.

Every table lives in the ``pgmem`` schema and carries ``namespace`` in every primary key, unique
constraint and foreign key, so the schema can be distributed by namespace on Citus and row-level security
can key on it.
"""

from __future__ import annotations

from pgvector.sqlalchemy import HALFVEC, VECTOR
from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION, JSONB, TSVECTOR, UUID

from pgmem.ops.schema_items import declare_item_tables
from pgmem.ops.schema_logs import declare_log_tables
from pgmem.ops.schema_queues import declare_queue_tables

SCHEMA = "pgmem"

#: Full-text configuration of the words of the ``tsv`` column outside CJK runs, which are cut into
#: characters and bigrams (``pgmem.fts_document`` in ``sql/text_search.sql``; README, "Keyword search").
TEXT_SEARCH_CONFIG = "english"

#: Only this many leading characters of a message are indexed for full-text search (tsvector size limit).
FTS_MAX_CHARS = 200_000

metadata = MetaData(schema=SCHEMA)

memories = Table(
    "memories",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("kind", Text, nullable=False, server_default=text("'memory'")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column(
        "vec_rev",
        BigInteger,
        nullable=False,
        server_default=text("0"),
        comment="high-water mark of pgmem.vector_log for this memory (the FAISS cache's strict mode reads it)",
    ),
    PrimaryKeyConstraint("namespace", "key", name="memories_pkey"),
    comment="A named memory (e.g. one role's memory); holds references to messages.",
)

messages = Table(
    "messages",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("id", Text, nullable=False),
    Column("seq", BigInteger, Identity(always=False), nullable=False),
    Column("content", Text, nullable=False),
    Column("content_hash", LargeBinary, nullable=False, comment="sha256 of the UTF-8 content"),
    Column("instruct_content", JSONB, nullable=True),
    Column("role", Text, nullable=False, server_default=text("'user'")),
    Column("cause_by", Text, nullable=False, server_default=text("''")),
    Column("sent_from", Text, nullable=False, server_default=text("''")),
    Column("send_to", ARRAY(Text), nullable=False, server_default=text("'{<all>}'::text[]")),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("tool_calls", JSONB, nullable=True),
    Column("name", Text, nullable=True),
    Column("tool_call_id", Text, nullable=True),
    Column("message_class", Text, nullable=True, comment="module.ClassName of the caller's message class"),
    Column("tokens", Integer, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column(
        "tsv",
        TSVECTOR,
        Computed(f"pgmem.fts_document(left(content, {FTS_MAX_CHARS}))", persisted=True),
    ),
    PrimaryKeyConstraint("namespace", "id", name="messages_pkey"),
    # Messages looked up one by one (a claim's items): one bucket page, no text comparisons
    # (pre-baseline migration 0015).
    Index("messages_id_hash_idx", "id", postgresql_using="hash"),
    Index("messages_namespace_seq_key", "namespace", "seq", unique=True),
    Index("messages_cause_by_idx", "namespace", "cause_by", "seq"),
    Index("messages_role_idx", "namespace", "role", "seq"),
    Index("messages_sent_from_idx", "namespace", "sent_from", "seq"),
    Index("messages_content_hash_idx", "namespace", "content_hash"),
    Index("messages_send_to_idx", "send_to", postgresql_using="gin"),
    # Keyword search, usable under row-level security: the operator class's pgmem.@@ is leakproof
    # (migration 0027; only where a superuser migrated, else the default operator class).
    Index("messages_tsv_idx", "tsv", postgresql_using="gin", postgresql_ops={"tsv": "pgmem.tsvector_match_ops"}),
    # Metadata filters' equalities, usable under row-level security: the operator class's containment is
    # leakproof (migration 0016; only where a superuser migrated).
    Index(
        "messages_metadata_idx",
        "metadata",
        postgresql_using="gin",
        postgresql_ops={"metadata": "pgmem.jsonb_contains_ops"},
    ),
    # Analytics (pre-baseline migration 0006): time windows of one namespace (pgmem stats --since, the report).
    Index("messages_created_idx", "namespace", "created_at"),
    # The context's pinned part (migration 0024): the few messages whose metadata pins them, for any
    # migrating role, with no GIN pending list to read.
    Index(
        "messages_pinned_idx",
        "namespace",
        postgresql_where=text("""metadata OPERATOR(pgmem.@>) '{"pinned": true}'::jsonb"""),
    ),
    comment="Every message, stored once per namespace; memories refer to it through memory_entries.",
)

memory_entries = Table(
    "memory_entries",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("memory", Text, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("seq", BigInteger, Identity(always=False), nullable=False),
    Column("cause_by", Text, nullable=False, comment="copy of messages.cause_by (immutable) for index scans"),
    Column("added_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    # Near-duplicate merge (migration 0018): per memory, like the entry's position.
    Column(
        "seen_count",
        Integer,
        nullable=False,
        server_default=text("1"),
        comment="how many times the memory was given this fact (near-duplicates merged into it: migration 0018)",
    ),
    Column(
        "last_seen_at",
        DateTime(timezone=True),
        nullable=True,
        comment="when a near-duplicate was last merged into it; NULL: never (read coalesce(last_seen_at, added_at))",
    ),
    Column(
        "merge_within",
        DOUBLE_PRECISION,
        nullable=True,
        comment="a near-duplicate merge the embedder decides when it stores the vector: the distance bound; NULL: none",
    ),
    PrimaryKeyConstraint("namespace", "memory", "message_id", name="memory_entries_pkey"),
    ForeignKeyConstraint(
        ["namespace", "memory"],
        ["pgmem.memories.namespace", "pgmem.memories.key"],
        ondelete="CASCADE",
        name="memory_entries_memory_fkey",
    ),
    ForeignKeyConstraint(
        ["namespace", "message_id"],
        ["pgmem.messages.namespace", "pgmem.messages.id"],
        ondelete="CASCADE",
        name="memory_entries_message_fkey",
    ),
    Index("memory_entries_order_key", "namespace", "memory", "seq", unique=True),
    Index("memory_entries_cause_by_idx", "namespace", "memory", "cause_by", "seq"),
    # Covering: a filtered HNSW search probes it per candidate, index-only (pre-baseline migration 0009).
    Index("memory_entries_message_idx", "namespace", "message_id", postgresql_include=["memory"]),
    # Entries whose near-duplicate merge waits for the embedder (migration 0018): the embedder probes it per
    # stored batch, and it is almost always empty.
    Index(
        "memory_entries_merging_idx",
        "namespace",
        "message_id",
        postgresql_where=text("merge_within IS NOT NULL"),
    ),
    comment="Which messages a memory holds, in the order they were added.",
)

memory_counts = Table(
    "memory_counts",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("memory", Text, nullable=False),
    Column("shard", SmallInteger, nullable=False),
    Column("n", BigInteger, nullable=False),
    PrimaryKeyConstraint("namespace", "memory", "shard", name="memory_counts_pkey"),
    # No foreign key to memories: its key-share lock per write would make the memory's row a shared one.
    comment="How many entries each memory holds: the sum of its rows (one per writer shard; migration 0017).",
)

memory_forks = Table(
    "memory_forks",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("memory", Text, nullable=False, comment="the fork"),
    Column("parent", Text, nullable=False, comment="the memory it was forked from"),
    Column("upto_seq", BigInteger, nullable=False, comment="it inherits the parent's entries with seq <= this"),
    Column("forked_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column(
        "materialized_at",
        DateTime(timezone=True),
        nullable=True,
        comment="when its inherited entries were copied into it (NULL: it still reads them from the parent)",
    ),
    PrimaryKeyConstraint("namespace", "memory", name="memory_forks_pkey"),
    # No foreign key on parent: deleting a parent materialises its forks first (trigger memories_forks_kept).
    ForeignKeyConstraint(
        ["namespace", "memory"],
        ["pgmem.memories.namespace", "pgmem.memories.key"],
        ondelete="CASCADE",
        name="memory_forks_memory_fkey",
    ),
    # A parent's forks that still inherit from it: what every removal of its entries probes (migration 0020).
    Index("memory_forks_parent_idx", "namespace", "parent", postgresql_where=text("materialized_at IS NULL")),
    CheckConstraint("upto_seq >= 0", name="memory_forks_upto_check"),
    comment="Forks of memories (client.fork, migration 0020): a fork reads its parent's entries up to upto_seq "
    "besides its own, until materialised.",
)

memory_marks = Table(
    "memory_marks",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("memory", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("seq", BigInteger, nullable=False, comment="the memory's sequence high-water mark when marked"),
    Column("marked_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("namespace", "memory", "name", name="memory_marks_pkey"),
    ForeignKeyConstraint(
        ["namespace", "memory"],
        ["pgmem.memories.namespace", "pgmem.memories.key"],
        ondelete="CASCADE",
        name="memory_marks_memory_fkey",
    ),
    comment="Named points of memories (client.mark, migration 0020): reads take as_of=<name>.",
)

# The queues' tables (pgmem/ops/schema_queues.py), declared on the one metadata.
queue_items, queue_archive_batches, queue_archive_refs, idempotency_keys, subscriptions = declare_queue_tables(metadata)

embedding_models = Table(
    "embedding_models",
    metadata,
    Column("id", SmallInteger, Identity(always=False), nullable=False),
    Column("name", Text, nullable=False, comment="the provider's model name, e.g. text-embedding-3-small"),
    Column("dimension", Integer, nullable=False),
    Column("kind", Text, nullable=False, comment="vector, or halfvec above 2,000 dimensions (HNSW's limit)"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column(
        "distance",
        Text,
        nullable=False,
        server_default=text("'cosine'"),
        comment="what searches rank by: cosine, l2 or inner_product (the HNSW index's operator class)",
    ),
    PrimaryKeyConstraint("id", name="embedding_models_pkey"),
    # A model is its definition: namespaces registering the same (name, dimension, distance) share the row
    # and its index; another dimension or distance is another model (was unique by name, then by (name,
    # dimension) from migration 0005, with the distance from 0015).
    Index("embedding_models_definition_key", "name", "dimension", "distance", unique=True),
    CheckConstraint("dimension BETWEEN 1 AND 16000", name="embedding_models_dimension_check"),
    CheckConstraint("kind IN ('vector', 'halfvec')", name="embedding_models_kind_check"),
    CheckConstraint("distance IN ('cosine', 'l2', 'inner_product')", name="embedding_models_distance_check"),
    comment="Embedding models in use; each has a partial HNSW index on pgmem.embeddings (embeddings_hnsw_m<id>).",
)

memory_models = Table(
    "memory_models",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("memory", Text, nullable=False),
    Column("model_id", SmallInteger, nullable=False),
    Column("status", Text, nullable=False, comment="active (searched) | building (being back-filled)"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("namespace", "memory", "model_id", name="memory_models_pkey"),
    ForeignKeyConstraint(
        ["namespace", "memory"],
        ["pgmem.memories.namespace", "pgmem.memories.key"],
        ondelete="CASCADE",
        name="memory_models_memory_fkey",
    ),
    ForeignKeyConstraint(["model_id"], ["pgmem.embedding_models.id"], name="memory_models_model_fkey"),
    CheckConstraint("status IN ('active', 'building')", name="memory_models_status_check"),
    comment="Which embedding models a memory's messages are embedded with; new entries are queued for each.",
)

embeddings = Table(
    "embeddings",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("model_id", SmallInteger, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("embedding", VECTOR(), nullable=True, comment="models up to 2,000 dimensions"),
    Column("embedding_half", HALFVEC(), nullable=True, comment="models above 2,000 dimensions"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("namespace", "model_id", "message_id", name="embeddings_pkey"),
    ForeignKeyConstraint(
        ["namespace", "message_id"],
        ["pgmem.messages.namespace", "pgmem.messages.id"],
        ondelete="CASCADE",
        name="embeddings_message_fkey",
    ),
    ForeignKeyConstraint(["model_id"], ["pgmem.embedding_models.id"], name="embeddings_model_fkey"),
    CheckConstraint("(embedding IS NULL) <> (embedding_half IS NULL)", name="embeddings_one_vector_check"),
    comment="One vector per (message, model); a partial expression HNSW index per model.",
)

embedding_outbox = Table(
    "embedding_outbox",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("model_id", SmallInteger, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("enqueued_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("available_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("last_error", Text, nullable=True),
    PrimaryKeyConstraint("namespace", "model_id", "message_id", name="embedding_outbox_pkey"),
    # No foreign key to messages on purpose: a message delete must never wait on an outbox row an
    # embedder has locked (that wait closed a deadlock cycle). Embedders skip and purge rows whose message
    # is gone.
    ForeignKeyConstraint(["model_id"], ["pgmem.embedding_models.id"], name="embedding_outbox_model_fkey"),
    # Claims take batches in this order, reading only available rows (pre-baseline migration 0011).
    Index("embedding_outbox_claim_idx", "namespace", "model_id", "available_at", "message_id"),
    comment="Messages waiting for an embedding, queued in the transaction that stored them (no FK to messages).",
)

vector_log = Table(
    "vector_log",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("memory", Text, nullable=False),
    Column("rev", BigInteger, nullable=False, comment="per memory, gapless, in commit order (memories.vec_rev)"),
    Column("message_id", Text, nullable=False),
    Column("model_id", SmallInteger, nullable=False),
    Column("op", SmallInteger, nullable=False, comment="+1: the vector joined the memory; -1: it left"),
    Column("logged_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("namespace", "memory", "rev", name="vector_log_pkey"),
    Index("vector_log_logged_brin", "logged_at", postgresql_using="brin"),
    comment="Changes to the set of vectors of each memory, written by triggers; FAISS caches replay it.",
)

# -- Issue 5: summaries, BrainMemory, ChatDev-style stores (pre-baseline migration 0005) ------------------------------

summaries = Table(
    "summaries",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("memory", Text, nullable=False),
    Column("id", BigInteger, Identity(always=False), nullable=False),
    Column("level", SmallInteger, nullable=False, comment="1: summarises messages; n > 1: summarises level n-1"),
    Column(
        "first_seq",
        BigInteger,
        nullable=False,
        comment="first memory_entries.seq covered (level >= 2: the first of its child summaries)",
    ),
    Column(
        "last_seq",
        BigInteger,
        nullable=False,
        comment="last memory_entries.seq covered (level >= 2: the last of its child summaries)",
    ),
    Column("content", Text, nullable=False),
    Column("source_chars", BigInteger, nullable=False, comment="characters of the text that was summarised"),
    Column("source_tokens", Integer, nullable=False, comment="tokens of the text that was summarised"),
    Column("summary_tokens", Integer, nullable=False),
    Column("tokenizer", Text, nullable=False, server_default=text("''"), comment="what counted the tokens"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column(
        "stale_at",
        DateTime(timezone=True),
        nullable=True,
        comment="set when a message it covered was forgotten: content emptied, never served, recomputable",
    ),
    PrimaryKeyConstraint("namespace", "memory", "id", name="summaries_pkey"),
    ForeignKeyConstraint(
        ["namespace", "memory"],
        ["pgmem.memories.namespace", "pgmem.memories.key"],
        ondelete="CASCADE",
        name="summaries_memory_fkey",
    ),
    CheckConstraint("level >= 1", name="summaries_level_check"),
    CheckConstraint("first_seq <= last_seq", name="summaries_range_check"),
    # One summary per (level, start): two summarisers racing over the same range cannot both store one.
    Index("summaries_range_key", "namespace", "memory", "level", "first_seq", unique=True),
    Index("summaries_last_seq_idx", "namespace", "memory", "level", "last_seq"),
    comment="Summaries of a memory's messages (level 1) and of summaries (level 2+); the raw messages stay.",
)

brain_memories = Table(
    "brain_memories",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("key", Text, nullable=False, comment="the memory (pgmem.memories.key) holding the history"),
    Column("redis_key", Text, nullable=False, comment="the caller's key (MetaGPT's redis key)"),
    Column("historical_summary", Text, nullable=False, server_default=text("''")),
    Column(
        "summarized_seq",
        BigInteger,
        nullable=False,
        server_default=text("0"),
        comment="history is the memory's entries after this seq (the earlier ones are summarised)",
    ),
    Column("last_history_id", Text, nullable=False, server_default=text("''")),
    Column("last_talk", Text, nullable=True),
    Column("version", BigInteger, nullable=False, server_default=text("0"), comment="bumped by every dumps"),
    Column("expires_at", DateTime(timezone=True), nullable=True, comment="TTL; NULL: never"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("namespace", "key", name="brain_memories_pkey"),
    ForeignKeyConstraint(
        ["namespace", "key"],
        ["pgmem.memories.namespace", "pgmem.memories.key"],
        ondelete="CASCADE",
        name="brain_memories_memory_fkey",
    ),
    Index("brain_memories_expires_idx", "expires_at", postgresql_where=text("expires_at IS NOT NULL")),
    comment="MetaGPT BrainMemory state (in Redis there); history and knowledge are memories of messages.",
)

memory_stores = Table(
    "memory_stores",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("type", Text, nullable=False, comment="simple | file | blackboard | a registered type"),
    Column("config", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("namespace", "name", name="memory_stores_pkey"),
    comment="ChatDev-style memory stores (pgmem.stores); items are messages of the memory store:<name>.",
)

store_files = Table(
    "store_files",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("store", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("sha256", LargeBinary, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("chunk_ids", ARRAY(Text), nullable=False, comment="message ids of the file's chunks, in order"),
    Column("indexed_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("namespace", "store", "path", name="store_files_pkey"),
    ForeignKeyConstraint(
        ["namespace", "store"],
        ["pgmem.memory_stores.namespace", "pgmem.memory_stores.name"],
        ondelete="CASCADE",
        name="store_files_store_fkey",
    ),
    comment="Files indexed by a file store, with the hash they were indexed at (re-indexed when it changes).",
)

# -- analytics and retention (migration 0006): pgmem/ops/schema_logs.py, declared on the one metadata ----------------
retrieval_log, recall_samples, retention_policies, forget_audit = declare_log_tables(metadata)

# -- the key-value item store (migration 0002): pgmem/ops/schema_items.py, declared on the one metadata -------------
items, item_vectors, item_history = declare_item_tables(metadata)

# -- tenant side channels (migration 0005) ---------------------------------------------------------------------

namespace_keys = Table(
    "namespace_keys",
    metadata,
    Column("namespace", Text, nullable=False),
    Column(
        "notify_key",
        UUID(as_uuid=False),
        nullable=False,
        server_default=text("gen_random_uuid()"),
        comment="NOTIFY payloads name a queue or memory by sha256(key || name) (pgmem.notify_tag)",
    ),
    PrimaryKeyConstraint("namespace", name="namespace_keys_pkey"),
    comment="A random key per namespace (row-level security: only the namespace's own clients read it).",
)

# -- the doorbell (migration 0012) ------------------------------------------------------------------------------

doorbell = Table(
    "doorbell",
    metadata,
    Column("namespace", Text, nullable=False),
    Column("channel", Text, nullable=False, comment="pgmem_queue or pgmem_vectors: where it is announced"),
    Column("name", Text, nullable=False, comment="the queue or memory rung for"),
    Column(
        "rev",
        BigInteger,
        nullable=False,
        server_default=text("0"),
        comment="pgmem_vectors: the memory's vector revision (vec_rev) after the write; -1: its model switched",
    ),
    CheckConstraint("channel IN ('pgmem_queue', 'pgmem_vectors')", name="doorbell_channel_check"),
    # Unlogged and without an index: a writer's ring is one heap insert and no WAL, and the one reader
    # empties the table every few milliseconds (it is empty after a crash, when every listener resyncs).
    prefixes=["UNLOGGED"],
    comment="Wake-ups not yet announced: written by writers in their own transaction instead of a NOTIFY, read "
    "and deleted by pgmem.ring_doorbell in the one process elected per database, which notifies.",
)

__all__ = [
    "doorbell",
    "FTS_MAX_CHARS",
    "SCHEMA",
    "embedding_models",
    "embedding_outbox",
    "embeddings",
    "forget_audit",
    "item_history",
    "item_vectors",
    "items",
    "memory_models",
    "namespace_keys",
    "vector_log",
    "brain_memories",
    "memory_stores",
    "store_files",
    "summaries",
    "TEXT_SEARCH_CONFIG",
    "memories",
    "memory_entries",
    "memory_forks",
    "memory_marks",
    "messages",
    "metadata",
    "queue_archive_batches",
    "queue_archive_refs",
    "queue_items",
    "recall_samples",
    "retention_policies",
    "retrieval_log",
    "subscriptions",
]
