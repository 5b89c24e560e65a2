"""Exact search over an entry's matrix: the numpy and FAISS kernels, how their candidates are ranked, and
the chooser that picks the cheaper kernel by recent timings.

* ``numpy``: a matrix-vector product (OpenBLAS's gemv, on its thread pool) and ``argpartition``.
* ``faiss``: FAISS's ``knn_inner_product`` on one OpenMP thread, called directly with the entry's output
  arrays (:func:`faiss_ranked`).

Both give the same answer: ``(message id, cosine similarity)`` best first, ties (at the k-th place too)
by id. The measurements behind the choice are in :mod:`pgmem.cache`'s docstring.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from pgmem.cache.entries import unit
from pgmem.embeddings import Vectors
from pgmem.errors import DimensionMismatch, InvalidInput

if TYPE_CHECKING:
    from pgmem.cache.entries import Entry

__all__ = [
    "FLOAT32",
    "PROBE_EVERY",
    "PROBE_MAX",
    "SAMPLE_EVERY",
    "TIME_EVERY_ABOVE",
    "Faiss",
    "KernelChooser",
    "faiss_ranked",
    "numpy_ranked",
    "one_ranked",
    "query_matrix",
    "rank",
]

FLOAT32 = np.dtype(np.float32)

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


class Faiss:
    """FAISS, imported when a cache is made (``import pgmem.cache`` does not load it), and the C functions
    the hot paths call directly, looked up once."""

    def __init__(self, threads: int) -> None:
        import faiss

        faiss.omp_set_num_threads(threads)
        self.module: Any = faiss
        self.ptr: Any = faiss.swig_ptr
        self.knn: Any = faiss.knn_inner_product
        self.norm2: Any = faiss.fvec_norm_L2sqr


def query_matrix(faiss: Faiss, vectors: Any, dimension: int) -> tuple[Vectors, list[float]]:
    """The query vectors as a C-contiguous float32 matrix and, per query, the factor that turns its
    products with the (unit) cached vectors into cosine similarities: 1 / its norm (1 for a zero vector).

    The query is not normalised before the product: ranking does not depend on a positive factor, and
    only the k scores kept are scaled. A single contiguous float32 vector of the right shape costs one C
    call (FAISS's squared norm, accumulated in float32 like the products: ~0.3 µs, where numpy's
    ``v @ v`` under ``np.errstate`` took ~3 µs); every other form is checked and normalised in numpy."""
    if (
        type(vectors) is np.ndarray
        and vectors.dtype is FLOAT32  # numpy's own (native-order) float32; any other takes the long way
        and vectors.shape == (dimension,)
        and vectors.flags.c_contiguous
    ):
        norm2 = faiss.norm2(faiss.ptr(vectors), dimension)
        if 0.0 < norm2 < math.inf:  # finite entries whose squares neither overflow nor vanish (NaN: no)
            return vectors[None, :], [1.0 / math.sqrt(norm2)]
    queries = np.asarray(vectors, dtype=np.float32)
    if queries.ndim == 1:
        queries = queries[None, :]
    if queries.ndim != 2:
        raise InvalidInput(f"query vectors must be one vector or a 2-D array, got shape {np.shape(vectors)}")
    if queries.shape[1] != dimension:  # does not fit the model, as in a search in Postgres
        raise DimensionMismatch(f"query vectors must have {dimension} dimensions, got shape {np.shape(vectors)}")
    if not np.isfinite(queries).all():
        raise InvalidInput("query vectors must be finite (no NaN or infinity)")
    # normalised in float64 here (a float32 square can overflow); the scale is then 1
    units = np.ascontiguousarray(unit(queries.astype(np.float64)), np.float32)
    return units, [1.0] * len(units)


def top_rows(products: Vectors, n: int, take: int) -> tuple[list[float], list[int]]:
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


def ranked(
    products: list[float], rows: list[int], ids: list[str], scale: float, k: int, threshold: float | None
) -> list[tuple[str, float]]:
    """Candidate rows and their products, as ``(id, cosine similarity)`` best first with ties by id, cut
    at ``k`` and at ``threshold`` (a row of -1 is no row)."""
    # (negated score, id) sorts best first with ties by id, without a key function
    found = [(-p * scale, ids[r]) for p, r in zip(products, rows, strict=True) if r >= 0]
    found.sort()
    if threshold is not None:
        return [(i, -s) for s, i in found[:k] if -s >= threshold]
    return [(i, -s) for s, i in found[:k]]


def rank(
    found: list[tuple[list[float], list[str]]], scales: list[float], k: int, threshold: float | None
) -> list[list[tuple[str, float]]]:
    """Per query: its candidates' products and ids (the approximate graph's), scaled to cosine
    similarities, best first with ties by id, cut at ``k`` and at ``threshold``."""
    out = []
    for (products, found_ids), scale in zip(found, scales, strict=True):
        # (negated score, id) sorts best first with ties by id, without a key function
        order = [(-p * scale, i) for p, i in zip(products, found_ids, strict=True)]
        order.sort()
        if threshold is not None:
            out.append([(i, -s) for s, i in order[:k] if -s >= threshold])
        else:
            out.append([(i, -s) for s, i in order[:k]])
    return out


def numpy_ranked(
    entry: Entry, n: int, queries: Vectors, scales: list[float], take: int, threshold: float | None
) -> list[list[tuple[str, float]]]:
    """The ``take`` best of the entry's ``n`` rows per query, by numpy (a gemv per query and a partition).
    Call with the entry's lock held."""
    base = entry.matrix[:n]
    ids = entry.ids
    out = []
    for q, scale in zip(queries, scales, strict=True):
        products, rows = top_rows(base @ q, n, take)  # a gemv, not a matrix product
        out.append(ranked(products, rows, ids, scale, take, threshold))
    return out


