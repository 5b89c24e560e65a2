"""Queues claimed with ``FOR UPDATE SKIP LOCKED``, with leases, retries, dead letters and LISTEN/NOTIFY
(rung through :mod:`pgmem.doorbell`: writers never notify), and routing of published messages to
subscribers' inbox queues."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection, sql

from pgmem import doorbell
from pgmem._acompat import ALock
from pgmem._async.base import AsyncRepository
from pgmem._async.claims import WORKER, ack_claim_rows, claiming, int_array, raise_lost
from pgmem._async.executor import AsyncBlock
from pgmem.checks import MAX_BATCH, check_key
from pgmem.errors import Conflict, InvalidInput, LeaseLost, translate
from pgmem.models import Message, any_to_str
from pgmem.planning import notify
from pgmem.planning import statements as queries
from pgmem.planning.clashes import MAX_RACES, listed_ids, message_clash
from pgmem.planning.queues import (
    CHANNEL,
    MAX_ATTEMPTS,
    MAX_CLAIM,
    MAX_DELAY_SECONDS,
    MAX_LEASE_SECONDS,
    MAX_PRIORITY,
    MIN_PRIORITY,
    Delivery,
    PushResult,
    QueueItem,
    backoff,
    check_queue,
    decode_item,
    fences,
    integer,
    seconds,
)
from pgmem.planning.rows import (
    INSERT_COLUMNS,
    DepthRow,
    NackRow,
    PublishRow,
    PushManyRow,
    PushRow,
    batch_columns,
    encode,
)

if TYPE_CHECKING:
    from pgmem._async.client import AsyncClient

__all__ = ["AsyncQueueRepository"]

Q = queries.load("queues")


class AsyncQueueRepository(AsyncRepository):
    """Named queues of messages shared by any number of processes.

    A queue exists once something is pushed to it (names follow the memory-key rule). ``claim`` takes
    items with ``FOR UPDATE SKIP LOCKED`` and leases them: an item whose worker dies becomes claimable
    again when its lease ends. ``ack`` archives an item, ``nack`` retries it after a backoff and
    dead-letters it after ``max_attempts`` claims. ``wait`` blocks on LISTEN/NOTIFY (polling as a
    fallback) until something is claimable.

    Example:
        >>> await client.queues.push("jobs", Message(content="build"), priority=1)
        >>> for item in await client.queues.claim("jobs", n=10, lease=30):
        ...     ...  # do the work
        ...     await client.queues.ack(item)
    """

    queries = Q

    def __init__(self, client: AsyncClient) -> None:
        super().__init__(client)
        self._listener: AsyncConnection[Any] | None = None
        self._doorbell: doorbell.Doorbell | None = None  # held while this repository listens
        self._notify_key: str | None = None  # the namespace's (pgmem.planning.notify), read once
        self._listen_lock = ALock()

    async def _claim_rows(
        self, name: str, params: dict[str, Any], connection: AsyncConnection[Any] | None
    ) -> list[tuple[Any, ...]]:
        query = claiming(name, params["n"])  # FOR UPDATE: a write, never run twice
        return await self._client.executor.rows(query, {"ns": self.namespace, **params}, connection, reads=False)

    async def _ack_claim_rows(
        self, params: dict[str, Any], connection: AsyncConnection[Any] | None
    ) -> list[tuple[Any, ...]] | None:
        """The rows of ``ack_claim``, or None when an acknowledgement did not hold (see
        :func:`pgmem._async.claims.ack_claim_rows`)."""
        pooled = connection is None and self._client.owns_transactions
        return await ack_claim_rows(self._client.executor, {"ns": self.namespace, **params}, connection, pooled=pooled)

    # -- producing ------------------------------------------------------------------------------------

    def _push_params(
        self, queue: str, priority: int, delay: float | timedelta | None, max_attempts: int
    ) -> dict[str, Any]:
        return {
            "queue": check_queue(queue),
            "priority": integer(priority, "priority", MIN_PRIORITY, MAX_PRIORITY),
            "delay": seconds(delay, "delay", maximum=MAX_DELAY_SECONDS),
            "max_attempts": integer(max_attempts, "max_attempts", 1, MAX_ATTEMPTS),
        }

    async def push(
        self,
        queue: str,
        message: Message,
        *,
        priority: int = 0,
        delay: float | timedelta | None = None,
        dedup_key: str | None = None,
        max_attempts: int = 5,
        idempotency_key: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> PushResult:
        """Enqueue ``message`` (stored once; pushing a stored message enqueues it again).

        Args:
            priority: lower is served first (32-bit integer).
            delay: seconds (or a timedelta) before the item becomes claimable.
            dedup_key: while a ready item of this queue has the same key, the push is a no-op and
                returns ``PushResult(None, False)``.
            max_attempts: claims before the item is dead-lettered by ``nack``.
            idempotency_key: a key of yours for this push (e.g. a UUID made once per logical push): a push
                with a key already used in the namespace enqueues nothing and returns the first push's
                item, even after it was acknowledged. pgmem then sends the push again by itself when its
                connection is lost; without a key such a push raises :class:`pgmem.errors.CommitUnknown`
                (it may have committed). Costs one more row (benchmarks/queues.py); keys are kept until
                purged.
            connection: your connection, to enqueue inside your transaction (consumers are woken at
                commit; a rollback leaves no item).

        Raises:
            InvalidInput: a bad queue name, priority, delay, key or message (nothing written).
            Conflict: the message's id is stored with other content (nothing written; as ``messages.add``).
            CommitUnknown: the connection was lost with the push in flight (no idempotency key).
            Timeout: the push did not finish within the client's timeout (it committed entirely or not at
                all; with an idempotency key, pushing again is safe).
        """
        params = self._push_params(queue, priority, delay, max_attempts)
        if dedup_key is not None:
            check_key(dedup_key, "dedup key")
        if idempotency_key is not None:
            check_key(idempotency_key, "idempotency key")
        row = dict(zip(INSERT_COLUMNS, encode(message), strict=True))
        name, extra = ("push", {}) if idempotency_key is None else ("push_once", {"idempotency_key": idempotency_key})
        rows = await self._storing_once(
            name, {**params, **row, "dedup_key": dedup_key, **extra}, connection, message_id=row["id"]
        )
        pushed = PushRow._make(rows[0])
        return PushResult(pushed.id, pushed.id is not None)

    async def push_many(
        self,
        queue: str,
        messages: Iterable[Message],
        *,
        priority: int = 0,
        delay: float | timedelta | None = None,
        dedup_keys: Iterable[str | None] | None = None,
        max_attempts: int = 5,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[int]:
        """Enqueue messages in order in one statement, all or nothing; return the ids of the new items
        (items skipped for their dedup key have none). An id stored with other content, or repeated in the
        batch with other contents, raises :class:`pgmem.Conflict` naming them, and nothing is written."""
        params = self._push_params(queue, priority, delay, max_attempts)
        batch = list(messages)
        if len(batch) > MAX_BATCH:
            raise InvalidInput(f"a batch holds at most {MAX_BATCH} messages, got {len(batch)}")
        keys = list(dedup_keys) if dedup_keys is not None else [None] * len(batch)
        if len(keys) != len(batch):
            raise InvalidInput(f"{len(keys)} dedup keys for {len(batch)} messages")
        for key in keys:
            if key is not None:
                check_key(key, "dedup key")
        if not batch:
            return []
        columns = batch_columns(batch)
        params = {**params, **columns, "dedup_key": keys}
        rows = await self._storing_once("push_many", params, connection, columns=columns)
        return list(PushManyRow._make(rows[0]).ids)

    async def _storing_once(
        self,
        name: str,
        params: dict[str, Any],
        connection: AsyncConnection[Any] | None,
        *,
        message_id: str | None = None,
        columns: dict[str, list[Any]] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Run a statement that stores its messages once (push, push_many, publish): an id stored with
        other content fails it (:class:`Conflict`, nothing written), as in ``messages.add``. A failure on an
        id stored concurrently (its content unknown to the statement) runs it again on our own connection,
        which then sees the stored row and decides. ``message_id``: the one message's; ``columns``: a batch's.
        """
        for attempt in range(1, MAX_RACES + 1):
            try:
                return await self._rows(name, params, connection)
            except Conflict as exc:
                if message_clash(exc) is None:
                    raise
                if columns is None:
                    if connection is not None or attempt == 2:
                        raise Conflict(
                            f"message id {message_id!r} is already stored with other content in namespace "
                            f"{self.namespace!r}; nothing was written (give the new message another id)"
                        ) from exc.__cause__
                    continue
                found = await self._client.messages._clashing_ids(columns, connection)
                if found or connection is not None or attempt == MAX_RACES:
                    raise Conflict(
                        "message ids stored with other content, or repeated in the batch with other contents: "
                        f"{listed_ids(found)}; nothing was written"
                    ) from exc.__cause__
        raise AssertionError("unreachable: the last attempt raises")

    # -- consuming ------------------------------------------------------------------------------------

    async def claim(
        self,
        queue: str,
        n: int = 1,
        *,
        lease: float | timedelta = 30.0,
        worker: str | None = None,
        ack: Iterable[QueueItem] | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[QueueItem]:
        """Claim up to ``n`` claimable items, lowest priority value first, then oldest, in one statement.

        Each item is leased for ``lease`` seconds: unacknowledged by then, it becomes claimable again.

        Args:
            ack: items to acknowledge in the same statement: a consumer's loop then costs one round
                trip and one commit per batch instead of two. Acknowledgement is as in :meth:`ack`; if
                any of these leases was lost, the others are acknowledged, nothing is claimed, and
                :class:`LeaseLost` is raised.

        Example:
            >>> items = await client.queues.claim("jobs", n=10)
            >>> while items:
            ...     ...  # do the work
            ...     items = await client.queues.claim("jobs", n=10, ack=items)
        """
        params = {
            "queue": check_queue(queue),
            "n": integer(n, "n", 1, MAX_CLAIM),
            "lease": seconds(lease, "lease", maximum=MAX_LEASE_SECONDS, allow_zero=False),
            "worker": worker or WORKER,
        }
        held = fences(ack) if ack is not None else {}
        if not held:
            return [decode_item(r) for r in await self._claim_rows("claim", params, connection)]
        params["ids"], params["attempts"] = int_array(held), int_array(held.values())
        rows = await self._ack_claim_rows(params, connection)
        if rows is None:  # a lease was lost and nothing happened: acknowledge what holds, then raise
            await self._ack_held(held, connection)
            rows = await self._claim_rows("claim", params, connection)  # every lease held after all
        return [decode_item(r) for r in rows]

    async def take(
        self,
        queue: str,
        n: int = 1,
        *,
        worker: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[QueueItem]:
        """Claim and acknowledge up to ``n`` items in one statement (at most once: no lease, no retry).

        For consumers that cannot fail half-way, like MetaGPT's ``MessageQueue.pop``; two processes
        taking from one queue never get the same item."""
        params = {"queue": check_queue(queue), "n": integer(n, "n", 1, MAX_CLAIM), "worker": worker or WORKER}
        return [decode_item(r) for r in await self._claim_rows("take", params, connection)]

    async def ack(
        self, items: QueueItem | Iterable[QueueItem], *, connection: AsyncConnection[Any] | None = None
    ) -> None:
        """Acknowledge items (one statement): they move to the archive.

        Raises:
            LeaseLost: for items whose lease was taken by another claim (or that were already
                acknowledged); the others are acknowledged all the same.
        """
        await self._ack_held(fences([items] if isinstance(items, QueueItem) else items), connection)

    async def _ack_held(self, held: dict[int, int], connection: AsyncConnection[Any] | None) -> None:
        if not held:
            return
        acked = await self._column("ack", {"ids": int_array(held), "attempts": int_array(held.values())}, connection)
        if len(acked) != len(held):
            raise_lost(held, acked)

    async def nack(
        self,
        item: QueueItem,
        *,
        error: str | None = None,
        retry_in: float | timedelta | None = None,
        dead: bool = False,
        connection: AsyncConnection[Any] | None = None,
    ) -> str:
        """Give an item back: it is retried after ``retry_in`` seconds (default: exponential backoff,
        1 s doubling up to 5 min), or dead-lettered when it has been claimed ``max_attempts`` times or
        ``dead`` is True. Returns the item's new status, ``"ready"`` or ``"dead"``."""
        if not isinstance(item, QueueItem):
            raise InvalidInput(f"nack takes a QueueItem, got {type(item).__name__}")
        delay = backoff(item.attempts) if retry_in is None else seconds(retry_in, "retry_in", maximum=MAX_DELAY_SECONDS)
        if error is not None:
            error = error.replace("\x00", "\\x00")[:10_000]
        params = {"id": item.id, "attempts": item.attempts, "delay": delay, "error": error, "dead": bool(dead)}
        # The item's attempts are the stored ones while its lease holds (the statements check them), and its
        # max_attempts never change: the outcome is known here, and each statement checks it again.
        dying = bool(dead) or item.attempts >= item.max_attempts
        rows = await self._rows("nack_dead" if dying else "nack_retry", params, connection)
        if not rows:  # the lease is lost, or the item's max_attempts were not the stored ones
            rows = await self._rows("nack_retry" if dying else "nack_dead", params, connection)
        if not rows:
            raise LeaseLost(f"lease lost on item {item.id}")
        return str(NackRow._make(rows[0]).status)

    async def extend(
        self, item: QueueItem, lease: float | timedelta = 30.0, *, connection: AsyncConnection[Any] | None = None
    ) -> QueueItem:
        """Heartbeat: extend the lease of a held item to ``lease`` seconds from now."""
        if not isinstance(item, QueueItem):
            raise InvalidInput(f"extend takes a QueueItem, got {type(item).__name__}")
        length = seconds(lease, "lease", maximum=MAX_LEASE_SECONDS, allow_zero=False)
        leases = await self._column("extend", {"id": item.id, "attempts": item.attempts, "lease": length}, connection)
        if not leases:
            raise LeaseLost(f"lease lost on item {item.id}")
        return dataclasses.replace(item, lease_until=leases[0], available_at=leases[0])

    async def _listen(self) -> AsyncConnection[Any]:
        if self._listener is None or self._listener.closed:
            conninfo = self._client.secret_conninfo()
            if not conninfo:
                raise InvalidInput("waiting on a queue needs a client that knows its DSN")
            with translate():
                conn = await AsyncConnection.connect(conninfo, autocommit=True)
            await AsyncBlock(conn).command(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
            self._listener = conn
            if self._doorbell is None:
                # Someone must turn committed pushes into notifications: this process stands for it.
                self._doorbell = doorbell.acquire(conninfo)
        return self._listener

    async def _wait_for_notify(self, conn: AsyncConnection[Any], tag: str, timeout: float) -> None:
        with translate():
            async for note in conn.notifies(timeout=timeout):
                if note.payload == tag:
                    return

    async def wait(
        self,
        queue: str,
        n: int = 1,
        *,
        timeout: float = 30.0,
        lease: float | timedelta = 30.0,
        poll_interval: float = 5.0,
        worker: str | None = None,
        ack: Iterable[QueueItem] | None = None,
    ) -> list[QueueItem]:
        """Claim up to ``n`` items, waiting up to ``timeout`` seconds for one to become claimable.

        Woken by NOTIFY once a ``push`` has committed (:mod:`pgmem.doorbell`; this process stands for
        ringing it while it listens); delayed items and lease expiries are caught by sleeping until the
        next ``available_at``, and ``poll_interval`` bounds every sleep in case a notification is lost
        (e.g. the listening connection dropped). Returns ``[]`` on timeout.
        ``ack``: items acknowledged by the first claim, in the same statement (see :meth:`claim`).
        """
        check_queue(queue)
        timeout = seconds(timeout, "timeout", maximum=MAX_DELAY_SECONDS)
        poll = seconds(poll_interval, "poll_interval", maximum=3600.0, allow_zero=False)
        deadline = time.monotonic() + timeout
        async with self._listen_lock:
            listener = await self._listen()  # LISTEN before the first claim: no wake-up can be missed
            if self._notify_key is None:
                # Read (made, the first time) before the first claim: a push that commits after it tags
                # its notification with this key (see pgmem.notify_key).
                self._notify_key = str(await self._scalar("notify_key", {}, None))
            tag = notify.tag(self._notify_key, queue)
            while True:
                items = await self.claim(queue, n, lease=lease, worker=worker, ack=ack)
                ack = None
                if items:
                    return items
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                pause = min(remaining, poll)
                wait = await self._scalar("next_available", {"queue": queue}, None)
                if wait is not None:
                    pause = max(0.0, min(pause, float(wait)))
                if pause > 0:
                    await self._wait_for_notify(listener, tag, pause)

    async def consume(
        self,
        queue: str,
        *,
        n: int = 1,
        lease: float | timedelta = 30.0,
        idle_timeout: float | None = None,
        poll_interval: float = 5.0,
        worker: str | None = None,
    ) -> AsyncIterator[QueueItem]:
        """Iterate over claimed items as they arrive; stops after ``idle_timeout`` seconds without one
        (``None``: never). The caller acks or nacks each item."""
        while True:
            items = await self.wait(
                queue,
                n,
                timeout=idle_timeout if idle_timeout is not None else 3600.0,
                lease=lease,
                poll_interval=poll_interval,
                worker=worker,
            )
            if not items:
                if idle_timeout is not None:
                    return
                continue
            for item in items:
                yield item

    async def close(self) -> None:
        """Close the listening connection, if ``wait`` opened one (and give back this process's doorbell)."""
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._doorbell is not None:
            doorbell.release(self._doorbell)
            self._doorbell = None

    # -- inspecting and maintenance -------------------------------------------------------------------

    async def depth(self, queue: str, *, connection: AsyncConnection[Any] | None = None) -> dict[str, int]:
        """``{"ready": …, "claimable": …, "dead": …}``: items not yet acknowledged (leased included), those
        claimable now, and dead letters."""
        rows = await self._rows("depth", {"queue": check_queue(queue)}, connection)
        depth = DepthRow._make(rows[0])
        return {"ready": int(depth.ready), "claimable": int(depth.claimable), "dead": int(depth.dead)}

    async def peek(
        self, queue: str, limit: int = 100, *, connection: AsyncConnection[Any] | None = None
    ) -> list[QueueItem]:
        """Items of the queue in claim order, without claiming them."""
        params = {"queue": check_queue(queue), "limit": integer(limit, "limit", 1, MAX_BATCH)}
        return [decode_item(r) for r in await self._rows("peek", params, connection)]

    async def dead_letters(
        self, queue: str, limit: int = 100, *, connection: AsyncConnection[Any] | None = None
    ) -> list[QueueItem]:
        params = {"queue": check_queue(queue), "limit": integer(limit, "limit", 1, MAX_BATCH)}
        return [decode_item(r) for r in await self._rows("dead_letters", params, connection)]

    async def requeue(
        self,
        queue: str,
        items: Iterable[QueueItem | int] | None = None,
        *,
        connection: AsyncConnection[Any] | None = None,
    ) -> int:
        """Put dead letters back in the queue with a fresh attempt budget (all of them when ``items`` is
        None); return how many."""
        ids = None if items is None else [i.id if isinstance(i, QueueItem) else int(i) for i in items]
        return len(await self._column("requeue_dead", {"queue": check_queue(queue), "ids": ids}, connection))

    async def purge_archive(
        self,
        older_than: float | timedelta | datetime,
        *,
        queue: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> int:
        """Retention: delete archived (acknowledged) items older than ``older_than`` (seconds, a timedelta
        or an aware datetime), and the messages nothing else refers to. Returns the items deleted.
        The same as :meth:`AsyncRetention.purge_queue_archive <pgmem._async.retention.AsyncRetention>`."""
        return await self._client.retention.purge_queue_archive(older_than, queue=queue, connection=connection)

    async def purge_idempotency_keys(
        self, older_than: float | timedelta, *, connection: AsyncConnection[Any] | None = None
    ) -> int:
        """Retention: forget the namespace's push idempotency keys older than ``older_than`` (seconds or a
        timedelta); a push sent again with a forgotten key enqueues again. Keep them longer than any retry
        of yours may come late. Returns how many were deleted.

        Raises:
            InvalidInput: ``older_than`` is not a duration of 0 to 366 days (nothing deleted).
        """
        age = seconds(older_than, "older_than", maximum=MAX_DELAY_SECONDS)
        return int(await self._scalar("purge_idempotency_keys", {"age": age}, connection) or 0)

    async def clear(self, queue: str, *, connection: AsyncConnection[Any] | None = None) -> int:
        """Delete every live item of the queue (ready, leased and dead); return how many."""
        return int(await self._scalar("clear_queue", {"queue": check_queue(queue)}, connection))

    # -- routing --------------------------------------------------------------------------------------

    async def subscribe(
        self,
        subscriber: str,
        *,
        addresses: Iterable[Any] | None = None,
        watch: Iterable[Any] | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> None:
        """Subscribe ``subscriber`` to published messages (its inbox is the queue ``inbox:<subscriber>``).

        Args:
            addresses: names it answers to in ``send_to`` (default: ``{subscriber}``).
            watch: actions (classes or ``module.ClassName``) whose broadcasts it receives, like MetaGPT's
                ``rc.watch``; ``None`` receives every broadcast.
        """
        check_key(subscriber, "subscriber")
        names = sorted({any_to_str(a) for a in addresses}) if addresses is not None else [subscriber]
        actions = None if watch is None else sorted({any_to_str(a) for a in watch})
        await self._rows("subscribe", {"subscriber": subscriber, "addresses": names, "watch": actions}, connection)

    async def unsubscribe(self, subscriber: str, *, connection: AsyncConnection[Any] | None = None) -> None:
        await self._rows("unsubscribe", {"subscriber": check_key(subscriber, "subscriber")}, connection)

    async def publish(
        self,
        memory: str,
        message: Message,
        *,
        priority: int = 0,
        embedding: Any = None,
        model: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> Delivery:
        """Add ``message`` to ``memory`` (e.g. the team's shared environment) and deliver it to the inbox
        of every subscriber it is addressed to, in one statement: the message and all its deliveries
        exist, or none do. Publishing a message the memory already holds delivers nothing again; one whose
        id is stored with other content raises :class:`pgmem.Conflict` (nothing written). ``embedding`` and
        ``model``: your own vector of the message, stored in the same statement, as ``messages.add`` does."""
        check_key(memory)
        row = dict(zip(INSERT_COLUMNS, encode(message), strict=True))
        params = {"memory": memory, "priority": integer(priority, "priority", MIN_PRIORITY, MAX_PRIORITY), **row}
        registry, given = self._client.vectors.registry, None
        if embedding is not None or model is not None:
            given = await registry.given(memory, embedding, 1, model, connection, single=True)
            params.update(given)
        try:
            name = "publish" if given is None else "publish_vector"
            rows = await self._storing_once(name, params, connection, message_id=row["id"])
        except InvalidInput as exc:
            registry.lost_model(exc, memory, given)
            raise
        published = PublishRow._make(rows[0])
        if given is not None:
            self._client.vectors.changed(memory, connection)
            if published.undecided:  # an entry waited for this vector: decided now, as messages.add does
                await self._client.vectors.outbox.decide_waiting([row["id"]], connection)
        if published.seq is not None and published.embeds:
            self._client.vectors.written(connection, published.embeds)  # embedded after commit
        return Delivery(published.seq, list(published.inboxes or []))

    async def inbox(
        self, subscriber: str, n: int = 10, *, lease: float | timedelta = 30.0, timeout: float = 0.0
    ) -> list[QueueItem]:
        """Claim up to ``n`` messages delivered to ``subscriber``, waiting up to ``timeout`` seconds."""
        queue = "inbox:" + check_key(subscriber, "subscriber")
        if timeout > 0:
            return await self.wait(queue, n, timeout=timeout, lease=lease)
        return await self.claim(queue, n, lease=lease)
