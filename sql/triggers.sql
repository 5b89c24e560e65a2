-- pgmem's functions and triggers (and pgmem.queue_archive, the per-item view over the archive batches that
-- the queue views read): the code that lives in the database beside the tables of pgmem/ops/schema.py.
-- The analytics views are declared in sql/views.sql.
--
-- This file is the declaration; migrations never read it. The baseline migration
-- (migrations/versions/0001_baseline.py) holds a copy of it as of its revision, and
-- tests/migrations/test_database_code.py checks that a database migrated to head has exactly these
-- objects with exactly these bodies. A change here therefore needs a new migration that makes the same
-- change (CREATE OR REPLACE FUNCTION with the new body, the trigger dropped and created again, …), with
-- the new text inlined in the migration, not read from this file.
--
-- One `-- name: x` block per function (with the trigger that calls it) or view. Function bodies are
-- stored by Postgres as written, so the copy in a migration must match this text character for character.

-- name: notify_key
-- The namespace's notification key (pgmem.namespace_keys), created on first use. Race-safe: of two
-- transactions creating it, the second waits for the first's insert to commit, then reads its key (each
-- statement of this function takes a fresh snapshot), so a writer and a listener starting together agree.
CREATE OR REPLACE FUNCTION pgmem.notify_key(p_ns text) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    k uuid;
BEGIN
    SELECT notify_key INTO k FROM pgmem.namespace_keys WHERE namespace = p_ns;
    IF k IS NULL THEN
        INSERT INTO pgmem.namespace_keys (namespace) VALUES (p_ns) ON CONFLICT (namespace) DO NOTHING
        RETURNING notify_key INTO k;
        IF k IS NULL THEN
            SELECT notify_key INTO k FROM pgmem.namespace_keys WHERE namespace = p_ns;
        END IF;
    END IF;
    RETURN k;
END $$;

-- name: notify_tag
-- What a notification says of a queue or memory `p_name` of namespace `p_ns`: the first 32 hex digits of
-- sha256(key || name), the key the namespace's own (notify_key), so LISTEN on another tenant's connection
-- learns neither the namespace nor the name. pgmem.planning.notify.tag computes the same in Python.
CREATE OR REPLACE FUNCTION pgmem.notify_tag(p_ns text, p_name text) RETURNS text LANGUAGE sql AS $$
SELECT left(encode(sha256(convert_to(pgmem.notify_key(p_ns)::text || p_name, 'UTF8')), 'hex'), 32)
$$;

-- name: ring_doorbell
-- The doorbell's one reader (pgmem.doorbell, the Python module, calls it in a loop in the process elected
-- per database). Writers do not NOTIFY: a transaction that notifies takes a cluster-wide lock at commit
-- and holds it through its WAL flush, so notifying writers commit one at a time. They insert a row into
-- pgmem.doorbell in their own transaction instead; this function waits up to p_wait_ms (at most 1,000) for committed
-- rows (polling every millisecond, each check a fresh snapshot), deletes what it sees and sends, at its
-- own commit, one NOTIFY per queue or memory rung: pgmem_queue '<tag>', pgmem_vectors '["<tag>", <head>]'
-- (and '["<tag>", -1]' for a model switch). A row is deleted by the transaction that announces it, so a
-- reader that dies before committing leaves its rows to the next. p_beat adds NOTIFY pgmem_vectors 'beat':
-- what caches take as proof that the doorbell is being rung. Runs as its owner with pgmem.admin on (the
-- owner's row-level security policy: it reads every namespace's rings), and sends nothing but tags.
-- pgmem.admin is set in the body and put back before returning (an error rolls it back with the
-- statement), not by a SET clause: on PostgreSQL 15+ only a superuser may declare a function that sets a
-- custom parameter, and the tables' owner on a managed service is not one (migration 0021).
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

