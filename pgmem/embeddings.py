"""Embedding providers behind one small interface.

* :class:`HashingEmbedder` — the offline default: deterministic, no model download, no network. Hashed
  word unigrams and character trigrams (stop words dropped), L2-normalised, so texts with the same words
  in another order are (near-)identical. Good enough for de-duplication, tests and the demo; not a
  semantic model.
* :class:`OpenAIEmbedder` — the ``openai`` package (``base_url`` configurable, so any compatible server
  works); rate limits and transient errors are retried with exponential backoff by the client.
* :class:`SentenceTransformerEmbedder` — local models, with the optional extra ``pgmem[local]``.

Every provider has a ``model`` name and a fixed ``dimension``; vectors of another dimension are an
error, never silently truncated.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from pgmem.errors import EmbeddingError, InvalidInput

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# numpy is imported where it is used, not here: it is ~100 ms of CPU, most of what ``import pgmem`` costs
# beyond psycopg (benchmarks/startup.py), and a process that never embeds or searches never needs it.
Vectors: TypeAlias = "npt.NDArray[np.float32]"


@runtime_checkable
class Embedder(Protocol):
    """What pgmem needs of an embedding provider."""

    model: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts``; return a float32 array of shape ``(len(texts), dimension)``."""
        ...

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """The async twin of :meth:`embed`."""
        ...


#: The range a vector's squared length must fall in. pgvector computes cosine distance in float32: a
#: squared length above float32's largest value overflows (``[1e38, 1e38, 0, 0]`` scored 0.0 against
#: itself), and a zero one (or one whose squares underflow) divides by zero: every search then returned
#: it with score NaN. Normalised vectors have 1.0.
MIN_SQUARED_NORM = 1e-30
MAX_SQUARED_NORM = 3.4e38


def _bad_norm(squared: float) -> str | None:
    if not squared >= MIN_SQUARED_NORM:  # also NaN
        return "is zero (or so small that float32 cosine underflows): it has no direction to compare"
    if squared > MAX_SQUARED_NORM:
        return "is so long that its squared length overflows float32, in which pgvector computes cosine"
    return None


def check_vectors(vectors: Any, count: int, dimension: int, model: str) -> Vectors:
    """Validate a provider's answer: ``count`` finite vectors of ``dimension``, none of them zero or too
    long for float32 cosine (see :data:`MAX_SQUARED_NORM`); return them as float32. Raises
    :class:`EmbeddingError` naming the first bad one, so that nothing is written."""
    import numpy as np

    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[0] != count:
        raise EmbeddingError(f"{model}: expected {count} vectors, got an array of shape {array.shape}")
    if array.shape[1] != dimension:
        raise EmbeddingError(f"{model}: expected {dimension} dimensions, got {array.shape[1]}")
    if not np.isfinite(array).all():
        raise EmbeddingError(f"{model}: the provider returned NaN or infinite values")
    wide = array.astype(np.float64)
    squared = np.einsum("ij,ij->i", wide, wide)
    bad = np.flatnonzero((squared < MIN_SQUARED_NORM) | (squared > MAX_SQUARED_NORM))
    if bad.size:
        reason = _bad_norm(float(squared[bad[0]]))
        raise EmbeddingError(f"{model}: vector {int(bad[0])} {reason}")
    return array


def check_query_vector(vector: Any, dimension: int) -> Vectors:
    """A caller's query vector: one row of ``dimension`` finite floats."""
    import numpy as np

    try:
        array = np.asarray(vector, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"not a vector: {exc}") from None
    if array.shape[0] != dimension:
        raise InvalidInput(f"query vector has {array.shape[0]} dimensions; the model has {dimension}")
    # The squared length in float64, which no float32 input overflows: finite only if every value is (a
    # third of the cost of isfinite().all() on 384 values), and checked against float32's range.
    wide = array.astype(np.float64)
    squared = float(np.dot(wide, wide))
    if not math.isfinite(squared):
        raise InvalidInput("query vector contains NaN or infinite values")
    if problem := _bad_norm(squared):
        raise InvalidInput(f"query vector {problem}")
    return array


def normalize(vectors: Vectors) -> Vectors:
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: Vectors = (vectors / norms).astype(np.float32, copy=False)
    return result


_WORD_RE = re.compile(r"\w+", re.UNICODE)
_STOP_WORDS = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was were will with".split()
)


