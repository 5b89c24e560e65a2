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
