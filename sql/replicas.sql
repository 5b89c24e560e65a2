-- Read replicas (pgmem/_async/replicas.py): where the primary's WAL is, and how far a replica has replayed it.
-- Positions are bytes from '0/0' (a pg_lsn minus '0/0' is a number), compared in Python.

-- name: primary_position
-- The primary's WAL flush position: every commit that has returned to a client (synchronous_commit on) ends
-- at or before it. A replica that has replayed this far sees every write this client made before asking.
SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint;

-- name: replayed_position
-- How far this standby has replayed the primary's WAL (NULL on a server that is not in recovery).
SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint;
