-- Filters on JSON (a message's metadata, an item's value: pgmem/planning/search/metadata.py) test
-- equality as containment through the operator pgmem.@> over this function: jsonb's own containment,
-- declared LEAKPROOF (it raises no error and has no side effect for any two jsonb values), so that under
-- row-level security Postgres may use the GIN indexes of operator class pgmem.jsonb_contains_ops for it.
-- Migration 0016 creates it so where a superuser migrates; otherwise as `SELECT $1 @> $2` (not leakproof:
-- the same results, no index).

-- name: jsonb_contains
CREATE OR REPLACE FUNCTION pgmem.jsonb_contains(jsonb, jsonb) RETURNS boolean
    LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'jsonb_contains';
