"""What differs between the async and the generated sync flavour and cannot be rewritten token by token."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger("pgmem.background")


async def run_blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work (alembic) without blocking the event loop."""
    return await asyncio.to_thread(func, *args, **kwargs)


def make_lock() -> asyncio.Lock:
    """A lock for the flavour: asyncio here, threading in the sync flavour."""
    return asyncio.Lock()


class Background:
    """A job run in the background whenever it is kicked: a task on the running loop here, a thread in the
    sync flavour.

    Kicks coalesce: every kick is followed by at least one complete run of ``job`` that starts after it,
    and kicks that arrive during a run are served together by the next one. The worker stays alive for
    ``idle`` seconds after its last run, so a stream of kicks pays for no task (or thread) start and a
    kick costs the caller almost nothing. An error ``job`` raises is logged.
    """

    def __init__(self, job: Callable[[], Coroutine[Any, Any, None]], *, idle: float = 5.0) -> None:
        self._job = job
        self._idle = idle
        self._kicks = 0
        self._done = 0
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()

    def kick(self) -> None:
        if self._closed:
            return
        self._kicks += 1
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._progress = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())
        else:
            self._wake.set()

    async def _run(self) -> None:
        try:
            while not self._closed:
                if self._done == self._kicks:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), self._idle)
                    except TimeoutError:
                        if self._done == self._kicks:
                            return
                    continue
                target = self._kicks
                try:
                    await self._job()
                except Exception:  # noqa: BLE001 - a background job's failure is logged, the worker goes on
                    log.exception("background job %s failed", getattr(self._job, "__qualname__", self._job))
                self._done = target
                self._progress.set()
                self._progress = asyncio.Event()
        finally:
            self._progress.set()  # waiters re-check: the task is done by the time they run

    async def wait(self) -> None:
        """Wait until every kick so far has been served (returns at once when idle)."""
        target = self._kicks
        while self._done < target and self._task is not None and not self._task.done():
            progress = self._progress
            await progress.wait()

    async def close(self) -> None:
        """Finish the run under way, then stop (later kicks are ignored)."""
        self._closed = True
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


async def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine of async-only work (an LLM call): awaited here, on a private loop in the sync flavour."""
    return await coroutine
