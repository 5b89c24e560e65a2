"""Timeouts and retries: what a call does when the network stalls, a connection is terminated or the server
is killed (docs/reliability.md has the tests and their figures).

- **Deadlines.** A call through a client runs under a deadline (``pgmem.connect(..., timeout=)``, default
  :data:`DEFAULT_TIMEOUT`), kept in a context variable so that it follows the call through the pool and into
  every statement it runs, in a thread (sync) or a task (async). The connections pgmem opens are
  :class:`GuardedAsyncConnection` / :class:`GuardedConnection`: their ``wait`` (psycopg's one place where a
  connection waits on its socket) gives up at the deadline, closes the connection and raises
  :class:`~pgmem.errors.Timeout`. Closing is the only way out that does not wait on the network: a query
  cancel travels over the same (stalled) network.
- **Idle check.** A pooled connection whose server went away (``pg_terminate_backend``, a killed server)
  has something to read while idle: the server's FATAL message, or end of file. :func:`idle_broken` polls
  the socket (one ``poll`` system call, no round trip) when the pool hands a connection out.
- **Retries.** A call whose connection is lost is run once more on a fresh connection when doing it twice
  is harmless: a statement that only reads (:func:`reads_only`) or a write carrying an idempotency key.
  Other writes raise :class:`~pgmem.errors.CommitUnknown`.

The two connection classes differ only in the wait function of their flavour (psycopg's own pattern).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import math
import os
import re
import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection, Connection, waiting
from psycopg import errors as pg_errors

from pgmem.errors import Timeout

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "GuardedAsyncConnection",
    "GuardedConnection",
    "check_timeout",
    "connection_lost",
    "deadline",
    "idle_broken",
    "paused",
    "verified",
    "verifying",
    "reads_only",
    "remaining",
    "with_connect_timeout",
]

#: Seconds a call may take by default: connecting, waiting for a pool connection and every statement.
DEFAULT_TIMEOUT = 30.0

#: Seconds connecting may take at most where the DSN names no ``connect_timeout`` (nor ``PGCONNECT_TIMEOUT``):
#: a server answers a connection in milliseconds, even across a continent, so a port that never answers
#: (a firewall dropping packets, another service) fails after this, not the call's whole timeout (30 s of
#: silence) nor psycopg's own default (130 s, what ``pgmem migrate`` waited).
CONNECT_TIMEOUT = 10.0

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("pgmem_deadline", default=None)
_VERIFY: contextvars.ContextVar[bool] = contextvars.ContextVar("pgmem_verify", default=False)

#: psycopg's interval between checks for Ctrl-C while it waits on a socket.
_INTERVAL = 0.1


def with_connect_timeout(conninfo: str, timeout: float | None = CONNECT_TIMEOUT) -> str:
    """``conninfo`` with a ``connect_timeout``: the DSN's own (or ``PGCONNECT_TIMEOUT``'s) where it names one,
    else ``timeout`` capped at :data:`CONNECT_TIMEOUT` (None: that), in whole seconds, at least 2 (libpq
    counts less as 2 anyway). A URL stays a URL (the parameter joins its query) and key=value stays
    key=value, so that what pgmem shows of it (password masked) still looks like what was given."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error:
        return conninfo  # connecting says what is wrong with it (pgmem.errors.check_conninfo)
    if "connect_timeout" in params or os.environ.get("PGCONNECT_TIMEOUT", "").strip():
        return conninfo
    seconds = str(max(2, math.ceil(min(timeout or CONNECT_TIMEOUT, CONNECT_TIMEOUT))))
    wanted = {**params, "connect_timeout": seconds}
    if conninfo.startswith(("postgresql://", "postgres://")):
        joined = f"{conninfo}{'&' if '?' in conninfo else '?'}connect_timeout={seconds}"
    else:
        joined = f"{conninfo} connect_timeout={seconds}"
    try:
        if psycopg.conninfo.conninfo_to_dict(joined) == wanted:
            return joined
    except psycopg.Error:
        pass
    # A URL whose user info holds a "?" (libpq takes it as it is): psycopg writes it out as key=value.
    return psycopg.conninfo.make_conninfo(conninfo, connect_timeout=seconds)


