"""embedding outbox: claim a batch by an index in claim order, not by sorting the whole backlog

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23

An embedder claimed its next batch by joining every queued message of the model to its message and
sorting them all (ORDER BY enqueued_at, message_id; no index had that order): each batch cost O(backlog),
so a backfill of n messages cost O(n^2), and while the provider was down every write's background run
read the whole backlog to find nothing available. Batches are now claimed in (available_at, message_id)
order from an index whose range stops at now(): a batch reads its own rows, and rows waiting out a
retry backoff are never read. Fresh rows have available_at = the time they were queued, so they are
still embedded oldest first; retried rows go after them. The index replaces embedding_outbox_ready_idx
(model_id, available_at), which led with the model rather than the namespace.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "embedding_outbox_claim_idx",
        "embedding_outbox",
        ["namespace", "model_id", "available_at", "message_id"],
        schema="pgmem",
    )
    op.drop_index("embedding_outbox_ready_idx", "embedding_outbox", schema="pgmem")


def downgrade() -> None:
    op.create_index("embedding_outbox_ready_idx", "embedding_outbox", ["model_id", "available_at"], schema="pgmem")
    op.drop_index("embedding_outbox_claim_idx", "embedding_outbox", schema="pgmem")
