"""The doorbell: one process per database turns committed writes into notifications.

Writers do not send NOTIFY. A transaction that notifies takes a cluster-wide lock at commit and holds it
through its WAL flush, so notifying writers commit one at a time (``benchmarks/writers.py``). A write that
should wake someone (a push, a publish, a stored vector, a model switch) inserts a row into
``pgmem.doorbell`` in its own transaction instead: an unlogged heap insert, no index, nothing to wait for.
One process per database reads those rows (``pgmem.ring_doorbell``, sql/triggers.sql): it waits for committed
rows, deletes them and sends, in the same transaction, one notification per queue or memory rung, on the
channels consumers (``pgmem_queue``) and caches (``pgmem_vectors``) listen to. Only that transaction takes the
notification lock, and having logged nothing it commits without a flush. A ring inside a caller's
transaction is seen only once that transaction commits, and never if it rolls back.

Election. Every process that listens (a :class:`~pgmem.cache.VectorCache`, a consumer waiting on a queue)
holds a :class:`Doorbell` for its database: a thread with a connection of its own that tries a session
advisory lock (:data:`LOCK_KEY`) every :data:`RETRY_SECONDS`. The holder rings in a loop; the others only
try again. A holder that dies loses the lock with its session: its backend notices the closed socket when
its round ends (at most :data:`WAIT_MS`), and another process takes over within :data:`RETRY_SECONDS`. A
holder that stops without dying (a stopped process, a lost network) has its session ended by the server's
``idle_session_timeout`` (:data:`IDLE_TIMEOUT_MS`). Rows are deleted by the transaction that announces them,
so a change of holder loses nothing: the next one announces what the last did not.

Beats. At least every :data:`BEAT_SECONDS` the holder's round also sends ``NOTIFY pgmem_vectors, 'beat'``
after what it announced: a cache that hears beats knows every write committed before the last one has been
announced to it; one that stops hearing them (:data:`BEAT_TIMEOUT`) treats its entries as stale and catches
up before it answers, until beats return.

What a server needs: nothing beyond PostgreSQL 14 (``idle_session_timeout``); the holder needs a session of
its own (a direct connection, or a pooler in session mode), as ``LISTEN`` does. Nobody rings the doorbell
while no process listens: rows then wait for the first listener (one small row per write that would have
notified).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from pgmem.errors import redact

__all__ = [
    "APPLICATION_NAME",
    "BEAT",
    "BEAT_SECONDS",
    "BEAT_TIMEOUT",
    "LOCK_KEY",
    "Doorbell",
    "DoorbellStats",
    "acquire",
    "release",
]

log = logging.getLogger("pgmem.doorbell")

#: The session advisory lock whose holder rings the doorbell of its database ('pgmem:db' as an int64).
LOCK_KEY = int.from_bytes(b"pgmem:db", "big")
#: How long one round waits in the server for a ring (it polls every millisecond there); a dead holder's
#: backend notices its closed socket at the end of the round.
WAIT_MS = 50
#: How often a process that does not hold the lock tries to take it.
RETRY_SECONDS = 0.25
#: The holder's ``idle_session_timeout``: a holder that stops issuing rounds without dying loses the lock.
IDLE_TIMEOUT_MS = 2000
#: How often the holder sends a beat, and how long a cache waits for one before it stops trusting its entries.
BEAT_SECONDS = 0.1
BEAT_TIMEOUT = 1.0
#: The payload of a beat on the ``pgmem_vectors`` channel.
BEAT = "beat"
#: The ``application_name`` of the doorbell's connections (``pg_stat_activity``).
APPLICATION_NAME = "pgmem-doorbell"

_RING = "SELECT pgmem.ring_doorbell(%s, %s)"
_TRY_LOCK = "SELECT pg_try_advisory_lock(%s)"
_IDLE_TIMEOUT = "SELECT set_config('idle_session_timeout', %s, false)"


@dataclass
class DoorbellStats:
    """Counters since the doorbell was started in this process."""

    elections: int = 0  # times this process took the lock
    rounds: int = 0  # rounds it ran as the holder
    notifications: int = 0  # notifications its rounds sent (beats not counted)
    reconnects: int = 0
    last_wait: float = 0.0  # seconds the last reconnect waited (backoff over failed connects only)


class Doorbell:
    """This process's candidate for ringing its database's doorbell (see the module's docstring).

    Use :func:`acquire` and :func:`release`: one per process and database, shared by every listener in it.
    """

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo  # never logged: it may hold a password
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._connected = False  # the current session connected (a lost one starts the backoff over)
        self._conn_lock = threading.Lock()
        self._refs = 0
        self.leading = False
        self.stats = DoorbellStats()
        self._thread = threading.Thread(target=self._run, name="pgmem-doorbell", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<Doorbell leading={self.leading} closed={self.closed}>"

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        delay = RETRY_SECONDS
        while not self._stop.is_set():
            self._connected = False
            try:
                self._session()
                delay = RETRY_SECONDS
            except psycopg.Error as exc:
                if self._connected:
                    # A session that was up and then lost starts the backoff over: only failures to connect
                    # in a row back off (each lost session waited twice the last, up to 5 s, for the life of
                    # the process: caches waited 5 s for their announcements in the chaos soak).
                    delay = RETRY_SECONDS
                if self._stop.is_set():
                    break
                if isinstance(exc, psycopg.OperationalError):
                    # Losing the session is expected now and then (a restart, the idle timeout of a
                    # stalled holder): the rows wait in the table for whoever rings next.
                    log.info("the doorbell's connection was lost: %s", redact(str(exc)))
                else:
                    # A schema without pgmem.ring_doorbell, a privilege missing: said loudly, tried again.
                    # Meanwhile consumers still wake by polling and caches catch up without beats.
                    log.warning("the doorbell cannot ring: %s", redact(str(exc)))
                self.stats.reconnects += 1
                self.stats.last_wait = delay
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)
            finally:
                self.leading = False

    def _session(self) -> None:
        conn = psycopg.Connection.connect(self._conninfo, autocommit=True, application_name=APPLICATION_NAME)
        with self._conn_lock:
            if self._stop.is_set():
                conn.close()
                return
            self._conn = conn
        self._connected = True
        try:
            while not self._stop.is_set():
                row = conn.execute(_TRY_LOCK, (LOCK_KEY,)).fetchone()
                if row is not None and row[0]:
                    break
                self._stop.wait(RETRY_SECONDS)
            else:
                return
            conn.execute(_IDLE_TIMEOUT, (f"{IDLE_TIMEOUT_MS}ms",))
            self.leading = True
            self.stats.elections += 1
            beaten = 0.0
            while not self._stop.is_set():
                now = time.monotonic()
                beat = now - beaten >= BEAT_SECONDS
                row = conn.execute(_RING, (WAIT_MS, beat), prepare=True).fetchone()
                if beat:
                    beaten = now
                self.stats.rounds += 1
                self.stats.notifications += int(row[0]) if row is not None else 0
        finally:
            with self._conn_lock:
                self._conn = None
            conn.close()

    def close(self, timeout: float = 5.0) -> None:
        """Stop ringing (another process takes over) and close the connection."""
        self._stop.set()
        with self._conn_lock:
            conn = self._conn
        if conn is not None:
            try:
                conn.cancel_safe(timeout=1.0)  # end the round now rather than at its deadline
            except psycopg.Error:
                pass
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)


_bells: dict[tuple[int, str], Doorbell] = {}
_bells_lock = threading.Lock()


def acquire(conninfo: str) -> Doorbell:
    """This process's doorbell for the database of ``conninfo``, started on first use. Pair with
    :func:`release`. Keyed by process id too: a forked child starts its own."""
    key = (os.getpid(), conninfo)
    with _bells_lock:
        bell = _bells.get(key)
        if bell is None or bell.closed:
            bell = _bells[key] = Doorbell(conninfo)
        bell._refs += 1
        return bell


def release(bell: Doorbell) -> None:
    """Give back a doorbell from :func:`acquire`; the last release stops it."""
    with _bells_lock:
        bell._refs -= 1
        if bell._refs > 0:
            return
        for key, known in list(_bells.items()):
            if known is bell:
                del _bells[key]
    bell.close()
