-- Named queries of the vector repository (pgmem._async.vectors). Searches are composed per model in
-- pgmem/search.py (the model's id and dimension are part of the indexed expression).

-- name: build_lock
-- A process builds a model's HNSW index (CREATE INDEX CONCURRENTLY, outside a transaction) while it holds
-- this session lock; others try it again later rather than wait in a statement (whose snapshot the build
-- would wait for).
SELECT pg_try_advisory_lock(%(key)s);

-- name: build_unlock
SELECT pg_advisory_unlock(%(key)s);

-- name: index_valid
-- Whether an index (`pgmem.<name>`) is valid; no row when it does not exist. A concurrent build that
-- failed (or is still running) leaves it INVALID: the planner ignores it.
SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%(index)s);

-- name: register_model
-- A model is its definition, (name, dimension, distance): two namespaces registering the same definition
-- share one row (and its HNSW index); the same name with another dimension or distance is another model
-- (kind follows from the dimension; the distance picks the index's operator class, migration 0015).
INSERT INTO pgmem.embedding_models (name, dimension, kind, distance)
VALUES (%(name)s, %(dimension)s, %(kind)s, %(distance)s)
ON CONFLICT (name, dimension, distance) DO NOTHING;

-- name: get_model
SELECT id, name, dimension, kind, distance FROM pgmem.embedding_models
WHERE name = %(name)s AND dimension = %(dimension)s AND distance = %(distance)s;

-- name: notify_key
-- The namespace's notification key (created on first use): the client computes the tags of its queues and
-- memories with it (pgmem.planning.notify.tag) to match notifications.
SELECT pgmem.notify_key(%(ns)s)::text;

-- name: get_model_by_id
SELECT id, name, dimension, kind, distance FROM pgmem.embedding_models WHERE id = %(id)s;

-- name: enable
-- Give a memory an embedding model: `active` when it has none yet, else `building` (a switch, which the
-- embedder promotes once every entry has a vector). Every entry without a vector of that model is queued.
-- Returns the model's status for the memory.
WITH memory AS (
    {{register_memory}}
), model AS (
    INSERT INTO pgmem.memory_models (namespace, memory, model_id, status)
    SELECT %(ns)s, %(memory)s, %(model)s,
           CASE WHEN EXISTS (SELECT 1 FROM pgmem.memory_models
                             WHERE namespace = %(ns)s AND memory = %(memory)s AND status = 'active')
                THEN 'building' ELSE 'active' END
    ON CONFLICT DO NOTHING
    RETURNING status
), queued AS (
    INSERT INTO pgmem.embedding_outbox (namespace, model_id, message_id)
    SELECT %(ns)s, %(model)s, me.message_id
    FROM pgmem.lineage(%(ns)s, %(memory)s, NULL) AS l  -- a fork's inherited messages need vectors too
    JOIN pgmem.memory_entries me ON me.namespace = %(ns)s AND me.memory = l.memory AND me.seq <= l.upto
    WHERE NOT EXISTS (SELECT 1 FROM pgmem.embeddings e
                      WHERE e.namespace = %(ns)s AND e.model_id = %(model)s AND e.message_id = me.message_id)
    ORDER BY me.message_id
    ON CONFLICT DO NOTHING
)
SELECT coalesce((SELECT status FROM model),
                (SELECT status FROM pgmem.memory_models
                 WHERE namespace = %(ns)s AND memory = %(memory)s AND model_id = %(model)s));

-- name: memory_models
-- The models of a memory, the active one first.
SELECT mm.status, m.id, m.name, m.dimension, m.kind, m.distance
FROM pgmem.memory_models mm JOIN pgmem.embedding_models m ON m.id = mm.model_id
WHERE mm.namespace = %(ns)s AND mm.memory = %(memory)s
ORDER BY mm.status = 'active' DESC, mm.created_at;

-- name: claim_outbox
-- A batch of queued messages for one model, locked for this transaction (other embedders skip them).
-- The messages are key-share locked up front, skipping any a concurrent delete holds: this batch then
-- never waits on a deleting transaction (which may be waiting on an outbox row this batch locked), and a
-- delete that comes later waits for the batch. Either way no deadlock.
-- Oldest available first, in the order of embedding_outbox_claim_idx: a batch reads its own rows, never
-- the rest of a backlog nor the rows waiting out a retry backoff (a fresh row is available from the
-- moment it was queued).
-- Each row's message is a primary-key probe (a locking subquery is never flattened into a join that
-- stale statistics could turn into a scan of the namespace's messages).
-- `merging`: an entry of the message waits for its vector to decide a near-duplicate merge (a probe of
-- the partial index memory_entries_merging_idx, almost always empty): the embedder then decides those
-- merges before it commits; a batch without one sends its store with its COMMIT (pgmem._async.outbox).
SELECT o.message_id, m.content,
       EXISTS (SELECT 1 FROM pgmem.memory_entries AS me
               WHERE me.namespace = %(ns)s AND me.message_id = o.message_id AND me.merge_within IS NOT NULL)
           AS merging
FROM pgmem.embedding_outbox o
CROSS JOIN LATERAL (
    SELECT m.content FROM pgmem.messages m
    WHERE m.namespace = %(ns)s AND m.id = o.message_id
    FOR KEY SHARE SKIP LOCKED
) AS m
WHERE o.namespace = %(ns)s AND o.model_id = %(model)s AND o.available_at <= now()
ORDER BY o.available_at, o.message_id
LIMIT %(n)s
FOR UPDATE OF o SKIP LOCKED;

-- name: store_vectors
-- Store a batch of vectors (binary vector[]) and take the messages off the outbox. Returns the entries of
-- these messages whose near-duplicate merge waits for this vector (sql/merging.sql merge_near: of memories
-- whose active model this is), by memory and in memory order: rows.PendingMergeRow. The partial index
-- memory_entries_merging_idx holds only such entries: an empty probe per message when none waits.
WITH stored AS (
    INSERT INTO pgmem.embeddings (namespace, model_id, message_id, embedding)
    SELECT %(ns)s, %(model)s, v.id, v.embedding
    FROM unnest(%(ids)b::text[], %(vectors)b::vector[]) AS v(id, embedding)
    ORDER BY v.id
    ON CONFLICT DO NOTHING
), dequeued AS (
    DELETE FROM pgmem.embedding_outbox
    WHERE namespace = %(ns)s AND model_id = %(model)s AND message_id = ANY(%(ids)b::text[])
)
{{pending_merges}};

-- name: store_halfvecs
WITH stored AS (
    INSERT INTO pgmem.embeddings (namespace, model_id, message_id, embedding_half)
    SELECT %(ns)s, %(model)s, v.id, v.embedding::halfvec
    FROM unnest(%(ids)b::text[], %(vectors)b::vector[]) AS v(id, embedding)
    ORDER BY v.id
    ON CONFLICT DO NOTHING
), dequeued AS (
    DELETE FROM pgmem.embedding_outbox
    WHERE namespace = %(ns)s AND model_id = %(model)s AND message_id = ANY(%(ids)b::text[])
)
{{pending_merges}};

-- fragment: pending_merges
-- The entries of the messages %(ids)s whose near-duplicate merge waits for their vector of model %(model)s
-- (store_vectors).
SELECT me.memory, me.message_id, me.merge_within
FROM pgmem.memory_entries AS me
WHERE me.namespace = %(ns)s AND me.message_id = ANY(%(ids)b::text[]) AND me.merge_within IS NOT NULL
  AND EXISTS (SELECT 1 FROM pgmem.memory_models AS mm
              WHERE mm.namespace = %(ns)s AND mm.memory = me.memory AND mm.model_id = %(model)s
                AND mm.status = 'active')
ORDER BY me.memory, me.seq

-- name: outbox_failed
-- The provider failed: try these again after an exponential backoff (1 s doubling, at most 1 hour).
UPDATE pgmem.embedding_outbox
SET attempts = attempts + 1,
    last_error = left(%(error)s, 2000),
    available_at = now() + least(interval '1 hour', interval '1 second' * power(2, least(attempts, 12)))
WHERE namespace = %(ns)s AND model_id = %(model)s AND message_id = ANY(%(ids)b::text[]);

-- name: outbox_retry_now
-- `pgmem embed`: a backfill run does not wait out earlier backoffs.
UPDATE pgmem.embedding_outbox SET available_at = now()
WHERE namespace = %(ns)s AND model_id = %(model)s AND available_at > now();

-- name: pending
-- Queued messages per model name (of one memory, or of the namespace); rows of deleted messages aside.
-- (rows.PendingRow)
SELECT m.name AS model, count(*) AS queued
FROM pgmem.embedding_outbox o
JOIN pgmem.embedding_models m ON m.id = o.model_id
WHERE o.namespace = %(ns)s
  AND EXISTS (SELECT 1 FROM pgmem.messages g WHERE g.namespace = %(ns)s AND g.id = o.message_id)
  AND (%(memory)s::text IS NULL OR EXISTS (
        SELECT 1 FROM pgmem.lineage(%(ns)s, %(memory)s, NULL) AS l  -- a fork's inherited messages too
        JOIN pgmem.memory_entries me ON me.namespace = %(ns)s AND me.memory = l.memory AND me.seq <= l.upto
        WHERE me.message_id = o.message_id))
GROUP BY m.name
ORDER BY m.name;

-- name: pending_models
-- Models with queued messages in the namespace, and whether a model switch is under way in it (then the
-- embedder checks for switches to finish).
SELECT m.id, m.name, m.dimension, m.kind, m.distance,
       EXISTS (SELECT 1 FROM pgmem.memory_models mm WHERE mm.namespace = %(ns)s AND mm.status = 'building')
         AS switching
FROM pgmem.embedding_models m
WHERE EXISTS (SELECT 1 FROM pgmem.embedding_outbox o WHERE o.namespace = %(ns)s AND o.model_id = m.id);

-- name: flush_wal
-- A transaction that writes WAL and nothing else (a row lock is WAL-logged; an id alone is not, and a
-- commit that logged nothing does not wait for a flush): its synchronous commit flushes the WAL up to its
-- commit record, and with it every commit before it (the background embedder's asynchronous ones). A key
-- share lock on one of the namespace's memories conflicts with no writer but one deleting the memory.
SELECT 1 FROM pgmem.memories WHERE namespace = %(ns)s ORDER BY key LIMIT 1 FOR KEY SHARE;

-- name: purge_orphans
-- Available outbox rows of the models whose message was deleted before it was embedded (the outbox has no
-- foreign key): a range of embedding_outbox_claim_idx per model, the rows an embedder's claim found none
-- of claimable. A row waiting out a backoff is purged once it is available again.
DELETE FROM pgmem.embedding_outbox o
WHERE o.namespace = %(ns)s AND o.model_id = ANY(%(models)s::smallint[]) AND o.available_at <= now()
  AND NOT EXISTS (SELECT 1 FROM pgmem.messages m WHERE m.namespace = %(ns)s AND m.id = o.message_id);

-- name: outbox_namespaces
SELECT DISTINCT namespace FROM pgmem.embedding_outbox ORDER BY namespace;

-- name: unindexed_switches
-- Models some memory of the namespace is switching to whose HNSW index is missing or not yet valid (the
-- embedder builds it before it can promote them). The index name is EmbeddingModel.index_name's.
SELECT DISTINCT m.id, m.name, m.dimension, m.kind, m.distance
FROM pgmem.memory_models mm JOIN pgmem.embedding_models m ON m.id = mm.model_id
WHERE mm.namespace = %(ns)s AND mm.status = 'building'
  AND NOT coalesce((SELECT i.indisvalid FROM pg_index i
                    WHERE i.indexrelid = to_regclass('pgmem.embeddings_hnsw_m' || m.id)), false);

-- name: promote
-- Finish model switches: a `building` model whose memory has no queued entry left and whose HNSW index is
-- valid (built: see unindexed_switches) becomes the active one; the previous active model's vectors stay
-- (other memories may use them) but it is no longer searched for this memory. Returns the memories
-- switched.
WITH done AS (
    SELECT mm.memory, mm.model_id
    FROM pgmem.memory_models mm
    WHERE mm.namespace = %(ns)s AND mm.status = 'building'
      AND NOT EXISTS (SELECT 1 FROM pgmem.embedding_outbox o
                      JOIN pgmem.memory_entries me ON me.namespace = %(ns)s AND me.message_id = o.message_id
                      WHERE o.namespace = %(ns)s AND o.model_id = mm.model_id AND me.memory = mm.memory)
      AND coalesce((SELECT i.indisvalid FROM pg_index i
                    WHERE i.indexrelid = to_regclass('pgmem.embeddings_hnsw_m' || mm.model_id)), false)
), retired AS (
    DELETE FROM pgmem.memory_models x USING done
    WHERE x.namespace = %(ns)s AND x.memory = done.memory AND x.status = 'active'
), promoted AS (
    UPDATE pgmem.memory_models x SET status = 'active'
    FROM done WHERE x.namespace = %(ns)s AND x.memory = done.memory AND x.model_id = done.model_id
    RETURNING x.memory
), moved AS (
    -- strict caches see the switch through the high-water mark
    UPDATE pgmem.memories m SET vec_rev = m.vec_rev + 1
    FROM promoted WHERE m.namespace = %(ns)s AND m.key = promoted.memory
), rung AS (
    -- Caches of other processes drop their entries of a switched memory: the doorbell announces revision
    -- -1 ("model changed") once this has committed.
    INSERT INTO pgmem.doorbell (namespace, channel, name, rev)
    SELECT %(ns)s, 'pgmem_vectors', memory, -1 FROM promoted
)
SELECT memory FROM promoted ORDER BY memory;

-- name: memory_vectors
-- Every vector a memory holds for one model, with the memory's revision they are current at (the cache's
-- load). One statement: the revisions and the rows come from the same snapshot. Vectors travel in
-- pgvector's binary form (vector_send), which numpy reads in one call. A fork that still inherits
-- (migration 0020) holds its lineage's entries (pgmem.lineage: its parent's up to its point, recursively):
-- `ancestors` names the memories it reads besides its own and `ancestor_revs` their revisions (NULL: no
-- fork), whose changes (a forget, an embedding filled in) its cached vectors must follow too. A memory that
-- is no fork is read by its own entries (one branch runs, as in by_role): through the lineage's rows alone
-- the planner scanned every entry of the namespace, 14 ms for a memory of 50 beside one of 100k.
WITH lin AS MATERIALIZED (
    SELECT l.memory, l.upto, a.vec_rev FROM pgmem.lineage(%(ns)s, %(memory)s, NULL) AS l
    JOIN pgmem.memories AS a ON a.namespace = %(ns)s AND a.key = l.memory
), up AS MATERIALIZED (
    SELECT array_agg(lin.memory ORDER BY lin.memory) AS ancestors,
           array_agg(lin.vec_rev ORDER BY lin.memory) AS ancestor_revs
    FROM lin WHERE lin.memory <> %(memory)s
)
SELECT mem.vec_rev AS rev, me.message_id, vector_send(coalesce(e.embedding, e.embedding_half::vector)) AS vector,
       up.ancestors, up.ancestor_revs
