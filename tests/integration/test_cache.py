"""The FAISS hot cache (``pgmem.cache.VectorCache``): equal to exact Postgres search, across processes, in
both consistency modes; own writes, a dropped listener, the byte budget, log purges."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.cache import (
    PROBE_EVERY,
    PROBE_MAX,
    SAMPLE_EVERY,
    TIME_EVERY_ABOVE,
    KernelChooser,
    VectorCache,
)
from pgmem.cache.entries import zeros
from tests.integration.cache_workers import MEMORY, same

ROOT = Path(__file__).resolve().parents[2]


def _exact(client: pgmem.Client, memory: str, query: np.ndarray, k: int = 10) -> list[tuple[str, float]]:
    return [(h.message.id, h.score) for h in client.search(vector=query, memory=memory, k=k, mode="exact")]


def _fill(client: pgmem.Client, memory: str, n: int, start: int = 0) -> list[str]:
    batch = [Message(id=f"{memory}-{i}", content=f"item {i} colour {i % 11} shape {i % 7}") for i in range(start, n)]
    client.messages.add_many(memory, batch)
    client.vectors.flush()
    return [m.id for m in batch]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["default", "strict"])
def test_two_writer_processes_and_a_cached_searcher(dsn: str, tmp_path: Path, mode: str) -> None:
    with pgmem.connect(dsn, namespace="test") as client:
        client.vectors.enable(MEMORY)
        _fill(client, MEMORY, 50)
    env = {**os.environ, "PGMEM_DSN": dsn, "PYTHONPATH": str(ROOT)}
    flag = tmp_path / "writers-done"
    searcher = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.cache_workers", "search", mode, str(flag)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.integration.cache_workers", "write", str(i), "150"],
            env=env,
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        for writer in writers:
            _, writer_err = writer.communicate(timeout=180)
            assert writer.returncode == 0, writer_err
        flag.touch()
        out, err = searcher.communicate(timeout=120)
    finally:
        for proc in [*writers, searcher]:
            if proc.poll() is None:
                proc.kill()
    assert searcher.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["mismatch_count"] == 0, report["mismatches"]
    assert report["checked"] >= 10, report  # comparisons made while the writers were writing
    assert report["final_checked"] == 20, report  # and after they stopped, every one of them
    assert report["notifications"] > 0
    if mode == "default":
        assert report["hits"] > 0  # answers served without a round trip
    # the writers' deletes reached the cache: the final state holds exactly the surviving rows
    with pgmem.connect(dsn, namespace="test") as client:
        assert client.vectors.pending(MEMORY) == {}


def test_own_writes_are_seen_at_once(client: pgmem.Client) -> None:
    client.vectors.enable("m")
    ids = _fill(client, "m", 40)
    with VectorCache(client) as cache:
        query = client.embedder.embed(["item 3 colour 3 shape 3"])[0]
        assert same(cache.search_vectors("m", query, 5)[0], _exact(client, "m", query, 5))
        client.messages.add("m", Message(id="fresh", content="a brand new entry"))
        client.vectors.wait()  # the embedding is written after commit, in the background
        fresh = client.embedder.embed(["a brand new entry"])[0]
        assert cache.search_vectors("m", fresh, 1)[0][0][0] == "fresh"  # no wait for the notification
        client.messages.delete("m", "fresh")
        assert cache.search_vectors("m", fresh, 1)[0][0][0] != "fresh"
        client.messages.delete("m", ids[3])
        got = cache.search_vectors("m", query, 10)[0]
        assert ids[3] not in [i for i, _ in got]
        assert same(got, _exact(client, "m", query, 10))
        hits = cache.search("m", "item 5 colour 5 shape 5", 3)
        assert hits[0].message.content == "item 5 colour 5 shape 5"
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        client.messages.clear("m")
        assert cache.search_vectors("m", query, 5) == [[]]


def test_other_clients_writes_arrive_by_notify(dsn: str, client: pgmem.Client) -> None:
    client.vectors.enable("m")
    _fill(client, "m", 30)
    with VectorCache(client) as cache, pgmem.connect(dsn, namespace="test") as other:
        query = client.embedder.embed(["item 7 colour 7 shape 7"])[0]
        cache.search_vectors("m", query, 5)
        hits_before = cache.stats.hits
        cache.search_vectors("m", query, 5)
        assert cache.stats.hits == hits_before + 1  # current: served from memory
        other.messages.add("m", Message(id="from-other", content="item 7 colour 7 shape 7"))
        other.vectors.wait()
        deadline = time.monotonic() + 120  # generous: only a failure waits this long
        while cache.stats.notifications == 0:
            assert time.monotonic() < deadline, "the peer's write was never announced"
            time.sleep(0.001)
        assert cache.search_vectors("m", query, 1)[0][0][0] == "from-other"


def test_wait_announced_reads_a_peers_write(dsn: str, client: pgmem.Client) -> None:
    client.vectors.enable("m")
    _fill(client, "m", 20)
    with VectorCache(client) as cache, pgmem.connect(dsn, namespace="test") as other:
        assert cache.wait_announced("m", 10**9, timeout=0)  # nothing cached: the next search loads anyway
        query = client.embedder.embed(["a message from a peer"])[0]
        cache.search_vectors("m", query, 3)
        loaded = cache.announced("m")
        assert loaded == client.vectors.head_rev("m")  # a load counts as knowing its revision
        assert not cache.wait_announced("m", loaded + 1, timeout=0.05)  # nothing newer was committed
        other.messages.add("m", Message(id="peer", content="a message from a peer"))
        other.vectors.flush()
        peer_rev = other.vectors.head_rev("m")  # what the peer would hand over, e.g. in a queue item
        assert cache.wait_announced("m", peer_rev, timeout=10)
        assert cache.announced("m") >= peer_rev
        assert cache.search_vectors("m", query, 1)[0][0][0] == "peer"


def test_dropped_listener_marks_everything_stale(dsn: str, client: pgmem.Client) -> None:
    client.vectors.enable("m")
    _fill(client, "m", 30)
    with (
        VectorCache(client) as cache,
        pgmem.connect(dsn, namespace="test") as other,
        psycopg.connect(dsn, autocommit=True) as admin,
    ):
        query = client.embedder.embed(["item 9 colour 9 shape 9"])[0]
        cache.search_vectors("m", query, 3)
        # The listener's connection ends as a server restart or a lost network would end it. It is the one
        # connection of this test's database whose last statement was the LISTEN (notifications need none).
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = 'LISTEN \"pgmem_vectors\"'"
        ).fetchall()
        assert ended == [(True,)]
        deadline = time.monotonic() + 120
        while cache.connected:
            assert time.monotonic() < deadline, "the cache never noticed its listener was gone"
            time.sleep(0.001)
        # a write whose notification nobody receives
        other.messages.add("m", Message(id="unannounced", content="item 9 colour 9 shape 9"))
        other.vectors.wait()
        catch_ups = cache.stats.catch_ups
        assert cache.search_vectors("m", query, 1)[0][0][0] == "unannounced"
        assert cache.stats.catch_ups == catch_ups + 1 or cache.stats.loads > 1
        deadline = time.monotonic() + 120
        while not cache.connected and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cache.connected and cache.stats.reconnects >= 1
        cache.search_vectors("m", query, 1)  # resynchronised under the new connection
        hits = cache.stats.hits
        cache.search_vectors("m", query, 1)
        assert cache.stats.hits == hits + 1


def test_strict_mode_checks_every_time(client: pgmem.Client) -> None:
    client.vectors.enable("m")
    _fill(client, "m", 20)
    with VectorCache(client, mode="strict") as cache:
        query = client.embedder.embed(["item 1"])[0]
        for _ in range(3):
            cache.search_vectors("m", query, 3)
        # one load, then a high-water-mark read per answer (nothing changed: no catch-up)
        assert cache.stats.hits == 0 and cache.stats.checks == 2 and cache.stats.loads == 1
        client.messages.add("m", Message(id="new", content="item 1"))
        client.vectors.wait()
        assert cache.search_vectors("m", query, 1)[0][0][0] in {"new", "m-1"}
        assert cache.stats.catch_ups == 1


@pytest.mark.parametrize("overlap_below", [2048, 0], ids=["overlapped", "read-first"])
def test_strict_mode_sees_a_peer_write_before_its_notification(
    dsn: str, client: pgmem.Client, monkeypatch: pytest.MonkeyPatch, overlap_below: int
) -> None:
    """Both checks (overlapped with the search below 2,048 vectors, read before it above): a mark that
    moved (a peer committed, its NOTIFY not delivered yet) means catch up and search again, never a stale
    answer."""
    monkeypatch.setattr(pgmem.cache.vector_cache, "_OVERLAP_BELOW", overlap_below)
    client.vectors.enable("m")
    _fill(client, "m", 20)
    query = client.embedder.embed(["item 2 colour 2 shape 2"])[0]
    with VectorCache(client, mode="strict") as cache, pgmem.connect(dsn, namespace="test") as peer:
        cache.search_vectors("m", query, 5)
        cache._listener._notified = lambda payload: None  # type: ignore[method-assign]  # notifications held back
        peer.messages.add("m", Message(id="peer", content="item 2 colour 2 shape 2"))
        peer.vectors.wait()
        checks, catch_ups = cache.stats.checks, cache.stats.catch_ups
        got = cache.search_vectors("m", query, 5)[0]
        assert "peer" in [i for i, _ in got] and same(got, _exact(client, "m", query, 5))
        assert cache.stats.checks == checks and cache.stats.catch_ups == catch_ups + 1
        assert same(cache.search_vectors("m", query, 5)[0], got)
        assert cache.stats.checks == checks + 1  # now current: confirmed by the mark alone


@pytest.mark.parametrize("overlap_below", [2048, 0], ids=["overlapped", "read-first"])
def test_strict_check_survives_a_lost_reader_connection(
    dsn: str, client: pgmem.Client, monkeypatch: pytest.MonkeyPatch, overlap_below: int
) -> None:
    monkeypatch.setattr(pgmem.cache.vector_cache, "_OVERLAP_BELOW", overlap_below)
    client.vectors.enable("m")
    _fill(client, "m", 20)
    with VectorCache(client, mode="strict") as cache, psycopg.connect(dsn, autocommit=True) as admin:
        query = client.embedder.embed(["item 2 colour 2 shape 2"])[0]
        want = _exact(client, "m", query, 5)
        assert same(cache.search_vectors("m", query, 5)[0], want)
        assert cache._reader.conn is not None
        admin.execute("SELECT pg_terminate_backend(%s)", (cache._reader.conn.info.backend_pid,))
        assert same(cache.search_vectors("m", query, 5)[0], want)  # the check failed: caught up instead
        checks = cache.stats.checks
        assert same(cache.search_vectors("m", query, 5)[0], want)  # reconnected, prepared again
        assert cache.stats.checks == checks + 1
        client.messages.add("m", Message(id="after", content="item 2 colour 2 shape 2"))
        client.vectors.wait()
        assert "after" in [i for i, _ in cache.search_vectors("m", query, 5)[0]]


@pytest.mark.parametrize("mode", ["default", "strict"])
def test_model_switch_reaches_the_cache(dsn: str, client: pgmem.Client, mode: str) -> None:
    from pgmem.embeddings import HashingEmbedder

    alt = HashingEmbedder(384, trigram_weight=0.0)
    alt.model = "alt-384"
    client.vectors.enable("m")
    _fill(client, "m", 20)
    client.vectors.model(alt)  # this process can embed queries for the new model too
    with VectorCache(client, mode=mode) as cache, pgmem.connect(dsn, namespace="test", embedder=alt) as other:
        assert cache.search("m", "item 4 colour 4 shape 4", 1)[0].message.id == "m-4"
        other.vectors.switch_model("m", alt)
        other.vectors.flush(alt)
        assert other.vectors.models("m") == {"alt-384": "active"}
        if mode == "default":
            # The default mode learns of the switch from its notification, which may come after the commit:
            # wait for the cache to hear it (this process's client remembered no model to forget).
            with cache._listener.cond:
                assert cache._listener.cond.wait_for(lambda: "m" not in cache._models, 120)
        query = alt.embed(["item 4 colour 4 shape 4"])[0]
        assert cache.search_vectors("m", query, 1)[0][0][0] == "m-4"
        assert client.vectors.active_model("m").name == "alt-384"  # type: ignore[union-attr]
        got = cache.search_vectors("m", query, 5)[0]
        assert same(got, [(h.message.id, h.score) for h in client.search(vector=query, memory="m", k=5, mode="exact")])


def test_budget_lru_and_bypass(client: pgmem.Client) -> None:
    for memory in ("a", "b"):
        client.vectors.enable(memory)
        _fill(client, memory, 100)
    query = client.embedder.embed(["item 5 colour 5"])[0]
    one_memory = 100 * 384 * 4 + 100 * 200
    with VectorCache(client, budget_bytes=int(one_memory * 1.5)) as cache:
        cache.search_vectors("a", query, 3)
        cache.search_vectors("b", query, 3)
        assert len(cache) == 1 and cache.stats.evictions == 1 and cache.nbytes <= cache.budget_bytes
        assert same(cache.search_vectors("a", query, 5)[0], _exact(client, "a", query, 5))
    with VectorCache(client, budget_bytes=1000) as tiny:
        assert same(tiny.search_vectors("a", query, 5)[0], _exact(client, "a", query, 5))
        assert tiny.stats.bypassed >= 1 and len(tiny) == 0


def test_faiss_path_equals_numpy_path(client: pgmem.Client) -> None:
    client.vectors.enable("m")
    _fill(client, "m", 300)
    queries = client.embedder.embed([f"item {i} colour {i % 11}" for i in range(10)])
    with (
        VectorCache(client, kernel="faiss") as with_faiss,
        VectorCache(client, kernel="numpy") as with_numpy,
        VectorCache(client) as auto,
    ):
        for q in queries:
            a, b = with_faiss.search_vectors("m", q, 10)[0], with_numpy.search_vectors("m", q, 10)[0]
            assert same(a, b)
            for _ in range(3):  # auto tries both kernels, then probes the other one now and then
                assert same(auto.search_vectors("m", q, 10)[0], a)
            assert same(a, _exact(client, "m", q, 10))
        # every shape of request: k from 1 to more than the memory holds, a threshold, a batch (one FAISS
        # call), float64 and strided queries (normalised first), a query scaled up
        batch = np.asarray(queries, dtype=np.float32)
        wide = np.repeat(batch, 2, axis=1)[:, ::2]  # the same values, not contiguous
        for k in (1, 2, 10, 299, 300, 500):
            for threshold in (None, 0.3):
                kwargs = {"threshold": threshold}
                by_faiss = with_faiss.search_vectors("m", batch, k, **kwargs)
                one_by_one = [with_faiss.search_vectors("m", q, k, **kwargs)[0] for q in batch]
                assert all(map(same, by_faiss, one_by_one))  # (a batch is normalised first: scores within 1e-6)
                for form in (batch.astype(np.float64), wide, batch * np.float32(4)):
                    assert all(map(same, with_faiss.search_vectors("m", form, k, **kwargs), by_faiss))
                by_numpy = with_numpy.search_vectors("m", batch, k, **kwargs)
                assert all(map(same, by_faiss, by_numpy))
                assert [len(found) for found in by_faiss] == [len(found) for found in by_numpy]
                if threshold is None:
                    assert all(len(found) == min(k, 300) for found in by_faiss)


def test_auto_kernel_moves_to_the_cheaper_one_and_back() -> None:
    """The chooser tries each kernel once, then uses the cheaper by the median of recent timings, probing
    the other every PROBE_EVERY searches: a kernel that becomes slow (the BLAS pool beside busy
    processes) is left within a few searches, and taken again once its probes are cheap again."""
    chooser = KernelChooser()
    n = 10_000
    cost = {"numpy": 200e-6, "faiss": 400e-6}

    def run(searches: int) -> list[str]:
        picked = []
        for _ in range(searches):
            kernel, timed = chooser.pick(n)
            assert timed  # searches of 200 us and more are all timed
            chooser.record(kernel, n, cost[kernel])
            picked.append(kernel)
        return picked

    first = run(2 + 4 * PROBE_EVERY)
    assert sorted(first[:2]) == ["faiss", "numpy"]  # each tried once
    # then numpy, and faiss (twice as slow) as a probe every 2 * PROBE_EVERY searches
    assert first[2:].count("faiss") == 2 and first[-1] == "faiss"
    cost["numpy"] = 9_000e-6  # the machine gets busy: numpy is 22x slower than faiss now
    busy = run(8 * PROBE_EVERY)
    assert busy[-4 * PROBE_EVERY :].count("numpy") == 0  # probed 22x less often: 704 searches apart
    busy = run(2 * PROBE_MAX)
    assert 1 <= busy.count("numpy") <= 3
    cost["numpy"] = 200e-6  # and quiet again: numpy's probes win it back
    quiet = run(4 * PROBE_MAX)
    assert quiet[-4 * PROBE_EVERY :].count("faiss") <= 4
    assert chooser.pick(100) == ("numpy", True)  # another size class is timed on its own
    assert set(chooser.snapshot()["<=2^14"]) == {"numpy", "faiss"}
    with pytest.raises(pgmem.InvalidInput, match="kernel"):
        VectorCache.__init__(object.__new__(VectorCache), object(), kernel="blas")  # type: ignore[arg-type]


def test_auto_kernel_times_one_cheap_search_in_a_few() -> None:
    """Where the cheaper kernel takes less than TIME_EVERY_ABOVE, one search in SAMPLE_EVERY is timed (and
    every probe): timing costs about a tenth of a search of 1k vectors. A kernel that becomes slow is still
    left within a few timed searches."""
    chooser = KernelChooser()
    n = 1000
    cost = {"numpy": 40e-6, "faiss": 30e-6}
    timings = {"numpy": 0, "faiss": 0}

    def run(searches: int) -> list[str]:
        picked = []
        for _ in range(searches):
            kernel, timed = chooser.pick(n)
            if timed:
                timings[kernel] += 1
                chooser.record(kernel, n, cost[kernel])
            picked.append(kernel)
        return picked

    first = run(2 + 8 * PROBE_EVERY)
    assert sorted(first[:2]) == ["faiss", "numpy"]
    probes = first[2:].count("numpy")
    assert 1 <= probes <= 8 and timings["numpy"] == 1 + probes  # every probe timed
    assert abs(timings["faiss"] - 1 - 8 * PROBE_EVERY / SAMPLE_EVERY) <= 2  # one in SAMPLE_EVERY
    cost["faiss"] = 9_000e-6  # faiss becomes slow: numpy takes over within a few timed searches
    switched = run(4 * SAMPLE_EVERY + 1)
    assert switched[-1] == "numpy"
    assert TIME_EVERY_ABOVE > cost["numpy"]


def test_large_entry_matrices_start_on_a_huge_page() -> None:
    """An entry's matrix of 1 MB or more is a fresh private mapping advised for transparent huge pages and
    starting on a 2 MB boundary (a scan on 4 KB pages took 1.6x as long); either way it is zeroed, writable,
    C-contiguous float32 (FAISS reads it by its bare pointer)."""
    for rows in (16, 600, 3000):  # 600 x 384 x 4 bytes: under 1 MB
        matrix = zeros(rows, 384)
        assert matrix.shape == (rows, 384) and matrix.dtype == np.float32
        assert matrix.flags.c_contiguous and matrix.flags.writeable and not matrix.any()
        matrix[-1] = 1.0
        assert matrix.sum() == 384
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert all(zeros(rows, 384).ctypes.data % (2 << 20) == 0 for rows in (1000, 3000))


def test_purged_log_and_recreated_memory_reload(dsn: str, client: pgmem.Client) -> None:
    client.vectors.enable("m")
    _fill(client, "m", 20)
    with VectorCache(client, mode="strict") as cache:
        query = client.embedder.embed(["item 2 colour 2 shape 2"])[0]
        cache.search_vectors("m", query, 3)
        _fill(client, "m", 30, start=20)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgmem.vector_log")  # retention purged everything
        _fill(client, "m", 35, start=30)
        assert same(cache.search_vectors("m", query, 10)[0], _exact(client, "m", query, 10))
        loads = cache.stats.loads
        # the memory is dropped and created again: revisions restart, the cache notices
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgmem.memories WHERE namespace = 'test' AND key = 'm'")
        client.vectors.enable("m")
        _fill(client, "m", 5)
        got = cache.search_vectors("m", query, 10)[0]
        assert same(got, _exact(client, "m", query, 10)) and len(got) == 5
        assert cache.stats.loads == loads


def test_cache_bad_input(client: pgmem.Client) -> None:
    client.vectors.enable("m")
    with pytest.raises(pgmem.InvalidInput):
        VectorCache(client, mode="eventual")  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        VectorCache(client, budget_bytes=-1)
    with VectorCache(client) as cache:
        with pytest.raises(pgmem.InvalidInput):
            cache.search_vectors("m", np.ones(5), 3)
        with pytest.raises(pgmem.InvalidInput):
            cache.search_vectors("m", np.ones(384), 0)
        with pytest.raises(pgmem.InvalidInput):
            cache.search_vectors("never-enabled", np.ones(384), 3)
        assert cache.search_vectors("m", np.ones(384), 3) == [[]]  # enabled, empty


def test_every_form_of_query_vector_gets_the_same_answer(client: pgmem.Client) -> None:
    """A float32 vector takes a shorter path than the other forms (it is scaled after the product, not
    normalised before): lists, float64, a batch, a scaled copy and a copy too large to square in float32
    all rank the same ids with the same cosine scores; non-finite queries are refused, a zero query scores 0."""
    client.vectors.enable("m")
    _fill(client, "m", 200)
    q = np.asarray(client.embedder.embed(["item 5 colour 5 shape 5"])[0], dtype=np.float32)
    with VectorCache(client) as cache:
        want = _exact(client, "m", q, 10)
        forms = [q, q.tolist(), q.astype(np.float64), q * np.float32(7.5), q * np.float32(1e30), q[None, :]]
        forms += [np.repeat(q, 2)[::2], q.astype(">f4")]  # strided, big-endian: not the fast path's float32
        for form in forms:
            assert same(cache.search_vectors("m", form, 10)[0], want)
            assert np.allclose([s for _, s in cache.search_vectors("m", form, 10)[0]], [s for _, s in want], atol=1e-5)
        both = cache.search_vectors("m", np.stack([q, q * np.float32(3)]), 10)
        assert same(both[0], want) and same(both[1], want)
        assert all(s == 0.0 for _, s in cache.search_vectors("m", np.zeros(q.shape, np.float32), 3)[0])
        full = cache.search_vectors("m", q, 10)[0]
        cut = full[2][1] - 1e-6
        assert cache.search_vectors("m", q, 10, threshold=cut)[0] == [hit for hit in full if hit[1] >= cut]
        nan = np.full(q.shape, np.nan, np.float32)
        inf = np.where(np.arange(q.size) == 3, np.inf, q).astype(np.float32)
        for bad in (nan, inf):
            with pytest.raises(pgmem.InvalidInput):
                cache.search_vectors("m", bad, 3)


class ExactEmbedder:
    """8-dimensional unit vectors of four halves each, so that every product is a sum of quarters: exact in
    float32 whatever the summation order. ``twin`` texts share one vector; ``other <i>`` texts share
    3 - i % 3 of its halves (products 0.75, 0.5, 0.25)."""

    model = "exact-8"
    dimension = 8

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 8), np.float32)
        for row, text in enumerate(texts):
            shared = 4 if text.startswith("twin") else 3 - int(text.split()[-1]) % 3
            out[row, :shared] = 0.5
            out[row, 4 : 4 + 4 - shared] = 0.5
        return out

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


@pytest.mark.parametrize("kernel", ["numpy", "faiss", "auto"])
def test_a_shared_kth_place_goes_to_the_smallest_ids(client: pgmem.Client, kernel: Any) -> None:
    """Equal vectors score equally: which of them make the top k does not depend on the rows' order in the
    cache (numpy's partition and FAISS pick any of them), it is the smallest ids, best first then by id."""
    embedder = ExactEmbedder()
    client.vectors.enable("m", embedder)
    client.messages.add_many("m", [Message(id=f"other-{i:02d}", content=f"other {i}") for i in range(40)])
    twins = [Message(id=f"twin-{c}", content=f"twin {c}") for c in "fbdace"]
    client.messages.add_many("m", twins)
    client.vectors.flush(embedder)
    q = embedder.embed(["twin"])[0]
    with VectorCache(client, kernel=kernel) as cache:
        for k in (1, 3, 5, 6):  # 6: all six twins, the next place not shared (FAISS still returns them unsorted)
            for _ in range(2):  # the second search of a k takes the one-pass path (_search_current)
                got = cache.search_vectors("m", q, k)[0]
                assert [i for i, _ in got] == [f"twin-{c}" for c in "abcdef"[:k]]
                assert len({s for _, s in got}) == 1
        for _ in range(2):
            eight = cache.search_vectors("m", q, 8)[0]
            assert [i for i, _ in eight[:6]] == [f"twin-{c}" for c in "abcdef"]
            # the next place is shared by the 14 "other" rows closest to the twins: the two smallest ids
            assert [(i, s) for i, s in eight[6:]] == [("other-00", 0.75), ("other-03", 0.75)]


@pytest.mark.parametrize("kernel", ["numpy", "faiss", "auto"])
def test_the_one_pass_search_answers_as_the_general_path(client: pgmem.Client, kernel: Any) -> None:
    """A float32 query of a current entry is answered in one pass (``_search_current``): the same answer
    as the general path (a float64 copy of the query takes it), the same hit count, and never over a
    write the entry has not caught up with; any other case goes the general way."""
    client.vectors.enable("m")
    _fill(client, "m", 120)
    queries = np.asarray(client.embedder.embed([f"item {i} colour {i % 11}" for i in range(6)]), np.float32)
    with VectorCache(client, kernel=kernel) as cache:
        taken: list[bool] = []
        one_pass = cache._search_current

        def spy(memory: str, vectors: Any, k: int) -> list[tuple[str, float]] | None:
            found = one_pass(memory, vectors, k)
            taken.append(found is not None)
            return found

        cache._search_current = spy  # type: ignore[method-assign]
        for q in queries:
            for k in (1, 10, 119, 120, 200):
                general = cache.search_vectors("m", q.astype(np.float64), k)[0]
                for _ in range(2):
                    assert same(cache.search_vectors("m", q, k)[0], general)
                assert same(general, _exact(client, "m", q, k))
        assert taken.count(True) >= len(queries) * 5  # each k's second float32 search at least
        hits = cache.stats.hits
        cache.search_vectors("m", queries[0], 10)
        assert cache.stats.hits == hits + 1
        # an own write makes the entry stale: the next search catches up (general path) and sees it
        client.messages.add("m", Message(id="fresh", content="item 0 colour 0"))
        client.vectors.flush()
        taken.clear()
        fresh = np.asarray(client.embedder.embed(["item 0 colour 0"])[0], np.float32)
        assert cache.search_vectors("m", fresh, 1)[0][0][0] in {"fresh", "m-0"}
        assert taken == [False]
        assert "fresh" in {i for i, _ in cache.search_vectors("m", fresh, 5)[0]}
        # a threshold, a batch and the strict mode never take it
        taken.clear()
        cache.search_vectors("m", queries[0], 10, threshold=0.1)
        cache.search_vectors("m", queries[:2], 10)
        assert taken == [False]  # (the threshold's search does not ask; the batch asks and is refused)


@pytest.mark.parametrize("mode", ["default", "strict"])
def test_a_log_emptied_after_a_peers_write_reloads(dsn: str, client: pgmem.Client, mode: str) -> None:
    """A peer writes, then the whole vector log is purged before the cache catches up: the cache cannot
    replay the change, so it reloads (before the fix it jumped to the new revision and answered stale)."""
    client.vectors.enable("m")
    _fill(client, "m", 20)
    query = client.embedder.embed(["item 25 colour 3 shape 4"])[0]
    with VectorCache(client, mode=mode) as cache, pgmem.connect(dsn, namespace="test") as peer:
        cache.search_vectors("m", query, 3)  # loaded at the current revision
        _fill(peer, "m", 30, start=20)
        rev = peer.vectors.head_rev("m")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgmem.vector_log")
        assert cache.wait_announced("m", rev)
        assert same(cache.search_vectors("m", query, 5)[0], _exact(client, "m", query, 5))
        assert "m-25" in [i for i, _ in cache.search_vectors("m", query, 5)[0]]


async def test_the_cache_serves_an_async_client(dsn: str) -> None:
    """The cache reads on its own connections: an AsyncClient's own writes reach it and its answers equal
    Postgres's exact search."""
    async with await pgmem.aconnect(dsn, namespace="test") as aclient:
        await aclient.vectors.enable("m")
        await aclient.messages.add_many(
            "m", [Message(id=f"m-{i}", content=f"item {i} colour {i % 11}") for i in range(30)]
        )
        await aclient.vectors.flush()
        query = aclient.embedder.embed(["item 7 colour 7"])[0]
        with VectorCache(aclient) as cache:
            first = cache.search("m", "item 7 colour 7", 3)
            assert first[0].message.id == "m-7"
            await aclient.messages.add("m", Message(id="m-new", content="item 7 colour 7"))
            await aclient.vectors.flush()
            got = cache.search_vectors("m", query, 5)[0]
            exact = await aclient.vectors.search(vector=query, memory="m", k=5, mode="exact")
            assert same(got, [(h.message.id, h.score) for h in exact])
            assert "m-new" in [i for i, _ in got]


@pytest.mark.slow
def test_approximate_mode_recall_and_freshness(client: pgmem.Client, dsn: str) -> None:
    """Approximate mode on 6,000 real MiniLM vectors: exact answers until the IVF index is built in the
    background, then recall@10 >= 0.95 against exact search for held-out queries; a peer's writes and
    deletes are reflected as soon as their revision is announced (added vectors found, deleted ones never
    returned), and so are the process's own."""
    from tests.integration.test_filtered_search import DATA, LookupEmbedder

    if not DATA.exists():
        pytest.skip(f"data set not found at {DATA}")
    vectors = np.load(DATA / "embeddings-f16.npy").astype(np.float32)
    corpus, queries = vectors[:6000], vectors[-200:]
    embedder = LookupEmbedder(vectors)
    client.vectors.enable("big", embedder)
    client.messages.add_many("big", [Message(id=f"r{i}", content=f"{i}|row") for i in range(len(corpus))])
    client.vectors.flush(embedder)
    with VectorCache(client, approximate_above=3000) as cache:
        first = cache.search_vectors("big", queries[0], 10)[0]
        assert same(first, _exact(client, "big", queries[0]))  # exact while the index builds
        deadline = time.monotonic() + 120
        while not cache.approximate_ready("big"):
            assert time.monotonic() < deadline, "the approximate index was not built within 120 s"
            time.sleep(0.05)
        assert cache.stats.approximate_builds == 1
        unit = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
        recalls = []
        for q in queries:
            truth = {f"r{i}" for i in np.argsort(unit @ q)[::-1][:10]}
            got = cache.search_vectors("big", q, 10)[0]
            assert len(got) == 10 and [s for _, s in got] == sorted((s for _, s in got), reverse=True)
            recalls.append(len(truth & {i for i, _ in got}) / 10)
        assert np.mean(recalls) >= 0.95, np.mean(recalls)

        # a peer (another client: its writes reach this cache only through NOTIFY) adds and deletes
        with pgmem.connect(dsn, namespace="test", embedder=embedder) as peer:
            new = [Message(id=f"n{i}", content=f"{34_000 + i}|new") for i in range(5)]
            peer.messages.add_many("big", new)
            peer.vectors.flush(embedder)
            gone = [f"r{i}" for i in range(0, 6000, 500)]
            peer.messages.delete_many("big", gone)
            rev = peer.vectors.head_rev("big")
        assert cache.wait_announced("big", rev, timeout=10)
        for i in range(5):
            got = cache.search_vectors("big", vectors[34_000 + i], 3)[0]
            assert got[0][0] == f"n{i}" and got[0][1] == pytest.approx(1.0, abs=1e-5)
        for row in range(0, 6000, 500):
            assert f"r{row}" not in {i for i, _ in cache.search_vectors("big", corpus[row], 10)[0]}
        # the process's own write: seen at once
        client.messages.add("big", Message(id="own", content="34100|own"))
        client.vectors.flush(embedder)
        assert cache.search_vectors("big", vectors[34_100], 1)[0][0][0] == "own"
        assert cache.approximate_ready("big") and cache.stats.approximate_builds == 1  # updated, not rebuilt

        # deletes mark vectors dead in the graph; past a fifth of it a new graph is built in the background,
        # the old one answering (without the dead) meanwhile
        dead = [f"r{i}" for i in range(1, 6000, 4)]
        client.messages.delete_many("big", dead)
        gone_now = set(dead) | set(gone)
        for q in queries[:20]:
            got = cache.search_vectors("big", q, 10)[0]
            assert len(got) == 10 and not gone_now & {i for i, _ in got}
        deadline = time.monotonic() + 120
        while cache.stats.approximate_builds < 2:
            assert time.monotonic() < deadline, "the worn graph was not rebuilt within 120 s"
            cache.search_vectors("big", queries[0], 10)
            time.sleep(0.05)
        live = [i for i in range(6000) if f"r{i}" not in gone_now]
        for q in queries[:50]:
            got = {i for i, _ in cache.search_vectors("big", q, 10)[0]}
            assert not gone_now & got
            truth = {f"r{live[j]}" for j in np.argsort(unit[live] @ q)[::-1][:10]}
            recalls.append(len(truth & got) / 10)
        assert np.mean(recalls[-50:]) >= 0.95, np.mean(recalls[-50:])


def test_a_failed_approximate_build_is_counted_and_search_stays_exact(
    client: pgmem.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background build raises (here: out of memory): the failure is logged and counted, the memory is
    searched exactly as before, and no build is attempted again for it until a reload."""
    import pgmem.cache.approximate

    def fail(*args: object) -> None:
        raise MemoryError("no room for the graph")

    monkeypatch.setattr(pgmem.cache.approximate.Ann, "build", staticmethod(fail))
    client.vectors.enable("m")
    _fill(client, "m", 60)
    query = client.embedder.embed(["item 7 colour 7 shape 0"])[0]
    with VectorCache(client, approximate_above=50) as cache:
        cache.search_vectors("m", query, 5)
        deadline = time.monotonic() + 30
        while cache.stats.approximate_failures == 0:
            assert time.monotonic() < deadline, "the failed build was not reported"
            time.sleep(0.02)
        for _ in range(5):
            assert same(cache.search_vectors("m", query, 5)[0], _exact(client, "m", query, 5))
        time.sleep(0.2)
        assert cache.stats.approximate_failures == 1 and cache.stats.approximate_builds == 0
        assert not cache.approximate_ready("m")


def test_a_database_error_under_the_cache_is_pgmems(dsn: str, client: pgmem.Client) -> None:
    # The cache reads on its own connection: a statement the server refuses (here the table it reads is
    # gone) leaves as a pgmem error, like any client call's, not the driver's.
    client.vectors.enable("m")
    _fill(client, "m", 5)
    query = client.embedder.embed(["item 1 colour 1 shape 1"])[0]
    with VectorCache(client) as cache:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE pgmem.memory_models RENAME TO memory_models_away")
        try:
            with pytest.raises(pgmem.PgmemError) as raised:
                cache.search_vectors("m", query, 3)
            assert not isinstance(raised.value, psycopg.Error)
            assert "memory_models" in str(raised.value)
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("ALTER TABLE pgmem.memory_models_away RENAME TO memory_models")
        assert len(cache.search_vectors("m", query, 3)[0]) == 3
