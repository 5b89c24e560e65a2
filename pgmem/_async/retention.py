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

The sweep: :meth:`AsyncRetention.sweep_if_due` runs the routine purges of the namespace at most once per
``PGMEM_SWEEP_INTERVAL`` seconds per client, and costs no round trip when it is not due (the background
embedding worker calls it). ``pgmem retention`` runs the purges with explicit cutoffs.

A cutoff (``older_than``) is an age in seconds or a :class:`~datetime.timedelta`, measured on the
server's clock, or a timezone-aware :class:`~datetime.datetime`: rows older than that go.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

from psycopg import AsyncConnection

from pgmem._async.base import AsyncRepository
from pgmem.checks import check_key
from pgmem.errors import InvalidInput, translate
from pgmem.planning import statements as queries
from pgmem.planning.queues import check_queue, integer
from pgmem.settings import Settings, get_settings

if TYPE_CHECKING:
    from pgmem._async.client import AsyncClient

__all__ = ["MAX_AGE", "AsyncRetention", "Cutoff", "Swept", "cutoff_params"]

Q = queries.load("retention")

#: Oldest cutoff accepted as an age (100 years, in seconds).
MAX_AGE = 100 * 366 * 24 * 3600.0
#: Largest batch of :meth:`AsyncRetention.purge_expired_brains`.
MAX_BRAIN_BATCH = 100_000
#: Largest ``keep_last`` of :meth:`AsyncRetention.trim` (Postgres' OFFSET is a bigint).
MAX_KEEP = 2**63 - 1

#: A purge's cutoff: an age (seconds, or a timedelta) or a timezone-aware moment.
Cutoff: TypeAlias = float | int | timedelta | datetime


def cutoff_params(older_than: Any, what: str = "older_than") -> dict[str, Any]:
    """The parameters of ``sql/retention.sql``'s ``cutoff`` fragment for ``older_than``, checked.

    Raises:
        InvalidInput: a negative, infinite or non-numeric age, or a naive datetime.
    """
    if isinstance(older_than, datetime):
        if older_than.utcoffset() is None:
            raise InvalidInput(f"{what} must be a timezone-aware datetime (a naive one is ambiguous): {older_than!r}")
        return {"before": older_than, "age": None}
    age = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
    if isinstance(age, bool) or not isinstance(age, int | float) or not math.isfinite(age):
        raise InvalidInput(
            f"{what} must be an age in seconds, a timedelta or a timezone-aware datetime, got {older_than!r}"
        )
    if not 0 <= age <= MAX_AGE:
        raise InvalidInput(f"{what} must be an age of 0 to {MAX_AGE:g} seconds, got {older_than!r}")
    return {"before": None, "age": float(age)}


@dataclass(frozen=True, slots=True)
class Swept:
    """What a sweep removed: rows of ``pgmem.vector_log``, and of ``pgmem.retrieval_log`` (None: not purged,
    ``PGMEM_RETRIEVAL_LOG_RETENTION`` is unset)."""

    vector_log: int
    retrieval_log: int | None


