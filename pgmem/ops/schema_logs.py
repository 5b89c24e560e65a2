"""The logs' tables of the schema declaration (:mod:`pgmem.ops.schema`): the analytics logs (searches
and what they returned, sampled searches' recall) and the retention policies with the forget audit."""

from __future__ import annotations

from typing import NamedTuple

from pgvector.sqlalchemy import VECTOR
from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION, INTERVAL, JSONB

__all__ = ["LogTables", "declare_log_tables"]


class LogTables(NamedTuple):
    retrieval_log: Table
    recall_samples: Table
    retention_policies: Table
    forget_audit: Table


def declare_log_tables(metadata: MetaData) -> LogTables:
    """Declare the logs' tables on ``metadata`` (the schema's one :class:`~sqlalchemy.MetaData`)."""
    # -- analytics (pre-baseline migration 0006) --------------------------------------------------------------------
    # The views over these tables are defined in sql/views.sql (created by the migration, documented in
    # docs/analytics.md); alembic does not compare views.

    retrieval_log = Table(
        "retrieval_log",
        metadata,
        Column("namespace", Text, nullable=False),
        Column("id", BigInteger, Identity(always=False), nullable=False),
        Column("logged_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("kind", Text, nullable=False, comment="vector | batch | hybrid | cache: which search answered"),
        Column("memory", Text, nullable=True, comment="the memory searched (NULL: the whole namespace)"),
        Column("label", Text, nullable=True, comment="the caller's label, e.g. the prompt or the stage"),
        Column("query", Text, nullable=True, comment="the query text (NULL for a query vector)"),
        Column("k", Integer, nullable=False, comment="how many hits were asked for"),
        Column("message_ids", ARRAY(Text), nullable=False, comment="the hits, best first (rank = position)"),
        Column("scores", ARRAY(DOUBLE_PRECISION), nullable=False, comment="their scores, in the same order"),
        PrimaryKeyConstraint("namespace", "id", name="retrieval_log_pkey"),
        Index("retrieval_log_logged_idx", "namespace", "logged_at"),
        Index("retrieval_log_label_idx", "namespace", "label", "logged_at"),
        # forget() finds the searches naming a message (migration 0006).
        Index("retrieval_log_message_idx", "message_ids", postgresql_using="gin"),
        comment="Searches and what they returned (opt-in: PGMEM_RETRIEVAL_LOG=1); pgmem.retrieval_hits unnests it.",
    )

    # Sampled searches and their exact top-k (migration 0019): pgmem._async.recall; the view pgmem.search_recall.
    recall_samples = Table(
        "recall_samples",
        metadata,
        Column("namespace", Text, nullable=False),
        Column("id", BigInteger, Identity(always=False), nullable=False),
        Column("sampled_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("kind", Text, nullable=False, comment="vector | batch | hybrid: which search was sampled"),
        Column("memory", Text, nullable=True, comment="the memory searched (NULL: the whole namespace)"),
        Column(
            "model_id", SmallInteger, nullable=False, comment="the model the search ran on (pgmem.embedding_models)"
        ),
        Column("strategy", Text, nullable=False, comment="ann (the HNSW index) or exact: what served the answer"),
        Column("ef_search", Integer, nullable=True, comment="hnsw.ef_search of the index scan (NULL: exact)"),
        Column("k", Integer, nullable=False, comment="how many hits were asked for"),
        Column("query", VECTOR(), nullable=False, comment="the query vector"),
        Column("filters", JSONB, nullable=False, comment="the filters of the search (memory, cause_by, role, ...)"),
        Column(
            "options",
            JSONB,
            nullable=False,
            server_default=text("'{}'::jsonb"),
            comment="what else makes the search (max_distance of a threshold; text, fusion and weights of a hybrid "
            "search)",
        ),
        Column("served_ids", ARRAY(Text), nullable=False, comment="the ids the search returned, best first"),
        Column("checked_at", DateTime(timezone=True), nullable=True, comment="when the checker ran the exact search"),
        Column("exact_ids", ARRAY(Text), nullable=True, comment="the exact top-k at checked_at"),
        Column("recall", DOUBLE_PRECISION, nullable=True, comment="|served ∩ exact| / |exact| (1 when exact is empty)"),
        PrimaryKeyConstraint("namespace", "id", name="recall_samples_pkey"),
        CheckConstraint("kind IN ('vector', 'batch', 'hybrid')", name="recall_samples_kind_check"),
        CheckConstraint("strategy IN ('ann', 'exact')", name="recall_samples_strategy_check"),
        CheckConstraint("recall IS NULL OR (recall >= 0 AND recall <= 1)", name="recall_samples_recall_check"),
        Index("recall_samples_sampled_idx", "namespace", "sampled_at"),
        Index("recall_samples_unchecked_idx", "namespace", "id", postgresql_where=text("checked_at IS NULL")),
        # forget() finds the samples naming a message.
        Index("recall_samples_served_idx", "served_ids", postgresql_using="gin"),
        Index("recall_samples_exact_idx", "exact_ids", postgresql_using="gin"),
        comment="Sampled searches and their exact top-k (PGMEM_RECALL_SAMPLE; migration 0019); "
        "pgmem.search_recall sums them up.",
    )

    # -- end of analytics ------------------------------------------------------------------------------------

    # -- retention policies and the forget audit (migration 0006): pgmem._async.retention -----------------------

    retention_policies = Table(
        "retention_policies",
        metadata,
        Column("namespace", Text, nullable=False),
        Column(
            "scope",
            Text,
            nullable=False,
            comment="'*': the whole namespace; else a memory key (a queue name for queue_history)",
        ),
        Column(
            "target",
            Text,
            nullable=False,
            comment="messages | queue_history | summaries | retrieval_log | vector_log | item_history",
        ),
        Column("max_age", INTERVAL, nullable=True, comment="rows older than this go (NULL: no age limit)"),
        Column("max_count", BigInteger, nullable=True, comment="only the newest this many stay (NULL: no count limit)"),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        PrimaryKeyConstraint("namespace", "target", "scope", name="retention_policies_pkey"),
        CheckConstraint(
            "target IN ('messages', 'queue_history', 'summaries', 'retrieval_log', 'vector_log', 'item_history')",
            name="retention_policies_target_check",
        ),
        CheckConstraint("max_age IS NOT NULL OR max_count IS NOT NULL", name="retention_policies_limit_check"),
        CheckConstraint("max_age IS NULL OR max_age >= interval '0'", name="retention_policies_age_check"),
        CheckConstraint("max_count IS NULL OR max_count >= 0", name="retention_policies_count_check"),
        comment="Retention policies: how long (max_age) and how many (max_count) rows of a target a scope keeps; "
        "client.retention.run() / pgmem retention run apply them.",
    )

    forget_audit = Table(
        "forget_audit",
        metadata,
        Column("namespace", Text, nullable=False),
        Column("id", BigInteger, Identity(always=False), nullable=False),
        Column("at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("actor", Text, nullable=False, comment="current_user of the forgetting transaction"),
        Column("label", Text, nullable=True, comment="the caller's actor= label (e.g. the person who asked)"),
        Column(
            "scope",
            JSONB,
            nullable=False,
            comment='what was forgotten, never content: {"kind": "ids"|"memory"|"sender"|"subject"|"policy", ...}',
        ),
        Column("counts", JSONB, nullable=False, comment="rows removed (or summaries marked stale) per table"),
        PrimaryKeyConstraint("namespace", "id", name="forget_audit_pkey"),
        Index("forget_audit_at_idx", "namespace", "at"),
        comment="One row per forget() and per retention run that removed rows: who, when, what scope, how many "
        "rows. Never the content.",
    )

    return LogTables(retrieval_log, recall_samples, retention_policies, forget_audit)
