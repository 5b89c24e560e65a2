# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""Retention: the one home of everything that removes what pgmem keeps only for a while.

What grows, and what purges it (each purge is scoped to the client's namespace and returns the rows it
removed; its statement is in ``sql/retention.sql``):

* ``pgmem.queue_archive_batches``, acknowledged queue items kept for analytics:
  :meth:`AsyncRetention.purge_queue_archive` (``client.queues.purge_archive`` delegates here).
* ``pgmem.brain_memories``, MetaGPT BrainMemory state past its TTL (it already reads as empty):
  :meth:`AsyncRetention.purge_expired_brains` (``client.brains.purge_expired``, ``pgmem purge-brains``).
* ``pgmem.vector_log``, the changes FAISS caches replay, one row per vector joining or leaving a memory:
  :meth:`AsyncRetention.purge_vector_log`, run by the sweep.
* ``pgmem.retrieval_log``, logged searches (opt-in): :meth:`AsyncRetention.purge_retrieval_log`, run by the
  sweep when ``PGMEM_RETRIEVAL_LOG_RETENTION`` is set.
* a memory's oldest entries, by count or age: :meth:`AsyncRetention.trim` (OpenManus ``Memory.purge``, the
  ChatDev blackboard).
* ``pgmem.item_history``, the versions items no longer hold (what items reads ``as_of`` a time read):
  ``client.items.purge_history`` and ``client.items.forget``, and the policy target ``item_history``.

Policies (``pgmem.retention_policies``): per namespace, and per memory (or queue) or for the whole
namespace (scope ``"*"``), how long (``max_age``) and how many (``max_count``) rows of a target stay —
messages, queue history, summaries, the retrieval log, the vector log, the item history (by age only).
:meth:`AsyncRetention.set_policy`, :meth:`~AsyncRetention.policies`, :meth:`~AsyncRetention.remove_policy`;
:meth:`AsyncRetention.run` (and ``pgmem retention run``) applies them in short batches.

Forgetting: :meth:`AsyncRetention.forget` removes every copy of some messages (by ids, memory, sender or
metadata subject) in one transaction and writes an audit row (``pgmem.forget_audit``) without content.

Every operation here is scoped to the client's namespace: a scoped client cannot reach another tenant's
rows. Cross-tenant maintenance is :mod:`pgmem.admin`'s, with the tables' owner's connection.

The sweep: :meth:`AsyncRetention.sweep_if_due` runs the routine purges of the namespace at most once per
``PGMEM_SWEEP_INTERVAL`` seconds per client, and costs no round trip when it is not due (the background
embedding worker calls it). ``pgmem purge`` runs the purges with explicit cutoffs, ``pgmem retention run``
the policies.

A cutoff (``older_than``) is an age in seconds or a :class:`~datetime.timedelta`, measured on the
server's clock, or a timezone-aware :class:`~datetime.datetime`: rows older than that go.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from psycopg import Connection

from pgmem._sync.base import Repository
from pgmem._sync.executor import Block
from pgmem._sync.retrying import retry_or_raise
from pgmem.checks import check_key
from pgmem.errors import CommitUnknown, ConnectionFailed, InvalidInput
from pgmem.planning import statements as queries
from pgmem.planning.queues import check_queue, integer
from pgmem.planning.retention import (
    ALL,
    COUNTED,
    MAX_AGE,
    MAX_COUNT,
    TARGETS,
    Cutoff,
    Forgotten,
    RetentionPolicy,
    Swept,
    age_seconds,
    check_label,
    check_name,
    check_scope,
    check_target,
    cutoff_params,
)
from pgmem.settings import Settings, get_settings

if TYPE_CHECKING:
    from pgmem._sync.client import Client

__all__ = [
    "DEFAULT_BATCH",
    "MAX_AGE",
    "TARGETS",
    "Retention",
    "Cutoff",
    "Forgotten",
    "RetentionPolicy",
    "Swept",
    "cutoff_params",
]

Q = queries.load("retention")

#: Largest batch of :meth:`AsyncRetention.purge_expired_brains`.
MAX_BRAIN_BATCH = 100_000
#: Largest ``keep_last`` of :meth:`AsyncRetention.trim` (Postgres' OFFSET is a bigint).
MAX_KEEP = 2**63 - 1

