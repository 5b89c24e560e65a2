"""faults: idempotency keys for retried writes

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

``pgmem.idempotency_keys``: a push with an idempotency key records it here in the same statement, so a
push sent again after its connection was lost (committed or not, the client cannot tell) makes no second
item, even after the first was acknowledged. Keyed by namespace like every table (Citus: distributed by
namespace). A new, empty table: no lock on existing ones.

When the tables are under row-level security (revision 0004 FORCEs it on ``pgmem.messages``), this one
gets the same two policies (``pgmem_namespace`` and ``pgmem_admin``, see 0004's docstring).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_RLS = """
ALTER TABLE pgmem.idempotency_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.idempotency_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY pgmem_namespace ON pgmem.idempotency_keys
    USING (namespace = current_setting('pgmem.namespace', true))
    WITH CHECK (namespace = current_setting('pgmem.namespace', true));
CREATE POLICY pgmem_admin ON pgmem.idempotency_keys TO CURRENT_USER
    USING (current_setting('pgmem.admin', true) = 'on') WITH CHECK (current_setting('pgmem.admin', true) = 'on');
"""

#: The same, offline: row-level security on the new table only where it is forced on pgmem.messages (0004).
_RLS_IF_FORCED = """
DO $rls$
BEGIN
    IF (SELECT relforcerowsecurity FROM pg_class WHERE oid = 'pgmem.messages'::regclass) THEN
        ALTER TABLE pgmem.idempotency_keys ENABLE ROW LEVEL SECURITY;
        ALTER TABLE pgmem.idempotency_keys FORCE ROW LEVEL SECURITY;
        CREATE POLICY pgmem_namespace ON pgmem.idempotency_keys
            USING (namespace = current_setting('pgmem.namespace', true))
            WITH CHECK (namespace = current_setting('pgmem.namespace', true));
        CREATE POLICY pgmem_admin ON pgmem.idempotency_keys TO CURRENT_USER
            USING (current_setting('pgmem.admin', true) = 'on')
            WITH CHECK (current_setting('pgmem.admin', true) = 'on');
    END IF;
END $rls$
"""


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False, comment="the caller's idempotency key"),
        sa.Column("result", sa.BigInteger(), nullable=True, comment="what the first write made (the queue item's id)"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint("namespace", "key", name="idempotency_keys_pkey"),
        schema="pgmem",
        comment="Idempotency keys of retried writes (queues.push); the retention policy purges old ones.",
    )
    op.create_index(
        "idempotency_keys_created_brin",
        "idempotency_keys",
        ["created_at"],
        schema="pgmem",
        postgresql_using="brin",
    )
    if context.is_offline_mode():
        # A script printed for a DBA (`pgmem migrate --sql`) cannot ask the database: the server decides
        # the same thing when it runs the script.
        op.execute(_RLS_IF_FORCED)
    else:
        forced = (
            op.get_bind()
            .execute(sa.text("SELECT relforcerowsecurity FROM pg_class WHERE oid = 'pgmem.messages'::regclass"))
            .scalar()
        )
        if forced:
            for statement in _RLS.split(";"):
                if statement.strip():
                    op.execute(statement)


def downgrade() -> None:
    op.drop_table("idempotency_keys", schema="pgmem")
