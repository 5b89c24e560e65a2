-- Queries behind `pgmem stats` and `pgmem report` (pgmem/analytics.py), over the views of sql/views.sql.
-- Every query takes the parameters ns (NULL: every namespace) and since (NULL: all time); the report shows each
-- query's text with its parameters under the chart it draws, so that it can be copied into psql.

-- name: messages_by_memory
-- Message references by namespace, memory, role and action (`pgmem stats`' first table).
SELECT namespace, memory, role, action, count(*) AS messages
FROM pgmem.conversation_facts
WHERE memory IS NOT NULL
  AND (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
  AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4;

-- name: totals
-- Headline figures of `pgmem report`. messages: stored messages, each once whatever holds it; in_memories:
-- those at least one memory holds (the conversation); queue_only: those only a queue holds (pushed to a queue,
-- e.g. a to-do item, never added to a memory). actions: distinct non-empty cause_by of the messages in
-- memories (all_actions: of every stored message). Tokens over every stored message. first/last_acked_at: the
-- span of the queue throughput chart.
SELECT count(*) AS messages,
       count(*) FILTER (WHERE held) AS in_memories,
       count(*) FILTER (WHERE NOT held) AS queue_only,
       count(DISTINCT coalesce(nullif(sent_from, ''), role)) AS agents,
       count(DISTINCT cause_by) FILTER (WHERE cause_by <> '' AND held) AS actions,
       count(DISTINCT cause_by) FILTER (WHERE cause_by <> '') AS all_actions,
       (SELECT count(*) FROM pgmem.memories
        WHERE %(ns)s::text IS NULL OR namespace = %(ns)s::text) AS memories,
       coalesce(sum(length(content)), 0) AS characters,
       coalesce(sum(coalesce(tokens, ceil(length(content) / 4.0)::integer)), 0) AS tokens_estimated,
       min(created_at) AS first_at,
       max(created_at) AS last_at,
       (SELECT min(acked_at) FROM pgmem.queue_archive
        WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
          AND (%(since)s::timestamptz IS NULL OR acked_at >= %(since)s::timestamptz)) AS first_acked_at,
       (SELECT max(acked_at) FROM pgmem.queue_archive
        WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
          AND (%(since)s::timestamptz IS NULL OR acked_at >= %(since)s::timestamptz)) AS last_acked_at
FROM (SELECT m.*, EXISTS (SELECT 1 FROM pgmem.memory_entries AS e
                          WHERE e.namespace = m.namespace AND e.message_id = m.id) AS held
      FROM pgmem.messages AS m
      WHERE (%(ns)s::text IS NULL OR m.namespace = %(ns)s::text)
        AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)) AS m;

-- name: agents
-- What each agent wrote (the sender; the role when no sender is set). Over all time this is
-- pgmem.role_activity summed over its minutes; a time window needs the messages themselves.
SELECT coalesce(nullif(sent_from, ''), role) AS agent,
       count(*) AS messages,
       sum(length(content)) AS characters,
       sum(tokens) AS tokens,
       sum(coalesce(tokens, ceil(length(content) / 4.0)::integer)) AS tokens_estimated,
       min(created_at) AS first_seen,
       max(created_at) AS last_seen
FROM pgmem.messages
WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
  AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
GROUP BY 1
ORDER BY min(created_at), 1;

-- name: activity
-- Messages and estimated tokens per agent and time bucket (the bucket parameter, e.g. '10 seconds'), straight from
-- pgmem.messages so that the buckets can be finer than pgmem.role_activity's minutes.
SELECT date_bin(%(bucket)s::interval, created_at, timestamptz '2000-01-01 00:00:00+00') AS bucket,
       coalesce(nullif(sent_from, ''), role) AS agent,
       count(*) AS messages,
       sum(coalesce(tokens, ceil(length(content) / 4.0)::integer)) AS tokens_estimated
FROM pgmem.messages
WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
  AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: flow
-- The action flow of each namespace's largest memory (its shared conversation; the memory parameter picks another).
-- Stored entries only (here and in flow_graphs): analytics count each stored row once, and a fork's
-- inherited entries are its parent's rows.
-- Several namespaces: edges add up, and the delay shown is the median of their medians. With a time
-- window: the edges of pairs of actions that followed each other since then (counted over all time).
WITH chosen AS (
    SELECT DISTINCT ON (namespace) namespace, memory
    FROM (SELECT namespace, memory, count(*) AS entries FROM pgmem.memory_entries
          WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
            AND (%(memory)s::text IS NULL OR memory = %(memory)s::text)
          GROUP BY 1, 2) AS sizes
    ORDER BY namespace, entries DESC, memory
)
SELECT f.from_action_name,
       f.to_action_name,
       sum(f.edges)::bigint AS edges,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY f.median_delay_s)::numeric, 3) AS median_delay_s,
       min(f.first_seq) AS first_seq,
       string_agg(DISTINCT f.memory, ', ') AS memories
FROM chosen AS c
-- The constant filters reach the view's tables' indexes; the join with `chosen` is applied after.
JOIN (SELECT * FROM pgmem.action_flow AS v
      WHERE (%(ns)s::text IS NULL OR v.namespace = %(ns)s::text)
        AND (%(memory)s::text IS NULL OR v.memory = %(memory)s::text)) AS f
  ON f.namespace = c.namespace AND f.memory = c.memory
