"""A memory's cached vectors and the map that holds them within the byte budget.

An :class:`Entry` is one (memory, model): its unit vectors as rows of one float32 matrix, their message
ids, the memory's revision it reflects, and what it must still catch up with. :class:`Entries` keeps them
in recency order and drops the least recently used beyond the budget. Both are guarded by locks the cache
holds (:mod:`pgmem.cache.vector_cache`); nothing here reads Postgres.
"""

from __future__ import annotations

import mmap
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pgmem.embeddings import Vectors
from pgmem.planning.search import EmbeddingModel

if TYPE_CHECKING:
    from pgmem.cache.approximate import Ann

__all__ = ["ID_BYTES", "Entries", "Entry", "unit", "zeros"]

ID_BYTES = 120  # a Python str id and its dict slot, roughly

_HUGE_PAGE = 2 << 20
#: Entry matrices from this size on are put on transparent huge pages (see :func:`zeros`).
_HUGE_FROM = _HUGE_PAGE // 2


def zeros(rows: int, dimension: int) -> Vectors:
    """A zeroed float32 matrix for an entry's vectors. From :data:`_HUGE_FROM` (1 MB) on, fresh memory the
    kernel may back with transparent huge pages: a private anonymous mapping, ``madvise(MADV_HUGEPAGE)``
    before the first touch, the matrix starting on a 2 MB boundary. The scan is held up by TLB misses on
    4 KB pages: FAISS over 10k 384-d vectors took 760-875 µs where 0-16% of the matrix was on huge pages and
    465-525 µs where 82-100% was, over 1k 28-29 µs on one huge page against 31-35 µs (same process, same
    values, interleaved); ``np.zeros`` (numpy does advise huge pages from 4 MB) often returns heap memory
    already mapped with 4 KB pages. The cost: the last huge page is whole (counted in ``Entry.nbytes``).
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


def unit(vectors: Vectors) -> Vectors:
    """``vectors`` scaled to unit length along the last axis (a zero vector stays zero)."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    out: Vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    return out


@dataclass
class Entry:
    """One memory's vectors under one model (mutated under :attr:`lock`)."""

    model: EmbeddingModel
    rev: int
    ids: list[str]
    matrix: Vectors  # rows [0, len(ids)) are live, normalised
    row_of: dict[str, int]
    dirty: int = 0  # own writes since the last catch-up
    epoch: int = -1  # the listener connection it was last current under
    incarnation: int = 0  # the server's incarnation it was read from (Reader.incarnation)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Approximate mode: the HNSW graph once built, and the changes made while a build runs (replayed into
    # the new graph before it is attached). ``generation`` moves on a reload: a build of an older
    # generation is thrown away.
    ann: Ann | None = None
    building: list[tuple[int, str, Vectors | None]] | None = None
    generation: int = 0
    ann_failed: bool = False
    # The FAISS kernel's output arrays for one query and their C pointers, with the matrix's pointer: made
    # again when the matrix is replaced or k changes (kernels.faiss_ranked; under the lock).
    faiss_out: tuple[Any, ...] | None = None
    # A fork that still inherits (migration 0020): the memories of its lineage besides itself, each with the
    # revision the entry reflects. Their vector logs say when it changed, not how (an ancestor's entries
    # past the fork's point are not the fork's), so any change of one reloads the entry. Empty: no fork.
    inherited: tuple[tuple[str, int], ...] = ()

    @classmethod
    def loaded(
        cls,
        model: EmbeddingModel,
        rev: int,
        ids: Sequence[str],
        matrix: Vectors,
        epoch: int,
        inherited: tuple[tuple[str, int], ...] = (),
    ) -> Entry:
        """A new entry holding ``ids`` and their vectors (a first load) at revision ``rev`` (and its
        ancestors' revisions ``inherited``, for a fork)."""
        entry = cls(model=model, rev=rev, ids=[], matrix=np.zeros((0, model.dimension), np.float32), row_of={})
        entry.inherited = inherited
        entry.matrix = zeros(max(16, len(ids)), model.dimension)
        entry.matrix[: len(ids)] = unit(matrix)
        entry.ids = list(ids)
        entry.row_of = {message_id: row for row, message_id in enumerate(ids)}
        entry.epoch = epoch
        return entry

    @property
    def size(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        ann = 0 if self.ann is None else self.ann.nbytes
        matrix = int(self.matrix.nbytes)
        if matrix >= _HUGE_FROM:  # on huge pages (zeros): whole ones
            matrix = -(-matrix // _HUGE_PAGE) * _HUGE_PAGE
        return matrix + ID_BYTES * len(self.ids) + ann

    def reset(self, ids: Sequence[str], matrix: Vectors, rev: int, inherited: tuple[tuple[str, int], ...] = ()) -> None:
        """Replace the contents (a reload): any index or build of the old contents is dropped."""
        self.generation += 1
        self.ann, self.building, self.ann_failed = None, None, False
        self.ids, self.row_of, self.rev, self.inherited = [], {}, rev, inherited
        self.matrix, self.faiss_out = zeros(max(16, len(ids)), self.model.dimension), None
        for message_id, vector in zip(ids, matrix, strict=True):
            self.add(message_id, vector)

    def replay(self, changes: list[tuple[Any, ...]], head: int) -> None:
        """Apply the vector log's ``(rev, op, message id, vector)`` changes, up to revision ``head``."""
        for _, op, message_id, vector in changes:
            if op > 0 and vector is not None:
                self.add(message_id, vector)
            elif op < 0:
                self.remove(message_id)
        self.rev = max(self.rev, head)

    def add(self, message_id: str, vector: Vectors) -> None:
        if message_id in self.row_of:
            return
        n = len(self.ids)
        if n == self.matrix.shape[0]:
            grown = zeros(max(16, 2 * n), self.matrix.shape[1])
            grown[:n] = self.matrix[:n]
            self.matrix, self.faiss_out = grown, None  # (which held the old matrix)
        self.matrix[n] = unit(vector)
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


class Entries(OrderedDict[tuple[str, int], Entry]):
    """The entries by (memory, model id), least recently used first. Guarded by the cache's lock: every
    method is to be called with it held. (A dict itself, so the search path's lookup costs what a dict's
    does.)"""

    def admit(self, key: tuple[str, int], entry: Entry, budget_bytes: int) -> int:
        """Add ``entry`` as the most recently used, then drop the least recently used ones until the whole
        fits ``budget_bytes`` (the newest is always kept); returns how many were dropped."""
        self[key] = entry
        total = sum(e.nbytes for e in self.values())
        dropped = 0
        while total > budget_bytes and len(self) > 1:
            _, old = self.popitem(last=False)
            total -= old.nbytes
            dropped += 1
        return dropped

    def drop(self, memory: str | None = None) -> None:
        """Drop the entries of ``memory`` (None: every entry)."""
        for key in [k for k in self if memory is None or k[0] == memory]:
            del self[key]

    def holds(self, memory: str) -> bool:
        """Whether some entry is of ``memory``."""
        return any(name == memory for name, _ in self)

    def mark_dirty(self, memory: str | None) -> None:
        """An own write changed ``memory`` (None: any memory): its entries, and those of forks inheriting from
        it, catch up before they answer."""
        for (key, _), entry in self.items():
            if memory is None or key == memory or (entry.inherited and any(a == memory for a, _ in entry.inherited)):
                entry.dirty += 1

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.values())
