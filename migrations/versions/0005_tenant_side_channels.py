"""tenant side channels: per-namespace notification keys, the embedding-model registry keyed by definition

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

(Being written: this revision is empty until its work lands.)
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