-- name: log_vector_changes
-- Appends a statement's changes to the set of vectors of each memory to pgmem.vector_log, with a
-- per-memory revision drawn under the memory's row lock (gapless, in commit order; memories.vec_rev is
-- the high-water mark), and rings the doorbell with each memory's new head (pgmem.ring_doorbell
-- announces it as NOTIFY pgmem_vectors, '["<tag>", <rev>]' once it has committed), which FAISS caches
-- in other processes listen to. Called once per statement by the triggers below.
CREATE OR REPLACE FUNCTION pgmem.log_vector_changes(
    p_ns text[], p_memory text[], p_message text[], p_model smallint[], p_op smallint[]
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_ns IS NULL OR cardinality(p_ns) = 0 THEN
        RETURN;
    END IF;
    -- One row lock per memory, in key order (no deadlock between two loggers), held to commit: the
    -- revisions of a memory follow commit order. NO KEY UPDATE (what the vec_rev update takes anyway), not
    -- UPDATE: it does not conflict with the key-share locks of foreign-key checks, so a message being
    -- added to the memory never waits for a vector being logged, nor the other way round.
    PERFORM 1 FROM pgmem.memories m
    WHERE (m.namespace, m.key) IN (SELECT DISTINCT c.ns, c.memory FROM unnest(p_ns, p_memory) AS c(ns, memory))
    ORDER BY m.namespace, m.key
    FOR NO KEY UPDATE;
    WITH changes AS (
        SELECT c.ns, c.memory, c.message_id, c.model_id, c.op,
               row_number() OVER (PARTITION BY c.ns, c.memory ORDER BY c.ord) AS n
        FROM unnest(p_ns, p_memory, p_message, p_model, p_op) WITH ORDINALITY
             AS c(ns, memory, message_id, model_id, op, ord)
    ), counts AS (
        SELECT ns, memory, count(*) AS n FROM changes GROUP BY ns, memory
    ), bumped AS (
        UPDATE pgmem.memories m SET vec_rev = m.vec_rev + counts.n
        FROM counts
        WHERE m.namespace = counts.ns AND m.key = counts.memory
        RETURNING m.namespace, m.key, m.vec_rev - counts.n AS base, m.vec_rev AS head
    ), logged AS (
        INSERT INTO pgmem.vector_log (namespace, memory, rev, message_id, model_id, op)
        SELECT c.ns, c.memory, b.base + c.n, c.message_id, c.model_id, c.op
        FROM changes c JOIN bumped b ON b.namespace = c.ns AND b.key = c.memory
    )
    INSERT INTO pgmem.doorbell (namespace, channel, name, rev)
    SELECT b.namespace, 'pgmem_vectors', b.key, b.head FROM bumped b;
END $$;

-- name: memory_entries_added
-- A message added to a memory that has embedding models is queued in pgmem.embedding_outbox in the same
-- transaction (writing a message never waits on the embedding provider); vectors it already has join the
-- memory's vector log.
CREATE OR REPLACE FUNCTION pgmem.memory_entries_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_rows n JOIN pgmem.memory_models mm
                   ON mm.namespace = n.namespace AND mm.memory = n.memory) THEN
        RETURN NULL;
    END IF;
    INSERT INTO pgmem.embedding_outbox (namespace, model_id, message_id)
    SELECT n.namespace, mm.model_id, n.message_id
    FROM new_rows n
    JOIN pgmem.memory_models mm ON mm.namespace = n.namespace AND mm.memory = n.memory
    WHERE NOT EXISTS (SELECT 1 FROM pgmem.embeddings e
                      WHERE e.namespace = n.namespace AND e.model_id = mm.model_id AND e.message_id = n.message_id)
    ORDER BY 1, 2, 3
    ON CONFLICT DO NOTHING;
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT n.namespace, n.memory, n.message_id, mm.model_id, 1::smallint AS op
          FROM new_rows n
          JOIN pgmem.memory_models mm ON mm.namespace = n.namespace AND mm.memory = n.memory
          JOIN pgmem.embeddings e
            ON e.namespace = n.namespace AND e.model_id = mm.model_id AND e.message_id = n.message_id
          ORDER BY n.seq) AS x;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_entries_added AFTER INSERT ON pgmem.memory_entries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.memory_entries_added();

