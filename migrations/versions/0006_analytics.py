"""analytics: the documented views, the retrieval log, an index for time windows

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23

The views are defined once, in ``sql/views.sql`` (one ``-- name: <view>`` block each, documented in
docs/analytics.md), and created here in file order; downgrade drops them in reverse order.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from psycopg import sql
from sqlalchemy.dialects import postgresql

from pgmem.planning import statements as queries

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("messages_created_idx", "messages", ["namespace", "created_at"], unique=False, schema="pgmem")
    op.create_table(
        "retrieval_log",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("logged_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False, comment="vector | batch | hybrid | cache: which search answered"),
        sa.Column("memory", sa.Text(), nullable=True, comment="the memory searched (NULL: the whole namespace)"),
        sa.Column("label", sa.Text(), nullable=True, comment="the caller's label, e.g. the prompt or the stage"),
        sa.Column("query", sa.Text(), nullable=True, comment="the query text (NULL for a query vector)"),
        sa.Column("k", sa.Integer(), nullable=False, comment="how many hits were asked for"),
        sa.Column(
            "message_ids",
            postgresql.ARRAY(sa.Text()),
            nullable=False,
            comment="the hits, best first (rank = position)",
        ),
        sa.Column(
            "scores",
            postgresql.ARRAY(postgresql.DOUBLE_PRECISION()),
            nullable=False,
            comment="their scores, in the same order",
        ),
        sa.PrimaryKeyConstraint("namespace", "id", name="retrieval_log_pkey"),
        schema="pgmem",
        comment="Searches and what they returned (opt-in: PGMEM_RETRIEVAL_LOG=1); pgmem.retrieval_hits unnests it.",
    )
    op.create_index("retrieval_log_logged_idx", "retrieval_log", ["namespace", "logged_at"], schema="pgmem")
    op.create_index("retrieval_log_label_idx", "retrieval_log", ["namespace", "label", "logged_at"], schema="pgmem")
    for statement in queries.load("views").values():
        op.execute(statement)


def downgrade() -> None:
    for name in reversed(list(queries.load("views"))):
        op.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(sql.Identifier("pgmem", name)).as_string(None))
    op.drop_index("retrieval_log_label_idx", table_name="retrieval_log", schema="pgmem")
    op.drop_index("retrieval_log_logged_idx", table_name="retrieval_log", schema="pgmem")
    op.drop_table("retrieval_log", schema="pgmem")
    op.drop_index("messages_created_idx", table_name="messages", schema="pgmem")
