"""the context's pinned part found by an index of its own (issue 36, item 1)

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29

``client.context`` finds a namespace's pinned messages by their role (``messages_role_idx``) and by
metadata ``{"pinned": true}``. The second went through the GIN index of metadata filters, which exists
only where a superuser migrated (migration 0016) and reads its whole pending list on every search (0.42 ms
at 20k messages after a bulk load, against 0.002 ms once vacuumed); the context statement runs with a
generic plan, and with no usable index it read every message of the namespace. A partial B-tree index of
the few pinned messages serves it for any migrating role, at the cost of one containment test per message
written.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX messages_pinned_idx ON pgmem.messages (namespace) "
        """WHERE metadata OPERATOR(pgmem.@>) '{"pinned": true}'::jsonb"""
    )


def downgrade() -> None:
    op.execute("DROP INDEX pgmem.messages_pinned_idx")