-- name: memory_entries_removed
-- Messages leaving a memory take their vectors out of the memory's vector log; nothing to do (and no call
-- of log_vector_changes) when none of the memories has an embedding model (migrations 0009, 0010).
CREATE OR REPLACE FUNCTION pgmem.memory_entries_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM old_rows o JOIN pgmem.memory_models mm
                   ON mm.namespace = o.namespace AND mm.memory = o.memory) THEN
        RETURN NULL;
    END IF;
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT o.namespace, o.memory, o.message_id, mm.model_id, (-1)::smallint AS op
          FROM old_rows o
          JOIN pgmem.memory_models mm ON mm.namespace = o.namespace AND mm.memory = o.memory
          ORDER BY o.seq) AS x;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_entries_removed AFTER DELETE ON pgmem.memory_entries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.memory_entries_removed();

-- name: count_entries
-- A memory's size without a row its writers share (migration 0017): each statement's inserted (deleted)
-- entries are added to (taken from) the memory's row of shard pg_backend_pid() % 64 of pgmem.memory_counts,
-- in the writing transaction; messages.count sums the memory's rows.
CREATE OR REPLACE FUNCTION pgmem.count_entries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
        SELECT r.namespace, r.memory, (pg_backend_pid() % 64)::smallint, count(*)
        FROM new_rows AS r GROUP BY r.namespace, r.memory ORDER BY r.namespace, r.memory
        ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
        SELECT r.namespace, r.memory, (pg_backend_pid() % 64)::smallint, -count(*)
        FROM old_rows AS r GROUP BY r.namespace, r.memory ORDER BY r.namespace, r.memory
        ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    ELSE  -- entries moved to another memory (messages.move_oldest): out of one, into the other
        INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
        SELECT d.namespace, d.memory, (pg_backend_pid() % 64)::smallint, sum(d.n)
        FROM (SELECT namespace, memory, 1 AS n FROM new_rows
              UNION ALL SELECT namespace, memory, -1 FROM old_rows) AS d
        GROUP BY d.namespace, d.memory HAVING sum(d.n) <> 0 ORDER BY d.namespace, d.memory
        ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_entries_counted AFTER INSERT ON pgmem.memory_entries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.count_entries();

CREATE TRIGGER memory_entries_uncounted AFTER DELETE ON pgmem.memory_entries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.count_entries();

CREATE TRIGGER memory_entries_recounted AFTER UPDATE ON pgmem.memory_entries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.count_entries();

-- name: embeddings_added
-- New vectors join the vector log of every memory holding their message with that model. Each new vector
-- probes memory_entries_message_idx by its message id: the LATERAL subquery is kept apart from the join by
-- OFFSET 0, so the planner cannot flatten it into a join ordered by the statistics it had when the session
-- first planned the trigger (taken on a small table, those read the whole table or walk every entry of the
-- memory per batch: 1.4-1.5 ms per batch of 6 vectors into a memory of 3,000, against 0.18-0.26 ms).
CREATE OR REPLACE FUNCTION pgmem.embeddings_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmem.log_vector_changes(array_agg(x.namespace), array_agg(x.memory), array_agg(x.message_id),
                                     array_agg(x.model_id), array_agg(x.op))
    FROM (SELECT me.namespace, me.memory, n.message_id, n.model_id, 1::smallint AS op
          FROM new_rows n
          CROSS JOIN LATERAL (
              SELECT e.namespace, e.memory, e.seq FROM pgmem.memory_entries e
              WHERE e.namespace = n.namespace AND e.message_id = n.message_id
              OFFSET 0
          ) AS me
          JOIN pgmem.memory_models mm
            ON mm.namespace = me.namespace AND mm.memory = me.memory AND mm.model_id = n.model_id
          ORDER BY me.seq) AS x;
    RETURN NULL;
END $$;

CREATE TRIGGER embeddings_added AFTER INSERT ON pgmem.embeddings
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.embeddings_added();

-- name: memory_removed
-- Deleting a memory deletes its vector log.
CREATE OR REPLACE FUNCTION pgmem.memory_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A memory created again under the same key starts at revision 0.
    DELETE FROM pgmem.vector_log l USING old_rows o WHERE l.namespace = o.namespace AND l.memory = o.key;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_removed AFTER DELETE ON pgmem.memories
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.memory_removed();

