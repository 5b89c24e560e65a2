"""vectors: memory_entries_removed returns at once when no memory it touched has an embedding model

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24

Every removal from a memory (a pop, a delete, a clear, a forget) fires the statement trigger
``memory_entries_removed``, twice when the message goes too (its cascade). It called
``pgmem.log_vector_changes`` even when the memories had no embedding model, with nothing to log. It now
tests that first, as ``memory_entries_added`` does: the same effect, ~10 us less per firing (a pop of the
Agents SDK session: the trigger 38 -> 30 us, the statement 154-170 -> 136-145 us, EXPLAIN ANALYZE).
``CREATE OR REPLACE`` of the function only: no table is touched.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_EARLY = r"""
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
"""

# The definition before this revision (baseline).
_BEFORE = r"""
CREATE OR REPLACE FUNCTION pgmem.memory_entries_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT o.namespace, o.memory, o.message_id, mm.model_id, (-1)::smallint AS op
          FROM old_rows o
          JOIN pgmem.memory_models mm ON mm.namespace = o.namespace AND mm.memory = o.memory
          ORDER BY o.seq) AS x;
    RETURN NULL;
END $$;
"""


def upgrade() -> None:
    op.execute(_EARLY)


def downgrade() -> None:
    op.execute(_BEFORE)
