"""messages and memories

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), server_default=sa.text("'memory'"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "key", name="memories_pkey"),
        schema="pgmem",
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
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column(
            "tsv",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('english'::regconfig, left(content, 200000))", persisted=True),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("namespace", "id", name="messages_pkey"),
        schema="pgmem",
        comment="Every message, stored once per namespace; memories refer to it through memory_entries.",
    )
    op.create_index("messages_cause_by_idx", "messages", ["namespace", "cause_by", "seq"], unique=False, schema="pgmem")
    op.create_index(
        "messages_content_hash_idx", "messages", ["namespace", "content_hash"], unique=False, schema="pgmem"
    )
    op.create_index("messages_namespace_seq_key", "messages", ["namespace", "seq"], unique=True, schema="pgmem")
    op.create_index("messages_role_idx", "messages", ["namespace", "role", "seq"], unique=False, schema="pgmem")
    op.create_index(
        "messages_send_to_idx", "messages", ["send_to"], unique=False, schema="pgmem", postgresql_using="gin"
    )
    op.create_index(
        "messages_sent_from_idx", "messages", ["namespace", "sent_from", "seq"], unique=False, schema="pgmem"
    )
    op.create_index("messages_tsv_idx", "messages", ["tsv"], unique=False, schema="pgmem", postgresql_using="gin")
    op.create_table(
        "memory_entries",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("memory", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column(
            "cause_by", sa.Text(), nullable=False, comment="copy of messages.cause_by (immutable) for index scans"
        ),
        sa.Column("added_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["namespace", "memory"],
            ["pgmem.memories.namespace", "pgmem.memories.key"],
            name="memory_entries_memory_fkey",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["namespace", "message_id"],
            ["pgmem.messages.namespace", "pgmem.messages.id"],
            name="memory_entries_message_fkey",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("namespace", "memory", "message_id", name="memory_entries_pkey"),
        schema="pgmem",
        comment="Which messages a memory holds, in the order they were added.",
    )
    op.create_index(
        "memory_entries_cause_by_idx",
        "memory_entries",
        ["namespace", "memory", "cause_by", "seq"],
        unique=False,
        schema="pgmem",
    )
    op.create_index(
        "memory_entries_message_idx", "memory_entries", ["namespace", "message_id"], unique=False, schema="pgmem"
    )
    op.create_index(
        "memory_entries_order_key", "memory_entries", ["namespace", "memory", "seq"], unique=True, schema="pgmem"
    )


def downgrade() -> None:
    op.drop_index("memory_entries_order_key", table_name="memory_entries", schema="pgmem")
    op.drop_index("memory_entries_message_idx", table_name="memory_entries", schema="pgmem")
    op.drop_index("memory_entries_cause_by_idx", table_name="memory_entries", schema="pgmem")
    op.drop_table("memory_entries", schema="pgmem")
    op.drop_index("messages_tsv_idx", table_name="messages", schema="pgmem", postgresql_using="gin")
    op.drop_index("messages_sent_from_idx", table_name="messages", schema="pgmem")
    op.drop_index("messages_send_to_idx", table_name="messages", schema="pgmem", postgresql_using="gin")
    op.drop_index("messages_role_idx", table_name="messages", schema="pgmem")
    op.drop_index("messages_namespace_seq_key", table_name="messages", schema="pgmem")
    op.drop_index("messages_content_hash_idx", table_name="messages", schema="pgmem")
    op.drop_index("messages_cause_by_idx", table_name="messages", schema="pgmem")
    op.drop_table("messages", schema="pgmem")
    op.drop_table("memories", schema="pgmem")
