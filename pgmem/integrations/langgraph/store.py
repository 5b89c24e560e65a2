"""``PgmemStore`` and ``AsyncPgmemStore``: LangGraph's ``BaseStore`` over ``client.items``.

* **Where things go.** The pgmem namespace (the client's) is the tenant; LangGraph's namespace tuple is
  the item's ``path`` inside it (``pgmem.items``), its vectors are rows of ``pgmem.item_vectors`` under
  a model of ``pgmem.embedding_models``.
* **Writes.** A batch's puts and deletes are one transaction, all or nothing, after one embedding call
  for all their texts: a failing or wrong-sized embedder (:class:`pgmem.EmbeddingError`) or bad input
  (:class:`pgmem.InvalidInput`) writes nothing. Batches from many processes at once never fail on each
  other; the last write of a key wins.
* **Reads.** A batch's reads run before its writes (as LangGraph's ``PostgresStore`` does). A search with
  a query returns ``limit`` items whenever that many match, exactly ordered, at any ``offset``
  (:meth:`pgmem.Client.items.search`), then, as LangGraph's ``InMemoryStore`` does, the items without a
  vector (put with ``index=False``) with ``score=None`` (see :func:`._ops.search_steps`); without one,
  newest ``updated_at`` first.
* **Operations.** The checks of LangGraph's operations and their translation into ``client.items`` calls
  (namespaces, the index configuration, batches, searches as steps) are :mod:`._ops`, for both stores.
* **TTL.** In (fractional) minutes. ``refresh_ttl`` extends the expiry of what a read returned (never
  ``updated_at``, never an expired item's); ``ttl_config["omit_expired"]`` is read per operation; the
  sweeper deletes expired items with their vectors.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

from langgraph.store.base import BaseStore, IndexConfig, Op, Result, SearchItem, TTLConfig
from langgraph.store.base.batch import AsyncBatchedBaseStore

import pgmem
from pgmem.errors import InvalidInput
from pgmem.integrations._facade import is_async_client
from pgmem.integrations.langgraph._ops import Batch, Index, InvalidNamespace, Steps, by_path

__all__ = ["AsyncPgmemStore", "InvalidNamespace", "PgmemStore"]

log = logging.getLogger("pgmem.integrations.langgraph")


class _StoreBase:
    """Configuration both stores share: the index, the TTL settings."""

    supports_ttl = True
    ttl_config: TTLConfig | None
    index_config: IndexConfig | None
    _index: Index | None

    def _configure(self, index: IndexConfig | None, ttl: TTLConfig | None) -> None:
        self.index_config = index
        self._index = Index(index) if index else None
        if ttl is not None and not isinstance(ttl, Mapping):
            raise InvalidInput(f"ttl must be a dict (LangGraph's TTLConfig), got {type(ttl).__name__}")
        self.ttl_config = ttl
        idx = self._index
        self._write_kwargs: dict[str, Any] = {"embedder": idx.embedder, "distance": idx.distance} if idx else {}
        self._search_kwargs = {**self._write_kwargs, "vectors_per_item": idx.vectors_per_item} if idx else {}

    def _sweep_interval(self, minutes: float | None) -> float:
        interval = minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval > 0:
            raise InvalidInput(f"sweep_interval_minutes must be a positive number, got {interval!r}")
        return float(interval) * 60


class PgmemStore(_StoreBase, BaseStore):
    """LangGraph's ``BaseStore`` on a :class:`pgmem.Client` (``None``: the process-wide default client).

    Args:
        client: the client (its namespace is the tenant every item lives in).
        index: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``, ``distance_type``: ``"cosine"``,
            ``"l2"`` or ``"inner_product"``, scored as ``PostgresStore`` scores them), ``ann_index_config``
            (accepted, ignored) and ``model``, the name its vectors get in ``pgmem.embedding_models``.
        ttl: LangGraph's ``TTLConfig`` (``default_ttl`` and ``sweep_interval_minutes`` in minutes,
            ``refresh_on_read``, ``omit_expired``).

    Example:
        >>> store = PgmemStore(pgmem.connect(), index={"dims": 1536, "embed": "openai:text-embedding-3-small"})
        >>> store.put(("memories", "u1"), "m1", {"text": "prefers tea"})
        >>> store.search(("memories", "u1"), query="drinks", limit=3)
    """

    #: Class defaults: a store whose constructor raised still stops (and is collected) cleanly.
    _sweeper: threading.Thread | None = None
    _stop: threading.Event | None = None

    def __init__(
        self, client: pgmem.Client | None = None, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None
    ) -> None:
        if client is not None and is_async_client(client):
            raise InvalidInput("PgmemStore takes a pgmem.Client; use AsyncPgmemStore with a pgmem.AsyncClient")
        self._client = client
        self._configure(index, ttl)
        self._stop = threading.Event()

    @property
    def client(self) -> pgmem.Client:
        if self._client is None:
            from pgmem.connecting import get_default_client

            return get_default_client()
        return self._client

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        dsn: str | None = None,
        *,
        namespace: str = "default",
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> Iterator[PgmemStore]:
        """A store on a client of its own (``dsn``: as :func:`pgmem.connect` resolves it), closed on exit."""
        with pgmem.connect(dsn, namespace=namespace) as client:
            store = cls(client, index=index, ttl=ttl)
            try:
                yield store
            finally:
                store.stop_ttl_sweeper()

    def setup(self) -> None:
        """Make ready what the store needs: the index's model and its HNSW index (the tables come with
        pgmem's migrations, which connecting applies). Idempotent."""
        if self._index is not None:
            self.client.items.model(self._index.embedder, self._index.distance)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        batch = Batch(ops, self._index, self.ttl_config)
        items = self.client.items
        for path, keys, refresh, get_ops in batch.get_args():
            batch.got(get_ops, items.get_many(path, keys, refresh_ttl=refresh, omit_expired=batch.omit_expired))
        if batch.searches:
            vectors: Sequence[Any] = []
            if batch.queries:
                assert self._index is not None
                vectors = list(self._index.embedder.embed([cast(str, op.query) for _, op in batch.queries]))
            for i, steps in batch.search_args(vectors):
                batch.results[i] = self._run(steps, batch.omit_expired)
        for i, kwargs in batch.list_args():
            batch.results[i] = items.list_paths(**kwargs)
        if batch.writes:
            items.put_many(batch.writes, **self._write_kwargs)
        return batch.results

    def _run(self, steps: Steps, omit_expired: bool) -> list[SearchItem]:
        items = self.client.items
        try:
            kind, arg = next(steps)
            while True:
                if kind == "search":
                    kind, arg = steps.send(items.search(**arg, **self._search_kwargs))
                else:
                    for path, keys in by_path(arg).items():
                        items.get_many(path, keys, refresh_ttl=True, omit_expired=omit_expired)
                    kind, arg = steps.send(None)
        except StopIteration as done:
            result: list[SearchItem] = done.value
            return result

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread (the sync client never blocks the event loop)."""
        return await asyncio.to_thread(self.batch, list(ops))

    def sweep_ttl(self) -> int:
        """Delete expired items (and their vectors) now; return how many."""
        return self.client.items.sweep()

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future[None]:
        """Sweep every ``sweep_interval_minutes`` (default: ``ttl_config``'s, else 5) in a daemon thread
        until :meth:`stop_ttl_sweeper`; the future completes when it stops (cancelling it stops it)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self._sweeper is not None and self._sweeper.is_alive():
            running = self._stop
            future.add_done_callback(lambda f: running.set() if f.cancelled() and running else None)
            return future
        interval = self._sweep_interval(sweep_interval_minutes)
        stop = self._stop = self._stop or threading.Event()
        stop.clear()

        def sweep() -> None:
            while not stop.wait(interval):
                try:
                    swept = self.sweep_ttl()
                    if swept:
                        log.info("swept %d expired items", swept)
                except pgmem.PgmemError as exc:  # a sweep that failed is tried again at the next interval
                    log.warning("TTL sweep failed: %s", exc)
            if not future.done():
                future.set_result(None)

        self._sweeper = threading.Thread(target=sweep, name="pgmem-ttl-sweeper", daemon=True)
        future.add_done_callback(lambda f: stop.set() if f.cancelled() else None)
        self._sweeper.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; True when it stopped (or none ran) within ``timeout`` seconds."""
        sweeper = self._sweeper
        if sweeper is None or not sweeper.is_alive() or self._stop is None:
            return True
        self._stop.set()
        sweeper.join(timeout)
        if sweeper.is_alive():
            return False
        self._sweeper = None
        return True


class AsyncPgmemStore(_StoreBase, AsyncBatchedBaseStore):
    """LangGraph's ``BaseStore`` on a :class:`pgmem.AsyncClient`, batching the operations of one event-loop
    tick (``AsyncBatchedBaseStore``): its sync methods work from other threads and raise
    ``asyncio.InvalidStateError`` on the loop's own thread. Arguments as :class:`PgmemStore`'s.

    Example:
        >>> async with AsyncPgmemStore.from_conn_string(index=index) as store:
        ...     await store.aput(("memories", "u1"), "m1", {"text": "prefers tea"})
        ...     await store.asearch(("memories", "u1"), query="drinks")
    """

    #: Class default: a store whose constructor raised stops cleanly.
    _sweeper: asyncio.Task[None] | None = None

    def __init__(
        self, client: pgmem.AsyncClient, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None
    ) -> None:
        if not is_async_client(client):
            raise InvalidInput(f"AsyncPgmemStore takes a pgmem.AsyncClient, not {type(client).__name__}")
        self.client = client
        self._configure(index, ttl)
        super().__init__()

    def __del__(self) -> None:
        """``AsyncBatchedBaseStore.__del__`` on a store whose constructor may have raised before its
        ``__init__`` set ``_task`` (it raised ``AttributeError: _task`` then)."""
        task = getattr(self, "_task", None)
        if task is not None:
            try:
                task.cancel()
            except RuntimeError:  # its loop is closed
                pass

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        dsn: str | None = None,
        *,
        namespace: str = "default",
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> AsyncIterator[AsyncPgmemStore]:
        """A store on an async client of its own (``dsn``: as :func:`pgmem.aconnect` resolves it)."""
        async with await pgmem.aconnect(dsn, namespace=namespace) as client:
            store = cls(client, index=index, ttl=ttl)
            try:
                yield store
            finally:
                await store.stop_ttl_sweeper()

    async def setup(self) -> None:
        """See :meth:`PgmemStore.setup`."""
        if self._index is not None:
            await self.client.items.model(self._index.embedder, self._index.distance)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        batch = Batch(ops, self._index, self.ttl_config)
        items = self.client.items
        for path, keys, refresh, get_ops in batch.get_args():
            rows = await items.get_many(path, keys, refresh_ttl=refresh, omit_expired=batch.omit_expired)
            batch.got(get_ops, rows)
        if batch.searches:
            vectors: Sequence[Any] = []
            if batch.queries:
                assert self._index is not None
                vectors = list(await self._index.embedder.aembed([cast(str, op.query) for _, op in batch.queries]))
            for i, steps in batch.search_args(vectors):
                batch.results[i] = await self._run(steps, batch.omit_expired)
        for i, kwargs in batch.list_args():
            batch.results[i] = await items.list_paths(**kwargs)
        if batch.writes:
            await items.put_many(batch.writes, **self._write_kwargs)
        return batch.results

    async def _run(self, steps: Steps, omit_expired: bool) -> list[SearchItem]:
        items = self.client.items
        try:
            kind, arg = next(steps)
            while True:
                if kind == "search":
                    kind, arg = steps.send(await items.search(**arg, **self._search_kwargs))
                else:
                    for path, keys in by_path(arg).items():
                        await items.get_many(path, keys, refresh_ttl=True, omit_expired=omit_expired)
                    kind, arg = steps.send(None)
        except StopIteration as done:
            result: list[SearchItem] = done.value
            return result

    async def sweep_ttl(self) -> int:
        """Delete expired items (and their vectors) now; return how many."""
        return int(await self.client.items.sweep())

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Sweep every ``sweep_interval_minutes`` in a task on this loop until :meth:`stop_ttl_sweeper`."""
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        interval = self._sweep_interval(sweep_interval_minutes)

        async def sweep() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    swept = await self.sweep_ttl()
                    if swept:
                        log.info("swept %d expired items", swept)
                except pgmem.PgmemError as exc:
                    log.warning("TTL sweep failed: %s", exc)

        self._sweeper = asyncio.get_running_loop().create_task(sweep(), name="pgmem-ttl-sweeper")
        return self._sweeper

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; True when it stopped (or none ran) within ``timeout`` seconds."""
        task = self._sweeper
        if task is None or task.done():
            return True
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=timeout)
        if not done:
            return False
        self._sweeper = None
        return True
