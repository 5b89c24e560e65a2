-- What pgmem.telemetry reads for its metrics: one statement per collection of the metrics (every export
-- interval, typically 60 s), never per call.

-- name: gauges
-- Per queue: items not yet acknowledged (leased ones included), those under a lease now, and dead
-- letters; per embedding model: the namespace's messages queued to be embedded (counted as
-- vectors.pending counts them: rows of deleted messages aside). One pass over the namespace's queue items.
SELECT 'queue' AS kind, q.queue AS name,
       count(*) FILTER (WHERE q.status = 'ready') AS depth,
       count(*) FILTER (WHERE q.status = 'ready' AND q.lease_until > now()) AS claimed,
       count(*) FILTER (WHERE q.status = 'dead') AS dead
FROM pgmem.queue_items AS q
WHERE q.namespace = %(ns)s
GROUP BY q.queue
UNION ALL
SELECT 'model', m.name, count(*), 0, 0
FROM pgmem.embedding_outbox AS o
JOIN pgmem.embedding_models AS m ON m.id = o.model_id
WHERE o.namespace = %(ns)s
  AND EXISTS (SELECT 1 FROM pgmem.messages AS g WHERE g.namespace = %(ns)s AND g.id = o.message_id)
GROUP BY m.name;
