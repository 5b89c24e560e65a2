"""What message searches return: hits decoded from their rows, the retrieval log's parameters, query
vectors and pgvector's binary vectors, and the model-switch retry rule the searcher and the FAISS cache
share."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from pgmem.embeddings import check_query_vector
from pgmem.errors import EmbeddingError, InvalidInput
from pgmem.models import Message
from pgmem.planning.distances import DEFAULT_DISTANCE, score_of
from pgmem.planning.rows import MessageRow, decode

if TYPE_CHECKING:  # numpy is imported where vectors are unpacked: a process that never searches never loads it
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "MESSAGE_WIDTH",
    "MODEL_SWITCH_ATTEMPTS",
    "SearchHit",
    "as_query_vector",
    "batch_hits",
    "forked",
    "hybrid_hit",
    "log_text",
    "retrieval_params",
    "still_switching",
    "switched",
    "unpack_vectors",
    "vector_hit",
    "vector_hits",
]


class SearchHit(NamedTuple):
    """One search result: the message, its score (higher is closer) and, for vector search, the distance
    (pgmem.planning.distances: ``1 - score`` for cosine). A named tuple: cheap to build by the hundred."""

    message: Message
    score: float
    distance: float | None = None
    #: How many times the searched memory was given this fact (near-duplicates merged into it:
    #: :mod:`pgmem.merging`) and when last; read by a search with ``boost_seen`` (None otherwise).
    seen_count: int | None = None
    last_seen_at: datetime | None = None


def as_query_vector(vector: Any, dimension: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A caller's query vector as a float32 row of ``dimension`` finite values."""
    return check_query_vector(vector, dimension)


# -- rows of the search statements ---------------------------------------------------------------------
# A search row is the message's columns (pgmem.planning.rows.decode), then the distance; a hybrid row has
# its fused score after the distance; every row ends with ``ok`` (see vector_search_sql).

#: Columns of the message at the start of every search row (rows.MessageRow), then the distance (and for
#: hybrid search the fused score); positions taken once from the row type, rows stay plain tuples.
MESSAGE_WIDTH = len(MessageRow._fields)
_ID = MessageRow._fields.index("id")
_DISTANCE = MESSAGE_WIDTH
_SCORE = MESSAGE_WIDTH + 1


def switched(row: tuple[Any, ...]) -> bool:
    """Whether a search row says the memory's active model changed under the search (``ok`` is NULL)."""
    return row[-1] is None


def forked(row: tuple[Any, ...]) -> bool:
    """Whether a search row says the memory is a fork the statement did not read through its lineage
    (``ok`` is false: :func:`pgmem.planning.search.vector.fork_guard_sql`)."""
    return row[-1] is False


def vector_hit(row: tuple[Any, ...], kind: str = DEFAULT_DISTANCE) -> SearchHit:
    """The hit of a vector search row of a model of distance ``kind``."""
    distance = float(row[_DISTANCE])
    return SearchHit(decode(row[:MESSAGE_WIDTH]), score_of(kind, distance), distance)


def vector_hits(rows: list[tuple[Any, ...]], kind: str = DEFAULT_DISTANCE) -> list[SearchHit]:
    """Hits of vector search rows ordered by distance, ties ordered by message id (the statement leaves
    them: a second sort key there costs an incremental sort, ~5% of an HNSW search)."""
    for i in range(1, len(rows)):
        if rows[i][_DISTANCE] == rows[i - 1][_DISTANCE]:
            rows = sorted(rows, key=lambda r: (r[_DISTANCE], r[_ID]))
            break
    return [vector_hit(row, kind) for row in rows]


def batch_hits(rows: list[tuple[Any, ...]], count: int, kind: str = DEFAULT_DISTANCE) -> list[list[SearchHit]]:
    """Hits per query of batch search rows (``ord`` first, then a vector search row)."""
    out: list[list[SearchHit]] = [[] for _ in range(count)]
    for row in rows:  # (ord, *vector search row): ord is the query's 1-based place
        out[int(row[0]) - 1].append(vector_hit(row[1:], kind))
    return out


def hybrid_hit(row: tuple[Any, ...]) -> SearchHit:
    """The hit of a hybrid search row (``distance`` None for text-only hits)."""
    distance = row[_DISTANCE]
    return SearchHit(decode(row[:MESSAGE_WIDTH]), float(row[_SCORE]), None if distance is None else float(distance))


def log_text(value: str | None) -> str | None:
    """A label or query text as the retrieval log stores it: NUL bytes (which Postgres ``text`` rejects)
    become U+FFFD and lone surrogates ``?``; nothing is cut."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"a search label must be a string, not {type(value).__name__}")
    return value.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def retrieval_params(
    kind: str, memory: str | None, query: str | None, k: int, hits: Sequence[tuple[str, float]], label: str | None
) -> dict[str, Any]:
    """Parameters of ``log_retrieval`` (sql/vectors.sql) for a search answered outside Postgres.
    ``hits``: ``(message id, score)``, best first."""
    return {
        "kind": kind,
        "memory": memory,
        "label": log_text(label),
        "query": log_text(query),
        "k": k,
        "ids": [h[0] for h in hits],
        "scores": [float(h[1]) for h in hits],
    }


def unpack_vectors(blobs: Sequence[bytes], dimension: int) -> npt.NDArray[np.float32]:
    """pgvector's binary send format (int16 dimension, int16 unused, big-endian float32s) to a matrix."""
    import numpy as np

    if not blobs:
        return np.zeros((0, dimension), np.float32)
    raw = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(blobs), dimension + 1)
    return np.ascontiguousarray(raw[:, 1:], dtype=np.float32)


#: How many times a search runs again when its memory's embedding model switched under it (the first try
#: may use a remembered model, the next ones look it up afresh). The searcher and the FAISS cache share it.
MODEL_SWITCH_ATTEMPTS = 3


def still_switching(memory: str | None) -> EmbeddingError:
    """The error of a search whose memory switched models at every attempt."""
    return EmbeddingError(f"memory {memory!r} keeps switching embedding models; try again")
