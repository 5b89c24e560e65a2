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

-- fragment: merge_distance
-- The distance between the vectors a.v and b.v by the model's distance %(distance)s (merge_near's CASE).
CASE %(distance)s::text
    WHEN 'l2' THEN a.v <-> b.v
    WHEN 'inner_product' THEN a.v <#> b.v
    ELSE a.v <=> b.v
END

-- name: merge_near_batch
-- merge_near's look-up for a batch at once (add_many(merge="near"), the embedder's and the recovery's
-- merges of a memory, under merge_lock): for each entry of the messages %(ids)s (in order) still waiting
-- for its merge, whether it has a vector of model %(model)s, its seq, the nearest decided entry of the
-- memory within its bound (%(withins)s, by position: the oldest among equals, as merge_near; none of the
-- batch, which all wait), and the earlier entries of the batch within that bound of it (their positions
-- in %(ids)s, 1-based, and distances). The caller decides them in order
-- (pgmem._async.merging.decide_batch): an entry merges into the nearest of that neighbour and the earlier
-- ones that stayed, as merge_near one by one would, and merge_near_apply writes it. The memory's vectors
-- are read once (merge_near read them once per entry: at 5,000 entries 3.5 ms each).
-- Rows: pgmem.planning.merge_rows.BatchMergeRow.
WITH b AS MATERIALIZED (
    SELECT x.id, x.ord, x.within, me.seq, coalesce(v.embedding, v.embedding_half::vector) AS v
    FROM unnest(%(ids)s::text[], %(withins)s::float8[]) WITH ORDINALITY AS x(id, within, ord)
    JOIN pgmem.memory_entries AS me
      ON me.namespace = %(ns)s AND me.memory = %(memory)s AND me.message_id = x.id AND me.merge_within IS NOT NULL
    LEFT JOIN pgmem.embeddings AS v ON v.namespace = %(ns)s AND v.model_id = %(model)s AND v.message_id = x.id
), old AS MATERIALIZED (
    SELECT me.message_id, me.seq, coalesce(e.embedding, e.embedding_half::vector) AS v
    FROM pgmem.memory_entries AS me
    JOIN pgmem.embeddings AS e ON e.namespace = %(ns)s AND e.model_id = %(model)s AND e.message_id = me.message_id
    WHERE me.namespace = %(ns)s AND me.memory = %(memory)s AND me.merge_within IS NULL
)
SELECT b.id, b.v IS NOT NULL AS embedded, b.seq, n.message_id AS near_id, n.d AS near_distance,
       n.seq AS near_seq, coalesce(p.ords, '{}') AS earlier, coalesce(p.ds, '{}') AS earlier_distances
FROM b
LEFT JOIN LATERAL (
    SELECT d.message_id, d.seq, d.d
    FROM (SELECT a.message_id, a.seq, {{merge_distance}} AS d FROM old AS a) AS d
    WHERE b.v IS NOT NULL AND d.d <= b.within
    ORDER BY d.d, d.seq
    LIMIT 1
) AS n ON true
LEFT JOIN LATERAL (
    SELECT array_agg(d.ord ORDER BY d.ord) AS ords, array_agg(d.d ORDER BY d.ord) AS ds
    FROM (SELECT a.ord, {{merge_distance}} AS d FROM b AS a WHERE a.ord < b.ord AND a.v IS NOT NULL) AS d
    WHERE b.v IS NOT NULL AND d.d <= b.within
) AS p ON true
ORDER BY b.ord;

-- name: merge_near_apply
-- Write a batch's merges as merge_near_batch's caller decided them: the entries of %(merged)s are removed
-- (their messages too when nothing else refers to them: delete_orphans) and each %(survivors)s (the same
-- position) counts their seen_count, last_seen_at = now(); the entries of %(kept)s are decided (they
-- stay). An entry absent from all three (no vector yet) waits for the embedder. One UPDATE for what is
-- counted and what is decided: a statement may change a row once. Returns how many entries it removed.
WITH merged AS (
    SELECT x.id, x.survivor
    FROM unnest(%(merged)s::text[], %(survivors)s::text[]) AS x(id, survivor)
), counted AS (
    SELECT m.survivor, sum(me.seen_count)::int AS seen, now() AS at  -- the clock outside the CASE below
    FROM merged AS m
    JOIN pgmem.memory_entries AS me ON me.namespace = %(ns)s AND me.memory = %(memory)s AND me.message_id = m.id
    GROUP BY m.survivor
), changed AS (
    UPDATE pgmem.memory_entries AS s
    SET seen_count = s.seen_count + coalesce(c.seen, 0),
        last_seen_at = CASE WHEN c.seen IS NULL THEN s.last_seen_at ELSE c.at END,
        merge_within = CASE WHEN k.id IS NULL THEN s.merge_within END
    FROM (SELECT survivor AS id FROM counted UNION SELECT unnest(%(kept)s::text[])) AS t
    LEFT JOIN counted AS c ON c.survivor = t.id
    LEFT JOIN unnest(%(kept)s::text[]) AS k(id) ON k.id = t.id
    WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND s.message_id = t.id
    RETURNING 1
), entry AS (
    DELETE FROM pgmem.memory_entries AS x
    WHERE x.namespace = %(ns)s AND x.memory = %(memory)s AND x.message_id IN (SELECT id FROM merged)
    RETURNING x.message_id, x.seq
), orphan AS (
    {{delete_orphans}}
)
SELECT count(*) FROM entry;
