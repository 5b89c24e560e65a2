"""near-duplicate merge: how often a message was seen (issue 36, item 3)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29

``messages.add(..., merge="near", threshold=...)`` keeps one entry of a fact a memory is told again in other
words: the survivor's entry counts how often it was seen and when last. The counts are per memory (on
``memory_entries``: "one already in the memory"), like the entry's position.

- ``seen_count``: 1 for every existing entry (a constant default: no table rewrite).
- ``last_seen_at``: NULL until the entry absorbs a near-duplicate; readers take ``coalesce(last_seen_at,
  added_at)``. A default of ``added_at`` itself would rewrite every entry (a default cannot name another
  column), and ``now()`` would date every existing entry at this migration.
- ``merge_within``: the distance bound of a merge left for the background embedder (the message had no
  vector of the memory's model when it was added); NULL once decided. ``memory_entries_merging_idx``
  holds only those pending entries, so the embedder's look-up per stored batch reads an (almost always)
  empty index.

The index is built without CONCURRENTLY (in the migration's transaction): it reads memory_entries once and
blocks its writers meanwhile (seconds per million entries).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UPGRADE = """
ALTER TABLE pgmem.memory_entries
    ADD COLUMN seen_count integer NOT NULL DEFAULT 1,
    ADD COLUMN last_seen_at timestamptz,
    ADD COLUMN merge_within double precision;
COMMENT ON COLUMN pgmem.memory_entries.seen_count IS
    'how many times the memory was given this fact (near-duplicates merged into it: migration 0018)';
COMMENT ON COLUMN pgmem.memory_entries.last_seen_at IS
    'when a near-duplicate was last merged into it; NULL: never (read coalesce(last_seen_at, added_at))';
COMMENT ON COLUMN pgmem.memory_entries.merge_within IS
    'a near-duplicate merge the embedder decides when it stores the vector: the distance bound; NULL: none';
CREATE INDEX memory_entries_merging_idx ON pgmem.memory_entries (namespace, message_id)
    WHERE merge_within IS NOT NULL;
"""

_DOWNGRADE = """
DROP INDEX pgmem.memory_entries_merging_idx;
ALTER TABLE pgmem.memory_entries
    DROP COLUMN merge_within,
    DROP COLUMN last_seen_at,
    DROP COLUMN seen_count;
"""


def upgrade() -> None:
    op.execute(_UPGRADE)


def downgrade() -> None:
    op.execute(_DOWNGRADE)
