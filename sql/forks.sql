-- Named queries of forks and marks (pgmem._async.forks, migration 0020): a fork starts as another memory
-- at a point and then diverges without copying an entry; a mark names a point of a memory.

-- name: settle_parent
-- The writers' settle lock of %(memory)s, exclusively (the fragment settle_lock_key), until the transaction
-- ends: a fork runs it before `fork`, in the same transaction (one pipeline). Writers, and removals (the
-- trigger fork_entries_left, migration 0023), hold it shared to commit: once it is granted, every entry
-- numbered so far has committed (or rolled back), every removal so far has committed, and none starts
-- until the fork commits. Its own statement: `fork` then reads in a snapshot taken after the lock (one
-- statement's snapshot is taken before its first lock: writers committing in between were missed).
SELECT pg_advisory_xact_lock({{settle_lock_key}})::text;

-- name: fork
-- Fork %(memory)s into the new memory %(into)s at %(upto)s (NULL: now; a point beyond the parent's newest
-- entry is that entry's: later writes to the parent must not reach the fork), after `settle_parent` in the
-- same transaction: the fork holds exactly the parent's entries up to its point, and its size is theirs.
-- `into` must be new (a unique violation on memories_pkey otherwise: Conflict). Its size is the parent's
-- (as of the point, counted then); it searches with the parent's embedding models and holds the parent's
-- summaries that end at or before the point (`summarised`). Returns (point, size).
WITH src AS MATERIALIZED (
    SELECT mem.key FROM pgmem.memories AS mem
    WHERE mem.namespace = %(ns)s AND mem.key = %(memory)s
), head AS MATERIALIZED (
    SELECT least(%(upto)s::bigint,
                 coalesce((SELECT max(x.seq) FROM {{lineage}} CROSS JOIN LATERAL (
                               SELECT seq FROM pgmem.memory_entries
                               WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto
                               ORDER BY seq DESC LIMIT 1) AS x), 0)) AS upto
    FROM src
), size AS MATERIALIZED (
    SELECT CASE WHEN %(upto)s::bigint IS NULL
                THEN (SELECT coalesce(sum(n), 0)::bigint FROM pgmem.memory_counts
                      WHERE namespace = %(ns)s AND memory = %(memory)s)
                ELSE (SELECT count(*) FROM {{lineage}}
                      JOIN pgmem.memory_entries AS e
                        ON e.namespace = %(ns)s AND e.memory = l.memory AND e.seq <= l.upto) END AS n
    FROM src
), made AS (
    INSERT INTO pgmem.memories (namespace, key) SELECT %(ns)s, %(into)s FROM src
    RETURNING key
), forked AS (
    INSERT INTO pgmem.memory_forks (namespace, memory, parent, upto_seq)
    SELECT %(ns)s, made.key, %(memory)s, head.upto FROM made, head
), counted AS (
    -- A memory deleted before keeps its rows here (no foreign key; its entries' deletions brought their sum
    -- to 0): a fork of the same key adds to them (it failed on shard 0's row, 1 time in 32).
    INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
    SELECT %(ns)s, made.key, 0, size.n FROM made, size
    ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n
), models AS (
    INSERT INTO pgmem.memory_models (namespace, memory, model_id, status)
    SELECT %(ns)s, made.key, mm.model_id, mm.status
    FROM made, pgmem.memory_models AS mm
    WHERE mm.namespace = %(ns)s AND mm.memory = %(memory)s
), summarised AS (
    -- The parent's summaries (every level, stale ones too: their ranges stay taken) that end at or before
    -- the point become the fork's own, as they are now: a few rows (a summary covers many entries), so a
    -- fork keeps them when its parent goes, and the parent's later summaries are not the fork's (README,
    -- "Rewind and branch"). The fork's summariser goes on after them through its lineage.
    INSERT INTO pgmem.summaries (namespace, memory, level, first_seq, last_seq, content, source_chars,
                                 source_tokens, summary_tokens, tokenizer, created_at, stale_at)
    SELECT %(ns)s, made.key, s.level, s.first_seq, s.last_seq, s.content, s.source_chars, s.source_tokens,
           s.summary_tokens, s.tokenizer, s.created_at, s.stale_at
    FROM made, head, pgmem.summaries AS s
    WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND s.last_seq <= head.upto
    ORDER BY s.level, s.first_seq
)
SELECT head.upto, size.n FROM made, head, size;

-- name: materialize
-- Copy what the fork %(memory)s inherits into its own entries and cut it from its parent (nothing for a
-- memory that is no fork, or no longer inherits). Returns the entries copied.
SELECT pgmem.materialize_fork(%(ns)s, %(memory)s);

-- name: removing
-- The first statement of a removal from %(memory)s (sql/messages.sql delete, clear, ...; retention.sql
-- trim, and each entries_batch of a memory's policy; move_oldest's two memories), in the removal's
-- transaction: the memory's writers' settle lock, shared, held until that transaction ends, then
-- `materialize` (what a fork inherits copied in: its removal statement then finds every entry among the
-- fork's own). A fork of %(memory)s being taken holds the lock exclusively until it
-- commits, so the removal's statement, which comes after this one, runs in a snapshot that sees it: the
-- fragment delete_orphans keeps a message the fork inherits, and the trigger fork_entries_left copies the
-- entry into it. In the removal's statement itself the lock came too late: its snapshot predated the fork,
-- the message was deleted as nobody else's, and the trigger then took it out of the committed fork (README,
-- "Concurrency"). A fork taken after waits for the removal to commit and counts without what it removed.
WITH {{settle_shared}}
SELECT pgmem.materialize_fork(%(ns)s, %(memory)s) FROM settle;

-- name: arriving
-- Before move_oldest (sql/messages.sql) moves the oldest entries of %(memory)s into %(to)s, after
-- `removing` of both in its transaction (the two settle locks, shared, taken in key order: two moves in
-- opposite directions, each beside a fork, cannot deadlock). The moved entries keep their sequence numbers,
-- older than %(to)s's newest: a fork of %(to)s whose point is at or past the oldest of %(memory)s would
-- inherit them through its lineage, though they arrived after it was taken (its size without them). Each
-- such fork is materialised first (what it inherited copied in, cut from %(to)s: it holds %(to)s as it was
-- when taken; a grandchild reads it through the copy). A statement of its own after the lock: a fork of
-- %(to)s that committed while the lock waited is seen here; one taken after the move commits holds the
-- moved entries, counted. One probe of memory_forks_parent_idx when %(to)s has no fork. Returns the entries
-- copied.
SELECT coalesce(sum(pgmem.materialize_fork(%(ns)s, f.memory)), 0)::bigint
FROM (SELECT f.memory FROM pgmem.memory_forks AS f
      WHERE f.namespace = %(ns)s AND f.parent = %(to)s AND f.materialized_at IS NULL
        AND f.upto_seq >= (SELECT min(e.seq) FROM pgmem.memory_entries AS e
                           WHERE e.namespace = %(ns)s AND e.memory = %(memory)s)
      ORDER BY f.memory) AS f;

-- name: inherits
-- Whether %(memory)s is a fork that still reads its parent's entries (a removal then materialises it first).
SELECT EXISTS (SELECT 1 FROM pgmem.memory_forks
               WHERE namespace = %(ns)s AND memory = %(memory)s AND materialized_at IS NULL);

-- name: mark
-- Name the current point of %(memory)s: the high-water sequence number of its lineage (what a read then
-- sees). Nothing when the memory does not exist; a unique violation when the name is taken (Conflict).
-- Returns (seq, marked_at).
WITH src AS MATERIALIZED (
    SELECT mem.key FROM pgmem.memories AS mem WHERE mem.namespace = %(ns)s AND mem.key = %(memory)s
)
INSERT INTO pgmem.memory_marks (namespace, memory, name, seq)
SELECT %(ns)s, src.key, %(name)s,
       coalesce((SELECT max(x.seq) FROM {{lineage}} CROSS JOIN LATERAL (
                     SELECT seq FROM pgmem.memory_entries
                     WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto
                     ORDER BY seq DESC LIMIT 1) AS x), 0)
FROM src
RETURNING seq, marked_at;

-- name: marks
-- The marks of %(memory)s, oldest first: (name, seq, marked_at).
SELECT name, seq, marked_at FROM pgmem.memory_marks
WHERE namespace = %(ns)s AND memory = %(memory)s
ORDER BY seq, name;

-- name: mark_seq
-- The point of the mark %(name)s of %(memory)s (no row: no such mark): its own, else one a fork inherits (a
-- mark of a memory of its lineage at or below the fork's point).
SELECT mk.seq FROM {{lineage}}
JOIN pgmem.memory_marks AS mk ON mk.namespace = %(ns)s AND mk.memory = l.memory AND mk.name = %(name)s
WHERE mk.seq <= l.upto
ORDER BY l.memory = %(memory)s DESC, mk.seq DESC
LIMIT 1;

-- name: time_seq
-- The point of %(memory)s at the time %(at)s: the newest entry of its lineage added at or before it (0:
-- none). Each range is walked backwards from its newest entry until one old enough.
SELECT coalesce(max(x.seq), 0) FROM {{lineage}} CROSS JOIN LATERAL (
    SELECT seq FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto AND added_at <= %(at)s
    ORDER BY seq DESC LIMIT 1) AS x;

-- name: fork_info
-- The fork row of %(memory)s: (parent, upto_seq, forked_at, materialized_at); no row: not a fork.
SELECT parent, upto_seq, forked_at, materialized_at FROM pgmem.memory_forks
WHERE namespace = %(ns)s AND memory = %(memory)s;
