"""What differs between the async and the generated sync flavour and cannot be rewritten token by token."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def run_blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return func(*args, **kwargs)


def make_lock() -> threading.Lock:
    """A lock for the flavour: asyncio in the async flavour, threading here."""
    return threading.Lock()


def spawn(func: Callable[[], None]) -> threading.Thread:
    """Run ``func`` in the background: a daemon thread here, a task in the async flavour."""
    thread = threading.Thread(target=func, name="pgmem-embedder", daemon=True)
    thread.start()
    return thread


def join(handle: threading.Thread | None) -> None:
    """Wait for a background job started by :func:`spawn`."""
    if handle is not None and handle is not threading.current_thread():
        handle.join()


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine of async-only work (an LLM call) to completion: on a private event loop, in a worker
    thread when this thread already runs a loop (the async flavour awaits it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1, thread_name_prefix="pgmem-llm") as pool:
        return pool.submit(asyncio.run, coroutine).result()
