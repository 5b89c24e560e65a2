-- Named queries of the summary repository (pgmem._async.summaries), loaded once by
-- pgmem.planning.statements.
--
-- A level-1 summary covers a range of memory_entries.seq; a level-n summary (n >= 2) covers the range of
-- its level n-1 children. "Not yet summarised" means after the last range of the level below: a new
-- summary never covers a message (or a summary) twice.
--
-- A stale summary (stale_at set: a message it covered was forgotten, pgmem._async.retention) keeps its
-- range, so nothing summarises that range again, but its content was emptied and no read serves it:
-- `list`, `frontier` and `unrolled` skip it; `recompute` rebuilds it from what is left of its range.

-- fragment: summary_columns
-- A summary row (pgmem.planning.rows.SummaryRow), for the alias s (pgmem.summaries).
s.id, s.level, s.first_seq, s.last_seq, s.content, s.source_chars, s.source_tokens, s.summary_tokens,
s.tokenizer, s.created_at

-- name: settle
-- The highest entry sequence number that is final for the memory: every entry numbered up to it has
-- committed or rolled back. Writers hold a shared advisory lock on the memory from before they draw a
-- number until they commit (the fragment settle_shared); taking it exclusively waits for them, and while
-- it is held nobody draws a number. Run in its own transaction: the lock is released at once.
WITH settled AS MATERIALIZED (
    SELECT pg_advisory_xact_lock({{settle_lock_key}})::text AS locked  -- void, cast: Citus materialises CTEs
)
SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgmem.memory_entries', 'seq')::regclass), 0)
FROM settled;

-- name: unsummarized
-- The memory's messages after its last level-1 summary (and after %(after)s), up to %(upto)s (a settled
-- sequence number, NULL: no bound), oldest first. A fork's are read through its lineage ({{lineage}}): it
-- summarises what it inherits after the summaries it took from its parent (sql/forks.sql, fork). A memory
-- that is no fork is read by its own entries (one branch runs, as in by_role): through the lineage's rows
-- the planner hash-joined every message of the namespace, 48 ms for a memory of 50 beside one of 100k.
-- Each branch takes its own first %(limit)s in seq order, with the bound as a parameter (not a join with
-- `done`): the own branch then reads the memory's entries in index order and stops; sorted as one, the
-- union read all of them first (200 of a 100k memory: 104-148 ms, now 1.9-3.4 ms).
WITH done AS MATERIALIZED (
    SELECT greatest(%(after)s::bigint,
                    coalesce((SELECT max(s.last_seq) FROM pgmem.summaries AS s
                              WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND s.level = 1), 0)) AS seq
)
(SELECT e.seq, {{message_columns}}
 FROM {{own_messages}}
 WHERE e.seq > (SELECT seq FROM done) AND {{not_a_fork}}
 ORDER BY e.seq
 LIMIT %(limit)s)
UNION ALL
(SELECT e.seq, {{message_columns}}
 FROM {{lineage_messages}}
 WHERE e.seq > (SELECT seq FROM done) AND NOT {{not_a_fork}}
 ORDER BY e.seq
 LIMIT %(limit)s)
ORDER BY seq
LIMIT %(limit)s;

-- name: unrolled
-- Summaries of one level that no summary of the next level covers yet, oldest first.
SELECT {{summary_columns}}
FROM pgmem.summaries AS s
WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND s.level = %(level)s AND s.stale_at IS NULL
  AND s.first_seq > coalesce((SELECT max(p.last_seq) FROM pgmem.summaries AS p
                              WHERE p.namespace = %(ns)s AND p.memory = %(memory)s
                                AND p.level = %(level)s + 1), 0)
ORDER BY s.first_seq;

-- name: insert
-- Store a summary unless its range starts at or before the end of a summary of the same level (a
-- concurrent summariser got there first: no row is returned). The memory must exist.
INSERT INTO pgmem.summaries AS s (namespace, memory, level, first_seq, last_seq, content, source_chars,
                                  source_tokens, summary_tokens, tokenizer)
SELECT %(ns)s, %(memory)s, %(level)s, %(first_seq)s, %(last_seq)s, %(content)s, %(source_chars)s,
       %(source_tokens)s, %(summary_tokens)s, %(tokenizer)s
