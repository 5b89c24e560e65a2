"""queues: claim(ack=) claims first and acknowledges after, undoing both when an acknowledgement fails

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23

A consumer's `claim(ack=previous)` statement used to delete the acknowledged items, archive them, and
only then claim the next batch, with the snapshot taken at the start of the statement. By the time its
claim ran, other consumers had claimed and committed rows that its stale snapshot still showed as
claimable. FOR UPDATE takes the lock on the newest version of such a row before re-checking the WHERE
clause, and a row that fails the re-check stays locked until the statement commits: the consumer that
held the row then waited for it in its next acknowledgement. With 8 consumers taking 50 items at a time,
15-18% of backend samples waited on a transaction lock this way (3% in a raw SKIP LOCKED loop).

The statement now claims first, on a fresh snapshot, and acknowledges after. The claim no longer waits
for the acknowledgements to hold, so when one has not, the statement calls `pgmem.queue_lease_lost`,
which raises SQLSTATE PGM01: the whole statement rolls back, and the client acknowledges what it still
can on its own and raises LeaseLost. That keeps the contract "a lost lease claims nothing".
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
CREATE FUNCTION pgmem.queue_lease_lost(acknowledged bigint[], held bigint[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'lease lost on item(s) %',
        ARRAY(SELECT h FROM unnest(held) AS h WHERE h <> ALL(coalesce(acknowledged, '{}')) ORDER BY h)
        USING ERRCODE = 'PGM01',
              HINT = 'the statement was rolled back; acknowledge the items on their own';
END
$$"""
    )
    op.execute(
        "COMMENT ON FUNCTION pgmem.queue_lease_lost(bigint[], bigint[]) IS "
        "'Raises SQLSTATE PGM01: a claim(ack=) statement found an acknowledgement that no longer held.'"
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION pgmem.queue_lease_lost(bigint[], bigint[])")
