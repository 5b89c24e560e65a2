"""A job run in the background whenever it is kicked (the embedding outbox's worker)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from pgmem._acompat import AEvent, AJob, acurrent_worker, aevent_wait, agather, aspawn

__all__ = ["AsyncBackground"]

log = logging.getLogger("pgmem.background")


class AsyncBackground:
    """Runs ``job`` in the background after every :meth:`kick`: a task on the running loop (async flavour)
    or a daemon thread (sync flavour).

    Kicks coalesce: every kick is followed by at least one complete run of ``job`` that starts after it,
    and kicks that arrive during a run are served together by the next one. The worker stays alive for
    ``idle`` seconds after its last run, so a stream of kicks pays for no task or thread start (whose
    handshake made the kicking thread wait for the new one to get the GIL) and a kick costs the caller
    almost nothing. An error ``job`` raises is logged; the worker goes on.
    """

    def __init__(self, job: AJob, *, idle: float = 5.0, name: str = "pgmem-background") -> None:
        self._job = job
        self._idle = idle
        self._name = name
        # Guards the counters and the hand-over between workers. Never held across an await, so the same
        # lock serves both flavours (in the async one it is uncontended).
        self._state = threading.Lock()
        self._kicks = 0
        self._done = 0
        self._closed = False
        self._worker: Any = None
        self._wake = AEvent()
        self._progress = AEvent()

    def kick(self) -> None:
        """Have ``job`` run (again) soon; returns at once."""
        with self._state:
            if self._closed:
                return
            self._kicks += 1
            if self._worker is None:
                # Fresh events for a fresh worker (in the async flavour: bound to the caller's loop).
                self._wake = AEvent()
                self._progress = AEvent()
                self._worker = aspawn(self._run, self._name)
            else:
                self._wake.set()

    async def _run(self) -> None:
        try:
            while True:
                with self._state:
                    if self._closed:
                        return
                    target = self._kicks
                    idle = self._done == target
                    if idle:
                        self._wake.clear()  # cleared before waiting: a kick from now on wakes the wait
                if idle:
                    if not await aevent_wait(self._wake, self._idle):
                        with self._state:
                            if self._done == self._kicks or self._closed:
                                self._worker = None  # under the lock: a kick from now on starts a new worker
                                return
                    continue
                try:
                    await self._job()
                except Exception:  # noqa: BLE001 - a background job's failure is logged, the worker goes on
                    log.exception("background job %s failed", getattr(self._job, "__qualname__", self._job))
                with self._state:
                    self._done = target
                    self._progress.set()
                    self._progress = AEvent()
        finally:
            with self._state:
                if self._worker is acurrent_worker():
                    self._worker = None
                self._progress.set()  # waiters re-check: this worker is gone

    async def wait(self) -> None:
        """Wait until every kick so far has been served (returns at once when idle, and in the worker)."""
        with self._state:
            if self._worker is not None and self._worker is acurrent_worker():
                return
            target = self._kicks
        while True:
            with self._state:
                if self._done >= target or self._worker is None:
                    return
                progress = self._progress
            await aevent_wait(progress, None)

    async def close(self) -> None:
        """Finish the run under way, then stop (later kicks are ignored)."""
        with self._state:
            self._closed = True
            self._wake.set()
            worker = self._worker
        if worker is not None and worker is not acurrent_worker():
            await agather(worker)
