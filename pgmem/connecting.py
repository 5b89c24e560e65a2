"""Connecting: where the core meets its environment (the composition root).

:func:`connect` and :func:`aconnect` find the server (:func:`resolve_dsn`: the argument, else
``PGMEM_DSN``, else the embedded server under ``PGMEM_HOME``), open the client through the core
(``Client.from_conninfo``: one connection, the schema revision checked on it with one query before the pool
takes it) and migrate when the schema is behind and migrating is allowed. Only here does the library reach
into operations (``pgmem.ops.server``, ``pgmem.ops.migrate``), and only when it must: ``import pgmem`` and a
connect to an up-to-date database load neither alembic nor SQLAlchemy, which cost more than the rest of a
cold start together (``benchmarks/startup.py``).

The two flavours are written out here (the sync one is not generated: ``tools/gen_sync.py`` covers the
core); they differ only in their awaits, and in the async one sending blocking work (starting the embedded
server, running alembic) to a worker thread. Each imports its flavour of the core when first called, so a
sync agent never loads the async flavour, nor an async one the sync flavour.

This module also holds the process-wide default client that facades use when given ``client=None``. It is
created on first use from the environment (``PGMEM_DSN``, else the embedded server under ``PGMEM_HOME``;
namespace ``PGMEM_NAMESPACE``) and recreated in a child process after ``fork``.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgmem._acompat import arun_blocking
from pgmem.checks import check_namespace
from pgmem.errors import (
    ConnectionFailed,
    InvalidInput,
    PermissionDenied,
    SchemaOutOfDate,
    check_conninfo,
    connection_advice,
)
from pgmem.resilience import DEFAULT_TIMEOUT, with_connect_timeout
from pgmem.settings import get_settings

if TYPE_CHECKING:
    from pgmem._async.client import AsyncClient
    from pgmem._sync.client import Client
    from pgmem.embeddings import Embedder

__all__ = [
    "aconnect",
    "connect",
    "get_default_client",
    "reset_default_client",
    "resolve_dsn",
    "set_default_client",
]


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN pgmem connects to: ``dsn``, else ``PGMEM_DSN``, else the embedded server under
    ``PGMEM_HOME`` (started on first use and shared by every process; this call waits for it)."""
    return _configured_dsn(dsn) or _embedded_dsn()


def _configured_dsn(dsn: str | None) -> str | None:
    chosen = dsn or get_settings().dsn or None
    # Parsed here so that a malformed DSN is InvalidInput without its password, not psycopg's
    # ProgrammingError quoting the part it could not parse (possibly the password).
    return None if chosen is None else check_conninfo(chosen)


def _embedded_dsn() -> str:
    from pgmem.ops.server import ensure_server

    return ensure_server(get_settings().home)


def _embedded_dsns() -> tuple[str, str]:
    """The embedded server's DSNs: its superuser's (migrations, DDL) and its agent role's (everything else:
    the superuser is not held by row-level security, so day-to-day connections must not use it)."""
    from pgmem.ops.server import agent_dsn

    owner = _embedded_dsn()
    return owner, agent_dsn(owner)


def _upgrade(conninfo: str) -> None:
    from pgmem.ops.migrate import upgrade

    upgrade(conninfo)


_C = TypeVar("_C", "Client", "AsyncClient")


def _replica_options(dsn: object, replicas: Any, wait: Any) -> tuple[list[str], float] | None:
    """The replicas a new client reads from (``replicas=``, else ``PGMEM_REPLICA_DSNS``) and its wait, checked
    before anything is opened; None: none. A client on the caller's connection takes none from the
    environment and refuses them as an argument (the caller's transaction is on the primary)."""
    settings = get_settings()
    if isinstance(dsn, Connection | AsyncConnection):
        if replicas:
            raise InvalidInput("replicas need a client with a pool: pass a DSN or a pool, not a connection")
        return None
    chosen = settings.replica_list if replicas is None else replicas
    if not chosen:
        return None
    from pgmem.planning.replicas import check_replicas

    return check_replicas(chosen, settings.replica_wait if wait is None else wait)


