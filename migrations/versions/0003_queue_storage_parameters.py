"""queue storage parameters: room for HOT updates, eager autovacuum

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

A claim updates a queue row in place (attempts, lease). With full pages every such update is a new tuple
version plus a new entry in each index; with free space on the page (fillfactor 70) it is a HOT update
that touches no index. Queue tables churn, so autovacuum runs after 1% of rows changed instead of 20%.
Storage parameters are not compared by autogenerate; pgmem/schema.py declares the same values.
The archive is append-only in acked_at order, so retention finds old rows through a BRIN index, which
costs almost nothing per acknowledged item, instead of a btree.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("queue_archive_acked_idx", table_name="queue_archive", schema="pgmem")
    op.create_index("queue_archive_acked_brin", "queue_archive", ["acked_at"], schema="pgmem", postgresql_using="brin")
    op.execute(
        "ALTER TABLE pgmem.queue_items SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01,"
        " autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02)"
    )


def downgrade() -> None:
    op.drop_index("queue_archive_acked_brin", table_name="queue_archive", schema="pgmem", postgresql_using="brin")
    op.create_index("queue_archive_acked_idx", "queue_archive", ["namespace", "queue", "acked_at"], schema="pgmem")
    op.execute(
        "ALTER TABLE pgmem.queue_items RESET (fillfactor, autovacuum_vacuum_scale_factor,"
        " autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor)"
    )
