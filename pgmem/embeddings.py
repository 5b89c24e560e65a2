"""Embedding providers behind one small interface.

* :class:`HashingEmbedder` — the offline default: deterministic, no model download, no network. Hashed
  word unigrams and character trigrams (stop words dropped), L2-normalised, so texts with the same words
  in another order are (near-)identical. Good enough for de-duplication, tests and the demo; not a
  semantic model.
* :class:`OpenAIEmbedder` — the ``openai`` package (``base_url`` configurable, so any compatible server
  works); rate limits and transient errors are retried with exponential backoff; a server that cannot be
  reached fails at once, naming its URL.
* :class:`SentenceTransformerEmbedder` — local models, with the optional extra ``pgmem[local]``.
* :class:`Precomputed` — no provider: a model whose vectors you compute yourself and pass to pgmem
  (``embedding=`` on ``messages.add``, ``embeddings=`` on ``add_many``, ``vector=`` on searches).

Every provider has a ``model`` name and a fixed ``dimension``; vectors of another dimension are an
error, never silently truncated.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from pgmem.errors import DimensionMismatch, EmbeddingError, InvalidInput, redact, scrub

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

    try:
        with np.errstate(over="ignore"):  # a value beyond float32 becomes inf, refused below
            array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:  # ragged rows, strings, None
        raise EmbeddingError(f"{model}: not an array of vectors ({exc})") from None
    if array.ndim != 2 or array.shape[0] != count:
        raise EmbeddingError(f"{model}: expected {count} vectors, got an array of shape {array.shape}")
    if array.shape[1] != dimension:
        raise EmbeddingError(f"{model}: expected {dimension} dimensions, got {array.shape[1]}")
    if not np.isfinite(array).all():
        raise EmbeddingError(f"{model}: NaN or infinite values (from the provider, or given)")
    wide = array.astype(np.float64)
    squared = np.einsum("ij,ij->i", wide, wide)
    bad = np.flatnonzero((squared < MIN_SQUARED_NORM) | (squared > MAX_SQUARED_NORM))
    if bad.size:
        reason = _bad_norm(float(squared[bad[0]]))
        raise EmbeddingError(f"{model}: vector {int(bad[0])} {reason}")
    return array


#: The largest magnitude a ``halfvec`` (IEEE half precision) holds: models above 2,000 dimensions store
#: their vectors so (pgmem.planning.search.model.storage_kind).
HALF_MAX = 65504.0


def given_vectors(vectors: Any, count: int, *, single: bool = False) -> Vectors:
    """A caller's own vectors (``embedding=`` of one message when ``single``, else ``embeddings=``, one per
    message): lists or numpy arrays, returned as a float32 array of ``count`` rows, each finite and neither
    zero nor too long (as :func:`check_vectors`). Their dimension is the caller's; the model's is checked
    once the model is known (``AsyncModelRegistry.given_model``). Raises :class:`EmbeddingError`."""
    import numpy as np

    what = "embedding" if single else "embeddings"
    try:
        with np.errstate(over="ignore"):
            array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"{what}: not {'a vector' if single else 'vectors'} of numbers ({exc})") from None
    if count == 0 and not single and array.size == 0:
        return array.reshape(0, 0)  # no messages, no vectors
    if single:
        if array.ndim != 1:
            raise EmbeddingError(f"embedding: expected one vector (a list or a 1-D array), got shape {array.shape}")
        array = array[None, :]
    elif array.ndim != 2 or array.shape[0] != count:
        raise EmbeddingError(f"embeddings: expected {count} vectors, one per message, got shape {array.shape}")
    if array.shape[1] == 0:
        raise EmbeddingError(f"{what}: a vector needs at least one dimension")
    return check_vectors(array, count, array.shape[1], what)


def check_query_vector(vector: Any, dimension: int) -> Vectors:
    """A caller's query vector: one row of ``dimension`` finite floats. Another dimension than the model's
    is a :class:`DimensionMismatch` (an EmbeddingError and an InvalidInput); anything else wrong with it an
    :class:`InvalidInput`."""
    import numpy as np

    try:
        array = np.asarray(vector, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"not a vector: {exc}") from None
    if array.shape[0] != dimension:
        raise DimensionMismatch(f"query vector has {array.shape[0]} dimensions; the model has {dimension}")
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
        max_retries: retries of a rate-limited or failed request (HTTP 408, 409, 429, 5xx), with exponential
            backoff (or the server's ``Retry-After``).
        timeout: seconds a request may wait for its answer.
        connect_timeout: seconds to connect to the server.

    A server that cannot be reached (refused, unknown host, no answer to connect) or that does not answer
    within ``timeout`` raises :class:`EmbeddingError` naming its URL and what to check: at most one retry
    after a refused or reset connection, none after a timeout, where the ``openai`` client's own policy
    (retries with backoff, as for a rate limit) stalled a search on an unreachable ``OPENAI_BASE_URL`` 23 s.
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
        connect_timeout: float = 5.0,
    ) -> None:
        try:
            import openai
        except ImportError:
            raise EmbeddingError("the OpenAI embedder needs the openai package: pip install openai") from None

        self.model = model
        self.dimension = dimension
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.timeout = timeout
        self.connect_timeout = min(connect_timeout, timeout)
        limits = openai.Timeout(timeout, connect=self.connect_timeout)
        try:
            # max_retries=0: the retries are this class's (_retry_delay), which tell a server that cannot be
            # reached from one that asks to be called again later.
            self._client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=limits)
            self._aclient = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=limits)
        except openai.OpenAIError as exc:  # no key: openai raises before any request
            raise EmbeddingError(
                f"the OpenAI embedder cannot start ({type(exc).__name__}: no API key?): set OPENAI_API_KEY or pass "
                "api_key=, or set PGMEM_EMBEDDER=hashing for the offline embedder"
            ) from None

    @property
    def base_url(self) -> str:
        """The server's URL as shown in errors: scheme, host, port and path, without user info or query."""
        from urllib.parse import urlsplit

        url = urlsplit(str(self._client.base_url))
        host = url.hostname or ""
        shown = f"[{host}]" if ":" in host else host
        port = f":{url.port}" if url.port else ""
        return f"{url.scheme}://{shown}{port}{url.path.rstrip('/')}"

    def _retry_delay(self, exc: Exception, attempt: int) -> float | None:
        """Seconds to wait before sending again the request that failed with ``exc`` on its ``attempt``-th
        try (0 first), None when it is not worth it."""
        import random

        import openai

        if isinstance(exc, openai.APITimeoutError):
            return None  # it waited its whole timeout already
        if isinstance(exc, openai.APIConnectionError):
            # Once, at once: a pooled connection the server closed meanwhile fails like this; a server that
            # is not there fails again in milliseconds.
            return 0.1 if attempt == 0 else None
        if not isinstance(exc, openai.APIStatusError) or attempt >= self.max_retries:
            return None
        headers = exc.response.headers
        asked = headers.get("x-should-retry")
        if asked == "false" or (asked != "true" and exc.status_code not in (408, 409, 429) and exc.status_code < 500):
            return None
        try:
            after = float(headers.get("retry-after-ms", "")) / 1000
        except ValueError:
            try:
                after = float(headers.get("retry-after", ""))
            except ValueError:
                after = 0.0
        if 0 < after <= 60:
            return after
        return min(0.5 * 2.0**attempt, 8.0) * (1 - 0.25 * random.random())  # noqa: S311 - jitter, not a secret

    def _failure(self, exc: Exception) -> EmbeddingError:
        """The :class:`EmbeddingError` for the provider's ``exc``: what failed, where, and what to check."""
        import openai

        offline = "or set PGMEM_EMBEDDER=hashing for the offline embedder"
        if isinstance(exc, openai.APITimeoutError):
            # httpx's (and httpx2's) ConnectTimeout: nothing answered the connection (packets dropped).
            if type(exc.__cause__).__name__ == "ConnectTimeout":
                waited, longer = f"could not be connected to within {self.connect_timeout:g} s", "connect_timeout="
            else:
                waited, longer = f"did not answer within {self.timeout:g} s", "timeout="
            return EmbeddingError(
                f"{self.model}: the embedding server at {self.base_url} {waited}: check that it runs and is "
                f"reachable (OPENAI_BASE_URL, base_url=), give it a longer {longer}, {offline}"
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            reason = redact(" ".join(str(cause).split())) if cause is not None and str(cause) else "no connection"
            return EmbeddingError(
                f"{self.model}: cannot reach the embedding server at {self.base_url} ({reason}): check the URL "
                f"(OPENAI_BASE_URL, base_url=), that the server runs and that this machine can reach it, {offline}"
            )
        if isinstance(exc, openai.AuthenticationError):
            return EmbeddingError(
                f"{self.model}: the embedding server at {self.base_url} refused the API key ({redact(str(exc))}): "
                f"check OPENAI_API_KEY (api_key=), {offline}"
            )
        if isinstance(exc, openai.NotFoundError):
            return EmbeddingError(
                f"{self.model}: the embedding server at {self.base_url} answered 404 ({redact(str(exc))}): check the "
                f"model's name and the URL (OPENAI_BASE_URL, base_url=; an OpenAI-compatible one usually ends in /v1), "
                f"{offline}"
            )
        return EmbeddingError(f"{self.model}: {redact(str(exc))}")

    def _create(self, batch: list[str]) -> Any:
        import time

        import openai

        attempt = 0
        while True:
            try:
                return self._client.embeddings.create(model=self.model, input=batch)
            except openai.OpenAIError as exc:
                delay = self._retry_delay(exc, attempt)
                if delay is None:
                    raise self._failure(exc) from scrub(exc)  # its chain may quote a key
            time.sleep(delay)
            attempt += 1

    async def _acreate(self, batch: list[str]) -> Any:
        import openai

        attempt = 0
        while True:
            try:
                return await self._aclient.embeddings.create(model=self.model, input=batch)
            except openai.OpenAIError as exc:
                delay = self._retry_delay(exc, attempt)
                if delay is None:
                    raise self._failure(exc) from scrub(exc)  # its chain may quote a key
            await asyncio.sleep(delay)
            attempt += 1

    def _vectors(self, rows: list[list[float]], count: int) -> Vectors:
        import numpy as np

        if not count:
            return np.zeros((0, self.dimension), np.float32)
        return normalize(check_vectors(rows, count, self.dimension, self.model))

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            answer = self._create(list(texts[start : start + self.batch_size]))
            rows.extend(d.embedding for d in sorted(answer.data, key=lambda d: d.index))
        return self._vectors(rows, len(texts))

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            answer = await self._acreate(list(texts[start : start + self.batch_size]))
            rows.extend(d.embedding for d in sorted(answer.data, key=lambda d: d.index))
        return self._vectors(rows, len(texts))


def _check_model_name(name: Any, what: str = "name") -> str:
    """A model's name as pgmem registers it: a non-empty string without NUL bytes (it is stored)."""
    if not isinstance(name, str) or not name.strip() or "\x00" in name:
        raise InvalidInput(f"a model's {what} must be a non-empty string without NUL bytes, got {name!r}")
    return name


def sentence_transformer_name(model: str, loaded: Any = None) -> str:
    """The name pgmem registers a sentence-transformers model under, when the caller gives none: its own id,
    never a path (a path names an installation: the same weights elsewhere would be another model, whose
    vectors are all computed again).

    * ``model`` is not a local directory: it is a Hugging Face id (what sentence-transformers downloads),
      kept as given: ``"sentence-transformers/all-MiniLM-L6-v2"``.
    * The loaded model names itself (``loaded.model_card_data.model_id``: sentence-transformers sets it when
      a model is saved or pushed under an id, or by your code; a loaded copy does not keep it, so it is
      usually unset). Not ``base_model``: for a fine-tuned model that is the model it was trained from.
    * The directory lies in a Hugging Face cache (``…/models--<org>--<name>/snapshots/<revision>``, where
      ``huggingface_hub`` and ``HF_HOME`` put downloads): ``"<org>/<name>"``, the same in every cache.
    * Otherwise the directory's own name (``/opt/models/all-MiniLM-L6-v2`` → ``"all-MiniLM-L6-v2"``): give
      ``name=`` when that is not the model's id (a directory called ``model``).
    """
    local = Path(model).expanduser()
    if not local.is_dir():
        return model
    own = getattr(getattr(loaded, "model_card_data", None), "model_id", None)
    if isinstance(own, str) and own.strip() and not Path(own).is_absolute():
        return own
    given = Path(os.path.abspath(local))
    for part in (*reversed(given.parts), *reversed(given.resolve().parts)):
        if part.startswith("models--") and len(part) > len("models--"):
            return "/".join(part[len("models--") :].split("--"))  # hub ids cannot hold "--"
    return given.name or str(given)


class SentenceTransformerEmbedder:
    """Local sentence-transformers models (``pip install 'pgmem[local]'``).

    Args:
        model: a Hugging Face id (``"sentence-transformers/all-MiniLM-L6-v2"``) or a local directory.
        name: the model's name in pgmem (``self.model``), which its vectors are stored and searched under;
            default: the model's own id (:func:`sentence_transformer_name`), never the directory's path, so
            that the same weights installed elsewhere are the same model. A memory embedded before under
            another name (pgmem named a directory's model by its path until then) keeps it with
            ``name=<that name>``.
        device: where the model runs (``"cpu"``, ``"cuda"``).

    Example:
        >>> SentenceTransformerEmbedder("/srv/models/e5", name="intfloat/e5-small-v2").model
        'intfloat/e5-small-v2'
    """

    def __init__(
        self, model: str = "sentence-transformers/all-MiniLM-L6-v2", *, name: str | None = None, device: str = "cpu"
    ) -> None:
        if name is not None:
            _check_model_name(name)
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbeddingError("sentence-transformers is not installed: pip install 'pgmem[local]'") from exc
        source = os.path.expanduser(model)
        if os.path.isdir(source):  # loaded without asking the Hub (sentence-transformers looks ids up online)
            self._model = SentenceTransformer(source, device=device, local_files_only=True)
        else:
            self._model = SentenceTransformer(model, device=device)
        self.model = name if name is not None else sentence_transformer_name(model, self._model)
        # get_embedding_dimension from sentence-transformers 5 on; the older name warns there (a FutureWarning).
        measure = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dimension = measure()
        if dimension is None:  # a model whose output size is not fixed cannot fill a vector(n) column
            raise EmbeddingError(f"{model!r} does not say its embedding dimension; pgmem needs a fixed one")
        self.dimension = int(dimension)

    def embed(self, texts: Sequence[str]) -> Vectors:
        vectors = self._model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
        return check_vectors(vectors, len(texts), self.dimension, self.model)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return await asyncio.to_thread(self.embed, texts)


class Precomputed:
    """A model whose vectors come from you, not from pgmem: computed by a model pgmem does not wrap, or
    stored beforehand. Register it as any embedder; its name and dimension are the model's::

        client.vectors.enable("docs", Precomputed("intfloat/e5-large-v2", 1024))
        client.messages.add("docs", message, embedding=vector)        # stored with the message, one transaction
        client.messages.add_many("docs", messages, embeddings=matrix)  # one vector per message, in order
        client.vectors.search(vector=query_vector, memory="docs")

    pgmem never embeds with it: a message added without a vector stays queued for the model (counted by
    ``client.vectors.pending()``; the background embedder passes it by, with no retry and no error) until the
    same message is added again with ``embedding=``. A search by text (not ``vector=``) of a memory of this
    model raises the :class:`EmbeddingError` of :meth:`embed`.
    """

    def __init__(self, model: str, dimension: int) -> None:
        self.model = _check_model_name(model, "name (model=)")
        if isinstance(dimension, bool) or not isinstance(dimension, int) or not 1 <= dimension <= 16000:
            raise InvalidInput(f"dimension must be an integer in [1, 16000], got {dimension!r}")
        self.dimension = dimension

    def __repr__(self) -> str:
        return f"Precomputed({self.model!r}, {self.dimension})"

    def embed(self, texts: Sequence[str]) -> Vectors:
        raise EmbeddingError(
            f"pgmem does not compute the vectors of model {self.model!r} (Precomputed): pass your own, "
            "embedding= (embeddings=) to add (add_many, publish) and vector= (vectors=) to searches"
        )

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)


