"""queues: pgmem.queue_archive_refs, the archive's messages by key

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25

A message leaves the database when nothing refers to it any more, and the queue archive refers to the
messages of acknowledged items. Every removal (a pop, a delete, a trim, a clear, a forget) asked the
archive with ``message_ids @> ARRAY[id]``, which no index served: under row-level security the array
containment is not leakproof, so the GIN index on ``message_ids`` cannot be used before the namespace
policy, and without it the planner's default estimate for a containment made a sequential scan look
cheaper. Either way each removed message read every archived batch of its namespace (3,000 batches: 3,000
rows read for one pop), and the archive grows with every acknowledgement until a retention policy purges
it.

``pgmem.queue_archive_refs`` holds (namespace, message id, batch) for every archived item, written by the
acknowledgement that archives it and removed by whatever removes the batch (or the item, when a forgotten
message is taken out of a batch). The checks probe its primary key. Existing archive rows are copied in.
Forced row-level security and revision 0004's two policies, as every table keyed by namespace; grants
from 0004's default privileges.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SCOPED = "namespace = current_setting('pgmem.namespace', true)"
_ADMIN = "current_setting('pgmem.admin', true) = 'on'"


def upgrade() -> None:
    op.create_table(
        "queue_archive_refs",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("batch", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "message_id", "batch", name="queue_archive_refs_pkey"),
        schema="pgmem",
        comment="Which archive rows (queue_archive_batches.batch) name each message: written with them on "
        "acknowledgement and removed with them, so a message removal asks whether the archive still holds its "
        "message by key instead of reading the namespace's archive.",
    )
    op.execute(
        "INSERT INTO pgmem.queue_archive_refs (namespace, message_id, batch)"
        " SELECT DISTINCT b.namespace, m.message_id, b.batch"
        " FROM pgmem.queue_archive_batches AS b CROSS JOIN LATERAL unnest(b.message_ids) AS m(message_id)"
    )
    op.execute("ALTER TABLE pgmem.queue_archive_refs ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE pgmem.queue_archive_refs FORCE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY pgmem_namespace ON pgmem.queue_archive_refs USING ({_SCOPED}) WITH CHECK ({_SCOPED})")
    op.execute(
        f"CREATE POLICY pgmem_admin ON pgmem.queue_archive_refs TO CURRENT_USER USING ({_ADMIN}) WITH CHECK ({_ADMIN})"
    )


def downgrade() -> None:
    op.drop_table("queue_archive_refs", schema="pgmem")
