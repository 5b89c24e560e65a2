# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""Embeddings and semantic search: models, the embedding outbox, vector and hybrid search."""

from __future__ import annotations

import logging
import math
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
from pgvector.psycopg import register_vector
from psycopg import Connection, errors, sql

from pgmem._sync.base import Repository
from pgmem._compat_sync import Background
from pgmem.checks import check_key
from pgmem.embeddings import Embedder, Vectors, check_vectors
from pgmem.errors import EmbeddingError, InvalidInput, translate
from pgmem.planning import statements as queries
from pgmem.planning.adapters import register_fast_adapters
from pgmem.planning.rows import decode
from pgmem.planning.search import (
    HALFVEC_ABOVE,
    EmbeddingModel,
    SearchFilters,
    SearchHit,
    as_query_vector,
    check_exact_limit,
    check_half_life,
    check_k,
    check_mode,
    check_threshold,
    statement,
)

if TYPE_CHECKING:
    from pgmem._sync.client import Client

__all__ = ["VectorRepository", "EmbedReport", "configure_connection"]

Q = queries.load("vectors")
log = logging.getLogger("pgmem.vectors")

#: Key of the advisory lock that serialises model registration (and its CREATE INDEX).
MODEL_LOCK_KEY = 0x70676D656D02

#: Connections whose session is set up for vector search (pgvector types, iterative index scans).
_READY: weakref.WeakSet[Any] = weakref.WeakSet()
_TUNED: weakref.WeakSet[Any] = weakref.WeakSet()
#: Whether ``hnsw.iterative_scan`` is on in a tuned connection's session (absent: unknown).
_ITERATIVE: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
#: Seconds a filtered search remembers how many candidates its filters keep (it picks the strategy).
COUNT_TTL = 5.0
#: The session's ``hnsw.ef_search`` on tuned connections; searches with a larger k raise it locally.
SESSION_EF_SEARCH = 40
#: Seconds between two checks of the search tables' planner statistics by one client.
STATISTICS_CHECK_INTERVAL = 10.0
#: Key of the advisory lock under which one process analyzes the search tables.
ANALYZE_LOCK_KEY = 0x70676D656D03


def configure_connection(conn: Connection[Any]) -> None:
    """Pool ``configure`` hook: pgvector's types (and pgmem's faster adapters, :mod:`pgmem.planning.adapters`), and
    iterative HNSW scans for filtered searches."""
    register_vector(conn)
    register_fast_adapters(conn)
    conn.execute(
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false), set_config('hnsw.ef_search', %s, false)",
        (str(SESSION_EF_SEARCH),),
    )
    _READY.add(conn)
    _TUNED.add(conn)
    _ITERATIVE[conn] = True


