"""memory entries: the message index also holds the memory (covering), for the filtered HNSW probe

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23

A filtered HNSW search checks each row the index yields with a probe keyed on the message id (the memory
compared with IS NOT DISTINCT FROM, so that stale statistics cannot turn it into a walk of the memory's
own index; see pgmem/search.py). Keyed on (namespace, message_id) alone, the probe read every entry of
the message from the table: a message held by 4-5 memories cost 4-5 heap fetches per candidate. With
the memory included in the index the probe is an index-only scan. Measured on 34k MiniLM vectors in the
layout of benchmarks/vectors.py (filter keeping 12.5%, against the hand-written EXISTS query on the
primary key): 1.09-1.10x -> 0.98-1.03x.
The index is rebuilt under the new definition in this migration's transaction: writes to
pgmem.memory_entries wait while it builds (about a second per million entries).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rebuild(include: bool) -> None:
    op.execute("ALTER INDEX pgmem.memory_entries_message_idx RENAME TO memory_entries_message_idx_old")
    op.create_index(
        "memory_entries_message_idx",
        "memory_entries",
        ["namespace", "message_id"],
        schema="pgmem",
        postgresql_include=["memory"] if include else [],
    )
    op.execute("DROP INDEX pgmem.memory_entries_message_idx_old")


def upgrade() -> None:
    _rebuild(include=True)


def downgrade() -> None:
    _rebuild(include=False)
