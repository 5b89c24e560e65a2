"""The pool's plumbing: the LIFO pool, its connection class (hands out the checked connection first,
reconnects after a failure), taking a connection within the deadline, and opening a single connection."""

from __future__ import annotations

import math
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgmem._acompat import arun_blocking, asleep
from pgmem._async import scope
from pgmem.errors import ConnectionFailed, InvalidInput, Timeout, redact, translate
from pgmem.resilience import DEFAULT_TIMEOUT, GuardedAsyncConnection, idle_broken, remaining, verifying

__all__ = ["RECONNECT_INTERVAL", "RECONNECT_WINDOW", "check_pool_size", "lost"]


class _LifoAsyncConnectionPool(AsyncConnectionPool[Any]):
    """A pool that hands out the connection returned last.

    psycopg_pool gives out the connection idle the longest (first in, first out), so serial work rotates
    over every backend the pool ever opened, each with colder CPU caches: a pgvector search through a pool
    grown to 4 connections measured 1.60x a dedicated connection's query, 1.31x with one. Taking the most
    recent one keeps serial work on a warm backend; idle ones still age out from the other end. (This
    touches the pool's internals defensively: without them it behaves like the base pool.)
    """

    #: When a connection of this pool was last lost under a call (:func:`lost`): the connections opened
    #: before it are replaced as they are taken.
    lost_at = -math.inf

    async def _get_ready_connection(self, timeout: float | None) -> Any:
        idle = getattr(self, "_pool", None)
        if idle:
            idle.rotate(1)  # called under the pool's lock: the newest idle connection goes first
        return await super()._get_ready_connection(timeout)


async def take(pool: AsyncConnectionPool[Any]) -> AsyncConnection[Any]:
    """A pool connection within the current deadline. Idle connections whose server went away are closed
    (the pool drops them) and the next one is taken at once (:func:`pgmem.resilience.idle_broken`; the pool's
    own ``check=`` sleeps 1, 2, 4... seconds after each failed check). When none comes in time the call
    raises :class:`ConnectionFailed` if the pool's last attempt to connect failed (the server is down),
    else :class:`Timeout`. A connection opened before the pool's last loss (:func:`lost`) is replaced, and
    a retry (:func:`pgmem.resilience.verified`) checks its connection with a round trip first. Hand it back
    with :func:`give_back`."""
    while True:
        try:
            conn: AsyncConnection[Any] = await pool.getconn(timeout=remaining())
        except PoolTimeout as exc:
            failure = getattr(pool.connection_class, "failure", None)
            if failure is not None:
                raise ConnectionFailed(f"the server cannot be reached: {failure}") from exc
            raise Timeout("no pool connection came free within the call's timeout") from exc
        if not idle_broken(conn) and getattr(conn, "opened_at", math.inf) > getattr(pool, "lost_at", -math.inf):
            if not verifying():
                return conn
            try:
                await pool.check_connection(conn)
                return conn
            except psycopg.Error:
                pass
        await conn.close()
        await pool.putconn(conn)


def lost(pool: AsyncConnectionPool[Any] | None) -> None:
    """A connection of ``pool`` (or the server behind it) was lost under a call: every connection the pool
    opened before now is closed and replaced when it is next taken (SQLAlchemy's pool does the same).
    A loss rarely comes alone (``pg_terminate_backend`` of every backend, a restart, a failover), and a
    round trip's check before use is no proof: a sweep of terminations already under way kills a
    connection after it passed the check (1 call in 51,232 failed its one retry so, under heavy load)."""
    if isinstance(pool, _LifoAsyncConnectionPool):
        pool.lost_at = time.monotonic()


async def end_transaction(conn: AsyncConnection[Any], failed: bool) -> None:
    """As a connection's own ``with`` block ends (``pool.connection()``): a transaction left open is
    committed, or rolled back after a failure (a caller's pool may not be autocommit). pgmem's statements
    end their own, so on its pool this is one status check, not a call into the driver."""
    if conn.closed or conn.pgconn.transaction_status == TransactionStatus.IDLE:
        return
    if not failed:
        await conn.commit()
        return
    with suppress(psycopg.Error):  # the pool rolls back or drops what is left (putconn)
        await conn.rollback()