WHERE EXISTS (SELECT 1 FROM pgmem.memories WHERE namespace = %(ns)s AND key = %(memory)s)
  AND %(first_seq)s::bigint > coalesce((SELECT max(p.last_seq) FROM pgmem.summaries AS p
                                        WHERE p.namespace = %(ns)s AND p.memory = %(memory)s
                                          AND p.level = %(level)s), 0)
ON CONFLICT (namespace, memory, level, first_seq) DO NOTHING
RETURNING {{summary_columns}};

-- name: memory_exists
SELECT EXISTS (SELECT 1 FROM pgmem.memories WHERE namespace = %(ns)s AND key = %(memory)s);

-- name: list
-- Every summary of a memory that is not stale (of one level when %(level)s is not NULL), by level then
-- range.
SELECT {{summary_columns}}
FROM pgmem.summaries AS s
WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND (%(level)s::smallint IS NULL OR s.level = %(level)s)
  AND s.stale_at IS NULL
ORDER BY s.level, s.first_seq;

-- name: frontier
-- The summaries no higher-level summary covers, in range order: together they summarise everything
-- summarised so far, each message once. Stale ones are left out; a summary under a stale parent takes
-- its place.
SELECT {{summary_columns}}
FROM pgmem.summaries AS s
WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND s.stale_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM pgmem.summaries AS p
                  WHERE p.namespace = %(ns)s AND p.memory = s.memory AND p.level = s.level + 1
                    AND s.first_seq BETWEEN p.first_seq AND p.last_seq AND p.stale_at IS NULL)
ORDER BY s.first_seq, s.level DESC;

-- name: delete_all
-- Forget a memory's summaries (the messages stay). Returns how many were deleted.
WITH gone AS (
    DELETE FROM pgmem.summaries WHERE namespace = %(ns)s AND memory = %(memory)s RETURNING 1
)
SELECT count(*) FROM gone;

-- name: level_end
-- The end of the last summary of a level (0 when there is none).
SELECT coalesce(max(last_seq), 0) FROM pgmem.summaries
WHERE namespace = %(ns)s AND memory = %(memory)s AND level = %(level)s;

-- name: stale
-- The memory's stale summaries (content emptied), lowest level first, then by range, with when each was
-- marked: what `recompute` rebuilds.
SELECT {{summary_columns}}, s.stale_at
FROM pgmem.summaries AS s
WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND s.stale_at IS NOT NULL
ORDER BY s.level, s.first_seq;

-- name: range_messages
-- What is left of a stale level-1 summary's range: the memory's messages numbered %(first)s..%(last)s,
-- through its lineage (a fork's summary may cover what it inherits).
SELECT e.seq, {{message_columns}}
FROM {{lineage_messages}}
WHERE e.seq BETWEEN %(first)s AND %(last)s
ORDER BY e.seq;

-- name: range_children
-- What is left of a stale level-n summary's range: its level n-1 children that are not stale.
SELECT {{summary_columns}}
FROM pgmem.summaries AS s
WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND s.level = %(level)s - 1
  AND s.first_seq BETWEEN %(first)s AND %(last)s AND s.stale_at IS NULL
ORDER BY s.first_seq;

-- name: refresh
-- Store the recomputed content of a stale summary, unless it was marked stale again meanwhile (another
-- forget: its range must be read again). Returns the summary.
UPDATE pgmem.summaries AS s
SET content = %(content)s, source_chars = %(source_chars)s, source_tokens = %(source_tokens)s,
    summary_tokens = %(summary_tokens)s, tokenizer = %(tokenizer)s, stale_at = NULL
WHERE s.namespace = %(ns)s AND s.memory = %(memory)s AND s.id = %(id)s AND s.stale_at = %(stale_at)s
RETURNING {{summary_columns}};

-- name: drop_stale
-- A stale summary with nothing left in its range goes. Returns how many (0: it changed meanwhile).
WITH gone AS (
    DELETE FROM pgmem.summaries
    WHERE namespace = %(ns)s AND memory = %(memory)s AND id = %(id)s AND stale_at = %(stale_at)s
    RETURNING 1
)
SELECT count(*) FROM gone;
