-- Fragments every query file may include as {{name}} (pgmem.planning.statements expands them once, when
-- a file is loaded; Python code that composes SQL reads them with statements.fragment(name)).
-- A fragment is written once here because several statements need it word for word: the message row,
-- the message INSERT, the rule that deletes a message nothing refers to, the lock writers and
-- summarisers share. Its %(name)s placeholders are the parameters of the statement that includes it.

-- fragment: message_columns
-- The columns of a message row after its seq, for the table alias `m` (pgmem.messages). A statement
-- selects `<seq>, {{message_columns}}`, its seq from where it means it: the entry's (e.seq, memory
-- order), the message's own (m.seq), or NULL::bigint AS seq for a message read outside any memory.
-- The row is pgmem.planning.rows.MessageRow (a test compares its fields with each statement's columns).
-- The jsonb columns travel as text, parsed by rows.decode: a queue item's message is then decoded only
-- when it is first read (a consumer that only acknowledges never parses them), and '{}', the usual
-- metadata, is not parsed at all. (psycopg's jsonb loader is json.loads in Python as well.)
m.id, m.content, m.instruct_content::text, m.role, m.cause_by, m.sent_from, m.send_to,
m.metadata::text, m.tool_calls::text, m.name, m.tool_call_id, m.message_class, m.created_at

-- fragment: message_column_names
-- The names of {{message_columns}}' columns, to select them again from a CTE that returned them.
id, content, instruct_content, role, cause_by, sent_from, send_to, metadata, tool_calls, name,
tool_call_id, message_class, created_at

-- fragment: message_fields
-- The stored fields of a message (pgmem.planning.rows.INSERT_COLUMNS, in that order): the column list
-- of its INSERT after `namespace`, and the names of a batch's unnest.
id, content, content_hash, instruct_content, role, cause_by, sent_from, send_to, metadata, tool_calls,
name, tool_call_id, message_class, created_at

-- fragment: message_arrays
-- A batch of messages as one array per field (sent in binary: one round trip), for
-- unnest(...) WITH ORDINALITY AS b({{message_fields}}, ord). send_to travels as a JSON array per message
-- (Postgres arrays of arrays must be rectangular) and is turned back into text[] by
-- {{message_from_batch}}.
%(id)b::text[], %(content)b::text[], %(content_hash)b::bytea[], %(instruct_content)b::text[],
%(role)b::text[], %(cause_by)b::text[], %(sent_from)b::text[], %(send_to)b::text[], %(metadata)b::text[],
%(tool_calls)b::text[], %(name)b::text[], %(tool_call_id)b::text[], %(message_class)b::text[],
%(created_at)b::timestamptz[]

-- fragment: message_from_batch
-- The values of {{insert_message_head}} from a row of a batch unnested as b({{message_fields}}, ...).
%(ns)s, id, content, content_hash, instruct_content::jsonb, role, cause_by, sent_from,
ARRAY(SELECT jsonb_array_elements_text(send_to::jsonb)), metadata::jsonb, tool_calls::jsonb,
name, tool_call_id, message_class, created_at

-- fragment: insert_message_head
-- INSERT of messages, up to the rows (VALUES or a SELECT of {{message_from_batch}}); follow the rows
-- with ON CONFLICT (namespace, id) DO NOTHING: a message is stored once, the stored one is kept.
INSERT INTO pgmem.messages (namespace, {{message_fields}})

-- fragment: message_values
-- The values of {{insert_message_head}} for one message: the parameters of rows.encode, named by
-- INSERT_COLUMNS.
%(ns)s, %(id)s, %(content)s, %(content_hash)s, %(instruct_content)s::jsonb, %(role)s,
%(cause_by)s, %(sent_from)s, %(send_to)s::text[], %(metadata)s::jsonb, %(tool_calls)s::jsonb,
%(name)s, %(tool_call_id)s, %(message_class)s, %(created_at)s

-- fragment: insert_message
-- Store one message unless the namespace already holds its id.
{{insert_message_head}}
VALUES ({{message_values}})
ON CONFLICT (namespace, id) DO NOTHING

-- fragment: message_once
-- CTEs that store the message %(id)s once, for a statement that then refers to it (WITH ..., then this):
-- `message` returns a row when it was new. `clash`: the id is stored with other content (content_hash),
-- or was stored concurrently, seen by neither this statement's snapshot nor its insert (content unknown):
-- the message is inserted again without ON CONFLICT, so the whole statement fails with a unique violation
-- on messages_pkey and nothing is written (pgmem raises Conflict; the concurrent case passes when retried).
stored AS (
    SELECT content_hash FROM pgmem.messages WHERE namespace = %(ns)s AND id = %(id)s
), message AS (
    {{insert_message}}
    RETURNING 1
), clash AS (
    {{insert_message_head}}
    SELECT {{message_values}}
    WHERE EXISTS (SELECT 1 FROM stored WHERE content_hash <> %(content_hash)s)
       OR NOT (EXISTS (SELECT 1 FROM stored) OR EXISTS (SELECT 1 FROM message))
)

-- fragment: batch_clash
-- As `clash` in the fragment message_once, for a batch unnested as `batch` ({{message_fields}}, ord), its
-- stored rows `stored` (id, content_hash: read before the insert) and its insert `message` (RETURNING id): every
-- message stored with other content (or stored concurrently), and an id the batch repeats with other
-- contents, makes the statement fail (nothing written).
clash AS (
    {{insert_message_head}}
    SELECT DISTINCT ON (id) {{message_from_batch}}
    FROM batch
    WHERE id IN (
        SELECT b.id
        FROM batch AS b LEFT JOIN stored AS s ON s.id = b.id
        WHERE CASE WHEN s.id IS NULL THEN b.id NOT IN (SELECT id FROM message)
                   ELSE s.content_hash <> b.content_hash END
        UNION ALL
        SELECT id FROM batch GROUP BY id HAVING count(DISTINCT content_hash) > 1
    )
    ORDER BY id, ord
)

-- fragment: register_memory
-- Make sure the memory %(memory)s exists (nothing happens when it does). Looked up first: ON CONFLICT alone
-- checks the row with a dirty snapshot and waits for any transaction updating it (an embedder logging
-- vectors bumps memories.vec_rev), so every writer of a memory queued behind its embedders' commits
-- (issue 38: 73% of busy samples at 32 writers on Lock/transactionid).
INSERT INTO pgmem.memories (namespace, key)
SELECT %(ns)s, %(memory)s
WHERE NOT EXISTS (SELECT 1 FROM pgmem.memories WHERE namespace = %(ns)s AND key = %(memory)s)
ON CONFLICT DO NOTHING

-- fragment: memory_embeds
-- The embedding models of the memory %(memory)s (ids, smallint[]; empty: none), for which the write queued
-- its messages: a writer with an embedder for one of them embeds the outbox after commit.
ARRAY(SELECT model_id FROM pgmem.memory_models WHERE namespace = %(ns)s AND memory = %(memory)s ORDER BY 1)

-- fragment: settle_lock_key
-- The advisory lock of the memory %(memory)s that orders its writers and its summarisers: a writer holds
-- it shared ({{settle_shared}}) from before it draws an entry's sequence number until it commits;
-- summaries.sql `settle` takes it exclusively to learn which numbers are final. 28781 marks these locks
-- (two 32-bit keys: a key space apart from one-key advisory locks such as model registration's).
28781, hashtext(%(ns)s || '/' || %(memory)s)

-- fragment: settle_shared
-- A writer's CTE: the shared settle lock on the memory, taken before the entry's sequence number is
-- drawn (join or select FROM settle where the number is drawn) and held to commit. A summariser never
-- skips an entry that commits after a later-numbered one (see {{settle_lock_key}}). The lock function
-- returns void, cast to text: Citus materialises a CTE's rows, and a void column cannot be
-- (docs/scale-out.md, "Statements").
settle AS MATERIALIZED (SELECT pg_advisory_xact_lock_shared({{settle_lock_key}})::text AS locked)

-- fragment: entry_messages
-- A memory's entries (alias e) joined with their messages (alias m), both of the namespace %(ns)s: every
-- table reference names the namespace literally (a distributed planner routes on it; docs/scale-out.md).
pgmem.memory_entries AS e
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = e.message_id

-- fragment: lineage
-- What the memory %(memory)s holds as of %(upto)s (a sequence number; NULL: now), as rows (memory, upto)
-- aliased l (pgmem.lineage, migration 0020): the memory's own entries and, for a fork, its parent's up to
-- the fork's point, recursively. A statement reads each row's entries with seq <= l.upto (one index range
-- of memory_entries_order_key or memory_entries_cause_by_idx per row; one row for a memory that is no fork).
pgmem.lineage(%(ns)s, %(memory)s, %(upto)s::bigint) AS l

-- fragment: lineage_messages
-- The entries (alias e) the memory %(memory)s holds as of %(upto)s ({{lineage}}), joined with their messages
-- (alias m). A statement orders by e.seq: the lineage's ranges are merged by a sort of what they yield.
{{lineage}}
JOIN pgmem.memory_entries AS e ON e.namespace = %(ns)s AND e.memory = l.memory AND e.seq <= l.upto
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = e.message_id

-- fragment: own_messages
-- The memory %(memory)s's own entries (alias e) as of %(upto)s joined with their messages (alias m): what it
-- holds when it is no fork (not_a_fork). Named by the memory itself, which the planner sees, where
-- lineage_messages goes through the lineage's rows, which it cannot: a filter on the messages then
-- hash-joined every message of the namespace that passed it, for a small memory beside a big one.
pgmem.memory_entries AS e
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = e.message_id
 AND e.namespace = %(ns)s AND e.memory = %(memory)s AND e.seq <= coalesce(%(upto)s::bigint, 9223372036854775807)

-- fragment: own_entries
-- The memory %(memory)s's own entries (alias e) as of %(upto)s: own_messages without the messages, for a
-- statement that reads only the entries (their cause_by, their message ids).
(SELECT * FROM pgmem.memory_entries
 WHERE namespace = %(ns)s AND memory = %(memory)s AND seq <= coalesce(%(upto)s::bigint, 9223372036854775807)) AS e

-- fragment: not_a_fork
-- Whether %(memory)s reads only its own entries: no fork, or a materialised one. Uncorrelated, so each
-- branch of a statement that reads own_messages where this holds and lineage_messages where it does not
-- is gated by it once (a one-time filter): only one of the two runs.
NOT EXISTS (SELECT 1 FROM pgmem.memory_forks AS f
            WHERE f.namespace = %(ns)s AND f.memory = %(memory)s AND f.materialized_at IS NULL)

-- fragment: not_inherited_one
-- A condition of an entry's insert: the message %(id)s is not one the memory %(memory)s inherits as a fork
-- (adding it is then a duplicate, as adding one of its own: migration 0020). The lineage is read only for
-- a fork (CASE evaluates the probe of memory_forks first): a memory that is no fork pays one index probe.
CASE WHEN EXISTS (SELECT 1 FROM pgmem.memory_forks AS f
                  WHERE f.namespace = %(ns)s AND f.memory = %(memory)s AND f.materialized_at IS NULL)
     THEN NOT EXISTS (SELECT 1 FROM pgmem.lineage(%(ns)s, %(memory)s, NULL) AS il
                      JOIN pgmem.memory_entries AS ie
                        ON ie.namespace = %(ns)s AND ie.memory = il.memory AND ie.message_id = %(id)s
                      WHERE il.memory <> %(memory)s AND ie.seq <= il.upto)
     ELSE true END

-- fragment: not_inherited_batch
-- not_inherited_one for the message `first.id` of a batch.
CASE WHEN EXISTS (SELECT 1 FROM pgmem.memory_forks AS f
                  WHERE f.namespace = %(ns)s AND f.memory = %(memory)s AND f.materialized_at IS NULL)
     THEN NOT EXISTS (SELECT 1 FROM pgmem.lineage(%(ns)s, %(memory)s, NULL) AS il
                      JOIN pgmem.memory_entries AS ie
                        ON ie.namespace = %(ns)s AND ie.memory = il.memory AND ie.message_id = first.id
                      WHERE il.memory <> %(memory)s AND ie.seq <= il.upto)
     ELSE true END

-- fragment: delete_orphans
-- A CTE body: delete the messages of `entry` that nothing refers to any more. `entry` is a CTE of the
-- same statement returning message_id: the entries it deleted, all of the memory %(memory)s. The
-- statement's snapshot still shows the rows it deletes, so the memory's own entries are excluded by
-- `o.memory <> %(memory)s` (a message is in a memory at most once) rather than seen as references.
-- Refer to a message: an entry of another memory, a queue item, a row of the queue archive (asked through
-- pgmem.queue_archive_refs by key: migration 0011), a fork of the memory that inherits the entry (the
-- trigger memory_entries_left_forks copies it there after the statement: migration 0020). `entry` returns
-- the entries' seq too.
-- Each check is a subquery per message (OFFSET 0 keeps the planner from turning it into a join), probed by
-- the message id: as an anti-join it read every entry of the namespace when the statistics were behind.
-- Deliberately not used by retention.sql `purge_queue_archive`, which deletes archive rows, not entries:
-- it keeps every entry as a reference and excludes the archive rows it deletes instead.
DELETE FROM pgmem.messages AS m USING entry
WHERE m.namespace = %(ns)s AND m.id = entry.message_id
  AND NOT EXISTS (SELECT 1 FROM pgmem.memory_entries AS o
                  WHERE o.namespace = %(ns)s AND o.message_id = entry.message_id
                    AND o.memory <> %(memory)s OFFSET 0)
  AND NOT EXISTS (SELECT 1 FROM pgmem.queue_items AS q
                  WHERE q.namespace = %(ns)s AND q.message_id = entry.message_id OFFSET 0)
  AND NOT EXISTS (SELECT 1 FROM pgmem.queue_archive_refs AS a
                  WHERE a.namespace = %(ns)s AND a.message_id = entry.message_id OFFSET 0)
  AND NOT EXISTS (SELECT 1 FROM pgmem.memory_forks AS f
                  WHERE f.namespace = %(ns)s AND f.parent = %(memory)s AND f.materialized_at IS NULL
                    AND f.upto_seq >= entry.seq OFFSET 0)

-- fragment: message_payload
-- What a framework adapter keeps of a message (alias m): its metadata field %(field)s (the framework's own
-- object as JSON), or, for a message stored without one (added through another API), a stand-in
-- {"role": ..., "content": ...} the adapter converts.
COALESCE(m.metadata -> %(field)s, jsonb_build_object('role', m.role, 'content', m.content))

-- fragment: entry_payload
-- A LATERAL subquery for an entry `e` (message_id): its message's payload ({{message_payload}}) as text,
-- in the column `payload`. OFFSET 0 keeps it from being flattened into a join, so each entry probes its
-- message by id: planned as a join, a read of a memory's 1,000 entries whose row estimate was right (a
-- custom plan) hashed all 16,000 messages of the namespace instead (17 ms, where the probes take 2.9 ms;
-- LlamaIndex get at 1,000 in benchmarks/integrations.py ran at 0.6x PostgresChatStore's speed).
SELECT ({{message_payload}})::text AS payload
FROM pgmem.messages AS m
WHERE m.namespace = %(ns)s AND m.id = e.message_id
OFFSET 0

-- fragment: bm25_hit
-- The columns of a keyword hit that the bm25 fragment reads, for the message alias m and the query CTE q
-- (q.terms): dl, the message's length (its number of distinct lexemes), and qv, its tsvector cut down to the
-- query's lexemes with their positions (setweight marks them, ts_filter keeps them: two passes in C over the
-- tsvector, where unnesting it made a row per lexeme; 30k hits of a common word: 150 -> 20 ms).
length(m.tsv) AS dl, ts_filter(setweight(m.tsv, 'A', q.terms), '{a}') AS qv

-- fragment: bm25
-- BM25 of the keyword hits (README, "Keyword search"): CTEs after three of the statement's own: q
-- (terms: pgmem.fts_terms of the query), scope (n: the number of messages the search's scope holds, its
-- memory's size from pgmem.memory_counts or its namespace's messages counted by the client:
-- pgmem/planning/search/keyword.py; never the table's, which would let other tenants change a tenant's
-- ranking) and hit (id,
-- seq, {{bm25_hit}}: the scope's messages whose tsv matches). Ends with bm25 (id, seq, score), one row
-- per hit. k1 = 1.2, b = 0.75; idf = ln(1 + (N - df + 0.5) / (df + 0.5)) with df counted among the hits,
-- which hold every message of the scope containing a scored lexeme (but under a websearch `or`/`-not`,
-- where it can only count too few), and N at least the number of hits; tf is a lexeme's number of
-- positions in the message (Postgres keeps 256 at most); a message's length is its number of distinct
-- lexemes, against their mean over the hits. matched: the sum of the idfs of the query's lexemes the message
-- holds (hybrid search's text coverage, pgmem/planning/search.py). tf carries its hit's seq and length, so
-- bm25 sums it per entry without joining it back to hit: a word in every message of a 100k-message memory,
-- 480 -> 400 ms (the join sorted both sides on disk).
tf AS (
    SELECT h.id, h.seq, h.dl, t.lexeme, coalesce(cardinality(t.positions), 1) AS tf
    FROM hit AS h CROSS JOIN LATERAL unnest(h.qv) AS t
),
df AS (SELECT tf.lexeme, count(*) AS df FROM tf GROUP BY tf.lexeme),
stats AS (
    SELECT greatest(max(scope.n), count(*))::float8 AS n, greatest(avg(h.dl), 1)::float8 AS avgdl
    FROM hit AS h CROSS JOIN scope
),
bm25 AS (
    SELECT tf.id, tf.seq,
           sum(ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5))
               * tf.tf * 2.2 / (tf.tf + 1.2 * (0.25 + 0.75 * tf.dl / s.avgdl))) AS score,
           sum(ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5))) AS matched
    FROM tf JOIN df ON df.lexeme = tf.lexeme CROSS JOIN stats AS s
    GROUP BY tf.id, tf.seq
    UNION ALL
    SELECT h.id, h.seq, 0, 0 FROM hit AS h WHERE length(h.qv) = 0
)