class AsyncRetention(AsyncRepository):
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

    def __init__(self, client: AsyncClient) -> None:
        super().__init__(client)
        # Guards the sweep's schedule. Never held across an await: it serves both flavours (and the
        # sync flavour's background thread).
        self._schedule = threading.Lock()
        #: time.monotonic() at which the next sweep is due (0: at the first chance).
        self._next_sweep = 0.0

    async def _removed(self, name: str, params: dict[str, Any], connection: AsyncConnection[Any] | None) -> int:
        return int(await self._scalar(name, params, connection) or 0)

    # -- the purges ---------------------------------------------------------------------------------------

    async def purge_queue_archive(
        self, older_than: Cutoff, *, queue: str | None = None, connection: AsyncConnection[Any] | None = None
    ) -> int:
        """Delete archived (acknowledged) queue items older than ``older_than``, of ``queue`` or of every
        queue of the namespace, with the messages nothing else refers to. Returns the items deleted."""
        params = {"queue": None if queue is None else check_queue(queue), **cutoff_params(older_than)}
        return await self._removed("purge_queue_archive", params, connection)

    async def purge_expired_brains(
        self, *, batch_size: int = 500, connection: AsyncConnection[Any] | None = None
    ) -> int:
        """Delete the namespace's expired brains (their history and knowledge messages no other memory
        refers to, and their summaries). Returns how many brains were purged.

        Each batch of ``batch_size`` brains is one transaction. Batches are claimed with ``SKIP LOCKED``:
        several purgers can run at once, and a brain being dumped right now is left for the next run.
        """
        integer(batch_size, "batch_size", 1, MAX_BRAIN_BATCH)
        purged = 0
        while True:
            with translate():
                async with self._client.transaction(connection) as conn:
                    cur = await conn.execute(Q["expired_brains"], {"ns": self.namespace, "limit": batch_size})
                    keys = [str(row[0]) for row in await cur.fetchall()]
                    for redis_key in keys:
                        await self._client.brains.delete(redis_key, connection=conn)
            purged += len(keys)
            if len(keys) < batch_size:
                return purged

    async def purge_vector_log(self, older_than: Cutoff, *, connection: AsyncConnection[Any] | None = None) -> int:
        """Delete ``pgmem.vector_log`` rows older than ``older_than``. Returns the rows deleted.

        Each memory keeps its newest revision, and every revision after one logged since the cutoff (see
        ``sql/retention.sql``): a FAISS cache behind what was purged reloads the memory in full, one ahead
        of it replays the rest.
        """
        return await self._removed("purge_vector_log", cutoff_params(older_than), connection)

    async def purge_retrieval_log(self, older_than: Cutoff, *, connection: AsyncConnection[Any] | None = None) -> int:
        """Delete logged searches (``pgmem.retrieval_log``) older than ``older_than``. Returns the rows
        deleted."""
        return await self._removed("purge_retrieval_log", cutoff_params(older_than), connection)

    async def trim(
        self,
        memory: str,
        keep_last: int | None = None,
        *,
        older_than: Cutoff | None = None,
        connection: AsyncConnection[Any] | None = None,
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
        if cutoff is None:  # one statement: no transaction block around it (no extra round trip)
            removed = await self._removed("trim", {"memory": memory, "keep": keep}, connection)
        elif keep is None:
            removed = await self._removed("trim_before", {"memory": memory, **cutoff}, connection)
        else:
            with translate():
                async with self._client.transaction(connection) as conn:
                    removed = await self._removed("trim", {"memory": memory, "keep": keep}, conn)
                    removed += await self._removed("trim_before", {"memory": memory, **cutoff}, conn)
        if removed:
            self._client.vectors.changed(memory, connection)
        return removed

    async def namespaces(self, *, connection: AsyncConnection[Any] | None = None) -> list[str]:
        """Every namespace holding something the purges remove (what ``pgmem retention`` visits when given
        no namespace). An administrator's query: it reads each of those tables."""
        return [str(row[0]) for row in await self._rows("namespaces", {}, connection)]

    # -- the sweep ----------------------------------------------------------------------------------------

    async def sweep(self) -> Swept:
        """Run the namespace's routine purges now: the vector log older than
        ``PGMEM_VECTOR_LOG_RETENTION`` seconds (default 3600), and the retrieval log older than
        ``PGMEM_RETRIEVAL_LOG_RETENTION`` seconds when that is set."""
        return await self._sweep(get_settings())

    async def _sweep(self, settings: Settings) -> Swept:
        vector_log = await self.purge_vector_log(settings.vector_log_retention)
        retrieval_log = None
        if settings.retrieval_log_retention is not None:
            retrieval_log = await self.purge_retrieval_log(settings.retrieval_log_retention)
        return Swept(vector_log, retrieval_log)

    def due(self) -> bool:
        """Whether :meth:`sweep_if_due` would sweep now (no round trip: a clock read)."""
        return time.monotonic() >= self._next_sweep

    async def sweep_if_due(self) -> Swept | None:
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
        return await self._sweep(settings)