def check_timeout(timeout: float | None) -> float | None:
    """A timeout in seconds (positive and finite), or None for none."""
    from pgmem.errors import InvalidInput

    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
        raise InvalidInput(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    return float(timeout)


class _Deadline:
    # A class, not a generator: every statement enters one or two of these (about 1 us less each).
    __slots__ = ("_seconds", "_token")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds
        self._token: contextvars.Token[float | None] | None = None

    def __enter__(self) -> None:
        if self._seconds is None:
            return
        end = time.monotonic() + self._seconds
        current = _DEADLINE.get()
        if current is None or current > end:
            self._token = _DEADLINE.set(end)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _DEADLINE.reset(self._token)
            self._token = None


def deadline(seconds: float | None) -> _Deadline:
    """Run the block under a deadline ``seconds`` from now, unless an enclosing one ends sooner (a call's
    deadline covers every statement it runs, and its retry)."""
    return _Deadline(seconds)


@contextmanager
def paused() -> Iterator[None]:
    """Stop the current deadline's clock inside the block: for work that is not the database's (an
    embedding provider called while a transaction holds its rows), which has timeouts of its own."""
    end = _DEADLINE.get()
    if end is None:
        yield
        return
    left = end - time.monotonic()
    token = _DEADLINE.set(None)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
        _DEADLINE.set(time.monotonic() + left)


@contextmanager
def verified() -> Iterator[None]:
    """Inside the block, a pool connection is checked with a round trip before it is used: a retry after a
    lost connection, when the pool's other connections probably went with it (``pg_terminate_backend`` of
    them all, a restarted server) and may not show it yet (their FATAL message is a few ms away)."""
    token = _VERIFY.set(True)
    try:
        yield
    finally:
        _VERIFY.reset(token)


def verifying() -> bool:
    """Whether the current call asked for verified connections (:func:`verified`)."""
    return _VERIFY.get()


def remaining() -> float | None:
    """Seconds left before the current deadline (0 when past), None without one."""
    end = _DEADLINE.get()
    return None if end is None else max(end - time.monotonic(), 0.0)


def _expired(conn: Any) -> Timeout:
    # The connection's state is unknown (a statement half sent, a result half read): drop it. The server
    # rolls back whatever transaction was open when it sees the connection close.
    conn.pgconn.finish()
    return Timeout("the call did not finish within its timeout; its connection was closed")


class GuardedAsyncConnection(AsyncConnection[Any]):
    """An async connection whose waits end at the current :func:`deadline`, and that closes instead of
    cancelling when its task is cancelled (``asyncio.wait_for``): psycopg's cancel sends a request over
    the network and waits up to 10 s for the answer, so a cancelled call returned 13 s after a 3 s
    ``wait_for`` through a stalled network. Closing returns at once; the pool replaces the connection."""

    async def wait(self, gen: Any, interval: float = _INTERVAL, timeout: float | None = None) -> Any:
        left = remaining()
        if left is None:
            return await super().wait(gen, interval, timeout)
        try:
            return await waiting.wait_async(
                gen, self.pgconn.socket, interval=interval, timeout=left if timeout is None else min(left, timeout)
            )
        except pg_errors._WaitTimeout:
            raise _expired(self) from None
        except (asyncio.CancelledError, KeyboardInterrupt):
            self.pgconn.finish()
            raise


class GuardedConnection(Connection[Any]):
    """The sync twin of :class:`GuardedAsyncConnection`: its waits end at the current :func:`deadline`."""

    def wait(self, gen: Any, interval: float = _INTERVAL, timeout: float | None = None) -> Any:
        left = remaining()
        if left is None:
            return super().wait(gen, interval, timeout)
        try:
            return waiting.wait(
                gen, self.pgconn.socket, interval=interval, timeout=left if timeout is None else min(left, timeout)
            )
        except pg_errors._WaitTimeout:
            raise _expired(self) from None
        except KeyboardInterrupt:
            self.pgconn.finish()
            raise


def idle_broken(conn: AsyncConnection[Any] | Connection[Any]) -> bool:
    """Whether an idle connection has lost its server: an idle session receives nothing unprompted (pool
    connections do not LISTEN), so anything to read is a FATAL message or end of file. One ``poll`` system
    call (about 1 us, benchmarks/faults.py) where psycopg_pool's ``check_connection`` costs a round trip."""
    if conn.closed:
        return True
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


#: SQLSTATEs of a session the server ended: admin_shutdown (pg_terminate_backend, a fast shutdown),
#: crash_shutdown, cannot_connect_now (starting or in recovery), idle_session_timeout; class 08 below.
_LOST_STATES = frozenset({"57P01", "57P02", "57P03", "57P05"})


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (a pgmem error or its psycopg cause) means the connection died under the call (the
    same call may then succeed on another connection), not that the statement failed."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, psycopg.Error):
        cause = cause.__cause__
    if not isinstance(cause, psycopg.OperationalError) or isinstance(cause, pg_errors._WaitTimeout):
        return False
    from psycopg_pool import PoolTimeout

    if isinstance(cause, PoolTimeout):
        return False
    state = cause.sqlstate
    return state is None or state in _LOST_STATES or state.startswith("08")


#: Words that make a statement more than a read: it writes, locks, notifies, takes a sequence value or
#: calls something that might: any of pgmem's functions but pgmem.lineage (STABLE, migration 0020), which
#: every read of a memory's entries calls. Conservative: a read that mentions one is simply not retried.
_NOT_A_READ = re.compile(
    r"\b(?:INSERT|UPDATE|DELETE|MERGE|TRUNCATE|SHARE|pg_notify|NOTIFY|nextval|setval|pg_advisory\w*|pg_try_advisory\w*|"
    r"CALL|COPY|CREATE|DROP|ALTER|ANALYZE|VACUUM|LISTEN)\b|\bpgmem\.(?!lineage\s*\()\w+\s*\(",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=1024)
def reads_only(statement: str) -> bool:
    """Whether the named statement ``statement`` only reads (running it twice is harmless): a SELECT or
    WITH that names nothing of :data:`_NOT_A_READ` (pgmem's own functions count as writes)."""
    code = re.sub(r"--[^\n]*", "", statement).lstrip()  # comments may say anything
    return code.upper().startswith(("SELECT", "WITH")) and _NOT_A_READ.search(code) is None
