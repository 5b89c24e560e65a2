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
-- Exactly one of the two is not NULL, and least() ignores NULLs: it is that one. (Not coalesce(): a
-- distributed planner refuses the clock inside COALESCE or CASE.)
least(%(before)s::timestamptz, now() - %(age)s::float8 * interval '1 second')

-- fragment: gone_refs
-- A CTE after `gone` (archive rows deleted, RETURNING batch, message_ids): their pgmem.queue_archive_refs.
gone_refs AS (
    DELETE FROM pgmem.queue_archive_refs AS r
    USING (SELECT g.batch, unnest(g.message_ids) AS message_id FROM gone AS g) AS x
    WHERE r.namespace = %(ns)s AND r.message_id = x.message_id AND r.batch = x.batch
)

-- fragment: kept_archive_refs
-- A condition on `g.message_id` (a message of the deleted archive rows `gone`): no archive row this
-- statement keeps names it. By key in pgmem.queue_archive_refs; the statement's snapshot still shows the
-- rows it deletes, so those are excluded by batch.
AND NOT EXISTS (SELECT 1 FROM pgmem.queue_archive_refs AS a
                WHERE a.namespace = %(ns)s AND a.message_id = g.message_id
                  AND a.batch NOT IN (SELECT batch FROM gone))

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
    RETURNING batch, message_ids
), {{gone_refs}}, orphan AS (
    DELETE FROM pgmem.messages AS m
    USING (SELECT DISTINCT unnest(message_ids) AS message_id FROM gone) AS g
    WHERE m.namespace = %(ns)s AND m.id = g.message_id
      AND NOT EXISTS (SELECT 1 FROM pgmem.memory_entries AS e
                      WHERE e.namespace = %(ns)s AND e.message_id = g.message_id)
      AND NOT EXISTS (SELECT 1 FROM pgmem.queue_items AS q
                      WHERE q.namespace = %(ns)s AND q.message_id = g.message_id)
      {{kept_archive_refs}}
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
-- Own entries only: a removal (the caller materialises a fork first: pgmem.materialize_fork).
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
    RETURNING message_id, seq
), orphan AS (
    {{delete_orphans}}
)
SELECT count(*) AS removed FROM entry;

