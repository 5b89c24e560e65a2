"""The FAISS hot cache: a process-local mirror of memories' vectors for low-latency exact search.

One entry per (namespace, memory, embedding model), loaded from Postgres on first use and kept within a
byte budget (least recently used entries are dropped first). It is derived state: dropping it loses
nothing.

Consistency. Every change to a memory's set of vectors is appended to ``pgmem.vector_log`` by triggers,
with a per-memory revision in commit order, and announced by ``NOTIFY pgmem_vectors`` once it has
committed (by the process that rings the database's doorbell, :mod:`pgmem.doorbell`; naming the memory by
a tag only its namespace's clients can compute: :mod:`pgmem.planning.notify`). The cache keeps each
entry's revision and catches up by replaying the log (one round trip; a full reload when the log was
purged past it).

* ``mode="default"``: answer from the cache while the listener connection is up, the doorbell's beats
  arrive, and no notification or own write newer than the entry has arrived; otherwise catch up first.
  Staleness is bounded by the doorbell's round (about a millisecond: it polls committed rings every
  millisecond) plus notification delivery. A dropped listener, or beats missing for
  :data:`pgmem.doorbell.BEAT_TIMEOUT` (the doorbell's holder died or stalled and nobody has taken over
  yet), marks every entry stale until it has caught up again. The process's own writes (through the
  client the cache was built on) mark their memory stale before the write call returns, so a process
  always reads its own writes. Announcements are kept per memory, so one that arrives while an entry is
  being loaded still counts. To read a peer's write in this mode, wait for its revision:
  ``cache.wait_announced(memory, rev)`` with ``rev`` from the peer's ``client.vectors.head_rev(memory)``.
* ``mode="strict"``: every answer is confirmed against the memory's high-water mark, read in Postgres
  after the search began: the answer reflects every transaction committed before that. When nothing
  new was announced, the read is one round trip: for a memory of fewer than 2,048 vectors it is sent first
  and the local search runs while it travels; for a larger one it is read before the search (a backend
  answering during the matrix product takes a core from its BLAS threads, which cost more than the round
  trip on 2 cores). When the mark moved, the entry catches up and the search runs again.

Answers equal an exact search in Postgres over the same rows: same ids, same order (ties by id), scores
as cosine similarities. The cache mirrors memories whose model ranks by cosine distance; a memory of an
``l2`` or ``inner_product`` model (``client.vectors.enable(..., distance=...)``) is searched exactly in
Postgres instead, with that distance's scores (counted in ``stats.bypassed``). Search is brute force
(exact), by one of two kernels:

* ``numpy``: a matrix-vector product (OpenBLAS's gemv, on its thread pool) and ``argpartition``. The
  fastest on an idle machine: 29 / 235 / 1,121 / 3,820 µs at 1k / 10k / 30k / 100k 384-d vectors (single
  queries, p50, 2 cores), against 27 / 407 / 1,525 / 5,494 µs for ``faiss.knn`` on one thread.
* ``faiss``: FAISS's ``knn_inner_product`` on one OpenMP thread (its own SIMD loop and a heap, no BLAS
  thread pool; called directly, with the entry's output arrays: at 1k the cost around the scan counts).
  Beside CPU-bound processes it holds up where the BLAS pool collapses: with other processes busy on the same 2
  cores, numpy took 9,489 / 12,167 µs at 10k / 30k against 637 / 1,678 µs.

``kernel="auto"`` (the default) picks per search, by the recent cost of each kernel on entries of that
size: it times searches (every one from :data:`TIME_EVERY_ABOVE`, one in :data:`SAMPLE_EVERY` below), keeps
the last few timings of each kernel per size class (powers of two), uses the cheaper one and gives the other
a probe every :data:`PROBE_EVERY` searches, so it moves to FAISS when the machine gets busy and back when it
is quiet again (``benchmarks/vectors.py`` part A, loaded scenario).
Both kernels give the same answer (ties at the k-th place are resolved by id either way).

Approximate mode (``approximate_above=N``, off by default). A memory of at least N vectors gets an HNSW
graph (``faiss.IndexHNSWFlat``, M=32, inner product on the unit vectors), built in a background thread
from a copy of the entry; exact search answers until it is attached. The build calibrates ``efSearch``:
the smallest step whose recall@10 against exact search reaches :data:`ANN_CALIBRATION_RECALL` for
rows of the memory held out of the graph (inserted after the calibration; near-copies of stored rows
left out) as queries. The graph follows the same revision protocol as the matrix: every change the entry
replays (a peer's, announced by NOTIFY, or the process's own) is applied to it too (an added vector is
inserted; a removed one is marked dead and skipped inside the graph walk, so k live hits still come
back); changes made while a build runs are journalled and replayed before the graph is attached; once a
fifth of it is dead a new graph is built in the background while the old one answers; a reload drops it
and a later search builds a new one. So an answer reflects every announced revision exactly as in exact
mode; only its ranking is approximate (scores are exact cosine similarities of the vectors it returns).
"""

from __future__ import annotations

import json
import logging
import math
import mmap
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import pq, sql

from pgmem import doorbell
from pgmem.checks import check_key
from pgmem.embeddings import Vectors, check_vectors
from pgmem.errors import EmbeddingError, InvalidInput, PgmemError, redact, translate
from pgmem.planning import notify
from pgmem.planning import statements as _queries
from pgmem.planning.distances import DEFAULT_DISTANCE, check_threshold, distance_of, max_distance
from pgmem.planning.rows import MemoryModelRow, MemoryVectorRow, VectorChangeRow, decode
from pgmem.planning.search import (
    MODEL_SWITCH_ATTEMPTS,
    EmbeddingModel,
    SearchFilters,
    SearchHit,
    as_query_vector,
    check_k,
    model_of,
    retrieval_params,
    statement,
    still_switching,
    switched,
    unpack_vectors,
    vector_hits,
)

if TYPE_CHECKING:
    from pgmem import AsyncClient, Client

__all__ = ["CacheStats", "VectorCache"]

log = logging.getLogger("pgmem.cache")

CHANNEL = "pgmem_vectors"
Q = _queries.load("vectors")
MESSAGES = _queries.load("messages")
_HEAD_STATEMENT = b"pgmem_cache_head"
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_ID_BYTES = 120  # a Python str id and its dict slot, roughly
#: Strict mode overlaps its high-water-mark read with the search of memories smaller than this (see
#: ``VectorCache._top_k_confirmed``); larger ones read it first.
_OVERLAP_BELOW = 2048
_FLOAT32 = np.dtype(np.float32)


@dataclass
class CacheStats:
    """Counters since the cache was created."""

    hits: int = 0
    checks: int = 0  # strict mode: answered after one high-water-mark read found nothing new
    loads: int = 0
    catch_ups: int = 0
    evictions: int = 0
    bypassed: int = 0
    notifications: int = 0
    reconnects: int = 0
    silences: int = 0  # times the doorbell's beats stopped for doorbell.BEAT_TIMEOUT (entries then catch up)
    approximate_builds: int = 0
    approximate_failures: int = 0  # builds that raised: those memories are searched exactly (logged)


