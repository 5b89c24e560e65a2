"""The item store's tables of the schema declaration (:mod:`pgmem.ops.schema`): key-value items
(client.items, under LangGraph's BaseStore), their fields' vectors and the versions they no longer hold."""

from __future__ import annotations

from typing import NamedTuple

from pgvector.sqlalchemy import HALFVEC, VECTOR
from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION, JSONB

__all__ = ["ItemTables", "declare_item_tables"]


class ItemTables(NamedTuple):
    items: Table
    item_vectors: Table
    item_history: Table


def _path_key() -> Column[str]:
    return Column(
        "path_key",
        Text(collation="C"),
        Computed("pgmem.path_key(path)", persisted=True),
        nullable=False,
        comment="the path as one text (pgmem.path_key): what the primary key and every path condition use",
    )


def declare_item_tables(metadata: MetaData) -> ItemTables:
    """Declare the item store's tables on ``metadata`` (the schema's one :class:`~sqlalchemy.MetaData`)."""
    # -- the key-value item store (migration 0002): LangGraph's BaseStore (pgmem.integrations.langgraph) ---------

    items = Table(
        "items",
        metadata,
        Column("namespace", Text, nullable=False),
        # Labels compared byte by byte (collation "C"), as path_key compares them.
        Column("path", ARRAY(Text(collation="C")), nullable=False, comment="the item's path (LangGraph's namespace)"),
        # The path as one text (migration 0026): text's comparisons are leakproof where text[]'s are not, so
        # under row-level security a path, or a prefix (one range of it), is an index condition.
        _path_key(),
        Column("key", Text, nullable=False),
        Column("id", BigInteger, Identity(always=False), nullable=False),
        Column("value", JSONB, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("expires_at", DateTime(timezone=True), nullable=True, comment="NULL: never expires"),
        Column("ttl_minutes", DOUBLE_PRECISION, nullable=True, comment="what a read with refresh_ttl extends by"),
        PrimaryKeyConstraint("namespace", "path_key", "key", name="items_pkey"),
        Index("items_id_key", "namespace", "id", unique=True),
        Index("items_updated_idx", "namespace", "updated_at"),
        Index("items_expires_idx", "namespace", "expires_at", postgresql_where=text("expires_at IS NOT NULL")),
        # For equality filters of a search (``value OPERATOR(pgmem.@>) {"field": v}``), usable under row-level
        # security: the operator class's containment is leakproof (migration 0016, where a superuser migrated;
        # otherwise it stays jsonb_path_ops, which only a role bypassing row-level security can use).
        Index("items_value_idx", "value", postgresql_using="gin", postgresql_ops={"value": "pgmem.jsonb_contains_ops"}),
        CheckConstraint("cardinality(path) >= 1", name="items_path_check"),
        comment="Key-value items (client.items): a JSON value at (path, key), with an optional TTL.",
    )

    item_vectors = Table(
        "item_vectors",
        metadata,
        Column("namespace", Text, nullable=False),
        Column("item_id", BigInteger, nullable=False),
        Column("id", BigInteger, Identity(always=False), nullable=False),
        Column("model_id", SmallInteger, nullable=False),
        Column("field", Text, nullable=False, comment="the field path the text came from (path.i: its i-th text)"),
        Column("embedding", VECTOR(), nullable=True, comment="models up to 2,000 dimensions"),
        Column("embedding_half", HALFVEC(), nullable=True, comment="models above 2,000 dimensions"),
        PrimaryKeyConstraint("namespace", "item_id", "id", name="item_vectors_pkey"),
        ForeignKeyConstraint(
            ["namespace", "item_id"],
            ["pgmem.items.namespace", "pgmem.items.id"],
            ondelete="CASCADE",
            name="item_vectors_item_fkey",
        ),
        ForeignKeyConstraint(["model_id"], ["pgmem.embedding_models.id"], name="item_vectors_model_fkey"),
        CheckConstraint("(embedding IS NULL) <> (embedding_half IS NULL)", name="item_vectors_one_vector_check"),
        comment="Vectors of items' fields, per model; a partial HNSW index per model (item_vectors_hnsw_m<id>).",
    )

    item_history = Table(
        "item_history",
        metadata,
        Column("namespace", Text, nullable=False),
        Column("path", ARRAY(Text(collation="C")), nullable=False),
        _path_key(),
        Column("key", Text, nullable=False),
        Column("id", BigInteger, Identity(always=False), nullable=False),
        Column(
            "item_id",
            BigInteger,
            nullable=False,
            comment="the items row's id (a deleted and re-created item has a new one)",
        ),
        Column("value", JSONB, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False, comment="when the item was created"),
        Column("valid_from", DateTime(timezone=True), nullable=False, comment="the version's updated_at"),
        Column("valid_to", DateTime(timezone=True), nullable=False, comment="when it was replaced or deleted"),
        Column(
            "expires_at", DateTime(timezone=True), nullable=True, comment="when it expired or would have (NULL: no TTL)"
        ),
        # No foreign key to items: a version outlives its item's delete (reads as of before it see it).
        PrimaryKeyConstraint("namespace", "path_key", "key", "id", name="item_history_pkey"),
        # What an as_of read at a recent time scans (versions replaced after it), and the max-age purge.
        Index("item_history_valid_to_idx", "namespace", "valid_to"),
        CheckConstraint("valid_from < valid_to", name="item_history_range_check"),
        comment="Versions items no longer hold (migration 0022): the value an item had from valid_from to valid_to; "
        "reads as_of a time read them.",
    )

    return ItemTables(items, item_vectors, item_history)
