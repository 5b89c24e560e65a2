"""The embedding-model registry: models and their HNSW indexes, each memory's active model, the
embedders a client knows, and query embedding. The outbox worker and the searcher both receive it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection, sql
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from pgmem._acompat import asleep
from pgmem._async.base import AsyncRepository
from pgmem._async.executor import AsyncBlock
from pgmem.checks import check_key
from pgmem.embeddings import HALF_MAX, Embedder, Vectors, check_vectors, given_vectors
from pgmem.errors import DimensionMismatch, EmbeddingError, InvalidInput, PgmemError, translate
from pgmem.planning import statements
from pgmem.planning.distances import DEFAULT_DISTANCE, check_distance
from pgmem.planning.rows import EmbeddingModelRow, MemoryModelRow
from pgmem.planning.search import EmbeddingModel, SearchFilters, model_of, storage_kind

if TYPE_CHECKING:
    from pgmem._async.client import AsyncClient

__all__ = ["MODEL_LOCK_KEY", "AsyncModelRegistry"]

Q = statements.load("vectors")
log = logging.getLogger("pgmem.vectors")

#: Key of the session advisory lock a process holds while it builds a model's HNSW index (one build at a
#: time; a build found INVALID while nobody holds it failed, and is dropped and built again).
MODEL_LOCK_KEY = 0x70676D656D02
#: Seconds between two tries of that lock by a process waiting for another's build.
BUILD_POLL = 0.1
#: Indexes a client without an owner DSN found missing, per database (warned about once per process).
_UNBUILT: set[tuple[str | None, str]] = set()


class AsyncModelRegistry(AsyncRepository):
    """Embedding models of a client: registration (name, dimension, distance, HNSW index; once per process
    and model), the model each memory is searched with (remembered until a switch is seen), and the
    embedders this client has for each model. A model is its definition, (name, dimension, distance): the
    same name with another dimension or distance is another model (the embedder serves them all)."""

    queries = Q

    def __init__(self, client: AsyncClient) -> None:
        super().__init__(client)
        self._models: dict[tuple[str, int, str], EmbeddingModel] = {}
        self._indexed: set[str] = set()  # names of indexes this client saw valid
        #: Whether this client registered a model inside a caller's transaction, its index unbuilt then.
        self.deferred = False
        self._active: dict[str, EmbeddingModel] = {}
        self._embedders: dict[tuple[str, int], Embedder] = {}

    # -- embedders ------------------------------------------------------------------------------------

    def embedder(self, embedder: Embedder | None) -> Embedder:
        """``embedder`` (default: the client's), checked, and remembered for its model."""
        chosen = embedder if embedder is not None else self._client.embedder
        if not isinstance(getattr(chosen, "model", None), str) or not isinstance(
            getattr(chosen, "dimension", None), int
        ):
            raise InvalidInput("an embedder needs a `model` name and an integer `dimension`")
        self._embedders.setdefault((chosen.model, chosen.dimension), chosen)
        return chosen

    def embedder_for(self, model: str, dimension: int | None = None) -> Embedder | None:
        """The embedder this client has for the model (the client's own when it is that model); with no
        ``dimension``, the first it has of that name."""
        own = self._client.embedder
        if dimension is not None:
            chosen = self._embedders.get((model, dimension))
        else:
            chosen = next((e for (name, _), e in self._embedders.items() if name == model), None)
        if chosen is None and own.model == model and dimension in (None, own.dimension):
            chosen = self.embedder(None)
        return chosen

    def embedders(self) -> dict[tuple[str, int], Embedder]:
        """The embedders this client knows, by (model name, dimension) (registering the client's own when
        none is)."""
        if not self._embedders:
            self.embedder(None)
        return dict(self._embedders)

    async def query_vectors(self, model: EmbeddingModel, texts: Sequence[str], embedder: Embedder | None) -> Vectors:
        """Embed search texts with ``model`` (``embedder``, else the one this client has for it)."""
        for text in texts:
            if not isinstance(text, str):
                raise InvalidInput(f"a search text must be a string, not {type(text).__name__}")
        return await self.embed(model, texts, embedder)

    async def embed(self, model: EmbeddingModel, texts: Sequence[str], embedder: Embedder | None = None) -> Vectors:
        """Vectors of ``texts`` (strings) for ``model``, one call of ``embedder`` (else the one this client
        has for the model), checked (:func:`pgmem.embeddings.check_vectors`: one per text, of the model's
        dimension, finite).

        Raises:
            EmbeddingError: no embedder for the model, the embedder failed, or it returned vectors of
                another number or dimension.
        """
        chosen = embedder if embedder is not None else self.embedder_for(model.name, model.dimension)
        if chosen is None:
            raise EmbeddingError(f"no embedder for model {model.name!r} in this client; pass embedder=")
        return check_vectors(await chosen.aembed(list(texts)), len(texts), model.dimension, model.name)

    # -- models -------------------------------------------------------------------------------------

    async def register(
        self,
        embedder: Embedder | None = None,
        *,
        distance: str = DEFAULT_DISTANCE,
        connection: AsyncConnection[Any] | None = None,
    ) -> EmbeddingModel:
        """Register ``embedder``'s model (name and dimension) with ``distance`` (``cosine``, ``l2`` or
        ``inner_product``) and build its HNSW index, once; return it.

        The index is built with ``CREATE INDEX CONCURRENTLY`` (:meth:`build_index`): other processes keep
        writing embeddings meanwhile. Inside the caller's transaction it cannot be built; the embedding
        worker (or the next registration outside one) builds it, and a switch to the model waits for it.

        The same name with another dimension or distance is another model (its own row, vectors and index):
        namespaces share a registry entry only when their definitions are identical.
        """
        distance = check_distance(distance)
        chosen = self.embedder(embedder)
        definition = (chosen.model, chosen.dimension, distance)
        known = self._models.get(definition)
        if known is None:
            dimension = chosen.dimension
            if not 1 <= dimension <= 16000:
                raise InvalidInput(f"{chosen.model}: dimension must be in [1, 16000], got {dimension}")
            async with self._client.executor.transaction(connection) as block:
                await block.command(
                    Q["register_model"],
                    {
                        "name": chosen.model,
                        "dimension": dimension,
                        "kind": storage_kind(dimension),
                        "distance": distance,
                    },
                )
                row = await block.one(
                    Q["get_model"], {"name": chosen.model, "dimension": dimension, "distance": distance}
                )
                assert row is not None
                known = model_of(EmbeddingModelRow._make(row))
            self._models[definition] = known
        if known.index_name not in self._indexed and not await self.build_index(known, connection=connection):
            self.deferred = True
        return known

    async def build_index(
        self,
        model: EmbeddingModel,
        table: str = "embeddings",
        name: str | None = None,
        *,
        connection: AsyncConnection[Any] | None = None,
        wait: bool = True,
    ) -> bool:
        """Make sure ``model``'s HNSW index on ``pgmem.<table>`` (``embeddings``, the messages' vectors, or
        ``item_vectors``, the item store's) exists and is valid; True when it is. ``name``: the index's
        (default :meth:`EmbeddingModel.table_index_name`).

        ``CREATE INDEX CONCURRENTLY`` runs outside any transaction, so it never blocks writes to the table
        (a plain CREATE INDEX holds a SHARE lock, which stops every tenant's embedding inserts until it
        commits). One process builds at a time, holding the session advisory lock
        :data:`MODEL_LOCK_KEY`; others poll it with ``pg_try_advisory_lock`` (``wait``) or return False: a
        blocking ``pg_advisory_lock`` would keep a snapshot open, which the concurrent build waits for
        (a deadlock). An index INVALID while nobody holds the lock is what a failed or interrupted build
        leaves: it is dropped (concurrently) and built again. Returns False, building nothing, on a
        connection inside a transaction (the caller's), and when the index is missing and the client knows
        no DSN of the tables' owner (a login of the application role): it warns once, searches of the model
        stay exact, and ``pgmem migrate`` builds the index.
        """
        name = name or model.table_index_name(table)
        if name in self._indexed:
            return True
        usable, valid = await self._client.executor.run(
            lambda block: self._state(block, name), connection, reads=True, scoped=False
        )
        if not usable:
            return False
        if not valid:
            # Only the tables' owner may create an index: the client's owner DSN (its own when it logs in as
            # the owner or a superuser and acts as pgmem_app, the embedded server's superuser), on a
            # connection of its own. A client of the application role alone leaves the index to the owner.
            owner = self._client.sessions.owner_conninfo
            if owner is None:
                if (self._client.conninfo, name) not in _UNBUILT:
                    _UNBUILT.add((self._client.conninfo, name))
                    log.warning(
                        "index pgmem.%s is missing and this client's role may not create it: searches of model "
                        "%r stay exact (correct, slower) until the tables' owner runs `pgmem migrate`",
                        name,
                        model.name,
                    )
                return False
            with translate():  # connecting: the block below translates its statements
                conn = await AsyncConnection.connect(owner, autocommit=True)
            async with conn:
                block = AsyncBlock(conn)  # the owner's own connection: DDL, no namespace
                while not await self._index_valid(block, name):
                    if await block.scalar(Q["build_lock"], {"key": MODEL_LOCK_KEY}):
                        try:
                            await self._build(block, model, table, name)
                        finally:
                            if not conn.broken:
                                await block.command(Q["build_unlock"], {"key": MODEL_LOCK_KEY})
                        break
                    if not wait:
                        return False
                    await asleep(BUILD_POLL)
        self._indexed.add(name)
        return True

    async def _state(self, block: AsyncBlock, name: str) -> tuple[bool, bool | None]:
        """Whether the block's connection may build an index (autocommit, outside a transaction: ``CREATE
        INDEX CONCURRENTLY`` runs in none), and the index's state (:meth:`_index_valid`)."""
        conn = block.connection
        if not conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE:
            return False, None
        return True, await self._index_valid(block, name)

    async def _index_valid(self, block: AsyncBlock, name: str) -> bool | None:
        """Whether the index ``pgmem.<name>`` is valid (None: it does not exist)."""
        row = await block.one(Q["index_valid"], {"index": f"pgmem.{name}"})
        return None if row is None else bool(row[0])

    async def _build(self, block: AsyncBlock, model: EmbeddingModel, table: str, name: str) -> None:
        """Build the index, holding the build lock (see :meth:`build_index`)."""
        state = await self._index_valid(block, name)
        if state:
            return  # another process built it between our check and our lock
        if state is False:
            log.warning("index pgmem.%s was left INVALID by a failed build: dropping it and building it again", name)
            await block.command(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier("pgmem", name)))
        await block.command(model.index_ddl(table, name))

    async def memory_models(
        self, memory: str, connection: AsyncConnection[Any] | None = None
    ) -> list[tuple[str, EmbeddingModel]]:
        """``(status, model)`` of each model of a memory, the active one first."""
        check_key(memory)
        rows = await self._rows("memory_models", {"memory": memory}, connection)
        return [(r.status, model_of(r)) for r in map(MemoryModelRow._make, rows)]

    async def active(
        self, memory: str, *, connection: AsyncConnection[Any] | None = None, refresh: bool = False
    ) -> EmbeddingModel | None:
        """The model ``memory`` is searched with (None: it has none); remembered until :meth:`forget`."""
        if not refresh:
            known = self._active.get(memory)
            if known is not None:
                return known
        found = [model for status, model in await self.memory_models(memory, connection) if status == "active"]
        if not found:
            self._active.pop(memory, None)
            return None
        self._active[memory] = found[0]
        self._models.setdefault((found[0].name, found[0].dimension, found[0].distance), found[0])
        return found[0]

    def forget(self, memory: str) -> None:
        """Drop the remembered active model of ``memory`` (the next search looks it up)."""
        self._active.pop(memory, None)

    # -- the caller's own vectors ---------------------------------------------------------------------

    async def given(
        self,
        memory: str,
        vectors: Any,
        count: int,
        model: str | None,
        connection: AsyncConnection[Any] | None,
        *,
        single: bool = False,
    ) -> dict[str, Any]:
        """The parameters of a write that stores the caller's own vectors beside its messages (the SQL
        fragment ``store_given``): ``model`` and ``dimension``, then ``vector`` (``single``: one message's)
        or ``vectors`` (``count``, one per message, in order).

        The vectors are checked (:func:`pgmem.embeddings.given_vectors`) and must have the dimension of the
        memory's model named ``model`` (default: its active one). The active model is the remembered one
        when it fits (no round trip; the statement checks that the memory still has it, see
        :meth:`lost_model`), else the memory's models are read.

        Raises:
            InvalidInput: ``model`` is not a name, or names the model of no vectors.
            EmbeddingError: not ``count`` finite vectors of one dimension; the memory has no model, or none
                named ``model``; a value too large for a model stored as ``halfvec``.
                :class:`DimensionMismatch` (also an InvalidInput): no such model of the vectors' dimension.
                Nothing is written.
        """
        if model is not None and (not isinstance(model, str) or not model):
            raise InvalidInput(f"model must be the name of one of the memory's models, got {model!r}")
        if vectors is None:
            raise InvalidInput(f"model={model!r} names the model of your vectors, but none were given")
        array = given_vectors(vectors, count, single=single)
        chosen = await self.given_model(memory, model, int(array.shape[1]), connection)
        if chosen.kind == "halfvec" and float(abs(array).max()) > HALF_MAX:
            raise EmbeddingError(
                f"{chosen.name}: a value beyond {HALF_MAX:g}, which its halfvec storage (above 2,000 dimensions) "
                "cannot hold; nothing was written"
            )
        if connection is not None or not self._client.owns_transactions:
            # pgvector's types, to send the vectors (a pool's connections have them from the start)
            async with self._client._connection(connection) as conn:
                await self._client.sessions.ready(conn)
        params: dict[str, Any] = {"model": chosen.name, "dimension": chosen.dimension}
        if single:
            params["vector"] = array[0]
        else:
            params["vectors"] = list(array)
        return params

    async def given_model(
        self, memory: str, name: str | None, dimension: int, connection: AsyncConnection[Any] | None = None
    ) -> EmbeddingModel:
        """The model of ``memory`` that vectors of ``dimension`` are stored for: the one named ``name``
        (default: the active one). Raises :class:`EmbeddingError` when there is none."""
        known = self._active.get(memory)
        if known is not None and name in (None, known.name) and known.dimension == dimension:
            return known
        models = await self.memory_models(memory, connection)
        if models and models[0][0] == "active":
            self._active[memory] = models[0][1]
        if not models:
            raise EmbeddingError(
                f"memory {memory!r} has no embedding model to store vectors for: enable one first, e.g. "
                "client.vectors.enable(memory, Precomputed(name, dimension)); nothing was written"
            )
        if name is None:
            chosen = models[0][1]
            if chosen.dimension != dimension:
                raise DimensionMismatch(
                    f"memory {memory!r} is embedded with {chosen.name!r} of {chosen.dimension} dimensions, not "
                    f"{dimension}; nothing was written"
                )
            return chosen
        named = [m for _, m in models if m.name == name]
        if not named:
            names = ", ".join(sorted({repr(m.name) for _, m in models}))
            raise EmbeddingError(
                f"memory {memory!r} has no model {name!r} (its models: {names}); enable it first; nothing was written"
            )
        for candidate in named:
            if candidate.dimension == dimension:
                return candidate
        dimensions = " or ".join(sorted({str(m.dimension) for m in named}))
        raise DimensionMismatch(
            f"model {name!r} of memory {memory!r} has {dimensions} dimensions, not {dimension}; nothing was written"
        )

    def lost_model(self, exc: PgmemError, memory: str, given: dict[str, Any] | None) -> None:
        """Raise the :class:`EmbeddingError` of a write of the caller's vectors that found the memory without
        their model any more (a switch finished after this client looked it up): the statement fails itself
        then (the fragment ``store_given``), so nothing was written. Returns for any other error."""
        cause = exc.__cause__
        if (
            given is None
            or not isinstance(cause, pg_errors.NotNullViolation)
            or (cause.diag.table_name, cause.diag.column_name) != ("embeddings", "model_id")
        ):
            return
        self.forget(memory)
        raise EmbeddingError(
            f"memory {memory!r} has no model {given['model']!r} of {given['dimension']} dimensions any more (a "
            "model switch finished); nothing was written"
        ) from exc

    async def for_search(
        self, filters: SearchFilters, embedder: Embedder | None, refresh: bool, distance: str | None = None
    ) -> EmbeddingModel:
        """The model a search with these filters runs on: the memory's active one (``distance``, when given,
        must be its), else ``embedder``'s with ``distance`` (default cosine)."""
        if distance is not None:
            check_distance(distance)
        if filters.memory is None:
            return await self.register(embedder, distance=distance or DEFAULT_DISTANCE)
        model = await self.active(filters.memory, refresh=refresh)
        if model is None:
            raise InvalidInput(f"memory {filters.memory!r} has no embedding model; call client.vectors.enable() first")
        if distance is not None and distance != model.distance:
            raise InvalidInput(
                f"memory {filters.memory!r} is searched by {model.distance!r} distance (its model's), not "
                f"{distance!r}; enable it with distance={distance!r} to switch"
            )
        if embedder is not None and (embedder.model, embedder.dimension) != (model.name, model.dimension):
            raise EmbeddingError(
                f"memory {filters.memory!r} is searched with {model.name!r} ({model.dimension} dimensions), not "
                f"{embedder.model!r} ({embedder.dimension})"
            )
        return model
