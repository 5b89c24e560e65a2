-- Named queries of the store repository (pgmem._async.stores, `client.stores`): the records of the
-- ChatDev-style memory stores (pgmem.integrations.chatdev), loaded once by pgmem.planning.statements.
--
-- A store's items are messages of the memory `store:<name>` (so vector search, full-text search and
-- the FAISS cache work on them unchanged); `memory_stores` records each store's type and config, and
-- `store_files` what a file store indexed.

-- name: register
-- Record a store (its type is fixed once recorded; its config is the latest one loaded). Returns the
-- recorded type: another type means the name is taken by a store of that type.
WITH new AS (
    INSERT INTO pgmem.memory_stores (namespace, name, type, config)
    VALUES (%(ns)s, %(name)s, %(type)s, %(config)s::jsonb)
    ON CONFLICT (namespace, name) DO UPDATE SET config = excluded.config
    WHERE memory_stores.type = excluded.type
    RETURNING type
)
SELECT type FROM new
UNION ALL
SELECT type FROM pgmem.memory_stores WHERE namespace = %(ns)s AND name = %(name)s
LIMIT 1;

-- name: stores
-- Every store of the namespace (rows.StoreRow).
SELECT name, type, config, created_at FROM pgmem.memory_stores WHERE namespace = %(ns)s ORDER BY name;

-- name: files
-- What a file store has indexed: path, content hash and chunk ids (rows.StoreFileRow).
SELECT path, sha256, chunk_ids FROM pgmem.store_files WHERE namespace = %(ns)s AND store = %(store)s;

-- name: lock_file
-- A file's index entry, locked until commit (rows.LockedFileRow).
SELECT sha256, chunk_ids FROM pgmem.store_files
WHERE namespace = %(ns)s AND store = %(store)s AND path = %(path)s
FOR UPDATE;

-- name: upsert_file
-- The clock is read in VALUES, not in the SET list (a distributed planner refuses it there).
INSERT INTO pgmem.store_files (namespace, store, path, sha256, size, chunk_ids, indexed_at)
VALUES (%(ns)s, %(store)s, %(path)s, %(sha256)s, %(size)s, %(chunk_ids)s, now())
ON CONFLICT (namespace, store, path) DO UPDATE
SET sha256 = excluded.sha256, size = excluded.size, chunk_ids = excluded.chunk_ids, indexed_at = excluded.indexed_at;

-- name: delete_file
DELETE FROM pgmem.store_files WHERE namespace = %(ns)s AND store = %(store)s AND path = %(path)s;