#: Rows per batch of a policy run (one transaction each). benchmarks/retention.py, 10,000 old entries with
#: vectors purged while a writer adds to the same memory (2 shared cores): batch 250 / 1000 / 4000 purged
#: 4,971 / 8,073 / 6,101 rows/s (the one-statement trim: 9,291) and kept the writer waiting at most
#: 60 / 107 / 496 ms (trim: 768 ms, the whole purge). 1,000 keeps nearly trim's throughput with a lock held
#: about a tenth of a second.
DEFAULT_BATCH = 1000
#: Largest batch of a policy run.
MAX_POLICY_BATCH = 50_000
#: Most message ids one forget call takes.
MAX_FORGET_IDS = 100_000


_BOUND: Any = object()  # a count pass's bound, read when the pass starts


class Retention(Repository):
    """Purges of one namespace: ``client.retention``.

    Example:
        >>> await client.retention.purge_queue_archive(7 * 86400)  # archived items older than a week
        12
        >>> await client.retention.trim("agent:manus", 100)  # keep the newest 100 entries
        3
        >>> await client.retention.sweep_if_due()  # the routine purges, when due (None: not due)
        Swept(vector_log=1834, retrieval_log=None)
    """

    queries = Q

    def __init__(self, client: Client) -> None:
        super().__init__(client)
        # Guards the sweep's schedule. Never held across an await: it serves both flavours (and the
        # sync flavour's background thread).
        self._schedule = threading.Lock()
        #: time.monotonic() at which the next sweep is due (0: at the first chance).
        self._next_sweep = 0.0

    def _fetch(self, block: Block, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The rows of the named statement in ``block``, a transaction block of the executor's."""
        return block.rows(Q[name], {"ns": self.namespace, **params})

    def _count(self, block: Block, name: str, params: dict[str, Any]) -> int:
        rows = self._fetch(block, name, params)
        return int(rows[0][0]) if rows else 0

    def _removed(self, name: str, params: dict[str, Any], connection: Connection[Any] | None) -> int:
        return int(self._scalar(name, params, connection) or 0)

    def _removal(
        self, memory: str, name: str, params: dict[str, Any], connection: Connection[Any] | None
    ) -> int:
        """The count of the removal statement ``name`` from ``memory``, after forks.removing in its
        transaction (sql/forks.sql ``removing``: a fork of ``memory`` being taken keeps what it inherits),
        in one pipeline: no round trip more than the statement alone."""
        try:
            with self._client.executor.transaction(connection, pipeline=True) as block:
                self._client.forks.removing(block, memory)
                return self._count(block, name, params)
        except CommitUnknown:
            raise
        except ConnectionFailed as exc:  # lost with the Sync that commits (as messages' removals)
            retry_or_raise(exc, connection, self._client.owns_transactions, harmless=False)
            raise

    # -- the purges ---------------------------------------------------------------------------------------

    def purge_queue_archive(
        self, older_than: Cutoff, *, queue: str | None = None, connection: Connection[Any] | None = None
    ) -> int:
        """Delete archived (acknowledged) queue items older than ``older_than``, of ``queue`` or of every
        queue of the namespace, with the messages nothing else refers to. Returns the items deleted."""
        params = {"queue": None if queue is None else check_queue(queue), **cutoff_params(older_than)}
        return self._removed("purge_queue_archive", params, connection)

    def purge_expired_brains(
        self, *, batch_size: int = 500, connection: Connection[Any] | None = None
    ) -> int:
        """Delete the namespace's expired brains (their history and knowledge messages no other memory
        refers to, and their summaries). Returns how many brains were purged.

        Each batch of ``batch_size`` brains is one transaction. Batches are claimed with ``SKIP LOCKED``:
        several purgers can run at once, and a brain being dumped right now is left for the next run.
        """
        integer(batch_size, "batch_size", 1, MAX_BRAIN_BATCH)
        purged = 0
        while True:
            with self._client.executor.transaction(connection) as block:
                keys = [str(row[0]) for row in self._fetch(block, "expired_brains", {"limit": batch_size})]
                for redis_key in keys:
                    self._client.brains.delete(redis_key, connection=block.connection)
            purged += len(keys)
            if len(keys) < batch_size:
                return purged

    def purge_vector_log(self, older_than: Cutoff, *, connection: Connection[Any] | None = None) -> int:
        """Delete ``pgmem.vector_log`` rows older than ``older_than``. Returns the rows deleted.

        Each memory keeps its newest revision, and every revision after one logged since the cutoff (see
        ``sql/retention.sql``): a FAISS cache behind what was purged reloads the memory in full, one ahead
        of it replays the rest.
        """
        return self._removed("purge_vector_log", cutoff_params(older_than), connection)

    def purge_retrieval_log(self, older_than: Cutoff, *, connection: Connection[Any] | None = None) -> int:
        """Delete logged searches (``pgmem.retrieval_log``) older than ``older_than``. Returns the rows
        deleted."""
        return self._removed("purge_retrieval_log", cutoff_params(older_than), connection)

    def trim(
        self,
        memory: str,
        keep_last: int | None = None,
        *,
        older_than: Cutoff | None = None,
        connection: Connection[Any] | None = None,
    ) -> int:
        """Remove the entries of ``memory`` beyond its newest ``keep_last`` and those added before
        ``older_than`` (at least one of the two), with the messages nothing else refers to, in one
        transaction. Returns the entries removed.

        Example:
            >>> await client.retention.trim("board", 1000, older_than=86400)  # ChatDev's blackboard limits
        """
        check_key(memory)
        if keep_last is None and older_than is None:
            raise InvalidInput("trim needs keep_last, older_than or both (it never empties a memory by default)")
        keep = None if keep_last is None else integer(keep_last, "keep_last", 0, MAX_KEEP)
        cutoff = None if older_than is None else cutoff_params(older_than)
        # Each after forks.removing, in its transaction: a fork's inherited entries are trimmed too, and a
        # fork being taken keeps what it inherits (sql/forks.sql removing).
        if cutoff is None or keep is None:
            name, params = ("trim", {"keep": keep}) if cutoff is None else ("trim_before", cutoff)
            removed = self._removal(memory, name, {"memory": memory, **params}, connection)
        else:
            with self._client.executor.transaction(connection) as block:
                self._client.forks.removing(block, memory)
                removed = self._count(block, "trim", {"memory": memory, "keep": keep})
                removed += self._count(block, "trim_before", {"memory": memory, **cutoff})
        if removed:
            self._client.vectors.changed(memory, connection)
        return removed

    # -- forgetting -------------------------------------------------------------------------------------

    def forget(
        self,
        ids: Sequence[str] | None = None,
        *,
        memory: str | None = None,
        sender: str | None = None,
        subject: str | None = None,
        actor: str | None = None,
        connection: Connection[Any] | None = None,
    ) -> Forgotten:
        """Forget messages of the namespace everywhere, in one transaction: the messages, their entries in
        every memory, their embeddings (and those still queued), the queue items and inbox deliveries
        carrying them (live or archived), and the logged searches that returned them. Summaries that
        covered them are marked stale and emptied (no longer served; rebuild them with
        :meth:`AsyncSummaryRepository.recompute <pgmem._async.summaries.AsyncSummaryRepository.recompute>`),
        a BrainMemory whose history held one loses its historical summary. Every process's FAISS cache drops
        their vectors (the removal is logged and announced like any other). An audit row
        (``pgmem.forget_audit``) records who (``current_user``, and ``actor``), when, the scope and the
        counts — never content.

        Give exactly one selector:

        Args:
            ids: these message ids.
            memory: every message the memory holds (also out of the other memories that share them).
            sender: every message whose ``sent_from`` is this.
            subject: every message whose metadata holds ``{"subject": subject}`` (the top-level key
                ``subject`` equal to this string).
            actor: a label of who asked (stored in the audit row beside ``current_user``).
            connection: run inside your transaction (the audit row commits with it).

        Returns:
            :class:`Forgotten`, the counts per table and the audit row's id.

        Raises:
            InvalidInput: no selector or more than one, an empty or mistyped one (a bare string as
                ``ids``, a non-string id): nothing is deleted, no audit row is written.

        Example:
            >>> done = await client.retention.forget(sender="Alice", actor="ticket-4711")
            >>> done.messages, done.embeddings
            (12, 12)
        """
        given = [
            name
            for name, value in (("ids", ids), ("memory", memory), ("sender", sender), ("subject", subject))
            if value is not None
        ]
        if len(given) != 1:
            raise InvalidInput(
                "forget takes exactly one of ids, memory, sender or subject"
                + (f" (got {', '.join(given)})" if given else "")
            )
        label = check_label(actor)
        scope: dict[str, Any]
        params: dict[str, Any]
        if ids is not None:
            if isinstance(ids, str | bytes) or not isinstance(ids, Sequence | set | frozenset):
                raise InvalidInput(f"ids must be a list of message ids, got {type(ids).__name__}")
            wanted = sorted({check_name(i, "a message id") for i in ids})
            if not wanted:
                raise InvalidInput("ids is empty: nothing to forget")
            if len(wanted) > MAX_FORGET_IDS:
                raise InvalidInput(f"forget takes at most {MAX_FORGET_IDS} ids per call, got {len(wanted)}")
            select, params, scope = "forget_select_ids", {"ids": wanted}, {"kind": "ids", "ids": wanted}
        elif memory is not None:
            check_key(memory)
            select, params, scope = "forget_select_memory", {"memory": memory}, {"kind": "memory", "memory": memory}
        elif sender is not None:
            check_name(sender, "sender")
            select, params, scope = "forget_select_sender", {"sender": sender}, {"kind": "sender", "sender": sender}
        else:
            check_name(subject, "subject")
            select, params, scope = (
                "forget_select_subject",
                {"subject": subject},
                {"kind": "subject", "subject": subject},
            )
        with self._client.executor.transaction(connection) as block:
            found = [str(row[0]) for row in self._fetch(block, select, params)]
            done = self._forget_ids(block, found, stale=True)
            audit = {"label": label, "scope": json.dumps(scope), "counts": json.dumps(done.counts())}
            audit_id = self._count(block, "audit", audit)
        for name in done.memories:
            self._client.vectors.changed(name, connection)
        return Forgotten(**{**{f: getattr(done, f) for f in COUNTED}, "memories": done.memories, "audit_id": audit_id})

    def _forget_ids(self, block: Block, ids: list[str], *, stale: bool) -> Forgotten:
        """Remove every copy of the messages ``ids`` (locked by the caller) in ``block``, inside its
        transaction. ``stale``: mark the summaries that covered them stale (forget does; a retention policy
        does not: a summary is what it keeps of the history it purges)."""
        if not ids:
            return Forgotten(audit_id=0)
        p = {"ids": ids}
        # Every memory holding them, forks included, locked against new forks before any statement below
        # reads the forks (sql/retention.sql forget_lock_holders); again until no fork appeared meanwhile.
        locked: set[str] = set()
        while not (found := {str(row[0]) for row in self._fetch(block, "forget_lock_holders", p)}) <= locked:
            locked |= found
        counts: dict[str, int] = {}
        if stale:  # before the entries go: they say what each summary covered
            counts["summaries_stale"] = self._count(block, "forget_stale_summaries", p)
            counts["brain_summaries"] = self._count(block, "forget_brain_summaries", p)
        for table in ("retrieval_log", "recall_samples", "queue_items", "queue_archive", "store_files"):
            counts[table] = self._count(block, f"forget_{table}", p)
        entries = self._fetch(block, "forget_entries", p)
        counts["memory_entries"] = sum(int(n) for _, n in entries)
        counts["embedding_outbox"] = self._count(block, "forget_outbox", p)
        counts["embeddings"] = self._count(block, "forget_embeddings", p)
        counts["messages"] = self._count(block, "forget_messages", p)
        return Forgotten(audit_id=0, memories=tuple(str(m) for m, _ in entries), **counts)

    # -- policies ---------------------------------------------------------------------------------------

    def set_policy(
        self,
        target: str,
        *,
        scope: str = ALL,
        max_age: float | timedelta | None = None,
        max_count: int | None = None,
        connection: Connection[Any] | None = None,
    ) -> RetentionPolicy:
        """Create or replace the policy of ``target`` for ``scope``.

        Args:
            target: ``messages``, ``queue_history``, ``summaries``, ``retrieval_log``, ``vector_log`` or
                ``item_history`` (versions items no longer hold, read by items reads ``as_of``: ``max_age``
                only, scope ``"*"``).
            scope: ``"*"`` (the whole namespace, its rows counted as one pool) or a memory key (a queue name
                for ``queue_history``). For ``messages``, a memory's policy takes entries out of that memory
                (a message shared with another memory stays, its row goes when nothing refers to it any
                more); the namespace's policy forgets messages everywhere (as :meth:`forget`, summaries
                kept), except those a queue still has to deliver. ``vector_log`` counts per memory and
                always keeps each memory's newest revision.
            max_age: rows older than this (seconds or a timedelta) go. Ages are measured from
                ``created_at`` (messages, summaries), ``added_at`` (a memory's entries), ``acked_at`` (queue
                history), ``logged_at`` (the logs), ``valid_to`` (item history: when a version was replaced).
            max_count: only the newest this many stay (queue history: at least this many archived items;
                an acknowledgement's items go together).

        Raises:
            InvalidInput: an unknown target, a bad scope, neither limit, a negative or mistyped one;
                nothing is written.
        """
        target = check_target(target)
        scope = check_scope(scope, target)
        age = age_seconds(max_age)
        count = None if max_count is None else integer(max_count, "max_count", 0, MAX_COUNT)
        if age is None and count is None:
            raise InvalidInput("a retention policy needs max_age, max_count or both")
        if target == "item_history" and count is not None:
            raise InvalidInput("an item_history policy takes max_age only (versions replaced longer ago go)")
        params = {"target": target, "scope": scope, "max_age": age, "max_count": count}
        rows = self._rows("set_policy", params, connection)
        return RetentionPolicy(*rows[0])

    def policies(
        self, target: str | None = None, *, connection: Connection[Any] | None = None
    ) -> list[RetentionPolicy]:
        """The namespace's policies (of ``target`` when given), by target then scope."""
        if target is not None:
            check_target(target)
        return [RetentionPolicy(*row) for row in self._rows("policies", {"target": target}, connection)]

    def remove_policy(
        self, target: str, *, scope: str = ALL, connection: Connection[Any] | None = None
    ) -> bool:
        """Remove the policy of ``target`` for ``scope``; False when there was none."""
        target = check_target(target)
        scope = check_scope(scope, target)
        return bool(self._scalar("remove_policy", {"target": target, "scope": scope}, connection))

    def run(
        self, *, target: str | None = None, batch_size: int = DEFAULT_BATCH, actor: str | None = None
    ) -> dict[str, int]:
        """Apply the namespace's policies (of ``target`` when given) now. Returns the rows removed per
        target (messages: messages forgotten by namespace policies plus entries taken out by memory ones).

        Runs in batches of ``batch_size`` rows, each its own short transaction (never the caller's: a
        policy may remove millions of rows), oldest first, rows held by a writer skipped (SKIP LOCKED) and
        left for the next run. A run that removed something writes an audit row (kind ``policy``).

        Raises:
            InvalidInput: an unknown target, a bad batch size; nothing is deleted.
        """
        if target is not None:
            check_target(target)
        integer(batch_size, "batch_size", 1, MAX_POLICY_BATCH)
        label = check_label(actor)
        removed = dict.fromkeys(TARGETS if target is None else (target,), 0)
        for policy in self.policies(target):
            removed[policy.target] += self._apply(policy, batch_size)
        if any(removed.values()):
            scope = {"kind": "policy", "targets": sorted(removed)}
            audit = {"label": label, "scope": json.dumps(scope), "counts": json.dumps(removed)}
            self._scalar("audit", audit, None)
        return removed

    def _apply(self, policy: RetentionPolicy, limit: int) -> int:
        age = None if policy.max_age is None else policy.max_age.total_seconds()
        keep = policy.max_count
        scoped = None if policy.scope == ALL else policy.scope
        if policy.target == "vector_log":
            return self._batches("vector_log_batch", {"memory": scoped, "age": age, "keep": keep, "limit": limit})
        if policy.target == "item_history":  # versions items no longer hold (migration 0022), by age only
            return 0 if age is None else self._batches("item_history_batch", {"age": age, "limit": limit})
        if policy.target == "messages" and scoped is None:
            return self._forget_batches(age, keep, limit)
        params: dict[str, Any]
        batch, bound, params = {
            "messages": ("entries_batch", "entries_bound", {"memory": scoped}),
            "queue_history": ("archive_batch", "archive_bound", {"queue": scoped}),
            "summaries": ("summaries_batch", "summaries_bound", {"memory": scoped}),
            "retrieval_log": ("retrieval_log_batch", "retrieval_log_bound", {"memory": scoped}),
        }[policy.target]
        removed = 0
        memory = scoped if policy.target == "messages" else None  # a memory's entries: entries_batch
        if memory is not None:
            self._client.forks.materialize(memory, None)  # a fork's inherited entries age and count too
        if age is not None:  # the age pass, then the count pass with the bound as it stands after it
            removed += self._batches(batch, {**params, "age": age, "bound": None, "limit": limit}, memory)
        if keep is not None:
            upto = self._scalar(bound, {**params, "keep": keep}, None)
            if upto is not None:
                removed += self._batches(batch, {**params, "age": None, "bound": upto, "limit": limit}, memory)
        if removed and memory is not None:
            self._client.vectors.changed(memory, None)
        return removed

    def _batches(self, name: str, params: dict[str, Any], memory: str | None = None) -> int:
        """Run the batch statement ``name`` (one statement: its own transaction) until a batch comes back
        short. ``memory``: the batches remove entries of that memory (entries_batch), each after
        forks.removing in its transaction, in one pipeline (one round trip, as the statement alone): a batch
        alone read the memory in a snapshot taken before the lock its trigger waited on, so a fork being
        taken meanwhile lost what it inherited (its messages deleted as nobody else's)."""
        removed = 0
        while True:
            if memory is None:
                n = int(self._scalar(name, params, None) or 0)
            else:
                n = self._removal(memory, name, params, None)
            removed += n
            if n < params["limit"]:
                return removed

    def _forget_batches(self, age: float | None, keep: int | None, limit: int) -> int:
        """The namespace's messages policy: batches of old messages forgotten everywhere (summaries kept)."""
        removed = 0
        passes: list[dict[str, Any]] = []
        if age is not None:
            passes.append({"age": age, "bound": None})
        for params in passes if keep is None else [*passes, {"age": None, "bound": _BOUND}]:
            if params["bound"] is _BOUND:
                params["bound"] = self._scalar("messages_bound", {"keep": keep}, None)
                if params["bound"] is None:
                    continue
            while True:
                with self._client.executor.transaction() as block:
                    batch = self._fetch(block, "messages_batch", {**params, "limit": limit})
                    ids = [str(row[0]) for row in batch]
                    done = self._forget_ids(block, ids, stale=False)
                for name in done.memories:
                    self._client.vectors.changed(name, None)
                removed += done.messages
                if len(ids) < limit:
                    break
        return removed

    # -- the sweep ----------------------------------------------------------------------------------------

    def sweep(self) -> Swept:
        """Run the namespace's routine purges now: the vector log older than
        ``PGMEM_VECTOR_LOG_RETENTION`` seconds (default 3600), and the retrieval log older than
        ``PGMEM_RETRIEVAL_LOG_RETENTION`` seconds when that is set."""
        return self._sweep(get_settings())

    def _sweep(self, settings: Settings) -> Swept:
        vector_log = self.purge_vector_log(settings.vector_log_retention)
        retrieval_log = None
        if settings.retrieval_log_retention is not None:
            retrieval_log = self.purge_retrieval_log(settings.retrieval_log_retention)
        return Swept(vector_log, retrieval_log)

    def due(self) -> bool:
        """Whether :meth:`sweep_if_due` would sweep now (no round trip: a clock read)."""
        return time.monotonic() >= self._next_sweep

    def sweep_if_due(self) -> Swept | None:
        """:meth:`sweep` when this client has not swept for ``PGMEM_SWEEP_INTERVAL`` seconds (default 300;
        the first call sweeps), else nothing: None, without a round trip. Safe to call from many tasks or
        threads at once: one of them sweeps. A sweep that fails is not retried before the next interval.
        """
        if not self.due():
            return None
        settings = get_settings()
        with self._schedule:
            now = time.monotonic()
            if now < self._next_sweep:
                return None  # another caller claimed this sweep
            self._next_sweep = now + settings.sweep_interval
        return self._sweep(settings)
