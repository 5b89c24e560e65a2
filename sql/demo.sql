-- Queries behind the report `pgmem demo` prints: plain SQL over pgmem's tables, to copy into psql. The
-- demo's team memory is no fork, so its own entries are all it holds (kept plain, for reading).

-- name: messages_by_role_and_action
-- What each role said in the team memory, by action.
SELECT m.sent_from AS role,
       regexp_replace(m.cause_by, '^.*\.', '') AS action,
       count(*) AS messages,
       sum(length(m.content)) AS characters
FROM {{entry_messages}}
WHERE e.namespace = %(ns)s AND e.memory = %(memory)s
GROUP BY 1, 2
ORDER BY min(e.seq);

-- name: action_flow
-- Which action's messages led to which: each message names the message it answered in
-- metadata->>'reply_to'. Median delay between a message and its answer, in seconds.
SELECT regexp_replace(src.cause_by, '^.*\.', '') AS from_action,
       regexp_replace(m.cause_by, '^.*\.', '') AS to_action,
       count(*) AS edges,
       round(percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM m.created_at - src.created_at))::numeric, 3) AS median_delay_s
FROM {{entry_messages}}
JOIN pgmem.messages AS src ON src.namespace = %(ns)s AND src.id = m.metadata ->> 'reply_to'
WHERE e.namespace = %(ns)s AND e.memory = %(memory)s
GROUP BY 1, 2
ORDER BY min(e.seq);

-- name: conversation
-- The team's conversation in order.
SELECT e.seq, m.sent_from, regexp_replace(m.cause_by, '^.*\.', '') AS action,
       array_to_string(m.send_to, ',') AS send_to, left(replace(m.content, E'\n', ' '), 70) AS content
FROM {{entry_messages}}
WHERE e.namespace = %(ns)s AND e.memory = %(memory)s
ORDER BY e.seq;

-- name: queues
-- The team's queues now (pgmem.queue_health): each role's inbox, filled by publish, and the engineer's
-- to-do queue (MetaGPT's MessageQueue). retries: claims after an item's first (it was nacked, or its lease
-- ended); waiting: items not acknowledged yet (dead letters excluded).
SELECT queue, acked, retries, dead, depth AS waiting
FROM pgmem.queue_health
WHERE namespace = %(ns)s
ORDER BY queue;

-- name: dead_letters
-- Messages a role could not act on, and why (the error its nack gave).
SELECT q.queue, m.sent_from, regexp_replace(m.cause_by, '^.*\.', '') AS action, q.attempts,
       q.last_error AS reason
FROM pgmem.queue_items AS q
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = q.message_id
WHERE q.namespace = %(ns)s AND q.status = 'dead'
ORDER BY q.id;

-- name: recalls
-- What each role recalled from its long-term memory before it answered (pgmem.retrieval_log; the label
-- is role:action).
SELECT label, count(*) AS searches, sum(cardinality(message_ids)) AS hits
FROM pgmem.retrieval_log
WHERE namespace = %(ns)s
GROUP BY label
ORDER BY min(logged_at);
