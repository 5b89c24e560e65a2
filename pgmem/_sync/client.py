# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The client: a namespace, a pool (or the caller's connection), and the repositories."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Callable, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import Connection
from psycopg_pool import ConnectionPool

from pgmem._sync import scope
from pgmem._sync.executor import Executor
from pgmem._sync.first_use import (
    _brains,
    _contexts,
    _forks,
    _items,
    _OnFirstUse,
    _queues,
    _retention,
    _stores,
    _summaries,
    _vectors,
)
from pgmem._sync.messages import MessageRepository
from pgmem._sync.pooling import (
    _NO_LIMIT,
    _connect_timeout,
    _handing_out,
    _LifoConnectionPool,
    _open_connection,
    _pool_connection,
    check_pool_size,
    end_transaction,
    lost,
    take,
)
from pgmem._sync.preflight import bypasses_security, check_schema, conninfo_of
from pgmem._sync.sessions import Sessions
from pgmem.checks import check_namespace
from pgmem.embeddings import Embedder, default_embedder
from pgmem.errors import ClientClosed, CommitUnknown, InvalidInput, redact, translate
from pgmem.planning.forks import AsOf, Fork, Mark
from pgmem.resilience import DEFAULT_TIMEOUT, check_timeout, connection_lost, deadline
from pgmem.settings import get_settings

if TYPE_CHECKING:
    from pgmem._sync.replicas import Replicas
    from pgmem.planning.context import Context
    from pgmem.planning.replicas import ReadStats

__all__ = ["Client", "check_pool_size", "check_schema", "conninfo_of"]


