"""Recall you can watch (issue 36, item 4): sampled searches (``pgmem.recall_samples``), their exact top-k
run later by the checker, and the view ``pgmem.search_recall``.

The loss of recall is real: an index scan forced to a tiny ``hnsw.ef_search`` (iterative scans off) over
real MiniLM vectors (``../shared/data/minilm-cpython-comments``) serves answers the checker finds short,
and the exact answers it stores are the ones numpy computes; with pgmem's own settings recall is ~1.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.embeddings import Precomputed
from tests.integration.test_filtered_search import DATA

MINILM = Precomputed("minilm-recall-test", 384)
SMALL = Precomputed("recall-small", 8)
CORPUS = 6_000
K = 10


def _minilm() -> tuple[np.ndarray, np.ndarray]:
    """The first CORPUS vectors of the data set, and 30 queries from its end."""
    if not DATA.exists():
        pytest.skip(f"data set not found at {DATA}")
    vectors = np.load(DATA / "embeddings-f16.npy", mmap_mode="r")
    return np.asarray(vectors[:CORPUS], dtype=np.float32), np.asarray(vectors[-30:], dtype=np.float32)


def _unit(n: int, seed: int = 0, dimension: int = 8) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dimension)).astype(np.float32)
    result: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return result


def _samples(dsn: str, where: str = "true") -> list[dict[str, Any]]:
    """Every namespace's samples (the owner's view), oldest first."""
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(
            "SELECT namespace, kind, strategy, ef_search, k, served_ids, exact_ids, recall, checked_at "
            f"FROM pgmem.recall_samples WHERE {where} ORDER BY id"
        )
        columns = [c.name for c in cur.description or []]
        return [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]


def _view(dsn: str, namespace: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(
            "SELECT model, kind, strategy, sum(samples)::int AS samples, sum(checked)::int AS checked, "
            "sum(mean_recall * checked) / nullif(sum(checked), 0) AS mean_recall, min(min_recall) AS min_recall, "
            "max(last_checked) AS last_checked FROM pgmem.search_recall WHERE namespace = %s "
            "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            (namespace,),
        )
        columns = [c.name for c in cur.description or []]
        return [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]


def _check_all(client: pgmem.Client) -> None:
    """Check every sample of the client's namespace: the background checker may have taken some (its
    first run is due at the first sample)."""
    client.vectors.recall.wait()
    client.vectors.recall.check()
    assert all(f.unchecked == 0 for f in client.vectors.recall.summary())


def _small_memory(client: pgmem.Client, memory: str = "docs", n: int = 40, seed: int = 0) -> np.ndarray:
    client.vectors.enable(memory, SMALL)
    vectors = _unit(n, seed)
    client.messages.add_many(
        memory, [Message(id=f"{memory}-{i}", content=f"note {i} of {memory}") for i in range(n)], embeddings=vectors
    )
    return vectors


# 6,000 real vectors and an HNSW index: the slow leg (.ci/run).
@pytest.mark.slow
def test_a_starved_index_scan_shows_in_the_view_and_a_good_one_does_not(dsn: str) -> None:
    corpus, queries = _minilm()
    with pgmem.connect(dsn, namespace="recall", recall_sample=1.0) as client:
        client.vectors.enable("docs", MINILM)
        ids = [f"d{i}" for i in range(CORPUS)]
        for start in range(0, CORPUS, 2_000):
            client.messages.add_many(
                "docs",
                [Message(id=ids[i], content=f"line {i}") for i in range(start, start + 2_000)],
                embeddings=corpus[start : start + 2_000],
            )
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE pgmem.embeddings; ANALYZE pgmem.memory_entries; ANALYZE pgmem.messages")
        truth = [[ids[i] for i in np.argsort(-(corpus @ q))[:K]] for q in queries]

        # A bad ef_search, as a mistuned index would make it: 2, without iterative scans (which would walk
        # on), so the index returns 2 rows; mode="ann" serves them as they are (auto would search again).
        # (ef_search = k already loses recall here: 0.94 on these 6,000 vectors, against 0.98 below.)
        planner = client.vectors.planner
        planner.scan_settings = lambda strategy, depth: (  # type: ignore[method-assign]
            None if strategy == "exact" else {"hnsw.iterative_scan": "off", "hnsw.ef_search": "2"}
        )
        served = [[h.message.id for h in client.search(vector=q, memory="docs", k=K, mode="ann")] for q in queries]
        _check_all(client)
        bad = _samples(dsn)
        assert [s["served_ids"] for s in bad] == served  # what the caller got, in order
        assert {(s["kind"], s["strategy"], s["ef_search"], s["k"]) for s in bad} == {("vector", "ann", 2, K)}
        for sample, want in zip(bad, truth, strict=True):
            # the checker's exact answer is numpy's (a tie at the k-th place may swap one)
            assert len(set(sample["exact_ids"]) & set(want)) >= K - 1, (sample["exact_ids"], want)
            assert sample["recall"] == pytest.approx(len(set(sample["served_ids"]) & set(sample["exact_ids"])) / K)
        independent = float(np.mean([len(set(s) & set(t)) / K for s, t in zip(served, truth, strict=True)]))
        (row,) = _view(dsn, "recall")
        assert (row["model"], row["kind"], row["strategy"]) == ("minilm-recall-test", "vector", "ann")
        assert row["samples"] == row["checked"] == len(queries)
        assert row["mean_recall"] <= 0.2 + 1e-9, row  # a mean of values <= 0.2, summed in floating point
        assert row["mean_recall"] == pytest.approx(independent, abs=1 / K), (row, independent)
        figures = client.vectors.recall.summary()
        assert [(f.samples, f.unchecked) for f in figures] == [(len(queries), 0)]
        assert figures[0].mean_recall == pytest.approx(row["mean_recall"])

        # pgmem's own index scan settings (ef_search 40, iterative scans): recall ~1.
        del planner.scan_settings
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgmem.recall_samples")
        for q in queries:
            client.search(vector=q, memory="docs", k=K, mode="ann")
        _check_all(client)
        (good,) = _view(dsn, "recall")
        assert good["mean_recall"] >= 0.9, good


def test_off_by_default_nothing_is_sampled(client: pgmem.Client, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGMEM_RECALL_SAMPLE", raising=False)
    assert pgmem.settings.get_settings().recall_sample == 0.0
    with pgmem.connect(dsn, namespace="quiet") as quiet:
        assert quiet.recall_sample == 0.0
        vectors = _small_memory(quiet)
        for q in vectors[:5]:
            quiet.search(vector=q, memory="docs", k=3)
        quiet.vectors.search_many(vectors=vectors[:3], memory="docs", k=3)
        quiet.vectors.hybrid_search("note", vector=vectors[0], memory="docs", k=3)
        assert quiet.vectors.recall.check() == 0
    assert _samples(dsn) == []


def test_the_setting_and_the_argument(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_RECALL_SAMPLE", "1")
    with pgmem.connect(dsn, namespace="env") as client:
        assert client.recall_sample == 1.0
        vectors = _small_memory(client)
        client.search(vector=vectors[0], memory="docs", k=3)
        assert client.with_namespace("other").recall_sample == 1.0
    assert len(_samples(dsn)) == 1
    monkeypatch.setenv("PGMEM_RECALL_SAMPLE", "1.5")
    with pytest.raises(pgmem.InvalidInput, match="PGMEM_RECALL_SAMPLE"):
        pgmem.settings.get_settings()
    monkeypatch.delenv("PGMEM_RECALL_SAMPLE")
    for bad in (-0.1, 2, "0.5", True):
        with pytest.raises(pgmem.InvalidInput, match="recall_sample"):
            pgmem.connect(dsn, namespace="env", recall_sample=bad)  # type: ignore[arg-type]


def test_batch_and_hybrid_searches_are_sampled_and_checked(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="kinds", recall_sample=1.0) as client:
        vectors = _small_memory(client)
        batch = client.vectors.search_many(vectors=vectors[:3], memory="docs", k=4)
        hybrid = client.vectors.hybrid_search("note", vector=vectors[5], memory="docs", k=4, fusion="rrf")
        threshold = client.search(vector=vectors[7], memory="docs", k=4, threshold=0.99)
        _check_all(client)
    samples = _samples(dsn)
    assert [s["kind"] for s in samples] == ["batch"] * 3 + ["hybrid", "vector"]
    assert [s["served_ids"] for s in samples] == [
        *[[h.message.id for h in hits] for hits in batch],
        [h.message.id for h in hybrid],
        [h.message.id for h in threshold],
    ]
    # 40 vectors: the exact strategy served them all, and the checker's exact answer is the same
    assert all(s["strategy"] == "exact" and s["ef_search"] is None for s in samples)
    assert [s["exact_ids"] for s in samples] == [s["served_ids"] for s in samples]
    assert [s["recall"] for s in samples] == [1.0] * 5


def test_the_checker_sees_only_its_namespace(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="tenant-a", recall_sample=1.0) as a:
        b = a.with_namespace("tenant-b")
        for client, seed in ((a, 1), (b, 2)):
            vectors = _small_memory(client, seed=seed)
            for q in vectors[:3]:
                client.search(vector=q, memory="docs", k=3)
        a.vectors.recall.wait()
        b.vectors.recall.wait()
        a.vectors.recall.check()
        assert [s["namespace"] for s in _samples(dsn, "checked_at IS NULL")] == ["tenant-b"] * 3
        assert [(f.samples, f.unchecked) for f in a.vectors.recall.summary()] == [(3, 0)]
        assert [(f.samples, f.unchecked) for f in b.vectors.recall.summary()] == [(0, 3)]
        assert b.vectors.recall.purge(0) == 3  # only its own
        assert {s["namespace"] for s in _samples(dsn)} == {"tenant-a"}
    # the application role sees its own namespace's rows in the view, nothing without a namespace
    with psycopg.connect(dsn) as conn:
        conn.execute("SET ROLE pgmem_app")
        assert conn.execute("SELECT count(*) FROM pgmem.search_recall").fetchone() == (0,)
        conn.execute("SELECT set_config('pgmem.namespace', 'tenant-a', false)")
        assert conn.execute("SELECT sum(samples)::int FROM pgmem.search_recall").fetchone() == (3,)


def test_the_background_worker_checks_and_drops_old_samples(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_RECALL_CHECK_INTERVAL", "0")
    with pgmem.connect(dsn, namespace="bg", recall_sample=1.0) as client:
        vectors = _small_memory(client)
        client.search(vector=vectors[0], memory="docs", k=3)
        client.vectors.recall.wait()
        assert [s["recall"] for s in _samples(dsn)] == [1.0]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE pgmem.recall_samples SET sampled_at = now() - interval '8 days'")
        client.search(vector=vectors[1], memory="docs", k=3)  # kicks the worker: the old sample goes
        client.vectors.recall.wait()
        assert [s["recall"] for s in _samples(dsn)] == [1.0]


async def test_the_async_client_samples_and_its_worker_checks(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_RECALL_CHECK_INTERVAL", "0")
    async with await pgmem.aconnect(dsn, namespace="async", recall_sample=1.0) as client:
        await client.vectors.enable("docs", SMALL)
        vectors = _unit(20)
        await client.messages.add_many(
            "docs", [Message(id=f"m{i}", content=f"m {i}") for i in range(20)], embeddings=vectors
        )
        hits = await client.search(vector=vectors[3], memory="docs", k=5)
        await client.vectors.recall.wait()
        await asyncio.sleep(0)
    (sample,) = _samples(dsn)
    assert sample["served_ids"] == [h.message.id for h in hits] and sample["recall"] == 1.0


def test_forget_removes_the_samples_naming_a_message(client: pgmem.Client, dsn: str) -> None:
    client.recall_sample = 1.0
    vectors = _small_memory(client)
    hits = client.search(vector=vectors[0], memory="docs", k=3)
    client.search(vector=vectors[20], memory="docs", k=3)
    client.vectors.recall.check()
    done = client.retention.forget([hits[0].message.id])
    assert done.recall_samples == 1
    assert [s["served_ids"][0] for s in _samples(dsn)] == ["docs-20"]
    with psycopg.connect(dsn) as conn:
        (counts,) = conn.execute("SELECT counts FROM pgmem.forget_audit ORDER BY id DESC LIMIT 1").fetchone()  # type: ignore[misc]
    assert (json.loads(counts) if isinstance(counts, str) else counts)["recall_samples"] == 1


def test_a_sample_in_the_callers_transaction_goes_with_it(client: pgmem.Client, dsn: str) -> None:
    vectors = _small_memory(client)
    client.recall_sample = 1.0
    with psycopg.connect(dsn) as conn:
        with conn.transaction(force_rollback=True):
            client.search(vector=vectors[0], memory="docs", k=3, connection=conn)
            assert conn.execute("SELECT count(*) FROM pgmem.recall_samples").fetchone() == (1,)
    assert _samples(dsn) == []


def test_stats_and_the_report_show_recall(dsn: str, tmp_path: Any) -> None:
    from pgmem.ops import analytics, report
    from tests.integration.test_cli import run_cli

    with pgmem.connect(dsn, namespace="shown", recall_sample=1.0) as client:
        vectors = _small_memory(client)
        for q in vectors[:4]:
            client.search(vector=q, memory="docs", k=3)
        _check_all(client)
    found = json.loads(run_cli("stats", "--dsn", dsn, "-n", "shown", "--format", "json").stdout)
    (row,) = found["recall"]
    assert (row["model"], row["kind"], row["strategy"], row["samples"], row["unchecked"]) == (
        "recall-small",
        "vector",
        "exact",
        4,
        0,
    )
    assert float(row["mean_recall"]) == 1.0
    assert "search recall" in run_cli("stats", "--dsn", dsn, "-n", "shown").stdout
    with psycopg.connect(dsn) as conn:
        page = report.collect(conn, analytics.Scope("shown"))
    shown = json.dumps(page, default=str)
    assert "Search recall" in shown and "recall-small" in shown
