"""What differs between the async and the generated sync flavour and cannot be rewritten token by token."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def run_blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return func(*args, **kwargs)


def make_lock() -> threading.Lock:
    """A lock for the flavour: asyncio in the async flavour, threading here."""
    return threading.Lock()
