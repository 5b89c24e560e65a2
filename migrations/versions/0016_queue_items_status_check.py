"""queue items: status is 'ready' or 'dead', checked

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24

Clearing a queue now finds its items on the two partial indexes (status = 'ready', status = 'dead')
instead of reading the whole table, which is complete only if no item has another status. pgmem never
writes another; the constraint makes that a rule of the table.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_check_constraint("queue_items_status_check", "queue_items", "status IN ('ready', 'dead')", schema="pgmem")


def downgrade() -> None:
    op.drop_constraint("queue_items_status_check", "queue_items", schema="pgmem", type_="check")
