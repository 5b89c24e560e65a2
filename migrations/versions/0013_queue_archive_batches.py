"""queue archive: one row per acknowledgement statement and queue, with the items in arrays

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-23

Every acknowledged item used to be a row of pgmem.queue_archive: a heap tuple and three index entries
(primary key, BRIN on acked_at, message index) per item. At batch 50 that insert was the largest part
of a consumer's claim(ack=) statement: 0.31 of 1.0 ms in EXPLAIN ANALYZE. An acknowledgement statement
now stores one row per queue in pgmem.queue_archive_batches, the items' columns as arrays in the same
order (like pgmem.retrieval_log), with a GIN index on the message ids for the checks that keep archived
messages from being deleted. pgmem.queue_archive becomes a view with the old columns (plus the batch),
one row per item, so SQL written against it, and the queue views, still read the same rows.

Existing rows are grouped into batches by (namespace, queue, acked_at): the rows one statement archived.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from pgmem.planning import statements as queries

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The views of sql/views.sql that read pgmem.queue_archive: dropped and created again around the change.
_DEPENDENT_VIEWS = ("queue_health", "queue_throughput")
# One row per item: the ids unnested (one set-returning call per batch, which the planner sizes from the
# column's statistics), the other arrays read by position. Unnesting all eight arrays in parallel made
# eight calls per batch (a scan of 100k one-item batches: 327 ms, against 96 ms by position), and
# generate_subscripts is costed at 1,000 rows per call, which sent small queries to parallel plans.
_ARCHIVE_VIEW = """
CREATE VIEW pgmem.queue_archive AS
SELECT b.namespace, u.id, b.queue, b.message_ids[u.i] AS message_id, b.priorities[u.i] AS priority,
       b.enqueued_at[u.i] AS enqueued_at, b.claimed_at[u.i] AS claimed_at, b.acked_at,
       b.attempts[u.i] AS attempts, b.claimed_by[u.i] AS claimed_by, b.dedup_keys[u.i] AS dedup_key, b.batch
FROM pgmem.queue_archive_batches AS b
CROSS JOIN LATERAL unnest(b.ids) WITH ORDINALITY AS u(id, i)"""


def _drop_dependent_views() -> None:
    for name in _DEPENDENT_VIEWS:
        op.execute(f"DROP VIEW IF EXISTS pgmem.{name}")


def _create_dependent_views() -> None:
    views = queries.load("views")
    for name in _DEPENDENT_VIEWS:
        op.execute(views[name])


def upgrade() -> None:
    op.create_table(
        "queue_archive_batches",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("batch", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("acked_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
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
        schema="pgmem",
        comment="Acknowledged queue items, one row per acknowledgement and queue (the items' columns as arrays, "
        "in the same order); pgmem.queue_archive unnests it. Kept until the retention policy purges them.",
    )
    op.create_index(
        "queue_archive_batches_acked_brin",
        "queue_archive_batches",
        ["acked_at"],
        schema="pgmem",
        postgresql_using="brin",
    )
    op.create_index(
        "queue_archive_batches_message_idx",
        "queue_archive_batches",
        ["message_ids"],
        schema="pgmem",
        postgresql_using="gin",
    )
    op.execute(
        """
INSERT INTO pgmem.queue_archive_batches (namespace, queue, acked_at, ids, message_ids, priorities, enqueued_at,
                                         claimed_at, attempts, claimed_by, dedup_keys)
SELECT namespace, queue, acked_at, array_agg(id ORDER BY id), array_agg(message_id ORDER BY id),
       array_agg(priority ORDER BY id), array_agg(enqueued_at ORDER BY id), array_agg(claimed_at ORDER BY id),
       array_agg(attempts ORDER BY id), array_agg(claimed_by ORDER BY id), array_agg(dedup_key ORDER BY id)
FROM pgmem.queue_archive
GROUP BY namespace, queue, acked_at
ORDER BY acked_at"""
    )
    _drop_dependent_views()
    op.drop_table("queue_archive", schema="pgmem")
    op.execute(_ARCHIVE_VIEW)
    op.execute(
        "COMMENT ON VIEW pgmem.queue_archive IS 'Acknowledged queue items, one row per item "
        "(pgmem.queue_archive_batches unnested).'"
    )
    _create_dependent_views()


def downgrade() -> None:
    _drop_dependent_views()
    op.execute("DROP VIEW pgmem.queue_archive")
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
    op.create_index("queue_archive_acked_brin", "queue_archive", ["acked_at"], schema="pgmem", postgresql_using="brin")
    op.create_index("queue_archive_message_idx", "queue_archive", ["namespace", "message_id"], schema="pgmem")
    op.execute(
        """
INSERT INTO pgmem.queue_archive (namespace, id, queue, message_id, priority, enqueued_at, claimed_at, acked_at,
                                 attempts, claimed_by, dedup_key)
SELECT b.namespace, i.id, b.queue, i.message_id, i.priority, i.enqueued_at, i.claimed_at, b.acked_at, i.attempts,
       i.claimed_by, i.dedup_key
FROM pgmem.queue_archive_batches AS b
CROSS JOIN LATERAL unnest(b.ids, b.message_ids, b.priorities, b.enqueued_at, b.claimed_at, b.attempts,
                          b.claimed_by, b.dedup_keys)
    AS i(id, message_id, priority, enqueued_at, claimed_at, attempts, claimed_by, dedup_key)"""
    )
    op.drop_table("queue_archive_batches", schema="pgmem")
    _create_dependent_views()
