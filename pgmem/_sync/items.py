# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The item repository (``client.items``): a key-value store of JSON items at ``(path, key)`` with TTLs
and vector search over their texts, in ``pgmem.items`` and ``pgmem.item_vectors``. LangGraph's
``BaseStore`` adapter (:mod:`pgmem.integrations.langgraph`) is built on it.

Its search is message search's wing, not a copy of it: the client's one model registry and one planner
(``client.vectors.registry`` and ``.planner``, used through their public methods; an import contract in
pyproject.toml keeps this module off their modules) and the statements of
:mod:`pgmem.planning.search.items`."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, LiteralString

from psycopg import Connection
from psycopg.pq import TransactionStatus

from pgmem._acompat import Event, event_wait
from pgmem._sync.base import Repository
from pgmem._sync.executor import Block
from pgmem.checks import check_query_text, dump_json
from pgmem.embeddings import Embedder, check_query_vector
from pgmem.errors import Conflict, InvalidInput, NotFound
from pgmem.planning import items as plan
from pgmem.planning import statements
from pgmem.planning.items import ItemsAsOf, ItemsForgotten, ItemWrite
from pgmem.planning.retention import Cutoff, cutoff_params
from pgmem.planning.rows import ItemHitRow, ItemRow
from pgmem.planning.search import EmbeddingModel, check_exact_limit, check_mode
from pgmem.planning.search.plan import ITEMS

if TYPE_CHECKING:
    from pgmem._sync.client import Client
    from pgmem._sync.embedding_models import ModelRegistry
    from pgmem._sync.search_planner import SearchPlanner

__all__ = ["WRITE_ATTEMPTS", "ItemRepository", "ItemWrite", "ItemsAsOf", "ItemsForgotten"]

Q = statements.load("items")

#: How many times a batch of writes runs when a concurrent batch made it a deadlock victim (or a
#: serialization failure); only for transactions the repository owns.
WRITE_ATTEMPTS = 8

#: How many of the namespace's newest items a search without a query reads first (at least 20 per item of
#: ``offset + limit``), before it sorts every item that passes its filters.
RECENT_WALK = 1000

#: ``list[ItemHitRow]`` (the repository's ``list_paths`` etc. keep builtins readable in the class body).
Hits = list[ItemHitRow]