def _sample_rate(rate: Any) -> float:
    """A share of searches sampled (``recall_sample``), a number in [0, 1]."""
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise InvalidInput(f"recall_sample must be a number in [0, 1], got {rate!r}")
    return float(rate)


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
        recall_sample: the share of vector, batch and hybrid searches sampled for the recall check
            (``client.vectors.recall``, the view ``pgmem.search_recall``; default ``PGMEM_RECALL_SAMPLE``,
            0: off); may be changed at any time (a number in [0, 1]).
        replicas: the read replicas searches go to (:meth:`use_replicas`), or None.
        timeout: seconds a call may take (waiting for a connection and every statement it runs), or
            None for no limit; past it the call raises :class:`pgmem.errors.Timeout` (see
            :meth:`with_timeout`). It bounds the pool's connections only: on your own connection
            (``connection=``) pgmem does not interrupt your statements.

    Every repository but ``messages`` is built on first use.
    """

    queues = _OnFirstUse(_queues)
    vectors = _OnFirstUse(_vectors)
    summaries = _OnFirstUse(_summaries)
    brains = _OnFirstUse(_brains)
    retention = _OnFirstUse(_retention)
    stores = _OnFirstUse(_stores)
    items = _OnFirstUse(_items)
    forks = _OnFirstUse(_forks)
    _contexts = _OnFirstUse(_contexts)

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
        recall_sample: float | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        if (pool is None) == (connection is None):
            raise InvalidInput("a client needs exactly one of a pool or a connection")
        self.namespace = check_namespace(namespace)
        self._pool = pool
        self._conn = connection
        self._owns_pool = owns_pool
        self._closed = False
        self._conninfo = conninfo  # the real one, password included: for opening connections only
        self._build_lock = threading.RLock()  # a repository's constructor may use another one
        #: What runs every statement of this client (:mod:`pgmem._async.executor`).
        self.executor = Executor(self)
        self.messages = MessageRepository(self)
        self._embedder = embedder
        # What the client knows of its connections' sessions; shared with the pool's configure hook.
        self.sessions = sessions if sessions is not None else Sessions()
        settings = get_settings()
        self.retrieval_log = settings.retrieval_log if retrieval_log is None else bool(retrieval_log)
        self.recall_sample = settings.recall_sample if recall_sample is None else _sample_rate(recall_sample)
        self.replicas: Replicas | None = None
        self._owns_replicas = False
        self.timeout = check_timeout(timeout)

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
        timeout: float | None = DEFAULT_TIMEOUT,
        restart: Callable[[], object] | None = None,
        recall_sample: float | None = None,
        app_role: str | None = None,
        owner_conninfo: str | None = None,
    ) -> Client:
        """Open a pool on ``conninfo`` and return a client that owns it (closing the client closes it).

        When ``conninfo`` logs in as a role row-level security does not hold (a superuser, BYPASSRLS, or
        a member of the tables' owner), every pooled connection acts as ``app_role`` (default
        ``PGMEM_APP_ROLE``, ``pgmem_app``; ``SET ROLE`` once per connection) and ``conninfo`` is kept for
        the DDL that role may not run (a model's HNSW index). ``owner_conninfo`` names the owner for a
        ``conninfo`` of the application role (the embedded server's).

        The schema revision is checked on the pool's first connection before the pool takes it: one
        connection and one query before the client is ready. :func:`pgmem.aconnect` is the usual way in
        (it finds the DSN and migrates when asked); this is the core's part of it.

        ``timeout`` bounds connecting (unless the DSN names its own ``connect_timeout``) and then every
        call. ``restart`` brings the server back when a connection attempt fails (the embedded server:
        :func:`pgmem.ops.server.ensure_server`); the pool then reconnects at once instead of backing off.

        Raises:
            ConnectionFailed: the server cannot be reached (the message names the host and port, never the
                password).
            SchemaOutOfDate: the database is not at the schema revision this pgmem needs.
            PermissionDenied: ``conninfo`` bypasses row-level security and the application role does not
                exist (run ``pgmem migrate`` as a role that may create roles, or ``pgmem roles create``).
        """
        check_namespace(namespace)
        check_pool_size(min_size, max_size)
        timeout = check_timeout(timeout)
        role = app_role or get_settings().app_role
        first = _open_connection(conninfo, timeout)
        try:
            vector_types = check_schema(first)
            acting = role if bypasses_security(first, role) else None
        except BaseException:
            first.close()
            raise
        spare = [first]
        sessions = Sessions(
            vector_types, role=acting, owner_conninfo=conninfo if acting is not None else owner_conninfo
        )
        pool = _LifoConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, **_connect_timeout(conninfo, timeout)},
            # Configured by the connection class (_handing_out), which also retries a connection the server
            # ends while it is configured: the pool would back off 1, 2, 4... seconds.
            connection_class=_handing_out(spare, restart, sessions.configure),
            timeout=timeout or _NO_LIMIT,
            # psycopg_pool's default is 3 workers (threads in the sync flavour), each one costing a cold
            # start ~2.5 ms to start. The pool grows one connection at a time whatever their number: more
            # workers only open the first min_size connections at once.
            num_workers=min(3, max(1, min_size)),
            open=False,
            name="pgmem",
        )
        try:
            with translate():
                pool.open(wait=True, timeout=timeout or DEFAULT_TIMEOUT)
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
                recall_sample=recall_sample,
                sessions=sessions,
                timeout=timeout,
            )
        except BaseException:
            pool.close()
            raise

    @property
    def conninfo(self) -> str | None:
        """The DSN the client connects with, for display: its password replaced by ``***``."""
        return None if self._conninfo is None else redact(self._conninfo)

    def secret_conninfo(self) -> str | None:
        """The DSN the client connects with, password included, for opening connections of your own beside
        the client's (the FAISS cache's listener and reader do). :func:`pgmem.connect` always sets it (for a
        caller's pool or connection, from what libpq used to open it); None only for a client constructed
        without one.

        It is a secret: pass it to a driver, never log, print or store it (display :attr:`conninfo`, which
        masks the password). A method rather than a property so that nothing that lists or renders a client's
        attributes (a debugger, a ``repr``) comes across it.

        Example:
            >>> conn = psycopg.connect(client.secret_conninfo() or "")
        """
        return self._conninfo

    @property
    def embedder(self) -> Embedder:
        """The client's embedding provider (created from the settings on first use when not given)."""
        if self._embedder is None:
            self._embedder = default_embedder()
        return self._embedder

    def with_namespace(self, namespace: str) -> Client:
        """A client for another namespace sharing this one's pool or connection, and its replicas (closing it
        closes nothing)."""
        clone = Client(
            namespace=namespace,
            pool=self._pool,
            connection=self._conn,
            owns_pool=False,
            conninfo=self._conninfo,
            embedder=self._embedder,
            retrieval_log=self.retrieval_log,
            recall_sample=self.recall_sample,
            sessions=self.sessions,
            timeout=self.timeout,
        )
        clone.replicas = self.replicas
        return clone

    def with_timeout(self, timeout: float | None) -> Client:
        """A client like this one (same namespace, sharing its pool or connection; closing it closes
        nothing) whose calls may take ``timeout`` seconds (None: no limit).

        Example:
            >>> await client.with_timeout(2).messages.last("role:Alice", 5)  # Timeout after 2 s
        """
        clone = self.with_namespace(self.namespace)
        clone.timeout = check_timeout(timeout)
        return clone

    def use_replicas(self, conninfos: Sequence[str], *, wait: float = 1.0) -> None:
        """Read searches (vector, batch, hybrid) from these streaming replicas of the client's server, with
        read-your-writes: a read that follows this client's write waits for a replica to replay it (at most
        ``wait`` seconds, then it reads the primary); a replica that is down or lags is skipped (see
        :mod:`pgmem._async.replicas`, :meth:`replica_stats`). :func:`pgmem.connect` calls this for
        ``replicas=`` and ``PGMEM_REPLICA_DSNS``. Nothing is opened until the first read.

        Raises:
            InvalidInput: not a list of DSNs, a bad ``wait``, a client on a caller's connection, or a client
                that has replicas already (nothing changed).
        """
        from pgmem._sync.replicas import Replicas
        from pgmem.planning.replicas import check_replicas

        checked, wait = check_replicas(conninfos, wait)
        if self._pool is None:
            raise InvalidInput("replicas need a client with a pool, not one on a caller's connection")
        if self.replicas is not None:
            raise InvalidInput("this client has replicas already")
        if checked:
            self.replicas = Replicas(
                checked, primary=self._pool, sessions=self.sessions, wait=wait, max_size=self._pool.max_size
            )
            self._owns_replicas = True

    def replica_stats(self) -> ReadStats | None:
        """The reads routed to replicas and how they went (None: the client has no replicas)."""
        return None if self.replicas is None else self.replicas.stats()

    @contextmanager
    def read_connection(self) -> Iterator[Connection[Any]]:
        """A connection for read-only work of your own (analytics queries): a replica's that has this
        client's writes when the client has replicas, else one of the client's (:meth:`connection`). Chosen
        once: a replica that fails inside the block raises there. As on :meth:`connection`, plain SQL on it
        sees this client's namespace for the block.

        Example:
            >>> async with client.read_connection() as conn:
            ...     cur = await conn.execute("SELECT count(*) FROM pgmem.messages")
        """
        if self.replicas is None:
            with self.connection() as conn:
                yield conn
        else:
            with self.replicas.connection(self.namespace) as conn:
                yield conn

    def fork(
        self, memory: str, into: str, *, at: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> Fork:
        """A new memory ``into`` that starts as ``memory`` at ``at`` (default now: a sequence number, a
        timezone-aware time or a mark's name) and then diverges (:meth:`AsyncForkRepository.fork`; README,
        "Rewind and branch"). O(1): nothing is copied.

        Example:
            >>> await client.fork("chat", "chat:plan-b")
            Fork(memory='chat:plan-b', parent='chat', upto_seq=41, size=12)
        """
        return self.forks.fork(memory, into, at=at, connection=connection)

    def mark(self, memory: str, name: str, *, connection: Connection[Any] | None = None) -> Mark:
        """Name the current point of ``memory``; reads take ``as_of=name`` (:meth:`AsyncForkRepository.mark`).

        Example:
            >>> await client.mark("chat", "before-tools")
        """
        return self.forks.mark(memory, name, connection=connection)

    def marks(self, memory: str, *, connection: Connection[Any] | None = None) -> list[Mark]:
        """The marks of ``memory``, oldest point first."""
        return self.forks.marks(memory, connection=connection)

    def search(self, query: str | None = None, **kwargs: Any) -> list[Any]:
        """Semantic search (:meth:`AsyncVectorRepository.search`): ``client.search("text", memory=..., k=5)``."""
        return self.vectors.search(query, **kwargs)

    def context(
        self,
        memory: str,
        *,
        budget: int,
        query: str | None = None,
        reserve: int = 0,
        parts: Sequence[str] = ("pinned", "summary", "related", "window"),
        related_k: int = 5,
        related_share: float = 0.25,
        pinned_roles: Sequence[str] = ("system",),
        embedder: Embedder | None = None,
        as_of: AsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> Context:
        """What to send the model for the next turn of ``memory``, at most ``budget - reserve`` tokens, read
        in one statement (one round trip; the query's embedding is computed before it).

        Parts, in the order sent: ``pinned`` (messages of a role in ``pinned_roles``, or whose metadata
        holds ``{"pinned": true}``), ``summary`` (the memory's summaries of what falls before the window),
        ``related`` (up to ``related_k`` messages older than the window matching ``query``: hybrid search,
        or keyword search when the memory has no model; at most ``related_share`` of the budget left), and
        ``window`` (the newest messages). A tool call travels with all its results or not at all. Counted
        with tiktoken when installed (else one token per 4 UTF-8 bytes), 4 tokens a message for its role
        and framing. The result says, per part, what it kept and what it dropped and why
        (:class:`pgmem.planning.context.Context`; the rules: :mod:`pgmem.planning.context`).

        ``as_of``: the context as it was at a point of the memory (a sequence number, a timezone-aware time
        or a mark's name; README, "Rewind and branch"): every part reads the entries up to it. A fork's
        context reads its lineage (what it inherits), and its summaries are those it took from its parent
        when forked and its own.

        Example:
            >>> ctx = await client.context("chat:42", budget=8000, reserve=1000, query=user_message)
            >>> reply = openai.chat.completions.create(model=..., messages=ctx.as_openai())
        """
        return self._contexts.build(
            memory,
            budget=budget,
            query=query,
            reserve=reserve,
            parts=parts,
            related_k=related_k,
            related_share=related_share,
            pinned_roles=pinned_roles,
            embedder=embedder,
            as_of=as_of,
            connection=connection,
        )

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
        if self._owns_replicas and self.replicas is not None:
            self.replicas.close()
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
        """A connection for SQL of your own (ad-hoc reads, analytics) on which pgmem's tables show this
        client's namespace, as row-level security allows: without it they show no row.

        It is one of the pool's, its session scoped to the namespace for the block and reset before the
        pool takes it back (a setting of one round trip at each end); a transaction the block leaves open
        is committed, or rolled back on an error. On the client's single connection (``pgmem.connect(conn)``)
        or on ``connection``, both yours, the namespace is set for your transaction when one is open (as
        pgmem's own statements set it there), else for the block, and put back as it was afterwards. For
        writes that must be all-or-nothing use :meth:`transaction`; for reads that may go to a replica,
        :meth:`read_connection`.

        Example:
            >>> async with client.connection() as conn:
            ...     cur = await conn.execute("SELECT count(*) FROM pgmem.messages")  # this namespace's only

        Raises:
            ClientClosed: the client, or ``connection``, is closed.
        """
        self._check_open()
        if connection is None and self._conn is None:
            assert self._pool is not None
            with deadline(self.timeout):
                with _pool_connection(self._pool, self.namespace) as conn:
                    try:
                        yield conn
                    finally:
                        self._used(conn)
        else:
            with self._connection(connection) as conn, scope.borrowed(conn, self.namespace):
                yield conn

    @contextmanager
    def _connection(self, connection: Connection[Any] | None = None) -> Iterator[Connection[Any]]:
        """Yield ``connection`` if given, else the client's connection, else one from the pool, as it is:
        pgmem's statements scope their own transactions (:mod:`pgmem._async.scope`), so no setting here
        costs them a round trip."""
        with deadline(self.timeout if connection is None and self._conn is None else None):
            conn = self._take(connection)
            failed = False
            try:
                yield conn
            except BaseException:
                failed = True
                raise
            finally:
                self._give_back(conn, connection, failed)

    def _take(self, connection: Connection[Any] | None) -> Connection[Any]:
        # _connection without the context manager, for the one-statement path (the executor's rows).
        self._check_open()
        if connection is not None:
            if connection.closed:
                raise ClientClosed("the connection passed to pgmem is closed")
            return connection
        if self._conn is not None:
            return self._conn
        assert self._pool is not None
        return take(self._pool)

    def _give_back(
        self, conn: Connection[Any], connection: Connection[Any] | None, failed: bool
    ) -> None:
        if connection is None and conn is self._conn:
            return
        try:
            self._used(conn)
        finally:
            if connection is None:
                assert self._pool is not None
                try:
                    end_transaction(conn, failed)
                finally:
                    self._pool.putconn(conn)

    def _lost(self, exc: BaseException, connection: Connection[Any] | None) -> None:
        """``exc`` ended a call on a connection of the pool (``connection`` None): when it means that
        connection was lost, the pool replaces every connection it opened before
        (:func:`pgmem._async.pooling.lost`), so a retry runs on one opened after the loss. A caller's
        connection, or a replica's, says nothing of the pool's."""
        if connection is None and self._pool is not None and connection_lost(exc):
            lost(self._pool)

    def _used(self, conn: Connection[Any]) -> None:
        """A statement ran on ``conn`` (and committed, unless the caller's transaction holds it): maybe a
        write, which the replicas' next read must see (a replica's connections are read-only: no write)."""
        if self.replicas is not None and conn.read_only is not True:
            self.replicas.wrote()

    @contextmanager
    def transaction(self, connection: Connection[Any] | None = None) -> Iterator[Connection[Any]]:
        """Yield a connection inside a transaction block that is all-or-nothing, scoped to the client's
        namespace (row-level security shows and takes only its rows).

        On a pgmem-owned (autocommit) connection this is ``BEGIN … COMMIT``. On a connection already in a
        transaction it is a savepoint inside it: pgmem never commits a transaction it did not open. On a
        non-autocommit connection outside a transaction the statements start the caller's implicit
        transaction, which the caller commits.
        """
        with self._connection(connection) as conn:
            ours = scope.idle(conn)  # BEGIN … COMMIT of pgmem's own: a COMMIT lost on the way is CommitUnknown
            failed = False  # the caller's block raised: its exception passes as it is
            try:
                with scope.block(conn, self.namespace):  # BEGIN with the namespace: one round trip
                    try:
                        yield conn
                    except BaseException:
                        failed = True
                        raise
            except psycopg.Error as exc:
                self._lost(exc, connection)
                if failed:
                    raise
                # BEGIN or COMMIT failed (psycopg's Transaction runs them outside any statement of ours).
                if ours and connection_lost(exc):
                    raise CommitUnknown(
                        f"the connection was lost while committing ({exc}); the transaction may have committed"
                    ) from exc
                with translate():
                    raise
