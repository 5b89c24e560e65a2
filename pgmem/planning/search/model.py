"""The embedding model a search runs on: how its vectors are stored and indexed, and the SQL expressions
of its vectors (casts, the indexed expression, the index scan's ORDER BY, the HNSW index's DDL)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

from pgmem.planning.distances import DEFAULT_DISTANCE, opclass, operator

__all__ = [
    "BINARY_ABOVE",
    "HALFVEC_ABOVE",
    "MIN_CANDIDATES",
    "OVERSAMPLE",
    "EmbeddingModel",
    "model_of",
    "storage_kind",
]

#: Models with more dimensions are stored as ``halfvec`` (HNSW indexes ``vector`` up to 2,000).
HALFVEC_ABOVE = 2_000
#: Models with more dimensions (HNSW indexes ``halfvec`` up to 4,000) keep full ``vector`` values and are
#: indexed by their binary quantization (one bit per dimension, Hamming distance, HNSW up to 64,000 bits).
BINARY_ABOVE = 4_000
#: A binary-quantized search re-ranks ``max(OVERSAMPLE * k, MIN_CANDIDATES)`` candidates by the exact
#: distance on the full vectors. 4x: recall@10 0.98-0.99 at 4,096 and 8,192 dimensions in
#: benchmarks/vectors.py part E (2x gave 0.97-0.98, 8x 0.99-1.0 at twice the cost; each candidate costs a
#: read of its TOASTed vector, ~20 µs at 4,096 dimensions).
OVERSAMPLE = 4
MIN_CANDIDATES = 40


@dataclass(frozen=True, slots=True)
class EmbeddingModel:
    """A registered embedding model: its id in ``pgmem.embedding_models``, name, dimension, storage and
    distance (one model per distance: its own vectors and its own HNSW index)."""

    id: int
    name: str
    dimension: int
    kind: str  # "vector" | "halfvec": how the values are stored (see storage_kind)
    distance: str = DEFAULT_DISTANCE  # "cosine" | "l2" | "inner_product" (pgmem.planning.distances)

    @property
    def column(self) -> str:
        return "embedding" if self.kind == "vector" else "embedding_half"

    @property
    def quantized(self) -> bool:
        """Whether the model's HNSW index holds binary-quantized vectors (above :data:`BINARY_ABOVE`
        dimensions): a search takes candidates by Hamming distance, then re-ranks them exactly."""
        return self.dimension > BINARY_ABOVE

    @property
    def index_name(self) -> str:
        """The name of the model's partial HNSW index on the messages' vectors (``pgmem.embeddings``)."""
        return self.table_index_name("embeddings")

    def table_index_name(self, table: str) -> str:
        """The name of the model's partial HNSW index on ``pgmem.<table>`` (``embeddings`` for messages,
        ``item_vectors`` for the item store); sql/vectors.sql spells the messages' one too."""
        return f"{table}_hnsw_m{self.id}"

    def vector_expr(self, alias: str = "e") -> sql.Composed:
        """The stored vector at the model's dimension, e.g. ``(e.embedding::vector(384))``."""
        return sql.SQL("({}.{}::{}({}))").format(
            sql.Identifier(alias), sql.Identifier(self.column), sql.SQL(self.kind), sql.Literal(self.dimension)
        )

    def index_expr(self, alias: str = "e") -> sql.Composed:
        """The indexed expression: :meth:`vector_expr`, or its binary quantization for a quantized model
        (``(binary_quantize(e.embedding::vector(4096))::bit(4096))``)."""
        if not self.quantized:
            return self.vector_expr(alias)
        return sql.SQL("(binary_quantize({})::bit({}))").format(self.vector_expr(alias), sql.Literal(self.dimension))

    def index_order(self, alias: str, q: sql.Composable) -> sql.Composed:
        """The ORDER BY term an index scan serves, for the query vector expression ``q`` (of this model's
        kind and dimension): the model's distance, or Hamming distance between the binary quantizations."""
        if not self.quantized:
            return sql.SQL("{} {} {}").format(self.vector_expr(alias), sql.SQL(operator(self.distance)), q)
        return sql.SQL("{} <~> binary_quantize({})::bit({})").format(
            self.index_expr(alias), q, sql.Literal(self.dimension)
        )

    def param(self, name: str = "q") -> sql.Composed:
        return sql.SQL("{}::{}({})").format(sql.Placeholder(name), sql.SQL(self.kind), sql.Literal(self.dimension))

    def candidates(self, k: sql.Composable) -> sql.Composable:
        """How many rows a binary-quantized index scan yields for re-ranking, for ``k`` results."""
        return sql.SQL("greatest({} * {}, {})").format(k, sql.Literal(OVERSAMPLE), sql.Literal(MIN_CANDIDATES))

    def depth(self, k: int) -> int:
        """How many rows the index scan of a ``k``-result search yields (its ``hnsw.ef_search`` need)."""
        return max(k * OVERSAMPLE, MIN_CANDIDATES) if self.quantized else k

    def index_ddl(self, table: str = "embeddings", name: str | None = None, concurrently: bool = True) -> sql.Composed:
        """``CREATE INDEX CONCURRENTLY`` of the model's partial HNSW index on ``pgmem.<table>`` (run outside a
        transaction: see ``AsyncModelRegistry.build_index``); ``concurrently=False``: the plain statement,
        which holds a SHARE lock on the table (every write waits) until its transaction ends."""
        return sql.SQL("CREATE INDEX {}IF NOT EXISTS {} ON {} USING hnsw ({} {}) WHERE model_id = {}").format(
            sql.SQL("CONCURRENTLY " if concurrently else ""),
            sql.Identifier(name or self.table_index_name(table)),
            sql.Identifier("pgmem", table),
            self.index_expr(table),
            sql.SQL(self.index_ops),
            sql.Literal(self.id),
        )

    @property
    def index_ops(self) -> str:
        if self.quantized:
            return "bit_hamming_ops"
        return opclass(self.kind, self.distance)


def storage_kind(dimension: int) -> str:
    """How a model's vectors are stored: ``halfvec`` from 2,001 to 4,000 dimensions (HNSW indexes
    ``halfvec`` there, not ``vector``), else ``vector`` (above 4,000 the index is binary-quantized and the
    re-rank reads the full single-precision values)."""
    return "halfvec" if HALFVEC_ABOVE < dimension <= BINARY_ABOVE else "vector"


def model_of(row: Any) -> EmbeddingModel:
    """The model a row of a model statement names (rows.EmbeddingModelRow, MemoryModelRow, PendingModelRow)."""
    return EmbeddingModel(int(row.id), str(row.name), int(row.dimension), str(row.kind), str(row.distance))
