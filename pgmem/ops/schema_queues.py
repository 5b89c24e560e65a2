"""The queues' tables of the schema declaration (:mod:`pgmem.ops.schema`): live items, the archive of
acknowledged ones and its message references, idempotency keys, and publish/subscribe routing."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY

__all__ = ["QueueTables", "declare_queue_tables"]


class QueueTables(NamedTuple):
    queue_items: Table
    queue_archive_batches: Table
    queue_archive_refs: Table
    idempotency_keys: Table
    subscriptions: Table


def declare_queue_tables(metadata: MetaData) -> QueueTables:
    """Declare the queues' tables on ``metadata`` (the schema's one :class:`~sqlalchemy.MetaData`)."""
    queue_items = Table(
        "queue_items",
        metadata,
        Column("namespace", Text, nullable=False),
        Column("id", BigInteger, Identity(always=False), nullable=False),
        Column("queue", Text, nullable=False),
        Column("message_id", Text, nullable=False),
        Column("priority", Integer, nullable=False, server_default=text("0"), comment="lower is served first"),
        Column("status", Text, nullable=False, server_default=text("'ready'"), comment="ready | dead"),
        Column("enqueued_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column(
            "available_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="claimable from then on: the delay, the retry backoff, or the end of the current lease",
        ),
        Column("attempts", Integer, nullable=False, server_default=text("0"), comment="claims so far; fences ack"),
        Column("max_attempts", Integer, nullable=False, server_default=text("5")),
        Column("claimed_at", DateTime(timezone=True), nullable=True),
        Column("claimed_by", Text, nullable=True),
        Column("lease_until", DateTime(timezone=True), nullable=True),
        Column("last_error", Text, nullable=True),
        Column("dedup_key", Text, nullable=True),
        Column("died_at", DateTime(timezone=True), nullable=True),
        PrimaryKeyConstraint("namespace", "id", name="queue_items_pkey"),
        ForeignKeyConstraint(
            ["namespace", "message_id"],
            ["pgmem.messages.namespace", "pgmem.messages.id"],
            name="queue_items_message_fkey",
        ),
        CheckConstraint("status IN ('ready', 'dead')", name="queue_items_status_check"),  # pre-baseline migration 0016
        Index(
            "queue_items_claim_idx",
            "namespace",
            "queue",
            "priority",
            "id",
            postgresql_where=text("status = 'ready'"),
        ),
        Index(
            "queue_items_dedup_key",
            "namespace",
            "queue",
            "dedup_key",
            unique=True,
            postgresql_where=text("dedup_key IS NOT NULL AND status = 'ready'"),
        ),
        Index("queue_items_message_idx", "namespace", "message_id"),
        Index("queue_items_dead_idx", "namespace", "queue", "died_at", postgresql_where=text("status = 'dead'")),
        comment="Live queue items (ready, leased or dead); acknowledged items move to queue_archive.",
        # Free space for HOT updates on claim (pre-baseline migrations 0003, 0008), eager autovacuum (0003),
        # unthrottled (0007).
        postgresql_with={
            "fillfactor": "45",
            "autovacuum_vacuum_scale_factor": "0.01",
            "autovacuum_vacuum_insert_scale_factor": "0.01",
            "autovacuum_analyze_scale_factor": "0.02",
            "autovacuum_vacuum_cost_delay": "0",
        },
    )

    queue_archive_batches = Table(
        "queue_archive_batches",
        metadata,
        Column("namespace", Text, nullable=False),
        Column("batch", BigInteger, Identity(always=False), nullable=False),
        Column("queue", Text, nullable=False),
        Column("acked_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("ids", ARRAY(BigInteger), nullable=False, comment="the items' ids"),
        Column("message_ids", ARRAY(Text), nullable=False),
        Column("priorities", ARRAY(Integer), nullable=False),
        Column("enqueued_at", ARRAY(DateTime(timezone=True)), nullable=False),
        Column("claimed_at", ARRAY(DateTime(timezone=True)), nullable=False),
        Column("attempts", ARRAY(Integer), nullable=False),
        Column("claimed_by", ARRAY(Text), nullable=False),
        Column("dedup_keys", ARRAY(Text), nullable=False),
        CheckConstraint(
            "cardinality(ids) > 0 AND cardinality(message_ids) = cardinality(ids)"
            " AND cardinality(priorities) = cardinality(ids) AND cardinality(enqueued_at) = cardinality(ids)"
            " AND cardinality(claimed_at) = cardinality(ids) AND cardinality(attempts) = cardinality(ids)"
            " AND cardinality(claimed_by) = cardinality(ids) AND cardinality(dedup_keys) = cardinality(ids)",
            name="queue_archive_batches_arrays_check",
        ),
        PrimaryKeyConstraint("namespace", "batch", name="queue_archive_batches_pkey"),
        Index("queue_archive_batches_acked_brin", "acked_at", postgresql_using="brin"),
        # The checks that keep archived messages from being deleted (sql/messages.sql, stores.sql, purge).
        Index("queue_archive_batches_message_idx", "message_ids", postgresql_using="gin"),
        comment="Acknowledged queue items, one row per acknowledgement and queue (the items' columns as arrays, "
        "in the same order); pgmem.queue_archive unnests it. Kept until the retention policy purges them.",
        # Rows up to ~80 items stay inline and uncompressed: no pglz, no TOAST insert on acknowledgement (0014).
        postgresql_with={"toast_tuple_target": "8160"},
    )
    # pgmem.queue_archive, one row per acknowledged item, is a view over it (pre-baseline migration 0013).

    queue_archive_refs = Table(
        "queue_archive_refs",
        metadata,
        Column("namespace", Text, nullable=False),
        Column("message_id", Text, nullable=False),
        Column("batch", BigInteger, nullable=False),
        # Looked up by message (namespace, message_id = ...): a btree equality, which row-level security lets
        # an index serve (texteq is leakproof; the array containment on queue_archive_batches.message_ids is
        # not), and which the planner knows to be selective whatever its statistics (migration 0011).
        PrimaryKeyConstraint("namespace", "message_id", "batch", name="queue_archive_refs_pkey"),
        comment="Which archive rows (queue_archive_batches.batch) name each message: written with them on "
        "acknowledgement and removed with them, so a message removal asks whether the archive still holds its "
        "message by key instead of reading the namespace's archive.",
    )

    # Keys of writes that may be retried (pre-schema revision 0007): a push carrying one happens once however
    # often it is sent, also after the item was acknowledged (the archive keeps no per-item key).
    idempotency_keys = Table(
        "idempotency_keys",
        metadata,
        Column("namespace", Text, nullable=False),
        Column("key", Text, nullable=False, comment="the caller's idempotency key"),
        Column("result", BigInteger, nullable=True, comment="what the first write made (the queue item's id)"),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        PrimaryKeyConstraint("namespace", "key", name="idempotency_keys_pkey"),
        Index("idempotency_keys_created_brin", "created_at", postgresql_using="brin"),
        comment="Idempotency keys of retried writes (queues.push); the retention policy purges old ones.",
    )

    subscriptions = Table(
        "subscriptions",
        metadata,
        Column("namespace", Text, nullable=False),
        Column("subscriber", Text, nullable=False),
        Column("addresses", ARRAY(Text), nullable=False, comment="names the subscriber answers to (send_to)"),
        Column("watch", ARRAY(Text), nullable=True, comment="actions (cause_by) it takes broadcasts of; NULL: all"),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        PrimaryKeyConstraint("namespace", "subscriber", name="subscriptions_pkey"),
        comment="Who receives published messages in an inbox queue (inbox:<subscriber>).",
    )
    return QueueTables(queue_items, queue_archive_batches, queue_archive_refs, idempotency_keys, subscriptions)