class ItemRepository(Repository):
    """JSON items of one namespace, at ``(path, key)``: a path is a tuple of labels (a hierarchy), a key
    any string. Items may expire (a TTL in minutes, extended by reads that ask for it) and may have
    vectors of some of their texts, per embedding model, for similarity search.

    Example:
        >>> await client.items.put_many([{"path": ("users", "u1"), "key": "prefs", "value": {"lang": "fr"}}])
        >>> (await client.items.get(("users", "u1"), "prefs")).value
        {'lang': 'fr'}
    """

    queries = Q

    def __init__(self, client: Client) -> None:
        super().__init__(client)
        wing = client.vectors  # the client's one registry and one planner, shared with message search
        self._registry: ModelRegistry = wing.registry
        self._planner: SearchPlanner = wing.planner

    # -- models -------------------------------------------------------------------------------------

    def model(self, embedder: Embedder, distance: str = "cosine") -> EmbeddingModel:
        """Register ``embedder``'s model with ``distance`` (``pgmem.embedding_models``) and its HNSW index on
        the item vectors, once per process; return it (a model is its name, dimension and distance: items
        written with one distance are searched with that one)."""
        model = self._registry.register(embedder, distance=distance)
        # built concurrently (writes go on), as the registry builds the messages' index (once: it remembers)
        self._registry.build_index(model, "item_vectors")
        return model

    # -- writes -------------------------------------------------------------------------------------

    def put(
        self,
        path: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        ttl: float | None = None,
        texts: Sequence[tuple[str, str]] | None = None,
        embedder: Embedder | None = None,
        distance: str = "cosine",
        connection: Connection[Any] | None = None,
    ) -> None:
        """Insert or replace one item (see :meth:`put_many`)."""
        write: ItemWrite = {"path": path, "key": key, "value": value, "ttl": ttl, "texts": texts}
        self.put_many([write], embedder=embedder, distance=distance, connection=connection)

    def delete(self, path: Sequence[str], key: str, *, connection: Connection[Any] | None = None) -> None:
        """Delete one item and its vectors (nothing happens when it does not exist)."""
        self.put_many([{"path": path, "key": key, "value": None}], connection=connection)

    def put_many(
        self,
        writes: Iterable[ItemWrite],
        *,
        embedder: Embedder | None = None,
        distance: str = "cosine",
        connection: Connection[Any] | None = None,
    ) -> None:
        """Write a batch of items in one transaction, all or nothing: ``value`` inserts or replaces an
        item (``updated_at`` moves, ``created_at`` stays), ``None`` deletes it.

        ``texts`` of a write are embedded with ``embedder`` (one call for the whole batch, before anything
        is written) and replace every vector the item had (they belong to the model of ``distance``); a
        write without texts leaves the item with none. Of several writes to one item, the last one counts.
        Batches running at once from many processes never fail on each other: rows are locked in (path,
        key) order and a deadlock victim runs again (when the repository owns the transaction).

        Raises:
            InvalidInput: a bad path, key, value (not a JSON object, NaN, NUL, over 1 MiB) or TTL;
                nothing is written.
            EmbeddingError: the embedder failed or returned vectors of another dimension; nothing is
                written.
        """
        latest: dict[tuple[tuple[str, ...], str], tuple[str | None, float | None, list[tuple[str, str]]]] = {}
        for i, write in enumerate(writes):
            where = f"write {i}: "
            if not isinstance(write, Mapping):
                raise InvalidInput(f"{where}a write is a mapping with path, key and value")
            try:
                path = plan.check_path(write["path"])
                key = plan.check_item_key(write["key"])
            except KeyError as exc:
                raise InvalidInput(f"{where}a write needs {exc.args[0]!r}") from None
            except InvalidInput as exc:
                raise InvalidInput(f"{where}{exc}") from None
            value = write.get("value")
            if value is None:
                latest[path, key] = (None, None, [])
                continue
            if not isinstance(value, Mapping):
                raise InvalidInput(f"{where}a value must be a dict (a JSON object), got {type(value).__name__}")
            ttl = plan.check_ttl_minutes(write.get("ttl"))
            texts = [(str(f), t) for f, t in (write.get("texts") or ())]
            for _, text in texts:
                if not isinstance(text, str):
                    raise InvalidInput(f"{where}a text to embed must be a string, got {type(text).__name__}")
            latest[path, key] = (dump_json(dict(value), "value", where), ttl, texts)
        plan.check_batch(len(latest))
        if not latest:
            return
        order = sorted(latest)
        deletes = [k for k in order if latest[k][0] is None]
        upserts = [k for k in order if latest[k][0] is not None]
        fields: list[str] = []
        texts_in_order: list[str] = []
        of: list[int] = []
        for n, k in enumerate(upserts, start=1):
            for field, text in latest[k][2]:
                of.append(n)
                fields.append(field)
                texts_in_order.append(text)
        model: EmbeddingModel | None = None
        vectors: list[Any] = []
        if texts_in_order:
            if embedder is None:
                raise InvalidInput("texts to embed need an embedder")
            model = self.model(embedder, distance)
            vectors = list(self._registry.embed(model, texts_in_order, embedder))
        upsert_params = {
            "ns": self.namespace,
            "paths": plan.paths_json([k[0] for k in upserts]),
            "keys": [k[1] for k in upserts],
            "values": [latest[k][0] for k in upserts],
            "ttls": [latest[k][1] for k in upserts],
        }
        vector_params = {
            "ns": self.namespace,
            "paths": upsert_params["paths"],
            "keys": upsert_params["keys"],
            "model": model.id if model is not None else None,
            "half": model is not None and model.kind == "halfvec",
            "of": of,
            "fields": fields,
            "vectors": vectors,
        }
        delete_params = {
            "ns": self.namespace,
            "paths": plan.paths_json([k[0] for k in deletes]),
            "keys": [k[1] for k in deletes],
        }
        attempts = WRITE_ATTEMPTS if self._owns(connection) else 1
        for attempt in range(1, attempts + 1):
            try:
                # One round trip on an idle autocommit connection: the namespace and the writes in one pipeline,
                # one implicit transaction (measured: put of one item 3 -> 1 round trip; see scope.block).
                with self._client.executor.transaction(connection, pipeline=True, vectors=bool(vectors)) as block:
                    self._write(block, deletes, upserts, delete_params, upsert_params, vector_params)
                return
            except Conflict as exc:
                if attempt == attempts or getattr(exc.__cause__, "sqlstate", None) not in ("40P01", "40001"):
                    raise
                event_wait(Event(), random.uniform(0, 0.005 * attempt))

    @staticmethod
    def _write(
        block: Block,
        deletes: list[Any],
        upserts: list[Any],
        delete_params: dict[str, Any],
        upsert_params: dict[str, Any],
        vector_params: dict[str, Any],
    ) -> None:
        if deletes:
            block.command(Q["delete"], delete_params)
        if upserts:
            block.command(Q["upsert"], upsert_params)
            block.command(Q["replace_vectors"], vector_params)

    def sweep(self, *, connection: Connection[Any] | None = None) -> int:
        """Delete the namespace's expired items with their vectors; return how many. Their last versions
        stay in the history (reads as of before they expired see them) until purged (:meth:`purge_history`)."""
        return int(self._scalar("sweep", {}, connection) or 0)

    # -- history (migration 0022) ------------------------------------------------------------------------

    def forget(
        self,
        prefix: Sequence[str],
        keys: Sequence[str] | None = None,
        *,
        connection: Connection[Any] | None = None,
    ) -> ItemsForgotten:
        """Delete items for good, in one transaction: the items at path ``prefix`` with ``keys``, or (no
        ``keys``) every item under ``prefix`` (whole labels, the path itself included), with their
        vectors and every version of them the history holds (of items deleted before too). A plain
        :meth:`delete` keeps the deleted version for reads ``as_of`` before it; this does not.

        Raises:
            InvalidInput: a bad path or key, keys as a bare string, or an empty prefix (the whole
                namespace at once is refused); nothing is deleted.

        Example:
            >>> await client.items.forget(("users", "u1"))  # u1's items and their history
            ItemsForgotten(items=2, versions=5)
        """
        pre = plan.check_path(prefix, "prefix")
        chosen = None if keys is None else self._keys(keys)
        params = {"ns": self.namespace, **plan.path_params(pre), "keys": chosen, "before": None, "age": None}
        with self._client.executor.transaction(connection) as block:
            # Two statements: the trigger's rows (the items' last versions) are visible to the second only.
            removed = block.scalar(Q["forget_items"], params)
            versions = block.scalar(Q["forget_history"], params)
        return ItemsForgotten(int(removed or 0), int(versions or 0))

    def purge_history(
        self,
        prefix: Sequence[str] = (),
        keys: Sequence[str] | None = None,
        *,
        older_than: Cutoff | None = None,
        connection: Connection[Any] | None = None,
    ) -> int:
        """Delete versions from the item history (what reads ``as_of`` read; the current items stay): those
        under ``prefix`` (default: the namespace's), or of ``keys`` at path ``prefix``, and with
        ``older_than`` only those replaced or deleted before that (seconds or a timedelta before now, on the
        server's clock, or a timezone-aware datetime). Returns how many. A retention policy of target
        ``item_history`` does this by age (``client.retention.set_policy("item_history", max_age=...)``).

        Example:
            >>> await client.items.purge_history(older_than=timedelta(days=30))
            120
        """
        pre = plan.check_path(prefix, "prefix", empty=True)
        if keys is not None and not pre:
            raise InvalidInput("keys name items of one path: give it as prefix")
        chosen = None if keys is None else self._keys(keys)
        cutoff = {"before": None, "age": None} if older_than is None else cutoff_params(older_than)
        params = {**plan.path_params(pre), "keys": chosen, **cutoff}
        return int(self._scalar("forget_history", params, connection) or 0)

    # -- reads --------------------------------------------------------------------------------------

    def get_many(
        self,
        path: Sequence[str],
        keys: Sequence[str],
        *,
        refresh_ttl: bool = False,
        omit_expired: bool = False,
        as_of: ItemsAsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[ItemRow]:
        """The items of ``path`` with these keys (in no particular order; missing ones are absent).

        ``refresh_ttl``: extend the expiry of those read that have a TTL and have not expired (never their
        ``updated_at``). ``omit_expired``: leave out expired items a sweep has not deleted yet.
        ``as_of``: the items as they were then (:meth:`search`'s ``as_of``): a version's value and
        ``updated_at``; items that did not exist or had expired then are absent, items deleted since are
        there. No TTL is refreshed by such a read (``refresh_ttl`` must be False).

        Example:
            >>> before = datetime.now(timezone.utc)
            >>> await client.items.put(("users", "u1"), "prefs", {"lang": "de"})
            >>> (await client.items.get(("users", "u1"), "prefs", as_of=before)).value
            {'lang': 'fr'}
        """
        params = {
            "path": list(plan.check_path(path)),
            "keys": self._keys(keys),
            "omit_expired": bool(omit_expired),
        }
        if as_of is not None:
            if refresh_ttl:
                raise InvalidInput("a read as_of a past time refreshes no TTL: refresh_ttl must be False")
            params["at"] = self._at(as_of, connection)
            return [ItemRow._make(row) for row in self._rows("get_as_of", params, connection)]
        rows = self._rows("get", params, connection)
        if refresh_ttl:
            self._refresh([row[5] for row in rows if row[6]], connection)
        return [ItemRow._make(row[:5]) for row in rows]

    def get(
        self,
        path: Sequence[str],
        key: str,
        *,
        refresh_ttl: bool = False,
        omit_expired: bool = False,
        as_of: ItemsAsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> ItemRow | None:
        """One item, or None (see :meth:`get_many`)."""
        found = self.get_many(
            path, [key], refresh_ttl=refresh_ttl, omit_expired=omit_expired, as_of=as_of, connection=connection
        )
        return found[0] if found else None

    def list_paths(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
        omit_expired: bool = False,
        as_of: ItemsAsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[tuple[str, ...]]:
        """The distinct paths holding items, sorted: those starting with ``prefix`` and ending with
        ``suffix`` (whole labels; a ``"*"`` label matches any one label), each cut to ``max_depth``
        labels (then distinct again).

        ``as_of``: the paths that held an item then (:meth:`search`'s ``as_of``, :meth:`get_many`'s rule:
        a path whose items were all deleted since is listed, one whose first item came later is not, and
        an item that had expired then counts for nothing, whatever ``omit_expired`` says).

        Example:
            >>> await client.items.list_paths(prefix=("users",), as_of=mark)
            [('users', 'u1')]
        """
        plan.check_page(limit, offset)
        if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1):
            raise InvalidInput(f"max_depth must be a positive integer, got {max_depth!r}")
        pre = plan.check_path(prefix, "prefix", empty=True) if prefix is not None else ()
        suf = plan.check_path(suffix, "suffix", empty=True) if suffix is not None else ()
        # The labels before the first "*": the paths under them are one range of path keys, the only ones
        # read. A prefix without "*" is that range: no label is tested again.
        fixed = list(itertools.takewhile(lambda label: label != "*", pre))
        params: dict[str, Any] = {
            "prefix": list(pre) if len(fixed) < len(pre) else None,
            "fixed": fixed,
            "suffix": list(suf) or None,
            "max_depth": max_depth,
            "limit": limit,
            "offset": offset,
            "omit_expired": bool(omit_expired),
        }
        name = "list_paths"
        if as_of is not None:
            name, params["at"] = "list_paths_as_of", self._at(as_of, connection)
        return [tuple(path) for path in self._column(name, params, connection)]

    def search(
        self,
        prefix: Sequence[str] = (),
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        query: str | None = None,
        vector: Any = None,
        embedder: Embedder | None = None,
        distance: str = "cosine",
        vectors_per_item: int = 1,
        refresh_ttl: bool = False,
        omit_expired: bool = False,
        mode: str = "auto",
        exact_limit: int | None = None,
        as_of: ItemsAsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> Hits:
        """Items under ``prefix`` (whole labels) that pass ``filter``, ``limit`` of them after ``offset``.

        Without ``query`` or ``vector``: newest ``updated_at`` first (``score`` None). With one (``query``
        is embedded with ``embedder``; ``vector`` is taken as is, ``embedder`` naming its model): the
        items with vectors of that model and ``distance``, best first, an item scoring as its best vector
        (the scores of LangGraph's ``PostgresStore``: cosine similarity, ``-`` Euclidean distance for
        ``"l2"``, the inner product for ``"inner_product"``). The client's planner chooses, as for message
        search (:class:`~pgmem._async.search_planner.AsyncSearchPlanner`): a search (the namespace filters
        it, whatever else does) is exact when few items pass (``exact_limit``, default ``8 * sqrt(item
        vectors)``, counted once per few seconds) or it pages deeper than an index scan serves, else an
        iterative HNSW scan with the filters applied during the scan; a scan that comes back short is
        followed by the exact search, so every page holds ``limit`` items whenever that many match, at any
        ``offset``.
        ``vectors_per_item``: how many vectors an item usually has (the scan reads that many per hit).
        ``mode``: ``auto``, ``exact`` or ``ann``.

        ``as_of``: the items as they were at a time (migration 0022): a timezone-aware datetime, a
        :class:`~pgmem.planning.forks.Mark` (when it was made) or ``(memory, mark name)``. Each item's
        version valid then (its value and ``updated_at``), under ``prefix``, passing ``filter`` (tested on
        that version), newest first; items created later, or expired then, are absent; items deleted since are there.
        Vectors are kept for current values only, so a search as of a time takes no ``query`` or
        ``vector`` (:class:`pgmem.InvalidInput`); it refreshes no TTL (``refresh_ttl`` must be False) and
        leaves out what had expired then whatever ``omit_expired`` says.

        Example:
            >>> mark = await client.mark("chat", "before-tools")
            >>> await client.items.search(("users",), filter={"lang": "fr"}, as_of=mark)
        """
        limit, offset = plan.check_page(limit, offset)
        check_mode(mode)
        check_exact_limit(exact_limit)
        pre = plan.check_path(prefix, "prefix", empty=True)
        shape, filter_params = plan.check_filter(filter)
        if isinstance(query, str):
            check_query_text(query, "query")
        params: dict[str, Any] = {"limit": limit, "offset": offset, **plan.path_params(pre), **filter_params}
        refresh = bool(refresh_ttl)
        omit = bool(omit_expired)
        if as_of is not None:
            if query is not None or vector is not None:
                raise InvalidInput(
                    "a search as_of a past time takes no query or vector: items' vectors are of their current "
                    "values only (search by prefix and filter)"
                )
            if refresh:
                raise InvalidInput("a read as_of a past time refreshes no TTL: refresh_ttl must be False")
            params["at"] = self._at(as_of, connection)
            if limit == 0:
                return []
            return self._found(
                self._hits(plan.as_of_statement(bool(pre), shape), params, None, connection), False, connection
            )
        if query is None and vector is None:
            if limit == 0:
                return []
            # The newest items first (a bounded walk of the namespace's updated_at index); when fewer than
            # a page of them pass, every item that does is sorted (the rows found are that page's first).
            params["walk"] = max(RECENT_WALK, 20 * (offset + limit))
            text = plan.search_statement("recent", bool(pre), shape, omit)
            rows = self._hits(text, params, None, connection)
            if len(rows) < limit:
                rows = self._hits(plan.search_statement("list", bool(pre), shape, omit), params, None, connection)
            return self._found(rows, refresh, connection)
        if embedder is None:
            raise InvalidInput("a search by query or vector needs the embedder (its model) of the items' vectors")
        model = self.model(embedder, distance)
        if vector is None:
            if not isinstance(query, str):
                raise InvalidInput(f"a query must be a string, got {type(query).__name__}")
            vector = (self._registry.embed(model, [query], embedder))[0]
        params["q"] = check_query_vector(vector, model.dimension)
        if limit == 0:
            return []
        n = (offset + limit) * max(1, int(vectors_per_item))
        strategy = mode
        if strategy == "auto":
            self._planner.fresh_statistics(connection, ITEMS)
            # With no filter but the namespace too: the index holds every namespace's item vectors of the
            # model, and a small namespace is searched exactly rather than walked for.
            strategy = self._planner.choose(
                ITEMS,
                (pre, tuple(sorted(filter_params.items())), shape, omit),
                plan.count_statement(bool(pre), shape, omit),
                {**plan.path_params(pre), **filter_params},
                exact_limit,
                connection,
                model_id=model.id,
                depth=n,
            )
        if strategy == "ann":
            text = plan.search_statement("ann", bool(pre), shape, omit, model, n)
            settings = self._planner.scan_settings(strategy, model.depth(n))
            rows = self._hits(text, params, settings, connection, prepare=not shape and not omit)
            if len(rows) == limit or mode == "ann":
                return self._found(rows, refresh, connection)
            # Short: the scan ran out (max_scan_tuples) or items have more vectors than expected.
        text = plan.search_statement("exact", bool(pre), shape, omit, model)
        return self._found(self._hits(text, params, None, connection), refresh, connection)

    # -- helpers ------------------------------------------------------------------------------------

    @staticmethod
    def _keys(keys: Sequence[str]) -> list[str]:
        if isinstance(keys, str) or not isinstance(keys, Sequence | set | frozenset):
            raise InvalidInput(f"keys must be a list of item keys, got {type(keys).__name__}")
        return [plan.check_item_key(k) for k in keys]

    def _at(self, as_of: ItemsAsOf, connection: Connection[Any] | None) -> datetime:
        """The time of an ``as_of`` (a mark named by ``(memory, name)``: one statement)."""
        at = plan.check_items_as_of(as_of)
        if isinstance(at, datetime):
            return at
        memory, name = at
        found = self._column("mark_time", {"memory": memory, "name": name}, connection)
        if not found:
            raise NotFound(f"memory {memory!r} has no mark named {name!r} in namespace {self.namespace!r}")
        return found[0]  # type: ignore[no-any-return]

    def _owns(self, connection: Connection[Any] | None) -> bool:
        """Whether a transaction on ``connection`` would be the repository's own (retried on a deadlock)."""
        if connection is None:
            return self._client.owns_transactions
        return connection.autocommit and connection.info.transaction_status == TransactionStatus.IDLE

    def _found(self, rows: list[tuple[Any, ...]], refresh: bool, connection: Connection[Any] | None) -> Hits:
        """A search's hits (``rows``: plan.search_statement's), their TTLs extended first when ``refresh``."""
        if refresh:
            self._refresh([row[7] for row in rows if row[8]], connection)
        return [ItemHitRow._make(row[:7]) for row in rows]

    def _refresh(self, ids: list[int], connection: Connection[Any] | None) -> None:
        """Extend the TTL of the items ``ids`` a read returned (those that expired since are left alone)."""
        if ids:
            self._rows("refresh", {"ids": ids}, connection)

    def _hits(
        self,
        text: LiteralString,
        params: dict[str, Any],
        settings: dict[str, str] | None,
        connection: Connection[Any] | None,
        *,
        prepare: bool = False,
    ) -> list[tuple[Any, ...]]:
        """Run a search statement. ``settings``: an HNSW scan's (the planner's, iterative scans on), local
        to the statement's transaction, sent with its namespace.

        Unprepared unless ``prepare`` (then from its second run, the server's plan cache deciding
        between generic and custom plans). A generic plan knows neither the prefix nor the filter values:
        with a filter, or with the scan's LIMIT a parameter, it chose to compute and sort the distance of
        every vector instead of walking the index (5 ms against 0.9 ms, planning included, at 3,000
        items). An index scan without a filter (its LIMIT written in, the prefix tested per row in a
        subplan, the items probed) has one plan whatever the values, and saves its planning (~0.25 ms at
        34k items)."""
        params["ns"] = self.namespace
        return self._client.executor.rows(
            text, params, connection, prepare=None if prepare else False, settings=settings, vectors="q" in params
        )
