"""Embeddings and semantic search of a namespace: the public face of the vector collaborators.

The work is done by objects with one job each, wired here: the model registry
(:mod:`~pgmem._async.embedding_models`), which the embedding outbox and its worker
(:mod:`~pgmem._async.outbox`) and the searcher (:mod:`~pgmem._async.searcher`, with its planner
:mod:`~pgmem._async.search_planner`) both receive; the retrieval log (:mod:`~pgmem._async.retrieval_log`).
The item store (:mod:`~pgmem._async.items`, ``client.items``) searches with the same registry and planner
(:attr:`AsyncVectorRepository.registry`, :attr:`AsyncVectorRepository.planner`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection

from pgmem._async import merging
from pgmem._async.base import AsyncRepository
from pgmem._async.embedding_models import AsyncModelRegistry
from pgmem._async.outbox import AsyncEmbeddingOutbox, EmbedReport
from pgmem._async.recall import AsyncSearchRecall
from pgmem._async.retrieval_log import AsyncRetrievalLog
from pgmem._async.search_planner import AsyncSearchPlanner
from pgmem._async.searcher import AsyncSearcher
from pgmem._async.sessions import AsyncSessions
from pgmem.checks import check_key
from pgmem.embeddings import Embedder, Vectors
from pgmem.planning import statements
from pgmem.planning.forks import AsOf
from pgmem.planning.search import EmbeddingModel, SearchHit

if TYPE_CHECKING:
    from pgmem._async.client import AsyncClient

__all__ = ["AsyncVectorRepository", "EmbedReport"]


class AsyncVectorRepository(AsyncRepository):
    """Embeddings of one namespace's messages, and search over them.

    A memory is embedded once it has a model (:meth:`enable`): from then on every message added to it is
    queued for embedding in the same transaction (``pgmem.embedding_outbox``), and the writing client
    embeds the queue in the background after commit. A provider failure leaves the messages queued (and
    searchable by text); :meth:`embed_pending` or ``pgmem embed`` fills the missing vectors later.

    Example:
        >>> await client.vectors.enable("role:Alice")
        >>> await client.messages.add("role:Alice", Message(content="Write a cli snake game"))
        >>> await client.vectors.flush()
        >>> hits = await client.vectors.search("a snake game in the terminal", memory="role:Alice")
    """

    queries = statements.load("vectors")

    def __init__(self, client: AsyncClient, sessions: AsyncSessions) -> None:
        super().__init__(client)
        self.registry = AsyncModelRegistry(client)
        self.outbox = AsyncEmbeddingOutbox(client, self.registry, sessions)
        self.planner = AsyncSearchPlanner(client)
        self.searcher = AsyncSearcher(client, self.registry, self.planner, sessions)
        self.retrieval_log = AsyncRetrievalLog(client)
        #: Search recall you can watch: sampled searches and their checker (:mod:`pgmem._async.recall`).
        self.recall = AsyncSearchRecall(client, self.planner)

    # -- models -------------------------------------------------------------------------------------

    async def model(
        self,
        embedder: Embedder | None = None,
        *,
        distance: str = "cosine",
        connection: AsyncConnection[Any] | None = None,
    ) -> EmbeddingModel:
        """Register ``embedder``'s model (name and dimension) with ``distance`` and its HNSW index, once;
        return it.

        The same name with another dimension or distance is another model.
        """
        return await self.registry.register(embedder, distance=distance, connection=connection)

    async def enable(
        self,
        memory: str,
        embedder: Embedder | None = None,
        *,
        distance: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> str:
        """Embed ``memory``'s messages with ``embedder`` (default: the client's); queue those it holds.
        With a :class:`pgmem.embeddings.Precomputed` model, the vectors are yours: give them with the
        messages (``messages.add(..., embedding=)``; the same add of a held message fills its vector in).

        ``distance``: what the memory's searches rank by and score with, ``"cosine"`` (cosine similarity),
        ``"l2"`` (negated Euclidean distance) or ``"inner_product"`` (the inner product), as LangGraph's
        ``distance_type`` (see :mod:`pgmem.planning.distances`); None keeps the memory's (cosine for a new
        one). The model with that distance has its own HNSW index, built with that distance's operator class.

        The first model of a memory is ``active`` at once. Enabling another model (or another distance: its
        vectors are another model's) on a memory starts a switch (``building``): its vectors are filled in
        the background while searches keep using the current model, and it becomes the active one when
        every entry has a vector. Returns the status.

        Example:
            >>> await client.vectors.enable("role:Alice", distance="l2")
        """
        check_key(memory)
        if distance is None:
            current = await self.registry.active(memory, connection=connection)
            distance = "cosine" if current is None else current.distance
        model = await self.registry.register(embedder, distance=distance, connection=connection)
        status = await self._scalar("enable", {"memory": memory, "model": model.id}, connection)
        self.registry.forget(memory)
        if connection is None:
            self.outbox.kick()
        return str(status)

    async def switch_model(
        self,
        memory: str,
        embedder: Embedder,
        *,
        distance: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> str:
        """Move ``memory`` to another model with no downtime (see :meth:`enable`); return its status."""
        return await self.enable(memory, embedder, distance=distance, connection=connection)

    def forget_model(self, memory: str) -> None:
        """Drop the remembered active model of ``memory`` (the next search looks it up)."""
        self.registry.forget(memory)

    async def models(self, memory: str, *, connection: AsyncConnection[Any] | None = None) -> dict[str, str]:
        """``{model name: status}`` of a memory (``active`` first); a model of another distance than cosine
        is named ``"<name> (<distance>)"`` (a switch between distances of one embedder lists both)."""
        return {
            model.name if model.distance == "cosine" else f"{model.name} ({model.distance})": status
            for status, model in await self.registry.memory_models(memory, connection)
        }

    async def active_model(
        self, memory: str, *, connection: AsyncConnection[Any] | None = None, refresh: bool = False
    ) -> EmbeddingModel | None:
        """The model ``memory`` is searched with (None: the memory has no model). Remembered by the client
        until a switch is seen, so asking again costs no round trip."""
        check_key(memory)
        return await self.registry.active(memory, connection=connection, refresh=refresh)

    def embedder_for(self, model: str, dimension: int | None = None) -> Embedder | None:
        """The embedder this client has for a model (None: none; pass ``embedder=`` to searches); with no
        ``dimension``, the first it has of that name."""
        return self.registry.embedder_for(model, dimension)

    async def embed_query(
        self, model: EmbeddingModel, texts: Sequence[str], embedder: Embedder | None = None
    ) -> Vectors:
        """Embed search texts with ``model`` (``embedder``, else the one this client has for it)."""
        return await self.registry.query_vectors(model, texts, embedder)

    # -- the outbox ---------------------------------------------------------------------------------

    async def pending(
        self, memory: str | None = None, *, connection: AsyncConnection[Any] | None = None
    ) -> dict[str, int]:
        """Messages waiting for an embedding, per model name (of ``memory``, or of the namespace)."""
        return await self.outbox.pending(memory, connection=connection)

    async def embed_pending(
        self,
        embedder: Embedder | None = None,
        *,
        batch_size: int = 256,
        limit: int | None = None,
        retry_now: bool = False,
        progress: Callable[[int], None] | None = None,
        count_remaining: bool = True,
    ) -> EmbedReport:
        """Embed queued messages of this namespace (see :meth:`AsyncEmbeddingOutbox.embed_pending`)."""
        return await self.outbox.embed_pending(
            embedder,
            batch_size=batch_size,
            limit=limit,
            retry_now=retry_now,
            progress=progress,
            count_remaining=count_remaining,
        )

    def written(self, connection: AsyncConnection[Any] | None, models: Sequence[int] = ()) -> None:
        """Messages were added to a memory with models (``models``: their ids, when known): embed them after
        commit, in the background (:meth:`pgmem._async.outbox.AsyncEmbeddingOutbox.written`)."""
        self.outbox.written(connection, models)

    def changed(self, memory: str, connection: AsyncConnection[Any] | None) -> None:
        """Entries left ``memory``, or the caller's own vectors were stored with its messages: tell this
        client's change listeners (after commit)."""
        self.outbox.changed(memory, connection)

    def add_change_listener(self, listener: Callable[[str | None], None]) -> None:
        """Call ``listener(memory)`` after this client changed a memory's vectors (None: some memory of
        the namespace). The FAISS cache uses it to read its own process's writes."""
        self.outbox.add_listener(listener)

    def remove_change_listener(self, listener: Callable[[str | None], None]) -> None:
        self.outbox.remove_listener(listener)

    def kick(self) -> None:
        """Have the background embedder run over the outbox (again) soon; returns at once."""
        self.outbox.kick()

    async def wait(self) -> None:
        """Wait for the background embedding of this client's writes (no round trip when idle)."""
        await self.outbox.wait()

    async def flush(self, embedder: Embedder | None = None) -> EmbedReport:
        """Wait for background embedding, then embed what is still queued (``persist()`` calls this)."""
        return await self.outbox.flush(embedder)

    async def close(self) -> None:
        await self.outbox.close()
        await self.recall.close()

    # -- search ---------------------------------------------------------------------------------------

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
        boost_seen: float | None = None,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[SearchHit]:
        """The ``k`` messages closest to ``query`` (text, embedded with the memory's model) or ``vector``
        (your own query vector, of the memory's model's dimension: :class:`pgmem.EmbeddingError` if not).

        Filters restrict the search to one memory, an action (``cause_by``), a role, a sender, a time
        range (``max_seq``: only the memory's entries up to that sequence number) and the messages'
        ``metadata`` (``{"topic": "billing", "score": {"$gte": 3}}``: equality, ``$eq $ne $gt $gte $lt
        $lte`` on top-level fields, :mod:`pgmem.planning.search.metadata`); the search stays complete under
        them: ``k`` hits whenever the filters keep ``k`` messages (see :mod:`pgmem.planning.search`).
        Hits rank by the distance of the memory's model (:meth:`enable`); without a memory, by ``distance``
        (default ``"cosine"``), among the vectors of the model with that distance; with one, ``distance`` may
        only repeat the memory's. ``threshold`` keeps hits whose score is at least that (a cosine similarity;
        ``-distance`` for ``"l2"`` and ``"inner_product"``: :mod:`pgmem.planning.distances`). ``mode``: ``auto``
        (exact for small filtered sets, else the HNSW index), ``exact`` or ``ann``. ``label``: the caller's name
        for this search (e.g. the prompt or the stage), recorded with its hits when the client's retrieval log
        is on (``PGMEM_RETRIEVAL_LOG=1``; ``pgmem.retrieval_hits``), in the same statement.

        ``boost_seen`` (with ``memory``): rank by ``score + boost_seen * ln(seen_count)``, a fact the memory was
        told more often (near-duplicates merged into it: :meth:`pgmem.MessageRepository.remember`) ranking
        higher; the ``4 * k`` nearest are re-ranked, and the hits carry ``seen_count`` and ``last_seen_at``
        (one more statement).

        ``as_of`` (with ``memory``): what the memory held at a point, a sequence number, a timezone-aware
        time or a mark's name (README, "Rewind and branch"); a fork is searched with what it inherits.
        """
        asked = merging.check_boost(boost_seen, memory, k)
        hits = await self.searcher.search(
            query,
            vector=vector,
            k=asked,
            memory=memory,
            cause_by=cause_by,
            role=role,
            sender=sender,
            since=since,
            until=until,
            max_seq=max_seq,
            metadata=metadata,
            threshold=threshold,
            mode=mode,
            exact_limit=exact_limit,
            embedder=embedder,
            distance=distance,
            label=label,
            as_of=as_of,
            connection=connection,
        )
        if boost_seen is None or memory is None:
            return hits
        return await merging.boost(self._client.executor, self.namespace, memory, hits, boost_seen, k, connection)

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
        """:meth:`search` for many texts (or vectors) at once: one embedding call and one statement (the
        retrieval log, when on, gets one row per query, all with ``label``). ``as_of``: as in :meth:`search`."""
        return await self.searcher.search_many(
            queries,
            vectors=vectors,
            k=k,
            memory=memory,
            cause_by=cause_by,
            role=role,
            sender=sender,
            since=since,
            until=until,
            max_seq=max_seq,
            metadata=metadata,
            threshold=threshold,
            exact_limit=exact_limit,
            embedder=embedder,
            distance=distance,
            label=label,
            as_of=as_of,
            connection=connection,
        )

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
        """The vector and keyword rankings of ``text`` fused into one, in one statement.

        Each half can be given on its own: ``keyword_query`` is what the keyword half searches (say, your
        rewrite of the question into keywords; default ``text``), ``vector`` the vector half's query vector
        (yours, of the memory's model; default ``text`` embedded). ``mode``: the vector half's strategy, as
        in :meth:`search`. Filters as in :meth:`search` (both halves take them).

        ``fusion="convex"`` (default): ``score = w_vector * closeness + w_text * coverage``, closeness being
        the vector distance scaled over the candidates (closest 1, farthest 0) and coverage the share of
        the query's words the message holds, weighted by rarity (idf). ``fusion="rrf"``: ``score =
        w_vector / (rrf_k + vector rank) + w_text / (rrf_k + text rank)``. Either times ``0.5 ** (age /
        half_life)`` with a recency half-life (a timedelta or seconds). Each ranking is cut at ``max(4 k,
        40)`` candidates; the result's ``distance`` is None for text-only hits. ``label``: as in
        :meth:`search` (the log records the fused scores). See :mod:`pgmem.planning.search`.

        Weights are numbers in [0, 1000]. A leg weighted 0 does not run and brings no message: with
        ``w_vector=0`` no query is embedded (no model is needed) and only messages the keyword leg finds
        come back; with ``w_text=0`` only the vector leg's. Both 0: :class:`pgmem.InvalidInput`.

        Example:
            >>> hits = await client.vectors.hybrid_search("payment timeout", memory="chat", w_vector=0)
            >>> all(h.distance is None for h in hits)  # keyword hits only
            True
        """
        return await self.searcher.hybrid_search(
            text,
            keyword_query=keyword_query,
            vector=vector,
            k=k,
            memory=memory,
            cause_by=cause_by,
            role=role,
            sender=sender,
            since=since,
            until=until,
            metadata=metadata,
            w_vector=w_vector,
            w_text=w_text,
            rrf_k=rrf_k,
            fusion=fusion,
            half_life=half_life,
            mode=mode,
            embedder=embedder,
            label=label,
            as_of=as_of,
            connection=connection,
        )

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
        """The ``k`` messages that best match ``text`` by keywords, scored by BM25 (README, "Keyword
        search"), best first (ties: newest first); ``distance`` is None. Needs no embedding model.

        Plain words find the messages holding any of them, ranked by how many and how rare; ``"a
        phrase"`` is required, ``-word`` excluded; CJK text matches by character bigrams. Filters as in
        :meth:`search`, without a memory the whole namespace. The scores' numbers (how many messages the
        scope holds, how many hold each word) are the scope's own: other memories and other tenants
        change neither the order nor the scores (:mod:`pgmem.planning.search.keyword`). ``label``: as in
        :meth:`search`.
        """
        return await self.searcher.keyword_search(
            text,
            k=k,
            memory=memory,
            cause_by=cause_by,
            role=role,
            sender=sender,
            since=since,
            until=until,
            max_seq=max_seq,
            metadata=metadata,
            label=label,
            as_of=as_of,
            connection=connection,
        )

    async def log_retrieval(
        self,
        kind: str,
        memory: str | None,
        query: str | None,
        k: int,
        hits: Sequence[tuple[str, float]],
        *,
        label: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> None:
        """Record a search answered outside Postgres (the FAISS cache) in ``pgmem.retrieval_log``: one
        statement. ``hits``: ``(message id, score)``, best first."""
        await self.retrieval_log.record(kind, memory, query, k, hits, label=label, connection=connection)

    # -- consistency --------------------------------------------------------------------------------

    async def head_rev(self, memory: str) -> int:
        """The memory's vector high-water mark (``memories.vec_rev``; the FAISS cache reads it directly)."""
        return int(await self._scalar("head_rev", {"memory": check_key(memory)}, None) or 0)
