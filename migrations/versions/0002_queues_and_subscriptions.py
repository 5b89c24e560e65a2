"""queues and subscriptions

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "queue_archive",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acked_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        sa.Column("dedup_key", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("namespace", "id", name="queue_archive_pkey"),
        schema="pgmem",
        comment="Acknowledged queue items, kept for analytics until the retention policy purges them.",
    )
    op.create_index(
        "queue_archive_acked_idx", "queue_archive", ["namespace", "queue", "acked_at"], unique=False, schema="pgmem"
    )
    op.create_index(
        "queue_archive_message_idx", "queue_archive", ["namespace", "message_id"], unique=False, schema="pgmem"
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
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "subscriber", name="subscriptions_pkey"),
        schema="pgmem",
        comment="Who receives published messages in an inbox queue (inbox:<subscriber>).",
    )
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
        sa.Column("enqueued_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column(
            "available_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
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
        sa.ForeignKeyConstraint(
            ["namespace", "message_id"],
            ["pgmem.messages.namespace", "pgmem.messages.id"],
            name="queue_items_message_fkey",
        ),
        sa.PrimaryKeyConstraint("namespace", "id", name="queue_items_pkey"),
        schema="pgmem",
        comment="Live queue items (ready, leased or dead); acknowledged items move to queue_archive.",
    )
    op.create_index(
        "queue_items_claim_idx",
        "queue_items",
        ["namespace", "queue", "priority", "id"],
        unique=False,
        schema="pgmem",
        postgresql_where=sa.text("status = 'ready'"),
    )
    op.create_index(
        "queue_items_dead_idx",
        "queue_items",
        ["namespace", "queue", "died_at"],
        unique=False,
        schema="pgmem",
        postgresql_where=sa.text("status = 'dead'"),
    )
    op.create_index(
        "queue_items_dedup_key",
        "queue_items",
        ["namespace", "queue", "dedup_key"],
        unique=True,
        schema="pgmem",
        postgresql_where=sa.text("dedup_key IS NOT NULL AND status = 'ready'"),
    )
    op.create_index("queue_items_message_idx", "queue_items", ["namespace", "message_id"], unique=False, schema="pgmem")


def downgrade() -> None:
    op.drop_index("queue_items_message_idx", table_name="queue_items", schema="pgmem")
    op.drop_index(
        "queue_items_dedup_key",
        table_name="queue_items",
        schema="pgmem",
        postgresql_where=sa.text("dedup_key IS NOT NULL AND status = 'ready'"),
    )
    op.drop_index(
        "queue_items_dead_idx", table_name="queue_items", schema="pgmem", postgresql_where=sa.text("status = 'dead'")
    )
    op.drop_index(
        "queue_items_claim_idx", table_name="queue_items", schema="pgmem", postgresql_where=sa.text("status = 'ready'")
    )
    op.drop_table("queue_items", schema="pgmem")
    op.drop_table("subscriptions", schema="pgmem")
    op.drop_index("queue_archive_message_idx", table_name="queue_archive", schema="pgmem")
    op.drop_index("queue_archive_acked_idx", table_name="queue_archive", schema="pgmem")
    op.drop_table("queue_archive", schema="pgmem")
