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
-- `undecided`: whether an entry of the memory waits for a merge its vector could decide already (a process
-- died between the embedder's commit and its merge, or a vector came by another way: undecided_memory),
-- as this statement's snapshot saw it: taken before the lock's wait, which is enough for a probe (a
-- leftover is old; one committed while this waited is decided by whoever stored its vector). A probe of
-- memory_entries_merging_idx, almost always empty.
-- `settled`: then the memory's writers' settle lock, shared (the fragment settle_lock_key), held to commit:
-- a merge removes an entry, and a fork of the memory being taken holds that lock exclusively until it
-- commits, so merge_near, a later statement, sees the fork and keeps the merged message for it (its trigger
-- copies the entry in); a fork taken after waits for the merge. Taken in merge_near itself it came too late:
-- that snapshot predated the fork, the message went as nobody else's, and the committed fork lost it
-- (README, "Concurrency"). Always after the merge lock, in this one order.
SELECT pg_advisory_xact_lock(28782, hashtext(%(ns)s || '/' || %(memory)s))::text AS locked,
       current_setting('transaction_isolation') AS isolation,
       EXISTS ({{undecided}} AND me.memory = %(memory)s) AS undecided,
       pg_advisory_xact_lock_shared({{settle_lock_key}})::text AS settled;

-- name: merge_try_lock
-- merge_lock without waiting (the background embedder, which holds rows an adder holding the lock may
-- wait for: pgmem._async.merging.merge_waiting; and the recovery, pgmem._async.merging.settle, in a
-- caller's transaction). The settle lock, shared, as merge_lock's `settled`, also only tried (a fork of the
-- memory being taken holds it: that merge waits, as for a busy merge lock). Returns whether both were taken.
SELECT CASE WHEN pg_try_advisory_xact_lock(28782, hashtext(%(ns)s || '/' || %(memory)s))
            THEN pg_try_advisory_xact_lock_shared({{settle_lock_key}}) ELSE false END AS locked;

-- fragment: undecided
-- Entries of the namespace waiting for their merge (merge_within set) whose message has a vector of the
-- memory's active model already: nothing else will decide them (the embedder decides an entry when it
-- stores the vector, or right after its commit for one that began waiting meanwhile; a plain add with the
-- caller's vector decides right after its own). Left when a process died in between, or when the vector
-- came with a write that could not take the merge lock. The partial index memory_entries_merging_idx
-- holds only waiting entries. Rows: rows.UndecidedRow (the entry, its bound and the model to decide with).
SELECT me.memory, me.message_id, me.merge_within, m.id, m.name, m.dimension, m.kind, m.distance
FROM pgmem.memory_entries AS me
JOIN pgmem.memory_models AS mm ON mm.namespace = %(ns)s AND mm.memory = me.memory AND mm.status = 'active'
JOIN pgmem.embedding_models AS m ON m.id = mm.model_id
WHERE me.namespace = %(ns)s AND me.merge_within IS NOT NULL
  AND EXISTS (SELECT 1 FROM pgmem.embeddings AS e
              WHERE e.namespace = %(ns)s AND e.model_id = mm.model_id AND e.message_id = me.message_id)

-- name: undecided_memory
-- The undecided entries of memory %(memory)s (a merging add's, under its merge lock), in memory order.
{{undecided}}
  AND me.memory = %(memory)s
ORDER BY me.seq
LIMIT %(n)s;

-- name: undecided_namespace
-- The undecided entries of the namespace (the embedder's run), by memory, in memory order.
{{undecided}}
ORDER BY me.memory, me.seq
LIMIT %(n)s;

-- name: undecided_of
-- The undecided entries of the messages %(ids)s (whose vectors a write just stored), by memory, in memory
-- order.
{{undecided}}
  AND me.message_id = ANY(%(ids)s::text[])
ORDER BY me.memory, me.seq
LIMIT %(n)s;

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
