"""vectors: the statement triggers of memory_entries test for embedding models with a join

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25

``memory_entries_added`` and ``memory_entries_removed`` first test whether any memory their statement
touched has an embedding model, and return when none has. The test was a row-value ``IN`` over the
``DISTINCT`` memories of the transition table; it is now an ``EXISTS`` over the transition table joined
with ``pgmem.memory_models`` on its key: the same answer without the sort, and nothing at all to do for
the empty firing of a cascade (a pop fires ``memory_entries_removed`` twice, the second time from the
foreign-key cascade of its message's delete, with no rows). Interleaved on twin databases, 400 samples:
``memory_entries_removed`` 36 -> 25 us for a pop's two firings, an add's statement 5-9 us cheaper.
``CREATE OR REPLACE`` of the two functions only: no table is touched.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_AFTER = (
    r"""
CREATE OR REPLACE FUNCTION pgmem.memory_entries_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_rows n JOIN pgmem.memory_models mm
                   ON mm.namespace = n.namespace AND mm.memory = n.memory) THEN
        RETURN NULL;
    END IF;
    INSERT INTO pgmem.embedding_outbox (namespace, model_id, message_id)
    SELECT n.namespace, mm.model_id, n.message_id
    FROM new_rows n
    JOIN pgmem.memory_models mm ON mm.namespace = n.namespace AND mm.memory = n.memory
    WHERE NOT EXISTS (SELECT 1 FROM pgmem.embeddings e
                      WHERE e.namespace = n.namespace AND e.model_id = mm.model_id AND e.message_id = n.message_id)
    ORDER BY 1, 2, 3
    ON CONFLICT DO NOTHING;
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT n.namespace, n.memory, n.message_id, mm.model_id, 1::smallint AS op
          FROM new_rows n
          JOIN pgmem.memory_models mm ON mm.namespace = n.namespace AND mm.memory = n.memory
          JOIN pgmem.embeddings e
            ON e.namespace = n.namespace AND e.model_id = mm.model_id AND e.message_id = n.message_id
          ORDER BY n.seq) AS x;
    RETURN NULL;
END $$;
""",
    r"""
CREATE OR REPLACE FUNCTION pgmem.memory_entries_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM old_rows o JOIN pgmem.memory_models mm
                   ON mm.namespace = o.namespace AND mm.memory = o.memory) THEN
        RETURN NULL;
    END IF;
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT o.namespace, o.memory, o.message_id, mm.model_id, (-1)::smallint AS op
          FROM old_rows o
          JOIN pgmem.memory_models mm ON mm.namespace = o.namespace AND mm.memory = o.memory
          ORDER BY o.seq) AS x;
    RETURN NULL;
END $$;
""",
)

# The definitions before this revision (0001 for memory_entries_added, 0009 for memory_entries_removed).
_BEFORE = (
    r"""
CREATE OR REPLACE FUNCTION pgmem.memory_entries_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgmem.memory_models mm
                   WHERE (mm.namespace, mm.memory) IN (SELECT DISTINCT namespace, memory FROM new_rows)) THEN
        RETURN NULL;
    END IF;
    INSERT INTO pgmem.embedding_outbox (namespace, model_id, message_id)
    SELECT n.namespace, mm.model_id, n.message_id
    FROM new_rows n
    JOIN pgmem.memory_models mm ON mm.namespace = n.namespace AND mm.memory = n.memory
    WHERE NOT EXISTS (SELECT 1 FROM pgmem.embeddings e
                      WHERE e.namespace = n.namespace AND e.model_id = mm.model_id AND e.message_id = n.message_id)
    ORDER BY 1, 2, 3
    ON CONFLICT DO NOTHING;
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT n.namespace, n.memory, n.message_id, mm.model_id, 1::smallint AS op
          FROM new_rows n
          JOIN pgmem.memory_models mm ON mm.namespace = n.namespace AND mm.memory = n.memory
          JOIN pgmem.embeddings e
            ON e.namespace = n.namespace AND e.model_id = mm.model_id AND e.message_id = n.message_id
          ORDER BY n.seq) AS x;
    RETURN NULL;
END $$;
""",
    r"""
CREATE OR REPLACE FUNCTION pgmem.memory_entries_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgmem.memory_models mm
                   WHERE (mm.namespace, mm.memory) IN (SELECT DISTINCT namespace, memory FROM old_rows)) THEN
        RETURN NULL;
    END IF;
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT o.namespace, o.memory, o.message_id, mm.model_id, (-1)::smallint AS op
          FROM old_rows o
          JOIN pgmem.memory_models mm ON mm.namespace = o.namespace AND mm.memory = o.memory
          ORDER BY o.seq) AS x;
    RETURN NULL;
END $$;
""",
)


def upgrade() -> None:
    for statement in _AFTER:
        op.execute(statement)


def downgrade() -> None:
    for statement in _BEFORE:
        op.execute(statement)
