# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The client: a namespace, a pool (or the caller's connection), and the repositories."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import psycopg
from psycopg import Connection
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.types import TypeInfo
from psycopg_pool import ConnectionPool

from pgmem._sync.messages import MessageRepository
from pgmem._sync.sessions import Sessions
from pgmem.checks import check_namespace
from pgmem.embeddings import Embedder, default_embedder
from pgmem.errors import ClientClosed, ConnectionFailed, InvalidInput, SchemaOutOfDate, redact, translate
from pgmem.planning.adapters import vector_types
from pgmem.revision import SCHEMA_REVISION
from pgmem.settings import get_settings

if TYPE_CHECKING:
    from pgmem._sync.brains import BrainRepository
    from pgmem._sync.items import ItemRepository
    from pgmem._sync.queues import QueueRepository
    from pgmem._sync.retention import Retention
    from pgmem._sync.stores import StoreRepository
    from pgmem._sync.summaries import SummaryRepository
    from pgmem._sync.vectors import VectorRepository

__all__ = ["Client", "check_pool_size", "check_schema", "conninfo_of"]

T = TypeVar("T")


class _OnFirstUse(Generic[T]):
    """A repository of the client built on first use, its module imported only then: a process that only
    reads and writes messages loads neither the vector wing nor the queues (~10 ms of a cold start,
    benchmarks/startup.py). Built once, under the client's lock (a client is shared between threads);
    after that it is a plain attribute of the client (this descriptor defines no ``__set__``)."""

    def __init__(self, build: Callable[[Client], T]) -> None:
        self._build = build

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, client: None, owner: type) -> _OnFirstUse[T]: ...
    @overload
    def __get__(self, client: Client, owner: type) -> T: ...
    def __get__(self, client: Client | None, owner: type) -> _OnFirstUse[T] | T:
        if client is None:
            return self
        with client._build_lock:
            built: T | None = client.__dict__.get(self._name)
            if built is None:
                built = client.__dict__[self._name] = self._build(client)
        return built


def _queues(client: Client) -> QueueRepository:
    from pgmem._sync.queues import QueueRepository

    return QueueRepository(client)


def _vectors(client: Client) -> VectorRepository:
    from pgmem._sync.vectors import VectorRepository

    return VectorRepository(client, client.sessions)


def _summaries(client: Client) -> SummaryRepository:
    from pgmem._sync.summaries import SummaryRepository

    return SummaryRepository(client)


def _brains(client: Client) -> BrainRepository:
    from pgmem._sync.brains import BrainRepository

    return BrainRepository(client)


def _retention(client: Client) -> Retention:
    from pgmem._sync.retention import Retention

    return Retention(client)


def _stores(client: Client) -> StoreRepository:
    from pgmem._sync.stores import StoreRepository

    return StoreRepository(client)


def _items(client: Client) -> ItemRepository:
    from pgmem._sync.items import ItemRepository

    return ItemRepository(client)


