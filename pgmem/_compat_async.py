"""What differs between the async and the generated sync flavour and cannot be rewritten token by token."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def run_blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work (alembic) without blocking the event loop."""
    return await asyncio.to_thread(func, *args, **kwargs)


def make_lock() -> asyncio.Lock:
    """A lock for the flavour: asyncio here, threading in the sync flavour."""
    return asyncio.Lock()


def spawn(func: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
    """Run ``func`` in the background: a task on the running loop here, a thread in the sync flavour."""
    return asyncio.get_running_loop().create_task(func())


async def join(handle: asyncio.Task[None] | None) -> None:
    """Wait for a background job started by :func:`spawn` (its errors are its own business)."""
    if handle is not None:
        await asyncio.gather(handle, return_exceptions=True)


async def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine of async-only work (an LLM call): awaited here, on a private loop in the sync flavour."""
    return await coroutine
