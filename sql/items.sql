-- Named queries of the item repository (pgmem._async.items, `client.items`): key-value items at
-- (namespace, path, key) with an optional TTL, and their vectors per embedding model. Searches are
-- composed per filter shape in pgmem.planning.search.items; the exact-or-index choice is the planner's
-- (pgmem._async.search_planner), shared with message search.
--
-- A path is a text[] compared in collation "C". Conditions on it go through path_key, the path as one text
-- (pgmem.path_key, migration 0026), which the primary keys lead with: under row-level security only
-- text's leakproof comparisons are index conditions. The paths under a prefix P are the range
-- [pgmem.path_key(P), pgmem.path_prefix_end(P)). Batch statements take paths as JSON arrays (one text[] of
-- them), since arrays of different lengths cannot share a two-dimensional array.

-- fragment: write_rows
-- The writes of a batch, in the order given (sorted by path and key by the caller: concurrent batches
-- then lock their rows in the same order).
unnest(%(paths)s::text[], %(keys)s::text[]) WITH ORDINALITY AS w(path_json, key, n)
CROSS JOIN LATERAL (
    SELECT a.path, pgmem.path_key(a.path) AS path_key
    FROM (SELECT array_agg(e.label ORDER BY e.i) AS path
          FROM jsonb_array_elements_text(w.path_json::jsonb) WITH ORDINALITY AS e(label, i)) AS a
) AS p

-- name: get
-- Items of one path by key (rows.ItemRow), then each one's id and whether it has a live TTL (what a read
-- that refreshes TTLs passes to `refresh`); with %(omit_expired)s, expired items (not yet swept) are left
-- out.
SELECT i.path, i.key, i.value, i.created_at, i.updated_at, i.id,
       i.ttl_minutes IS NOT NULL AND i.expires_at > now() AS ttl
FROM pgmem.items AS i
WHERE i.namespace = %(ns)s AND i.path_key = pgmem.path_key(%(path)s::text[]) AND i.key = ANY(%(keys)s::text[])
  AND (NOT %(omit_expired)s OR i.expires_at IS NULL OR i.expires_at > now());

-- name: refresh
-- Extend the TTL of items a read returned: never an expired item's, never updated_at. Its own statement
-- after the read, run only when the read found an item with a TTL: as a CTE of every read it cost
-- ~0.7 ms a search (benchmarks/README.md, "Framework adapters: LangGraph store").
UPDATE pgmem.items AS i SET expires_at = now() + make_interval(secs => i.ttl_minutes * 60)
WHERE i.namespace = %(ns)s AND i.id = ANY(%(ids)s::bigint[]) AND i.ttl_minutes IS NOT NULL
  AND i.expires_at > now();