class Client:
    """A connection to pgmem's tables in one namespace, with its repositories.

    Make one with :func:`pgmem.aconnect`; close it (or use it as a context manager) when done. A client
    built from your connection or pool never closes it.

    Attributes:
        namespace: the tenant boundary every operation is scoped to.
        messages: the :class:`AsyncMessageRepository`.
        queues: the :class:`AsyncQueueRepository` (queues, routing to subscribers' inboxes).
        vectors: the :class:`AsyncVectorRepository` (embeddings, vector and hybrid search).
        summaries: the :class:`AsyncSummaryRepository` (hierarchical summaries of memories).
        brains: the :class:`AsyncBrainRepository` (MetaGPT BrainMemory state, with a TTL).
        stores: the :class:`AsyncStoreRepository` (records of named memory stores and indexed files).
        retention: the :class:`AsyncRetention` (purges of what grows: archives, logs, expired brains).
        items: the :class:`AsyncItemRepository` (JSON items at (path, key) with TTLs and vector search;
            LangGraph's store).
        embedder: the embedding provider of this client (default: the configured one, see
            :func:`pgmem.embeddings.default_embedder`).
        retrieval_log: whether searches record what they returned in ``pgmem.retrieval_log`` (default:
            ``PGMEM_RETRIEVAL_LOG``, off); may be switched at any time.

    Every repository but ``messages`` is built on first use.
    """

    queues = _OnFirstUse(_queues)
    vectors = _OnFirstUse(_vectors)
    summaries = _OnFirstUse(_summaries)
    brains = _OnFirstUse(_brains)
    retention = _OnFirstUse(_retention)
    stores = _OnFirstUse(_stores)
    items = _OnFirstUse(_items)

    def __init__(
        self,
        *,
        namespace: str,
        pool: ConnectionPool[Any] | None = None,
        connection: Connection[Any] | None = None,
        owns_pool: bool = False,
        conninfo: str | None = None,
        embedder: Embedder | None = None,
        retrieval_log: bool | None = None,
        sessions: Sessions | None = None,
    ) -> None:
        if (pool is None) == (connection is None):
            raise InvalidInput("a client needs exactly one of a pool or a connection")
        self.namespace = check_namespace(namespace)
        self._pool = pool
        self._conn = connection
        self._owns_pool = owns_pool
        self._closed = False
        self.conninfo = conninfo
        self._build_lock = threading.RLock()  # a repository's constructor may use another one
        self.messages = MessageRepository(self)
        self._embedder = embedder
        # What the client knows of its connections' sessions; shared with the pool's configure hook.
        self.sessions = sessions if sessions is not None else Sessions()
        self.retrieval_log = get_settings().retrieval_log if retrieval_log is None else bool(retrieval_log)

    @classmethod
    def from_conninfo(
        cls,
        conninfo: str,
        *,
        namespace: str = "default",
        min_size: int = 1,
        max_size: int = 10,
        embedder: Embedder | None = None,
        retrieval_log: bool | None = None,
    ) -> Client:
        """Open a pool on ``conninfo`` and return a client that owns it (closing the client closes it).

        The schema revision is checked on the pool's first connection before the pool takes it: one
        connection and one query before the client is ready. :func:`pgmem.aconnect` is the usual way in
        (it finds the DSN and migrates when asked); this is the core's part of it.

        Raises:
            ConnectionFailed: the server cannot be reached (the message names the host and port, never the
                password).
            SchemaOutOfDate: the database is not at the schema revision this pgmem needs.
        """
        check_namespace(namespace)
        check_pool_size(min_size, max_size)
        first = _open_connection(conninfo)
        try:
            vector_types = check_schema(first)
        except BaseException:
            first.close()
            raise
        spare = [first]
        sessions = Sessions(vector_types)
        pool = _LifoConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True},
            connection_class=_handing_out(spare),
            configure=sessions.configure,
            # psycopg_pool's default is 3 workers (threads in the sync flavour), each one costing a cold
            # start ~2.5 ms to start. The pool grows one connection at a time whatever their number: more
            # workers only open the first min_size connections at once.
            num_workers=min(3, max(1, min_size)),
            open=False,
            name="pgmem",
        )
        try:
            with translate():
                pool.open(wait=True, timeout=30)
        finally:
            while spare:  # min_size 0: the pool opens its first connection when first asked
                spare.pop().close()
        try:
            return cls(
                namespace=namespace,
                pool=pool,
                owns_pool=True,
                conninfo=conninfo,
                embedder=embedder,
                retrieval_log=retrieval_log,
                sessions=sessions,
            )
        except BaseException:
            pool.close()
            raise

    @property
    def embedder(self) -> Embedder:
        """The client's embedding provider (created from the settings on first use when not given)."""
        if self._embedder is None:
            self._embedder = default_embedder()
        return self._embedder

    def with_namespace(self, namespace: str) -> Client:
        """A client for another namespace sharing this one's pool or connection (closing it closes nothing)."""
        return Client(
            namespace=namespace,
            pool=self._pool,
            connection=self._conn,
            owns_pool=False,
            conninfo=self.conninfo,
            embedder=self._embedder,
            retrieval_log=self.retrieval_log,
            sessions=self.sessions,
        )

    def search(self, query: str | None = None, **kwargs: Any) -> list[Any]:
        """Semantic search (:meth:`AsyncVectorRepository.search`): ``client.search("text", memory=..., k=5)``."""
        return self.vectors.search(query, **kwargs)

    @property
    def owns_transactions(self) -> bool:
        """Whether this client's transactions are its own (a pool's connections), not part of a caller's
        transaction on a connection it was given."""
        return self._pool is not None

    @property
    def closed(self) -> bool:
        return self._closed or (self._conn is not None and self._conn.closed)

    def close(self) -> None:
        """Close the pool if this client opened it. Idempotent."""
        if self._closed:
            return
        built = self.__dict__  # the repositories built so far (_OnFirstUse)
        if "vectors" in built:
            self.vectors.close()
        self._closed = True
        if "queues" in built:
            self.queues.close()
        if self._owns_pool and self._pool is not None:
            self._pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise ClientClosed("this pgmem client is closed")

    @contextmanager
    def connection(self, connection: Connection[Any] | None = None) -> Iterator[Connection[Any]]:
        """Yield ``connection`` if given, else the client's connection, else one from the pool."""
        self._check_open()
        if connection is not None:
            if connection.closed:
                raise ClientClosed("the connection passed to pgmem is closed")
            yield connection
        elif self._conn is not None:
            yield self._conn
        else:
            assert self._pool is not None
            with self._pool.connection() as conn:
                yield conn

    @contextmanager
    def transaction(self, connection: Connection[Any] | None = None) -> Iterator[Connection[Any]]:
        """Yield a connection inside a transaction block that is all-or-nothing.

        On a pgmem-owned (autocommit) connection this is ``BEGIN … COMMIT``. On a connection already in a
        transaction it is a savepoint inside it: pgmem never commits a transaction it did not open. On a
        non-autocommit connection outside a transaction the statements start the caller's implicit
        transaction, which the caller commits.
        """
        with self.connection(connection) as conn:
            if conn.autocommit or conn.info.transaction_status == TransactionStatus.INTRANS:
                with conn.transaction():
                    yield conn
            else:
                yield conn


