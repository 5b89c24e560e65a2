"""The embedding-model registry: models and their HNSW indexes, each memory's active model, the
embedders a client knows, and query embedding. The outbox worker and the searcher both receive it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection

from pgmem._async.base import AsyncRepository
from pgmem.checks import check_key
from pgmem.embeddings import Embedder, Vectors, check_vectors
from pgmem.errors import EmbeddingError, InvalidInput, translate
from pgmem.planning import statements
from pgmem.planning.rows import EmbeddingModelRow, MemoryModelRow
from pgmem.planning.search import HALFVEC_ABOVE, EmbeddingModel, SearchFilters, model_of

if TYPE_CHECKING:
    from pgmem._async.client import AsyncClient

__all__ = ["MODEL_LOCK_KEY", "AsyncModelRegistry"]

Q = statements.load("vectors")

#: Key of the advisory lock that serialises model registration (and its CREATE INDEX).
MODEL_LOCK_KEY = 0x70676D656D02


class AsyncModelRegistry(AsyncRepository):
    """Embedding models of a client: registration (name, dimension, HNSW index; once per process and
    model), the model each memory is searched with (remembered until a switch is seen), and the embedders
    this client has for each model name."""

    queries = Q

    def __init__(self, client: AsyncClient) -> None:
        super().__init__(client)
        self._models: dict[str, EmbeddingModel] = {}
        self._active: dict[str, EmbeddingModel] = {}
        self._embedders: dict[str, Embedder] = {}

    # -- embedders ------------------------------------------------------------------------------------

    def embedder(self, embedder: Embedder | None) -> Embedder:
        """``embedder`` (default: the client's), checked, and remembered for its model name."""
        chosen = embedder if embedder is not None else self._client.embedder
        if not isinstance(getattr(chosen, "model", None), str) or not isinstance(
            getattr(chosen, "dimension", None), int
        ):
            raise InvalidInput("an embedder needs a `model` name and an integer `dimension`")
        self._embedders.setdefault(chosen.model, chosen)
        return chosen

    def embedder_for(self, model: str) -> Embedder | None:
        """The embedder this client has for the model name (the client's own when it is that model)."""
        chosen = self._embedders.get(model)
        if chosen is None and self._client.embedder.model == model:
            chosen = self.embedder(None)
        return chosen

    def embedders(self) -> dict[str, Embedder]:
        """The embedders this client knows, by model name (registering the client's own when none is)."""
        if not self._embedders:
            self.embedder(None)
        return dict(self._embedders)

    async def query_vectors(self, model: EmbeddingModel, texts: Sequence[str], embedder: Embedder | None) -> Vectors:
        """Embed search texts with ``model`` (``embedder``, else the one this client has for it)."""
        chosen = embedder or self.embedder_for(model.name)
        if chosen is None:
            raise EmbeddingError(f"no embedder for model {model.name!r} in this client; pass embedder=")
        for text in texts:
            if not isinstance(text, str):
                raise InvalidInput(f"a search text must be a string, not {type(text).__name__}")
        return check_vectors(await chosen.aembed(list(texts)), len(texts), model.dimension, model.name)

    # -- models -------------------------------------------------------------------------------------

    async def register(
        self, embedder: Embedder | None = None, *, connection: AsyncConnection[Any] | None = None
    ) -> EmbeddingModel:
        """Register ``embedder``'s model (name and dimension) and its HNSW index, once; return it.

        Raises :class:`pgmem.EmbeddingError` when the name is registered with another dimension.
        """
        chosen = self.embedder(embedder)
        known = self._models.get(chosen.model)
        if known is None:
            dimension = chosen.dimension
            if not 1 <= dimension <= 16000:
                raise InvalidInput(f"{chosen.model}: dimension must be in [1, 16000], got {dimension}")
            kind = "halfvec" if dimension > HALFVEC_ABOVE else "vector"
            with translate():
                async with self._client.transaction(connection) as conn:
                    await conn.execute(Q["model_lock"], {"key": MODEL_LOCK_KEY})
                    await conn.execute(
                        Q["register_model"], {"name": chosen.model, "dimension": dimension, "kind": kind}
                    )
                    cur = await conn.execute(Q["get_model"], {"name": chosen.model})
                    row = await cur.fetchone()
                    assert row is not None
                    known = model_of(EmbeddingModelRow._make(row))
                    if known.dimension == dimension:
                        await conn.execute(known.index_ddl())
            self._models[chosen.model] = known
        if known.dimension != chosen.dimension:
            raise EmbeddingError(
                f"model {chosen.model!r} is registered with {known.dimension} dimensions; this embedder has "
                f"{chosen.dimension}"
            )
        return known

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
        self._models.setdefault(found[0].name, found[0])
        return found[0]

    def forget(self, memory: str) -> None:
        """Drop the remembered active model of ``memory`` (the next search looks it up)."""
        self._active.pop(memory, None)

    async def for_search(self, filters: SearchFilters, embedder: Embedder | None, refresh: bool) -> EmbeddingModel:
        """The model a search with these filters runs on: the memory's active one, else ``embedder``'s."""
        if filters.memory is None:
            return await self.register(embedder)
        model = await self.active(filters.memory, refresh=refresh)
        if model is None:
            raise InvalidInput(f"memory {filters.memory!r} has no embedding model; call client.vectors.enable() first")
        if embedder is not None and embedder.model != model.name:
            raise EmbeddingError(f"memory {filters.memory!r} is searched with {model.name!r}, not {embedder.model!r}")
        return model
