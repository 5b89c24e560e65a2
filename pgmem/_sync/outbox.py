# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The embedding outbox: messages queued for embedding in their writing transaction, and the worker that
embeds them after commit."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg import Connection

from pgmem._sync.background import Background
from pgmem._sync.base import Repository
from pgmem._sync.embedding_models import ModelRegistry
from pgmem._sync.merging import SETTLE_BATCH, M, MergeBusy, lock, merge_waiting, settle
from pgmem._sync.sessions import Sessions
from pgmem.checks import check_key
from pgmem.embeddings import Embedder, Precomputed, check_vectors
from pgmem.errors import InvalidInput, redact
from pgmem.planning import statements
from pgmem.planning.merge_rows import PendingMergeRow, UndecidedRow
from pgmem.planning.rows import (
    EmbeddingModelRow,
    OutboxItemRow,
    PendingModelRow,
    PendingRow,
    PromotedRow,
)
from pgmem.planning.search import EmbeddingModel, model_of
from pgmem.resilience import paused

if TYPE_CHECKING:
    from pgmem._sync.client import Client

__all__ = ["EmbeddingOutbox", "EmbedReport"]

Q = statements.load("vectors")
log = logging.getLogger("pgmem.vectors")
#: Whether this context's embedding commits wait for their WAL flush: a caller's embed_pending or flush
#: does; the background runs (_drain) do not (_ASYNC_COMMIT).
_DURABLE: ContextVar[bool] = ContextVar("pgmem_durable_embedding", default=True)
#: A background run's store of vectors commits without waiting for its WAL flush. Its trigger holds the
#: row of each memory the vectors join (their revision) to the end of the commit, so the embedders of one
#: memory committed one WAL flush at a time (issue 38); asynchronously, the row is free once the commit is
#: recorded. What it stores is derived and taken off the outbox in the same transaction: a server crash
#: within the WAL writer's delay (3 x wal_writer_delay at most, 0.6 s by default) loses the vectors and
#: the outbox's deletion together, and the messages are embedded again. Any later commit that flushes (a
#: message written after it) flushes it too, and replicas receive only flushed WAL. The FAISS cache,
#: which may have read such vectors before the crash, reloads what it holds when its server restarted
#: (pgmem.cache.reader: the server's incarnation).
_ASYNC_COMMIT = {"synchronous_commit": "off"}
#: How many times a batch runs while merging adders hold merge locks it needs (_embed_locking).
MERGE_RUNS = 4


