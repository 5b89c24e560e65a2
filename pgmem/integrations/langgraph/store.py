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
  vector (put with ``index=False``) with ``score=None`` (see :func:`_search_steps`); without one, newest
  ``updated_at`` first.
* **TTL.** In (fractional) minutes. ``refresh_ttl`` extends the expiry of what a read returned (never
  ``updated_at``, never an expired item's); ``ttl_config["omit_expired"]`` is read per operation; the
  sweeper deletes expired items with their vectors.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, cast

import langgraph.store.base as _langgraph_base
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore

import pgmem
from pgmem.errors import InvalidInput
from pgmem.integrations._facade import is_async_client

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from langchain_core.embeddings import Embeddings

    from pgmem._sync.items import ItemWrite

__all__ = ["AsyncPgmemStore", "InvalidNamespace", "PgmemStore"]

log = logging.getLogger("pgmem.integrations.langgraph")

#: LangGraph's own check of an op's namespace labels (langgraph-checkpoint >= 4.3; None before).
_langgraph_validate: Callable[[Op], None] | None = getattr(_langgraph_base, "validate_op_namespace", None)


class InvalidNamespace(InvalidInput, InvalidNamespaceError):
    """A namespace LangGraph rejects (empty label, ``.``, NUL, not a string): both LangGraph's
    ``InvalidNamespaceError`` and :class:`pgmem.InvalidInput`."""


def _check_labels(namespace: Any) -> None:
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespace(
                f"Invalid namespace label {label!r} found in {namespace}: labels must be strings, "
                f"not {type(label).__name__}"
            )
        if not label:
            raise InvalidNamespace(f"Namespace labels cannot be empty strings. Got {label!r} in {namespace}")
        if "." in label:
            raise InvalidNamespace(f"Invalid namespace label {label!r} found in {namespace}: labels cannot contain '.'")
        if "\x00" in label:
            raise InvalidNamespace(f"Invalid namespace label {label!r} found in {namespace}: labels cannot contain NUL")


def _validate_op_namespace(op: Op) -> None:
    """The labels of ``op``'s namespace as LangGraph's ``validate_op_namespace`` checks them (added in
    langgraph-checkpoint 4.3; earlier versions, which the extra allows, lack it), and NUL (which 4.3.0
    let through) checked here whatever the version."""
    if _langgraph_validate is not None:
        try:
            _langgraph_validate(op)
        except InvalidNamespaceError as exc:
            raise InvalidNamespace(str(exc)) from None
    if isinstance(op, GetOp | PutOp):
        _check_labels(op.namespace)
    elif isinstance(op, SearchOp):
        _check_labels(op.namespace_prefix)
    elif isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            _check_labels(condition.path)


class _Embedder:
    """A LangChain ``Embeddings`` as a pgmem embedder (``model``, ``dimension``, ``embed``, ``aembed``)."""

    def __init__(self, embeddings: Embeddings, model: str, dimension: int) -> None:
        self.embeddings = embeddings
        self.model = model
        self.dimension = dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        return np.asarray(self.embeddings.embed_documents(list(texts)), dtype=np.float32)

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        return np.asarray(await self.embeddings.aembed_documents(list(texts)), dtype=np.float32)


def _model_name(embed: Any, dims: int) -> str:
    """The name the vectors of ``embed`` get in ``pgmem.embedding_models`` when ``index["model"]`` is not
    given: its provider string, or its class (or function) with its model attribute and a digest of its
    representation when that shows its settings, and the dimension. Embedders of other settings get other
    names, so they never share vectors."""
    if isinstance(embed, str):
        return f"langgraph:{embed}:{dims}"
    kind = embed if callable(embed) and not hasattr(embed, "embed_documents") else type(embed)
    name = f"langgraph:{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind.__class__.__name__)}"
    for attr in ("model", "model_name"):
        value = getattr(embed, attr, None)
        if isinstance(value, str):
            name += f":{value}"
            break
    text = repr(embed)
    if " at 0x" not in text:  # a representation of settings, not of an address
        name += ":" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{name}:{dims}"


class _Index:
    """What the store makes of an ``IndexConfig``: the embedder, the fields' paths, the estimate of
    vectors per item."""

    def __init__(self, index: Mapping[str, Any]) -> None:
        if not isinstance(index, Mapping):
            raise InvalidInput(f"index must be a dict (LangGraph's IndexConfig), got {type(index).__name__}")
        self.distance = index.get("distance_type", "cosine")
        if self.distance not in pgmem.DISTANCES:  # the scores: pgmem.planning.distances
            raise InvalidInput(f"distance_type must be one of {pgmem.DISTANCES}, got {self.distance!r}")
        dims = index.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= 16000:
            raise InvalidInput(f"index['dims'] must be an integer in [1, 16000], got {dims!r}")
        if index.get("embed") is None:
            raise InvalidInput("index['embed'] is required: an Embeddings, a (async) function, or 'provider:model'")
        fields = index.get("fields") or ["$"]
        if isinstance(fields, str):
            fields = [fields]
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise InvalidInput(f"index['fields'] must be a list of paths, got {fields!r}")
        model = index.get("model") or _model_name(index["embed"], dims)
        if not isinstance(model, str):
            raise InvalidInput(f"index['model'] must be a string, got {model!r}")
        self.embedder = _Embedder(ensure_embeddings(index["embed"]), model, dims)
        self.fields = [(f, _tokens(f)) for f in fields]
        self.vectors_per_item = max(1, len(fields))

    def texts(self, value: Mapping[str, Any], index: Sequence[str] | None) -> list[tuple[str, str]]:
        """``(field, text)`` to embed of a value: the configured fields, or those of the put's ``index``."""
        paths = self.fields if index is None else [(f, _tokens(f)) for f in index]
        out: list[tuple[str, str]] = []
        for field, tokens in paths:
            texts = get_text_at_path(value, tokens)
            out += [(f"{field}.{i}" if len(texts) > 1 else field, text) for i, text in enumerate(texts)]
        return out


def _tokens(field: str) -> Any:
    return "$" if field == "$" else tokenize_path(field)


class _Batch:
    """A batch of LangGraph ops, checked and grouped for ``client.items`` (what both stores share)."""

    def __init__(self, store: _StoreBase, ops: Iterable[Op]) -> None:
        self.ops = list(ops)
        self.results: list[Result] = [None] * len(self.ops)
        self.gets: dict[tuple[str, ...], list[tuple[int, GetOp]]] = defaultdict(list)
        self.searches: list[tuple[int, SearchOp]] = []
        self.lists: list[tuple[int, ListNamespacesOp]] = []
        self.writes: list[ItemWrite] = []
        self.omit_expired = bool(store.ttl_config and store.ttl_config.get("omit_expired"))
        index = store._index
        for i, op in enumerate(self.ops):
            _validate_op_namespace(op)
            if isinstance(op, GetOp):
                self.gets[tuple(op.namespace)].append((i, op))
            elif isinstance(op, SearchOp):
                self.searches.append((i, op))
            elif isinstance(op, ListNamespacesOp):
                self.lists.append((i, op))
            elif isinstance(op, PutOp):
                if op.value is None:
                    self.writes.append({"path": op.namespace, "key": op.key, "value": None})
                    continue
                if not isinstance(op.value, Mapping):
                    raise InvalidInput(f"a value must be a dict, got {type(op.value).__name__}")
                texts = None
                if index is not None and op.index is not False:
                    if op.index is not None and not isinstance(op.index, list):
                        raise InvalidInput(f"index must be False, None or a list of paths, got {op.index!r}")
                    try:
                        texts = index.texts(op.value, op.index)
                    except (TypeError, ValueError) as exc:  # json.dumps of a field: not JSON
                        raise InvalidInput(f"value of {op.key!r} is not JSON: {exc}") from None
                self.writes.append(
                    {"path": op.namespace, "key": op.key, "value": op.value, "ttl": op.ttl, "texts": texts}
                )
            else:
                raise InvalidInput(f"unknown operation {type(op).__name__}")
        #: (position, op) of the searches that embed their query, in order: one embedding call for all.
        self.queries = [(i, op) for i, op in self.searches if op.query and index is not None]

    def get_args(self) -> Iterator[tuple[tuple[str, ...], list[str], bool, list[tuple[int, GetOp]]]]:
        for path, ops in self.gets.items():
            yield path, [op.key for _, op in ops], any(op.refresh_ttl for _, op in ops), ops

    def got(self, ops: list[tuple[int, GetOp]], rows: Sequence[Any]) -> None:
        by_key = {row.key: row for row in rows}
        for i, op in ops:
            row = by_key.get(op.key)
            self.results[i] = None if row is None else _item(row)

    def search_args(self, vectors: Sequence[Any]) -> Iterator[tuple[int, _Steps]]:
        """Each search as the steps that run it (:func:`_search_steps`)."""
        embedded = {i: v for (i, _), v in zip(self.queries, vectors, strict=True)}
        for i, op in self.searches:
            kwargs: dict[str, Any] = {
                "prefix": tuple(op.namespace_prefix),
                "filter": op.filter,
                "limit": op.limit,
                "offset": op.offset,
                "refresh_ttl": op.refresh_ttl,
                "omit_expired": self.omit_expired,
            }
            if i in embedded:
                kwargs["vector"] = embedded[i]
            yield i, _search_steps(kwargs)

    def list_args(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for i, op in self.lists:
            kwargs: dict[str, Any] = {
                "max_depth": op.max_depth,
                "limit": op.limit,
                "offset": op.offset,
                "omit_expired": self.omit_expired,
            }
            for condition in op.match_conditions or ():
                if condition.match_type not in ("prefix", "suffix"):
                    raise InvalidInput(f"unknown match type {condition.match_type!r}")
                kwargs[condition.match_type] = tuple(condition.path)
            yield i, kwargs


#: A search as steps: it yields ``("search", kwargs of client.items.search)`` and is sent the hits, or
#: ``("refresh", rows)`` (extend those items' TTLs) and is sent None; it returns the search's result.
_Steps = Generator[tuple[str, Any], Any, list[SearchItem]]


def _search_steps(kwargs: dict[str, Any]) -> _Steps:
    """A search; one with a query returns, as LangGraph's ``InMemoryStore`` does, the items without a
    vector of the store's model (put with ``index=False``, before the store had an index, or by a store of
    another model) after the scored ones, with ``score=None``, newest first. The scored items and then the
    unscored ones are one sequence that ``offset`` and ``limit`` page: as ``InMemoryStore`` whenever a
    page starts among the scored items; past them ``InMemoryStore`` returns the first unscored items again
    at every offset, this goes on through them (pages never repeat an item). Costs nothing more while the
    scored items fill the page; the page that runs past them reads up to ``offset + limit`` more rows
    (two statements)."""
    hits = yield "search", kwargs
    limit, offset = kwargs["limit"], kwargs["offset"]
    if "vector" not in kwargs or len(hits) >= limit:
        return [_hit(r) for r in hits]
    quiet = {k: v for k, v in kwargs.items() if k != "vector"} | {"refresh_ttl": False, "offset": 0}
    # Every scored item: fewer than offset + limit of them, as this page came back short.
    scored = hits if offset == 0 else (yield "search", {**quiet, "vector": kwargs["vector"], "limit": offset + limit})
    seen = {(tuple(r.path), r.key) for r in scored}
    skip, need = max(0, offset - len(scored)), limit - len(hits)
    # The newest skip + need unscored items are among the newest skip + need + len(scored) items.
    listed = yield "search", {**quiet, "limit": skip + need + len(scored)}
    unscored = [r for r in listed if (tuple(r.path), r.key) not in seen][skip : skip + need]
    if unscored and kwargs["refresh_ttl"]:
        yield "refresh", unscored
    return [_hit(r) for r in hits] + [_hit(r) for r in unscored]


def _by_path(rows: Sequence[Any]) -> dict[tuple[str, ...], list[str]]:
    keys: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for row in rows:
        keys[tuple(row.path)].append(row.key)
    return keys


def _item(row: Any) -> Item:
    return Item(
        value=row.value, key=row.key, namespace=tuple(row.path), created_at=row.created_at, updated_at=row.updated_at
    )


def _hit(row: Any) -> SearchItem:
    return SearchItem(tuple(row.path), row.key, row.value, row.created_at, row.updated_at, row.score)


class _StoreBase:
    """Configuration both stores share: the index, the TTL settings."""

    supports_ttl = True
    ttl_config: TTLConfig | None
    index_config: IndexConfig | None
    _index: _Index | None

    def _configure(self, index: IndexConfig | None, ttl: TTLConfig | None) -> None:
        self.index_config = index
        self._index = _Index(index) if index else None
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
        batch = _Batch(self, ops)
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

    def _run(self, steps: _Steps, omit_expired: bool) -> list[SearchItem]:
        items = self.client.items
        try:
            kind, arg = next(steps)
            while True:
                if kind == "search":
                    kind, arg = steps.send(items.search(**arg, **self._search_kwargs))
                else:
                    for path, keys in _by_path(arg).items():
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
        batch = _Batch(self, ops)
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

    async def _run(self, steps: _Steps, omit_expired: bool) -> list[SearchItem]:
        items = self.client.items
        try:
            kind, arg = next(steps)
            while True:
                if kind == "search":
                    kind, arg = steps.send(await items.search(**arg, **self._search_kwargs))
                else:
                    for path, keys in _by_path(arg).items():
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
