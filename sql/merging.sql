-- Named queries of the near-duplicate merge (README, "Near-duplicates"): messages.add(merge="near") and
-- messages.remember (pgmem._async.messages), and the background embedder for merges left to it
-- (pgmem._async.outbox).

-- name: merge_lock
-- The memory's merge lock, taken by a merge add (and by the embedder's merges) in a statement of its own,
-- before it looks for a neighbour, and held to commit: merges into one memory run one at a time, and the
-- next one's look-up (a later statement: a later snapshot under READ COMMITTED) sees what the one before
-- stored. Ordinary adds never take it (no writer of the memory queues behind a merge). No unique index can
-- say "within a distance", hence a lock. 28782 marks these locks (the settle lock's is 28781; two 32-bit
-- keys: a key space apart from one-key advisory locks). Also returns the transaction's isolation: under
-- REPEATABLE READ or SERIALIZABLE the snapshot may predate the lock, and the caller is refused.
SELECT pg_advisory_xact_lock(28782, hashtext(%(ns)s || '/' || %(memory)s))::text AS locked,
       current_setting('transaction_isolation') AS isolation;

-- name: merge_try_lock
-- merge_lock without waiting (the background embedder, which holds rows an adder holding the lock may
-- wait for: pgmem._async.merging.lock_or_retry). Returns whether it was taken.
SELECT pg_try_advisory_xact_lock(28782, hashtext(%(ns)s || '/' || %(memory)s)) AS locked;

-- name: merge_near
-- Decide the merge of the entry of message %(id)s in memory %(memory)s (under merge_lock). With the
-- message's vector of model %(model)s (distance %(distance)s): the nearest other entry of the memory whose
-- vector is within %(within)s (the operator's value, exact: every entry of the memory is read, since an
-- approximate index may miss the nearest), among decided entries (merge_within NULL), the oldest among
-- equals. Found: the entry is removed (its message too when nothing else refers to it: delete_orphans)
-- and the neighbour's seen_count grows by the entry's, last_seen_at = now(). Not found: the entry stays,
-- decided. No vector yet: the entry waits for the embedder (merge_within = %(within)s).
-- %(pending)s: only an entry still waiting (the embedder's call; an adder's entry is its own, just added).
-- Returns (survivor: the neighbour's id or NULL, embedded: whether the message had a vector).
-- Own entries only: a merge writes the survivor's row (seen_count), and a fork's inherited entries are its
-- parent's rows, which a write in the fork must not reach; a near-duplicate of one is stored in the fork.
WITH self AS (
    SELECT me.seen_count FROM pgmem.memory_entries AS me
    WHERE me.namespace = %(ns)s AND me.memory = %(memory)s AND me.message_id = %(id)s
      AND (NOT %(pending)s::boolean OR me.merge_within IS NOT NULL)
), mine AS (
    SELECT coalesce(v.embedding, v.embedding_half::vector) AS v
    FROM pgmem.embeddings AS v
    WHERE v.namespace = %(ns)s AND v.model_id = %(model)s AND v.message_id = %(id)s
      AND EXISTS (SELECT 1 FROM self)
), near AS (
    SELECT n.message_id
    FROM (
        SELECT me.message_id, me.seq,
               CASE %(distance)s::text
                   WHEN 'l2' THEN coalesce(e.embedding, e.embedding_half::vector) <-> mine.v
                   WHEN 'inner_product' THEN coalesce(e.embedding, e.embedding_half::vector) <#> mine.v
                   ELSE coalesce(e.embedding, e.embedding_half::vector) <=> mine.v
               END AS d
        FROM pgmem.memory_entries AS me
        CROSS JOIN mine
        JOIN pgmem.embeddings AS e
          ON e.namespace = %(ns)s AND e.model_id = %(model)s AND e.message_id = me.message_id
        WHERE me.namespace = %(ns)s AND me.memory = %(memory)s AND me.message_id <> %(id)s
          AND me.merge_within IS NULL
    ) AS n
    WHERE n.d <= %(within)s::float8
    ORDER BY n.d, n.seq
    LIMIT 1
), bumped AS (
    UPDATE pgmem.memory_entries AS s
    SET seen_count = s.seen_count + (SELECT seen_count FROM self), last_seen_at = now()
    FROM near
    WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND s.message_id = near.message_id
    RETURNING s.message_id
), entry AS (
    DELETE FROM pgmem.memory_entries AS x
    WHERE x.namespace = %(ns)s AND x.memory = %(memory)s AND x.message_id = %(id)s
      AND EXISTS (SELECT 1 FROM near)
    RETURNING x.message_id, x.seq
), orphan AS (
    {{delete_orphans}}
), decided AS (
    UPDATE pgmem.memory_entries AS x
    SET merge_within = CASE WHEN EXISTS (SELECT 1 FROM mine) THEN NULL ELSE %(within)s::float8 END
    WHERE x.namespace = %(ns)s AND x.memory = %(memory)s AND x.message_id = %(id)s
      AND EXISTS (SELECT 1 FROM self) AND NOT EXISTS (SELECT 1 FROM near)
      AND x.merge_within IS DISTINCT FROM
          (CASE WHEN EXISTS (SELECT 1 FROM mine) THEN NULL ELSE %(within)s::float8 END)
)
SELECT (SELECT message_id FROM bumped) AS survivor, EXISTS (SELECT 1 FROM mine) AS embedded;

-- name: seen
-- How often and when last each of the messages %(ids)s was seen in memory %(memory)s (a search's
-- boost_seen). last_seen_at is NULL until a merge: its entry's added_at then. Through the memory's
-- lineage: a fork's inherited entries are its parent's rows (their counts as the parent keeps them).
SELECT me.message_id, me.seen_count, coalesce(me.last_seen_at, me.added_at) AS last_seen_at
FROM pgmem.lineage(%(ns)s, %(memory)s, NULL) AS l
JOIN pgmem.memory_entries AS me ON me.namespace = %(ns)s AND me.memory = l.memory AND me.seq <= l.upto
WHERE me.message_id = ANY(%(ids)s::text[]);