FROM pgmem.memories mem
CROSS JOIN up
LEFT JOIN (SELECT o.message_id, o.seq FROM pgmem.memory_entries AS o
           WHERE o.namespace = %(ns)s AND o.memory = %(memory)s AND {{not_a_fork}}
           UNION ALL
           SELECT le.message_id, le.seq FROM lin JOIN pgmem.memory_entries AS le
             ON le.namespace = %(ns)s AND le.memory = lin.memory AND le.seq <= lin.upto
           WHERE NOT {{not_a_fork}}) AS me ON true
LEFT JOIN pgmem.embeddings e ON e.namespace = %(ns)s AND e.model_id = %(model)s AND e.message_id = me.message_id
WHERE mem.namespace = %(ns)s AND mem.key = %(memory)s
ORDER BY me.seq;

-- name: lineage_heads
-- The revisions of a memory and of the memories it inherits from (a fork's, migration 0020): the strict
-- cache's check of a fork's entry, (memory, rev) rows.
SELECT l.memory, a.vec_rev FROM pgmem.lineage(%(ns)s, %(memory)s, NULL) AS l
JOIN pgmem.memories AS a ON a.namespace = %(ns)s AND a.key = l.memory;

-- name: vector_changes
-- What changed in a memory's vectors after revision `rev` (the cache's catch-up), oldest first, with the
-- vector of each addition. `floor` is the oldest revision still logged (older ones were purged: reload);
-- `active` is the memory's active model now.
SELECT l.rev, l.op, l.message_id, vector_send(coalesce(e.embedding, e.embedding_half::vector)) AS vector,
       (SELECT vec_rev FROM pgmem.memories WHERE namespace = %(ns)s AND key = %(memory)s) AS head,
       (SELECT min(rev) FROM pgmem.vector_log WHERE namespace = %(ns)s AND memory = %(memory)s) AS floor,
       (SELECT model_id FROM pgmem.memory_models
        WHERE namespace = %(ns)s AND memory = %(memory)s AND status = 'active') AS active
