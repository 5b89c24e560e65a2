-- Named queries of retention (pgmem._async.retention): everything that removes what pgmem keeps only for a
-- while. Each statement is scoped to one namespace, deletes in one statement (all or nothing) and returns
-- how many rows it removed. What grows, and the statement that purges it:
--   pgmem.queue_archive_batches  acknowledged queue items (analytics)      purge_queue_archive
--   pgmem.brain_memories         BrainMemory state past its TTL           expired_brains, then brains.delete
--   pgmem.vector_log             changes that FAISS caches replay         purge_vector_log (swept)
--   pgmem.retrieval_log          logged searches (opt-in)                 purge_retrieval_log (swept, opt-in)
--   pgmem.memory_entries         a memory's oldest entries (count, age)   trim, trim_before

-- fragment: cutoff
-- The cutoff of a purge: the timestamp %(before)s when given, else %(age)s seconds before the statement's
-- start (the server's clock: a client's clock may be off). now() is the same throughout a statement.
coalesce(%(before)s::timestamptz, now() - %(age)s::float8 * interval '1 second')

-- name: purge_queue_archive
-- Drop archived items acknowledged before the cutoff (every queue of the namespace when %(queue)s is
-- NULL), and the messages nothing refers to any more. Returns the items removed.
-- Not the fragment delete_orphans: this statement deletes archive rows, not entries. It keeps every entry
-- as a reference and excludes instead the archive rows it deletes itself (its snapshot still shows them).
-- The archive is append-only in acked_at order: its BRIN index finds the old rows.
WITH gone AS (
    DELETE FROM pgmem.queue_archive_batches
    WHERE namespace = %(ns)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND acked_at < {{cutoff}}
    RETURNING message_ids
), orphan AS (
    DELETE FROM pgmem.messages AS m
    USING (SELECT DISTINCT unnest(message_ids) AS message_id FROM gone) AS g
    WHERE m.namespace = %(ns)s AND m.id = g.message_id
      AND NOT EXISTS (SELECT 1 FROM pgmem.memory_entries AS e
                      WHERE e.namespace = %(ns)s AND e.message_id = g.message_id)
      AND NOT EXISTS (SELECT 1 FROM pgmem.queue_items AS q
                      WHERE q.namespace = %(ns)s AND q.message_id = g.message_id)
      -- archived rows this statement keeps
      AND NOT EXISTS (SELECT 1 FROM pgmem.queue_archive_batches AS a
                      WHERE a.message_ids @> ARRAY[g.message_id] AND a.namespace = %(ns)s
                        AND (a.acked_at >= {{cutoff}} OR a.queue <> %(queue)s::text))
)
SELECT coalesce(sum(cardinality(message_ids)), 0) AS removed FROM gone;

-- name: expired_brains
-- Up to %(limit)s expired brains of the namespace (one batch of the purge), oldest first, locked until
-- the batch commits. SKIP LOCKED: a brain being dumped right now is left for the next purge, and several
-- purgers share the work.
SELECT redis_key
FROM pgmem.brain_memories
WHERE namespace = %(ns)s AND expires_at IS NOT NULL AND expires_at <= now()
ORDER BY expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: purge_vector_log
-- Drop the vector log's rows logged before the cutoff, as a prefix of each memory's revisions, so that what
-- stays of a memory's log is every revision from its oldest logged one on (a FAISS cache behind that
-- oldest one sees the gap and reloads the memory in full; one at or after it replays the rest):
-- * a row stays when a row of a lower revision of its memory was logged since the cutoff (revisions
--   follow commit order, logged_at the start of the writing transaction: a long transaction can log an
--   older timestamp than a revision before it);
-- * each memory's newest revision stays, so the log never empties under a cache that is behind it (its
--   catch-up would find no change to replay and no sign of the purge).
-- Old rows are found on the BRIN index of logged_at, each memory's first recent revision on the primary
-- key. Returns the rows removed.
WITH old AS (
    SELECT DISTINCT memory FROM pgmem.vector_log
    WHERE namespace = %(ns)s AND logged_at < {{cutoff}}
), bound AS (
    SELECT old.memory, least(mem.vec_rev, recent.rev) AS keep_from
    FROM old
    JOIN pgmem.memories AS mem ON mem.namespace = %(ns)s AND mem.key = old.memory
    LEFT JOIN LATERAL (
        SELECT l.rev FROM pgmem.vector_log AS l
        WHERE l.namespace = %(ns)s AND l.memory = old.memory AND l.logged_at >= {{cutoff}}
        ORDER BY l.rev
        LIMIT 1
    ) AS recent ON true
), gone AS (
    DELETE FROM pgmem.vector_log AS l
    USING bound
    WHERE l.namespace = %(ns)s AND l.memory = bound.memory AND l.rev < bound.keep_from
    RETURNING 1
)
SELECT count(*) AS removed FROM gone;

-- name: purge_retrieval_log
-- Drop the logged searches of the namespace logged before the cutoff (on retrieval_log_logged_idx).
-- Returns the rows removed.
WITH gone AS (
    DELETE FROM pgmem.retrieval_log
    WHERE namespace = %(ns)s AND logged_at < {{cutoff}}
    RETURNING 1
)
SELECT count(*) AS removed FROM gone;

-- name: trim
-- Keep only the newest %(keep)s entries of the memory %(memory)s; older ones are removed (and their
-- messages when nothing else refers to them). A range of the memory's (namespace, memory, seq) index.
-- Returns the entries removed.
WITH boundary AS (
    SELECT seq FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s
    ORDER BY seq DESC OFFSET %(keep)s LIMIT 1
), entry AS (
    DELETE FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s AND seq <= (SELECT seq FROM boundary)
    RETURNING message_id
), orphan AS (
    {{delete_orphans}}
)
SELECT count(*) AS removed FROM entry;

-- name: trim_before
-- Remove the entries of the memory %(memory)s added before the cutoff (and their messages when nothing
-- else refers to them). Returns the entries removed.
WITH entry AS (
    DELETE FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s AND added_at < {{cutoff}}
    RETURNING message_id
), orphan AS (
    {{delete_orphans}}
)
SELECT count(*) AS removed FROM entry;

-- name: namespaces
-- The namespaces holding anything retention purges (`pgmem retention` without --namespace visits each).
SELECT namespace FROM pgmem.queue_archive_batches
UNION SELECT namespace FROM pgmem.brain_memories WHERE expires_at IS NOT NULL
UNION SELECT namespace FROM pgmem.vector_log
UNION SELECT namespace FROM pgmem.retrieval_log
ORDER BY 1;