class HashingEmbedder:
    """Deterministic offline embeddings from hashed words and character trigrams.

    Example:
        >>> e = HashingEmbedder()
        >>> a, b = e.embed(["Write a cli snake game", "Write a game of cli snake"])
        >>> float(a @ b) > 0.99
        True
    """

    def __init__(self, dimension: int = 384, *, trigram_weight: float = 0.5) -> None:
        if not isinstance(dimension, int) or not 8 <= dimension <= 16000:
            raise InvalidInput(f"dimension must be an integer in [8, 16000], got {dimension!r}")
        self.dimension = dimension
        self.trigram_weight = trigram_weight
        self.model = f"pgmem-hash-{dimension}"

    def _features(self, text: str) -> dict[int, float]:
        grams: list[tuple[str, str, float]] = []
        for word in _WORD_RE.findall(text.lower()):
            if word in _STOP_WORDS:
                continue
            grams.append(("w", word, 1.0))
            padded = f"#{word}#"
            grams += [("t", padded[i : i + 3], self.trigram_weight) for i in range(len(padded) - 2)]
        if not grams:
            # No word but stop words ("the a of"), none at all ("!!!"), or empty: the whole text's
            # character trigrams, so every text has a direction (a zero vector scores NaN). "" is "^$".
            padded = f"^{text.lower()}$"
            grams = [("c", padded[i : i + 3], 1.0) for i in range(max(1, len(padded) - 2))]
        features: dict[int, float] = {}
        for kind, gram, weight in grams:
            digest = hashlib.blake2b(f"{kind}:{gram}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            bucket = value % self.dimension
            sign = 1.0 if (value >> 63) & 1 else -1.0
            features[bucket] = features.get(bucket, 0.0) + sign * weight
        if not any(features.values()):  # features that cancelled out: one bucket of the text's own
            features = {
                int.from_bytes(hashlib.blake2b(f"z:{text}".encode("utf-8", "surrogatepass")).digest()[:8], "little")
                % self.dimension: 1.0
            }
        return features

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidInput(f"text {row} is a {type(text).__name__}, not a string")
            for bucket, value in self._features(text).items():
                out[row, bucket] = value
        return normalize(out)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)


class OpenAIEmbedder:
    """Embeddings from the OpenAI API (or any server speaking it, via ``base_url``).

    Args:
        model: e.g. ``text-embedding-3-small`` (1536 dimensions) or ``text-embedding-3-large`` (3072).
        dimension: the model's output size; checked on every answer.
        api_key / base_url: default to the ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` environment.
        batch_size: texts per request.
        max_retries: retries of rate-limited and transient failures, with exponential backoff (done by
            the ``openai`` client).
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        dimension: int = 1536,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        batch_size: int = 256,
        max_retries: int = 6,
        timeout: float = 60.0,
    ) -> None:
        try:
            import openai
        except ImportError:
            raise EmbeddingError("the OpenAI embedder needs the openai package: pip install openai") from None

        self.model = model
        self.dimension = dimension
        self.batch_size = batch_size
        try:
            self._client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout)
            self._aclient = openai.AsyncOpenAI(
                api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
            )
        except openai.OpenAIError as exc:  # no key: openai raises before any request
            raise EmbeddingError(
                f"the OpenAI embedder cannot start ({type(exc).__name__}: no API key?): set OPENAI_API_KEY or pass "
                "api_key=, or set PGMEM_EMBEDDER=hashing for the offline embedder"
            ) from None

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np
        import openai

        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            try:
                answer = self._client.embeddings.create(model=self.model, input=batch)
            except openai.OpenAIError as exc:
                raise EmbeddingError(f"{self.model}: {exc}") from exc
            rows.extend(d.embedding for d in sorted(answer.data, key=lambda d: d.index))
        return (
            normalize(check_vectors(rows, len(texts), self.dimension, self.model))
            if texts
            else np.zeros((0, self.dimension), np.float32)
        )

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np
        import openai

        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            try:
                answer = await self._aclient.embeddings.create(model=self.model, input=batch)
            except openai.OpenAIError as exc:
                raise EmbeddingError(f"{self.model}: {exc}") from exc
            rows.extend(d.embedding for d in sorted(answer.data, key=lambda d: d.index))
        return (
            normalize(check_vectors(rows, len(texts), self.dimension, self.model))
            if texts
            else np.zeros((0, self.dimension), np.float32)
        )


class SentenceTransformerEmbedder:
    """Local sentence-transformers models (``pip install 'pgmem[local]'``)."""

    def __init__(self, model: str = "sentence-transformers/all-MiniLM-L6-v2", *, device: str = "cpu") -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbeddingError("sentence-transformers is not installed: pip install 'pgmem[local]'") from exc
        self._model = SentenceTransformer(model, device=device)
        self.model = model
        dimension = self._model.get_sentence_embedding_dimension()
        if dimension is None:  # a model whose output size is not fixed cannot fill a vector(n) column
            raise EmbeddingError(f"{model!r} does not say its embedding dimension; pgmem needs a fixed one")
        self.dimension = int(dimension)

    def embed(self, texts: Sequence[str]) -> Vectors:
        vectors = self._model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
        return check_vectors(vectors, len(texts), self.dimension, self.model)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return await asyncio.to_thread(self.embed, texts)


def default_embedder() -> Embedder:
    """The configured default (``PGMEM_EMBEDDER``): the offline :class:`HashingEmbedder` (384 dimensions)
    unless the settings name ``openai`` or ``sentence-transformers:<model>``."""
    from pgmem.settings import get_settings

    settings = get_settings()
    choice = settings.embedder.strip()
    if choice == "hashing":
        return HashingEmbedder()
    if choice == "openai":
        return OpenAIEmbedder(settings.openai_embedding_model, settings.openai_embedding_dimension)
    if choice.startswith("sentence-transformers:"):
        return SentenceTransformerEmbedder(choice.split(":", 1)[1])
    raise InvalidInput(f"PGMEM_EMBEDDER={choice!r}: expected 'hashing', 'openai' or 'sentence-transformers:<model>'")
