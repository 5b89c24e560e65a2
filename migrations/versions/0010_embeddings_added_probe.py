"""embeddings_added: find the memories of new vectors by message id, whatever the statistics say

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23

The trigger that logs new vectors for the FAISS cache joins them to the memories holding their messages.
Written as a plain join, Postgres planned it once per session from whatever statistics memory_entries had
then; taken while the table was small, they called (namespace, memory) unique, and the plan read the whole
table (a sequential scan) or walked every entry of the memory (memory_entries_order_key) for each batch,
filtering on the message id: the trigger's cost grew with the data. Measured storing batches of 6 vectors
into a memory of 3,000: 1.4-1.5 ms in the trigger (of 5-6 ms for the statement, HNSW insertion
included). Each new vector now probes memory_entries_message_idx by its message id (a LATERAL subquery
kept apart from the join by OFFSET 0): 0.18-0.26 ms, independent of the memory's size.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FUNCTION = """
CREATE OR REPLACE FUNCTION pgmem.embeddings_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT me.namespace, me.memory, n.message_id, n.model_id, 1::smallint AS op
          FROM new_rows n
          {entries}
          JOIN pgmem.memory_models mm
            ON mm.namespace = me.namespace AND mm.memory = me.memory AND mm.model_id = n.model_id
          ORDER BY me.seq) AS x;
    RETURN NULL;
END $$;
"""

# One index probe per new vector: OFFSET 0 keeps the planner from flattening the subquery into a join it
# would order by its own (possibly stale) estimates.
_PROBE = """CROSS JOIN LATERAL (
              SELECT e.namespace, e.memory, e.seq FROM pgmem.memory_entries e
              WHERE e.namespace = n.namespace AND e.message_id = n.message_id
              OFFSET 0
          ) AS me"""
_JOIN = "JOIN pgmem.memory_entries me ON me.namespace = n.namespace AND me.message_id = n.message_id"


def upgrade() -> None:
    op.execute(_FUNCTION.replace("{entries}", _PROBE))


def downgrade() -> None:
    op.execute(_FUNCTION.replace("{entries}", _JOIN))