@dataclass
class _Entry:
    model: EmbeddingModel
    rev: int
    ids: list[str]
    matrix: Vectors  # rows [0, len(ids)) are live, normalised
    row_of: dict[str, int]
    dirty: int = 0  # own writes since the last catch-up
    epoch: int = -1  # the listener connection it was last current under
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Approximate mode: the IVF index once built, and the changes made while a build runs (replayed into
    # the new index before it is attached). ``generation`` moves on a reload: a build of an older
    # generation is thrown away.
    ann: _Ann | None = None
    building: list[tuple[int, str, Vectors | None]] | None = None
    generation: int = 0
    ann_failed: bool = False
    # The FAISS kernel's output arrays for one query and their C pointers, with the matrix's pointer: made
    # again when the matrix is replaced or k changes (VectorCache._faiss_ranked; under the lock).
    faiss_out: tuple[Any, ...] | None = None

    @property
    def size(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        ann = 0 if self.ann is None else self.ann.nbytes
        matrix = int(self.matrix.nbytes)
        if matrix >= _HUGE_FROM:  # on huge pages (_zeros): whole ones
            matrix = -(-matrix // _HUGE_PAGE) * _HUGE_PAGE
        return matrix + _ID_BYTES * len(self.ids) + ann

    def reset(self, ids: Sequence[str], matrix: Vectors, rev: int) -> None:
        """Replace the contents (a reload): any index or build of the old contents is dropped."""
        self.generation += 1
        self.ann, self.building, self.ann_failed = None, None, False
        self.ids, self.row_of, self.rev = [], {}, rev
        self.matrix, self.faiss_out = _zeros(max(16, len(ids)), self.model.dimension), None
        for message_id, vector in zip(ids, matrix, strict=True):
            self.add(message_id, vector)

    def add(self, message_id: str, vector: Vectors) -> None:
        if message_id in self.row_of:
            return
        n = len(self.ids)
        if n == self.matrix.shape[0]:
            grown = _zeros(max(16, 2 * n), self.matrix.shape[1])
            grown[:n] = self.matrix[:n]
            self.matrix, self.faiss_out = grown, None  # (which held the old matrix)
        self.matrix[n] = _unit(vector)
        self.ids.append(message_id)
        self.row_of[message_id] = n
        if self.ann is not None:
            self.ann.add(message_id, self.matrix[n])
        if self.building is not None:
            self.building.append((1, message_id, self.matrix[n].copy()))

    def remove(self, message_id: str) -> None:
        row = self.row_of.pop(message_id, None)
        if row is None:
            return
        if self.ann is not None:
            self.ann.remove(message_id)
        if self.building is not None:
            self.building.append((-1, message_id, None))
        last = len(self.ids) - 1
        if row != last:
            moved = self.ids[last]
            self.matrix[row] = self.matrix[last]
            self.ids[row] = moved
            self.row_of[moved] = row
        self.ids.pop()


#: Approximate mode: recall@10 the build's calibration asks of ``efSearch`` (above the promised 0.95).
ANN_CALIBRATION_RECALL = 0.97
#: HNSW's graph degree and construction depth (FAISS's ``M`` and ``efConstruction``).
ANN_M = 32
ANN_EF_CONSTRUCTION = 64
_ANN_CALIBRATION_QUERIES = 64
# From 64: held-out MiniLM queries (not rows of the memory) measured recall@10 0.93 at efSearch 32 and
# 0.975 at 64 on 100k vectors whose held-out rows calibrated at 32 (benchmarks/vectors.py, part A).
_ANN_EF_SEARCH = (64, 128, 256, 512)
_ANN_NEAR_COPY = 0.95  # cosine similarity above which a calibration query has a near-copy in the graph


class _Ann:
    """An HNSW graph (``faiss.IndexHNSWFlat``, inner product on the unit vectors) over one entry's vectors,
    kept in step with the entry: :meth:`add` inserts into the graph; :meth:`remove` marks the vector's key
    dead (HNSW cannot delete), and searches skip dead keys inside the graph walk (an ID selector), so they
    still return k live vectors. The entry rebuilds the graph once a fifth of it is dead."""

    def __init__(self, faiss: Any, index: Any, ef_search: int, ids: list[str]) -> None:
        self._faiss = faiss
        self.index = index
        self.ef_search = ef_search
        self.id_of: list[str | None] = list(ids)
        self.key_of: dict[str, int] = {message_id: key for key, message_id in enumerate(ids)}
        self.dead: set[int] = set()
        self._params: Any = None

    @property
    def nbytes(self) -> int:
        per_vector = int(self.index.d) * 4 + 2 * ANN_M * 4 + 8 + _ID_BYTES
        return int(self.index.ntotal) * per_vector

    @property
    def worn(self) -> bool:
        """Whether enough of the graph is dead that a rebuild pays."""
        return len(self.dead) * 5 > max(1, int(self.index.ntotal))

    def add(self, message_id: str, unit: Vectors) -> None:
        if message_id in self.key_of:
            return
        self.key_of[message_id] = len(self.id_of)
        self.id_of.append(message_id)
        self.index.add(np.ascontiguousarray(unit[None, :], np.float32))

    def remove(self, message_id: str) -> None:
        key = self.key_of.pop(message_id, None)
        if key is not None:
            self.id_of[key] = None
            self.dead.add(key)
            self._params = None

    def _search_params(self) -> Any:
        if self._params is None:
            faiss = self._faiss
            params = faiss.SearchParametersHNSW()
            params.efSearch = self.ef_search
            if self.dead:
                dead = np.fromiter(self.dead, np.int64, len(self.dead))
                batch = faiss.IDSelectorBatch(dead)
                params.sel = faiss.IDSelectorNot(batch)
                params._keep = (dead, batch)  # the selectors hold pointers into these
            self._params = params
        return self._params

    def search(self, queries: Vectors, k: int) -> list[tuple[list[float], list[str]]]:
        """Per query, up to ``k`` live (products, message ids)."""
        scores, keys = self.index.search(queries, k, params=self._search_params())
        out = []
        for s, r in zip(scores.tolist(), keys.tolist(), strict=True):
            found = [(p, self.id_of[key]) for p, key in zip(s, r, strict=True) if key >= 0]
            out.append(([p for p, i in found if i is not None], [i for _, i in found if i is not None]))
        return out

    @classmethod
    def build(cls, faiss: Any, ids: list[str], matrix: Vectors) -> _Ann:
        """Build the graph over ``matrix`` (unit rows), then calibrate ``efSearch``: the smallest of
        :data:`_ANN_EF_SEARCH` whose recall@10 against the exact answer reaches
        :data:`ANN_CALIBRATION_RECALL` for rows of the memory held out of the graph as queries."""
        n, d = matrix.shape
        index = faiss.IndexHNSWFlat(d, ANN_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ANN_EF_CONSTRUCTION
        # Calibration queries are rows of the memory held out of the graph until it is calibrated: texts
        # like the memory's, absent from the graph, as a real query is. They are inserted last.
        rng = np.random.default_rng(n)
        held = np.sort(rng.choice(n, min(n // 10, _ANN_CALIBRATION_QUERIES), replace=False))
        order = np.concatenate([np.setdiff1d(np.arange(n), held), held])
        inserted = np.ascontiguousarray(matrix[order], np.float32)
        rest = n - len(held)
        index.add(inserted[:rest])
        ann = cls(faiss, index, _ANN_EF_SEARCH[-1], [ids[i] for i in order])
        k = min(10, rest)
        if len(held) and k:
            queries, truth = [], []
            for q in inserted[rest:]:
                products = inserted[:rest] @ q
                best = np.argpartition(products, rest - k)[rest - k :]
                # a held-out row with a near-copy in the graph is an easy query: calibrate on the others
                # (unless nearly all are such), as a new text is rarely a copy of a stored one
                queries.append((float(products[best].max()) < _ANN_NEAR_COPY, q))
                truth.append(set(best.tolist()))
            novel = [i for i, (far, _) in enumerate(queries) if far]
            keep = novel if len(novel) >= len(queries) // 4 else list(range(len(queries)))
            truth = [truth[i] for i in keep]
            queries_matrix = np.stack([queries[i][1] for i in keep])
            for ef in _ANN_EF_SEARCH:
                params = faiss.SearchParametersHNSW()
                params.efSearch = ef
                _, found = index.search(queries_matrix, k, params=params)
                hits = sum(len(t & set(f.tolist())) for t, f in zip(truth, found, strict=True))
                if hits >= ANN_CALIBRATION_RECALL * k * len(truth):
                    ann.ef_search = ef
                    break
        index.add(inserted[rest:])
        return ann


class _ModelChanged(Exception):
    """The memory is searched with another model now: drop the entry, look the model up again."""


#: With ``kernel="auto"``, every this many searches of a size class go to the kernel not in use (times how
#: many times slower it was, up to :data:`PROBE_MAX`).
PROBE_EVERY = 32
PROBE_MAX = 1024
#: A size class whose cheaper kernel takes less than this (seconds per query) has one search in
#: :data:`SAMPLE_EVERY` timed (and every probe); above it, every search. Timing a search and recording it
#: cost ~3 µs after a scan of 1k vectors (the chooser's state is out of the CPU caches by then), a tenth
#: of the scan itself; at 200 µs it is 1.5%.
TIME_EVERY_ABOVE = 200e-6
SAMPLE_EVERY = 8


class KernelChooser:
    """Which exact-search kernel is cheaper now, per size class of entries (powers of two).

    Keeps the last :data:`KernelChooser.KEEP` timings (seconds per query) of each kernel per class; picks
    the one with the lower median, and the other one every :data:`PROBE_EVERY` searches of that class
    (scaled by how much slower it was, so probing costs about 1/PROBE_EVERY of the search time), so a
    change of load (other processes taking the cores, or leaving them) is noticed within a few probes. A
    kernel never timed in a class is tried first. Every probe is timed, and every search of a class whose
    cheaper kernel takes :data:`TIME_EVERY_ABOVE` or more; below that one search in :data:`SAMPLE_EVERY`
    (there the cheaper kernel turning slow is noticed after about 3 x SAMPLE_EVERY searches instead of 3).
    Lock-free: a lost timing under a race costs nothing."""

    KERNELS = ("numpy", "faiss")
    KEEP = 5

    def __init__(self) -> None:
        self._times: dict[tuple[int, str], deque[float]] = {}
        self._medians: dict[tuple[int, str], float] = {}
        self._calls: dict[int, int] = {}
        # Per size class, recomputed on every timing: the probe interval, the timing interval, and what
        # pick returns for a probe, for a timed search and for an untimed one.
        self._order: dict[int, tuple[int, int, tuple[str, bool], tuple[str, bool], tuple[str, bool]]] = {}

    def pick(self, n: int) -> tuple[str, bool]:
        """The kernel for a search of ``n`` vectors, and whether to time it (then :meth:`record` it)."""
        size = n.bit_length()
        order = self._order.get(size)
        if order is None:  # a kernel not timed yet in this class goes first
            return next((k for k in self.KERNELS if not self._times.get((size, k))), self.KERNELS[0]), True
        every, sample, probe, timed, untimed = order
        calls = self._calls[size] = self._calls.get(size, 0) + 1
        if calls % every == 0:
            return probe
        return timed if calls % sample == 0 else untimed

    def record(self, kernel: str, n: int, seconds: float) -> None:
        """A search of ``n`` vectors by ``kernel`` took ``seconds`` per query."""
        size = n.bit_length()
        key = (size, kernel)
        times = self._times.get(key)
        if times is None:
            times = self._times[key] = deque(maxlen=self.KEEP)
        times.append(seconds)
        ordered = sorted(times)
        mine = self._medians[key] = ordered[len(ordered) // 2]  # only this kernel's median has moved
        other = self.KERNELS[0] if kernel == self.KERNELS[1] else self.KERNELS[1]
        theirs = self._medians.get((size, other))
        if theirs is None:
            return
        # equal medians: the first by name, as sorting (median, name) pairs would
        if (mine, kernel) < (theirs, other):
            cheaper, fast, slow = kernel, mine, theirs
        else:
            cheaper, other, fast, slow = other, kernel, theirs, mine
        # A probe of a kernel r times as slow costs r searches: probe it r times less often (at most
        # PROBE_MAX apart), so that probing never costs more than ~1/PROBE_EVERY of the search time.
        ratio = slow / fast if fast > 0 else 1.0
        every = PROBE_EVERY if ratio <= 1.0 else min(PROBE_MAX, int(PROBE_EVERY * ratio))
        sample = 1 if fast >= TIME_EVERY_ABOVE else SAMPLE_EVERY
        self._order[size] = (every, sample, (other, True), (cheaper, True), (cheaper, False))

    def snapshot(self) -> dict[str, dict[str, float]]:
        """The median timing (µs per query) of each kernel per size class (``"<=2^b"``), for reports."""
        out: dict[str, dict[str, float]] = {}
        for (size, kernel), times in sorted(self._times.items()):
            if times:
                out.setdefault(f"<=2^{size}", {})[kernel] = round(statistics.median(times) * 1e6, 1)
        return out


_HUGE_PAGE = 2 << 20
#: Entry matrices from this size on are put on transparent huge pages (see :func:`_zeros`).
_HUGE_FROM = _HUGE_PAGE // 2


def _zeros(rows: int, dimension: int) -> Vectors:
    """A zeroed float32 matrix for an entry's vectors. From :data:`_HUGE_FROM` (1 MB) on, fresh memory the
    kernel may back with transparent huge pages: a private anonymous mapping, ``madvise(MADV_HUGEPAGE)``
    before the first touch, the matrix starting on a 2 MB boundary. The scan is held up by TLB misses on
    4 KB pages: FAISS over 10k 384-d vectors took 760-875 µs where 0-16% of the matrix was on huge pages and
    465-525 µs where 82-100% was, over 1k 28-29 µs on one huge page against 31-35 µs (same process, same
    values, interleaved); ``np.zeros`` (numpy does advise huge pages from 4 MB) often returns heap memory
    already mapped with 4 KB pages. The cost: the last huge page is whole (counted in ``_Entry.nbytes``).
    Elsewhere (no ``MADV_HUGEPAGE``), and below 1 MB: ``np.zeros``."""
    nbytes = rows * dimension * 4
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None or nbytes < _HUGE_FROM:
        return np.zeros((rows, dimension), np.float32)
    # private (shared anonymous memory is shmem, whose huge pages are off by default); zero-filled;
    # unmapped when the last view of it goes
    region = mmap.mmap(-1, nbytes + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(advice)
    raw = np.frombuffer(region, np.uint8)
    start = -raw.ctypes.data % _HUGE_PAGE
    matrix: Vectors = raw[start : start + nbytes].view(np.float32).reshape(rows, dimension)
    return matrix


def _unit(vectors: Vectors) -> Vectors:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    out: Vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    return out


class VectorCache:
    """Process-local exact vector search over memories, kept consistent with Postgres. It mirrors memories
    searched by cosine distance; one whose model ranks by ``l2`` or ``inner_product`` is searched exactly
    in Postgres on every call (same answer as ``client.search``, that distance's scores; no entry).

    Args:
        client: the (sync) client whose namespace and connections the cache uses; its own writes are
            seen at once.
        budget_bytes: the most memory the cached matrices may take (LRU eviction beyond it; a memory
            larger than the whole budget is searched in Postgres instead).
        mode: ``"default"`` or ``"strict"`` (see the module docstring).
        kernel: ``"auto"`` (default: the cheaper of the two by recent timings), ``"numpy"`` or ``"faiss"``
            (see the module docstring).
        faiss_threads: OpenMP threads for FAISS (1 is fastest for single queries here; FAISS's setting is
            process-wide).
        approximate_above: memories with at least this many vectors are searched approximately, by an
            IVF index built in the background (exact search answers until it is ready); None (default):
            always exact. See "Approximate mode" in the module docstring.

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
        if client._conninfo is None:
            raise InvalidInput("the cache needs a client that knows its connection string")
        self._client = client
        self.mode = mode
        self.budget_bytes = budget_bytes
        self.kernel = kernel
        self.kernels = KernelChooser()
        self.approximate_above = approximate_above
        self.stats = CacheStats()
        self._entries: OrderedDict[tuple[str, int], _Entry] = OrderedDict()
        # The highest revision NOTIFY announced per memory, and how many announcements it has had. Kept per
        # memory rather than per entry: an announcement that arrives while an entry is being loaded (before
        # it is in the map) must still count against it.
        self._announced: dict[str, int] = {}
        self._announcements: dict[str, int] = {}
        self._lock = threading.Lock()
        self._announced_cond = threading.Condition(self._lock)
        self._closed = False
        self._listening = threading.Event()
        self._connected = False  # the listener is up and the doorbell's beats arrive
        self._listener_up = False
        self._beat_at = 0.0  # time.monotonic() of the last beat
        self._beating = threading.Event()
        self._epoch = 0  # bumped whenever the cache starts trusting its listener again
        self._listener_conn: psycopg.Connection[Any] | None = None
        # The cache's own connection for its reads (no pool checkout on the strict path).
        self._reader: psycopg.Connection[Any] | None = None
        self._reader_lock = threading.Lock()
        self._head_prepared = False
        self._namespace_bytes = client.namespace.encode()
        import faiss

        faiss.omp_set_num_threads(faiss_threads)
        self._faiss = faiss
        # FAISS's C functions, called directly on the hot path (see _faiss_ranked and _queries)
        self._ptr = faiss.swig_ptr
        self._knn = faiss.knn_inner_product
        self._norm2 = faiss.fvec_norm_L2sqr
        # The memory's active model, looked up on the reader once and forgotten on a switch.
        self._models: dict[str, EmbeddingModel] = {}
        # Notifications name memories by tag (pgmem.planning.notify): the tags of the memories looked at.
        self._notify_key: str | None = None
        self._tags: dict[str, str] = {}
        client.vectors.add_change_listener(self._own_write)
        self._thread = threading.Thread(target=self._listen, name="pgmem-cache-listener", daemon=True)
        self._thread.start()
        if not self._listening.wait(30):
            raise PgmemError("the cache's listener could not connect within 30 s")
        # Someone must announce other processes' writes: this process stands for ringing the doorbell.
        self._doorbell: doorbell.Doorbell | None = doorbell.acquire(client._conninfo or "")
        if not self._beating.wait(5):  # until then every search catches up first: correct, only slower
            log.warning("no doorbell beat within 5 s: the cache catches up before every answer until one arrives")

    # -- consistency ----------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the listener is connected and the doorbell's beats arrive (default mode answers without
        a round trip only then)."""
        return self._connected

    def _listen(self) -> None:
        delay = 0.05
        while not self._closed:
            try:
                conn = psycopg.Connection.connect(self._client._conninfo or "", autocommit=True)
            except psycopg.Error as exc:
                log.warning("cache listener cannot connect: %s", redact(str(exc)))
                self._listening.set()
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self._listener_conn = conn
            try:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
                with self._lock:
                    self._listener_up = True  # trusted from the next beat on (_notified)
                self._listening.set()
                delay = 0.05
                while not self._closed:
                    for note in conn.notifies(timeout=doorbell.BEAT_SECONDS):
                        self._notified(note.payload)
                    self._check_beats()
            except psycopg.Error as exc:
                if not self._closed:
                    log.warning("cache listener lost its connection: %s", redact(str(exc)))
            finally:
                with self._lock:
                    self._listener_up = False
                    self._connected = False  # every entry is stale until it has caught up
                    self.stats.reconnects += 0 if self._closed else 1
                try:
                    conn.close()
                except psycopg.Error:
                    pass
                self._listener_conn = None

    def _check_beats(self) -> None:
        with self._lock:
            if self._connected and time.monotonic() - self._beat_at > doorbell.BEAT_TIMEOUT:
                self._connected = False  # nobody rings: what peers wrote since may not have been announced
                self.stats.silences += 1

    def _beat(self) -> None:
        # Every ring committed before this beat's round has been announced, and heard (in order) before it.
        with self._lock:
            self._beat_at = time.monotonic()
            if self._listener_up and not self._connected:
                self._epoch += 1  # entries caught up before now may have missed announcements
                self._connected = True
        self._beating.set()

    def _notified(self, payload: str) -> None:
        if payload == doorbell.BEAT:
            self._beat()
            return
        # ["<tag>", rev]: the tag of a memory (pgmem.planning.notify), which names it to this namespace only
        try:
            tag, rev = json.loads(payload)
        except (ValueError, TypeError):
            return
        with self._lock:
            memory = self._tags.get(tag) if isinstance(tag, str) else None
        if memory is None or not isinstance(rev, int):
            return  # another namespace's memory, or one of ours this cache never looked at
        self.stats.notifications += 1
        with self._lock:
            self._announcements[memory] = self._announcements.get(memory, 0) + 1
            if rev < 0:  # the memory switched models (pgmem.vectors promote)
                for stale in [k for k in self._entries if k[0] == memory]:
                    del self._entries[stale]
                self._models.pop(memory, None)
                self._client.vectors.forget_model(memory)
            elif rev > self._announced.get(memory, 0):
                self._announced[memory] = rev
            self._announced_cond.notify_all()

    def _saw(self, memory: str, rev: int) -> None:
        """A load or catch-up read revision ``rev``: it is known to be committed (call with the lock held)."""
        if rev > self._announced.get(memory, 0):
            self._announced[memory] = rev
            self._announced_cond.notify_all()

    def announced(self, memory: str) -> int:
        """The highest revision of ``memory`` this cache knows to be committed (announced by NOTIFY or read)."""
        with self._lock:
            return self._announced.get(memory, 0)

    def wait_announced(self, memory: str, rev: int, timeout: float = 5.0) -> bool:
        """Wait until this cache knows revision ``rev`` of ``memory`` (e.g. one another process reported
        writing, from ``client.vectors.head_rev``); after that a default-mode answer includes it.

        Returns True at once when nothing of ``memory`` is cached (its next search loads from Postgres), False
        when ``timeout`` seconds passed first.
        """

        def known() -> bool:
            cached = any(name == memory for name, _ in self._entries)
            return not cached or self._announced.get(memory, 0) >= rev

        with self._announced_cond:
            return self._announced_cond.wait_for(known, timeout)

    def _own_write(self, memory: str | None) -> None:
        with self._lock:
            for (key, _), entry in self._entries.items():
                if memory is None or key == memory:
                    entry.dirty += 1

    def drop_connection_for_test(self) -> None:
        """Close the listener's connection as a network failure would (tests of the stale marking)."""
        conn = self._listener_conn
        if conn is not None:
            conn.pgconn.finish()

    # -- reads --------------------------------------------------------------------------------------

    def _read(self, name: str, params: dict[str, Any], queries: dict[str, Any] = Q) -> list[tuple[Any, ...]]:
        """Run a named query (of sql/vectors.sql unless ``queries`` says otherwise) on the cache's own
        connection, reconnecting once if it broke. The cache reads on its own connections (a listener and
        this reader), never the client's: it serves a sync and an async client alike."""
        params = {"ns": self._client.namespace, **params}
        with translate(), self._reader_lock:  # a driver error leaves as pgmem's (ConnectionFailed, ...)
            for attempt in (1, 2):
                try:
                    reader = self._reader_connection()
                    cur = reader.execute(queries[name], params, binary=True, prepare=True)
                    return cur.fetchall() if cur.pgresult is not None and cur.pgresult.status == _TUPLES_OK else []
                except psycopg.OperationalError:
                    self._drop_reader()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _memory_vectors(self, memory: str, model: EmbeddingModel) -> tuple[int, list[str], Vectors]:
        rows = self._read("memory_vectors", {"memory": memory, "model": model.id})
        found = [MemoryVectorRow._make(row) for row in rows]
        rev = int(found[0].rev) if found else 0
        kept = [(r.message_id, r.vector) for r in found if r.message_id is not None and r.vector is not None]
        return rev, [i for i, _ in kept], unpack_vectors([v for _, v in kept], model.dimension)

    def _head(self, memory: str) -> int:
        """The memory's high-water mark (one primary-key read).

        The strict mode's check before every answer, so it skips psycopg's cursor layer: a statement
        prepared once on the reader connection, run through libpq with a binary result (at 1k vectors
        per memory the check cost 54 µs through a cursor against 19 µs for a prepared ``SELECT 1``).
        """
        with translate(), self._reader_lock:
            reader = self._reader
            if reader is not None and self._head_prepared:  # the usual case, in as few steps as it takes
                try:
                    res = reader.pgconn.exec_prepared(
                        _HEAD_STATEMENT, [self._namespace_bytes, memory.encode()], result_format=1
                    )
                except psycopg.OperationalError:
                    res = None  # the connection is gone: reconnect below
                if res is not None and res.status == _TUPLES_OK:
                    value = res.get_value(0, 0) if res.ntuples else None
                    return 0 if value is None else int.from_bytes(value, "big", signed=True)
            for attempt in (1, 2):
                try:
                    pgconn = self._reader_connection().pgconn
                    if not self._head_prepared:
                        return self._head_by_cursor(memory)
                    res = pgconn.exec_prepared(
                        _HEAD_STATEMENT, [self._namespace_bytes, memory.encode()], result_format=1
                    )
                    if res.status == pq.ExecStatus.TUPLES_OK:
                        value = res.get_value(0, 0) if res.ntuples else None
                        return 0 if value is None else int.from_bytes(value, "big", signed=True)
                    message = (res.error_message or b"").decode("utf-8", "replace").strip()
                    if pgconn.status == pq.ConnStatus.OK:
                        raise PgmemError(f"reading the cache's high-water mark failed: {message}")
                    raise psycopg.OperationalError(message)
                except psycopg.OperationalError:
                    self._drop_reader()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _head_by_cursor(self, memory: str) -> int:
        assert self._reader is not None
        params = {"ns": self._client.namespace, "memory": memory}
        rows = self._reader.execute(Q["cache_head"], params, binary=True, prepare=True).fetchall()
        return int(rows[0][0]) if rows else 0

    def _reader_connection(self) -> psycopg.Connection[Any]:
        """The cache's own connection (call with the reader lock held), connected and prepared on demand."""
        if self._reader is None or self._reader.closed:
            self._reader = psycopg.Connection.connect(self._client._conninfo or "", autocommit=True)
            # Row-level security: the client's role (pgmem_app when the DSN's role bypasses it) and, for the
            # whole session, the client's namespace. Session-wide, unlike the clients' per-transaction
            # setting: this connection is the cache's own and serves one namespace only, and the strict
            # mode's head check (a bare libpq call) stays one statement.
            role = self._client.sessions.role
            if role is not None:
                self._reader.execute("SELECT set_config('role', %s, false)", (role,))
            self._reader.execute("SELECT set_config('pgmem.namespace', %s, false)", (self._client.namespace,))
            register_vector(self._reader)  # query vectors of the searches it runs in Postgres
            self._head_prepared = False
            if self._reader.info.encoding == "utf-8":  # the key travels as UTF-8 bytes
                res = self._reader.pgconn.prepare(_HEAD_STATEMENT, Q["cache_head_libpq"].encode())
                self._head_prepared = res.status == pq.ExecStatus.COMMAND_OK
        return self._reader

    def _drop_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self._reader = None

    def _changes(self, memory: str, model: EmbeddingModel, rev: int) -> tuple[int, Any, list[tuple[Any, ...]]]:
        rows = self._read("vector_changes", {"memory": memory, "model": model.id, "rev": rev})
        found = [VectorChangeRow._make(row) for row in rows]
        if found and found[0].active is not None and found[0].active != model.id:
            raise _ModelChanged
        head = int(found[0].head or 0) if found else 0
        floor = found[0].floor if found else None
        changes = [r for r in found if r.rev is not None]
        added = [r.vector for r in changes if r.vector is not None]
        vectors = iter(unpack_vectors(added, model.dimension))
        return head, floor, [(r.rev, r.op, r.message_id, None if r.vector is None else next(vectors)) for r in changes]

    # -- entries --------------------------------------------------------------------------------------

    def _state(self, memory: str) -> tuple[bool, int, int]:
        """The listener's state as far as ``memory`` is concerned: connected, epoch, announced revision."""
        with self._lock:
            return self._connected, self._epoch, self._announced.get(memory, 0)

    def _entry(self, memory: str, model: EmbeddingModel) -> tuple[_Entry | None, bool]:
        """The memory's entry (None: over the budget), caught up as the mode requires, and whether the
        answer must still be confirmed against the memory's high-water mark (strict mode with nothing new
        seen: :meth:`_top_k_confirmed` reads it)."""
        key = (memory, model.id)
        with self._lock:  # one acquisition: entry, recency and the listener's state together
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            connected, epoch, announced = self._connected, self._epoch, self._announced.get(memory, 0)
        if entry is None:
            return self._load(memory, model), False
        with entry.lock:
            quiet = entry.epoch == epoch and announced <= entry.rev and entry.dirty == 0
            if quiet and self.mode == "default" and connected:
                self.stats.hits += 1
                return entry, False
            if quiet and self.mode == "strict" and self._head_prepared:
                return entry, True
            self._catch_up(memory, entry, epoch, announced)
        return entry, False

    def _top_k_confirmed(
        self, memory: str, entry: _Entry, queries: Vectors, scales: list[float], k: int, threshold: float | None
    ) -> list[list[tuple[str, float]]] | None:
        """Strict mode's answer when nothing new was seen: the high-water-mark read is sent first and the
        search runs while it travels, so the check costs what is left of one round trip after the search
        rather than a whole one before it. The answer stands if the mark equals the entry's revision (every
        transaction committed before the read is in the entry); None means catch up and search again.

        Above :data:`_OVERLAP_BELOW` vectors the mark is read first and the search runs after it: a backend
        woken while the product's two BLAS threads hold both cores of a small machine takes one of them,
        and the overlapped answer came later than the sequential one (measured on 2 cores, p50 over the
        default mode: 4,275 vectors +54 us either way, 10k +73 us overlapped / +56 sequential, 30k +172 /
        +113; at 1k the overlapped answer costs about one round trip, the product hidden in it)."""
        with entry.lock:
            rev = entry.rev
            if entry.size >= _OVERLAP_BELOW:
                if self._head(memory) != rev:
                    return None
                self.stats.checks += 1
                return self._top_k(entry, queries, scales, k, threshold)
            with self._reader_lock:
                reader = self._reader
                if reader is None or reader.closed or not self._head_prepared:
                    return None
                pgconn = reader.pgconn
                try:
                    pgconn.send_query_prepared(
                        _HEAD_STATEMENT, [self._namespace_bytes, memory.encode()], result_format=1
                    )
                except psycopg.OperationalError:
                    self._drop_reader()
                    return None
                try:
                    found = self._top_k(entry, queries, scales, k, threshold)
                finally:
                    head = self._head_result(pgconn)
        if head != rev:
            return None
        self.stats.checks += 1
        return found

    def _head_result(self, pgconn: Any) -> int | None:
        """Collect the high-water mark sent by :meth:`_top_k_confirmed` (call with the reader lock held);
        None if the connection broke (it is dropped: the catch-up that follows reconnects)."""
        value: int | None = None
        error: str | None = None
        while (res := pgconn.get_result()) is not None:
            if res.status == pq.ExecStatus.TUPLES_OK:
                raw = res.get_value(0, 0) if res.ntuples else None
                value = 0 if raw is None else int.from_bytes(raw, "big", signed=True)
            else:
                error = (res.error_message or b"").decode("utf-8", "replace").strip()
        if error is None and value is not None:
            return value
        if pgconn.status == pq.ConnStatus.OK:
            raise PgmemError(f"reading the cache's high-water mark failed: {error}")
        self._drop_reader()
        return None

    def _load(self, memory: str, model: EmbeddingModel) -> _Entry | None:
        with self._lock:
            epoch = self._epoch
        rev, ids, matrix = self._memory_vectors(memory, model)
        self.stats.loads += 1
        entry = _Entry(model=model, rev=rev, ids=[], matrix=np.zeros((0, model.dimension), np.float32), row_of={})
        entry.matrix = _zeros(max(16, len(ids)), model.dimension)
        entry.matrix[: len(ids)] = _unit(matrix)
        entry.ids = list(ids)
        entry.row_of = {message_id: row for row, message_id in enumerate(ids)}
        entry.epoch = epoch
        if entry.nbytes > self.budget_bytes:
            self.stats.bypassed += 1
            return None
        with self._lock:
            self._saw(memory, rev)
            self._entries[(memory, model.id)] = entry
            total = sum(e.nbytes for e in self._entries.values())
            while total > self.budget_bytes and len(self._entries) > 1:
                _, dropped = self._entries.popitem(last=False)
                total -= dropped.nbytes
                self.stats.evictions += 1
        return entry

    def _catch_up(self, memory: str, entry: _Entry, epoch: int, announced: int, *, confirmed: bool = False) -> None:
        """Bring the entry up to the memory's head (call with the entry's lock held). ``confirmed``: the
        high-water mark was already read and differs, so go straight to the changes."""
        dirty = entry.dirty
        quiet = entry.dirty == 0 and announced <= entry.rev and entry.epoch == epoch
        if self.mode == "strict" and quiet and not confirmed:
            # Nothing announced: confirm with the memory's high-water mark (and its model) in one cheap read.
            if self._head(memory) == entry.rev:
                self.stats.checks += 1
                return
        head, floor, changes = self._changes(memory, entry.model, entry.rev)
        self.stats.catch_ups += 1
        purged = floor is None or floor > entry.rev + 1  # revisions after this entry's are gone from the log
        if head < entry.rev or (head > entry.rev and purged):
            # The memory was recreated, or the log was purged past this entry (or emptied): start over.
            with self._lock:
                seen = self._announcements.get(memory, 0)
            rev, ids, matrix = self._memory_vectors(memory, entry.model)
            with self._lock:
                # A recreated memory counts its revisions from 0 again: forget the old incarnation's
                # announcements, unless one arrived during the reload (then stay stale and catch up again).
                if self._announcements.get(memory, 0) == seen and self._announced.get(memory, 0) > rev:
                    self._announced[memory] = rev
            entry.reset(ids, matrix, rev)
        else:
            for _, op, message_id, vector in changes:
                if op > 0 and vector is not None:
                    entry.add(message_id, vector)
                elif op < 0:
                    entry.remove(message_id)
            entry.rev = max(entry.rev, head)
        with self._lock:
            self._saw(memory, entry.rev)
        entry.dirty -= dirty
        entry.epoch = epoch

    def invalidate(self, memory: str | None = None) -> None:
        """Drop the cached vectors of ``memory`` (None: of every memory)."""
        with self._lock:
            for key in [k for k in self._entries if memory is None or k[0] == memory]:
                del self._entries[key]

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(e.nbytes for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    # -- search ---------------------------------------------------------------------------------------

    def search_vectors(
        self, memory: str, vectors: Any, k: int = 10, *, threshold: float | None = None
    ) -> list[list[tuple[str, float]]]:
        """``[(message id, score)]`` per query vector, best first (ties by id); no message is fetched."""
        if type(k) is not int or not 1 <= k <= 1000:
            check_k(k)
        if threshold is not None:
            threshold = check_threshold(threshold, None)
        else:
            hits = self._search_current(memory, vectors, k)
            if hits is not None:
                return [hits]
        for _ in range(MODEL_SWITCH_ATTEMPTS):
            # the active model is remembered (forgotten on a switch); looked up on the reader only when unknown
            model = self._models.get(memory) or self._model(memory)
            check_threshold(threshold, model.distance)
            try:
                if model.distance != DEFAULT_DISTANCE:
                    # The entries hold unit vectors (cosine); other distances are searched in Postgres.
                    self.stats.bypassed += 1
                    raw = np.asarray(vectors, dtype=np.float32)
                    rows = [as_query_vector(v, model.dimension) for v in (raw[None, :] if raw.ndim == 1 else raw)]
                    return self._search_in_postgres(memory, model, np.stack(rows), k, threshold)
                queries, scales = self._queries(vectors, model.dimension)
                entry, confirm = self._entry(memory, model)
                if entry is None:
                    return self._search_in_postgres(memory, model, queries, k, threshold)
            except _ModelChanged:
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
                    except _ModelChanged:
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
            or vectors.dtype is not _FLOAT32
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
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not self._connected:
                return None
            self._entries.move_to_end(key)
            epoch, announced = self._epoch, self._announced.get(memory, 0)
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
            hits = self._one_ranked(entry, n, scores.tolist(), rows.tolist(), vectors, scale, take, None)
            if timed:
                self.kernels.record(kernel, n, time.perf_counter() - started)
            return hits

    def _model(self, memory: str) -> EmbeddingModel:
        """The memory's active model: remembered, else read on the reader (one round trip)."""
        model = self._models.get(memory)
        if model is not None:
            return model
        rows = self._read("memory_models", {"memory": check_key(memory)})
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
            rows = self._read("notify_key", {})
            self._notify_key = str(rows[0][0])
        tag = notify.tag(self._notify_key, memory)
        with self._lock:
            self._tags[tag] = memory

    def _model_changed(self, memory: str) -> None:
        """The memory is searched with another model now: drop its entries and look the model up again."""
        self.invalidate(memory)
        self._models.pop(memory, None)
        self._client.vectors.forget_model(memory)

    def _search_in_postgres(
        self, memory: str, model: EmbeddingModel, queries: Vectors, k: int, threshold: float | None
    ) -> list[list[tuple[str, float]]]:
        """An exact search in Postgres, for a memory larger than the whole budget or of a model not ranked by
        cosine distance (on the reader)."""
        filters = SearchFilters(memory=memory)
        query = statement("vector", model, filters, "exact", k, threshold is not None)
        out = []
        for q in queries:
            params: dict[str, Any] = {"q": q, **filters.params()}
            if threshold is not None:
                params["max_distance"] = max_distance(model.distance, threshold)
            with self._reader_lock:
                rows = self._reader_connection().execute(query, {"ns": self._client.namespace, **params}).fetchall()
            if rows and switched(rows[0]):
                raise _ModelChanged
            out.append([(hit.message.id, hit.score) for hit in vector_hits(rows, model.distance)])
        return out

    def _queries(self, vectors: Any, dimension: int) -> tuple[Vectors, list[float]]:
        """The query vectors as a C-contiguous float32 matrix and, per query, the factor that turns its
        products with the (unit) cached vectors into cosine similarities: 1 / its norm (1 for a zero vector).

        The query is not normalised before the product: ranking does not depend on a positive factor, and
        only the k scores kept are scaled. A single contiguous float32 vector of the right shape costs one C
        call (FAISS's squared norm, accumulated in float32 like the products: ~0.3 µs, where numpy's
        ``v @ v`` under ``np.errstate`` took ~3 µs); every other form is checked and normalised in numpy."""
        if (
            type(vectors) is np.ndarray
            and vectors.dtype is _FLOAT32  # numpy's own (native-order) float32; any other takes the long way
            and vectors.shape == (dimension,)
            and vectors.flags.c_contiguous
        ):
            norm2 = self._norm2(self._ptr(vectors), dimension)
            if 0.0 < norm2 < math.inf:  # finite entries whose squares neither overflow nor vanish (NaN: no)
                return vectors[None, :], [1.0 / math.sqrt(norm2)]
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2 or queries.shape[1] != dimension:
            raise InvalidInput(f"query vectors must have {dimension} dimensions, got shape {np.shape(vectors)}")
        if not np.isfinite(queries).all():
            raise InvalidInput("query vectors must be finite (no NaN or infinity)")
        # normalised in float64 here (a float32 square can overflow); the scale is then 1
        unit = np.ascontiguousarray(_unit(queries.astype(np.float64)), np.float32)
        return unit, [1.0] * len(unit)

    @staticmethod
    def _top_rows(products: Vectors, n: int, take: int) -> tuple[list[float], list[int]]:
        """The ``take`` best rows and their products (unordered), plus the next best, or every row tied
        with the ``take``-th when that place is shared: the caller orders ties by id, so a shared k-th place
        goes to the smallest ids, whatever the row order. (One partition at the (k+1)-th place; asking
        numpy for the k-th and the (k+1)-th places at once was 75-240 us slower at 10k-30k rows.)"""
        if take >= n:
            return products.tolist(), list(range(n))
        top = np.argpartition(products, n - take - 1)[n - take - 1 :]  # top[0] is the (k+1)-th
        scores = products[top].tolist()
        if scores[0] == min(scores[1:]):  # the k-th place is shared: keep all who share it
            top = np.flatnonzero(products >= scores[0])
            scores = products[top].tolist()
        return scores, top.tolist()

    def _top_k(
        self,
        entry: _Entry,
        queries: Vectors,
        scales: list[float],
        k: int,
        threshold: float | None,
        picked: tuple[str, bool] | None = None,
    ) -> list[list[tuple[str, float]]]:
        """Per query, the ``k`` best of the entry's vectors (call with the entry's lock held). ``picked``:
        the exact kernel already chosen for this search (and whether to time it)."""
        n = entry.size
        if n == 0:
            return [[] for _ in queries]
        if self.approximate_above is not None and n >= self.approximate_above:
            if entry.ann is not None:
                if entry.ann.worn and entry.building is None:
                    self._start_build(entry)  # the old graph answers until the new one is attached
                return self._rank(entry.ann.search(queries, min(k, n)), scales, k, threshold)
            if entry.building is None and not entry.ann_failed:
                self._start_build(entry)
        take = k if k < n else n
        if picked is not None:
            kernel, timed = picked
        else:
            kernel, timed = self.kernels.pick(n) if self.kernel == "auto" else (self.kernel, False)
        started = time.perf_counter() if timed else 0.0
        if kernel == "faiss":
            out = self._faiss_ranked(entry, n, queries, scales, take, threshold)
        else:
            base = entry.matrix[:n]
            ids = entry.ids
            out = []
            for q, scale in zip(queries, scales, strict=True):
                products, rows = self._top_rows(base @ q, n, take)  # a gemv, not a matrix product
                out.append(self._ranked(products, rows, ids, scale, take, threshold))
        if timed:
            self.kernels.record(kernel, n, (time.perf_counter() - started) / len(queries))
        return out

    @staticmethod
    def _ranked(
        products: list[float], rows: list[int], ids: list[str], scale: float, k: int, threshold: float | None
    ) -> list[tuple[str, float]]:
        """Candidate rows and their products, as ``(id, cosine similarity)`` best first with ties by id, cut
        at ``k`` and at ``threshold`` (a row of -1 is no row)."""
        # (negated score, id) sorts best first with ties by id, without a key function
        ranked = [(-p * scale, ids[r]) for p, r in zip(products, rows, strict=True) if r >= 0]
        ranked.sort()
        if threshold is not None:
            return [(i, -s) for s, i in ranked[:k] if -s >= threshold]
        return [(i, -s) for s, i in ranked[:k]]

    def _faiss_ranked(
        self, entry: _Entry, n: int, queries: Vectors, scales: list[float], take: int, threshold: float | None
    ) -> list[list[tuple[str, float]]]:
        """The ``take`` best of the entry's ``n`` rows per query, ranked as :meth:`_ranked` does, by FAISS's
        ``knn_inner_product`` (its SIMD loop and a heap, on one OpenMP thread). Call with the entry's lock held.

        Called directly, not through ``faiss.knn``, whose conversions, checks and output arrays cost 1-3 µs
        around the same call: the arrays are C-contiguous float32 (``_queries`` and ``_Entry`` make them so),
        and a single query's output arrays are the entry's, made once. One more row than ``take`` is asked
        for: if it ties with the ``take``-th, that place is shared, and the query is ranked from all its
        products (:meth:`_top_rows`). FAISS returns the rows best first: unless two scores are equal (then
        they are sorted by id), the answer is that order, built in one pass."""
        matrix = entry.matrix
        nq, d = queries.shape  # C-contiguous: _queries returns them so (FAISS reads the bare pointer)
        if d != matrix.shape[1]:  # never: the entry is the model's, the queries were checked against it
            raise InvalidInput(f"query vectors must have {matrix.shape[1]} dimensions, got {d}")
        wide = take + 1 if take < n else take
        ptr = self._ptr
        out_arrays = entry.faiss_out
        if nq == 1 and out_arrays is not None and out_arrays[0] is matrix and out_arrays[1] == wide:
            _, _, matrix_at, scores, rows, scores_at, rows_at = out_arrays
        else:
            scores = np.empty(nq * wide, np.float32)  # flat: one list each below, no list of lists
            rows = np.empty(nq * wide, np.int64)
            matrix_at, scores_at, rows_at = ptr(matrix), ptr(scores), ptr(rows)
            if nq == 1:  # (the arrays are kept with their pointers: a pointer does not keep its array alive)
                entry.faiss_out = (matrix, wide, matrix_at, scores, rows, scores_at, rows_at)
        self._knn(ptr(queries), matrix_at, d, nq, n, wide, scores_at, rows_at)
        all_scores, all_rows = scores.tolist(), rows.tolist()
        if nq == 1:
            return [self._one_ranked(entry, n, all_scores, all_rows, queries[0], scales[0], take, threshold)]
        return [
            self._one_ranked(
                entry,
                n,
                all_scores[j * wide : (j + 1) * wide],
                all_rows[j * wide : (j + 1) * wide],
                queries[j],
                scales[j],
                take,
                threshold,
            )
            for j in range(nq)
        ]

    def _one_ranked(
        self,
        entry: _Entry,
        n: int,
        s: list[float],
        r: list[int],
        query: Vectors,
        scale: float,
        take: int,
        threshold: float | None,
    ) -> list[tuple[str, float]]:
        """One query's answer from FAISS's rows ``r`` and products ``s`` (best first; one more than
        ``take`` when ``take < n``): ranked as :meth:`_ranked` does, from all the query's products when the
        ``take``-th place is shared. Call with the entry's lock held."""
        ids = entry.ids
        if len(s) > take:
            if s[take - 1] == s[take]:  # the take-th place is shared
                products, found = self._top_rows(entry.matrix[:n] @ query, n, take)
                return self._ranked(products, found, ids, scale, take, threshold)
            s.pop()
            r.pop()
        if r[-1] < 0 or len(set(s)) < take:  # fewer rows than asked (no row is -1), or equal scores
            return self._ranked(s, r, ids, scale, take, threshold)
        hits = [(ids[x], p * scale) for p, x in zip(s, r, strict=True)]
        return hits if threshold is None else [h for h in hits if h[1] >= threshold]

    def _start_build(self, entry: _Entry) -> None:
        """Build the entry's HNSW graph in a background thread (call with the entry's lock held). The build
        works on a copy; the changes made meanwhile are journalled and replayed before it is attached. A
        build that fails is logged and counted (``stats.approximate_failures``); the memory is then searched
        exactly, with no new attempt until the entry is reloaded."""
        entry.building = []
        generation = entry.generation
        ids = list(entry.ids)
        matrix = entry.matrix[: entry.size].copy()

        def run() -> None:
            try:
                ann = _Ann.build(self._faiss, ids, matrix)
            except Exception:
                log.exception("pgmem cache: building the approximate index failed; searching exactly")
                self.stats.approximate_failures += 1
                with entry.lock:
                    if entry.generation == generation:
                        entry.building, entry.ann_failed = None, True  # not retried until a reload
                return
            with entry.lock:
                if entry.generation != generation or entry.building is None:
                    return  # the entry was reloaded meanwhile: a later search starts a new build
                for op, message_id, vector in entry.building:
                    if op > 0 and vector is not None:
                        ann.add(message_id, vector)
                    else:
                        ann.remove(message_id)
                entry.ann, entry.building = ann, None
            self.stats.approximate_builds += 1

        threading.Thread(target=run, name="pgmem-cache-ann", daemon=True).start()

    def approximate_ready(self, memory: str) -> bool:
        """Whether ``memory``'s entry (with its active model) has its approximate index built and attached."""
        model = self._models.get(memory)
        if model is None:
            return False
        with self._lock:
            entry = self._entries.get((memory, model.id))
        return entry is not None and entry.ann is not None

    @staticmethod
    def _rank(
        found: list[tuple[list[float], list[str]]], scales: list[float], k: int, threshold: float | None
    ) -> list[list[tuple[str, float]]]:
        """Per query: its candidates' products and ids, scaled to cosine similarities, best first with ties by
        id, cut at ``k`` and at ``threshold``."""
        out = []
        for (products, found_ids), scale in zip(found, scales, strict=True):
            # (negated score, id) sorts best first with ties by id, without a key function
            ranked = [(-p * scale, i) for p, i in zip(products, found_ids, strict=True)]
            ranked.sort()
            if threshold is not None:
                out.append([(i, -s) for s, i in ranked[:k] if -s >= threshold])
            else:
                out.append([(i, -s) for s, i in ranked[:k]])
        return out

    def search(
        self, memory: str, query: str | Any, k: int = 10, *, threshold: float | None = None, label: str | None = None
    ) -> list[SearchHit]:
        """The ``k`` messages of ``memory`` closest to ``query`` (a text, embedded with the memory's model,
        or a vector), as :class:`pgmem.planning.search.SearchHit` (their messages fetched in one round trip).

        With the client's retrieval log on, the hits are recorded (kind ``cache``, with ``label``) by one
        more statement; :meth:`search_vectors` never logs."""
        model = self._model(memory)
        if isinstance(query, str):
            embedder = self._client.vectors.embedder_for(model.name, model.dimension)
            if embedder is None:
                raise EmbeddingError(f"no embedder for model {model.name!r} in this client; search with a vector")
            vector = check_vectors(embedder.embed([query]), 1, model.dimension, model.name)[0]
        else:
            vector = as_query_vector(query, model.dimension)
        (found,) = self.search_vectors(memory, vector, k, threshold=threshold)
        rows = self._read("get_messages", {"ids": [i for i, _ in found]}, MESSAGES)
        messages = {m.id: m for m in map(decode, rows)}
        if self._client.retrieval_log:
            hits = [(i, s) for i, s in found if i in messages]
            text = query if isinstance(query, str) else None
            self._read("log_retrieval", retrieval_params("cache", memory, text, k, hits, label))
        return [SearchHit(messages[i], s, distance_of(model.distance, s)) for i, s in found if i in messages]

    def close(self) -> None:
        """Stop the listener and drop every entry."""
        self._closed = True
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        self._client.vectors.remove_change_listener(self._own_write)
        self._thread.join(timeout=5)
        if self._doorbell is not None:
            doorbell.release(self._doorbell)
            self._doorbell = None
        self.invalidate()

    def __enter__(self) -> VectorCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
