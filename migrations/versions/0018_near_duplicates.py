"""near-duplicate merge: how often a message was seen (issue 36, item 3)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29

Placeholder while the feature is built: no change yet.
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