@asynccontextmanager
async def _pool_connection(
    pool: AsyncConnectionPool[Any], namespace: str | None = None
) -> AsyncIterator[AsyncConnection[Any]]:
    """A pool connection (:func:`take`); with ``namespace``, its session scoped to it for the block (the
    caller's SQL: :func:`pgmem._async.scope.set_session`) and reset once the block's transaction has
    ended, before the pool takes it back."""
    conn = await take(pool)
    failed = False
    try:
        if namespace is not None:
            with translate():
                await scope.set_session(conn, namespace)
        yield conn
    except BaseException:
        failed = True
        raise
    finally:
        try:
            await end_transaction(conn, failed)
        finally:
            if namespace is not None:
                await scope.reset_session(conn)
            await pool.putconn(conn)


def check_pool_size(min_size: int, max_size: int) -> None:
    """Raise :class:`InvalidInput` unless ``0 <= min_size <= max_size`` and ``max_size >= 1``."""
    if min_size < 0 or max_size < 1 or min_size > max_size:
        raise InvalidInput(f"invalid pool size min_size={min_size} max_size={max_size}")


def _connect_timeout(conninfo: str, timeout: float | None) -> dict[str, Any]:
    """``connect_timeout`` for a connection to ``conninfo``: the DSN's own if it names one (or
    ``PGCONNECT_TIMEOUT``'s: an explicit parameter would override libpq's variable), else the client's
    timeout (whole seconds, at least 2 as libpq counts them), else libpq's default."""
    if timeout is None or "connect_timeout" in psycopg.conninfo.conninfo_to_dict(conninfo):
        return {}
    if os.environ.get("PGCONNECT_TIMEOUT", "").strip():
        return {}
    return {"connect_timeout": max(2, math.ceil(timeout))}


async def _open_connection(conninfo: str, timeout: float | None = DEFAULT_TIMEOUT) -> AsyncConnection[Any]:
    """A new autocommit connection (as the pool's are) to ``conninfo``, or :class:`ConnectionFailed` naming
    the host and port and the cause, never the password."""
    try:
        return await GuardedAsyncConnection.connect(conninfo, autocommit=True, **_connect_timeout(conninfo, timeout))
    except psycopg.OperationalError as exc:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
        where = params.get("host") or "localhost"
        port = params.get("port")
        raise ConnectionFailed(
            f"cannot connect to PostgreSQL at {where}{':' + str(port) if port else ''}: {redact(str(exc)).strip()}"
        ) from None


#: The pool's wait for a connection in a client with no timeout (psycopg_pool needs a number).
_NO_LIMIT = 365 * 86400.0

#: How often, and for how long, a pool tries again to connect after a failure before psycopg_pool's own
#: back-off (1, 2, 4, 8... seconds between attempts) takes over: with it alone, clients came back 6 to 18 s
#: after an embedded server that restarted in 1-4 s (tests/faults/test_server_kill.py).
RECONNECT_INTERVAL = 0.25
RECONNECT_WINDOW = 60.0


def _handing_out(
    spare: list[AsyncConnection[Any]],
    restart: Callable[[], object] | None,
    configure: Callable[[AsyncConnection[Any]], Any],  # the sessions' configure (async or not)
) -> type[AsyncConnection[Any]]:
    """A connection class for the pool whose ``connect`` hands out the connections in ``spare`` (already
    open, the schema checked on them) before it opens new ones: the pool's first connection is the one
    the schema check ran on, not a second one.

    Each connection is set up by ``configure`` here (not by the pool). A failed attempt (to connect or to
    configure) calls ``restart`` (the embedded server comes back at once) and tries again every
    :data:`RECONNECT_INTERVAL` seconds for :data:`RECONNECT_WINDOW`; ``failure`` keeps the last failure
    while the server cannot be reached (calls then raise :class:`ConnectionFailed`)."""

    class _PoolConnection(GuardedAsyncConnection):
        failure: str | None = None

        @classmethod
        async def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
            give_up = time.monotonic() + RECONNECT_WINDOW
            while True:
                conn = None
                try:
                    try:
                        conn = spare.pop()  # atomic: pool workers are threads in the sync flavour
                    except IndexError:
                        conn = await super().connect(conninfo, **kwargs)
                    await configure(conn)
                except (psycopg.OperationalError, ConnectionFailed) as exc:
                    if conn is not None:
                        await conn.close()
                    _PoolConnection.failure = redact(str(exc)).strip()
                    if restart is not None:
                        try:
                            await arun_blocking(restart)
                        except ConnectionFailed as failed:
                            _PoolConnection.failure = str(failed)
                    if time.monotonic() >= give_up:
                        raise
                    await asleep(RECONNECT_INTERVAL)
                else:
                    _PoolConnection.failure = None
                    conn.opened_at = time.monotonic()  # type: ignore[attr-defined]  # read by take
                    return conn

    return _PoolConnection