FROM (SELECT 1) AS one
LEFT JOIN pgmem.vector_log l
       ON l.namespace = %(ns)s AND l.memory = %(memory)s AND l.rev > %(rev)s AND l.model_id = %(model)s
LEFT JOIN pgmem.embeddings e
       ON l.op = 1 AND e.namespace = %(ns)s AND e.model_id = %(model)s AND e.message_id = l.message_id
ORDER BY l.rev;

-- name: cache_head
-- The memory's high-water mark (the strict cache's check before answering: one primary-key read). A
-- finished model switch moves it too (see promote).
SELECT vec_rev FROM pgmem.memories WHERE namespace = %(ns)s AND key = %(memory)s;

-- name: cache_head_libpq
-- cache_head with libpq placeholders ($1 namespace, $2 memory): the strict cache prepares it once on its
-- reader connection and runs it through libpq directly (psycopg's cursor machinery doubled its cost).
SELECT vec_rev FROM pgmem.memories WHERE namespace = $1::text AND key = $2::text;

-- name: head_rev
SELECT vec_rev FROM pgmem.memories WHERE namespace = %(ns)s AND key = %(memory)s;

-- name: log_retrieval
-- One search answered by the FAISS cache (pgmem.cache), recorded in the retrieval log (opt-in).
INSERT INTO pgmem.retrieval_log (namespace, kind, memory, label, query, k, message_ids, scores)
VALUES (%(ns)s, %(kind)s, %(memory)s, %(label)s, %(query)s, %(k)s, %(ids)s::text[], %(scores)s::float8[]);

-- name: stale_statistics
-- The search tables (%(tables)s: a search's, pgmem.planning.search.plan.Corpus) whose planner statistics
-- are far behind them: modified since their last ANALYZE by more than 500 rows and by more rows than they
-- held then (a table never analyzed, reltuples -1, by more than 500). Statistics taken from a table of a
-- handful of rows call every column unique, and Postgres then probes a whole namespace for every HNSW
-- candidate; without any, it walked a memory's 20k entries for its two pinned messages (client.context).
SELECT s.relname::text FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
WHERE s.schemaname = 'pgmem' AND s.relname = ANY(%(tables)s::text[])
  AND s.n_mod_since_analyze > greatest(500, c.reltuples)
ORDER BY 1;

-- name: analyze_lock
-- One process at a time analyzes the search tables; the others search on.
SELECT pg_try_advisory_xact_lock(%(key)s) AS locked, set_config('lock_timeout', '100ms', true) AS lock_timeout;

-- name: indexed_models
-- Every registered model, and whether item vectors use it: `pgmem migrate` builds their missing HNSW
-- indexes (pgmem.ops.migrate.build_model_indexes; with pgmem.admin on, item_vectors being under
-- row-level security).
SELECT m.id, m.name, m.dimension, m.kind, m.distance,
       EXISTS (SELECT 1 FROM pgmem.item_vectors AS v WHERE v.model_id = m.id) AS items
FROM pgmem.embedding_models AS m
ORDER BY m.id;
