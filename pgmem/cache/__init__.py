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

Layout. :mod:`~pgmem.cache.vector_cache` holds :class:`VectorCache`, which answers searches and runs the
consistency protocol above over its parts: :mod:`~pgmem.cache.entries` (a memory's cached matrix and ids;
LRU and budget accounting), :mod:`~pgmem.cache.listener` (the thread that hears announcements and beats),
:mod:`~pgmem.cache.reader` (the cache's own connection and the statements it reads with),
:mod:`~pgmem.cache.kernels` (the exact kernels and their chooser), :mod:`~pgmem.cache.approximate` (the
HNSW graphs) and :mod:`~pgmem.cache.stats` (the counters). Import from ``pgmem.cache``: the submodules are
its implementation. Importing it loads numpy, not FAISS (a cache loads FAISS when it is made).
"""

from __future__ import annotations

from pgmem.cache.approximate import ANN_CALIBRATION_RECALL, ANN_EF_CONSTRUCTION, ANN_M
from pgmem.cache.kernels import PROBE_EVERY, PROBE_MAX, SAMPLE_EVERY, TIME_EVERY_ABOVE, KernelChooser
from pgmem.cache.listener import CHANNEL
from pgmem.cache.stats import CacheStats
from pgmem.cache.vector_cache import VectorCache

__all__ = [
    "ANN_CALIBRATION_RECALL",
    "ANN_EF_CONSTRUCTION",
    "ANN_M",
    "CHANNEL",
    "PROBE_EVERY",
    "PROBE_MAX",
    "SAMPLE_EVERY",
    "TIME_EVERY_ABOVE",
    "CacheStats",
    "KernelChooser",
    "VectorCache",
]