@dataclass(slots=True)
class EmbedReport:
    """What one :meth:`AsyncEmbeddingOutbox.embed_pending` run did."""

    embedded: int = 0
    failed: int = 0
    remaining: int = 0
    promoted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class EmbeddingOutbox(Repository):
    """``pgmem.embedding_outbox`` of one namespace, and the client's background embedder.

    A write to a memory with models queues its messages in the same transaction; after commit the
    writing client's worker embeds the queue (:meth:`kick`). A provider failure leaves the messages queued
    (with a backoff) and is reported, never raised from the worker. Listeners added with
    :meth:`add_listener` hear, after commit, of every change of a memory's vectors this client made.
    """

    queries = Q

    def __init__(self, client: Client, registry: ModelRegistry, sessions: Sessions) -> None:
        super().__init__(client)
        self._registry = registry
        self._sessions = sessions
        self._background = Background(self._drain, name="pgmem-embedder")
        self._listeners: list[Callable[[str | None], None]] = []
        #: (name, dimension) of the models this client's runs found queued, by id (an id never changes model)
        self._seen: dict[int, tuple[str, int]] = {}
        self._unflushed = False  # a background run committed asynchronously since the last wait or flush

    # -- listeners of this client's own changes ---------------------------------------------------------

    def add_listener(self, listener: Callable[[str | None], None]) -> None:
        """Call ``listener(memory)`` after this client changed a memory's vectors (``None``: some memory
        of the namespace). Called on the thread (or task) that made the change; it must be quick."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str | None], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _announce(self, memory: str | None) -> None:
        for listener in list(self._listeners):
            listener(memory)

    # -- the queue ----------------------------------------------------------------------------------------

    def pending(
        self, memory: str | None = None, *, connection: Connection[Any] | None = None
    ) -> dict[str, int]:
        """Messages waiting for an embedding, per model name (of ``memory``, or of the namespace)."""
        if memory is not None:
            check_key(memory)
        rows = map(PendingRow._make, self._rows("pending", {"memory": memory}, connection))
        return {str(r.model): int(r.queued) for r in rows}

    def embed_pending(
        self,
        embedder: Embedder | None = None,
        *,
        batch_size: int = 256,
        limit: int | None = None,
        retry_now: bool = False,
        progress: Callable[[int], None] | None = None,
        count_remaining: bool = True,
    ) -> EmbedReport:
        """Embed queued messages of this namespace with the models this client has embedders for (not
        :class:`pgmem.embeddings.Precomputed` ones, whose vectors come from the caller: their messages stay
        queued, never tried nor failed, and :meth:`pending` counts them).

        Each batch is claimed with ``FOR UPDATE SKIP LOCKED`` (many embedders may run at once), embedded,
        stored and taken off the queue in one transaction. A provider error (or a wrong dimension) puts the
        batch back with an exponential backoff and is reported, not raised; a database error is raised, the
        batch left queued as it was. ``retry_now`` ignores earlier backoffs (the backfill of ``pgmem embed``).
        Finished model switches are promoted at the end. ``count_remaining=False`` skips counting what is
        left (the background embedder does).
        """
        if not isinstance(batch_size, int) or not 1 <= batch_size <= 10_000:
            raise InvalidInput(f"batch_size must be in [1, 10000], got {batch_size!r}")
        if embedder is not None:
            self._registry.embedder(embedder)
        embedders = self._registry.embedders()
        report = EmbedReport()
        rows = [PendingModelRow._make(row) for row in self._rows("pending_models", {}, None)]
        switching = any(row.switching for row in rows)
        unclaimed: list[int] = []  # models tried whose queue had nothing claimable
        for row in rows:
            model = model_of(row)
            self._seen[model.id] = (model.name, model.dimension)
            chosen = embedders.get((model.name, model.dimension))
            if chosen is None or isinstance(chosen, Precomputed):
                continue  # a model of the caller's own vectors stays queued until they are given, untried
            if retry_now:
                self._rows("outbox_retry_now", {"model": model.id}, None)
            tried = report.embedded + report.failed
            while limit is None or report.embedded + report.failed < limit:
                n = batch_size if limit is None else min(batch_size, limit - report.embedded - report.failed)
                done, error = self._embed_locking(model, chosen, n)
                if error is not None:
                    report.failed += done
                    report.errors.append(error)
                    break
                report.embedded += done
                if progress is not None and done:
                    progress(done)
                if done < n:
                    break  # the queue is drained (for this model, as far as this transaction could see)
            if report.embedded + report.failed == tried:
                unclaimed.append(model.id)
        if unclaimed and report.embedded + report.failed == 0:
            # Available rows none of which could be claimed: their messages may be gone (deleted before
            # they were embedded). Only those rows are read, never a backlog waiting out a backoff nor
            # the queue of a model this client cannot embed: a writer's every kick would scan it.
            self._rows("purge_orphans", {"models": unclaimed}, None)
        self.decide_waiting()  # merges a process left undecided (it died after its commit)
        if switching or not rows:
            if switching or self._registry.deferred:
                # A switch waits for its model's index: build any that is missing (never waiting for
                # another process's build; that one's promotion follows at a later run).
                for unindexed in self._rows("unindexed_switches", {}, None):
                    self._registry.build_index(model_of(EmbeddingModelRow._make(unindexed)), wait=False)
            report.promoted = [r.memory for r in map(PromotedRow._make, self._rows("promote", {}, None))]
            for memory in report.promoted:
                self._registry.forget(memory)
        if count_remaining:
            report.remaining = sum((self.pending()).values())
        return report

    def _embed_locking(self, model: EmbeddingModel, embedder: Embedder, n: int) -> tuple[int, str | None]:
        """:meth:`_embed_batch`; while a merging adder holds the merge lock of a memory whose merge the batch
        decides (:class:`pgmem._async.merging.MergeBusy`: the batch rolled back), once more with those locks
        taken first, before the claim (as an adder takes its lock before it writes: one order, no deadlock;
        the provider embeds the batch again). A memory busy every time: raised, the batch stays queued."""
        first: tuple[str, ...] = ()
        for attempt in range(1, MERGE_RUNS + 1):
            try:
                return self._embed_batch(model, embedder, n, first)
            except MergeBusy as busy:
                if attempt == MERGE_RUNS:
                    raise
                first = tuple(sorted({*first, *busy.memories}))
        raise AssertionError("unreachable: the last run returns or raises")

    def _embed_batch(
        self, model: EmbeddingModel, embedder: Embedder, n: int, first: tuple[str, ...] = ()
    ) -> tuple[int, str | None]:
        """Claim, embed and store one batch. Returns (messages, error or None).

        The store's trigger takes the row of each memory the vectors join (its revision, ``vec_rev``:
        ``pgmem.log_vector_changes``), which every other embedder of that memory then waits for until this
        transaction has committed. So the store goes to the server with the COMMIT, in one write
        (``commit_pipelined``): the row is held from the statement through the commit, never while this
        process reads the result and sends COMMIT (on a busy machine, or behind this process's other
        threads, that wait was most of it: issue 38). A batch with an entry waiting to decide a merge
        (``merging``) reads the store's rows first and decides the merges in the same transaction; an entry
        that began waiting after the claim comes back from the store and is decided right after the commit.
        """
        failure: str | None = None
        stored: list[tuple[Any, ...]] = []
        with self._client.executor.transaction(vectors=True, commit_pipelined=True) as block:
            for memory in first:  # the merge locks a run before could not take: before any row is locked
                lock(block, memory)
            params = {"ns": self.namespace, "model": model.id, "n": n}
            claimed = [OutboxItemRow._make(row) for row in block.rows(Q["claim_outbox"], params)]
            if not claimed:
                return 0, None
            ids = [r.message_id for r in claimed]
            try:
                with paused():  # the provider's time is not the database call's (pgmem.resilience)
                    embedded = embedder.embed([r.content for r in claimed])
                vectors = check_vectors(embedded, len(claimed), model.dimension, model.name)
            except Exception as exc:  # noqa: BLE001 - whatever the provider raises leaves the batch queued
                failure = redact(f"{type(exc).__name__}: {exc}")  # logged and stored: no API key
            else:
                # The database's own errors are raised (the batch stays queued as it was, no backoff).
                query = Q["store_vectors"] if model.kind == "vector" else Q["store_halfvecs"]
                store = {"ns": self.namespace, "model": model.id, "ids": ids, "vectors": list(vectors)}
                if any(r.merging for r in claimed):
                    waiting = block.rows(query, store)
                    if waiting:  # an adder holding a merge lock may wait for this block's rows: no waiting
                        merge_waiting(block, model, [PendingMergeRow._make(r) for r in waiting], wait=False)
                else:
                    # A background run commits asynchronously: see _ASYNC_COMMIT.
                    settings = None if _DURABLE.get() else _ASYNC_COMMIT
                    self._unflushed = self._unflushed or settings is not None
                    stored = block.send_with_commit(query, store, settings=settings)
        late = [PendingMergeRow._make(row) for row in stored]
        if late:  # entries that began waiting for these vectors between the claim and the store
            self._decide_late(model, late)
        if failure is not None:
            log.warning("embedding %d messages with %s failed: %s", len(ids), model.name, failure)
            self._rows("outbox_failed", {"model": model.id, "ids": ids, "error": failure}, None)
            return len(ids), failure
        self._announce(None)
        return len(ids), None

    def _decide_late(self, model: EmbeddingModel, late: list[PendingMergeRow]) -> None:
        """Decide the merges of entries that began waiting for a batch's vectors after its claim, right after
        its commit. A process that dies before this leaves them undecided: :meth:`decide_waiting` finds them
        (the next embedder run, the next merging add of their memory)."""
        with self._client.executor.transaction() as block:
            merge_waiting(block, model, late)

    def decide_waiting(
        self, ids: Sequence[str] | None = None, connection: Connection[Any] | None = None
    ) -> None:
        """Decide the near-duplicate merges that wait although their vectors are stored (``sql/merging.sql``
        undecided_*): of the messages ``ids`` (a write that just stored their vectors), else of the whole
        namespace (the embedder's run: what a process left when it died between storing a vector and
        deciding). One look-up, which finds nothing almost always; a transaction only when it finds some.

        On this client's own connection each memory's merge lock is waited for (nothing else is held: the
        order every merging add takes). In the caller's transaction (``connection``, or the one a client
        built on the caller's connection works in), whose vector store holds the row of every memory
        holding the message, which a merging adder may wait for, a lock is only tried: a memory busy with
        a merging add is left for a later recovery. Idempotent, safe to run anywhere."""
        if ids is None:
            query, params = M["undecided_namespace"], {"ns": self.namespace, "n": SETTLE_BATCH}
        else:
            query, params = M["undecided_of"], {"ns": self.namespace, "ids": list(ids), "n": SETTLE_BATCH}
        found = [UndecidedRow._make(row) for row in self._client.executor.rows(query, params, connection)]
        if not found:
            return
        ours = connection is None and self._client.owns_transactions  # else a caller's transaction holds rows
        with self._client.executor.transaction(connection) as block:
            left, busy = settle(block, found, wait=ours)  # each decided under its memory's merge lock
        if busy:
            log.info("near-duplicate merges of %d memories left for a later run: merging adds hold them", len(busy))
        for memory in left:
            self.changed(memory, connection)

    # -- after a write ------------------------------------------------------------------------------------

    def written(self, connection: Connection[Any] | None, models: Sequence[int] = ()) -> None:
        """Messages were added to a memory with models (``models``: their ids, when the write knows them):
        embed them after commit, in the background.

        Within the caller's transaction nothing is committed yet; the outbox keeps them for the next run.
        A write queued only for models this client has no embedder for wakes no run: each would read the
        outbox for nothing, on the connection the writer waits for (a publisher beside a process that
        embeds); the process with their embedder, or ``pgmem embed``, embeds them.
        """
        if connection is None and self._embeddable(models):
            self.kick()

    def _embeddable(self, models: Sequence[int]) -> bool:
        """Whether this client may have an embedder for one of ``models`` (ids; none given, or a model no
        run of this client has seen yet: it may)."""
        if not models:
            return True
        embedders = self._registry.embedders()
        for model in models:
            key = self._seen.get(model)
            if key is None:
                return True
            chosen = embedders.get(key)
            if chosen is not None and not isinstance(chosen, Precomputed):
                return True
        return False

    def changed(self, memory: str, connection: Connection[Any] | None) -> None:
        """Entries left ``memory``, or vectors the caller gave were stored with its messages: tell the
        listeners (after commit; in the caller's transaction the commit's notification does it)."""
        if connection is None:
            self._announce(memory)

    # -- the background worker ----------------------------------------------------------------------------

    def kick(self) -> None:
        """Have the background embedder run over the outbox (again) soon; returns at once.

        Only on a client with its own pool: a client built on the caller's connection never works on it
        from another thread (nor inside the caller's transaction); its outbox waits for
        :meth:`embed_pending` or :meth:`flush` (or ``pgmem embed``). The embedder is a worker that stays
        up while writes keep coming; writes made while it runs are embedded together by its next run.
        """
        if self._client.closed or not self._client.owns_transactions:
            return
        self._background.kick()

    def _drain(self) -> None:
        if self._client.closed:
            return
        token = _DURABLE.set(False)
        try:
            self.embed_pending(count_remaining=False)
        except Exception as exc:  # noqa: BLE001 - a background job logs; the outbox keeps the work
            log.warning("background embedding failed: %s: %s", type(exc).__name__, redact(str(exc)))
        finally:
            _DURABLE.reset(token)
        try:
            # The namespace's routine purges (the vector log this worker's writes grow), at most once per
            # PGMEM_SWEEP_INTERVAL; no round trip when not due.
            self._client.retention.sweep_if_due()
        except Exception as exc:  # noqa: BLE001 - retention is retried at the next interval
            log.warning("retention sweep failed: %s: %s", type(exc).__name__, exc)

    def wait(self) -> None:
        """Wait for the background embedding of this client's writes (no round trip when idle), and for
        the WAL flush of its commits (asynchronous: :data:`_ASYNC_COMMIT`), so that what it stored is
        durable and reaches read replicas (a read that follows waits for the primary's flush position)."""
        self._background.wait()
        self._flush_async_commits()

    def flush(self, embedder: Embedder | None = None) -> EmbedReport:
        """Wait for background embedding (as :meth:`wait`), then embed what is still queued."""
        self.wait()
        return self.embed_pending(embedder)

    def _flush_async_commits(self) -> None:
        """One synchronous commit that logged something (``flush_wal``): its WAL flush covers every commit
        before it, the background runs' asynchronous ones among them. Only after such commits."""
        if not self._unflushed or self._client.closed:
            return
        self._unflushed = False  # before the flush: a run that commits meanwhile sets it again
        self._rows("flush_wal", {}, None)

    def close(self) -> None:
        self._background.close()
