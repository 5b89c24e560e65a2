"""What differs between the async and the generated sync flavour and cannot be rewritten token by token."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def run_blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work (alembic) without blocking the event loop."""
    return await asyncio.to_thread(func, *args, **kwargs)


def make_lock() -> asyncio.Lock:
    """A lock for the flavour: asyncio here, threading in the sync flavour."""
    return asyncio.Lock()
