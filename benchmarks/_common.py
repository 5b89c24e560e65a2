"""Shared helpers of the benchmarks: a throwaway database, timing, the real-text data set, output."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgmem.ops import migrate, server


def _data_dir() -> Path:
    """$PGMEM_SHARED_DATA, else ../shared/data beside the checkout, else /work/shared/data."""
    candidates = [Path(os.environ["PGMEM_SHARED_DATA"])] if os.environ.get("PGMEM_SHARED_DATA") else []
    candidates += [Path(__file__).resolve().parents[2] / "shared" / "data", Path("/work/shared/data")]
    for base in candidates:
        if (base / "minilm-cpython-comments").exists():
            return base / "minilm-cpython-comments"
    return candidates[0] / "minilm-cpython-comments"


DATA = _data_dir()


@contextlib.contextmanager
def bench_database(dsn: str | None, suffix: str = "") -> Iterator[str]:
    """A fresh, migrated database on ``dsn``'s server (default: a throwaway embedded server)."""
    home = None
    if dsn is None:
        dsn = os.environ.get("PGMEM_BENCH_DSN")
    if dsn is None:
        home = Path(tempfile.mkdtemp(prefix="pgmem-bench-"))
        dsn = server.ensure_server(home)
    name = f"pgmem_bench_{os.getpid()}{suffix}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    bench_dsn = make_conninfo(**params)
    migrate.upgrade(bench_dsn)
    try:
        yield bench_dsn
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if home is not None:
            server.stop(home)
            shutil.rmtree(home, ignore_errors=True)


def texts() -> list[str]:
    """35k real English lines (CPython comments and docstrings), read in place from ../shared/data."""
    return list(json.loads((DATA / "texts.json").read_text()))


def timed(fn: Callable[[], Any], *, iterations: int, warmup: int = 20) -> dict[str, float]:
    """p50 / p99 / mean of ``fn`` in microseconds (GC off while timing)."""
    for _ in range(warmup):
        fn()
    samples = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(iterations):
            start = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - start) / 1000)
    finally:
        gc.enable()
    samples.sort()
    return {
        "p50_us": round(samples[len(samples) // 2], 1),
        "p99_us": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))], 1),
        "mean_us": round(statistics.fmean(samples), 1),
        "n": iterations,
    }


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str))


def timed_together(
    fns: dict[str, Callable[[], Any]], *, iterations: int, warmup: int = 20, shuffle: bool = False
) -> dict[str, dict[str, float]]:
    """Time several functions interleaved (a, b, c, a, b, c, …) so that the machine's noise, which drifts
    over seconds on a shared VM, lands on all of them alike; p50 / p99 / mean in microseconds each.

    The rotation keeps the cyclic order, so each function mostly follows the same one. ``shuffle``: a new
    order every round (seeded), so each follows every other alike. Beside CPU-bound processes that matters:
    a call of a few ms that starts right after a long one (which waited out the others' time slices) has a
    fresh slice and runs through, the next ones are preempted and wait ~15 ms (part A at 30k: whichever
    function came first after raw numpy measured ~2 ms p50, the third ~18 ms, whatever it ran)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    items = list(fns.items())
    rng = random.Random(0)
    gc.collect()
    gc.disable()
    try:
        for i in range(iterations):
            if shuffle:
                order = rng.sample(items, len(items))
            else:
                order = items[i % len(items) :] + items[: i % len(items)]
            for name, fn in order:
                start = time.perf_counter_ns()
                fn()
                samples[name].append((time.perf_counter_ns() - start) / 1000)
    finally:
        gc.enable()
    out = {}
    for name, values in samples.items():
        values.sort()
        out[name] = {
            "p50_us": round(values[len(values) // 2], 1),
            "p99_us": round(values[min(len(values) - 1, int(len(values) * 0.99))], 1),
            "mean_us": round(statistics.fmean(values), 1),
            "n": iterations,
        }
    return out


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[list[int]]:
    """``n`` CPU-bound processes spinning for the duration (other agents' work on the same cores); killed
    (by pid) at the end."""
    pids = [
        os.posix_spawn(sys.executable, [sys.executable, "-c", "while True: pass"], dict(os.environ)) for _ in range(n)
    ]
    try:
        time.sleep(0.5)  # let them reach the loop
        yield pids
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        for pid in pids:
            os.waitpid(pid, 0)