-- name: upsert
-- Insert or replace items: the value, updated_at and the TTL change, created_at stays. Rows are
-- inserted (and locked) in the order of the batch. The SET list takes the clock from the inserted row
-- (a distributed planner refuses now() there). updated_at never goes back: a transaction that started
-- before the one whose version it replaces (it waited for that one's row lock) keeps that version's
-- time, so the item's versions (pgmem.item_history, migration 0022) follow each other in time; the
-- replaced version, visible only between the two commits, then has an empty range and is not kept.
INSERT INTO pgmem.items AS i (namespace, path, key, value, expires_at, ttl_minutes, updated_at)
SELECT %(ns)s, p.path, w.key, v.value::jsonb, now() + make_interval(secs => v.ttl * 60), v.ttl, now()
FROM {{write_rows}}
JOIN unnest(%(values)s::text[], %(ttls)s::float8[]) WITH ORDINALITY AS v(value, ttl, n) ON v.n = w.n
ORDER BY w.n
ON CONFLICT (namespace, path_key, key) DO UPDATE
SET value = excluded.value, updated_at = greatest(excluded.updated_at, i.updated_at), expires_at = excluded.expires_at,
    ttl_minutes = excluded.ttl_minutes;

-- name: replace_vectors
-- The vectors of the items just written: the old ones (of any model: the value changed) go, the new
-- ones of %(model)s come (%(of)s: the 1-based place in the batch of each vector's item). Run after
-- `upsert`, in its transaction: this statement's snapshot then sees every vector committed before the
-- items were locked.
WITH target AS MATERIALIZED (
    SELECT i.id, w.n
    FROM {{write_rows}}
    JOIN pgmem.items AS i ON i.namespace = %(ns)s AND i.path_key = p.path_key AND i.key = w.key
), gone AS (
    DELETE FROM pgmem.item_vectors AS v USING target AS t WHERE v.namespace = %(ns)s AND v.item_id = t.id
)
INSERT INTO pgmem.item_vectors (namespace, item_id, model_id, field, embedding, embedding_half)
SELECT %(ns)s, t.id, %(model)s, x.field,
       CASE WHEN %(half)s THEN NULL ELSE x.vector END,
       CASE WHEN %(half)s THEN x.vector::halfvec END
FROM unnest(%(of)s::int8[], %(fields)s::text[], %(vectors)b::vector[]) AS x(n, field, vector)
JOIN target AS t ON t.n = x.n;

-- name: delete
-- Delete items (their vectors go with them: ON DELETE CASCADE), locking them in the batch's order.
DELETE FROM pgmem.items AS d
USING (
    SELECT i.id
    FROM {{write_rows}}
    JOIN pgmem.items AS i ON i.namespace = %(ns)s AND i.path_key = p.path_key AND i.key = w.key
    ORDER BY w.n
    FOR UPDATE OF i
) AS l
WHERE d.namespace = %(ns)s AND d.id = l.id;

-- name: sweep
-- Delete the namespace's expired items with their vectors; returns how many.
WITH gone AS (
    DELETE FROM pgmem.items WHERE namespace = %(ns)s AND expires_at IS NOT NULL AND expires_at < now()
    RETURNING 1
)
SELECT count(*) FROM gone;

-- fragment: path_matches
-- A condition on the path `p.path` of list_paths and list_paths_as_of: it starts with %(prefix)s and ends
-- with %(suffix)s (whole labels; a "*" label matches any one label; NULL: any).
(%(prefix)s::text[] IS NULL OR (
    cardinality(p.path) >= cardinality(%(prefix)s::text[])
    AND NOT EXISTS (
        SELECT 1 FROM unnest(%(prefix)s::text[]) WITH ORDINALITY AS c(label, n)
        WHERE c.label <> '*' AND c.label <> p.path[c.n::int])))
AND (%(suffix)s::text[] IS NULL OR (
    cardinality(p.path) >= cardinality(%(suffix)s::text[])
    AND NOT EXISTS (
        SELECT 1 FROM unnest(%(suffix)s::text[]) WITH ORDINALITY AS c(label, n)
        WHERE c.label <> '*'
          AND c.label <> p.path[cardinality(p.path) - cardinality(%(suffix)s::text[]) + c.n::int])))

-- fragment: path_in_range
-- Whether the path key p.path_key is under the labels %(fixed)s (list_paths: before the prefix's first "*").
(pgmem.path_prefix_end(%(fixed)s::text[]) IS NULL OR p.path_key < pgmem.path_prefix_end(%(fixed)s::text[]))

-- fragment: path_next_key
-- Where a walk of list_paths goes after the path w.path: past the subtree of its cut when it was listed
-- and cut (its first %(max_depth)s labels: the cut lists once), else to the next text after its key.
CASE WHEN w.ok AND cardinality(w.path) >= %(max_depth)s::int
     THEN pgmem.path_prefix_end(w.path[1:%(max_depth)s::int])
     ELSE w.path_key || E'\x01' END

-- name: list_paths
-- The namespace's distinct paths matching the prefix and suffix conditions (a "*" label matches any one
-- label; with %(omit_expired)s a path counts only while it holds an unexpired item), truncated to
-- %(max_depth)s labels, sorted, a page of them. One walk in path_key order (a path's key orders as the path,
-- and its subtree is one range: pgmem.path_key), an index probe per step, under the prefix's labels before
-- its first "*" (%(fixed)s, a range; '{}': every path): each step goes where path_next_key says; the walk
-- stops once it has %(offset)s + %(limit)s matches, or past the range (tested outside each probe's LIMIT 1:
-- inside, it would read on through every item after the range). `before`: the matches before a step.
WITH RECURSIVE walk AS (
    SELECT p.path_key, p.path, {{path_listed}} AS ok, 0::bigint AS before
    FROM (SELECT i.path_key, i.path FROM pgmem.items AS i
          WHERE i.namespace = %(ns)s AND i.path_key >= pgmem.path_key(%(fixed)s::text[])
          ORDER BY i.path_key LIMIT 1) AS p
    WHERE {{path_in_range}}
    UNION ALL
    SELECT p.path_key, p.path, {{path_listed}}, w.before + w.ok::int
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT i.path_key, i.path FROM pgmem.items AS i
        WHERE i.namespace = %(ns)s AND i.path_key >= {{path_next_key}}
        ORDER BY i.path_key LIMIT 1) AS p
    WHERE w.before + w.ok::int < %(offset)s::bigint + %(limit)s::bigint AND {{path_in_range}}
)
SELECT CASE WHEN %(max_depth)s::int IS NULL THEN w.path ELSE w.path[1:%(max_depth)s::int] END AS path
FROM walk AS w
WHERE w.ok
ORDER BY 1
LIMIT %(limit)s OFFSET %(offset)s;

-- fragment: path_listed
-- Whether list_paths lists the path p.path: it matches the conditions, and (%(omit_expired)s) it holds an
-- unexpired item.
{{path_matches}}
AND (NOT %(omit_expired)s OR EXISTS (
    SELECT 1 FROM pgmem.items AS x
    WHERE x.namespace = %(ns)s AND x.path_key = p.path_key AND (x.expires_at IS NULL OR x.expires_at > now())))

-- fragment: path_listed_as_of
-- Whether list_paths_as_of lists the path p.path: it matches the conditions and held an item at %(at)s, by
-- the rule of get_as_of (the current row written by then, else a version of pgmem.item_history valid then;
-- one that had expired then does not count).
{{path_matches}}
AND (EXISTS (SELECT 1 FROM pgmem.items AS i
             WHERE i.namespace = %(ns)s AND i.path_key = p.path_key AND i.updated_at <= %(at)s
               AND (i.expires_at IS NULL OR i.expires_at > %(at)s))
     OR EXISTS (SELECT 1 FROM pgmem.item_history AS h
                WHERE h.namespace = %(ns)s AND h.path_key = p.path_key AND h.valid_from <= %(at)s
                  AND h.valid_to > %(at)s AND (h.expires_at IS NULL OR h.expires_at > %(at)s)))

-- fragment: path_keys_from
-- The first path key at or after `bound` (a column of the walk) in either table: a path whose items were
-- all deleted since is only in the history.
SELECT k.path_key, k.path
FROM ((SELECT i.path_key, i.path FROM pgmem.items AS i
       WHERE i.namespace = %(ns)s AND i.path_key >= b.bound ORDER BY i.path_key LIMIT 1)
      UNION ALL
      (SELECT h.path_key, h.path FROM pgmem.item_history AS h
       WHERE h.namespace = %(ns)s AND h.path_key >= b.bound ORDER BY h.path_key LIMIT 1)) AS k
ORDER BY k.path_key LIMIT 1

-- name: list_paths_as_of
-- list_paths as the store was at %(at)s (migration 0022): the paths that held an item then
-- (path_listed_as_of). The same walk as list_paths', over the keys of both tables (each step: the
-- nearer of one probe in each), with the same early stop.
WITH RECURSIVE walk AS (
    SELECT p.path_key, p.path, {{path_listed_as_of}} AS ok, 0::bigint AS before
    FROM (SELECT pgmem.path_key(%(fixed)s::text[]) AS bound) AS b
    CROSS JOIN LATERAL ({{path_keys_from}}) AS p
    WHERE {{path_in_range}}
    UNION ALL
    SELECT p.path_key, p.path, {{path_listed_as_of}}, w.before + w.ok::int
    FROM walk AS w
    CROSS JOIN LATERAL (SELECT {{path_next_key}} AS bound) AS b
    CROSS JOIN LATERAL ({{path_keys_from}}) AS p
    WHERE w.before + w.ok::int < %(offset)s::bigint + %(limit)s::bigint AND {{path_in_range}}
)
SELECT CASE WHEN %(max_depth)s::int IS NULL THEN w.path ELSE w.path[1:%(max_depth)s::int] END AS path
FROM walk AS w
WHERE w.ok
ORDER BY 1
LIMIT %(limit)s OFFSET %(offset)s;

