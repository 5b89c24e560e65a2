"""The cache's face: :class:`VectorCache`, which answers searches from its entries and decides, per search,
whether an entry may answer as it is, must catch up first, or must be confirmed against Postgres.

It wires the parts together: the entries (:mod:`~pgmem.cache.entries`), the listener
(:mod:`~pgmem.cache.listener`), the reader (:mod:`~pgmem.cache.reader`), the kernels
(:mod:`~pgmem.cache.kernels`) and the approximate graphs (:mod:`~pgmem.cache.approximate`). The consistency
protocol it follows is described in :mod:`pgmem.cache`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pgmem import doorbell
from pgmem.cache.approximate import start_build
from pgmem.cache.entries import Entries, Entry
from pgmem.cache.kernels import (
    FLOAT32,
    Faiss,
    KernelChooser,
    faiss_ranked,
    numpy_ranked,
    one_ranked,
    query_matrix,
    rank,
)
from pgmem.cache.listener import Listener
from pgmem.cache.reader import MESSAGES, ModelChanged, Reader
from pgmem.cache.stats import CacheStats
from pgmem.checks import check_key
from pgmem.embeddings import Vectors, check_vectors
from pgmem.errors import EmbeddingError, InvalidInput
from pgmem.planning import notify
from pgmem.planning.distances import DEFAULT_DISTANCE, check_threshold, distance_of
from pgmem.planning.rows import MemoryModelRow, decode
from pgmem.planning.search import (
    MODEL_SWITCH_ATTEMPTS,
    EmbeddingModel,
    SearchFilters,
    SearchHit,
    as_query_vector,
    check_k,
    model_of,
    retrieval_params,
    still_switching,
)

if TYPE_CHECKING:
    from pgmem import AsyncClient, Client

__all__ = ["VectorCache"]

log = logging.getLogger("pgmem.cache")  # the package's logger, as before it was split

#: Strict mode overlaps its high-water-mark read with the search of memories smaller than this (see
#: ``VectorCache._top_k_confirmed``); larger ones read it first.
_OVERLAP_BELOW = 2048


class VectorCache:
    """Process-local exact vector search over memories, kept consistent with Postgres. It mirrors memories
    searched by cosine distance; one whose model ranks by ``l2`` or ``inner_product`` is searched exactly
    in Postgres on every call (same answer as ``client.search``, that distance's scores; no entry).

    Args:
        client: the (sync or async) client whose namespace and connection string the cache uses; its own
            writes are seen at once. The cache opens connections of its own.
        budget_bytes: the most memory the cached matrices may take (LRU eviction beyond it; a memory
            larger than the whole budget is searched in Postgres instead).
        mode: ``"default"`` or ``"strict"`` (see :mod:`pgmem.cache`).
        kernel: ``"auto"`` (default: the cheaper of the two by recent timings), ``"numpy"`` or ``"faiss"``
            (see :mod:`pgmem.cache`).
        faiss_threads: OpenMP threads for FAISS (1 is fastest for single queries here; FAISS's setting is
            process-wide).
        approximate_above: memories with at least this many vectors are searched approximately, by an
            HNSW graph built in the background (exact search answers until it is ready); None (default):
            always exact. See "Approximate mode" in :mod:`pgmem.cache`.

    Raises:
        InvalidInput: a bad argument, or a client that knows no connection string
            (:meth:`pgmem.Client.secret_conninfo` is None).

    Example:
        >>> cache = VectorCache(client)
        >>> cache.search("role:Alice", "a snake game", k=5)
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        budget_bytes: int = 512 * 1024 * 1024,
        mode: Literal["default", "strict"] = "default",
        kernel: Literal["auto", "numpy", "faiss"] = "auto",
        faiss_threads: int = 1,
        approximate_above: int | None = None,
    ) -> None:
        if mode not in ("default", "strict"):
            raise InvalidInput(f"mode must be 'default' or 'strict', got {mode!r}")
        if kernel not in ("auto", "numpy", "faiss"):
            raise InvalidInput(f"kernel must be 'auto', 'numpy' or 'faiss', got {kernel!r}")
        if isinstance(faiss_threads, bool) or not isinstance(faiss_threads, int) or faiss_threads < 1:
            raise InvalidInput(f"faiss_threads must be a positive integer, got {faiss_threads!r}")
        if approximate_above is not None and (
            isinstance(approximate_above, bool) or not isinstance(approximate_above, int) or approximate_above < 1
        ):
            raise InvalidInput(f"approximate_above must be a positive integer or None, got {approximate_above!r}")
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 0:
            raise InvalidInput(f"budget_bytes must be a non-negative integer, got {budget_bytes!r}")
        conninfo = client.secret_conninfo()
        if conninfo is None:
            raise InvalidInput("the cache needs a client that knows its connection string")
        self._client = client
        self.mode = mode
        self.budget_bytes = budget_bytes
        self.kernel = kernel
        self.kernels = KernelChooser()
        self.approximate_above = approximate_above
        self.stats = CacheStats()
        # One lock guards the entries' map and the listener's state, so a search reads both in one go.
        self._lock = threading.Lock()
        self._entries = Entries()
        self._listener = Listener(conninfo, self._lock, self.stats, self._switched)
        self._reader = Reader(client, conninfo)
        self._faiss = Faiss(faiss_threads)
        # FAISS's C functions, called directly on the one-pass path (_search_current)
        self._ptr, self._knn, self._norm2 = self._faiss.ptr, self._faiss.knn, self._faiss.norm2
        # The memory's active model, looked up on the reader once and forgotten on a switch.
        self._models: dict[str, EmbeddingModel] = {}
        self._notify_key: str | None = None  # the namespace's, for the tags notifications name memories by
        client.vectors.add_change_listener(self._own_write)
        self._listener.start(30)
        # Someone must announce other processes' writes: this process stands for ringing the doorbell.
        self._doorbell: doorbell.Doorbell | None = doorbell.acquire(conninfo)
        if not self._listener.wait_beating(5):  # until then every search catches up first: correct, only slower
            log.warning("no doorbell beat within 5 s: the cache catches up before every answer until one arrives")

    # -- consistency ----------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the listener is connected and the doorbell's beats arrive (default mode answers without
        a round trip only then)."""
        return self._listener.connected

    def announced(self, memory: str) -> int:
        """The highest revision of ``memory`` this cache knows to be committed (announced by NOTIFY or read)."""
        with self._lock:
            return self._listener.announced.get(memory, 0)

    def wait_announced(self, memory: str, rev: int, timeout: float = 5.0) -> bool:
        """Wait until this cache knows revision ``rev`` of ``memory`` (e.g. one another process reported
        writing, from ``client.vectors.head_rev``); after that a default-mode answer includes it.

        Returns True at once when nothing of ``memory`` is cached (its next search loads from Postgres), False
        when ``timeout`` seconds passed first.
        """
        announced = self._listener.announced

        def known() -> bool:
            return not self._entries.holds(memory) or announced.get(memory, 0) >= rev

        with self._listener.cond:
            return self._listener.cond.wait_for(known, timeout)

    def _own_write(self, memory: str | None) -> None:
        with self._lock:
            self._entries.mark_dirty(memory)

    def _switched(self, memory: str) -> None:
        """The listener heard that ``memory`` switched models (called with the lock held)."""
        self._entries.drop(memory)
        self._models.pop(memory, None)
        self._client.vectors.forget_model(memory)

    def _state(self, memory: str) -> tuple[bool, int, int]:
        """The listener's state as far as ``memory`` is concerned: connected, epoch, announced revision."""
        listener = self._listener
        with self._lock:
            return listener.connected, listener.epoch, listener.announced.get(memory, 0)

    # -- entries --------------------------------------------------------------------------------------

    def _entry(self, memory: str, model: EmbeddingModel) -> tuple[Entry | None, bool]:
        """The memory's entry (None: over the budget), caught up as the mode requires, and whether the
        answer must still be confirmed against the memory's high-water mark (strict mode with nothing new
        seen: :meth:`_top_k_confirmed` reads it)."""
        key = (memory, model.id)
        listener = self._listener
        with self._lock:  # one acquisition: entry, recency and the listener's state together
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            connected, epoch, announced = listener.connected, listener.epoch, listener.announced.get(memory, 0)
        if entry is None:
            return self._load(memory, model), False
        with entry.lock:
            quiet = entry.epoch == epoch and announced <= entry.rev and entry.dirty == 0
            if quiet and entry.inherited:
                with self._lock:
                    quiet = not self._inherited_moved(entry)
            if quiet and self.mode == "default" and connected:
                self.stats.hits += 1
                return entry, False
            if quiet and self.mode == "strict" and self._reader.head_prepared and not entry.inherited:
                return entry, True
            self._catch_up(memory, entry, epoch, announced)
        return entry, False

    def _top_k_confirmed(
        self, memory: str, entry: Entry, queries: Vectors, scales: list[float], k: int, threshold: float | None
    ) -> list[list[tuple[str, float]]] | None:
        """Strict mode's answer when nothing new was seen: the high-water-mark read is sent first and the
        search runs while it travels, so the check costs what is left of one round trip after the search
        rather than a whole one before it. The answer stands if the mark equals the entry's revision (every
        transaction committed before the read is in the entry); None means catch up and search again.

        Above :data:`_OVERLAP_BELOW` vectors the mark is read first and the search runs after it: a backend
        woken while the product's BLAS threads hold both cores of a small machine takes one of them, and the
        overlapped answer came later (benchmarks/README.md, "the three ways to place the read")."""
        reader = self._reader
        with entry.lock:
            rev = entry.rev
            if entry.size >= _OVERLAP_BELOW:
                if reader.head(memory) != rev or reader.incarnation != entry.incarnation:
                    return None
                self.stats.checks += 1
                return self._top_k(entry, queries, scales, k, threshold)
            with reader.lock:
                pgconn = reader.send_head(memory)
                if pgconn is None:
                    return None
                try:
                    found = self._top_k(entry, queries, scales, k, threshold)
                finally:
                    head = reader.head_result(pgconn)
                incarnation = reader.incarnation
            if head != rev or incarnation != entry.incarnation:
                return None
        self.stats.checks += 1
        return found

    def _load(self, memory: str, model: EmbeddingModel) -> Entry | None:
        with self._lock:
            epoch = self._listener.epoch
        incarnation = self._reader.incarnation  # before the read: a reconnect during it reloads later
        rev, ids, matrix, inherited = self._read_vectors(memory, model)
        self.stats.loads += 1
        entry = Entry.loaded(model, rev, ids, matrix, epoch, inherited)
        entry.incarnation = incarnation
        if entry.nbytes > self.budget_bytes:
            self.stats.bypassed += 1
            return None
        with self._lock:
            self._saw(memory, entry)
            self.stats.evictions += self._entries.admit((memory, model.id), entry, self.budget_bytes)
        return entry

    def _read_vectors(
        self, memory: str, model: EmbeddingModel
    ) -> tuple[int, list[str], Vectors, tuple[tuple[str, int], ...]]:
        """A full load of the memory's vectors (a fork's through its lineage). The first time a fork names
        an ancestor this cache does not watch yet, the ancestor is watched and the load read again: its
        changes committed after the second read are announced (those before it are in it)."""
        while True:
            loaded = self._reader.memory_vectors(memory, model)
            with self._lock:
                unwatched = [a for a, _ in loaded[3] if a not in self._listener.tags.values()]
            if not unwatched:
                return loaded
            for ancestor in unwatched:
                self._watch(ancestor)

    def _inherited_moved(self, entry: Entry) -> bool:
        """Whether a memory a fork's entry inherits from was announced past the revision the entry reflects
        (call with the cache's lock held)."""
        announced = self._listener.announced
        return any(announced.get(a, 0) > rev for a, rev in entry.inherited)

    def _saw(self, memory: str, entry: Entry) -> None:
        """The entry was read at its revisions: they are known to be committed (call with the lock held)."""
        self._listener.saw(memory, entry.rev)
        for ancestor, rev in entry.inherited:
            self._listener.saw(ancestor, rev)

    def _catch_up(self, memory: str, entry: Entry, epoch: int, announced: int, *, confirmed: bool = False) -> None:
        """Bring the entry up to the memory's head (call with the entry's lock held). ``confirmed``: the
        high-water mark was already read and differs, so go straight to the changes."""
        dirty = entry.dirty
        quiet = entry.dirty == 0 and announced <= entry.rev and entry.epoch == epoch
        if quiet and entry.inherited:
            with self._lock:
                quiet = not self._inherited_moved(entry)
        if self.mode == "strict" and quiet and not confirmed:
            # Nothing announced: confirm with the memory's high-water mark (and its model) in one cheap read;
            # a fork's, with the marks of the memories it inherits from.
            if entry.inherited:
                heads = self._reader.lineage_heads(memory)
                same = entry.incarnation == self._reader.incarnation  # after the read: see Reader
                if same and heads == {memory: entry.rev, **dict(entry.inherited)}:
                    self.stats.checks += 1
                    return
            elif self._reader.head(memory) == entry.rev and entry.incarnation == self._reader.incarnation:
                self.stats.checks += 1
                return
        if entry.inherited:
            # A fork that inherits: its own log has its own changes, its ancestors' logs say that something it
            # inherits may have changed (or only what it does not inherit: their entries past its point). A
            # reload through its lineage is right in either case (correct first; a busy parent reloads it).
            head, floor, changes = entry.rev, None, list[tuple[Any, ...]]()
        else:
            head, floor, changes = self._reader.changes(memory, entry.model, entry.rev)
        self.stats.catch_ups += 1
        purged = floor is None or floor > entry.rev + 1  # revisions after this entry's are gone from the log
        listener = self._listener
        restarted = entry.incarnation != self._reader.incarnation  # read after the changes: see Reader
        if entry.inherited or head < entry.rev or (head > entry.rev and purged) or restarted:
            # The memory was recreated, the log was purged past this entry (or emptied), or the server
            # restarted since the entry was read: start over.
            with self._lock:
                seen = listener.announcements.get(memory, 0)
            entry.incarnation = self._reader.incarnation
            rev, ids, matrix, inherited = self._read_vectors(memory, entry.model)
            with self._lock:
                # A recreated memory counts its revisions from 0 again: forget the old incarnation's
                # announcements, unless one arrived during the reload (then stay stale and catch up again).
                if listener.announcements.get(memory, 0) == seen and listener.announced.get(memory, 0) > rev:
                    listener.announced[memory] = rev
            entry.reset(ids, matrix, rev, inherited)
        else:
            entry.replay(changes, head)
        with self._lock:
            self._saw(memory, entry)
        entry.dirty -= dirty
        entry.epoch = epoch

    def invalidate(self, memory: str | None = None) -> None:
        """Drop the cached vectors of ``memory`` (None: of every memory)."""
        with self._lock:
            self._entries.drop(memory)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._entries.nbytes

    def __len__(self) -> int:
        return len(self._entries)

    # -- search ---------------------------------------------------------------------------------------

    def search_vectors(
        self,
        memory: str,
        vectors: Any,
        k: int = 10,
        *,
        threshold: float | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[list[tuple[str, float]]]:
        """``[(message id, score)]`` per query vector, best first (ties by id); no message is fetched.
        ``metadata``: see :meth:`search`."""
        if type(k) is not int or not 1 <= k <= 1000:
            check_k(k)
        if threshold is not None:
            threshold = check_threshold(threshold, None)
        elif metadata is None:
            hits = self._search_current(memory, vectors, k)
            if hits is not None:
                return [hits]
        for _ in range(MODEL_SWITCH_ATTEMPTS):
            # the active model is remembered (forgotten on a switch); looked up on the reader only when unknown
            model = self._models.get(memory) or self._model(memory)
            check_threshold(threshold, model.distance)
            try:
                if model.distance != DEFAULT_DISTANCE or metadata is not None:
                    # The entries hold unit vectors (cosine) and no metadata: other distances, and searches
                    # filtered on metadata, are searched in Postgres.
                    self.stats.bypassed += 1
                    raw = np.asarray(vectors, dtype=np.float32)
                    rows = [as_query_vector(v, model.dimension) for v in (raw[None, :] if raw.ndim == 1 else raw)]
                    return self._reader.search(memory, model, np.stack(rows), k, threshold, metadata)
                queries, scales = query_matrix(self._faiss, vectors, model.dimension)
                entry, confirm = self._entry(memory, model)
                if entry is None:
                    return self._reader.search(memory, model, queries, k, threshold)
            except ModelChanged:
                self._model_changed(memory)
                continue
            if confirm:
                answer = self._top_k_confirmed(memory, entry, queries, scales, k, threshold)
                if answer is not None:
                    return answer
            with entry.lock:
                if confirm:
                    _, epoch, announced = self._state(memory)
                    try:
                        self._catch_up(memory, entry, epoch, announced, confirmed=True)
                    except ModelChanged:
                        self._model_changed(memory)
                        continue
                return self._top_k(entry, queries, scales, k, threshold)
        raise still_switching(memory)

    def _search_current(self, memory: str, vectors: Any, k: int) -> list[tuple[str, float]] | None:
        """The common search in one pass, or None to take :meth:`search_vectors`' general path: one query
        (numpy's float32, C-contiguous, of the model's dimension, finite and not zero) of a memory whose
        model is known, in the default mode, whose entry is current (listener connected, nothing announced
        past the entry, no own write pending) and searched exactly. Same checks, same answer, same
        statistics as the general path, in fewer steps: at 1k vectors, where part A's loaded scenario
        compares the cache with a bare ``faiss.knn``, the general path took 1.07x that call and this one
        1.02x (p50 of 10,000 interleaved searches). Nothing after the kernel choice sends the search back
        to the general path (the choice counts calls: it is made once per search).
        """
        model = self._models.get(memory)
        if (
            model is None
            or self.mode != "default"
            or type(vectors) is not np.ndarray
            or vectors.dtype is not FLOAT32
            or not vectors.flags.c_contiguous
        ):
            return None
        d = model.dimension
        if vectors.shape != (d,):
            return None
        norm2 = self._norm2(self._ptr(vectors), d)
        if not 0.0 < norm2 < math.inf:  # zero, overflowing or not finite: the general path says what
            return None
        key = (memory, model.id)
        listener = self._listener
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not listener.connected or (entry.inherited and self._inherited_moved(entry)):
                return None
            self._entries.move_to_end(key)
            epoch, announced = listener.epoch, listener.announced.get(memory, 0)
        with entry.lock:
            n = len(entry.ids)
            take = k if k < n else n
            out = entry.faiss_out
            if (
                entry.epoch != epoch
                or announced > entry.rev
                or entry.dirty
                or (self.approximate_above is not None and n >= self.approximate_above)
            ):
                return None
            self.stats.hits += 1
            scale = 1.0 / math.sqrt(norm2)
            kernel, timed = self.kernels.pick(n) if self.kernel == "auto" else (self.kernel, False)
            if (
                kernel != "faiss"
                or out is None
                or out[0] is not entry.matrix
                or out[1] != (take + 1 if take < n else take)
            ):
                # numpy's kernel, or FAISS's output arrays not made for this matrix and k yet
                return self._top_k(entry, vectors[None, :], [scale], k, None, picked=(kernel, timed))[0]
            started = time.perf_counter() if timed else 0.0
            _, wide, matrix_at, scores, rows, scores_at, rows_at = out
            self._knn(self._ptr(vectors), matrix_at, d, 1, n, wide, scores_at, rows_at)
            hits = one_ranked(entry, n, scores.tolist(), rows.tolist(), vectors, scale, take, None)
            if timed:
                self.kernels.record(kernel, n, time.perf_counter() - started)
            return hits

    def _model(self, memory: str) -> EmbeddingModel:
        """The memory's active model: remembered, else read on the reader (one round trip)."""
        model = self._models.get(memory)
        if model is not None:
            return model
        rows = self._reader.read("memory_models", {"memory": check_key(memory)})
        active = [model_of(r) for r in map(MemoryModelRow._make, rows) if r.status == "active"]
        if not active:
            raise InvalidInput(f"memory {memory!r} has no embedding model; call client.vectors.enable() first")
        self._watch(memory)
        self._models[memory] = active[0]
        return active[0]

    def _watch(self, memory: str) -> None:
        """Match the memory's notifications from now on (before its first load: an announcement that
        arrives while the entry loads must count). Reads the namespace's notification key the first time."""
        if self._notify_key is None:
            rows = self._reader.read("notify_key", {})
            self._notify_key = str(rows[0][0])
        self._listener.watch(notify.tag(self._notify_key, memory), memory)

    def _model_changed(self, memory: str) -> None:
        """The memory is searched with another model now: drop its entries and look the model up again."""
        self.invalidate(memory)
        self._models.pop(memory, None)
        self._client.vectors.forget_model(memory)

    def _top_k(
        self,
        entry: Entry,
        queries: Vectors,
        scales: list[float],
        k: int,
        threshold: float | None,
        picked: tuple[str, bool] | None = None,
    ) -> list[list[tuple[str, float]]]:
        """Per query, the ``k`` best of the entry's vectors (call with the entry's lock held): from its HNSW
        graph in approximate mode once built, else by the exact kernel ``picked`` for this search (and
        whether to time it) or chosen now."""
        n = entry.size
        if n == 0:
            return [[] for _ in queries]
        if self.approximate_above is not None and n >= self.approximate_above:
            if entry.ann is not None:
                if entry.ann.worn and entry.building is None:
                    start_build(entry, self._faiss.module, self.stats)  # the old graph answers meanwhile
                return rank(entry.ann.search(queries, min(k, n)), scales, k, threshold)
            if entry.building is None and not entry.ann_failed:
                start_build(entry, self._faiss.module, self.stats)
        take = k if k < n else n
        if picked is not None:
            kernel, timed = picked
        else:
            kernel, timed = self.kernels.pick(n) if self.kernel == "auto" else (self.kernel, False)
        started = time.perf_counter() if timed else 0.0
        if kernel == "faiss":
            out = faiss_ranked(self._faiss, entry, n, queries, scales, take, threshold)
        else:
            out = numpy_ranked(entry, n, queries, scales, take, threshold)
        if timed:
            self.kernels.record(kernel, n, (time.perf_counter() - started) / len(queries))
        return out

    def approximate_ready(self, memory: str) -> bool:
        """Whether ``memory``'s entry (with its active model) has its approximate index built and attached."""
        model = self._models.get(memory)
        if model is None:
            return False
        with self._lock:
            entry = self._entries.get((memory, model.id))
        return entry is not None and entry.ann is not None

    def search(
        self,
        memory: str,
        query: str | Any,
        k: int = 10,
        *,
        threshold: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        label: str | None = None,
    ) -> list[SearchHit]:
        """The ``k`` messages of ``memory`` closest to ``query`` (a text, embedded with the memory's model,
        or a vector), as :class:`pgmem.planning.search.SearchHit` (their messages fetched in one round trip).

        ``metadata``: only messages whose metadata pass the filter (as in
        :meth:`pgmem.VectorRepository.search`). The cache holds vectors, not metadata, so such a search
        runs in Postgres (complete under the filter; counted in ``stats.bypassed``).

        With the client's retrieval log on, the hits are recorded (kind ``cache``, with ``label``) by one
        more statement; :meth:`search_vectors` never logs."""
        if metadata is not None:
            SearchFilters(memory, metadata=metadata)  # bad filters fail here, before anything runs
        model = self._model(memory)
        if isinstance(query, str):
            embedder = self._client.vectors.embedder_for(model.name, model.dimension)
            if embedder is None:
                raise EmbeddingError(f"no embedder for model {model.name!r} in this client; search with a vector")
            vector = check_vectors(embedder.embed([query]), 1, model.dimension, model.name)[0]
        else:
            vector = as_query_vector(query, model.dimension)
        (found,) = self.search_vectors(memory, vector, k, threshold=threshold, metadata=metadata)
        rows = self._reader.read("get_messages", {"ids": [i for i, _ in found]}, MESSAGES)
        messages = {m.id: m for m in map(decode, rows)}
        if self._client.retrieval_log:
            hits = [(i, s) for i, s in found if i in messages]
            text = query if isinstance(query, str) else None
            self._reader.read("log_retrieval", retrieval_params("cache", memory, text, k, hits, label))
        return [SearchHit(messages[i], s, distance_of(model.distance, s)) for i, s in found if i in messages]

    def close(self) -> None:
        """Stop the listener and drop every entry."""
        self._listener.stop()
        self._reader.close()
        self._client.vectors.remove_change_listener(self._own_write)
        self._listener.join(5)
        if self._doorbell is not None:
            doorbell.release(self._doorbell)
            self._doorbell = None
        self.invalidate()

    def __enter__(self) -> VectorCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
