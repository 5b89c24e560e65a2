-- Named queries of the queue repository (pgmem._async.queues). Items live in pgmem.queue_items while
-- ready, leased or dead; an acknowledged item moves to the archive in the same statement: one row of
-- pgmem.queue_archive_batches per statement and queue, the items in arrays (pgmem.queue_archive unnests it).
-- A claimed item stays 'ready' with available_at = the end of its lease, so an item whose worker died
-- becomes claimable again by itself; `attempts` counts claims and fences ack/nack/extend.
-- Statements that make items claimable ring the doorbell (a `rung` CTE inserts into pgmem.doorbell, in
-- the writer's transaction): the process elected to read it announces the queue with NOTIFY pgmem_queue
-- once the write has committed (pgmem.ring_doorbell). A writer never sends NOTIFY itself: notifying
-- commits queue behind one cluster-wide lock.
-- The claiming queries (claim, ack_claim, take) take their LIMIT as {limit}, a literal the repository
-- fills in: a prepared statement is planned once (generic plan) only when its plan does not depend on
-- its parameters, and a LIMIT parameter is planned as 10% of the table (hash joins over sequential
-- scans), so with `LIMIT $1` Postgres re-planned every claim (0.2-0.3 ms, about half of its CPU).
-- The acknowledged ids arrive as arrays, which a generic plan takes for 10 elements: acknowledging one
-- item, the generic plan then looked dearer than a custom one by more than the cost of planning, and
-- Postgres planned claim(ack=) at batch 1 and 2 anew on every call (pg_prepared_statements: 0 generic
-- plans). `LIMIT cardinality(ids)` cuts no row (it is the arrays' length) but is costed, being no
-- constant, as 10% of its input: the generic plan counts one row and is kept at every batch size.
-- Item rows are {{queue_item_row}}: a pgmem.planning.rows.QueueItemRow, then a MessageRow (the
-- message's jsonb columns as text: they are parsed when the item's message is first read, not for every
-- item; see pgmem.planning.queues).

-- fragment: queue_item_columns
-- The item's columns of a queue item row (rows.QueueItemRow), for the alias q: pgmem.queue_items, or a
-- CTE that returned these columns (and message_id) from it.
q.id, q.queue, q.priority, q.attempts, q.max_attempts, q.enqueued_at, q.available_at, q.lease_until,
q.dedup_key

-- fragment: queue_item_row
-- An item row: the item (alias q), then its message (alias m), read outside any memory (seq NULL).
{{queue_item_columns}},
NULL::bigint AS seq, {{message_columns}}

-- fragment: claim_items
-- The claim of `candidate` (the item ids a statement chose and locked): the lease is the new
-- available_at; attempts + 1 is the fencing token the worker must present to ack, nack or extend.
claimed AS (
    UPDATE pgmem.queue_items AS q
    SET attempts = q.attempts + 1,
        available_at = now() + %(lease)s * interval '1 second',
        lease_until = now() + %(lease)s * interval '1 second',
        claimed_at = now(),
        claimed_by = %(worker)s
    FROM candidate
    WHERE q.namespace = %(ns)s AND q.id = candidate.id
    RETURNING {{queue_item_columns}}, q.message_id
)

-- fragment: archived_refs
-- A CTE after `archived` (an INSERT into pgmem.queue_archive_batches RETURNING batch, message_ids): the
-- messages each new archive row names, in pgmem.queue_archive_refs.
archived_refs AS (
    INSERT INTO pgmem.queue_archive_refs (namespace, message_id, batch)
    SELECT DISTINCT %(ns)s, r.message_id, a.batch
    FROM archived AS a CROSS JOIN LATERAL unnest(a.message_ids) AS r(message_id)
)

-- fragment: acknowledge
-- Three CTEs: `done` deletes the items %(ids)s whose lease the caller still holds (same attempt, %(attempts)s,
-- and the lease not yet taken by another claim; the ids are distinct), `archived` stores them in the
-- archive, one row per queue, and `archived_refs` records which messages each archive row names
-- (pgmem.queue_archive_refs, which removals probe by message id).
done AS (
    DELETE FROM pgmem.queue_items AS q
    USING (SELECT * FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) LIMIT cardinality(%(ids)s::bigint[]))
          AS a(id, attempts)  -- LIMIT: see the header
    WHERE q.namespace = %(ns)s AND q.id = a.id AND q.attempts = a.attempts AND q.status = 'ready'
    RETURNING q.id, q.queue, q.message_id, q.priority, q.enqueued_at, q.claimed_at, q.attempts,
              q.claimed_by, q.dedup_key
), archived AS (
    INSERT INTO pgmem.queue_archive_batches (namespace, queue, ids, message_ids, priorities, enqueued_at,
                                             claimed_at, attempts, claimed_by, dedup_keys)
    SELECT %(ns)s, queue, array_agg(id), array_agg(message_id), array_agg(priority), array_agg(enqueued_at),
           array_agg(claimed_at), array_agg(attempts), array_agg(claimed_by), array_agg(dedup_key)
    FROM done
    GROUP BY queue
    RETURNING batch, message_ids
), {{archived_refs}}

-- fragment: ring_queue
-- A CTE after `item` (an INSERT into pgmem.queue_items RETURNING id): ring the doorbell for the queue
-- when an item was enqueued (see the header).
rung AS (
    INSERT INTO pgmem.doorbell (namespace, channel, name)
    SELECT %(ns)s, 'pgmem_queue', %(queue)s FROM item
    RETURNING 1
)

-- name: push
-- Store the message once (an id stored with other content fails the statement: the fragment
-- message_once), enqueue it (unless a ready item of the queue has the same dedup key), and ring the
-- doorbell for the queue: waiting consumers are woken once the push has committed, never before, and not
-- at all when it rolls back (NOTIFY pgmem_queue with the queue's pgmem.notify_tag, which tells another
-- tenant nothing).
WITH {{message_once}}, item AS (
    INSERT INTO pgmem.queue_items (namespace, queue, message_id, priority, available_at, max_attempts,
                                   dedup_key)
    VALUES (%(ns)s, %(queue)s, %(id)s, %(priority)s, now() + %(delay)s * interval '1 second',
            %(max_attempts)s, %(dedup_key)s)
    ON CONFLICT (namespace, queue, dedup_key) WHERE dedup_key IS NOT NULL AND status = 'ready' DO NOTHING
    RETURNING id
), {{ring_queue}}
SELECT (SELECT id FROM item) AS id, (SELECT count(*) FROM rung) AS rung;

-- name: push_once
-- push with an idempotency key: the key is recorded with the item's id, taken from the items' sequence
-- first, in the same statement (ON CONFLICT DO NOTHING). A key recorded before (a push sent again after
-- its connection was lost) enqueues nothing, and the id is the first push's. Two pushes of one key at the
-- same moment: the second waits for the first to commit and enqueues nothing. The first push's id is read
-- only when this one recorded nothing: whether the CTEs share a snapshot (PostgreSQL) or run one after
-- another (Citus), a new key whose item a dedup key skipped returns no id.
WITH new AS (
    SELECT nextval(pg_get_serial_sequence('pgmem.queue_items', 'id')) AS id
), recorded AS (
    INSERT INTO pgmem.idempotency_keys (namespace, key, result)
    SELECT %(ns)s, %(idempotency_key)s, id FROM new
    ON CONFLICT (namespace, key) DO NOTHING
    RETURNING result
), {{message_once}}, item AS (
    INSERT INTO pgmem.queue_items (id, namespace, queue, message_id, priority, available_at, max_attempts,
                                   dedup_key)
    SELECT result, %(ns)s, %(queue)s, %(id)s, %(priority)s, now() + %(delay)s * interval '1 second',
           %(max_attempts)s, %(dedup_key)s
    FROM recorded
    ON CONFLICT (namespace, queue, dedup_key) WHERE dedup_key IS NOT NULL AND status = 'ready' DO NOTHING
    RETURNING id
), {{ring_queue}}
SELECT coalesce((SELECT id FROM item),
                (SELECT result FROM pgmem.idempotency_keys
                 WHERE namespace = %(ns)s AND key = %(idempotency_key)s AND NOT EXISTS (SELECT 1 FROM recorded)))
       AS id,
       (SELECT count(*) FROM rung) AS rung;

-- name: purge_idempotency_keys
-- Forget the idempotency keys recorded more than %(age)s seconds ago (created_at has a BRIN index): a push
-- sent again with one of them afterwards enqueues again. Returns how many were deleted.
WITH gone AS (
    DELETE FROM pgmem.idempotency_keys
    WHERE namespace = %(ns)s AND created_at < now() - %(age)s * interval '1 second'
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: push_many
-- A batch, one array per column; items are numbered in batch order. Returns the ids of the new items.
-- Messages are stored in batch order (messages.sql add_many stores them in id order: see there); one
-- stored with other content, or repeated with other contents, fails the statement (the fragment batch_clash).
WITH batch AS (
    SELECT *
    FROM unnest({{message_arrays}}, %(dedup_key)b::text[])
         WITH ORDINALITY AS b({{message_fields}}, dedup_key, ord)
), stored AS (
    SELECT m.id, m.content_hash
    FROM pgmem.messages AS m
    WHERE m.namespace = %(ns)s AND m.id = ANY(%(id)b::text[])
), message AS (
    {{insert_message_head}}
    SELECT {{message_from_batch}}
    FROM batch ORDER BY ord
    ON CONFLICT (namespace, id) DO NOTHING
    RETURNING id
), {{batch_clash}}, item AS (
    INSERT INTO pgmem.queue_items (namespace, queue, message_id, priority, available_at, max_attempts,
                                   dedup_key)
    SELECT %(ns)s, %(queue)s, id, %(priority)s, now() + %(delay)s * interval '1 second', %(max_attempts)s,
           dedup_key
    FROM batch ORDER BY ord
    ON CONFLICT (namespace, queue, dedup_key) WHERE dedup_key IS NOT NULL AND status = 'ready' DO NOTHING
    RETURNING id
), rung AS (
    INSERT INTO pgmem.doorbell (namespace, channel, name)
    SELECT %(ns)s, 'pgmem_queue', %(queue)s WHERE EXISTS (SELECT 1 FROM item)
    RETURNING 1
)
SELECT coalesce((SELECT array_agg(id ORDER BY id) FROM item), '{}') AS ids, (SELECT count(*) FROM rung) AS rung;

-- name: claim
-- Take up to {limit} claimable items, best priority (lowest) first, then oldest. SKIP LOCKED: concurrent
-- claimers take different items instead of queueing behind each other's row locks (see claim_items).
WITH candidate AS (
    SELECT id FROM pgmem.queue_items
    WHERE namespace = %(ns)s AND queue = %(queue)s AND status = 'ready' AND available_at <= now()
    ORDER BY priority, id
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
), {{claim_items}}
SELECT {{queue_item_row}}
FROM claimed AS q
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = q.message_id
ORDER BY q.priority, q.id;

-- name: ack_claim
-- A consumer's loop step in one statement, one round trip and one commit: claim the next up to {limit}
-- items (as `claim`), then acknowledge the ones it holds (as `ack`; %(ids)s are distinct).
-- The claim goes first so that it reads a fresh snapshot (every part of a statement reads the one taken
-- when it began). Claiming after the acknowledgements, it saw rows other consumers had claimed in the
-- meantime as claimable, and FOR UPDATE locks such a row's newest version before re-checking it: the
-- row stayed locked until commit, and its holder's next acknowledgement waited (migration 0012).
-- The acknowledged ids are excluded from the claim (an acknowledged item whose lease ran out looks
-- claimable). If an acknowledgement did not hold, pgmem.queue_lease_lost raises SQLSTATE PGM01 and
-- the whole statement rolls back: nothing is claimed and nothing acknowledged. UNION ALL runs its
-- branches in order, so the acknowledgements (and that check) run after the claim. Holding its new
-- claims while it waits for a row to acknowledge, the statement can deadlock with a consumer that
-- re-claimed that row after its lease ran out; the repository then runs it again.
WITH candidate AS (
    SELECT id FROM pgmem.queue_items
    WHERE namespace = %(ns)s AND queue = %(queue)s AND status = 'ready' AND available_at <= now()
      AND id <> ALL(%(ids)s::bigint[])
    ORDER BY priority, id
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
), {{claim_items}}, {{acknowledge}}
(SELECT {{queue_item_row}}
 FROM claimed AS q
 JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = q.message_id
 ORDER BY q.priority, q.id)
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL
FROM (SELECT count(*) AS n, array_agg(id) AS acknowledged FROM done) AS outcome
WHERE CASE WHEN outcome.n = cardinality(%(ids)s::bigint[]) THEN false
           ELSE pgmem.queue_lease_lost(outcome.acknowledged, %(ids)s::bigint[]) END;

-- name: ack
-- Move acknowledged items to the archive, each only if the caller still holds its lease (same attempt
-- and the lease not yet taken by another claim). Returns the ids acknowledged.
WITH {{acknowledge}}
SELECT id FROM done;

-- name: nack_retry
-- Give an item back to be retried after %(delay)s seconds, when it has attempts left and %(dead)s is
-- false. Returns its new status, nothing when the caller no longer holds the lease or the item is to die
-- (nack_dead). Two statements, not a CASE around now(): a distributed planner refuses the clock there.
-- Rings the doorbell: a consumer waiting on the queue slept until the lease's end at the latest, and
-- learns the item's new time.
WITH item AS (
    UPDATE pgmem.queue_items
    SET status = 'ready',
        died_at = NULL,
        available_at = now() + %(delay)s * interval '1 second',
        lease_until = NULL,
        last_error = %(error)s
    WHERE namespace = %(ns)s AND id = %(id)s AND attempts = %(attempts)s AND status = 'ready'
      AND attempts < max_attempts AND NOT %(dead)s
    RETURNING queue, status, available_at
), rung AS (
    INSERT INTO pgmem.doorbell (namespace, channel, name)
    SELECT %(ns)s, 'pgmem_queue', queue FROM item
)
SELECT status, available_at FROM item;

-- name: nack_dead
-- Dead-letter an item given back that has used max_attempts, or when %(dead)s. Returns its new status,
-- nothing when the caller no longer holds the lease or the item is to be retried (nack_retry).
UPDATE pgmem.queue_items
SET status = 'dead',
    died_at = now(),
    available_at = now() + %(delay)s * interval '1 second',
    lease_until = NULL,
    last_error = %(error)s
WHERE namespace = %(ns)s AND id = %(id)s AND attempts = %(attempts)s AND status = 'ready'
  AND (attempts >= max_attempts OR %(dead)s)
RETURNING status, available_at;

-- name: extend
-- Heartbeat: push the lease of a held item %(lease)s seconds from now. Returns the new lease end.
UPDATE pgmem.queue_items
SET available_at = now() + %(lease)s * interval '1 second',
    lease_until = now() + %(lease)s * interval '1 second'
WHERE namespace = %(ns)s AND id = %(id)s AND attempts = %(attempts)s AND status = 'ready'
  AND lease_until IS NOT NULL
RETURNING lease_until;

-- name: notify_key
-- The namespace's notification key (created on first use): wait() matches the tags of its queues with it
-- (pgmem.planning.notify.tag).
SELECT pgmem.notify_key(%(ns)s)::text;

-- name: next_available
-- Seconds until the next item of the queue becomes claimable (NULL: the queue has no ready item).
SELECT extract(epoch FROM min(available_at) - now())::float8 AS seconds FROM pgmem.queue_items
WHERE namespace = %(ns)s AND queue = %(queue)s AND status = 'ready';

-- name: depth
-- Ready items (leased ones included) and dead letters of a queue, each counted on its partial index
-- (queue_items_claim_idx, queue_items_dead_idx): the cost follows the queue's items, not the table's.
-- One count over (namespace, queue) matched no index and read the whole table (every queue of every
-- namespace) on every call.
SELECT ready.n AS ready, ready.claimable,
       (SELECT count(*) FROM pgmem.queue_items
        WHERE namespace = %(ns)s AND queue = %(queue)s AND status = 'dead') AS dead
FROM (SELECT count(*) AS n, count(*) FILTER (WHERE available_at <= now()) AS claimable
      FROM pgmem.queue_items
      WHERE namespace = %(ns)s AND queue = %(queue)s AND status = 'ready') AS ready;

-- name: dead_letters
SELECT {{queue_item_row}}
FROM pgmem.queue_items AS q
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = q.message_id
WHERE q.namespace = %(ns)s AND q.queue = %(queue)s AND q.status = 'dead'
ORDER BY q.died_at, q.id
LIMIT %(limit)s;

-- name: requeue_dead
-- Put dead letters back (all of the queue's when %(ids)s is NULL) with a fresh attempt budget, and ring
-- the doorbell for the queue when any came back.
WITH item AS (
    UPDATE pgmem.queue_items
    SET status = 'ready', died_at = NULL, attempts = 0, available_at = now(), lease_until = NULL
    WHERE namespace = %(ns)s AND queue = %(queue)s AND status = 'dead'
      AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
    RETURNING id
), rung AS (
    INSERT INTO pgmem.doorbell (namespace, channel, name)
    SELECT %(ns)s, 'pgmem_queue', %(queue)s WHERE EXISTS (SELECT 1 FROM item)
)
SELECT id FROM item;

-- name: clear_queue
-- Remove every live item of a queue (ready, leased and dead). Returns how many. The status condition
-- (every status there is: queue_items_status_check) lets it find them on the two partial indexes.
WITH gone AS (
    DELETE FROM pgmem.queue_items
    WHERE namespace = %(ns)s AND queue = %(queue)s AND (status = 'ready' OR status = 'dead')
    RETURNING message_id
)
SELECT count(*) FROM gone;

-- name: peek
-- The live items of a queue in claim order, without claiming them (MessageQueue.dump).
SELECT {{queue_item_row}}
FROM pgmem.queue_items AS q
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = q.message_id
WHERE q.namespace = %(ns)s AND q.queue = %(queue)s AND q.status = 'ready'
ORDER BY q.priority, q.id
LIMIT %(limit)s;

-- name: subscribe
INSERT INTO pgmem.subscriptions (namespace, subscriber, addresses, watch)
VALUES (%(ns)s, %(subscriber)s, %(addresses)s::text[], %(watch)s::text[])
ON CONFLICT (namespace, subscriber) DO UPDATE SET addresses = excluded.addresses, watch = excluded.watch;

-- name: unsubscribe
DELETE FROM pgmem.subscriptions WHERE namespace = %(ns)s AND subscriber = %(subscriber)s;

-- name: publish
-- Store a message in a memory (the shared environment) and deliver it to the inbox queue
-- ('inbox:' || subscriber) of every subscriber it is addressed to, all in one statement: either the
-- message and all its deliveries exist, or none. Addressed means: one of the subscriber's addresses is in
-- send_to, or the message is a broadcast ('<all>') of an action the subscriber watches (watch NULL: any).
-- An id stored with other content fails the statement (the fragment message_once). Returns a PublishRow
-- (embeds: whether the memory has embedding models, whose embedder then has work; undecided: false, no
-- vector is stored here).
WITH {{publish_deliveries}}
SELECT (SELECT seq FROM entry) AS seq, (SELECT array_agg(queue ORDER BY queue) FROM delivery) AS inboxes,
       (SELECT count(*) FROM rung) AS rung, {{memory_embeds}} AS embeds, false AS undecided;

-- fragment: publish_deliveries
-- The CTEs of publish: the message, its entry, its deliveries and their doorbell rings.
{{settle_shared}}, memory AS (
    {{register_memory}}
), {{message_once}}, entry AS (
    INSERT INTO pgmem.memory_entries (namespace, memory, message_id, cause_by)
    SELECT %(ns)s, %(memory)s, %(id)s, %(cause_by)s FROM settle
    ON CONFLICT DO NOTHING
    RETURNING seq
), target AS (
    SELECT s.subscriber FROM pgmem.subscriptions AS s
    WHERE s.namespace = %(ns)s
      AND EXISTS (SELECT 1 FROM entry)
      AND (s.addresses && %(send_to)s::text[]
           OR ('<all>' = ANY(%(send_to)s::text[]) AND (s.watch IS NULL OR %(cause_by)s = ANY(s.watch))))
), delivery AS (
    INSERT INTO pgmem.queue_items (namespace, queue, message_id, priority)
    SELECT %(ns)s, 'inbox:' || subscriber, %(id)s, %(priority)s FROM target ORDER BY subscriber
    RETURNING queue
), rung AS (
    INSERT INTO pgmem.doorbell (namespace, channel, name)
    SELECT %(ns)s, 'pgmem_queue', queue FROM delivery
    RETURNING 1
)

-- name: publish_vector
-- publish with the caller's own vector of the message (%(vector)b) stored for the memory's model %(model)s
-- of %(dimension)s dimensions in the same statement, as messages.sql's add_one_vector stores it (the
-- fragment store_given): the message, its deliveries and its vector are written all or nothing. Returns a
-- PublishRow (embeds: the memory's other models, other_models; undecided: an entry of the message waits
-- for a near-duplicate merge this vector may decide, given_undecided, as add_one_vector says).
WITH {{publish_deliveries}}, given AS (
    SELECT %(id)s::text AS id, %(vector)b::vector AS embedding
), {{store_given}}
SELECT (SELECT seq FROM entry) AS seq, (SELECT array_agg(queue ORDER BY queue) FROM delivery) AS inboxes,
       (SELECT count(*) FROM rung) AS rung, {{other_models}} AS embeds, {{given_undecided}} AS undecided;

-- name: take
-- Claim and acknowledge in one statement (MetaGPT's MessageQueue.pop): up to {limit} claimable items
-- leave the queue for the archive and are returned; at most once, no lease.
WITH candidate AS (
    SELECT namespace, id FROM pgmem.queue_items
    WHERE namespace = %(ns)s AND queue = %(queue)s AND status = 'ready' AND available_at <= now()
    ORDER BY priority, id
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
), done AS (
    -- The items as this claim leaves them: attempted once more, and no lease (they are acknowledged).
    DELETE FROM pgmem.queue_items AS q USING candidate
    WHERE q.namespace = %(ns)s AND q.id = candidate.id
    RETURNING q.namespace, q.id, q.queue, q.priority, q.attempts + 1 AS attempts, q.max_attempts,
              q.enqueued_at, q.available_at, NULL::timestamptz AS lease_until, q.dedup_key, q.message_id
), archived AS (
    INSERT INTO pgmem.queue_archive_batches (namespace, queue, ids, message_ids, priorities, enqueued_at,
                                             claimed_at, attempts, claimed_by, dedup_keys)
    SELECT %(ns)s, queue, array_agg(id), array_agg(message_id), array_agg(priority), array_agg(enqueued_at),
           array_agg(now()), array_agg(attempts), array_agg(%(worker)s::text), array_agg(dedup_key)
    FROM done
    GROUP BY queue
    RETURNING batch, message_ids
), {{archived_refs}}
SELECT {{queue_item_row}}
FROM done AS q
JOIN pgmem.messages AS m ON m.namespace = %(ns)s AND m.id = q.message_id
ORDER BY q.priority, q.id;