WHERE %(since)s::timestamptz IS NULL OR f.last_at >= %(since)s::timestamptz
GROUP BY 1, 2
ORDER BY min(f.first_seq), 1, 2;

-- name: flow_graphs
-- `pgmem report`'s action flow: one graph per namespace, of its largest memory (the memory parameter picks
-- another). cause_by '' (a message without an action) is the action name ''. With a time window: the edges of
-- pairs of actions that followed each other since then (counted over all time).
WITH chosen AS (
    SELECT DISTINCT ON (namespace) namespace, memory
    FROM (SELECT namespace, memory, count(*) AS entries FROM pgmem.memory_entries
          WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
            AND (%(memory)s::text IS NULL OR memory = %(memory)s::text)
          GROUP BY 1, 2) AS sizes
    ORDER BY namespace, entries DESC, memory
)
SELECT f.namespace,
       f.memory,
       f.from_action_name,
       f.to_action_name,
       sum(f.edges)::bigint AS edges,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY f.median_delay_s)::numeric, 3) AS median_delay_s
FROM chosen AS c
JOIN (SELECT * FROM pgmem.action_flow AS v
      WHERE (%(ns)s::text IS NULL OR v.namespace = %(ns)s::text)
        AND (%(memory)s::text IS NULL OR v.memory = %(memory)s::text)) AS f
  ON f.namespace = c.namespace AND f.memory = c.memory
WHERE %(since)s::timestamptz IS NULL OR f.last_at >= %(since)s::timestamptz
GROUP BY 1, 2, 3, 4
ORDER BY 1, min(f.first_seq), 3, 4;

-- name: talk
-- Who talks to whom: messages from each sender to each recipient ('<all>': a broadcast). Over all time
-- this is pgmem.who_talks_to_whom; a time window needs the messages themselves.
SELECT m.sent_from AS sender, r.recipient, count(*) AS messages,
       sum(coalesce(m.tokens, ceil(length(m.content) / 4.0)::integer)) AS tokens_estimated
FROM pgmem.messages AS m
CROSS JOIN LATERAL unnest(m.send_to) AS r(recipient)
WHERE (%(ns)s::text IS NULL OR m.namespace = %(ns)s::text)
  AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
GROUP BY 1, 2
ORDER BY 3 DESC, 1, 2;

-- name: queues
-- Queue health now (the time window does not apply: depth and dead letters are a state, not a history).
SELECT namespace, queue, depth, available, leased, delayed, dead, acked,
       round(oldest_pending_s::numeric, 1) AS oldest_pending_s, claims, retries, acked_last_minute,
       acked_per_minute_10m
FROM pgmem.queue_health
WHERE %(ns)s::text IS NULL OR namespace = %(ns)s::text
ORDER BY namespace, queue;

-- name: throughput
-- Items acknowledged per queue and time bucket (the bucket parameter, e.g. '1 second'), straight from
-- pgmem.queue_archive so that the buckets can be finer than pgmem.queue_throughput's minutes.
SELECT date_bin(%(bucket)s::interval, acked_at, timestamptz '2000-01-01 00:00:00+00') AS bucket,
       namespace,
       queue,
       count(*) AS acked,
       round(avg(extract(epoch FROM claimed_at - enqueued_at))::numeric, 3) AS mean_wait_s
FROM pgmem.queue_archive
WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
  AND (%(since)s::timestamptz IS NULL OR acked_at >= %(since)s::timestamptz)
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;

-- name: retrievals
-- Logged searches (PGMEM_RETRIEVAL_LOG=1) by label: how many, and how many hits they returned.
SELECT coalesce(label, '(no label)') AS label, count(*) AS searches,
       sum(cardinality(message_ids)) AS hits, max(logged_at) AS last_at
FROM pgmem.retrieval_log
WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
  AND (%(since)s::timestamptz IS NULL OR logged_at >= %(since)s::timestamptz)
GROUP BY 1
ORDER BY 2 DESC, 1;

-- name: summaries
-- Summaries per memory and level (pgmem.summary_compression): how much they compress what they cover.
SELECT namespace, memory, level, summaries, source_chars, summary_chars, char_ratio, token_ratio
FROM pgmem.summary_compression
WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
  AND (%(since)s::timestamptz IS NULL OR last_created_at >= %(since)s::timestamptz)
ORDER BY namespace, memory, level;

-- name: recall
-- Search recall (pgmem.search_recall; sampled searches, PGMEM_RECALL_SAMPLE): per namespace, model, kind of
-- search and strategy, the samples checked in the window, their mean and worst recall@k, how many await the
-- checker, and how long ago the last check ran.
SELECT namespace, model, kind, strategy,
       sum(checked)::bigint AS samples,
       round((sum(mean_recall * checked) / nullif(sum(checked), 0))::numeric, 3) AS mean_recall,
       round(min(min_recall)::numeric, 3) AS min_recall,
       (sum(samples) - sum(checked))::bigint AS unchecked,
       max(last_checked) AS last_checked,
       round(extract(epoch FROM now() - max(last_checked))::numeric, 0) AS checked_ago_s
FROM pgmem.search_recall
WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s::text)
  AND (%(since)s::timestamptz IS NULL
       OR bucket >= date_bin('5 minutes', %(since)s::timestamptz, timestamptz '2000-01-01 00:00:00+00'))
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4;
