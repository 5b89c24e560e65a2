"""Approximate mode: an HNSW graph over a large entry's vectors, built in the background and kept in step.

``VectorCache(approximate_above=N)`` gives a memory of at least N vectors a graph (``faiss.IndexHNSWFlat``,
M=32, inner product on the unit vectors), built in a background thread from a copy of the entry
(:func:`start_build`); exact search answers until it is attached. The build calibrates ``efSearch``: the
smallest step whose recall@10 against exact search reaches :data:`ANN_CALIBRATION_RECALL` for rows of the
memory held out of the graph (inserted after the calibration; near-copies of stored rows left out) as
queries. Every change the entry replays is applied to the graph too (:class:`pgmem.cache.entries.Entry`);
changes made while a build runs are journalled and replayed before the graph is attached.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from pgmem.cache.entries import ID_BYTES
from pgmem.embeddings import Vectors

if TYPE_CHECKING:
    from pgmem.cache.entries import Entry
    from pgmem.cache.stats import CacheStats

__all__ = ["ANN_CALIBRATION_RECALL", "ANN_EF_CONSTRUCTION", "ANN_M", "Ann", "start_build"]

log = logging.getLogger("pgmem.cache")  # the package's logger, as before it was split

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


class Ann:
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
        per_vector = int(self.index.d) * 4 + 2 * ANN_M * 4 + 8 + ID_BYTES
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
    def build(cls, faiss: Any, ids: list[str], matrix: Vectors) -> Ann:
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


def start_build(entry: Entry, faiss: Any, stats: CacheStats) -> None:
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
            ann = Ann.build(faiss, ids, matrix)
        except Exception:
            log.exception("pgmem cache: building the approximate index failed; searching exactly")
            stats.approximate_failures += 1
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
        stats.approximate_builds += 1

    threading.Thread(target=run, name="pgmem-cache-ann", daemon=True).start()
