-- Named queries of the BrainMemory repository (pgmem._async.brains), loaded once by
-- pgmem.planning.statements.
--
-- A brain's history is the memory `key` (messages appended by `dumps`, never rewritten), its knowledge
-- the memory `knowledge_key`. Every `dumps` and every summary takes the brain row lock (FOR UPDATE), so
-- history entries are appended in lock order: a summary read under the lock covers a gapless prefix.

-- name: load
-- The live brain row (an expired row reads as missing: its TTL is honoured on read): a rows.BrainRow.
SELECT redis_key, historical_summary, summarized_seq, last_history_id, last_talk, version, expires_at
FROM pgmem.brain_memories
WHERE namespace = %(ns)s AND key = %(key)s AND (expires_at IS NULL OR expires_at > now());

-- name: history
-- The history after the summarised prefix, oldest first: its own entries, or through the memory's lineage
-- ({{lineage}}: a history that is a fork holds its parent's entries up to its point too); one branch runs
-- (not_a_fork). Through the lineage's rows alone the planner hash-joined every message of the namespace:
-- 48 ms for a history of 50 beside a memory of 100k.
SELECT e.seq, {{message_columns}}
FROM {{own_messages}}
WHERE e.seq > %(after)s AND {{not_a_fork}}
UNION ALL
SELECT e.seq, {{message_columns}}
FROM {{lineage_messages}}
WHERE e.seq > %(after)s AND NOT {{not_a_fork}}
ORDER BY seq;

-- name: create
-- Make sure the brain's two memories and its row exist (nothing happens when they do).
WITH history AS (
    INSERT INTO pgmem.memories (namespace, key, kind) VALUES (%(ns)s, %(key)s, 'brain')
    ON CONFLICT DO NOTHING
), knowledge AS (
    INSERT INTO pgmem.memories (namespace, key, kind) VALUES (%(ns)s, %(knowledge_key)s, 'brain-knowledge')
    ON CONFLICT DO NOTHING
)
INSERT INTO pgmem.brain_memories (namespace, key, redis_key) VALUES (%(ns)s, %(key)s, %(redis_key)s)
ON CONFLICT DO NOTHING;

-- name: lock
-- The brain row, locked until commit, with whether it has expired: a rows.BrainLockRow.
SELECT summarized_seq, version, expires_at IS NOT NULL AND expires_at <= now() AS expired
FROM pgmem.brain_memories
WHERE namespace = %(ns)s AND key = %(key)s
FOR UPDATE;

-- name: reset
-- An expired brain starts over: its scalar fields go back to their defaults (the caller clears the
-- history, the knowledge and the summaries in the same transaction).
UPDATE pgmem.brain_memories
SET historical_summary = '', summarized_seq = 0, last_history_id = '', last_talk = NULL, expires_at = NULL
WHERE namespace = %(ns)s AND key = %(key)s;

-- fragment: brain_fields
-- The fields a writer changed (a NULL parameter keeps the stored value), and the version bumped.
historical_summary = coalesce(%(historical_summary)s, historical_summary),
    summarized_seq = greatest(summarized_seq, coalesce(%(summarized_seq)s, 0)),
    last_history_id = coalesce(%(last_history_id)s, last_history_id),
    last_talk = CASE WHEN %(set_last_talk)s THEN %(last_talk)s ELSE last_talk END,
    version = version + 1,
    updated_at = now()

-- name: save
-- Write the changed fields and set the TTL (%(ttl)s seconds; NULL: no expiry). Returns the new version.
-- The TTL's two cases are two statements (this one and save_keeping_ttl), not a CASE around now(): a
-- distributed planner refuses the clock inside CASE.
UPDATE pgmem.brain_memories
SET {{brain_fields}},
    expires_at = now() + make_interval(secs => %(ttl)s)
WHERE namespace = %(ns)s AND key = %(key)s
RETURNING version;

-- name: save_keeping_ttl
-- Write the changed fields, the stored expiry kept. Returns the new version.
UPDATE pgmem.brain_memories
SET {{brain_fields}}
WHERE namespace = %(ns)s AND key = %(key)s
RETURNING version;

-- name: last_seq
-- The newest history entry (0 when empty), inherited ones included (a fork's: its lineage's newest).
SELECT coalesce(max(x.seq), 0) AS seq FROM {{lineage}} CROSS JOIN LATERAL (
    SELECT seq FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto
    ORDER BY seq DESC LIMIT 1) AS x;

-- name: settle_memories
-- The writers' settle lock (28781: the fragment settle_lock_key) of each of %(keys)s, shared, in a
-- statement of its own before a brain's memories are emptied and dropped: a fork of one of them that is
-- being taken holds it exclusively until it commits, and the removal's statements then run in snapshots
-- that see the fork (`clear` keeps the messages it inherits, the trigger copies them into it); a fork
-- taken after waits for the removal and finds no parent (NotFound). Without it, `clear` deleted the
-- messages of an in-flight fork as orphans, and the fork lost them.
SELECT pg_advisory_xact_lock_shared(28781, hashtext(%(ns)s || '/' || k.key))::text
FROM (SELECT DISTINCT unnest(%(keys)s::text[]) AS key ORDER BY 1) AS k;

-- name: delete_memories
-- Drop memories (their entries, summaries and brain rows cascade). Returns how many were dropped.
WITH gone AS (
    DELETE FROM pgmem.memories WHERE namespace = %(ns)s AND key = ANY(%(keys)s::text[]) RETURNING 1
)
SELECT count(*) FROM gone;
