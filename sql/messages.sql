-- Named queries of the message repository, loaded once by pgmem.planning.statements (one `-- name: x`
-- block each; {{x}} includes a fragment of sql/fragments.sql). Parameters are psycopg named
-- placeholders; every statement is scoped to one namespace (%(ns)s).
-- Selects of messages return `seq, {{message_columns}}`: a pgmem.planning.rows.MessageRow, which
-- rows.decode turns into a Message.

-- name: add_one
-- One statement: register the memory, store the message once (a known id is kept as stored), and
-- reference it from the memory. Returns the entry's sequence number, or nothing when the memory already
-- held the message; and whether the memory has embedding models.
-- `settle`: the writers' shared lock on the memory (see the fragment settle_lock_key).
-- `clash` (the fragment message_once): the id stored with other content fails the statement (Conflict).
-- Returns an AddedRow.
WITH {{settle_shared}}, memory AS (
    {{register_memory}}
), {{message_once}}
INSERT INTO pgmem.memory_entries (namespace, memory, message_id, cause_by)
SELECT %(ns)s, %(memory)s, %(id)s, %(cause_by)s FROM settle
WHERE {{not_inherited_one}}
ON CONFLICT DO NOTHING
RETURNING seq, {{memory_embeds}} AS embeds;

-- name: add_many
-- The batch arrives as one array per column, sent in binary (one round trip); send_to travels as a JSON array per
-- message (arrays of arrays must be rectangular in Postgres). Entries are numbered in batch order; a
-- message repeated in the batch or already in the memory is skipped (the first occurrence counts).
-- Returns an AddedManyRow: the number of entries added and whether the memory has embedding models.
-- Rows are inserted in id order, not batch order: two batches holding the same messages in different
-- orders then take their row locks in one global order and cannot deadlock. The entries' sequence
-- numbers are drawn in batch order first (`numbered`), so the memory still keeps the batch order.
-- `clash` (the fragment batch_clash): a message of the batch stored with other content (or stored
-- concurrently), or an id the batch repeats with other contents, fails the statement: nothing is written.
WITH {{add_many_entries}}
SELECT count(*) AS added, {{memory_embeds}} AS embeds
FROM entry;

