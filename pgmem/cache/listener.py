"""The thread that hears other processes' writes: ``LISTEN pgmem_vectors`` on a connection of its own.

The doorbell (:mod:`pgmem.doorbell`) announces each committed change to a memory's vectors as
``["<tag>", rev]`` (the tag names the memory to its namespace only: :mod:`pgmem.planning.notify`) and sends
a beat at least every :data:`pgmem.doorbell.BEAT_SECONDS`. The listener keeps, per memory, the highest
revision known to be committed and how many announcements it had, and whether the cache may trust what it
holds: only while the connection is up and beats arrive. A dropped connection, or beats missing for
:data:`pgmem.doorbell.BEAT_TIMEOUT`, makes it untrusted; the next beat after that starts a new epoch (every
entry caught up before it may have missed announcements).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from pgmem import doorbell
from pgmem.errors import PgmemError, redact

if TYPE_CHECKING:
    from pgmem.cache.stats import CacheStats

__all__ = ["CHANNEL", "Listener"]

log = logging.getLogger("pgmem.cache")  # the package's logger, as before it was split

CHANNEL = "pgmem_vectors"


class Listener:
    """Listens for announcements in a daemon thread, reconnecting with backoff.

    Its state (:attr:`connected`, :attr:`epoch`, :attr:`announced`, :attr:`announcements`, :attr:`tags`) is
    guarded by ``lock``, which the cache shares: one acquisition reads an entry and this state together.

    Args:
        conninfo: where to connect (the client's, password included: never logged).
        lock: the cache's lock.
        stats: the cache's counters (notifications, reconnects, silences).
        on_switch: called, with the lock held, when a memory switched models (its entries are void).
    """

    def __init__(
        self, conninfo: str, lock: threading.Lock, stats: CacheStats, on_switch: Callable[[str], None]
    ) -> None:
        self._conninfo = conninfo
        self._lock = lock
        self._stats = stats
        self._on_switch = on_switch
        # The highest revision announced (or read) per memory, and how many announcements it has had. Kept
        # per memory rather than per entry: an announcement that arrives while an entry is being loaded
        # (before it is in the cache's map) must still count against it.
        self.announced: dict[str, int] = {}
        self.announcements: dict[str, int] = {}
        self.cond = threading.Condition(lock)  # notified whenever ``announced`` moves
        # Notifications name memories by tag (pgmem.planning.notify): the tags of the memories looked at.
        self.tags: dict[str, str] = {}
        self.connected = False  # the listener is up and the doorbell's beats arrive
        self.epoch = 0  # bumped whenever the cache starts trusting its listener again
        self._up = False
        self._beat_at = 0.0  # time.monotonic() of the last beat
        self._closed = False
        self._listening = threading.Event()
        self._beating = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="pgmem-cache-listener", daemon=True)

    def start(self, timeout: float) -> None:
        """Start the thread and wait until its first connection attempt is over.

        Raises:
            PgmemError: the thread did not get that far within ``timeout`` seconds.
        """
        self._thread.start()
        if not self._listening.wait(timeout):
            raise PgmemError(f"the cache's listener could not connect within {timeout:g} s")

    def wait_beating(self, timeout: float) -> bool:
        """Wait for the first beat; whether one came within ``timeout`` seconds."""
        return self._beating.wait(timeout)

    def stop(self) -> None:
        """Tell the thread to stop (it does within a beat interval: :meth:`join`)."""
        self._closed = True

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)

    def watch(self, tag: str, memory: str) -> None:
        """Count the announcements of ``memory``, which notifications name by ``tag``, from now on."""
        with self._lock:
            self.tags[tag] = memory

    def saw(self, memory: str, rev: int) -> None:
        """A load or catch-up read revision ``rev``: it is known to be committed (call with the lock held)."""
        if rev > self.announced.get(memory, 0):
            self.announced[memory] = rev
            self.cond.notify_all()

    def _listen(self) -> None:
        delay = 0.05
        while not self._closed:
            try:
                conn = psycopg.Connection.connect(self._conninfo, autocommit=True)
            except psycopg.Error as exc:
                log.warning("cache listener cannot connect: %s", redact(str(exc)))
                self._listening.set()
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            try:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
                with self._lock:
                    self._up = True  # trusted from the next beat on (_beat)
                self._listening.set()
                delay = 0.05
                while not self._closed:
                    for note in conn.notifies(timeout=doorbell.BEAT_SECONDS):
                        self._notified(note.payload)
                    self._check_beats()
            except psycopg.Error as exc:
                if not self._closed:
                    log.warning("cache listener lost its connection: %s", redact(str(exc)))
            finally:
                with self._lock:
                    self._up = False
                    self.connected = False  # every entry is stale until it has caught up
                    self._stats.reconnects += 0 if self._closed else 1
                try:
                    conn.close()
                except psycopg.Error:
                    pass

    def _check_beats(self) -> None:
        with self._lock:
            if self.connected and time.monotonic() - self._beat_at > doorbell.BEAT_TIMEOUT:
                self.connected = False  # nobody rings: what peers wrote since may not have been announced
                self._stats.silences += 1

    def _beat(self) -> None:
        # Every ring committed before this beat's round has been announced, and heard (in order) before it.
        with self._lock:
            self._beat_at = time.monotonic()
            if self._up and not self.connected:
                self.epoch += 1  # entries caught up before now may have missed announcements
                self.connected = True
        self._beating.set()

    def _notified(self, payload: str) -> None:
        if payload == doorbell.BEAT:
            self._beat()
            return
        # ["<tag>", rev]: the tag of a memory (pgmem.planning.notify), which names it to this namespace only
        try:
            tag, rev = json.loads(payload)
        except (ValueError, TypeError):
            return
        with self._lock:
            memory = self.tags.get(tag) if isinstance(tag, str) else None
        if memory is None or not isinstance(rev, int):
            return  # another namespace's memory, or one of ours this cache never looked at
        self._stats.notifications += 1
        with self._lock:
            self.announcements[memory] = self.announcements.get(memory, 0) + 1
            if rev < 0:  # the memory switched models (pgmem.vectors promote)
                self._on_switch(memory)
            elif rev > self.announced.get(memory, 0):
                self.announced[memory] = rev
            self.cond.notify_all()