-- name: queue_lease_lost
-- Called by a claim(ack=) statement (sql/queues.sql) when one of its acknowledgements no longer held:
-- SQLSTATE PGM01 rolls the whole statement back, so a lost lease claims nothing; the client then
-- acknowledges what it still can on its own and raises LeaseLost.
CREATE OR REPLACE FUNCTION pgmem.queue_lease_lost(acknowledged bigint[], held bigint[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'lease lost on item(s) %',
        ARRAY(SELECT h FROM unnest(held) AS h WHERE h <> ALL(coalesce(acknowledged, '{}')) ORDER BY h)
        USING ERRCODE = 'PGM01',
              HINT = 'the statement was rolled back; acknowledge the items on their own';
END
$$;

COMMENT ON FUNCTION pgmem.queue_lease_lost(bigint[], bigint[]) IS
    'Raises SQLSTATE PGM01: a claim(ack=) statement found an acknowledgement that no longer held.';

-- name: queue_archive
-- Acknowledged queue items, one row per item: pgmem.queue_archive_batches stores one row per
-- acknowledgement statement and queue, the items' columns as arrays in the same order. The ids are
-- unnested (one set-returning call per batch, which the planner sizes from the column's statistics) and
-- the other arrays read by position: unnesting all eight arrays in parallel made eight calls per batch (a
-- scan of 100k one-item batches: 327 ms, against 96 ms by position), and generate_subscripts is costed at
-- 1,000 rows per call, which sent small queries to parallel plans.
CREATE OR REPLACE VIEW pgmem.queue_archive WITH (security_invoker = true) AS
SELECT b.namespace, u.id, b.queue, b.message_ids[u.i] AS message_id, b.priorities[u.i] AS priority,
       b.enqueued_at[u.i] AS enqueued_at, b.claimed_at[u.i] AS claimed_at, b.acked_at,
       b.attempts[u.i] AS attempts, b.claimed_by[u.i] AS claimed_by, b.dedup_keys[u.i] AS dedup_key, b.batch
FROM pgmem.queue_archive_batches AS b
CROSS JOIN LATERAL unnest(b.ids) WITH ORDINALITY AS u(id, i);

COMMENT ON VIEW pgmem.queue_archive IS
    'Acknowledged queue items, one row per item (pgmem.queue_archive_batches unnested).';

-- name: lineage
-- What a memory holds, as (memory, upto) rows (migration 0020): the memory's own entries, and for a fork
-- those of its parent with seq <= the fork's point, recursively (a fork of a fork takes the smaller point).
-- p_upto bounds every row (a read as of a sequence number; NULL: now). A memory that is no fork gives
-- one row. Forks that were materialised (pgmem.materialize_fork) hold their entries themselves.
CREATE OR REPLACE FUNCTION pgmem.lineage(p_ns text, p_memory text, p_upto bigint)
RETURNS TABLE (memory text, upto bigint) LANGUAGE sql STABLE ROWS 2 AS $$
    WITH RECURSIVE up (memory, upto, depth) AS (
        SELECT p_memory, coalesce(p_upto, 9223372036854775807), 0
        UNION ALL
        SELECT f.parent, least(up.upto, f.upto_seq), up.depth + 1
        FROM up JOIN pgmem.memory_forks AS f
          ON f.namespace = p_ns AND f.memory = up.memory AND f.materialized_at IS NULL
        WHERE up.depth < 64
    )
    SELECT up.memory, up.upto FROM up
$$;

-- name: materialize_fork
-- Copy what a fork inherits into the fork's own entries (keeping their sequence numbers) and cut it from
-- its parent: done before a removal in the fork, and for the forks of a memory being deleted. Its size
-- does not change (the copies were counted when it was forked). Returns the entries copied. The messages
-- are locked first, as the copy's foreign key would lock them (migration 0025): one a forget in an ancestor
-- is deleting drops out once the forget commits (whose fork_entries_left counted it out of the fork)
-- instead of failing the copy's foreign key check, which failed the removal in the fork with NotFound.
CREATE OR REPLACE FUNCTION pgmem.materialize_fork(p_ns text, p_memory text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    copied bigint;
BEGIN
    -- Concurrent materialisers of one fork: the second finds it materialised once the first commits.
    PERFORM 1 FROM pgmem.memory_forks
    WHERE namespace = p_ns AND memory = p_memory AND materialized_at IS NULL
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH alive AS MATERIALIZED (
        SELECT e.message_id, e.seq, e.cause_by, e.added_at
        FROM pgmem.lineage(p_ns, p_memory, NULL) AS l
        JOIN pgmem.memory_entries AS e ON e.namespace = p_ns AND e.memory = l.memory AND e.seq <= l.upto
        JOIN pgmem.messages AS m ON m.namespace = p_ns AND m.id = e.message_id
        WHERE l.memory <> p_memory
        ORDER BY e.message_id
        FOR KEY SHARE OF m
    ), inherited AS (
        INSERT INTO pgmem.memory_entries (namespace, memory, message_id, seq, cause_by, added_at)
        SELECT p_ns, p_memory, a.message_id, a.seq, a.cause_by, a.added_at
        FROM alive AS a
        ORDER BY a.message_id
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT count(*) INTO copied FROM inherited;
    IF copied > 0 THEN
        INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
        VALUES (p_ns, p_memory, (pg_backend_pid() % 64)::smallint, -copied)
        ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    UPDATE pgmem.memory_forks SET materialized_at = now()
    WHERE namespace = p_ns AND memory = p_memory;
    RETURN copied;
END $$;

-- name: fork_entries_left
-- Entries leaving a memory that has forks (deleted, or moved to another memory): a fork keeps what it
-- inherited. An entry at or below a fork's point is copied into the fork (its seq kept; counted there
-- already); grandchildren inherit the copy through it. An entry whose message is gone (forget, retention)
-- is not copied: it leaves every fork, whose sizes drop by one. Nothing to do, after one probe of an
-- index, when the namespace has no fork. First the writers' settle lock of each memory the entries leave,
-- shared (migration 0023): a fork takes it exclusively before it reads its parent (sql/forks.sql), so a
-- fork committed before this lock is seen below, and one made after it waits for this transaction and
-- counts without what it removed; a fork and a removal (a forget) at the same moment left its size off.
CREATE OR REPLACE FUNCTION pgmem.fork_entries_left() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(28781, hashtext(o.namespace || '/' || o.memory))
    FROM (SELECT DISTINCT x.namespace, x.memory FROM old_rows AS x ORDER BY 1, 2) AS o;
    IF NOT EXISTS (SELECT 1 FROM pgmem.memory_forks AS f WHERE f.materialized_at IS NULL) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM (SELECT DISTINCT o.namespace, o.memory FROM old_rows AS o) AS o
                   JOIN pgmem.memory_forks AS f
                     ON f.namespace = o.namespace AND f.parent = o.memory AND f.materialized_at IS NULL) THEN
        RETURN NULL;
    END IF;
    WITH copied AS (
        INSERT INTO pgmem.memory_entries (namespace, memory, message_id, seq, cause_by, added_at)
        SELECT o.namespace, f.memory, o.message_id, o.seq, o.cause_by, o.added_at
        FROM old_rows AS o
        JOIN pgmem.memory_forks AS f
          ON f.namespace = o.namespace AND f.parent = o.memory AND f.materialized_at IS NULL AND o.seq <= f.upto_seq
        WHERE EXISTS (SELECT 1 FROM pgmem.messages AS m WHERE m.namespace = o.namespace AND m.id = o.message_id)
        ORDER BY 1, 2, 3
        ON CONFLICT DO NOTHING
        RETURNING namespace, memory
    )
    INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
    SELECT x.namespace, x.memory, (pg_backend_pid() % 64)::smallint, -count(*)
    FROM copied AS x GROUP BY x.namespace, x.memory ORDER BY x.namespace, x.memory
    ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    WITH RECURSIVE lost (namespace, memory, seq) AS (
        SELECT f.namespace, f.memory, o.seq
        FROM old_rows AS o
        JOIN pgmem.memory_forks AS f
          ON f.namespace = o.namespace AND f.parent = o.memory AND f.materialized_at IS NULL AND o.seq <= f.upto_seq
        WHERE NOT EXISTS (SELECT 1 FROM pgmem.messages AS m WHERE m.namespace = o.namespace AND m.id = o.message_id)
        UNION ALL
        SELECT f.namespace, f.memory, lost.seq
        FROM lost
        JOIN pgmem.memory_forks AS f
          ON f.namespace = lost.namespace AND f.parent = lost.memory AND f.materialized_at IS NULL
         AND lost.seq <= f.upto_seq
    )
    INSERT INTO pgmem.memory_counts AS c (namespace, memory, shard, n)
    SELECT lost.namespace, lost.memory, (pg_backend_pid() % 64)::smallint, -count(*)
    FROM lost GROUP BY lost.namespace, lost.memory ORDER BY lost.namespace, lost.memory
    ON CONFLICT (namespace, memory, shard) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_entries_left_forks AFTER DELETE ON pgmem.memory_entries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.fork_entries_left();

CREATE TRIGGER memory_entries_moved_forks AFTER UPDATE ON pgmem.memory_entries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem.fork_entries_left();

-- name: fork_parent_removed
-- A memory deleted while forks inherit from it: they are materialised first (they keep what they held).
CREATE OR REPLACE FUNCTION pgmem.fork_parent_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmem.materialize_fork(f.namespace, f.memory)
    FROM pgmem.memory_forks AS f
    WHERE f.namespace = OLD.namespace AND f.parent = OLD.key AND f.materialized_at IS NULL
    ORDER BY f.memory;
    RETURN OLD;
END $$;

CREATE TRIGGER memories_forks_kept BEFORE DELETE ON pgmem.memories
    FOR EACH ROW EXECUTE FUNCTION pgmem.fork_parent_removed();

-- name: path_key
-- An item's path as one text in collation "C" (migration 0026): the stored column path_key of pgmem.items
-- and pgmem.item_history, which their primary keys lead with. Under row-level security Postgres uses an
-- index only for conditions whose operators are leakproof, and text's are where text[]'s are not: an item's
-- get probed every distinct path of the namespace, and list_paths read every item once per path. Each
-- label followed by U+0001, its U+0001 and U+0002 escaped behind U+0002: one text per path, ordered as
-- the paths are, and the paths under a prefix P are the keys in [key(P), key(P) with its last U+0001 made
-- U+0002).
CREATE OR REPLACE FUNCTION pgmem.path_key(p_path text[]) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT coalesce(string_agg(replace(replace(l, E'\x02', E'\x02\x02'), E'\x01', E'\x02\x01') || E'\x01', ''
                           ORDER BY n), '')
FROM unnest(p_path) WITH ORDINALITY AS u(l, n)
$$;

-- name: path_prefix_end
-- Where the paths under the prefix p_prefix end (migration 0026): they are the path keys in
-- [pgmem.path_key(p_prefix), pgmem.path_prefix_end(p_prefix)). NULL for the empty prefix (every path).
CREATE OR REPLACE FUNCTION pgmem.path_prefix_end(p_prefix text[]) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT CASE WHEN cardinality(p_prefix) > 0 THEN left(pgmem.path_key(p_prefix), -1) || E'\x02' END
$$;

-- name: keep_item_history
-- The version an item no longer holds (migration 0022): a put that moves updated_at (not a TTL refresh)
-- or a delete stores the old value with its range [valid_from, valid_to) in pgmem.item_history, which
-- reads as_of a time read. Times are transaction times: a version replaced in the transaction that wrote
-- it was never visible, and is not stored (an empty range).
CREATE OR REPLACE FUNCTION pgmem.keep_item_history() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ended timestamptz := CASE WHEN TG_OP = 'UPDATE' THEN NEW.updated_at ELSE now() END;
BEGIN
    IF ended > OLD.updated_at THEN
        INSERT INTO pgmem.item_history
            (namespace, path, key, item_id, value, created_at, valid_from, valid_to, expires_at)
        VALUES (OLD.namespace, OLD.path, OLD.key, OLD.id, OLD.value, OLD.created_at, OLD.updated_at, ended,
                OLD.expires_at);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER items_history_updated AFTER UPDATE ON pgmem.items
    FOR EACH ROW WHEN (OLD.updated_at < NEW.updated_at) EXECUTE FUNCTION pgmem.keep_item_history();
CREATE TRIGGER items_history_deleted AFTER DELETE ON pgmem.items
    FOR EACH ROW EXECUTE FUNCTION pgmem.keep_item_history();
