"""retention policies, forgetting with an audit trail, stale summaries

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

(Being written: this revision is empty until its work lands.)
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