@dataclass(slots=True)
class EmbedReport:
    """What one :meth:`AsyncVectorRepository.embed_pending` run did."""

    embedded: int = 0
    failed: int = 0
    remaining: int = 0
    promoted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class VectorRepository(Repository):
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

    queries = Q

    def __init__(self, client: Client) -> None:
        super().__init__(client)
        self._models: dict[str, EmbeddingModel] = {}
        self._active: dict[str, EmbeddingModel] = {}
        self._embedders: dict[str, Embedder] = {}
        self._background = Background(self._drain)
        self.on_change: Callable[[str | None], None] | None = None
        self._counts: dict[tuple[SearchFilters, int], tuple[int, float]] = {}
        self._vector_rows: tuple[float, float] | None = None
        self._statistics_checked = -math.inf

    # -- models -------------------------------------------------------------------------------------

    def _embedder(self, embedder: Embedder | None) -> Embedder:
        chosen = embedder if embedder is not None else self._client.embedder
        if not isinstance(getattr(chosen, "model", None), str) or not isinstance(
            getattr(chosen, "dimension", None), int
        ):
            raise InvalidInput("an embedder needs a `model` name and an integer `dimension`")
        self._embedders.setdefault(chosen.model, chosen)
        return chosen

    def model(
        self, embedder: Embedder | None = None, *, connection: Connection[Any] | None = None
    ) -> EmbeddingModel:
        """Register ``embedder``'s model (name and dimension) and its HNSW index, once; return it.

        Raises :class:`pgmem.embeddings.EmbeddingError` when the name is registered with another dimension.
        """
        chosen = self._embedder(embedder)
        known = self._models.get(chosen.model)
        if known is None:
            dimension = chosen.dimension
            if not 1 <= dimension <= 16000:
                raise InvalidInput(f"{chosen.model}: dimension must be in [1, 16000], got {dimension}")
            kind = "halfvec" if dimension > HALFVEC_ABOVE else "vector"
            with translate():
                with self._client.transaction(connection) as conn:
                    conn.execute(Q["model_lock"], {"key": MODEL_LOCK_KEY})
                    conn.execute(
                        Q["register_model"], {"name": chosen.model, "dimension": dimension, "kind": kind}
                    )
                    cur = conn.execute(Q["get_model"], {"name": chosen.model})
                    row = cur.fetchone()
                    assert row is not None
                    known = EmbeddingModel(*row)
                    if known.dimension == dimension:
                        conn.execute(known.index_ddl())
            self._models[chosen.model] = known
        if known.dimension != chosen.dimension:
            raise EmbeddingError(
                f"model {chosen.model!r} is registered with {known.dimension} dimensions; this embedder has "
                f"{chosen.dimension}"
            )
        return known

    def enable(
        self, memory: str, embedder: Embedder | None = None, *, connection: Connection[Any] | None = None
    ) -> str:
        """Embed ``memory``'s messages with ``embedder`` (default: the client's); queue those it holds.

        The first model of a memory is ``active`` at once. Enabling another model on a memory starts a
        switch (``building``): its vectors are filled in the background while searches keep using the
        current model, and it becomes the active one when every entry has a vector. Returns the status.
        """
        check_key(memory)
        model = self.model(embedder, connection=connection)
        status = self._scalar("enable", {"memory": memory, "model": model.id}, connection)
        self._active.pop(memory, None)
        if connection is None:
            self.kick()
        return str(status)

    def switch_model(
        self, memory: str, embedder: Embedder, *, connection: Connection[Any] | None = None
    ) -> str:
        """Move ``memory`` to another model with no downtime (see :meth:`enable`); return its status."""
        return self.enable(memory, embedder, connection=connection)

    def forget_model(self, memory: str) -> None:
        """Drop the remembered active model of ``memory`` (the next search looks it up)."""
        self._active.pop(memory, None)

    def models(self, memory: str, *, connection: Connection[Any] | None = None) -> dict[str, str]:
        """``{model name: status}`` of a memory (``active`` first)."""
        check_key(memory)
        rows = self._rows("memory_models", {"memory": memory}, connection)
        return {row[2]: row[0] for row in rows}

    def active_model(
        self, memory: str, *, connection: Connection[Any] | None = None, refresh: bool = False
    ) -> EmbeddingModel | None:
        """The model ``memory`` is searched with (None: the memory has no model)."""
        check_key(memory)
        if not refresh and memory in self._active:
            return self._active[memory]
        rows = self._rows("memory_models", {"memory": memory}, connection)
        active = [EmbeddingModel(*row[1:]) for row in rows if row[0] == "active"]
        if not active:
            self._active.pop(memory, None)
            return None
        self._active[memory] = active[0]
        self._models.setdefault(active[0].name, active[0])
        return active[0]

    # -- the outbox -------------------------------------------------------------------------------------

    def pending(
        self, memory: str | None = None, *, connection: Connection[Any] | None = None
    ) -> dict[str, int]:
        """Messages waiting for an embedding, per model name (of ``memory``, or of the namespace)."""
        if memory is not None:
            check_key(memory)
        rows = self._rows("pending", {"memory": memory}, connection)
        return {str(name): int(count) for name, count in rows}

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
        """Embed queued messages of this namespace with the models this client has embedders for.

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
            self._embedder(embedder)
        elif not self._embedders:
            self._embedder(None)
        report = EmbedReport()
        rows = self._rows("pending_models", {}, None)
        switching = any(row[4] for row in rows)
        for row in rows:
            model = EmbeddingModel(*row[:4])
            chosen = self._embedders.get(model.name)
            if chosen is None:
                continue
            if retry_now:
                self._rows("outbox_retry_now", {"model": model.id}, None)
            while limit is None or report.embedded + report.failed < limit:
                n = batch_size if limit is None else min(batch_size, limit - report.embedded - report.failed)
                done, error = self._embed_batch(model, chosen, n)
                if error is not None:
                    report.failed += done
                    report.errors.append(error)
                    break
                report.embedded += done
                if progress is not None and done:
                    progress(done)
                if done < n:
                    break  # the queue is drained (for this model, as far as this transaction could see)
        if rows and report.embedded + report.failed == 0:
            self._rows("purge_orphans", {}, None)  # queued rows none of which could be claimed
        if switching or not rows:
            report.promoted = [r[0] for r in self._rows("promote", {}, None)]
            for memory in report.promoted:
                self._active.pop(memory, None)
        if count_remaining:
            report.remaining = sum((self.pending()).values())
        return report

    def _embed_batch(self, model: EmbeddingModel, embedder: Embedder, n: int) -> tuple[int, str | None]:
        """Claim, embed and store one batch. Returns (messages, error or None)."""
        failure: str | None = None
        with translate():
            with self._client.transaction() as conn:
                cur = conn.execute(Q["claim_outbox"], {"ns": self.namespace, "model": model.id, "n": n})
                claimed = cur.fetchall()
                if not claimed:
                    return 0, None
                ids = [r[0] for r in claimed]
                try:
                    vectors = check_vectors(
                        embedder.embed([r[1] for r in claimed]), len(claimed), model.dimension, model.name
                    )
                except Exception as exc:  # noqa: BLE001 - whatever the provider raises leaves the batch queued
                    failure = f"{type(exc).__name__}: {exc}"
                else:
                    # The database's own errors are raised (the batch stays queued as it was, no backoff).
                    self._ready(conn)
                    query = Q["store_vectors"] if model.kind == "vector" else Q["store_halfvecs"]
                    conn.execute(
                        query,
                        {"ns": self.namespace, "model": model.id, "ids": ids, "vectors": list(vectors)},
                    )
        if failure is not None:
            log.warning("embedding %d messages with %s failed: %s", len(ids), model.name, failure)
            self._rows("outbox_failed", {"model": model.id, "ids": ids, "error": failure}, None)
            return len(ids), failure
        if self.on_change is not None:
            self.on_change(None)
        return len(ids), None

    def written(self, connection: Connection[Any] | None) -> None:
        """Messages were added to a memory with models: embed them after commit, in the background.

        Within the caller's transaction nothing is committed yet; the outbox keeps them for the next run.
        """
        if connection is None:
            self.kick()

    def changed(self, memory: str, connection: Connection[Any] | None) -> None:
        """Entries left ``memory``: tell the process's cache (after commit; in the caller's transaction the
        commit's notification does it)."""
        if connection is None and self.on_change is not None:
            self.on_change(memory)

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
        try:
            self.embed_pending(count_remaining=False)
        except Exception as exc:  # noqa: BLE001 - a background job logs; the outbox keeps the work
            log.warning("background embedding failed: %s: %s", type(exc).__name__, exc)

    def wait(self) -> None:
        """Wait for the background embedding of this client's writes (no round trip when idle)."""
        self._background.wait()

    def flush(self, embedder: Embedder | None = None) -> EmbedReport:
        """Wait for background embedding, then embed what is still queued (``persist()`` calls this)."""
        self._background.wait()
        return self.embed_pending(embedder)

    def close(self) -> None:
        self._background.close()

    # -- search ---------------------------------------------------------------------------------------

    def _ready(self, conn: Connection[Any]) -> None:
        if conn not in _READY:
            register_vector(conn)
            _READY.add(conn)

    def _model_for(self, filters: SearchFilters, embedder: Embedder | None, refresh: bool) -> EmbeddingModel:
        if filters.memory is not None:
            model = self.active_model(filters.memory, refresh=refresh)
            if model is None:
                raise InvalidInput(
                    f"memory {filters.memory!r} has no embedding model; call client.vectors.enable() first"
                )
            if embedder is not None and embedder.model != model.name:
                raise EmbeddingError(
                    f"memory {filters.memory!r} is searched with {model.name!r}, not {embedder.model!r}"
                )
            return model
        return self.model(embedder)

    def _query_vectors(self, model: EmbeddingModel, texts: Sequence[str], embedder: Embedder | None) -> Vectors:
        chosen = embedder or self._embedders.get(model.name)
        if chosen is None and self._client.embedder.model == model.name:
            chosen = self._embedder(None)
        if chosen is None:
            raise EmbeddingError(f"no embedder for model {model.name!r} in this client; pass embedder=")
        for text in texts:
            if not isinstance(text, str):
                raise InvalidInput(f"a search text must be a string, not {type(text).__name__}")
        return check_vectors(chosen.embed(list(texts)), len(texts), model.dimension, model.name)

    def search(
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
        threshold: float | None = None,
        mode: str = "auto",
        exact_limit: int | None = None,
        embedder: Embedder | None = None,
        label: str | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[SearchHit]:
        """The ``k`` messages closest to ``query`` (text, embedded with the memory's model) or ``vector``.

        Filters restrict the search to one memory, an action (``cause_by``), a role, a sender and a time
        range (``max_seq``: only the memory's entries up to that sequence number); the search stays
        complete under them (see :mod:`pgmem.planning.search`). ``threshold`` keeps hits
        whose score (cosine similarity) is at least that. ``mode``: ``auto`` (exact for small filtered
        sets, else the HNSW index), ``exact`` or ``ann``. ``label``: the caller's name for this search (e.g.
        the prompt or the stage), recorded with its hits when the client's retrieval log is on
        (``PGMEM_RETRIEVAL_LOG=1``; ``pgmem.retrieval_hits``), in the same statement.
        """
        filters = SearchFilters(memory, cause_by, role, sender, since, until, max_seq)
        if (query is None) == (vector is None):
            raise InvalidInput("search needs exactly one of a query text or a vector")
        results = self._search(
            [query] if query is not None else None,
            None if vector is None else [vector],
            filters,
            check_k(k),
            check_threshold(threshold),
            check_mode(mode),
            exact_limit,
            embedder,
            connection,
            label,
        )
        return results[0]

    def search_many(
        self,
        queries: Sequence[str] | None = None,
        *,
        vectors: Any = None,
        k: int = 10,
        memory: str | None = None,
        cause_by: str | None = None,
        max_seq: int | None = None,
        threshold: float | None = None,
        exact_limit: int | None = None,
        embedder: Embedder | None = None,
        label: str | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[list[SearchHit]]:
        """:meth:`search` for many texts (or vectors) at once: one embedding call and one statement (the
        retrieval log, when on, gets one row per query, all with ``label``)."""
        filters = SearchFilters(memory, cause_by, max_seq=max_seq)
        if (queries is None) == (vectors is None):
            raise InvalidInput("search_many needs exactly one of query texts or vectors")
        check_k(k)
        threshold = check_threshold(threshold)
        check_exact_limit(exact_limit)
        texts = None if queries is None else list(queries)
        count = len(texts) if texts is not None else len(vectors)
        if count == 0:
            return []
        for attempt in (1, 2):
            model = self._model_for(filters, embedder, refresh=attempt == 2)
            if texts is not None:
                qs = self._query_vectors(model, texts, embedder)
            else:
                qs = np.stack([as_query_vector(v, model.dimension) for v in vectors])
            params = {
                "ns": self.namespace,
                "qs": list(qs),
                "k": k,
                "max_distance": 2.0 if threshold is None else 1.0 - threshold,
                **filters.params(),
            }
            logged = self._client.retrieval_log
            if logged:
                params["log_label"] = log_text(label)
                params["log_queries"] = [log_text(t) for t in texts] if texts is not None else [None] * count
            strategy = self._strategy(model, filters, "auto", exact_limit, connection)
            query = statement("batch", model, filters, strategy, k, logged=logged)
            (rows,) = self._run_searches(query, [params], k, connection, _iterative(filters, strategy))
            if self._switched(rows, filters, model):
                continue
            out: list[list[SearchHit]] = [[] for _ in range(count)]
            for row in rows:
                out[int(row[0]) - 1].append(_hit(row[1:]))
            return out
        raise EmbeddingError(f"memory {filters.memory!r} keeps switching embedding models; try again")

    def _strategy(
        self,
        model: EmbeddingModel,
        filters: SearchFilters,
        mode: str,
        exact_limit: int | None,
        connection: Connection[Any] | None,
    ) -> str:
        """``exact`` or ``ann`` for this search (see :mod:`pgmem.planning.search`).

        Unfiltered searches use the index. For filtered ones the candidates are counted (no further than
        ``exact_limit + 1``) and the count is remembered for :data:`COUNT_TTL` seconds: a stale count can
        only pick the slower strategy for a while, never a wrong answer (both are complete).
        """
        if mode != "auto":
            return mode
        if not filters.filtered:
            return "ann"
        if exact_limit is None:
            exact_limit = self._default_exact_limit(connection)
        key = (filters, exact_limit)
        now = time.monotonic()
        known = self._counts.get(key)
        if known is None or now - known[1] > COUNT_TTL:
            params = {"ns": self.namespace, "exact_limit": exact_limit, **filters.params()}
            with translate():
                with self._client.connection(connection) as conn:
                    cur = conn.execute(statement("count", model, filters), params)
                    row = cur.fetchone()
            known = (int(row[0]) if row else 0, now)
            if len(self._counts) > 10_000:
                self._counts.clear()
            self._counts[key] = known
        return "exact" if known[0] <= exact_limit else "ann"

    def _fresh_statistics(self, connection: Connection[Any] | None) -> None:
        """Analyze the search tables when their planner statistics are far behind them.

        Autovacuum analyzes a table once it has changed by 10% and the launcher visits the database (every
        minute by default). Until then, statistics taken while a table held a few rows call every column
        unique, and a filtered HNSW search probed a whole namespace per candidate instead of one message
        (seconds per search). Each client checks at most every :data:`STATISTICS_CHECK_INTERVAL` seconds
        (one read of the statistics views), on its own connections only, never in a caller's transaction;
        one process analyzes at a time and none waits on another's lock for long (autovacuum may hold it).
        """
        now = time.monotonic()
        if connection is not None or now - self._statistics_checked < STATISTICS_CHECK_INTERVAL:
            return
        if getattr(self._client, "_pool", None) is None:
            return  # a client on the caller's single connection: not ours to analyze from
        self._statistics_checked = now
        with translate():
            with self._client.connection() as conn:
                cur = conn.execute(Q["stale_statistics"])
                stale = [row[0] for row in cur.fetchall()]
                if not stale:
                    return
                try:
                    with self._client.transaction(conn) as tx:
                        cur = tx.execute(Q["analyze_lock"], {"key": ANALYZE_LOCK_KEY})
                        row = cur.fetchone()
                        if row is not None and row[0]:
                            for table in stale:
                                tx.execute(sql.SQL("ANALYZE {}").format(sql.Identifier("pgmem", table)))
                            log.info("analyzed %s: planner statistics were far behind", ", ".join(stale))
                except errors.LockNotAvailable:
                    log.debug("statistics of %s not refreshed: a vacuum or analyze holds the table", stale)

    def _default_exact_limit(self, connection: Connection[Any] | None) -> int:
        """``8 * sqrt(N)`` candidates, N the number of stored vectors (planner statistics, re-read every
        minute), between 500 and 20,000.

        An exact search costs about 4.5 µs per candidate (a primary-key fetch and a distance); an
        iterative index scan under a filter that keeps a fraction s of the rows costs about 0.3 ms / s
        (measured on 34k MiniLM vectors, benchmarks/vectors.py). They break even at s = 8.2 / sqrt(N).
        """
        now = time.monotonic()
        if self._vector_rows is None or now - self._vector_rows[1] > 60:
            with translate():
                with self._client.connection(connection) as conn:
                    cur = conn.execute(Q["vector_rows"])
                    row = cur.fetchone()
            self._vector_rows = (max(0.0, float(row[0]) if row else 0.0), now)
        return int(min(20_000, max(500, 8 * math.sqrt(self._vector_rows[0]))))

    def _switched(self, rows: list[tuple[Any, ...]], filters: SearchFilters, model: EmbeddingModel) -> bool:
        """Whether the memory's active model changed under this search (its rows carry ``ok`` last)."""
        if filters.memory is None:
            return False
        if rows:
            return rows[0][-1] is None
        current = self.active_model(filters.memory, refresh=True)
        return current is not None and current.id != model.id

    def _search(
        self,
        texts: list[str] | None,
        vectors: list[Any] | None,
        filters: SearchFilters,
        k: int,
        threshold: float | None,
        mode: Any,
        exact_limit: int | None,
        embedder: Embedder | None,
        connection: Connection[Any] | None,
        label: str | None = None,
    ) -> list[list[SearchHit]]:
        check_exact_limit(exact_limit)
        self._fresh_statistics(connection)
        qs: Any
        for attempt in (1, 2):
            model = self._model_for(filters, embedder, refresh=attempt == 2)
            if texts is not None:
                if not texts:
                    return []
                qs = self._query_vectors(model, texts, embedder)
            else:
                assert vectors is not None
                qs = [as_query_vector(v, model.dimension) for v in vectors]
            strategy = self._strategy(model, filters, mode, exact_limit, connection)
            logged = self._client.retrieval_log
            query = statement("vector", model, filters, strategy, k, threshold is not None, logged=logged)
            base = {"ns": self.namespace, **filters.params()}
            if threshold is not None:
                base["max_distance"] = 1.0 - threshold
            params = [{**base, "q": q} for q in qs]
            if logged:
                for i, p in enumerate(params):
                    p["log_label"] = log_text(label)
                    p["log_query"] = log_text(texts[i]) if texts is not None else None
            rows = self._run_searches(query, params, k, connection, _iterative(filters, strategy))
            if any([self._switched(found, filters, model) for found in rows]):
                continue  # the memory switched models under us: look it up again
            return [_hits(found) for found in rows]
        raise EmbeddingError(f"memory {filters.memory!r} keeps switching embedding models; try again")

    def _run_searches(
        self,
        statement: Any,
        params: list[dict[str, Any]],
        k: int,
        connection: Connection[Any] | None,
        iterative: bool | None = True,
    ) -> list[list[tuple[Any, ...]]]:
        """Run a search statement once per parameter set on one connection.

        ``iterative``: whether the statement wants ``hnsw.iterative_scan`` (an index scan under a filter),
        not (an unfiltered index scan, where it only costs: ~60 µs of a 0.9 ms search at 34k vectors), or
        None (no index scan). Pool connections keep the setting in their session and switch it only when
        a search wants the other one, in the same round trip as the search (a pipeline).
        """
        out: list[list[tuple[Any, ...]]] = []
        with translate():
            with self._client.connection(connection) as conn:
                self._ready(conn)
                if conn in _TUNED and k <= SESSION_EF_SEARCH:
                    if iterative is None or _ITERATIVE.get(conn) is iterative:
                        for p in params:
                            cur = conn.execute(statement, p, binary=True)
                            out.append(cur.fetchall())
                        return out
                    _ITERATIVE.pop(conn, None)  # unknown until the switch has gone through
                    with conn.pipeline():
                        conn.execute(
                            "SELECT set_config('hnsw.iterative_scan', %s, false)",
                            ("relaxed_order" if iterative else "off",),
                        )
                        curs = [conn.execute(statement, p, binary=True) for p in params]
                    _ITERATIVE[conn] = iterative
                    return [cur.fetchall() for cur in curs]
                with self._client.transaction(conn) as tx:
                    tx.execute(
                        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                        "set_config('hnsw.ef_search', %s, true)",
                        (str(max(SESSION_EF_SEARCH, min(k, 1000))),),
                    )
                    for p in params:
                        cur = tx.execute(statement, p, binary=True)
                        out.append(cur.fetchall())
        return out

    def hybrid_search(
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
        w_vector: float = 1.0,
        w_text: float = 1.0,
        rrf_k: int = 60,
        half_life: timedelta | float | None = None,
        embedder: Embedder | None = None,
        label: str | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[SearchHit]:
        """Full-text and vector rankings fused by reciprocal rank fusion, in one statement.

        ``score = w_vector / (rrf_k + vector rank) + w_text / (rrf_k + text rank)``, times
        ``0.5 ** (age / half_life)`` with a recency half-life (a timedelta or seconds). Each ranking is cut
        at ``max(4 k, 40)`` candidates; the result's ``distance`` is None for text-only hits. ``label``: as
        in :meth:`search` (the log records the fused scores).
        """
        filters = SearchFilters(memory, cause_by, role, sender, since, until)
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("hybrid search needs a non-empty text")
        check_k(k)
        for name, weight in (("w_vector", w_vector), ("w_text", w_text)):
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1000:
                raise InvalidInput(f"{name} must be a number in [0, 1000], got {weight!r}")
        if isinstance(rrf_k, bool) or not isinstance(rrf_k, int) or not 0 <= rrf_k <= 10_000:
            raise InvalidInput(f"rrf_k must be an integer in [0, 10000], got {rrf_k!r}")
        seconds = check_half_life(half_life)
        depth = max(4 * k, 40)
        self._fresh_statistics(connection)
        for attempt in (1, 2):
            model = self._model_for(filters, embedder, refresh=attempt == 2)
            (q,) = self._query_vectors(model, [text], embedder)
            params = {
                "ns": self.namespace,
                "q": q,
                "k": depth,
                "limit": k,
                "max_distance": 2.0,
                "text": text,
                "w_vector": float(w_vector),
                "w_text": float(w_text),
                "rrf_k": rrf_k,
                "half_life": seconds,
                **filters.params(),
            }
            logged = self._client.retrieval_log
            if logged:
                params["log_label"] = log_text(label)
                params["log_query"] = log_text(text)
            strategy = self._strategy(model, filters, "auto", None, connection)
            (rows,) = self._run_searches(
                statement("hybrid", model, filters, strategy, logged=logged),
                [params],
                depth,
                connection,
                _iterative(filters, strategy),
            )
            if self._switched(rows, filters, model):
                continue
            return [
                SearchHit(decode(row[:14]), float(row[15]), None if row[14] is None else float(row[14])) for row in rows
            ]
        raise EmbeddingError(f"memory {filters.memory!r} keeps switching embedding models; try again")

    def log_retrieval(
        self,
        kind: str,
        memory: str | None,
        query: str | None,
        k: int,
        hits: Sequence[tuple[str, float]],
        *,
        label: str | None = None,
        connection: Connection[Any] | None = None,
    ) -> None:
        """Record a search answered outside Postgres (the FAISS cache) in ``pgmem.retrieval_log``: one
        statement. ``hits``: ``(message id, score)``, best first."""
        params = {
            "kind": kind,
            "memory": memory,
            "label": log_text(label),
            "query": log_text(query),
            "k": k,
            "ids": [h[0] for h in hits],
            "scores": [float(h[1]) for h in hits],
        }
        self._rows("log_retrieval", params, connection)

    # -- consistency --------------------------------------------------------------------------------

    def head_rev(self, memory: str) -> int:
        """The memory's vector high-water mark (``memories.vec_rev``; pgmem.cache reads it directly)."""
        return int(self._scalar("head_rev", {"memory": memory}, None) or 0)


def unpack_vectors(blobs: Sequence[bytes], dimension: int) -> Vectors:
    """pgvector's binary send format (int16 dimension, int16 unused, big-endian float32s) to a matrix."""
    if not blobs:
        return np.zeros((0, dimension), np.float32)
    raw = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(blobs), dimension + 1)
    return np.ascontiguousarray(raw[:, 1:], dtype=np.float32)


def _iterative(filters: SearchFilters, strategy: str) -> bool | None:
    """What a search wants of ``hnsw.iterative_scan`` (see ``_run_searches``)."""
    return None if strategy == "exact" else filters.filtered


def _hits(rows: list[tuple[Any, ...]]) -> list[SearchHit]:
    """Hits of rows ordered by distance, ties ordered by message id (the statement leaves them)."""
    for i in range(1, len(rows)):
        if rows[i][14] == rows[i - 1][14]:
            rows = sorted(rows, key=lambda r: (r[14], r[1]))
            break
    return [_hit(row) for row in rows]


def log_text(value: str | None) -> str | None:
    """A label or query text as the retrieval log stores it: NUL bytes (which Postgres ``text`` rejects)
    become U+FFFD and lone surrogates ``?``; nothing is cut."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"a search label must be a string, not {type(value).__name__}")
    return value.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def _hit(row: tuple[Any, ...]) -> SearchHit:
    distance = float(row[14])
    return SearchHit(decode(row[:14]), 1.0 - distance, distance)
