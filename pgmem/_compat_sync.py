"""What differs between the async and the generated sync flavour and cannot be rewritten token by token."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger("pgmem.background")


def run_blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return func(*args, **kwargs)


def make_lock() -> threading.Lock:
    """A lock for the flavour: asyncio in the async flavour, threading here."""
    return threading.Lock()


class Background:
    """A job run in the background whenever it is kicked: a daemon thread here, a task on the running loop
    in the async flavour.

    Kicks coalesce: every kick is followed by at least one complete run of ``job`` that starts after it,
    and kicks that arrive during a run are served together by the next one. The thread stays alive for
    ``idle`` seconds after its last run, so a stream of kicks pays for no thread start (whose handshake
    made the kicking thread wait for the new one to get the GIL) and a kick costs the caller almost
    nothing. An error ``job`` raises is logged.
    """

    def __init__(self, job: Callable[[], None], *, idle: float = 5.0, name: str = "pgmem-background") -> None:
        self._job = job
        self._idle = idle
        self._name = name
        self._kicks = 0
        self._done = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()

    def kick(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._kicks += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            else:
                self._cond.notify_all()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while self._done == self._kicks and not self._closed:
                        if not self._cond.wait(self._idle) and self._done == self._kicks:
                            self._thread = None  # under the lock: a kick now starts a new thread
                            self._cond.notify_all()
                            return
                    if self._closed:
                        return
                    target = self._kicks
                try:
                    self._job()
                except Exception:  # noqa: BLE001 - a background job's failure is logged, the worker goes on
                    log.exception("background job %s failed", getattr(self._job, "__qualname__", self._job))
                with self._cond:
                    self._done = target
                    self._cond.notify_all()
        finally:
            with self._cond:
                if self._thread is threading.current_thread():
                    self._thread = None
                self._cond.notify_all()

    def wait(self) -> None:
        """Wait until every kick so far has been served (returns at once when idle, and in the worker)."""
        with self._cond:
            if self._thread is threading.current_thread():
                return
            target = self._kicks
            while self._done < target and self._thread is not None:
                self._cond.wait()

    def close(self) -> None:
        """Finish the run under way, then stop (later kicks are ignored)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine of async-only work (an LLM call) to completion: on a private event loop, in a worker
    thread when this thread already runs a loop (the async flavour awaits it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1, thread_name_prefix="pgmem-llm") as pool:
        return pool.submit(asyncio.run, coroutine).result()