-- fragment: add_many_entries
-- The CTEs of add_many up to its `entry` insert (add_many_vector stores the caller's vectors beside them).
{{settle_shared}}, batch AS (
    SELECT *
    FROM unnest({{message_arrays}})
         WITH ORDINALITY AS b({{message_fields}}, ord)
), numbered AS (
    SELECT first.id, first.cause_by, first.ord,
           nextval(pg_get_serial_sequence('pgmem.memory_entries', 'seq')) AS seq
    FROM (SELECT DISTINCT ON (id) id, cause_by, ord FROM batch ORDER BY id, ord) AS first
    CROSS JOIN settle
    WHERE {{not_inherited_batch}}
    ORDER BY first.ord
), memory AS (
    {{register_memory}}
), stored AS (
    SELECT m.id, m.content_hash
    FROM pgmem.messages AS m
    WHERE m.namespace = %(ns)s AND m.id = ANY(%(id)b::text[])
), message AS (
    {{insert_message_head}}
    SELECT DISTINCT ON (id) {{message_from_batch}}
    FROM batch ORDER BY id, ord
    ON CONFLICT (namespace, id) DO NOTHING
    RETURNING id
), {{batch_clash}}, entry AS (
    INSERT INTO pgmem.memory_entries (namespace, memory, message_id, cause_by, seq, merge_within)
    SELECT %(ns)s, %(memory)s, id, cause_by, seq, %(merge_within)s::float8 FROM numbered ORDER BY id
    ON CONFLICT DO NOTHING
    RETURNING message_id, seq
)

-- name: add_one_vector
-- add_one with the caller's own vector of the message (%(vector)b) stored for the memory's model
-- %(model)s of %(dimension)s dimensions in the same statement (the fragment store_given): the message, its
-- entry and its vector are written all or nothing. A message the memory held already gets the vector too
-- when it has none of that model (how messages queued for a model of your own get theirs). Returns an
-- AddedVectorRow, whose seq is NULL when the memory held the message, whose embeds says whether the memory
-- has other models (other_models: then their embedder has work), and undecided whether an entry of the
-- message waits for a near-duplicate merge this vector may decide (given_undecided).
WITH {{settle_shared}}, memory AS (
    {{register_memory}}
), {{message_once}}, entry AS (
    INSERT INTO pgmem.memory_entries (namespace, memory, message_id, cause_by)
    SELECT %(ns)s, %(memory)s, %(id)s, %(cause_by)s FROM settle
    WHERE {{not_inherited_one}}
    ON CONFLICT DO NOTHING
    RETURNING seq
), given AS (
    SELECT %(id)s::text AS id, %(vector)b::vector AS embedding
), {{store_given}}
SELECT (SELECT seq FROM entry) AS seq, {{other_models}} AS embeds, {{given_undecided}} AS undecided;

-- name: add_many_vector
-- add_many with the caller's own vectors (%(vectors)b: one per message, in batch order; of an id the
-- batch repeats, the first occurrence's) stored as add_one_vector stores its one. Returns an
-- AddedManyVectorRow (embeds, undecided: as add_one_vector's).
WITH {{add_many_entries}}, given AS (
    SELECT DISTINCT ON (g.id) g.id, g.embedding
    FROM unnest(%(id)b::text[], %(vectors)b::vector[]) WITH ORDINALITY AS g(id, embedding, ord)
    ORDER BY g.id, g.ord
), {{store_given}}
SELECT count(*) AS added, {{other_models}} AS embeds, {{given_undecided}} AS undecided
FROM entry;

-- name: add_many_merging
-- add_many for a near-duplicate merge (messages.add_many(merge="near"), under the memory's merge lock):
-- the new entries are stored waiting for their merge (merge_within = %(merge_within)s: no look-up takes
-- them for neighbours until decided), then sql/merging.sql merge_near decides each, in batch order.
-- Returns the new entries' message ids in batch order and whether the memory has embedding models.
WITH {{add_many_entries}}
SELECT coalesce(array_agg(message_id ORDER BY seq), '{}'::text[]) AS added, {{memory_embeds}} AS embeds
FROM entry;

-- name: add_many_merging_vector
-- add_many_merging with the caller's vectors (or the client's embedder's), stored as add_many_vector does;
-- undecided: whether an entry of these messages held before (in any memory) waits for its merge.
WITH {{add_many_entries}}, given AS (
    SELECT DISTINCT ON (g.id) g.id, g.embedding
    FROM unnest(%(id)b::text[], %(vectors)b::vector[]) WITH ORDINALITY AS g(id, embedding, ord)
    ORDER BY g.id, g.ord
), {{store_given}}
SELECT coalesce(array_agg(message_id ORDER BY seq), '{}'::text[]) AS added, {{other_models}} AS embeds,
       {{given_undecided}} AS undecided
FROM entry;

-- name: append
-- Append messages new to the namespace (their writers mint fresh ids: the framework adapters, whose every
-- add appends), in batch order, all or nothing, in one statement. Unlike add_many nothing is looked up:
-- the rows are inserted without ON CONFLICT, so an id already stored (or repeated in the batch) fails the
-- statement with a unique violation on messages_pkey and nothing is written. The batch travels as one
-- JSON array of objects keyed by the stored fields (pgmem.planning.rows.json_rows, INSERT_COLUMNS): one
-- text parameter, where add_many's fourteen binary arrays cost the client more to send than the server to
-- store for a batch of one. Returns an AddedManyRow.
WITH {{settle_shared}}, batch AS (
    SELECT *
    FROM ROWS FROM (json_to_recordset(%(rows)s::json) AS (
             id text, content text, content_hash bytea, instruct_content jsonb, role text, cause_by text,
             sent_from text, send_to text[], metadata jsonb, tool_calls jsonb, name text, tool_call_id text,
             message_class text, created_at timestamptz))
         WITH ORDINALITY AS b({{message_fields}}, ord)
), memory AS (
    {{register_memory}}
), message AS (
    {{insert_message_head}}
    SELECT %(ns)s, {{message_fields}} FROM batch
), entry AS (
    INSERT INTO pgmem.memory_entries (namespace, memory, message_id, cause_by, seq)
    SELECT %(ns)s, %(memory)s, batch.id, batch.cause_by,
           nextval(pg_get_serial_sequence('pgmem.memory_entries', 'seq'))
    FROM batch CROSS JOIN settle
    ORDER BY batch.ord
    RETURNING 1
)
SELECT count(*) AS added, {{memory_embeds}} AS embeds
FROM entry;

-- name: clashing_ids
-- Which of the ids are stored with another content hash than the one given beside each (after add_many
-- failed on one, to name it).
SELECT m.id
FROM pgmem.messages AS m
JOIN unnest(%(ids)s::text[], %(hashes)s::bytea[]) AS g(id, content_hash) ON g.id = m.id
WHERE m.namespace = %(ns)s AND m.content_hash <> g.content_hash
ORDER BY m.id;

-- name: last_k
-- The last k messages of a memory as of %(upto)s (NULL: now), oldest first (k NULL: all). Each range of the
-- memory's lineage (a fork's parent's too) is walked backwards on memory_entries_order_key, k at most.
SELECT e.seq, {{message_columns}}
FROM (SELECT x.seq, x.message_id FROM {{lineage}}
      CROSS JOIN LATERAL (SELECT seq, message_id FROM pgmem.memory_entries
                          WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto
                          ORDER BY seq DESC LIMIT %(k)s) AS x
      ORDER BY x.seq DESC LIMIT %(k)s) AS e
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = e.message_id
ORDER BY e.seq;

-- name: by_action
-- Messages caused by one action, in memory order: an index range scan of memory_entries_cause_by_idx
-- per range of the memory's lineage (one for a memory that is no fork), merged by seq.
SELECT e.seq, {{message_columns}}
FROM {{lineage_messages}}
WHERE e.cause_by = %(action)s
ORDER BY e.seq;

-- name: by_actions
-- Messages caused by any of the actions, in memory order (memory_entries_cause_by_idx).
SELECT e.seq, {{message_columns}}
FROM {{lineage_messages}}
WHERE e.cause_by = ANY(%(actions)s::text[])
ORDER BY e.seq;

-- name: by_role
-- These four filter on the messages: a memory that is no fork is read by its own entries (own_messages),
-- a fork through its lineage; one branch runs (not_a_fork).
SELECT e.seq, {{message_columns}}
FROM {{own_messages}}
WHERE m.role = %(role)s AND {{not_a_fork}}
UNION ALL
SELECT e.seq, {{message_columns}}
FROM {{lineage_messages}}
WHERE m.role = %(role)s AND NOT {{not_a_fork}}
ORDER BY seq;

-- name: by_sender
SELECT e.seq, {{message_columns}}
FROM {{own_messages}}
WHERE m.sent_from = %(sender)s AND {{not_a_fork}}
UNION ALL
SELECT e.seq, {{message_columns}}
FROM {{lineage_messages}}
WHERE m.sent_from = %(sender)s AND NOT {{not_a_fork}}
ORDER BY seq;

-- name: by_recipient
-- Messages addressed to any of the names (the caller adds '<all>' to include broadcasts).
SELECT e.seq, {{message_columns}}
FROM {{own_messages}}
WHERE m.send_to && %(names)s::text[] AND {{not_a_fork}}
UNION ALL
SELECT e.seq, {{message_columns}}
FROM {{lineage_messages}}
WHERE m.send_to && %(names)s::text[] AND NOT {{not_a_fork}}
ORDER BY seq;

-- name: by_content
-- Messages whose content contains the string (exact substring, as MetaGPT's `in`).
SELECT e.seq, {{message_columns}}
FROM {{own_messages}}
WHERE strpos(m.content, %(needle)s) > 0 AND {{not_a_fork}}
UNION ALL
SELECT e.seq, {{message_columns}}
FROM {{lineage_messages}}
WHERE strpos(m.content, %(needle)s) > 0 AND NOT {{not_a_fork}}
ORDER BY seq;

-- name: search_text
-- Keyword search (README, "Keyword search": English words in websearch syntax, CJK by bigrams), ranked
-- by BM25, best first, newest first among equals; only the best are joined with their messages.
-- pgmem.fts_query of a constant is folded into a tsquery when the statement is planned, so the planner
-- sees which lexemes it looks for (the GIN index on tsv for rare ones, a scan for a word in most messages).
WITH q AS MATERIALIZED (SELECT pgmem.fts_terms(%(query)s) AS terms),
scope AS (SELECT coalesce(sum(c.n), 0)::float8 AS n FROM pgmem.memory_counts AS c
          WHERE c.namespace = %(ns)s AND c.memory = %(memory)s),
hit AS MATERIALIZED (
    -- A memory that is no fork by its own entries (own_messages: a small memory's hits are found from its
    -- entries, not among every hit of the namespace), a fork through its lineage; one branch runs.
    SELECT e.seq, m.id, {{bm25_hit}}
    FROM q, {{own_messages}}
    WHERE m.tsv OPERATOR(pgmem.@@) pgmem.fts_query(%(query)s) AND {{not_a_fork}}
    UNION ALL
    SELECT e.seq, m.id, {{bm25_hit}}
    FROM q, pgmem.messages AS m
    JOIN pgmem.memory_entries AS e ON e.namespace = %(ns)s AND e.message_id = m.id
    JOIN {{lineage}} ON l.memory = e.memory AND e.seq <= l.upto
    WHERE m.namespace = %(ns)s AND m.tsv OPERATOR(pgmem.@@) pgmem.fts_query(%(query)s) AND NOT {{not_a_fork}}
),
{{bm25}}
SELECT b.seq, {{message_columns}}
FROM (SELECT * FROM bm25 ORDER BY bm25.score DESC, bm25.seq DESC LIMIT %(limit)s) AS b
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = b.id
ORDER BY b.score DESC, b.seq DESC;

-- name: at_position
-- The message at a 0-based position (negative: from the end), like a Python list index.
SELECT e.seq, {{message_columns}}
FROM (SELECT x.seq, x.message_id FROM {{lineage}}
      CROSS JOIN LATERAL (SELECT seq, message_id FROM pgmem.memory_entries
                          WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto
                          ORDER BY seq ASC LIMIT %(offset)s + 1) AS x
      ORDER BY x.seq ASC OFFSET %(offset)s LIMIT 1) AS e
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = e.message_id;

-- name: at_position_from_end
SELECT e.seq, {{message_columns}}
FROM (SELECT x.seq, x.message_id FROM {{lineage}}
      CROSS JOIN LATERAL (SELECT seq, message_id FROM pgmem.memory_entries
                          WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto
                          ORDER BY seq DESC LIMIT %(offset)s + 1) AS x
      ORDER BY x.seq DESC OFFSET %(offset)s LIMIT 1) AS e
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = e.message_id;

-- name: get_messages
SELECT m.seq, {{message_columns}}
FROM pgmem.messages m
WHERE m.namespace = %(ns)s AND m.id = ANY(%(ids)s::text[]);

-- name: get_message
SELECT NULL::bigint AS seq, {{message_columns}}
FROM pgmem.messages AS m
WHERE m.namespace = %(ns)s AND m.id = %(id)s;

-- name: count
-- The memory's size: the sum of its rows of pgmem.memory_counts (at most 64, kept by triggers on its
-- entries in the writing transactions: migration 0017; a fork's include what it inherits: 0020), O(1)
-- where counting the entries was O(n). As of a point (%(upto)s not NULL) its lineage's entries are counted.
SELECT CASE WHEN %(upto)s::bigint IS NULL
            THEN (SELECT coalesce(sum(n), 0)::bigint FROM pgmem.memory_counts
                  WHERE namespace = %(ns)s AND memory = %(memory)s)
            ELSE (SELECT count(*) FROM {{lineage}}
                  JOIN pgmem.memory_entries AS e
                    ON e.namespace = %(ns)s AND e.memory = l.memory AND e.seq <= l.upto) END;

-- name: count_actions
-- Number of distinct actions in a memory (len() of MetaGPT's Memory.index). Its own entries, or a fork's
-- lineage, as by_role reads them (one branch runs): through the lineage's rows the planner scanned every
-- entry of the namespace, 8 ms for a memory of 50 beside one of 100k.
SELECT count(DISTINCT a.cause_by) FROM (
    SELECT e.cause_by FROM {{own_entries}} WHERE e.cause_by <> '' AND {{not_a_fork}}
    UNION ALL
    SELECT e.cause_by FROM {{lineage}}
    JOIN pgmem.memory_entries AS e ON e.namespace = %(ns)s AND e.memory = l.memory AND e.seq <= l.upto
    WHERE e.cause_by <> '' AND NOT {{not_a_fork}}
) AS a;

-- name: list_actions
SELECT DISTINCT a.cause_by FROM (
    SELECT e.cause_by FROM {{own_entries}} WHERE e.cause_by <> '' AND {{not_a_fork}}
    UNION ALL
    SELECT e.cause_by FROM {{lineage}}
    JOIN pgmem.memory_entries AS e ON e.namespace = %(ns)s AND e.memory = l.memory AND e.seq <= l.upto
    WHERE e.cause_by <> '' AND NOT {{not_a_fork}}
) AS a
ORDER BY a.cause_by;

-- name: find_news_all
-- 1-based positions of the observed ids that the memory does not hold (one PK probe each per range of
-- its lineage).
WITH lin AS MATERIALIZED (SELECT l.memory, l.upto FROM {{lineage}})
SELECT o.ord
FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS o(id, ord)
WHERE NOT EXISTS (SELECT 1 FROM lin JOIN pgmem.memory_entries AS e
                    ON e.namespace = %(ns)s AND e.memory = lin.memory AND e.message_id = o.id
                  WHERE e.seq <= lin.upto)
ORDER BY o.ord;

-- name: find_news_recent
-- 1-based positions of the observed ids that are not among the memory's last k entries.
WITH recent AS (
    SELECT x.message_id FROM {{lineage}}
    CROSS JOIN LATERAL (SELECT seq, message_id FROM pgmem.memory_entries
                        WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto
                        ORDER BY seq DESC LIMIT %(k)s) AS x
    ORDER BY x.seq DESC LIMIT %(k)s
)
SELECT o.ord
FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS o(id, ord)
WHERE o.id NOT IN (SELECT message_id FROM recent)
ORDER BY o.ord;

-- name: delete
-- Own entries only: a removal (the caller materialises a fork first: pgmem.materialize_fork).
-- Remove a message from a memory; the message row itself goes when nothing else (another memory, a
-- queue item, the queue archive) refers to it.
-- Returns the number of entries removed (0 or 1).
WITH entry AS (
    DELETE FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s AND message_id = %(id)s
    RETURNING message_id, seq
), orphan AS (
    {{delete_orphans}}
)
SELECT count(*) FROM entry;

-- name: delete_newest
-- Own entries only: a removal (the caller materialises a fork first: pgmem.materialize_fork).
-- Remove and return the newest message of a memory. SKIP LOCKED: two processes popping at once take
-- two different messages instead of one waiting for the other and finding its row gone. The message is
-- read by the entry's DELETE, before `orphan` may delete it: the statement returns it whether its CTEs
-- share one snapshot (PostgreSQL) or run one after another (Citus). delete_at_position(_from_end) and
-- delete_oldest do the same. The entry and its message are found by key, from a scalar subquery on the
-- locked entry: as a join, a memory filled since the tables were last analyzed was walked entry by entry
-- (tests/integration/test_removal_plans.py).
WITH newest AS (
    SELECT namespace, memory, message_id, seq FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s
    ORDER BY seq DESC LIMIT 1
    FOR UPDATE SKIP LOCKED
), entry AS (
    DELETE FROM pgmem.memory_entries AS e
    USING pgmem.messages AS m
    WHERE e.namespace = %(ns)s AND e.memory = %(memory)s AND e.message_id = (SELECT message_id FROM newest)
      AND m.namespace = %(ns)s AND m.id = (SELECT message_id FROM newest)
    RETURNING e.message_id, e.seq, {{message_columns}}
), orphan AS (
    {{delete_orphans}}
)
SELECT seq, {{message_column_names}}
FROM entry;

-- name: clear
-- Own entries only: a removal (the caller materialises a fork first: pgmem.materialize_fork).
-- Empty a memory; messages no other memory refers to are deleted with it. Returns the entries removed.
WITH entry AS (
    DELETE FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s
    RETURNING message_id, seq
), orphan AS (
    {{delete_orphans}}
)
SELECT count(*) FROM entry;

-- name: list_memories
SELECT key FROM pgmem.memories WHERE namespace = %(ns)s ORDER BY key;

-- name: stats
-- Message counts of the namespace by memory, role and action.
SELECT e.namespace, e.memory, m.role, m.cause_by, count(*) AS messages
FROM {{entry_messages}}
WHERE e.namespace = %(ns)s
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4;

-- name: delete_many
-- Own entries only: a removal (the caller materialises a fork first: pgmem.materialize_fork).
-- Take the messages with the given ids (%(ids)s) out of a memory; their rows go too when nothing else
-- refers to them. Returns the entries removed.
WITH entry AS (
    DELETE FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s AND message_id = ANY(%(ids)s::text[])
    RETURNING message_id, seq
), orphan AS (
    {{delete_orphans}}
)
SELECT count(*) FROM entry;

-- name: newest
-- The newest %(k)s entries of a memory as of %(upto)s added within %(seconds)s seconds (NULL: any age),
-- newest first.
SELECT e.seq, {{message_columns}}
FROM (SELECT x.seq, x.message_id FROM {{lineage}}
      CROSS JOIN LATERAL (SELECT seq, message_id FROM pgmem.memory_entries
                          WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto
                            AND (%(seconds)s::float8 IS NULL OR added_at >= now() - make_interval(secs => %(seconds)s))
                          ORDER BY seq DESC LIMIT %(k)s) AS x
      ORDER BY x.seq DESC LIMIT %(k)s) AS e
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = e.message_id
ORDER BY e.seq DESC;

-- name: list_memories_matching
-- The keys of the memories starting with %(prefix)s ('' : all) that hold at least one entry when
-- %(nonempty)s; sorted. A fork that still inherits holds its parent's entries up to its point too: its
-- lineage is read only when it has none of its own (one probe of memory_forks first).
SELECT mem.key FROM pgmem.memories AS mem
WHERE mem.namespace = %(ns)s AND starts_with(mem.key, %(prefix)s)
  AND (NOT %(nonempty)s
       OR EXISTS (SELECT 1 FROM pgmem.memory_entries AS e
                  WHERE e.namespace = %(ns)s AND e.memory = mem.key)
       OR EXISTS (SELECT 1 FROM pgmem.memory_forks AS f
                  WHERE f.namespace = %(ns)s AND f.memory = mem.key AND f.materialized_at IS NULL
                    AND EXISTS (SELECT 1 FROM pgmem.lineage(%(ns)s, mem.key, NULL) AS l
                                JOIN pgmem.memory_entries AS e
                                  ON e.namespace = %(ns)s AND e.memory = l.memory AND e.seq <= l.upto)))
ORDER BY mem.key;

-- name: payloads_last
-- The payloads ({{message_payload}}) of the last %(k)s entries (NULL: all) of a memory as of %(upto)s, oldest
-- first, as one JSON array in text: one value to parse instead of a row (and a Message) per entry. The array is
-- joined as text (string_agg), not built as a jsonb value first (jsonb_agg then ::text), which made
-- reading 1,000 LangChain messages 1.25x slower than langchain-postgres (benchmarks/integrations.py).
-- Each entry's message is probed by its id (the fragment entry_payload): O(k log n), whatever the
-- namespace holds.
SELECT '[' || COALESCE(string_agg(p.payload, ',' ORDER BY e.seq), '') || ']'
FROM (SELECT x.seq, x.message_id FROM {{lineage}}
      CROSS JOIN LATERAL (SELECT seq, message_id FROM pgmem.memory_entries
                          WHERE namespace = %(ns)s AND memory = l.memory AND seq <= l.upto
                          ORDER BY seq DESC LIMIT %(k)s) AS x
      ORDER BY x.seq DESC LIMIT %(k)s) AS e
CROSS JOIN LATERAL ({{entry_payload}}) AS p;

-- name: payloads_page
-- The payloads of the entries of the memory %(memory)s, merged in sequence order with those of the memory
-- %(merged)s (NULL: none), from position %(offset)s, at most %(limit)s (NULL: all), as one JSON array in
-- text; both as of %(upto)s (NULL: now; a sequence number, global: it bounds both). Each memory is read
-- through its lineage ({{lineage}}: a fork's parent's entries too), each range in index order
-- (memory_entries_order_key), offset + limit entries at most, and their messages probed by id (the
-- fragment entry_payload).
SELECT '[' || COALESCE(string_agg(p.payload, ',' ORDER BY e.seq), '') || ']'
FROM (SELECT x.seq, x.message_id
      FROM (SELECT l.memory, l.upto FROM {{lineage}}
            UNION ALL
            SELECT lm.memory, lm.upto FROM pgmem.lineage(%(ns)s, %(merged)s, %(upto)s::bigint) AS lm
            WHERE %(merged)s::text IS NOT NULL) AS r
      CROSS JOIN LATERAL (SELECT seq, message_id FROM pgmem.memory_entries
                          WHERE namespace = %(ns)s AND memory = r.memory AND seq <= r.upto
                          ORDER BY seq LIMIT %(offset)s::bigint + %(limit)s::bigint) AS x
      ORDER BY x.seq OFFSET %(offset)s LIMIT %(limit)s) AS e
CROSS JOIN LATERAL ({{entry_payload}}) AS p;

-- name: delete_at_position
-- Own entries only: a removal (the caller materialises a fork first: pgmem.materialize_fork).
-- Remove and return the message at a 0-based position of a memory (as a Python list's pop(i)); its row
-- goes when nothing else refers to it. Nothing when out of range. The entry is locked first: a concurrent
-- delete of the same entry waits, then finds it gone. Returns a MessageRow.
WITH target AS (
    SELECT message_id FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s
    ORDER BY seq ASC OFFSET %(offset)s LIMIT 1
    FOR UPDATE
), entry AS (
    DELETE FROM pgmem.memory_entries AS e
    USING pgmem.messages AS m
    WHERE e.namespace = %(ns)s AND e.memory = %(memory)s AND e.message_id = (SELECT message_id FROM target)
      AND m.namespace = %(ns)s AND m.id = (SELECT message_id FROM target)
    RETURNING e.message_id, e.seq, {{message_columns}}
), orphan AS (
    {{delete_orphans}}
)
SELECT seq, {{message_column_names}}
FROM entry;

-- name: delete_at_position_from_end
-- Own entries only: a removal (the caller materialises a fork first: pgmem.materialize_fork).
-- delete_at_position counted from the newest entry (offset 0: the newest), for negative positions.
-- Returns a MessageRow.
WITH target AS (
    SELECT message_id FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s
    ORDER BY seq DESC OFFSET %(offset)s LIMIT 1
    FOR UPDATE
), entry AS (
    DELETE FROM pgmem.memory_entries AS e
    USING pgmem.messages AS m
    WHERE e.namespace = %(ns)s AND e.memory = %(memory)s AND e.message_id = (SELECT message_id FROM target)
      AND m.namespace = %(ns)s AND m.id = (SELECT message_id FROM target)
    RETURNING e.message_id, e.seq, {{message_columns}}
), orphan AS (
    {{delete_orphans}}
)
SELECT seq, {{message_column_names}}
FROM entry;

-- name: delete_oldest
-- Own entries only: a removal (the caller materialises a fork first: pgmem.materialize_fork).
-- Remove and return the oldest %(n)s messages of a memory, oldest first. SKIP LOCKED, as delete_newest:
-- two processes taking the oldest at once take different entries. The entries are read from the range
-- of sequence numbers taken (so never the whole memory, whatever the planner's statistics). Returns
-- MessageRows.
WITH oldest AS (
    SELECT message_id, seq FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s
    ORDER BY seq ASC LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), entry AS (
    DELETE FROM pgmem.memory_entries AS e
    USING pgmem.messages AS m
    WHERE e.namespace = %(ns)s AND e.memory = %(memory)s
      AND e.seq BETWEEN (SELECT min(seq) FROM oldest) AND (SELECT max(seq) FROM oldest)
      AND e.message_id = ANY (ARRAY(SELECT message_id FROM oldest))
      AND m.namespace = %(ns)s AND m.id = e.message_id
    RETURNING e.message_id, e.seq, {{message_columns}}
), orphan AS (
    {{delete_orphans}}
)
SELECT seq, {{message_column_names}}
FROM entry
ORDER BY entry.seq;

-- name: move_oldest
-- Own entries only: a removal from %(memory)s and an add to %(to)s (the caller materialises both first,
-- and the forks of %(to)s that would inherit the moved entries: sql/forks.sql removing, arriving).
-- Move the oldest %(n)s entries of the memory %(memory)s to the memory %(to)s (registered when new) in
-- one UPDATE: the message rows stay where they are and the entries keep their sequence numbers, so the
-- two memories read together (payloads_page) keep the original order. Returns the moved messages,
-- oldest first (MessageRows). SKIP LOCKED: concurrent movers move different entries.
WITH target AS (
    INSERT INTO pgmem.memories (namespace, key) VALUES (%(ns)s, %(to)s)
    ON CONFLICT DO NOTHING
), oldest AS (
    SELECT message_id FROM pgmem.memory_entries
    WHERE namespace = %(ns)s AND memory = %(memory)s
    ORDER BY seq ASC LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE pgmem.memory_entries AS e SET memory = %(to)s
    FROM oldest
    WHERE e.namespace = %(ns)s AND e.memory = %(memory)s AND e.message_id = oldest.message_id
    RETURNING e.message_id, e.seq
)
SELECT moved.seq, {{message_columns}}
FROM moved JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = moved.message_id
ORDER BY moved.seq;
