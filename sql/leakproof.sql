-- Functions of operators that must be leakproof for an index to serve them under row-level security:
-- Postgres applies the namespace's policy before any condition whose operator is not, so such a condition
-- is never an index condition for pgmem_app. Each is a built-in function declared LEAKPROOF (it raises no
-- error and has no side effect for any values of its types, so it reveals nothing about a row the policy
-- hides). Only a superuser may declare one; migrations 0016 and 0027 declare them so where a superuser
-- migrates, otherwise as SQL over the built-in operator (the same results, no index), until a superuser
-- runs `pgmem migrate` (pgmem.ops.migrate.LEAKPROOF_INDEXES).

-- name: jsonb_contains
-- Filters on JSON (a message's metadata, an item's value: pgmem/planning/search/metadata.py) test equality
-- as containment through the operator pgmem.@> over this function, which GIN indexes of operator class
-- pgmem.jsonb_contains_ops serve (migration 0016).
CREATE OR REPLACE FUNCTION pgmem.jsonb_contains(jsonb, jsonb) RETURNS boolean
    LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'jsonb_contains';

-- name: ts_match
-- Keyword search (messages.tsv against pgmem.fts_query) matches through the operator pgmem.@@ over this
-- function, which messages_tsv_idx serves with operator class pgmem.tsvector_match_ops (migration 0027).
CREATE OR REPLACE FUNCTION pgmem.ts_match(tsvector, tsquery) RETURNS boolean
    LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'ts_match_vq';
