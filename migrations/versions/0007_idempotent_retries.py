"""faults: idempotency keys for retried writes

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

(Being written: this revision is empty until its work lands.)
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