-- fragment: store_given
-- The caller's own vectors, stored by the statement that stores their messages (so both are written all
-- or nothing), for the models of the memory %(memory)s named %(model)s with %(dimension)s dimensions (two
-- while a switch between distances of that model is under way: a vector does not depend on the distance).
-- The statement defines `given` (id, embedding: one row per message, as vector) before this.
-- `given_model`: those models. None (the memory no longer has the model the client looked up: a switch
-- finished since) makes given_stored insert a NULL model_id, which fails the whole statement on purpose: a
-- not-null violation on embeddings.model_id, which pgmem raises as EmbeddingError (nothing written).
-- `given_dequeued`: the messages' outbox rows of those models (queued before: by an earlier add, or by
-- another memory), deleted before the vectors are inserted (given_stored reads it first): a batch an
-- embedder has claimed is waited for (its vector then stays: ON CONFLICT DO NOTHING), never the other way
-- round. A new entry is not queued for the models (memory_entries_added finds its vector), and the insert
-- logs the vector for every memory holding the message (embeddings_added), as the embedder's store does
-- (a new entry's vector is logged by both triggers: a cache adds it once).
given_model AS (
    SELECT m.id, m.kind
    FROM pgmem.memory_models AS mm JOIN pgmem.embedding_models AS m ON m.id = mm.model_id
    WHERE mm.namespace = %(ns)s AND mm.memory = %(memory)s AND m.name = %(model)s AND m.dimension = %(dimension)s
), given_dequeued AS (
    DELETE FROM pgmem.embedding_outbox AS o
    WHERE o.namespace = %(ns)s AND o.model_id IN (SELECT id FROM given_model)
      AND o.message_id IN (SELECT id FROM given)
    RETURNING 1
), given_stored AS (
    INSERT INTO pgmem.embeddings (namespace, model_id, message_id, embedding, embedding_half)
    SELECT %(ns)s, gm.id, g.id,
           CASE WHEN gm.kind = 'vector' THEN g.embedding END,
           CASE WHEN gm.kind = 'halfvec' THEN g.embedding::halfvec END
    FROM given AS g LEFT JOIN given_model AS gm ON true
    WHERE (SELECT count(*) FROM given_dequeued) >= 0
    ORDER BY gm.id, g.id
    ON CONFLICT DO NOTHING
)

-- fragment: given_undecided
-- Whether an entry of the messages given (in any memory of the namespace, there before this statement)
-- waits for a near-duplicate merge that the vectors this statement stores may decide: the writer then
-- decides it (pgmem._async.outbox decide_waiting). A probe of the partial index
-- memory_entries_merging_idx, almost always empty.
EXISTS (SELECT 1 FROM pgmem.memory_entries AS me
        WHERE me.namespace = %(ns)s AND me.message_id IN (SELECT id FROM given) AND me.merge_within IS NOT NULL)

-- fragment: other_models
-- The models of the memory %(memory)s besides that of the caller's vectors (%(model)s with %(dimension)s
-- dimensions; ids, smallint[]): a writer with an embedder for one of them fills their vectors after commit.
ARRAY(SELECT mm.model_id FROM pgmem.memory_models AS mm JOIN pgmem.embedding_models AS m ON m.id = mm.model_id
      WHERE mm.namespace = %(ns)s AND mm.memory = %(memory)s
        AND (m.name, m.dimension) <> (%(model)s::text, %(dimension)s::integer)
      ORDER BY 1)