-- name: get_as_of
-- Items of one path by key as they were at %(at)s (rows.ItemRow; updated_at: when that version was
-- written): the current row when it was written by then, else the version of pgmem.item_history valid
-- then (migration 0022); one that had expired then is absent. Of two versions valid at once (a re-created
-- item written by a transaction older than the delete), the later-written one.
SELECT DISTINCT ON (v.key) v.path, v.key, v.value, v.created_at, v.updated_at
FROM (
    SELECT i.path, i.key, i.value, i.created_at, i.updated_at
    FROM pgmem.items AS i
    WHERE i.namespace = %(ns)s AND i.path_key = pgmem.path_key(%(path)s::text[]) AND i.key = ANY(%(keys)s::text[])
      AND i.updated_at <= %(at)s AND (i.expires_at IS NULL OR i.expires_at > %(at)s)
    UNION ALL
    SELECT h.path, h.key, h.value, h.created_at, h.valid_from
    FROM pgmem.item_history AS h
    WHERE h.namespace = %(ns)s AND h.path_key = pgmem.path_key(%(path)s::text[]) AND h.key = ANY(%(keys)s::text[])
      AND h.valid_from <= %(at)s AND h.valid_to > %(at)s AND (h.expires_at IS NULL OR h.expires_at > %(at)s)
) AS v
ORDER BY v.key, v.updated_at DESC;