def _with_replicas(client: _C, reading: tuple[list[str], float] | None) -> _C:
    if reading is not None:
        client.use_replicas(reading[0], wait=reading[1])
    return client


def _behind(exc: SchemaOutOfDate | PermissionDenied, owner: str | None, migrate: bool) -> None:
    """Re-raise ``exc`` unless connecting should migrate and try again. The embedded server's agent role
    may read nothing before revision 0004 granted it (PermissionDenied): its schema is behind."""
    if isinstance(exc, PermissionDenied) and owner is None:
        raise exc
    if not migrate:
        if isinstance(exc, PermissionDenied):
            raise SchemaOutOfDate(f"{exc}; run `pgmem migrate` or connect with migrate=True") from exc
        raise exc


def _advised(exc: ConnectionFailed, conninfo: str) -> ConnectionFailed:
    """``exc`` (the core's "cannot connect to PostgreSQL at host:port: cause") with what to check, once."""
    text = str(exc)
    if not text.startswith("cannot connect"):  # not a connect (a pool that lost its server says so itself)
        return exc
    advice = connection_advice(text, conninfo)
    if advice in text:
        return exc
    advised = ConnectionFailed(f"{text}; {advice}")
    advised.sqlstate = exc.sqlstate
    return advised


def _check_dsn(dsn: object) -> None:
    if dsn is not None and not isinstance(dsn, str):
        raise InvalidInput(f"dsn must be a string, a psycopg connection or pool, not {type(dsn).__name__}")


