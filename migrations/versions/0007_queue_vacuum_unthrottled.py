"""queue items: autovacuum without cost-based throttling

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23

Every claim scans the queue's claim index from its oldest entries, so the dead rows acknowledged items
leave behind are stepped over by every claim until vacuum removes them. Measured with 4 consumers and a
steady producer (benchmarks/queues.py): dead tuples grew to 138k-225k within 25 s while autovacuum's
cost-based delay (2 ms per 200 pages' worth of work) stretched each run, and throughput fell from 8.5k to
5.7k jobs/s before any long transaction held vacuum back. The table's live set is small (the ready items),
so an unthrottled vacuum of it is short; it runs as soon as autovacuum visits the database.
Storage parameters are not compared by autogenerate; pgmem/schema.py declares the same values.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE pgmem.queue_items SET (autovacuum_vacuum_cost_delay = 0)")


def downgrade() -> None:
    op.execute("ALTER TABLE pgmem.queue_items RESET (autovacuum_vacuum_cost_delay)")