class _LifoConnectionPool(ConnectionPool[Any]):
    """A pool that hands out the connection returned last.

    psycopg_pool gives out the connection idle the longest (first in, first out), so serial work rotates
    over every backend the pool ever opened, each with colder CPU caches: a pgvector search through a pool
    grown to 4 connections measured 1.60x a dedicated connection's query, 1.31x with one. Taking the most
    recent one keeps serial work on a warm backend; idle ones still age out from the other end. (This
    touches the pool's internals defensively: without them it behaves like the base pool.)
    """

    def _get_ready_connection(self, timeout: float | None) -> Any:
        idle = getattr(self, "_pool", None)
        if idle:
            idle.rotate(1)  # called under the pool's lock: the newest idle connection goes first
        return super()._get_ready_connection(timeout)


def check_pool_size(min_size: int, max_size: int) -> None:
    """Raise :class:`InvalidInput` unless ``0 <= min_size <= max_size`` and ``max_size >= 1``."""
    if min_size < 0 or max_size < 1 or min_size > max_size:
        raise InvalidInput(f"invalid pool size min_size={min_size} max_size={max_size}")


def _open_connection(conninfo: str) -> Connection[Any]:
    """A new autocommit connection (as the pool's are) to ``conninfo``, or :class:`ConnectionFailed` naming
    the host and port and the cause, never the password."""
    try:
        return Connection.connect(conninfo, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
        where = params.get("host") or "localhost"
        port = params.get("port")
        raise ConnectionFailed(
            f"cannot connect to PostgreSQL at {where}{':' + str(port) if port else ''}: {redact(str(exc)).strip()}"
        ) from None


def _handing_out(spare: list[Connection[Any]]) -> type[Connection[Any]]:
    """A connection class for the pool whose ``connect`` hands out the connections in ``spare`` (already
    open, the schema checked on them) before it opens new ones: the pool's first connection is the one
    the schema check ran on, not a second one."""

    class _PoolConnection(Connection[Any]):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
            try:
                return spare.pop()  # atomic: pool workers are threads in the sync flavour
            except IndexError:
                return super().connect(conninfo, **kwargs)

    return _PoolConnection


#: The revision the database is at (``pgmem.alembic_version`` is alembic's table), and pgvector's types as
#: ``TypeInfo.fetch`` reads them (pgmem.planning.adapters): one row per type, one of NULLs without any.
#: One query, no alembic.
_SCHEMA_REVISION_SQL = """
SELECT v.version_num, t.typname, t.oid, t.typarray, t.oid::regtype::text, t.typdelim
FROM pgmem.alembic_version AS v
LEFT JOIN pg_type AS t
  ON t.oid IN (to_regtype('vector'), to_regtype('bit'), to_regtype('halfvec'), to_regtype('sparsevec'))
"""


def check_schema(conn: Connection[Any]) -> dict[str, TypeInfo]:
    """Raise :class:`SchemaOutOfDate` unless the database at ``conn`` is at :data:`SCHEMA_REVISION`;
    return pgvector's types in it (for :class:`AsyncSessions`: the pool registers them with no query).

    One query. On a connection outside autocommit, or inside a transaction (the caller's), it runs in a
    transaction block of its own (a savepoint inside the caller's transaction), so that a database without
    pgmem's tables never aborts the caller's work.
    """
    with translate():
        try:
            if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
                cur = conn.execute(_SCHEMA_REVISION_SQL)
                rows = cur.fetchall()
            else:
                with conn.transaction():
                    cur = conn.execute(_SCHEMA_REVISION_SQL)
                    rows = cur.fetchall()
        except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
            rows = []  # an empty database: nothing migrated yet
    current = str(rows[0][0]) if rows else None
    if current != SCHEMA_REVISION:
        raise SchemaOutOfDate(
            f"database schema is at {current or 'nothing'}, this pgmem needs {SCHEMA_REVISION}; "
            "run `pgmem migrate` or connect with migrate=True"
        )
    return vector_types(row[1:] for row in rows)


def conninfo_of(conn: Connection[Any]) -> str:
    """The conninfo of an open connection, its password included (to open more connections like it)."""
    info = conn.info
    return psycopg.conninfo.make_conninfo(info.dsn, password=info.password or None)
