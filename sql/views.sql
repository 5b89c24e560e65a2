-- pgmem's analytics views: part of the public interface, documented column by column in docs/analytics.md.
-- One `-- name: x` block per view, named like the view. Migrations create the views with their text
-- copied in (the baseline 0001 as of 2026-11-24). Every view carries `namespace`; filter on it (and on `memory` where
-- there is one) and the planner pushes the filter down to the tables' (namespace, …) indexes.
-- Actions (`cause_by`) are kept as stored (e.g. `metagpt.actions.write_prd.WritePRD`); `action_name` is
-- the part after the last dot.
-- Every view runs with the caller's rights (`security_invoker`, migration 0004): it shows the rows that
-- row-level security lets the caller see in the tables, one namespace for pgmem's application role.
-- Changing a view: add a migration that re-creates it with the new text copied in (CREATE OR REPLACE
-- VIEW; new columns only at the end, the columns are public); tests/migrations/test_database_code.py
-- fails until the migrated database's view equals the one declared here.
-- Tokens: `tokens` is the count a writer stored (NULL when nobody counted); `tokens_estimated` falls back
-- to ceil(characters / 4), OpenAI's rule of thumb for English text.

-- name: conversation_facts
-- One row per message per memory holding it (a message in no memory: one row with memory NULL).
CREATE VIEW pgmem.conversation_facts WITH (security_invoker = true) AS
SELECT m.namespace,
       e.memory,
       e.seq,
       m.seq AS message_seq,
       m.id AS message_id,
       m.role,
       m.sent_from AS sender,
       m.send_to AS recipients,
       m.cause_by AS action,
       regexp_replace(m.cause_by, '^.*\.', '') AS action_name,
       m.metadata ->> 'reply_to' AS reply_to,
       m.created_at,
       e.added_at,
       length(m.content) AS characters,
       m.tokens,
       coalesce(m.tokens, ceil(length(m.content) / 4.0)::integer) AS tokens_estimated
FROM pgmem.messages AS m
LEFT JOIN pgmem.memory_entries AS e ON e.namespace = m.namespace AND e.message_id = m.id;

-- name: role_activity
-- Per namespace, agent and minute: what each agent (the sender; the role when no sender is set) wrote.
-- Each message counts once, whatever the memories holding it.
CREATE VIEW pgmem.role_activity WITH (security_invoker = true) AS
SELECT m.namespace,
       coalesce(nullif(m.sent_from, ''), m.role) AS agent,
       date_bin('1 minute', m.created_at, timestamptz '2000-01-01 00:00:00+00') AS minute,
       count(*) AS messages,
       sum(length(m.content)) AS characters,
       sum(m.tokens) AS tokens,
       sum(coalesce(m.tokens, ceil(length(m.content) / 4.0)::integer)) AS tokens_estimated,
       min(m.created_at) AS first_seen,
       max(m.created_at) AS last_seen
FROM pgmem.messages AS m
GROUP BY 1, 2, 3;

-- name: action_activity
-- Per namespace, action and minute: the messages each action produced. Each message counts once.
CREATE VIEW pgmem.action_activity WITH (security_invoker = true) AS
SELECT m.namespace,
       m.cause_by AS action,
       regexp_replace(m.cause_by, '^.*\.', '') AS action_name,
       date_bin('1 minute', m.created_at, timestamptz '2000-01-01 00:00:00+00') AS minute,
       count(*) AS messages,
       sum(length(m.content)) AS characters,
       sum(m.tokens) AS tokens,
       sum(coalesce(m.tokens, ceil(length(m.content) / 4.0)::integer)) AS tokens_estimated,
       min(m.created_at) AS first_seen,
       max(m.created_at) AS last_seen
FROM pgmem.messages AS m
GROUP BY 1, 2, 3, 4;

