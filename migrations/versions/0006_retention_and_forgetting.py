"""retention policies, forgetting with an audit trail, stale summaries

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

* ``pgmem.retention_policies``: per namespace and scope (``'*'`` or a memory key / queue name), how long
  and how many rows of a target stay (``client.retention.set_policy``, ``pgmem retention run``).
* ``pgmem.forget_audit``: one row per ``client.retention.forget`` (and per retention run that removed
  rows): who, when, what scope, how many rows per table; never content.
* ``pgmem.summaries.stale_at``: set when a message a summary covered is forgotten (its content is emptied
  in the same transaction and it is no longer served until recomputed).
* Both tables get forced row-level security and revision 0004's two policies (``pgmem_namespace``,
  ``pgmem_admin``); their grants to ``pgmem_app`` come from 0004's default privileges.
* ``retrieval_log_message_idx``: a GIN index on ``retrieval_log.message_ids``, so forgetting a message
  finds the logged searches naming it without reading the whole log.

Cost: adding a nullable column without a default is a catalog change; the GIN index reads the retrieval
log once (it is opt-in and usually small). Nothing else is rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


#: The tables this revision adds, keyed by namespace: row-level security as revision 0004 set it up.
TABLES = ("retention_policies", "forget_audit")

_SCOPED = "namespace = current_setting('pgmem.namespace', true)"
_ADMIN = "current_setting('pgmem.admin', true) = 'on'"


def _secure(table: str) -> None:
    op.execute(f"ALTER TABLE pgmem.{table} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE pgmem.{table} FORCE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY pgmem_namespace ON pgmem.{table} USING ({_SCOPED}) WITH CHECK ({_SCOPED})")
    op.execute(f"CREATE POLICY pgmem_admin ON pgmem.{table} TO CURRENT_USER USING ({_ADMIN}) WITH CHECK ({_ADMIN})")


def upgrade() -> None:
    op.add_column(
        "summaries",
        sa.Column(
            "stale_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="set when a message it covered was forgotten: content emptied, never served, recomputable",
        ),
        schema="pgmem",
    )
    op.create_index(
        "retrieval_log_message_idx", "retrieval_log", ["message_ids"], schema="pgmem", postgresql_using="gin"
    )
    op.create_table(
        "retention_policies",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column(
            "scope",
            sa.Text(),
            nullable=False,
            comment="'*': the whole namespace; else a memory key (a queue name for queue_history)",
        ),
        sa.Column(
            "target",
            sa.Text(),
            nullable=False,
            comment="messages | queue_history | summaries | retrieval_log | vector_log",
        ),
        sa.Column(
            "max_age", postgresql.INTERVAL(), nullable=True, comment="rows older than this go (NULL: no age limit)"
        ),
        sa.Column(
            "max_count",
            sa.BigInteger(),
            nullable=True,
            comment="only the newest this many stay (NULL: no count limit)",
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "target", "scope", name="retention_policies_pkey"),
        sa.CheckConstraint(
            "target IN ('messages', 'queue_history', 'summaries', 'retrieval_log', 'vector_log')",
            name="retention_policies_target_check",
        ),
        sa.CheckConstraint("max_age IS NOT NULL OR max_count IS NOT NULL", name="retention_policies_limit_check"),
        sa.CheckConstraint("max_age IS NULL OR max_age >= interval '0'", name="retention_policies_age_check"),
        sa.CheckConstraint("max_count IS NULL OR max_count >= 0", name="retention_policies_count_check"),
        schema="pgmem",
        comment="Retention policies: how long (max_age) and how many (max_count) rows of a target a scope keeps; "
        "client.retention.run() / pgmem retention run apply them.",
    )
    op.create_table(
        "forget_audit",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False, comment="current_user of the forgetting transaction"),
        sa.Column("label", sa.Text(), nullable=True, comment="the caller's actor= label (e.g. the person who asked)"),
        sa.Column(
            "scope",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            comment='what was forgotten, never content: {"kind": "ids"|"memory"|"sender"|"subject"|"policy", ...}',
        ),
        sa.Column(
            "counts",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            comment="rows removed (or summaries marked stale) per table",
        ),
        sa.PrimaryKeyConstraint("namespace", "id", name="forget_audit_pkey"),
        schema="pgmem",
        comment="One row per forget() and per retention run that removed rows: who, when, what scope, how many "
        "rows. Never the content.",
    )
    op.create_index("forget_audit_at_idx", "forget_audit", ["namespace", "at"], schema="pgmem")
    for table in TABLES:
        _secure(table)


def downgrade() -> None:
    op.drop_index("forget_audit_at_idx", table_name="forget_audit", schema="pgmem")
    op.drop_table("forget_audit", schema="pgmem")
    op.drop_table("retention_policies", schema="pgmem")
    op.drop_index("retrieval_log_message_idx", table_name="retrieval_log", schema="pgmem")
    op.drop_column("summaries", "stale_at", schema="pgmem")
