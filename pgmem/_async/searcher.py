"""Search execution: vector search (single and batch) and hybrid search, in one statement each."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection

from pgmem._async.base import AsyncRepository
from pgmem._async.embedding_models import AsyncModelRegistry
from pgmem._async.executor import AsyncBlock
from pgmem._async.search_planner import AsyncSearchPlanner, hnsw_settings
from pgmem._async.sessions import AsyncSessions
from pgmem.checks import check_query_text, check_query_texts
from pgmem.embeddings import Embedder, Vectors
from pgmem.errors import InvalidInput
from pgmem.planning import statements
from pgmem.planning.distances import DEFAULT_DISTANCE, check_threshold, max_distance
from pgmem.planning.forks import AsOf
from pgmem.planning.search import (
    MODEL_SWITCH_ATTEMPTS,
    EmbeddingModel,
    SearchFilters,
    SearchHit,
    as_query_vector,
    batch_hits,
    check_exact_limit,
    check_fusion,
    check_half_life,
    check_k,
    check_mode,
    forked,
    hybrid_hit,
    hybrid_legs,
    hybrid_text_statement,
    keyword_statement,
    log_text,
    statement,
    still_switching,
    switched,
    vector_hits,
)
from pgmem.resilience import reads_only

if TYPE_CHECKING:
    from pgmem._async.client import AsyncClient

__all__ = ["AsyncSearcher", "hnsw_settings"]  # hnsw_settings: the planner's, re-exported


Rows = list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class _Plan:
    """One search, as it runs once its model is known: the statement and one parameter set per query."""

    statement: Any
    params: list[dict[str, Any]]
    settings: dict[str, str] | None  # an index scan's (AsyncSearchPlanner.scan_settings), None for an exact search
    # A keyword leg: never prepared. Its plan needs the query's lexemes (pgmem.fts_query folded when planned);
    # from the sixth run Postgres chose the prepared statement's generic plan, blind to them (a rare word in
    # a memory of 100k messages: 1.8 s instead of tens of ms; benchmarks/README.md, messages).
    keywords: bool = False


class AsyncSearcher(AsyncRepository):
    """Runs searches: looks up the model (:class:`AsyncModelRegistry`), embeds the query texts, asks the
    planner for a strategy (:class:`AsyncSearchPlanner`), and runs the statement (one round trip) on a
    connection whose session it knows (:class:`AsyncSessions`). When the memory's model switched under the
    search (its rows say so) it runs again on the new one: one loop, :meth:`_run`, for every kind."""

    queries = statements.load("vectors")

    def __init__(
        self, client: AsyncClient, registry: AsyncModelRegistry, planner: AsyncSearchPlanner, sessions: AsyncSessions
    ) -> None:
        super().__init__(client)
        self._registry = registry
        self._planner = planner
        self._sessions = sessions

    async def search(
        self,
        query: str | None = None,
        *,
        vector: Any = None,
        k: int = 10,
        memory: str | None = None,
        cause_by: str | None = None,
        role: str | None = None,
        sender: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        max_seq: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        threshold: float | None = None,
        mode: str = "auto",
        exact_limit: int | None = None,
        embedder: Embedder | None = None,
        distance: str | None = None,
        label: str | None = None,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[SearchHit]:
        """See :meth:`pgmem.AsyncVectorRepository.search`."""
        filters = SearchFilters(memory, cause_by, role, sender, since, until, max_seq, metadata)
        filters = await self._client.forks.searched(filters, as_of, connection)
        if (query is None) == (vector is None):
            raise InvalidInput("search needs exactly one of a query text or a vector")
        check_k(k)
        threshold = check_threshold(threshold, distance)
        mode = check_mode(mode)
        check_exact_limit(exact_limit)
        texts = None if query is None else [check_query_text(query, "query")]
        logged = self._client.retrieval_log
        ranked_by: str = DEFAULT_DISTANCE  # the distance of the model the search ran on (its scores)

        def plan(model: EmbeddingModel, qs: Any, strategy: str, filters: SearchFilters) -> _Plan:
            nonlocal ranked_by
            ranked_by = model.distance
            base = {"ns": self.namespace, **filters.params()}
            if threshold is not None:
                base["max_distance"] = max_distance(model.distance, threshold)
            if logged:
                base["log_label"] = log_text(label)
                base["log_query"] = log_text(query)
            return _Plan(
                statement("vector", model, filters, strategy, k, threshold is not None, logged=logged),
                [{**base, "q": q} for q in qs],
                self._planner.scan_settings(strategy, model.depth(k)),
            )

        (rows,) = await self._run(
            filters,
            texts,
            None if vector is None else [vector],
            embedder,
            mode,
            exact_limit,
            plan,
            connection,
            distance=distance,
            complete=k if threshold is None else None,
            sample=("vector", k),
        )
        return vector_hits(rows, ranked_by)

    async def search_many(
        self,
        queries: Sequence[str] | None = None,
        *,
        vectors: Any = None,
        k: int = 10,
        memory: str | None = None,
        cause_by: str | None = None,
        role: str | None = None,
        sender: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        max_seq: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        threshold: float | None = None,
        exact_limit: int | None = None,
        embedder: Embedder | None = None,
        distance: str | None = None,
        label: str | None = None,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[list[SearchHit]]:
        """See :meth:`pgmem.AsyncVectorRepository.search_many`."""
        filters = SearchFilters(memory, cause_by, role, sender, since, until, max_seq, metadata)
        filters = await self._client.forks.searched(filters, as_of, connection)
        if (queries is None) == (vectors is None):
            raise InvalidInput("search_many needs exactly one of query texts or vectors")
        check_k(k)
        threshold = check_threshold(threshold, distance)
        check_exact_limit(exact_limit)
        texts = None if queries is None else check_query_texts(queries, "queries")
        count = len(texts) if texts is not None else len(vectors)
        if count == 0:
            return []
        logged = self._client.retrieval_log
        ranked_by: str = DEFAULT_DISTANCE

        def plan(model: EmbeddingModel, qs: Any, strategy: str, filters: SearchFilters) -> _Plan:
            nonlocal ranked_by
            ranked_by = model.distance
            params = {
                "ns": self.namespace,
                "qs": list(qs),
                "k": k,
                "max_distance": max_distance(model.distance, threshold),
                **filters.params(),
            }
            if logged:
                params["log_label"] = log_text(label)
                params["log_queries"] = [log_text(t) for t in texts] if texts is not None else [None] * count
            return _Plan(
                statement("batch", model, filters, strategy, k, logged=logged),
                [params],
                self._planner.scan_settings(strategy, model.depth(k)),
            )

        (rows,) = await self._run(
            filters,
            texts,
            vectors,
            embedder,
            "auto",
            exact_limit,
            plan,
            connection,
            stack=True,
            distance=distance,
            sample=("batch", k),
        )
        return batch_hits(rows, count, ranked_by)

    async def hybrid_search(
        self,
        text: str | None = None,
        *,
        keyword_query: str | None = None,
        vector: Any = None,
        k: int = 10,
        memory: str | None = None,
        cause_by: str | None = None,
        role: str | None = None,
        sender: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
        w_vector: float = 1.0,
        w_text: float = 1.0,
        rrf_k: int = 60,
        fusion: str = "convex",
        half_life: timedelta | float | None = None,
        mode: str = "auto",
        embedder: Embedder | None = None,
        label: str | None = None,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[SearchHit]:
        """See :meth:`pgmem.AsyncVectorRepository.hybrid_search`."""
        filters = SearchFilters(memory, cause_by, role, sender, since, until, metadata=metadata)
        filters = await self._client.forks.searched(filters, as_of, connection)
        for name, value in (("text", text), ("keyword_query", keyword_query)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidInput(f"hybrid search's {name} must be a non-empty string, got {value!r}")
            if value is not None:
                check_query_text(value, name)
        keywords = keyword_query if keyword_query is not None else text
        legs = hybrid_legs(w_vector, w_text)  # a leg weighted 0 does not run: it needs no input
        if keywords is None and legs != "vector":
            raise InvalidInput("hybrid search needs a text (or a keyword_query) for its keyword half")
        if text is None and vector is None and legs != "text":
            raise InvalidInput("hybrid search needs a text (or a vector) for its vector half")
        check_k(k)
        if isinstance(rrf_k, bool) or not isinstance(rrf_k, int) or not 0 <= rrf_k <= 10_000:
            raise InvalidInput(f"rrf_k must be an integer in [0, 10000], got {rrf_k!r}")
        check_fusion(fusion)
        mode = check_mode(mode)
        seconds = check_half_life(half_life)
        depth = max(4 * k, 40)
        logged = self._client.retrieval_log
        scope_n = await self._planner.scope_size(filters.memory, connection) if legs != "vector" else 0
        if legs == "text":
            params = {
                "ns": self.namespace,
                "k": depth,
                "limit": k,
                "text": keywords,
                "scope_n": scope_n,
                "fusion": fusion,
                "w_text": float(w_text),
                "rrf_k": rrf_k,
                "half_life": seconds,
            }
            if logged:
                params["log_label"] = log_text(label)
                params["log_query"] = log_text(text if text is not None else keywords)
            return await self._text_only(filters, params, logged, connection)

        def plan(model: EmbeddingModel, qs: Any, strategy: str, filters: SearchFilters) -> _Plan:
            params = {
                "ns": self.namespace,
                "q": qs[0],
                "k": depth,
                "limit": k,
                "max_distance": 2.0,
                "text": keywords,
                "scope_n": scope_n,
                "fusion": fusion,
                "w_vector": float(w_vector),
                "w_text": float(w_text),
                "rrf_k": rrf_k,
                "half_life": seconds,
                **filters.params(),
            }
            if logged:
                params["log_label"] = log_text(label)
                params["log_query"] = log_text(text if text is not None else keywords)
            return _Plan(
                statement("hybrid", model, filters, strategy, logged=logged, legs=legs),
                [params],
                self._planner.scan_settings(strategy, model.depth(depth)),
                keywords=True,
            )

        texts = [text] if vector is None and text is not None else None
        vectors = None if vector is None else [vector]
        (rows,) = await self._run(filters, texts, vectors, embedder, mode, None, plan, connection, sample=("hybrid", k))
        return [hybrid_hit(row) for row in rows]

    async def _text_only(
        self, filters: SearchFilters, params: dict[str, Any], logged: bool, connection: AsyncConnection[Any] | None
    ) -> list[SearchHit]:
        """A hybrid search with ``w_vector=0``: its keyword leg alone, scored as hybrid search scores it
        (no model, no query embedding); again through the lineage when its rows say the memory is a fork."""
        await self._planner.fresh_statistics(connection)
        while True:
            params = {**params, **filters.params()}
            planned = _Plan(hybrid_text_statement(filters, logged=logged), [params], None, keywords=True)
            (rows,) = await self._execute(planned, connection)
            if not await self._inherits(rows, filters, connection):
                return [hybrid_hit(row) for row in rows]
            filters = self._client.forks._through_lineage(filters)

    async def keyword_search(
        self,
        text: str,
        *,
        k: int = 10,
        memory: str | None = None,
        cause_by: str | None = None,
        role: str | None = None,
        sender: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        max_seq: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        label: str | None = None,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[SearchHit]:
        """See :meth:`pgmem.AsyncVectorRepository.keyword_search`."""
        filters = SearchFilters(memory, cause_by, role, sender, since, until, max_seq, metadata)
        filters = await self._client.forks.searched(filters, as_of, connection)
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"keyword search needs a non-empty text, got {text!r}")
        check_query_text(text, "text")
        check_k(k)
        logged = self._client.retrieval_log
        await self._planner.fresh_statistics(connection)  # without any, Postgres probed every message per entry
        params = {
            "ns": self.namespace,
            "text": text,
            "k": k,
            "scope_n": await self._planner.scope_size(filters.memory, connection),
            **filters.params(),
        }
        if logged:
            params["log_label"] = log_text(label)
            params["log_query"] = log_text(text)
        plan = _Plan(keyword_statement(filters, logged=logged), [params], None, keywords=True)
        (rows,) = await self._execute(plan, connection)
        if await self._inherits(rows, filters, connection):
            filters = self._client.forks._through_lineage(filters)
            params = {**params, **filters.params()}
            plan = _Plan(keyword_statement(filters, logged=logged), [params], None, keywords=True)
            (rows,) = await self._execute(plan, connection)
        return [hybrid_hit(row) for row in rows]

    # -- one loop for every kind of search ------------------------------------------------------------

    async def _run(
        self,
        filters: SearchFilters,
        texts: list[str] | None,
        vectors: Any,
        embedder: Embedder | None,
        mode: str,
        exact_limit: int | None,
        plan: Callable[[EmbeddingModel, Any, str, SearchFilters], _Plan],
        connection: AsyncConnection[Any] | None,
        *,
        stack: bool = False,
        distance: str | None = None,
        complete: int | None = None,
        sample: tuple[str, int] | None = None,
    ) -> list[Rows]:
        """Run the search ``plan`` builds on the memory's model, again on the new one when a model switch
        finished under it. ``vectors``: the caller's query vectors (else ``texts`` are embedded).
        ``distance``: the model's without a memory (default cosine); with one, it must be the memory's.
        ``complete``: the rows a complete answer holds (``k``, for a search without a threshold): an index
        scan the planner chose that came back with fewer (its walk stopped at ``hnsw.max_scan_tuples``
        before enough rows passed the filters) runs again exactly, so a search never comes back short
        while the filters keep ``k`` messages. ``sample``: the kind of search and its ``k``, for the share of
        searches whose recall is checked (:mod:`pgmem._async.recall`): what was served is recorded then.
        A memory its statement says is a fork after all (:meth:`_inherits`) is searched again through its
        lineage (``plan`` takes the filters it runs with)."""
        await self._planner.fresh_statistics(connection)
        for attempt in range(MODEL_SWITCH_ATTEMPTS):
            model = await self._registry.for_search(filters, embedder, attempt > 0, distance)
            qs: Vectors | list[Any]
            if texts is not None:
                qs = await self._registry.query_vectors(model, texts, embedder)
            else:
                qs = [as_query_vector(v, model.dimension) for v in vectors]
                if stack:
                    import numpy as np  # not at module level: see pgmem.embeddings

                    qs = np.stack(qs)
            while True:  # twice for a fork this client did not know (the second time through its lineage)
                strategy = await self._planner.strategy(model, filters, mode, exact_limit, connection)
                planned = plan(model, qs, strategy, filters)
                found = await self._execute(planned, connection)
                if complete is not None and mode == "auto" and strategy == "ann" and len(found[0]) < complete:
                    strategy, planned = "exact", plan(model, qs, "exact", filters)
                    found = await self._execute(planned, connection)
                if not await self._inherits(found[0], filters, connection):
                    break
                filters = self._client.forks._through_lineage(filters)
            if not any([await self._switched(rows, filters, model) for rows in found]):
                if sample is not None and (recall := self._client.vectors.recall).sampled():
                    params, settings = planned.params[0], planned.settings
                    await recall.record(*sample, model, filters, strategy, params, settings, found[0], connection)
                return found
        raise still_switching(filters.memory)

    async def _inherits(self, rows: Rows, filters: SearchFilters, connection: AsyncConnection[Any] | None) -> bool:
        """Whether a search that read the memory's own entries only should have read its lineage: its rows
        say so (``ok`` false); with no row, one statement asks (a search that found nothing is rare)."""
        if filters.memory is None or filters.lineage:
            return False
        if rows:
            return forked(rows[0])
        return await self._client.forks.inherits(filters.memory, connection)

    async def _switched(self, rows: Rows, filters: SearchFilters, model: EmbeddingModel) -> bool:
        """Whether the memory's active model changed under this search (its rows carry ``ok`` last)."""
        if filters.memory is None:
            return False
        if rows:
            return switched(rows[0])
        current = await self._registry.active(filters.memory, refresh=True)
        return current is not None and current.id != model.id

    async def _execute(self, plan: _Plan, connection: AsyncConnection[Any] | None) -> list[Rows]:
        """Run a search statement once per parameter set on one connection.

        ``plan.settings``: an index scan's (:func:`pgmem._async.search_planner.hnsw_settings`), local to
        the statement's transaction and sent with it, or None (no index scan).
        """
        replicas = self._client.replicas
        if connection is None and replicas is not None and not self._client.retrieval_log:
            # A read (the retrieval log writes): on a replica that has the client's writes, else the primary.
            return await replicas.run(lambda conn: self._execute(plan, conn))
        executor, settings = self._client.executor, plan.settings
        if len(plan.params) == 1:  # one query: one statement, the executor's shortest way
            prepare = False if plan.keywords else None
            rows = await executor.rows(
                plan.statement, plan.params[0], connection, settings=settings, vectors=True, prepare=prepare
            )
            return [rows]

        async def each(block: AsyncBlock) -> list[Rows]:
            return [await block.rows(plan.statement, p, settings=plan.settings) for p in plan.params]

        # A read unless the retrieval log records it: then a lost connection is CommitUnknown, not a retry.
        return await executor.run(each, connection, reads=reads_only(plan.statement), vectors=True)