-- name: action_flow
-- Which action's messages were followed by which, per memory. A message follows the message it names in
-- metadata->>'reply_to' when it names one (that message may be in any memory of the namespace), else
-- the previous message of the memory (by seq). The first message of a memory follows nothing.
-- Delays are between the two messages' created_at, in seconds.
CREATE VIEW pgmem.action_flow WITH (security_invoker = true) AS
WITH steps AS (
    SELECT e.namespace, e.memory, e.seq, e.cause_by, m.created_at, m.metadata ->> 'reply_to' AS reply_to,
           lag(e.cause_by) OVER w AS previous_action,
           lag(m.created_at) OVER w AS previous_at
    FROM pgmem.memory_entries AS e
    JOIN pgmem.messages AS m ON m.namespace = e.namespace AND m.id = e.message_id
    WINDOW w AS (PARTITION BY e.namespace, e.memory ORDER BY e.seq)
), edges AS (
    SELECT s.namespace, s.memory, s.seq,
           CASE WHEN s.reply_to IS NULL THEN s.previous_action ELSE src.cause_by END AS from_action,
           s.cause_by AS to_action,
           extract(epoch FROM s.created_at
                   - CASE WHEN s.reply_to IS NULL THEN s.previous_at ELSE src.created_at END) AS delay_s,
           s.created_at
    FROM steps AS s
    LEFT JOIN pgmem.messages AS src ON src.namespace = s.namespace AND src.id = s.reply_to
)
SELECT namespace,
       memory,
       from_action,
       to_action,
       regexp_replace(from_action, '^.*\.', '') AS from_action_name,
       regexp_replace(to_action, '^.*\.', '') AS to_action_name,
       count(*) AS edges,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY delay_s) AS median_delay_s,
       min(delay_s) AS min_delay_s,
       max(delay_s) AS max_delay_s,
       min(seq) AS first_seq,
       min(created_at) AS first_at,
       max(created_at) AS last_at
FROM edges
WHERE from_action IS NOT NULL
GROUP BY namespace, memory, from_action, to_action;

