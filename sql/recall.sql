-- Named queries of search recall (pgmem._async.recall): sampled searches (pgmem.recall_samples,
-- migration 0019) and their checks. The view over them, pgmem.search_recall, is in sql/views.sql.

-- name: record_samples
-- One row per sampled query: %(qs)s the query vectors, %(served)s a JSON array of the id lists each served.
INSERT INTO pgmem.recall_samples
    (namespace, kind, memory, model_id, strategy, ef_search, k, query, filters, options, served_ids)
SELECT %(ns)s, %(kind)s, %(memory)s, %(model)s, %(strategy)s, %(ef_search)s, %(k)s, q.v, %(filters)s::jsonb,
       %(options)s::jsonb, ARRAY(SELECT jsonb_array_elements_text(s.ids))
FROM unnest(%(qs)s::vector[]) WITH ORDINALITY AS q(v, ord)
JOIN jsonb_array_elements(%(served)s::jsonb) WITH ORDINALITY AS s(ids, ord) ON s.ord = q.ord;

-- name: claim_unchecked
-- The oldest unchecked samples of the namespace with their model, locked for this check (another
-- process's checker skips them: on recall_samples_unchecked_idx).
SELECT s.id, s.sampled_at, s.kind, s.k, s.query, s.filters, s.options, s.served_ids,
       em.id AS model_id, em.name, em.dimension, em.kind AS model_kind, em.distance
FROM pgmem.recall_samples AS s
JOIN pgmem.embedding_models AS em ON em.id = s.model_id
WHERE s.namespace = %(ns)s AND s.checked_at IS NULL
ORDER BY s.id
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED;

-- name: store_check
UPDATE pgmem.recall_samples
SET checked_at = now(), exact_ids = %(exact)s::text[], recall = %(recall)s
WHERE namespace = %(ns)s AND id = %(id)s;

-- name: purge_recall_samples
-- Samples of the namespace taken before the cutoff (on recall_samples_sampled_idx): %(before)s, else
-- %(age)s seconds before now (as sql/retention.sql's cutoff fragment).
WITH gone AS (
    DELETE FROM pgmem.recall_samples
    WHERE namespace = %(ns)s AND sampled_at < least(%(before)s::timestamptz, now() - %(age)s::float8 * interval '1 second')
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: recall_summary
-- Per model, kind and strategy: the samples of the namespace taken since a time (AsyncSearchRecall.summary).
SELECT em.name AS model, s.kind, s.strategy, count(s.recall) AS samples, avg(s.recall) AS mean_recall,
       min(s.recall) AS min_recall, max(s.checked_at) AS last_checked,
       count(*) FILTER (WHERE s.checked_at IS NULL) AS unchecked
FROM pgmem.recall_samples AS s
LEFT JOIN pgmem.embedding_models AS em ON em.id = s.model_id
WHERE s.namespace = %(ns)s AND (%(since)s::timestamptz IS NULL OR s.sampled_at >= %(since)s::timestamptz)
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;