def connect(
    dsn: str | Connection[Any] | ConnectionPool[Any] | None = None,
    *,
    namespace: str = "default",
    migrate: bool = True,
    min_size: int = 1,
    max_size: int = 10,
    embedder: Embedder | None = None,
    retrieval_log: bool | None = None,
    recall_sample: float | None = None,
    replicas: Sequence[str] | None = None,
    replica_wait: float | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> Client:
    """Connect to pgmem.

    Args:
        dsn: a libpq DSN (URL or key=value), an open psycopg connection, or a psycopg pool. ``None``: the
            ``PGMEM_DSN`` environment variable, else the embedded server under ``PGMEM_HOME`` (started on
            first use and shared by every process).
        namespace: the tenant boundary every operation of the client is scoped to.
        migrate: bring the schema up to date (under an advisory lock; safe from many processes at once).
            With ``False`` an out-of-date schema raises :class:`pgmem.SchemaOutOfDate`.
        embedder: the embedding provider for semantic memory (default: ``PGMEM_EMBEDDER``, else the
            offline hashing embedder).
        retrieval_log: record every search's hits in ``pgmem.retrieval_log`` (default:
            ``PGMEM_RETRIEVAL_LOG``, off).
        recall_sample: the share of vector, batch and hybrid searches whose recall is checked in the
            background (``pgmem.search_recall``, docs/analytics.md; default ``PGMEM_RECALL_SAMPLE``, 0: off).
        replicas: DSNs of streaming replicas of the server that searches read from (default:
            ``PGMEM_REPLICA_DSNS``, comma-separated; none), with read-your-writes: see the README's "Read
            replicas". Not with a connection of yours (your transaction is on the primary).
        replica_wait: seconds a read that follows this client's write waits for a replica to replay it
            before it reads the primary (default ``PGMEM_REPLICA_WAIT``, 1).
        timeout: seconds a call may take: connecting (at most 10, ``pgmem.resilience.CONNECT_TIMEOUT``,
            unless the DSN or ``PGCONNECT_TIMEOUT`` names its own ``connect_timeout``), waiting for a pool
            connection, and every statement it runs (default 30; None: no limit but the connect's).
            Past it the call raises :class:`pgmem.errors.Timeout` and its connection is discarded; a
            write that timed out committed entirely or not at all. ``client.with_timeout(s)`` changes
            it for some calls. See docs/reliability.md.

    Example:
        >>> with pgmem.connect(namespace="demo") as client:
        ...     client.messages.add("role:Alice", pgmem.Message(content="hi"))
    """
    from pgmem._sync.client import Client, check_pool_size, check_schema, conninfo_of

    check_namespace(namespace)
    reading = _replica_options(dsn, replicas, replica_wait)
    options: dict[str, Any] = {
        "namespace": namespace,
        "embedder": embedder,
        "retrieval_log": retrieval_log,
        "recall_sample": recall_sample,
        "timeout": timeout,
    }
    if isinstance(dsn, Connection):
        conninfo = conninfo_of(dsn)
        try:
            check_schema(dsn)
        except SchemaOutOfDate:
            if not migrate:
                raise
            _upgrade(conninfo)
        return Client(connection=dsn, conninfo=conninfo, **options)
    if isinstance(dsn, ConnectionPool):
        with dsn.connection() as conn:
            conninfo = conninfo_of(conn)
            try:
                check_schema(conn)
                behind = False
            except SchemaOutOfDate:
                if not migrate:
                    raise
                behind = True
        if behind:
            _upgrade(conninfo)
        return _with_replicas(Client(pool=dsn, conninfo=conninfo, **options), reading)
    _check_dsn(dsn)
    check_pool_size(min_size, max_size)
    # The embedded server is pgmem's to start again when it dies: a pool that cannot connect calls this.
    options["restart"] = None if _configured_dsn(dsn) else _embedded_dsn
    configured = _configured_dsn(dsn)
    # A bounded connect_timeout where the DSN names none: a port that never answers fails in 10 s
    # (resilience.CONNECT_TIMEOUT) saying what to check, not after the call's whole timeout in silence.
    owner, conninfo = (None, with_connect_timeout(configured, timeout)) if configured else _embedded_dsns()
    options["owner_conninfo"] = owner
    try:
        return _with_replicas(Client.from_conninfo(conninfo, min_size=min_size, max_size=max_size, **options), reading)
    except (SchemaOutOfDate, PermissionDenied) as exc:
        _behind(exc, owner, migrate)
    except ConnectionFailed as exc:
        advised = _advised(exc, conninfo)
        if advised is exc:
            raise
        raise advised from exc
    _upgrade(owner or conninfo)  # alembic is loaded only now, when there is something to migrate
    return _with_replicas(Client.from_conninfo(conninfo, min_size=min_size, max_size=max_size, **options), reading)


async def aconnect(
    dsn: str | AsyncConnection[Any] | AsyncConnectionPool[Any] | None = None,
    *,
    namespace: str = "default",
    migrate: bool = True,
    min_size: int = 1,
    max_size: int = 10,
    embedder: Embedder | None = None,
    retrieval_log: bool | None = None,
    recall_sample: float | None = None,
    replicas: Sequence[str] | None = None,
    replica_wait: float | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> AsyncClient:
    """Connect to pgmem (the async flavour of :func:`connect`, same arguments).

    Args:
        dsn: a libpq DSN (URL or key=value), an open psycopg connection, or a psycopg pool. ``None``: the
            ``PGMEM_DSN`` environment variable, else the embedded server under ``PGMEM_HOME`` (started on
            first use and shared by every process).
        namespace: the tenant boundary every operation of the client is scoped to.
        migrate: bring the schema up to date (under an advisory lock; safe from many processes at once).
            With ``False`` an out-of-date schema raises :class:`pgmem.SchemaOutOfDate`.
        embedder: the embedding provider for semantic memory (default: ``PGMEM_EMBEDDER``, else the
            offline hashing embedder).
        retrieval_log: record every search's hits in ``pgmem.retrieval_log`` (default:
            ``PGMEM_RETRIEVAL_LOG``, off).
        recall_sample: the share of vector, batch and hybrid searches whose recall is checked in the
            background (``pgmem.search_recall``, docs/analytics.md; default ``PGMEM_RECALL_SAMPLE``, 0: off).
        replicas: DSNs of streaming replicas of the server that searches read from (default:
            ``PGMEM_REPLICA_DSNS``, comma-separated; none), with read-your-writes: see the README's "Read
            replicas". Not with a connection of yours (your transaction is on the primary).
        replica_wait: seconds a read that follows this client's write waits for a replica to replay it
            before it reads the primary (default ``PGMEM_REPLICA_WAIT``, 1).
        timeout: seconds a call may take: connecting (at most 10, ``pgmem.resilience.CONNECT_TIMEOUT``,
            unless the DSN or ``PGCONNECT_TIMEOUT`` names its own ``connect_timeout``), waiting for a pool
            connection, and every statement it runs (default 30; None: no limit but the connect's).
            Past it the call raises :class:`pgmem.errors.Timeout` and its connection is discarded; a
            write that timed out committed entirely or not at all. ``client.with_timeout(s)`` changes
            it for some calls. See docs/reliability.md.

    Example:
        >>> async with await pgmem.aconnect(namespace="demo") as client:
        ...     await client.messages.add("role:Alice", pgmem.Message(content="hi"))
    """
    from pgmem._async.client import AsyncClient, check_pool_size, check_schema, conninfo_of

    check_namespace(namespace)
    reading = _replica_options(dsn, replicas, replica_wait)
    options: dict[str, Any] = {
        "namespace": namespace,
        "embedder": embedder,
        "retrieval_log": retrieval_log,
        "recall_sample": recall_sample,
        "timeout": timeout,
    }
    if isinstance(dsn, AsyncConnection):
        conninfo = conninfo_of(dsn)
        try:
            await check_schema(dsn)
        except SchemaOutOfDate:
            if not migrate:
                raise
            await arun_blocking(_upgrade, conninfo)
        return AsyncClient(connection=dsn, conninfo=conninfo, **options)
    if isinstance(dsn, AsyncConnectionPool):
        async with dsn.connection() as conn:
            conninfo = conninfo_of(conn)
            try:
                await check_schema(conn)
                behind = False
            except SchemaOutOfDate:
                if not migrate:
                    raise
                behind = True
        if behind:
            await arun_blocking(_upgrade, conninfo)
        return _with_replicas(AsyncClient(pool=dsn, conninfo=conninfo, **options), reading)
    _check_dsn(dsn)
    check_pool_size(min_size, max_size)
    # The embedded server is pgmem's to start again when it dies: a pool that cannot connect calls this.
    options["restart"] = None if _configured_dsn(dsn) else _embedded_dsn
    configured = _configured_dsn(dsn)
    # starting the embedded server blocks
    # A bounded connect_timeout where the DSN names none: a port that never answers fails in 10 s
    # (resilience.CONNECT_TIMEOUT) saying what to check, not after the call's whole timeout in silence.
    owner, conninfo = (
        (None, with_connect_timeout(configured, timeout)) if configured else await arun_blocking(_embedded_dsns)
    )
    options["owner_conninfo"] = owner
    try:
        return _with_replicas(
            await AsyncClient.from_conninfo(conninfo, min_size=min_size, max_size=max_size, **options), reading
        )
    except (SchemaOutOfDate, PermissionDenied) as exc:
        _behind(exc, owner, migrate)
    except ConnectionFailed as exc:
        advised = _advised(exc, conninfo)
        if advised is exc:
            raise
        raise advised from exc
    await arun_blocking(_upgrade, owner or conninfo)  # alembic is loaded only now, when there is something to migrate
    return _with_replicas(
        await AsyncClient.from_conninfo(conninfo, min_size=min_size, max_size=max_size, **options), reading
    )


_lock = threading.Lock()
_client: Client | None = None
_pid: int | None = None


def get_default_client() -> Client:
    """Return the process-wide client, connecting (and migrating) on first use."""
    global _client, _pid
    with _lock:
        if _client is None or _pid != os.getpid() or _client.closed:
            settings = get_settings()
            _client = connect(settings.dsn, namespace=settings.namespace)
            _pid = os.getpid()
        return _client


def set_default_client(client: Client | None) -> None:
    """Use ``client`` as the process-wide default (``None``: connect from the environment next time)."""
    global _client, _pid
    with _lock:
        _client, _pid = client, (os.getpid() if client is not None else None)


def reset_default_client() -> None:
    """Close the default client if this process opened it; the next use connects again."""
    global _client, _pid
    with _lock:
        if _client is not None and _pid == os.getpid():
            _client.close()
        _client, _pid = None, None


atexit.register(reset_default_client)
