"""messages: a hash index on id, for looking messages up one by one

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24

A claim returns each item with its message, found by (namespace, message_id) in messages_pkey: one
B-tree descent per item, comparing text keys on every level, at a random place in the index (ids are
random hex). At batch 50 these lookups were 21% of a consumer backend's CPU (perf, one consumer). A hash
index on id finds the row from one bucket page, comparing 32-bit hashes: the backend's CPU per claim of 50
went from 915 to 801 us (median of 4 sittings, one consumer), and 8 consumers claiming 50 at a time went
from 0.83 to 0.92 of the raw SKIP LOCKED loop. The planner takes it wherever a message is looked up by
id. It costs one more index insert per message (pushing 50,000 messages: no difference beyond noise)
and 6.5 MB per 200,000 messages (messages_pkey: 15 MB). Built without CONCURRENTLY, like every index
here: writes to messages wait for the build, 0.2 s per 200,000 messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("messages_id_hash_idx", "messages", ["id"], schema="pgmem", postgresql_using="hash")


def downgrade() -> None:
    op.drop_index("messages_id_hash_idx", "messages", schema="pgmem")
