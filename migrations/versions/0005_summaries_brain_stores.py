"""summaries, BrainMemory state, ChatDev-style memory stores

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

- ``summaries``: hierarchical summaries of a memory's messages. A level-1 row names the range of
  ``memory_entries.seq`` it covers; a level-n row the range of its level n-1 children. The raw messages
  are never deleted by compression. ``summaries_range_key`` (one summary per level and start) makes two
  summarisers racing over the same range store one summary, not two.
- ``brain_memories``: what MetaGPT's BrainMemory keeps in Redis besides its history (the history and the
  knowledge are ordinary memories of messages, appended to, so concurrent ``dumps`` never lose a talk),
  with a TTL (``expires_at``) honoured on read and purged by ``pgmem purge``.
- ``memory_stores`` and ``store_files``: ChatDev-style stores (pgmem.stores) and the files a file store
  indexed, with their hashes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _memory_fkey(name: str, columns: list[str]) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        columns, ["pgmem.memories.namespace", "pgmem.memories.key"], name=name, ondelete="CASCADE"
    )


def upgrade() -> None:
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
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("level >= 1", name="summaries_level_check"),
        sa.CheckConstraint("first_seq <= last_seq", name="summaries_range_check"),
        _memory_fkey("summaries_memory_fkey", ["namespace", "memory"]),
        sa.PrimaryKeyConstraint("namespace", "memory", "id", name="summaries_pkey"),
        schema="pgmem",
        comment="Summaries of a memory's messages (level 1) and of summaries (level 2+); the raw messages stay.",
    )
    op.create_index(
        "summaries_range_key", "summaries", ["namespace", "memory", "level", "first_seq"], unique=True, schema="pgmem"
    )
    op.create_index("summaries_last_seq_idx", "summaries", ["namespace", "memory", "level", "last_seq"], schema="pgmem")
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
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        _memory_fkey("brain_memories_memory_fkey", ["namespace", "key"]),
        sa.PrimaryKeyConstraint("namespace", "key", name="brain_memories_pkey"),
        schema="pgmem",
        comment="MetaGPT BrainMemory state (in Redis there); history and knowledge are memories of messages.",
    )
    op.create_index(
        "brain_memories_expires_idx",
        "brain_memories",
        ["expires_at"],
        schema="pgmem",
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
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", name="memory_stores_pkey"),
        schema="pgmem",
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
        sa.Column("indexed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["namespace", "store"],
            ["pgmem.memory_stores.namespace", "pgmem.memory_stores.name"],
            name="store_files_store_fkey",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("namespace", "store", "path", name="store_files_pkey"),
        schema="pgmem",
        comment="Files indexed by a file store, with the hash they were indexed at (re-indexed when it changes).",
    )


def downgrade() -> None:
    op.drop_table("store_files", schema="pgmem")
    op.drop_table("memory_stores", schema="pgmem")
    op.drop_table("brain_memories", schema="pgmem")
    op.drop_table("summaries", schema="pgmem")
