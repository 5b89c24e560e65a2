"""The background worker behind the embedder (pgmem._async.background, generated into pgmem._sync.background)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pgmem._async.background import AsyncBackground
from pgmem._sync.background import Background


def test_sync_kicks_coalesce_and_wait_sees_every_kick_served() -> None:
    runs: list[int] = []
    gate = threading.Event()

    def job() -> None:
        gate.wait(5)
        runs.append(len(runs))

    worker = Background(job, idle=5.0)
    worker.kick()  # run 1 starts and blocks on the gate
    time.sleep(0.05)
    for _ in range(5):  # all served by one more run
        worker.kick()
    gate.set()
    worker.wait()
    assert len(runs) == 2
    worker.wait()  # idle: returns at once
    assert len(runs) == 2
    worker.close()


def test_sync_worker_stops_when_idle_and_a_later_kick_starts_it_again() -> None:
    runs: list[str] = []
    worker = Background(lambda: runs.append(threading.current_thread().name), idle=0.05)
    worker.kick()
    worker.wait()
    time.sleep(0.3)
    assert worker._worker is None  # the idle thread went away
    worker.kick()
    worker.wait()
    assert len(runs) == 2
    worker.close()
    worker.kick()  # after close: ignored
    worker.wait()
    assert len(runs) == 2


def test_sync_a_failing_job_does_not_leave_waiters_hanging() -> None:
    def job() -> None:
        raise RuntimeError("boom")

    worker = Background(job, idle=5.0)
    worker.kick()
    done = threading.Event()
    threading.Thread(target=lambda: (worker.wait(), done.set()), daemon=True).start()
    assert done.wait(5)
    worker.close()


def test_sync_wait_from_the_worker_itself_returns() -> None:
    worker: Background
    seen: list[bool] = []

    def job() -> None:
        worker.wait()  # e.g. flush() called from the embedder's own thread
        seen.append(True)

    worker = Background(job, idle=5.0)
    worker.kick()
    worker.wait()
    assert seen == [True]
    worker.close()


@pytest.mark.asyncio
async def test_async_kicks_coalesce_and_wait_sees_every_kick_served() -> None:
    runs: list[int] = []
    gate = asyncio.Event()

    async def job() -> None:
        await gate.wait()
        runs.append(len(runs))

    worker = AsyncBackground(job, idle=5.0)
    worker.kick()
    await asyncio.sleep(0.01)
    for _ in range(5):
        worker.kick()
    gate.set()
    await asyncio.wait_for(worker.wait(), 5)
    assert len(runs) == 2
    await asyncio.wait_for(worker.wait(), 5)
    assert len(runs) == 2
    await worker.close()


@pytest.mark.asyncio
async def test_async_worker_stops_when_idle_and_restarts() -> None:
    runs: list[int] = []

    async def job() -> None:
        runs.append(1)

    worker = AsyncBackground(job, idle=0.02)
    worker.kick()
    await worker.wait()
    await asyncio.sleep(0.1)
    assert worker._worker is None  # the idle task ended
    worker.kick()
    await asyncio.wait_for(worker.wait(), 5)
    assert len(runs) == 2
    await worker.close()
    worker.kick()
    await asyncio.wait_for(worker.wait(), 5)
    assert len(runs) == 2