def faiss_ranked(
    faiss: Faiss, entry: Entry, n: int, queries: Vectors, scales: list[float], take: int, threshold: float | None
) -> list[list[tuple[str, float]]]:
    """The ``take`` best of the entry's ``n`` rows per query, ranked as :func:`ranked` does, by FAISS's
    ``knn_inner_product`` (its SIMD loop and a heap, on one OpenMP thread). Call with the entry's lock held.

    Called directly, not through ``faiss.knn``, whose conversions, checks and output arrays cost 1-3 µs
    around the same call: the arrays are C-contiguous float32 (:func:`query_matrix` and ``Entry`` make them
    so), and a single query's output arrays are the entry's, made once. One more row than ``take`` is asked
    for: if it ties with the ``take``-th, that place is shared, and the query is ranked from all its
    products (:func:`top_rows`). FAISS returns the rows best first: unless two scores are equal (then
    they are sorted by id), the answer is that order, built in one pass."""
    matrix = entry.matrix
    nq, d = queries.shape  # C-contiguous: query_matrix returns them so (FAISS reads the bare pointer)
    if d != matrix.shape[1]:  # never: the entry is the model's, the queries were checked against it
        raise InvalidInput(f"query vectors must have {matrix.shape[1]} dimensions, got {d}")
    wide = take + 1 if take < n else take
    ptr = faiss.ptr
    out_arrays = entry.faiss_out
    if nq == 1 and out_arrays is not None and out_arrays[0] is matrix and out_arrays[1] == wide:
        _, _, matrix_at, scores, rows, scores_at, rows_at = out_arrays
    else:
        scores = np.empty(nq * wide, np.float32)  # flat: one list each below, no list of lists
        rows = np.empty(nq * wide, np.int64)
        matrix_at, scores_at, rows_at = ptr(matrix), ptr(scores), ptr(rows)
        if nq == 1:  # (the arrays are kept with their pointers: a pointer does not keep its array alive)
            entry.faiss_out = (matrix, wide, matrix_at, scores, rows, scores_at, rows_at)
    faiss.knn(ptr(queries), matrix_at, d, nq, n, wide, scores_at, rows_at)
    all_scores, all_rows = scores.tolist(), rows.tolist()
    if nq == 1:
        return [one_ranked(entry, n, all_scores, all_rows, queries[0], scales[0], take, threshold)]
    return [
        one_ranked(
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


def one_ranked(
    entry: Entry,
    n: int,
    s: list[float],
    r: list[int],
    query: Vectors,
    scale: float,
    take: int,
    threshold: float | None,
) -> list[tuple[str, float]]:
    """One query's answer from FAISS's rows ``r`` and products ``s`` (best first; one more than
    ``take`` when ``take < n``): ranked as :func:`ranked` does, from all the query's products when the
    ``take``-th place is shared. Call with the entry's lock held."""
    ids = entry.ids
    if len(s) > take:
        if s[take - 1] == s[take]:  # the take-th place is shared
            products, found = top_rows(entry.matrix[:n] @ query, n, take)
            return ranked(products, found, ids, scale, take, threshold)
        s.pop()
        r.pop()
    if r[-1] < 0 or len(set(s)) < take:  # fewer rows than asked (no row is -1), or equal scores
        return ranked(s, r, ids, scale, take, threshold)
    hits = [(ids[x], p * scale) for p, x in zip(s, r, strict=True)]
    return hits if threshold is None else [h for h in hits if h[1] >= threshold]
