# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""Read replicas: searches and analytics read from streaming replicas, and still see the client's own writes.

A client given replicas (``pgmem.connect(dsn, replicas=[...])`` or ``PGMEM_REPLICA_DSNS``) opens a small pool
on each one when first needed, configured like its own (:meth:`AsyncSessions.configure`: pgvector's types,
the HNSW settings, the application role) and read-only. Reads go to the replicas in turn.

Read-your-writes, at the cost of two round trips per read that follows a write (the primary's WAL position,
the replica's replay position), and none otherwise: every use of a primary connection by the client counts as
a possible write (``wrote``, a counter bumped after the statement returned, so after its commit). A replica
read that finds the counter moved since it last looked asks the primary for its WAL flush position
(``sql/replicas.sql``): every commit that returned before that lies at or before it. The replica is then read
once it has replayed that far (``pg_last_wal_replay_lsn``, polled every 1-20 ms while it is behind; remembered
per replica, so later reads need no check), within ``wait`` seconds; past that the read goes to the primary.
Returning the commit position from each write statement instead would cost nothing per read but would touch
every write statement of pgmem (and a caller's own transaction commits outside pgmem); asking on the read side
covers both, and reads that follow only reads (a search loop) pay nothing. The position may include other
clients' later writes: the wait is for the replica's lag, never for a write that has not happened.

A replica that cannot be reached, or breaks during a read, is skipped for ``backoff`` seconds (a new
connection is tried after that); one that has not caught up within ``wait`` is skipped for as long. The read
runs again on the next replica or the primary: a replica never costs the caller an error. A read the replica
refuses (an error from the database) runs again on the primary, so a statement that writes (the retrieval
log) or a replica behind on migrations costs one wasted try, never a wrong answer. Counters per replica:
:meth:`AsyncReplicas.stats`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import Connection
from psycopg_pool import ConnectionPool

from pgmem._acompat import Lock, OnConnection, sleep
from pgmem._sync import scope
from pgmem._sync.executor import Block
from pgmem._sync.pooling import _pool_connection
from pgmem.errors import PgmemError
from pgmem.planning import statements
from pgmem.planning.replicas import ReadStats, ReplicaStats, describe

if TYPE_CHECKING:
    from pgmem._sync.sessions import Sessions

__all__ = ["BACKOFF", "Replicas"]

Q = statements.load("replicas")
T = TypeVar("T")

#: Seconds a replica that failed or lagged past ``wait`` is left alone before it is tried again.
BACKOFF = 5.0
#: Seconds between two looks at a replica's replay position while a read waits for it (doubling from the
#: first). Streaming replication on one host replays a commit in well under a millisecond.
POLL_FIRST, POLL_MAX = 0.001, 0.02


class _Replica:
    """One replica: its DSN, its pool (None until first used, and while it is down), its state, counters."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self.name = describe(conninfo)
        self.pool: ConnectionPool[Any] | None = None
        self.opening = Lock()
        self.state = "up"
        self.until = 0.0  # while down or lagging: when to try again
        self.replayed = -1  # the furthest replay position seen (bytes)
        self.reads = self.waited = self.skipped_down = self.skipped_lag = self.errors = 0


class _Skip(Exception):
    """This replica cannot serve this read now (down, or lagging past the wait): try the next one."""


class Replicas:
    """The replicas of one client and the routing of its reads (see the module's docstring).

    ``run(read)`` runs ``read(conn)`` on a replica that has the client's writes, else on the primary;
    ``connection()`` yields such a connection for work of the caller's (analytics, ``pgmem stats``);
    ``wrote()`` is called by the client after each use of a primary connection.
    """

    def __init__(
        self,
        conninfos: list[str],
        *,
        primary: ConnectionPool[Any],
        sessions: Sessions,
        wait: float,
        max_size: int,
    ) -> None:
        self._replicas = [_Replica(c) for c in conninfos]
        self._primary = primary
        self._sessions = sessions
        #: Seconds a read waits for a replica to replay the client's writes before it reads the primary.
        self.wait = wait
        #: Seconds a replica that failed or lagged is skipped.
        self.backoff = BACKOFF
        self._max_size = max_size
        self._lock = threading.Lock()  # counters and positions; never held across a round trip
        self._next = 0
        self._writes = 0  # primary uses so far (see wrote)
        self._seen = 0  # the value of _writes the last position was read after
        self._position: int | None = None  # the primary's WAL position after the client's last write
        self._primary_reads = 0
        self._checks = 0
        self._closed = False

    def wrote(self) -> None:
        """A primary connection of the client was used (after its statement returned): maybe a write."""
        with self._lock:
            self._writes += 1

    def stats(self) -> ReadStats:
        """The routed reads so far, per replica (see :class:`ReplicaStats`)."""
        now = time.monotonic()
        with self._lock:
            return ReadStats(
                tuple(
                    ReplicaStats(
                        r.name,
                        r.state if r.until > now else "up",
                        r.reads,
                        r.waited,
                        r.skipped_down,
                        r.skipped_lag,
                        r.errors,
                    )
                    for r in self._replicas
                ),
                self._primary_reads,
                self._checks,
            )

    def run(self, read: OnConnection[T]) -> T:
        """``read(conn)`` on a replica that has replayed the client's writes, else on the primary.

        A replica that fails during the read is skipped and the read runs again elsewhere; errors of the
        read itself that are not the database's (bad input) propagate at once."""
        target = self._target()
        deadline = time.monotonic() + self.wait
        for replica in self._order():
            try:
                with self._connection(replica, target, deadline, check=False) as conn:
                    try:
                        result = self._read(replica, conn, target, deadline, read)
                    except _Skip:
                        raise
                    except Exception as exc:
                        if not _from_database(exc):
                            raise
                        broken = conn.closed or conn.broken
                        if broken:
                            self._down(replica)
                        else:
                            with self._lock:
                                replica.errors += 1
                        if broken:
                            continue  # the next replica, else the primary
                        break  # the database refused it: the primary
                with self._lock:
                    replica.reads += 1
                return result
            except _Skip:
                continue
        with self._lock:
            self._primary_reads += 1
        with self._primary.connection() as conn:
            return read(conn)

    @contextmanager
    def connection(self, namespace: str | None = None) -> Iterator[Connection[Any]]:
        """A replica connection that has the client's writes, else a primary one (for a block of reads);
        with ``namespace``, its session scoped to it for the block (as the client's ``read_connection``
        does; :func:`pgmem._async.scope.set_session`) and reset before its pool takes it back.

        The choice is made once: a replica that fails inside the block raises there (use :meth:`run` to
        have the read tried again)."""
        target = self._target()
        deadline = time.monotonic() + self.wait
        for replica in self._order():
            try:
                with self._connection(replica, target, deadline) as conn:
                    if namespace is not None:
                        try:
                            scope.set_session(conn, namespace)
                        except psycopg.Error:
                            self._down(replica)
                            raise _Skip() from None
                    with self._lock:
                        replica.reads += 1
                    try:
                        yield conn
                    finally:
                        if namespace is not None:
                            scope.reset_session(conn)  # read-only: rolling back loses nothing
                    return
            except _Skip:
                continue
        with self._lock:
            self._primary_reads += 1
        with _pool_connection(self._primary, namespace) as conn:
            yield conn

    def close(self) -> None:
        """Close the replicas' pools. Idempotent."""
        self._closed = True
        for replica in self._replicas:
            pool, replica.pool = replica.pool, None
            if pool is not None:
                pool.close()

    # -- choosing -----------------------------------------------------------------------------------------

    def _order(self) -> list[_Replica]:
        """The replicas to try, in turn from the next one round the ring; those in a back-off are counted
        as skipped and left out."""
        now = time.monotonic()
        with self._lock:
            start = self._next
            self._next = (start + 1) % len(self._replicas)
            ring = self._replicas[start:] + self._replicas[:start]
            usable = []
            for replica in ring:
                if replica.until > now:
                    if replica.state == "lagging":
                        replica.skipped_lag += 1
                    else:
                        replica.skipped_down += 1
                else:
                    usable.append(replica)
            return usable

    def _target(self) -> int | None:
        """The WAL position a replica must have replayed for this read: None before the client's first
        write; after a write, the primary's flush position (one round trip, only when the client used the
        primary since the last time it asked)."""
        with self._lock:
            writes = self._writes
            if writes == self._seen:
                return self._position
            self._checks += 1
        with self._primary.connection() as conn:  # not the client's: this use is no write
            row = Block(conn).one(Q["primary_position"])  # the server's, in no namespace
        position = int(row[0]) if row is not None and row[0] is not None else 0
        with self._lock:
            self._seen = max(self._seen, writes)
            self._position = max(self._position or 0, position)
            return self._position

    @contextmanager
    def _connection(
        self, replica: _Replica, target: int | None, deadline: float, *, check: bool = True
    ) -> Iterator[Connection[Any]]:
        """A connection of ``replica`` (``check``: once it has replayed ``target``); :class:`_Skip` when it is
        down or does not get there by ``deadline``."""
        pool = replica.pool or self._open(replica)
        try:
            conn = pool.getconn(timeout=max(0.5, deadline - time.monotonic()))
        except psycopg.OperationalError:  # PoolTimeout: its connections are gone and no new one comes
            self._down(replica)
            raise _Skip() from None
        try:
            if check and target is not None and replica.replayed < target:
                try:
                    caught_up = self._catch_up(replica, conn, target, deadline)
                except PgmemError as exc:
                    if not _from_database(exc):
                        raise
                    self._down(replica)
                    raise _Skip() from None
                if not caught_up:
                    self._lagging(replica)
                    raise _Skip()
            yield conn
        finally:
            pool.putconn(conn)

    def _read(
        self, replica: _Replica, conn: Connection[Any], target: int | None, deadline: float, read: OnConnection[T]
    ) -> T:
        """``read(conn)`` once ``replica`` has replayed ``target`` (:class:`_Skip` when it lags past ``deadline``).

        A replica not yet seen that far is asked its replay position first (one round trip), and polled while
        it is behind. (Sending that question in one pipeline with the read saves the round trip when the
        replica has caught up, but the question then comes sooner, finds the replica behind more often, and
        the read runs twice: 13 of 100 reads after a write against 1 of 100, and no faster at p50, measured
        with benchmarks/replicas.py's read-your-writes loop on a loaded 2-core VM.)"""
        if target is not None and replica.replayed < target:
            if not self._catch_up(replica, conn, target, deadline):
                self._lagging(replica)
                raise _Skip()
        return read(conn)

    def _replayed(self, replica: _Replica, row: Any, target: int, *, waited: bool) -> bool:
        """Note the replica's replay position (a row of ``replayed_position``); whether it has reached
        ``target``. NULL: a server not in recovery (the primary itself given as a replica) has every commit."""
        replayed = target if row is None or row[0] is None else int(row[0])
        with self._lock:
            replica.replayed = max(replica.replayed, replayed)
            if replayed >= target:
                replica.waited += waited
                return True
        return False

    def _lagging(self, replica: _Replica) -> None:
        """Skip ``replica`` for a back-off: it did not replay the client's writes within the wait."""
        with self._lock:
            replica.skipped_lag += 1
            replica.state, replica.until = "lagging", time.monotonic() + self.backoff

    def _catch_up(self, replica: _Replica, conn: Connection[Any], target: int, deadline: float) -> bool:
        """Poll the replica's replay position until it reaches ``target`` (True) or ``deadline`` passes."""
        pause = POLL_FIRST
        waited = False
        while True:
            row = Block(conn).one(Q["replayed_position"])
            if self._replayed(replica, row, target, waited=waited):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            waited = True
            sleep(min(pause, left))
            pause = min(pause * 2, POLL_MAX)

    def _open(self, replica: _Replica) -> ConnectionPool[Any]:
        """The replica's pool, opened on its first connection (which fails at once when the server is
        down: :class:`_Skip`)."""
        with replica.opening:
            if replica.pool is not None:
                return replica.pool
            if self._closed:
                raise _Skip()
            try:  # refused at once when the server is down, where the pool would retry for its timeout
                first = Connection.connect(replica.conninfo, autocommit=True, connect_timeout=2)
            except psycopg.Error:
                self._down(replica)
                raise _Skip() from None
            pool = ConnectionPool(
                replica.conninfo,
                min_size=1,
                max_size=self._max_size,
                kwargs={"autocommit": True, "connect_timeout": 2},
                connection_class=_first_then_new(first),
                configure=self._configure,
                num_workers=1,
                open=False,
                name=f"pgmem-replica-{replica.name}",
            )
            try:
                pool.open(wait=True, timeout=5)
            except psycopg.Error:  # configuring the first connection failed
                pool.close()
                self._down(replica)
                raise _Skip() from None
            replica.pool = pool
            with self._lock:
                replica.state, replica.until = "up", 0.0
            return pool

    def _configure(self, conn: Connection[Any]) -> None:
        """A replica connection is set up as the client's own are (types, HNSW settings, role), and marked
        read-only: the client counts no use of it as a write, and a transaction on it is ``READ ONLY``."""
        self._sessions.configure(conn)
        conn.set_read_only(True)

    def _down(self, replica: _Replica) -> None:
        """Skip ``replica`` for a back-off (this read counted); its pool goes, with the connections to the
        dead server (a new one is opened when the replica is tried again)."""
        with self._lock:
            replica.skipped_down += 1
            replica.state, replica.until = "down", time.monotonic() + self.backoff
            pool, replica.pool = replica.pool, None
        if pool is not None:
            pool.close(timeout=1.0)


def _from_database(exc: BaseException) -> bool:
    """Whether ``exc`` came from the database or the connection (a driver error, or pgmem's translation of
    one), not from the read's own checks."""
    return isinstance(exc, psycopg.Error) or isinstance(exc.__cause__, psycopg.Error)


def _first_then_new(first: Connection[Any]) -> type[Connection[Any]]:
    """A connection class for a replica's pool that hands out ``first`` (the probe that found the replica
    up, already configured) before it opens new ones."""
    spare = [first]

    class _ReplicaConnection(Connection[Any]):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
            try:
                return spare.pop()  # atomic: pool workers are threads in the sync flavour
            except IndexError:
                return super().connect(conninfo, **kwargs)

    return _ReplicaConnection