-- name: mark_time
-- When the mark %(name)s of the memory %(memory)s was made (an items read as of a mark reads as of then).
SELECT m.marked_at FROM pgmem.memory_marks AS m
WHERE m.namespace = %(ns)s AND m.memory = %(memory)s AND m.name = %(name)s;

-- name: forget_items
-- Delete items for good, the first of forget's two statements: the items at path %(prefix)s with
-- %(keys)s, or (%(keys)s NULL) every item under the prefix %(prefix)s (a range of path_key). Their vectors
-- go with them; the trigger stores their last versions in pgmem.item_history, which `forget_history`
-- then deletes.
WITH gone AS (
    DELETE FROM pgmem.items AS i
    WHERE i.namespace = %(ns)s
      AND CASE WHEN %(keys)s::text[] IS NULL
               THEN i.path_key >= pgmem.path_key(%(prefix)s::text[])
                    AND i.path_key < pgmem.path_prefix_end(%(prefix)s::text[])
               ELSE i.path_key = pgmem.path_key(%(prefix)s::text[]) AND i.key = ANY(%(keys)s::text[]) END
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: forget_history
-- The versions of forgotten items (see `forget_items`), and of purge_history: those of the keys, or under
-- the prefix (NULL: the namespace's), replaced or deleted before the cutoff (%(before)s, or %(age)s seconds
-- ago; both NULL: all). Returns how many.
WITH gone AS (
    DELETE FROM pgmem.item_history AS h
    WHERE h.namespace = %(ns)s
      AND CASE WHEN %(keys)s::text[] IS NOT NULL
               THEN h.path_key = pgmem.path_key(%(prefix)s::text[]) AND h.key = ANY(%(keys)s::text[])
               WHEN %(prefix)s::text[] IS NOT NULL
               THEN h.path_key >= pgmem.path_key(%(prefix)s::text[])
                    AND h.path_key < pgmem.path_prefix_end(%(prefix)s::text[])
               ELSE true END
      AND (%(before)s::timestamptz IS NULL AND %(age)s::float8 IS NULL
           OR h.valid_to < least(%(before)s::timestamptz, now() - %(age)s::float8 * interval '1 second'))
    RETURNING 1
)
SELECT count(*) FROM gone;