def default_embedder() -> Embedder:
    """The configured default (``PGMEM_EMBEDDER``): the offline :class:`HashingEmbedder` (384 dimensions)
    unless the settings name ``openai`` or ``sentence-transformers:<model>``, where ``<model>`` is a
    Hugging Face id or a local directory, optionally followed by ``#<name>``, the name pgmem registers it
    under (:class:`SentenceTransformerEmbedder`'s ``name=``):
    ``sentence-transformers:/srv/models/e5#intfloat/e5-small-v2``. (A directory whose own path holds a
    ``#`` is taken whole.)"""
    from pgmem.settings import get_settings

    settings = get_settings()
    choice = settings.embedder.strip()
    if choice == "hashing":
        return HashingEmbedder()
    if choice == "openai":
        return OpenAIEmbedder(settings.openai_embedding_model, settings.openai_embedding_dimension)
    if choice.startswith("sentence-transformers:"):
        model, name = sentence_transformer_setting(choice.split(":", 1)[1])
        return SentenceTransformerEmbedder(model, name=name)
    raise InvalidInput(
        f"PGMEM_EMBEDDER={choice!r}: expected 'hashing', 'openai' or 'sentence-transformers:<model>[#<name>]'"
    )


def sentence_transformer_setting(value: str) -> tuple[str, str | None]:
    """``<model>[#<name>]`` of ``PGMEM_EMBEDDER=sentence-transformers:…`` as ``(model, name or None)``."""
    if "#" not in value or Path(value).expanduser().is_dir():  # a directory with a "#" in its path: whole
        model, name = value, None
    else:
        model, _, name = value.rpartition("#")
        if not name.strip():
            raise InvalidInput(f"PGMEM_EMBEDDER=sentence-transformers:{value}: an empty name after the '#'")
    if not model.strip():
        raise InvalidInput(f"PGMEM_EMBEDDER=sentence-transformers:{value}: no model")
    return model, name
