"""items: the key-value item store (client.items, LangGraph's BaseStore adapter)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25

Two tables: ``items`` (a JSON value at (namespace, path, key), with an optional TTL) and ``item_vectors``
(the vectors of an item's fields, per embedding model). Per-model HNSW indexes on ``item_vectors``
(``item_vectors_hnsw_m<id>``) are created at run time, when a model is first used for items, not here.

``items.path`` is a ``text[]`` compared with collation "C": every path under a prefix is one range of
the primary key.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import HALFVEC, VECTOR
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "pgmem"


def upgrade() -> None:
    op.create_table(
        "items",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column(
            "path",
            postgresql.ARRAY(sa.Text(collation="C")),
            nullable=False,
            comment="the item's path (LangGraph's namespace)",
        ),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True, comment="NULL: never expires"),
        sa.Column(
            "ttl_minutes",
            postgresql.DOUBLE_PRECISION(),
            nullable=True,
            comment="what a read with refresh_ttl extends by",
        ),
        sa.CheckConstraint("cardinality(path) >= 1", name="items_path_check"),
        sa.PrimaryKeyConstraint("namespace", "path", "key", name="items_pkey"),
        schema=SCHEMA,
        comment="Key-value items (client.items): a JSON value at (path, key), with an optional TTL.",
    )
    op.create_index("items_id_key", "items", ["namespace", "id"], unique=True, schema=SCHEMA)
    op.create_index("items_updated_idx", "items", ["namespace", "updated_at"], schema=SCHEMA)
    op.create_index(
        "items_value_idx",
        "items",
        ["value"],
        schema=SCHEMA,
        postgresql_using="gin",
        postgresql_ops={"value": "jsonb_path_ops"},
    )
    op.create_index(
        "items_expires_idx",
        "items",
        ["namespace", "expires_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.create_table(
        "item_vectors",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("item_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("model_id", sa.SmallInteger(), nullable=False),
        sa.Column(
            "field",
            sa.Text(),
            nullable=False,
            comment="the field path the text came from (path.i: its i-th text)",
        ),
        sa.Column("embedding", VECTOR(), nullable=True, comment="models up to 2,000 dimensions"),
        sa.Column("embedding_half", HALFVEC(), nullable=True, comment="models above 2,000 dimensions"),
        sa.CheckConstraint("(embedding IS NULL) <> (embedding_half IS NULL)", name="item_vectors_one_vector_check"),
        sa.ForeignKeyConstraint(
            ["namespace", "item_id"],
            ["pgmem.items.namespace", "pgmem.items.id"],
            name="item_vectors_item_fkey",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["model_id"], ["pgmem.embedding_models.id"], name="item_vectors_model_fkey"),
        sa.PrimaryKeyConstraint("namespace", "item_id", "id", name="item_vectors_pkey"),
        schema=SCHEMA,
        comment="Vectors of items' fields, per model; a partial HNSW index per model (item_vectors_hnsw_m<id>).",
    )


def downgrade() -> None:
    op.execute("DROP TABLE pgmem.item_vectors, pgmem.items")