-- name: trim_before
-- Own entries only: a removal (the caller materialises a fork first: pgmem.materialize_fork).
-- Remove the entries of the memory %(memory)s added before the cutoff (and their messages when nothing
-- else refers to them). Returns the entries removed.
WITH entry AS (
    DELETE FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s AND added_at < {{cutoff}}
    RETURNING message_id, seq
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

-- ==== forget (AsyncRetention.forget): every copy of some messages, in the caller's one transaction ====
-- The selectors lock the messages they pick (FOR UPDATE, in id order: two forgets never deadlock on one
-- another, and a writer adding one of them to a memory waits, then fails its foreign key check); the
-- statements after them take the ids picked (`ids`), and each returns how many rows it changed.

-- name: forget_select_ids
-- The messages of the namespace among %(ids)s.
SELECT id FROM pgmem.messages
WHERE namespace = %(ns)s AND id = ANY(%(ids)s::text[])
ORDER BY id
FOR UPDATE;

-- name: forget_select_memory
-- Every message the memory %(memory)s holds (wherever else it is referenced): a fork's through its
-- lineage (what it inherits is forgotten too, as everything a forget names: everywhere). A memory that is
-- no fork by its own entries (one branch runs, as in by_role): through the lineage's rows alone the
-- planner scanned every entry of the namespace.
SELECT m.id FROM pgmem.messages AS m
WHERE m.namespace = %(ns)s
  AND m.id IN (SELECT e.message_id FROM pgmem.memory_entries AS e
               WHERE e.namespace = %(ns)s AND e.memory = %(memory)s AND {{not_a_fork}}
               UNION ALL
               SELECT e.message_id FROM pgmem.lineage(%(ns)s, %(memory)s, NULL) AS l
               JOIN pgmem.memory_entries AS e
                 ON e.namespace = %(ns)s AND e.memory = l.memory AND e.seq <= l.upto
               WHERE NOT {{not_a_fork}})
ORDER BY m.id
FOR UPDATE OF m;

-- name: forget_select_sender
-- Every message sent by %(sender)s (messages.sent_from; on messages_sent_from_idx).
SELECT id FROM pgmem.messages
WHERE namespace = %(ns)s AND sent_from = %(sender)s
ORDER BY id
FOR UPDATE;

-- name: forget_select_subject
-- Every message whose metadata has the top-level key "subject" equal to the string %(subject)s
-- (metadata @> {"subject": ...}), through pgmem.@> (migration 0016: leakproof where a superuser migrated),
-- which messages_metadata_idx serves under row-level security: the built-in @> read every message of the
-- namespace.
SELECT id FROM pgmem.messages
WHERE namespace = %(ns)s AND metadata OPERATOR(pgmem.@>) jsonb_build_object('subject', %(subject)s::text)
ORDER BY id
FOR UPDATE;

-- name: forget_lock_holders
-- The writers' settle lock (28781: the fragment settle_lock_key), shared, of every memory that holds a
-- forgotten message: each memory with an entry of it and each fork that inherits one (its parent's entry
-- at or below its point, recursively). A fork takes its parent's lock exclusively (sql/forks.sql), so
-- none can be taken of a locked memory until the forget commits; it then counts, and copies summaries,
-- without the message. Run before anything of the forget reads the forks, until the memories it returns
-- stop growing (pgmem._async.retention): each run's snapshot is taken after the previous run's locks, so a
-- fork committed while they were taken is seen, and locked, by the next (a grandchild taken of a fork
-- while its grandparent forgets: migration 0023 locked only the memories the entries leave, after the
-- stale summaries were marked). Returns the memories locked.
WITH RECURSIVE holder (memory, seq, depth) AS (
    SELECT e.memory, e.seq, 0 FROM pgmem.memory_entries AS e
    WHERE e.namespace = %(ns)s AND e.message_id = ANY(%(ids)s::text[])
    UNION ALL
    SELECT f.memory, h.seq, h.depth + 1
    FROM holder AS h JOIN pgmem.memory_forks AS f
      ON f.namespace = %(ns)s AND f.parent = h.memory AND f.materialized_at IS NULL AND h.seq <= f.upto_seq
    WHERE h.depth < 64
), held AS MATERIALIZED (
    SELECT DISTINCT h.memory FROM holder AS h ORDER BY h.memory
)
SELECT held.memory, pg_advisory_xact_lock_shared(28781, hashtext(%(ns)s || '/' || held.memory))::text AS locked
FROM held
ORDER BY held.memory;

-- name: forget_stale_summaries
-- Summaries (every level) whose range of entries covers an entry of a forgotten message: marked stale, their
-- content (which may quote the message) emptied. A level-n summary's range spans its children's, so a
-- seq inside it is covered at every level. Run before the entries go. A fork that inherits the entry (its
-- parent's, at or below its point, recursively: migration 0020) holds it too, and may hold a summary of it
-- (taken from its parent when forked, or its own): `holder` follows the forks down.
WITH RECURSIVE holder (memory, seq, depth) AS (
    SELECT e.memory, e.seq, 0 FROM pgmem.memory_entries AS e
    WHERE e.namespace = %(ns)s AND e.message_id = ANY(%(ids)s::text[])
    UNION ALL
    SELECT f.memory, h.seq, h.depth + 1
    FROM holder AS h JOIN pgmem.memory_forks AS f
      ON f.namespace = %(ns)s AND f.parent = h.memory AND f.materialized_at IS NULL AND h.seq <= f.upto_seq
    WHERE h.depth < 64
), hit AS (
    SELECT DISTINCT s.memory, s.id
    FROM holder AS e
    JOIN pgmem.summaries AS s
      ON s.namespace = %(ns)s AND s.memory = e.memory AND e.seq BETWEEN s.first_seq AND s.last_seq
    WHERE s.stale_at IS NULL
), marked AS (
    UPDATE pgmem.summaries AS s SET stale_at = now(), content = ''
    FROM hit
    WHERE s.namespace = %(ns)s AND s.memory = hit.memory AND s.id = hit.id
    RETURNING 1
)
SELECT count(*) FROM marked;

-- name: forget_brain_summaries
-- A BrainMemory's historical summary (and last talk, when it is a forgotten message's text) is a copy
-- too: a brain whose history (the memory b.key; knowledge is never summarised) held a forgotten message
-- loses its summary, and its remaining history reads as unsummarised again (summarized_seq 0) until it is
-- compressed anew. A brain whose history is a fork that inherits the message (its parent's entry at or
-- below its point, recursively) held it too: `holder` follows the forks down, as forget_stale_summaries.
WITH RECURSIVE holder (memory, seq, depth) AS (
    SELECT e.memory, e.seq, 0 FROM pgmem.memory_entries AS e
    WHERE e.namespace = %(ns)s AND e.message_id = ANY(%(ids)s::text[])
    UNION ALL
    SELECT f.memory, h.seq, h.depth + 1
    FROM holder AS h JOIN pgmem.memory_forks AS f
      ON f.namespace = %(ns)s AND f.parent = h.memory AND f.materialized_at IS NULL AND h.seq <= f.upto_seq
    WHERE h.depth < 64
), reset AS (
    UPDATE pgmem.brain_memories AS b
    SET historical_summary = '', summarized_seq = 0,
        last_talk = CASE WHEN b.last_talk IN (SELECT m.content FROM pgmem.messages AS m
                                             WHERE m.namespace = %(ns)s AND m.id = ANY(%(ids)s::text[]))
                         THEN NULL ELSE b.last_talk END,
        updated_at = now()
    WHERE b.namespace = %(ns)s
      AND b.key IN (SELECT memory FROM holder)
      AND (b.historical_summary <> '' OR b.summarized_seq <> 0 OR b.last_talk IS NOT NULL)
    RETURNING 1
)
SELECT count(*) FROM reset;

-- name: forget_retrieval_log
-- Logged searches that returned a forgotten message (on retrieval_log_message_idx).
WITH gone AS (
    DELETE FROM pgmem.retrieval_log
    WHERE namespace = %(ns)s AND message_ids && %(ids)s::text[]
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: forget_recall_samples
-- Sampled searches (pgmem.recall_samples) that served a forgotten message or found it exactly (on their
-- GIN indexes): the sample goes whole, its query may have been the message's own vector.
WITH gone AS (
    DELETE FROM pgmem.recall_samples
    WHERE namespace = %(ns)s AND (served_ids && %(ids)s::text[] OR exact_ids && %(ids)s::text[])
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: forget_queue_items
-- Live queue items carrying a forgotten message: ready, leased or dead, inbox deliveries included.
WITH gone AS (
    DELETE FROM pgmem.queue_items
    WHERE namespace = %(ns)s AND message_id = ANY(%(ids)s::text[])
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: forget_queue_archive
-- Archived (acknowledged) items of a forgotten message: each archive row naming one (found through
-- pgmem.queue_archive_refs) is rewritten without those items (its arrays filtered by position), or deleted
-- when nothing else is left in it; the forgotten messages' refs go. Returns the items removed.
WITH hit AS (
    SELECT b.batch, cardinality(b.ids) AS n FROM pgmem.queue_archive_batches AS b
    WHERE b.namespace = %(ns)s
      AND b.batch IN (SELECT r.batch FROM pgmem.queue_archive_refs AS r
                      WHERE r.namespace = %(ns)s AND r.message_id = ANY(%(ids)s::text[]))
    FOR UPDATE
), forgotten_refs AS (
    DELETE FROM pgmem.queue_archive_refs AS r
    WHERE r.namespace = %(ns)s AND r.message_id = ANY(%(ids)s::text[])
), kept AS (
    SELECT b.batch, array_agg(b.ids[i] ORDER BY i) AS ids, array_agg(b.message_ids[i] ORDER BY i) AS message_ids,
           array_agg(b.priorities[i] ORDER BY i) AS priorities, array_agg(b.enqueued_at[i] ORDER BY i) AS enqueued_at,
           array_agg(b.claimed_at[i] ORDER BY i) AS claimed_at, array_agg(b.attempts[i] ORDER BY i) AS attempts,
           array_agg(b.claimed_by[i] ORDER BY i) AS claimed_by, array_agg(b.dedup_keys[i] ORDER BY i) AS dedup_keys
    FROM pgmem.queue_archive_batches AS b
    JOIN hit ON hit.batch = b.batch
    CROSS JOIN LATERAL generate_subscripts(b.message_ids, 1) AS i
    WHERE b.namespace = %(ns)s AND b.message_ids[i] <> ALL(%(ids)s::text[])
    GROUP BY b.batch
), rewritten AS (
    UPDATE pgmem.queue_archive_batches AS b
    SET ids = kept.ids, message_ids = kept.message_ids, priorities = kept.priorities,
        enqueued_at = kept.enqueued_at, claimed_at = kept.claimed_at, attempts = kept.attempts,
        claimed_by = kept.claimed_by, dedup_keys = kept.dedup_keys
    FROM kept
    WHERE b.namespace = %(ns)s AND b.batch = kept.batch
    RETURNING b.batch, cardinality(kept.ids) AS left_over
), emptied AS (
    DELETE FROM pgmem.queue_archive_batches AS b
    WHERE b.namespace = %(ns)s AND b.batch IN (SELECT batch FROM hit)
      AND b.batch NOT IN (SELECT batch FROM kept)
    RETURNING b.batch
)
SELECT coalesce((SELECT sum(n) FROM hit), 0)
       - coalesce((SELECT sum(left_over) FROM rewritten), 0) AS removed;

-- name: forget_store_files
-- A file store's index of a file (pgmem.store_files) lists its chunks' message ids with the file's hash:
-- a forgotten chunk leaves the list, and the hash becomes one no file has, so the store's next refresh
-- re-indexes the file if it is still there (its chunks are read again from the file: forgetting cannot
-- reach the file itself) and drops its remaining chunks if it is gone. Returns the files touched.
WITH hit AS (
    UPDATE pgmem.store_files AS f
    SET chunk_ids = ARRAY(SELECT u.c FROM unnest(f.chunk_ids) WITH ORDINALITY AS u(c, i)
                          WHERE u.c <> ALL(%(ids)s::text[]) ORDER BY u.i),
        sha256 = decode(repeat('00', 32), 'hex')
    WHERE f.namespace = %(ns)s AND f.chunk_ids && %(ids)s::text[]
    RETURNING 1
)
SELECT count(*) FROM hit;

-- name: forget_entries
-- The forgotten messages' entries in every memory (the trigger memory_entries_removed logs their vectors
-- leaving each memory and announces it: every process's FAISS cache drops them). One row per memory:
-- (memory, entries removed).
WITH gone AS (
    DELETE FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND message_id = ANY(%(ids)s::text[])
    RETURNING memory
)
SELECT memory, count(*) FROM gone GROUP BY memory ORDER BY memory;

-- name: forget_outbox
-- Embeddings still waiting to be computed for them.
WITH gone AS (
    DELETE FROM pgmem.embedding_outbox
    WHERE namespace = %(ns)s AND message_id = ANY(%(ids)s::text[])
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: forget_embeddings
-- Their vectors, every model (the messages' delete would cascade to them; deleted here to count them).
WITH gone AS (
    DELETE FROM pgmem.embeddings
    WHERE namespace = %(ns)s AND message_id = ANY(%(ids)s::text[])
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: forget_messages
-- The message rows.
WITH gone AS (
    DELETE FROM pgmem.messages
    WHERE namespace = %(ns)s AND id = ANY(%(ids)s::text[])
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: audit
-- The audit row of a forget or a retention run: who (current_user, the caller's %(label)s), when, what
-- scope and how many rows per table (JSON objects the caller built from ids and names, never content).
INSERT INTO pgmem.forget_audit (namespace, actor, label, scope, counts)
VALUES (%(ns)s, current_user, %(label)s, %(scope)s::jsonb, %(counts)s::jsonb)
RETURNING id;

-- ==== retention policies (AsyncRetention.set_policy, policies, remove_policy, run) ====

-- name: set_policy
-- Create or replace the policy of (%(target)s, %(scope)s).
INSERT INTO pgmem.retention_policies AS p (namespace, scope, target, max_age, max_count, updated_at)
VALUES (%(ns)s, %(scope)s, %(target)s, make_interval(secs => %(max_age)s::float8), %(max_count)s::bigint, now())
ON CONFLICT (namespace, target, scope) DO UPDATE
SET max_age = excluded.max_age, max_count = excluded.max_count, updated_at = excluded.updated_at
RETURNING p.target, p.scope, p.max_age, p.max_count, p.created_at, p.updated_at;

-- name: policies
-- The namespace's policies (of one target when %(target)s is not NULL), by target then scope.
SELECT p.target, p.scope, p.max_age, p.max_count, p.created_at, p.updated_at
FROM pgmem.retention_policies AS p
WHERE p.namespace = %(ns)s AND (%(target)s::text IS NULL OR p.target = %(target)s::text)
ORDER BY p.target, p.scope;

-- name: remove_policy
WITH gone AS (
    DELETE FROM pgmem.retention_policies
    WHERE namespace = %(ns)s AND target = %(target)s AND scope = %(scope)s
    RETURNING 1
)
SELECT count(*) FROM gone;

-- The batches of a policy run. Each is one short transaction of at most `limit` rows (messages,
-- entries, archive rows, summaries, logged searches or vector log rows), oldest first. Rows are picked
-- with SKIP LOCKED: a row a writer holds is left for the next batch or run, never waited for. A count
-- bound is computed once per run by the *_bound statement: the newest rows beyond it only push it further
-- up, so what it marks stays deletable for the whole run. A NULL age or bound disables that half of a
-- statement (the age or the count): each batch statement serves both.

-- fragment: policy_cutoff
-- The age cutoff of a policy batch: NULL (no age limit) when %(age)s is NULL.
now() - %(age)s::float8 * interval '1 second'

-- name: messages_bound
-- The seq of the newest message beyond the newest %(keep)s of the namespace (NULL: there are not more).
SELECT seq FROM pgmem.messages WHERE namespace = %(ns)s ORDER BY seq DESC OFFSET %(keep)s LIMIT 1;

-- name: messages_batch
-- Up to %(limit)s messages of the namespace created before the cutoff or at or below the bound, oldest
-- first, that no queue is still to deliver (a ready or leased item keeps its message until it is acked,
-- dead-lettered or cleared). Their ids go to the forget statements.
SELECT m.id FROM pgmem.messages AS m
WHERE m.namespace = %(ns)s
  AND (m.created_at < {{policy_cutoff}} OR m.seq <= %(bound)s::bigint)
  AND NOT EXISTS (SELECT 1 FROM pgmem.queue_items AS q
                  WHERE q.namespace = %(ns)s AND q.message_id = m.id AND q.status = 'ready')
ORDER BY m.seq
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: entries_bound
-- Own entries only: the bound of a removal (entries_batch; the fork is materialised first).
-- The seq of the newest entry of the memory %(memory)s beyond its newest %(keep)s (NULL: none).
SELECT seq FROM pgmem.memory_entries WHERE namespace = %(ns)s AND memory = %(memory)s
ORDER BY seq DESC OFFSET %(keep)s LIMIT 1;

-- name: entries_batch
-- Own entries only: a removal (the caller materialises a fork first: pgmem.materialize_fork), after
-- sql/forks.sql `removing` in its transaction (a fork of %(memory)s being taken keeps what it inherits).
-- Up to %(limit)s entries of the memory %(memory)s added before the cutoff or at or below the bound,
-- oldest first, taken out of it; their messages go too when nothing else refers to them. Returns the
-- entries removed.
WITH target AS (
    SELECT message_id FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s
      AND (added_at < {{policy_cutoff}} OR seq <= %(bound)s::bigint)
    ORDER BY seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), entry AS (
    DELETE FROM pgmem.memory_entries AS e USING target
    WHERE e.namespace = %(ns)s AND e.memory = %(memory)s AND e.message_id = target.message_id
    RETURNING e.message_id, e.seq
), orphan AS (
    {{delete_orphans}}
)
SELECT count(*) FROM entry;

-- name: archive_bound
-- The newest archive row of the queue %(queue)s (NULL: every queue) whose newer rows already hold
-- %(keep)s items: it and every older row can go, and at least the newest %(keep)s items stay (a row is
-- removed whole). NULL when there is none.
SELECT batch FROM (
    SELECT batch, cardinality(ids) AS n,
           sum(cardinality(ids)) OVER (ORDER BY batch DESC) AS upto
    FROM pgmem.queue_archive_batches
    WHERE namespace = %(ns)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
) AS running
WHERE upto - n >= %(keep)s
ORDER BY batch DESC
LIMIT 1;

-- name: archive_batch
-- Up to %(limit)s archive rows of the queue %(queue)s (NULL: every queue) acknowledged before the cutoff
-- or at or below the bound, with the messages nothing refers to any more (as purge_queue_archive).
-- Returns the items removed.
WITH target AS (
    SELECT batch FROM pgmem.queue_archive_batches
    WHERE namespace = %(ns)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (acked_at < {{policy_cutoff}} OR batch <= %(bound)s::bigint)
    ORDER BY batch
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM pgmem.queue_archive_batches AS a USING target
    WHERE a.namespace = %(ns)s AND a.batch = target.batch
    RETURNING a.batch, a.message_ids
), {{gone_refs}}, orphan AS (
    DELETE FROM pgmem.messages AS m
    USING (SELECT DISTINCT unnest(message_ids) AS message_id FROM gone) AS g
    WHERE m.namespace = %(ns)s AND m.id = g.message_id
      AND NOT EXISTS (SELECT 1 FROM pgmem.memory_entries AS e
                      WHERE e.namespace = %(ns)s AND e.message_id = g.message_id)
      AND NOT EXISTS (SELECT 1 FROM pgmem.queue_items AS q
                      WHERE q.namespace = %(ns)s AND q.message_id = g.message_id)
      {{kept_archive_refs}}
)
SELECT coalesce(sum(cardinality(message_ids)), 0) AS removed FROM gone;

-- name: summaries_bound
-- The id of the newest summary beyond the newest %(keep)s of the memory %(memory)s (NULL: the namespace).
SELECT id FROM pgmem.summaries
WHERE namespace = %(ns)s AND (%(memory)s::text IS NULL OR memory = %(memory)s::text)
ORDER BY id DESC OFFSET %(keep)s LIMIT 1;

-- name: summaries_batch
-- Up to %(limit)s summaries of the memory %(memory)s (NULL: the namespace) created before the cutoff or
-- at or below the bound, oldest first. Returns the summaries removed.
WITH target AS (
    SELECT memory, id FROM pgmem.summaries
    WHERE namespace = %(ns)s AND (%(memory)s::text IS NULL OR memory = %(memory)s::text)
      AND (created_at < {{policy_cutoff}} OR id <= %(bound)s::bigint)
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM pgmem.summaries AS s USING target
    WHERE s.namespace = %(ns)s AND s.memory = target.memory AND s.id = target.id
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: retrieval_log_bound
-- The id of the newest logged search beyond the newest %(keep)s of the memory %(memory)s (NULL: the
-- namespace).
SELECT id FROM pgmem.retrieval_log
WHERE namespace = %(ns)s AND (%(memory)s::text IS NULL OR memory = %(memory)s::text)
ORDER BY id DESC OFFSET %(keep)s LIMIT 1;

-- name: retrieval_log_batch
-- Up to %(limit)s logged searches of the memory %(memory)s (NULL: the namespace) logged before the cutoff
-- or at or below the bound, oldest first. Returns the rows removed.
WITH target AS (
    SELECT id FROM pgmem.retrieval_log
    WHERE namespace = %(ns)s AND (%(memory)s::text IS NULL OR memory = %(memory)s::text)
      AND (logged_at < {{policy_cutoff}} OR id <= %(bound)s::bigint)
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM pgmem.retrieval_log AS r USING target
    WHERE r.namespace = %(ns)s AND r.id = target.id
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: vector_log_batch
-- Up to %(limit)s vector log rows of the memory %(memory)s (NULL: every memory of the namespace), taken
-- from the front of each memory's log, as purge_vector_log keeps it: what stays of a memory is every
-- revision from some revision on, at least its newest one. A row goes when it was logged before the
-- cutoff with no older revision logged since, or when it is not among the memory's newest %(keep)s
-- revisions (count: per memory, whatever the scope; NULL: no count limit).
WITH mem AS (
    SELECT key, vec_rev FROM pgmem.memories
    WHERE namespace = %(ns)s AND (%(memory)s::text IS NULL OR key = %(memory)s::text)
), bound AS (
    SELECT mem.key AS memory,
           greatest(CASE WHEN %(age)s::float8 IS NULL THEN NULL
                         ELSE least(mem.vec_rev, coalesce(recent.rev, mem.vec_rev)) END,
                    CASE WHEN %(keep)s::bigint IS NULL THEN NULL
                         ELSE mem.vec_rev - greatest(%(keep)s::bigint, 1) + 1 END) AS keep_from
    FROM mem
    LEFT JOIN LATERAL (
        SELECT l.rev FROM pgmem.vector_log AS l
        WHERE l.namespace = %(ns)s AND l.memory = mem.key AND l.logged_at >= {{policy_cutoff}}
        ORDER BY l.rev
        LIMIT 1
    ) AS recent ON true
), target AS (
    SELECT l.memory, l.rev FROM pgmem.vector_log AS l
    JOIN bound ON l.namespace = %(ns)s AND l.memory = bound.memory AND l.rev < bound.keep_from
    ORDER BY l.memory, l.rev
    LIMIT %(limit)s
), gone AS (
    DELETE FROM pgmem.vector_log AS l USING target
    WHERE l.namespace = %(ns)s AND l.memory = target.memory AND l.rev = target.rev
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: expired_namespaces
-- The namespaces with expired brains (an administrator's query: pgmem.admin.purge_expired).
SELECT DISTINCT namespace FROM pgmem.brain_memories
WHERE expires_at IS NOT NULL AND expires_at <= now()
ORDER BY 1;

-- name: policy_namespaces
-- The namespaces with a retention policy (an administrator's query: `pgmem retention run --all-namespaces`).
SELECT DISTINCT namespace FROM pgmem.retention_policies ORDER BY 1;

-- name: item_history_batch
-- Up to %(limit)s versions of the namespace's items (pgmem.item_history, migration 0022) replaced or
-- deleted before the policy's cutoff, oldest first (on item_history_valid_to_idx). Returns how many.
-- The locked rows are deleted by ctid (tideq is leakproof: a TID scan per row under row-level security).
-- By path and key, text[]'s comparison made no index condition and every batch hashed every version
-- of the namespace: 10 ms a batch of 1,000 beside 40k versions, 2 ms by ctid.
WITH target AS (
    SELECT h.ctid AS tid FROM pgmem.item_history AS h
    WHERE h.namespace = %(ns)s AND h.valid_to < {{policy_cutoff}}
    ORDER BY h.valid_to
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM pgmem.item_history AS h USING target
    WHERE h.namespace = %(ns)s AND h.ctid = target.tid
    RETURNING 1
)
SELECT count(*) FROM gone;
