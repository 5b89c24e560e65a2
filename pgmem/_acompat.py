"""The seam between the async source (``pgmem/_async``) and the generated sync code (``pgmem/_sync``).

``tools/gen_sync.py`` rewrites the async source token by token; the few things that cannot be rewritten so
(a task or a thread, an asyncio or a threading event, awaiting a coroutine or running it on a private
loop) are named here in pairs: the async source uses the ``A``/``a`` name of each pair and the generator
renames it to the sync one. This is the one bridge between the flavours (psycopg's ``_acompat`` is the
model); nothing else in pgmem keeps two hand-written copies.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeAlias, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

# -- the async flavour ------------------------------------------------------------------------------------

#: A background job of the async flavour: a coroutine function.
AJob: TypeAlias = Callable[[], Awaitable[None]]
#: Work the async flavour runs on a connection it is handed (a replica's or the primary's).
AOnConnection: TypeAlias = Callable[[Any], Awaitable[T]]
AEvent = asyncio.Event
ALock = asyncio.Lock


def aspawn(job: Callable[[], Coroutine[Any, Any, None]], name: str) -> asyncio.Task[None]:
    """Run ``job`` concurrently: a task on the running loop."""
    return asyncio.get_running_loop().create_task(job(), name=name)


async def agather(worker: asyncio.Task[None]) -> None:
    """Wait for a worker started by :func:`aspawn` to end (its exception is the worker's to log)."""
    await asyncio.gather(worker, return_exceptions=True)


def acurrent_worker() -> object | None:
    """What :func:`aspawn` returned for the code running now (the current task)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


async def aevent_wait(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait for ``event``; False when ``timeout`` seconds passed first."""
    if timeout is None:
        await event.wait()
        return True
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        return False
    return True


async def arun_blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work (alembic, starting a server) without blocking the event loop: in a worker thread."""
    return await asyncio.to_thread(func, *args, **kwargs)


async def asleep(seconds: float) -> None:
    """Pause this task (a poll's interval)."""
    await asyncio.sleep(seconds)


async def adrive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run async-only work of the caller's (an LLM's ``aask``): awaited here."""
    return await coroutine


# -- the sync flavour -------------------------------------------------------------------------------------

#: A background job of the sync flavour: a function.
Job: TypeAlias = Callable[[], None]
#: Work the sync flavour runs on a connection it is handed.
OnConnection: TypeAlias = Callable[[Any], T]
Event = threading.Event
Lock = threading.Lock


def spawn(job: Callable[[], None], name: str) -> threading.Thread:
    """Run ``job`` concurrently: a daemon thread."""
    thread = threading.Thread(target=job, name=name, daemon=True)
    thread.start()
    return thread


def gather(worker: threading.Thread) -> None:
    """Wait for a worker started by :func:`spawn` to end."""
    worker.join()


def current_worker() -> object | None:
    """What :func:`spawn` returned for the code running now (the current thread)."""
    return threading.current_thread()


def event_wait(event: threading.Event, timeout: float | None) -> bool:
    """Wait for ``event``; False when ``timeout`` seconds passed first."""
    return event.wait(timeout)


def run_blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work: in the sync flavour, right here."""
    return func(*args, **kwargs)


def sleep(seconds: float) -> None:
    """Pause this thread (a poll's interval)."""
    time.sleep(seconds)


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run async-only work of the caller's (an LLM's ``aask``) to completion: on a private event loop, in a
    worker thread when this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1, thread_name_prefix="pgmem-llm") as pool:
        return pool.submit(asyncio.run, coroutine).result()


#: The pairs :mod:`tools.gen_sync` renames (async name -> sync name).
SYNC_NAMES = {
    "AJob": "Job",
    "AOnConnection": "OnConnection",
    "AEvent": "Event",
    "ALock": "Lock",
    "aspawn": "spawn",
    "agather": "gather",
    "acurrent_worker": "current_worker",
    "aevent_wait": "event_wait",
    "arun_blocking": "run_blocking",
    "adrive": "drive",
    "asleep": "sleep",
}
