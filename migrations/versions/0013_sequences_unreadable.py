"""the application role may draw from pgmem's sequences, not read them

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28

``pgmem_app`` had USAGE and SELECT on every sequence of schema ``pgmem`` (revision 0004). SELECT lets a
tenant read ``last_value`` (``SELECT last_value FROM pgmem.messages_seq_seq``): found by a probe, tenant A
watched it move by 150 while tenant B wrote 150 rows. USAGE is what the library needs (``nextval``: an
idempotent push draws its item's id before it inserts; identity columns need no privilege at all), so
SELECT is revoked, on the sequences there are and, through the default privileges, on those later
migrations create.

What stays (README, "Tenants"): sequence values are shared by all tenants, so the gaps in a tenant's own
``seq`` and ids show how much the others wrote in between. A deployment whose tenants are hostile to each
other gives each one a database of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
DO $$
BEGIN
    IF to_regrole('pgmem_app') IS NULL THEN
        RETURN;
    END IF;
    REVOKE SELECT ON ALL SEQUENCES IN SCHEMA pgmem FROM pgmem_app;
    ALTER DEFAULT PRIVILEGES IN SCHEMA pgmem REVOKE SELECT ON SEQUENCES FROM pgmem_app;
END $$"""
    )


def downgrade() -> None:
    op.execute(
        """
DO $$
BEGIN
    IF to_regrole('pgmem_app') IS NULL THEN
        RETURN;
    END IF;
    GRANT SELECT ON ALL SEQUENCES IN SCHEMA pgmem TO pgmem_app;
    ALTER DEFAULT PRIVILEGES IN SCHEMA pgmem GRANT SELECT ON SEQUENCES TO pgmem_app;
END $$"""
    )
