-- Named queries of pgmem's operations on one namespace's rows as a whole: `pgmem stats` (is the namespace
-- there at all?), `pgmem export` and `pgmem import` (pgmem/ops/portability.py). Each runs in a transaction
-- scoped to the namespace (row-level security); the column lists of the rows exported and imported come
-- from the schema declaration (pgmem/ops/schema.py), composed with psycopg.sql there.

-- name: namespace_has_rows
-- Whether the namespace holds anything a user put there: a mistyped name holds nothing (`pgmem stats -n`).
SELECT EXISTS (SELECT 1 FROM pgmem.memories WHERE namespace = %(ns)s)
    OR EXISTS (SELECT 1 FROM pgmem.messages WHERE namespace = %(ns)s)
    OR EXISTS (SELECT 1 FROM pgmem.queue_items WHERE namespace = %(ns)s)
    OR EXISTS (SELECT 1 FROM pgmem.items WHERE namespace = %(ns)s);

-- name: item_history_ids
-- After an import (pgmem/ops/importing.py), the item id of each item version it inserted (%(ids)s: their
-- item_history ids; the file carries none, the target draws items' ids afresh): the id of the item whose
-- lifetime the version belongs to, the current item of the same path, key and created_at; else (an item
-- deleted since, or re-created: a lifetime of its own) one new id per path, key and created_at from the
-- items' identity, which no item of the target has. Returns the versions given their ids. Paths are
-- compared by path_key (migration 0026): text[]'s comparisons make no index condition under row-level
-- security.
WITH lives AS MATERIALIZED (
    SELECT l.path_key, l.key, l.created_at,
           coalesce((SELECT i.id FROM pgmem.items AS i
                     WHERE i.namespace = %(ns)s AND i.path_key = l.path_key AND i.key = l.key
                       AND i.created_at = l.created_at),
                    nextval(pg_get_serial_sequence('pgmem.items', 'id'))) AS item_id
    FROM (SELECT DISTINCT h.path_key, h.key, h.created_at FROM pgmem.item_history AS h
          WHERE h.namespace = %(ns)s AND h.id = ANY(%(ids)s::bigint[])
          ORDER BY 1, 2, 3) AS l
), given AS (
    UPDATE pgmem.item_history AS h SET item_id = lives.item_id
    FROM lives
    WHERE h.namespace = %(ns)s AND h.id = ANY(%(ids)s::bigint[])
      AND h.path_key = lives.path_key AND h.key = lives.key AND h.created_at = lives.created_at
    RETURNING 1
)
SELECT count(*) FROM given;
