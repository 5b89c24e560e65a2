"""pgmem.ring_doorbell sets pgmem.admin in its body: an owner that is not a superuser can migrate

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29

The function set ``pgmem.admin`` with a ``SET`` clause. On PostgreSQL 15 and later only a superuser may
declare a function that sets a custom parameter ("permission denied to set parameter"), so ``pgmem
migrate`` failed at 0012 for a tables' owner that is not a superuser, which is what managed services give.
The body now sets it with ``set_config(..., true)`` and puts the caller's value back before returning (an
error rolls the change back with the statement or the caller's savepoint). 0012 declares this form too;
this revision replaces the old one where 0012 ran before.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# sql/triggers.sql's ring_doorbell as of this revision (copied character for character).
_RING_DOORBELL = r"""
CREATE OR REPLACE FUNCTION pgmem.ring_doorbell(p_wait_ms integer, p_beat boolean) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- At most a second: the call's snapshot holds back vacuum while it waits.
    deadline timestamptz := clock_timestamp() + least(greatest(p_wait_ms, 0), 1000) * interval '1 millisecond';
    sent integer;
    admin_was text := current_setting('pgmem.admin', true);
BEGIN
    PERFORM set_config('pgmem.admin', 'on', true);
    -- Rows another transaction holds locked (a ring of its own, not yet committed) are passed by, never
    -- waited for: one open transaction must not stop every tenant's wake-ups. They stay for a later round.
    WHILE NOT EXISTS (SELECT 1 FROM pgmem.doorbell FOR UPDATE SKIP LOCKED) AND clock_timestamp() < deadline LOOP
        -- A latch wait of 1 ms, the shortest there is: pg_sleep rounds the time left up to whole
        -- milliseconds, and asked for 0.001 s it slept 2 ms (2,056 us per call, 0.0005 s: 1,090 us).
        PERFORM pg_sleep(0.0005);
    END LOOP;
    WITH rung AS (
        DELETE FROM pgmem.doorbell
        WHERE ctid = ANY (ARRAY(SELECT ctid FROM pgmem.doorbell FOR UPDATE SKIP LOCKED))
        RETURNING namespace, channel, name, rev
    ), merged AS (
        SELECT channel, pgmem.notify_tag(namespace, name) AS tag, max(rev) AS head, min(rev) AS low
        FROM rung GROUP BY namespace, channel, name
    )
    SELECT count(*) INTO sent FROM (
        SELECT pg_notify(channel, tag) FROM merged WHERE channel = 'pgmem_queue'
        UNION ALL
        SELECT pg_notify(channel, json_build_array(tag, -1)::text) FROM merged
        WHERE channel = 'pgmem_vectors' AND low < 0
        UNION ALL
        SELECT pg_notify(channel, json_build_array(tag, head)::text) FROM merged
        WHERE channel = 'pgmem_vectors' AND head >= 0
    ) AS notified;
    IF p_beat THEN
        PERFORM pg_notify('pgmem_vectors', 'beat');
    END IF;
    PERFORM set_config('pgmem.admin', coalesce(admin_was, ''), true);
    RETURN sent;
END $$;
"""


def upgrade() -> None:
    op.execute(_RING_DOORBELL)


def downgrade() -> None:
    # The SET clause form would need a superuser; the body form does the same, so it stays.
    pass