-- name: who_talks_to_whom
-- Sender → recipient message counts (one per recipient in send_to; a broadcast's recipient is '<all>').
-- Each message counts once, whatever the memories holding it.
CREATE VIEW pgmem.who_talks_to_whom WITH (security_invoker = true) AS
SELECT m.namespace,
       m.sent_from AS sender,
       r.recipient,
       count(*) AS messages,
       sum(coalesce(m.tokens, ceil(length(m.content) / 4.0)::integer)) AS tokens_estimated,
       min(m.created_at) AS first_at,
       max(m.created_at) AS last_at
FROM pgmem.messages AS m
CROSS JOIN LATERAL unnest(m.send_to) AS r(recipient)
GROUP BY 1, 2, 3;

-- name: queue_health
-- Per namespace and queue: the live items (pgmem.queue_items) and the acknowledged ones (pgmem.queue_archive).
CREATE VIEW pgmem.queue_health WITH (security_invoker = true) AS
WITH items AS (
    SELECT namespace, queue, status, enqueued_at, available_at, lease_until, attempts,
           NULL::timestamptz AS acked_at
    FROM pgmem.queue_items
    UNION ALL
    SELECT namespace, queue, 'acked', enqueued_at, NULL, NULL, attempts, acked_at
    FROM pgmem.queue_archive
)
SELECT namespace,
       queue,
       count(*) FILTER (WHERE status = 'ready') AS depth,
       count(*) FILTER (WHERE status = 'ready' AND available_at <= now()) AS available,
       count(*) FILTER (WHERE status = 'ready' AND lease_until > now()) AS leased,
       count(*) FILTER (WHERE status = 'ready' AND available_at > now()
                          AND (lease_until IS NULL OR lease_until <= now())) AS delayed,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       count(*) FILTER (WHERE status = 'acked') AS acked,
       extract(epoch FROM now() - min(enqueued_at) FILTER (WHERE status = 'ready')) AS oldest_pending_s,
       coalesce(sum(attempts), 0) AS claims,
       coalesce(sum(greatest(attempts - 1, 0)), 0) AS retries,
       count(*) FILTER (WHERE status = 'acked' AND acked_at > now() - interval '1 minute') AS acked_last_minute,
       round(count(*) FILTER (WHERE status = 'acked' AND acked_at > now() - interval '10 minutes') / 10.0, 2)
           AS acked_per_minute_10m,
       max(acked_at) AS last_acked_at
FROM items
GROUP BY namespace, queue;

-- name: queue_throughput
-- Per namespace, queue and minute: items acknowledged, with their mean wait (enqueue to claim) and
-- processing time (claim to acknowledgement). Retention (purge_archive) removes old minutes.
CREATE VIEW pgmem.queue_throughput WITH (security_invoker = true) AS
SELECT namespace,
       queue,
       date_bin('1 minute', acked_at, timestamptz '2000-01-01 00:00:00+00') AS minute,
       count(*) AS acked,
       sum(attempts) AS claims,
       avg(extract(epoch FROM claimed_at - enqueued_at)) AS mean_wait_s,
       avg(extract(epoch FROM acked_at - claimed_at)) AS mean_processing_s
FROM pgmem.queue_archive
GROUP BY 1, 2, 3;

-- name: retrieval_hits
-- One row per message a logged search returned (pgmem.retrieval_log, opt-in: PGMEM_RETRIEVAL_LOG=1), with
-- the message as it is now (NULL columns when it was deleted since).
CREATE VIEW pgmem.retrieval_hits WITH (security_invoker = true) AS
SELECT l.namespace,
       l.id AS search_id,
       l.logged_at,
       l.kind,
       l.memory,
       l.label,
       l.query,
       l.k,
       h.rank,
       h.message_id,
       h.score,
       m.sent_from AS sender,
       m.cause_by AS action,
       m.created_at AS message_created_at,
       m.content
FROM pgmem.retrieval_log AS l
CROSS JOIN LATERAL unnest(l.message_ids, l.scores) WITH ORDINALITY AS h(message_id, score, rank)
LEFT JOIN pgmem.messages AS m ON m.namespace = l.namespace AND m.id = h.message_id;

-- name: summary_compression
-- Per namespace, memory and summary level: how much the summaries compress the messages they cover.
-- Ratios are source / summary (higher is more compression); NULL when a side was not counted.
CREATE VIEW pgmem.summary_compression WITH (security_invoker = true) AS
SELECT s.namespace,
       s.memory,
       s.level,
       count(*) AS summaries,
       min(s.first_seq) AS first_seq,
       max(s.last_seq) AS last_seq,
       sum(s.source_chars) AS source_chars,
       sum(length(s.content)) AS summary_chars,
       sum(s.source_tokens) AS source_tokens,
       sum(s.summary_tokens) AS summary_tokens,
       round(sum(s.source_chars)::numeric / nullif(sum(length(s.content)), 0), 2) AS char_ratio,
       round(sum(s.source_tokens)::numeric / nullif(sum(s.summary_tokens), 0), 2) AS token_ratio,
       min(s.created_at) AS first_created_at,
       max(s.created_at) AS last_created_at
FROM pgmem.summaries AS s
GROUP BY s.namespace, s.memory, s.level;

-- name: search_recall
-- Recall of sampled searches (pgmem.recall_samples, opt-in: PGMEM_RECALL_SAMPLE), per namespace, model,
-- kind of search, strategy that served it and five minutes of sampling: how many were sampled and checked,
-- the mean and worst recall@k (the share of the exact top-k the served answer held, the exact one as of
-- the check), and when the last check ran. Migration 0019.
CREATE VIEW pgmem.search_recall WITH (security_invoker = true) AS
SELECT s.namespace,
       em.name AS model,
       s.kind,
       s.strategy,
       date_bin('5 minutes', s.sampled_at, timestamptz '2000-01-01 00:00:00+00') AS bucket,
       count(*) AS samples,
       count(s.recall) AS checked,
       avg(s.recall) AS mean_recall,
       min(s.recall) AS min_recall,
       avg(s.k) AS mean_k,
       max(s.ef_search) AS max_ef_search,
       max(s.checked_at) AS last_checked,
       max(extract(epoch FROM s.checked_at - s.sampled_at)) AS max_lag_s
FROM pgmem.recall_samples AS s
LEFT JOIN pgmem.embedding_models AS em ON em.id = s.model_id
GROUP BY 1, 2, 3, 4, 5;
