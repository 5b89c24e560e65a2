# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The executor: every statement of the core runs through it (procrastinate's model: nothing but its
connector's execute methods talks to the driver, and each one translates its errors).

One per client (``client.executor``; the repositories' ``_rows`` is a call of it). Each statement gets:

- its namespace: a transaction scoped to the client's, which row-level security reads
  (:mod:`pgmem._async.scope`); ``scoped=False`` for what no namespace holds (the catalog, the planner's
  statistics), :func:`admin_block` for the owner's work across namespaces;
- the call's deadline (:func:`pgmem.resilience.deadline`), which covers taking a connection and a retry;
- pgmem's errors for the driver's (:func:`pgmem.errors.translate`), and a parameter the driver could not
  encode named as the caller's input;
- the lost-connection policy (:func:`pgmem._async.retrying.retry_or_raise`): a read, or a write that may
  run twice, runs once more on a fresh connection; another write raises ``CommitUnknown``; nothing runs
  again inside the caller's transaction.

Three shapes:

- :meth:`AsyncExecutor.rows`: one statement. The hot paths (an add, a claim, a search) are this: one
  round trip through the same scope functions as before, one Python call deeper (about 1 us of client
  time per statement against the old direct call, measured with a no-op statement; an add takes 450 us).
- :meth:`AsyncExecutor.run`: several statements on one connection, each its own transaction; run again
  as a whole, as one statement would be, when they only read (``reads``).
- :meth:`AsyncExecutor.transaction`: a transaction block. Never run again: a context manager cannot run
  its body twice, and a block that wrote may have committed. A connection lost before COMMIT rolled the
  block back (``ConnectionFailed``); lost at the COMMIT of a block that wrote, ``CommitUnknown``.

Inside them statements go through an :class:`AsyncBlock`, which translates each one. ``AsyncBlock(conn)``
on its own serves connections no client owns: the schema check, the session's role, a listener, an
index build on the owner's connection, a replica's replay position.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext, suppress
from typing import TYPE_CHECKING, Any, LiteralString, TypeVar

import psycopg
from psycopg import Connection, sql
from psycopg.pq import ExecStatus

from pgmem._acompat import OnConnection
from pgmem._sync import scope
from pgmem._sync.retrying import IDEMPOTENCY_PARAM, retry_or_raise
from pgmem.checks import unencodable
from pgmem.errors import CommitUnknown, ConnectionFailed, PgmemError, Timeout, translate
from pgmem.resilience import connection_lost, deadline, reads_only, verified

if TYPE_CHECKING:
    from pgmem._sync.client import Client

__all__ = ["Block", "Executor", "admin_block"]

T = TypeVar("T")
#: What a block runs: a statement's text, or one composed with ``psycopg.sql`` (identifiers in DDL).
Statement = LiteralString | bytes | sql.SQL | sql.Composed

_FIRST = nullcontext()  # the first attempt takes its pool connection as it comes (the retry verifies it)


def _reads(query: LiteralString | bytes, reads: bool | None) -> bool:
    # Worked out only once a statement failed: the statements that succeed pay nothing for it.
    return reads if reads is not None else isinstance(query, str) and reads_only(query)


class Executor:
    """Runs the statements of one client (see the module's docstring)."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def rows(
        self,
        query: LiteralString | bytes,
        params: dict[str, Any],
        connection: Connection[Any] | None = None,
        *,
        scoped: bool = True,
        settings: Mapping[str, str] | None = None,
        prepare: bool | None = None,
        reads: bool | None = None,
        idempotent: bool = False,
        vectors: bool = False,
    ) -> list[tuple[Any, ...]]:
        """Run one statement (psycopg's named placeholders; ``%(ns)s`` is the caller's to pass) and return
        its rows: in the client's namespace with ``settings`` local to its transaction
        (:func:`pgmem._async.scope.rows`), or in none (``scoped=False``).

        ``reads``: whether it only reads (default: :func:`pgmem.resilience.reads_only` of its text); a
        write runs again after a lost connection when ``idempotent`` or when its parameters carry an
        idempotency key (:data:`pgmem._async.retrying.IDEMPOTENCY_PARAM`). ``vectors``: the connection
        needs pgvector's types (a caller's connection gets them once).
        """
        client = self._client
        with deadline(client.timeout):
            for attempt in (1, 2):
                checked = _FIRST if attempt == 1 else verified()
                try:
                    with translate(), checked:
                        # client._connection's work written out: the hot paths pay for no context manager.
                        conn = client._take(connection)
                        try:
                            if vectors:
                                client.sessions.ready(conn)
                            if scoped:
                                found = scope.rows(
                                    conn, client.namespace, query, params, prepare=prepare, settings=settings
                                )
                            else:
                                found = _unscoped_rows(conn, query, params, prepare)
                        except BaseException:
                            client._give_back(conn, connection, True)
                            raise
                        client._give_back(conn, connection, False)
                        return found
                except UnicodeEncodeError:
                    # A lone surrogate the public method's checks missed: the driver failed to encode it
                    # before sending anything. Still the caller's input, named.
                    raise unencodable(params) from None
                except Timeout as exc:
                    exc.may_have_committed = not _reads(query, reads)
                    raise
                except ConnectionFailed as exc:
                    client._lost(exc, connection)
                    if attempt == 2:
                        raise
                    harmless = _reads(query, reads) or idempotent or params.get(IDEMPOTENCY_PARAM) is not None
                    retry_or_raise(exc, connection, client.owns_transactions, harmless)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def scalar(
        self, query: LiteralString | bytes, params: dict[str, Any], connection: Connection[Any] | None = None
    ) -> Any:
        """The first value of :meth:`rows` (None without a row), in the client's namespace."""
        found = self.rows(query, params, connection)
        return found[0][0] if found else None

    def run(
        self,
        work: OnConnection[T],
        connection: Connection[Any] | None = None,
        *,
        reads: bool,
        scoped: bool = True,
        vectors: bool = False,
    ) -> T:
        """``work(block)``: statements on one connection through ``block`` (an :class:`AsyncBlock` in the
        client's namespace, or in none), each in a transaction of its own unless ``work`` opens one. The
        whole runs once more on a fresh connection when its connection was lost and ``reads`` (``work``
        only reads), as :meth:`rows` runs one statement; a write lost on the way raises ``CommitUnknown``.
        """
        client = self._client
        with deadline(client.timeout):
            for attempt in (1, 2):
                checked = _FIRST if attempt == 1 else verified()
                try:
                    with translate(), checked:
                        with client._connection(connection) as conn:
                            if vectors:
                                client.sessions.ready(conn)
                            return work(Block(conn, client.namespace if scoped else None))
                except Timeout as exc:
                    exc.may_have_committed = not reads
                    raise
                except ConnectionFailed as exc:
                    client._lost(exc, connection)
                    if attempt == 2:
                        raise
                    retry_or_raise(exc, connection, client.owns_transactions, reads)
        raise AssertionError("unreachable: the second attempt returns or raises")

    @contextmanager
    def transaction(
        self,
        connection: Connection[Any] | None = None,
        *,
        reads: bool = False,
        pipeline: bool = False,
        vectors: bool = False,
        commit_pipelined: bool = False,
    ) -> Iterator[Block]:
        """A transaction block in the client's namespace (:func:`pgmem._async.scope.block`: BEGIN, or a
        savepoint in the caller's transaction; ``pipeline``: its statements in one pipeline, on an idle
        autocommit connection one implicit transaction and one round trip), under the call's deadline,
        its errors translated. Never run again (see the module's docstring); ``reads``: the block only
        reads, so a COMMIT lost on the way changed nothing.

        ``commit_pipelined``: in a block that is its own transaction (``BEGIN … COMMIT``), the statement
        given to :meth:`AsyncBlock.send_with_commit` goes to the server with the COMMIT, in one write.
        For a transaction whose last statement takes a lock every other writer waits for (the embedder's,
        on the memory's revision): it is held from that statement through the commit, never across a
        round trip to the client and the client's own delays (issue 38)."""
        client = self._client
        with deadline(client.timeout), translate():
            with client._connection(connection) as conn:
                if vectors:
                    client.sessions.ready(conn)
                ours = scope.idle(conn)  # the block is its own transaction, which its end commits
                done = False
                try:
                    if commit_pipelined and ours and not pipeline:
                        # BEGIN and COMMIT of pgmem's own: psycopg's Transaction would COMMIT once more.
                        ending = _Ending()
                        try:
                            scope.begin(conn, client.namespace)
                            yield Block(conn, client.namespace, ending)
                            done = True
                        except BaseException:
                            with suppress(psycopg.Error):  # a lost connection: the server rolled it back
                                scope.end(conn, commit=False)
                            raise
                        scope.end(conn, commit=True)
                    else:
                        with scope.block(conn, client.namespace, pipeline=pipeline):
                            yield Block(conn, client.namespace)
                            done = True
                except (psycopg.Error, PgmemError) as exc:
                    client._lost(exc, connection)
                    if done and ours:
                        first = statement_error(exc)
                        _at_commit(first, reads)
                        if first is not exc:
                            raise first from None
                    raise


class _Ending:
    """Whether a ``commit_pipelined`` block's last statement committed it (``send_with_commit``)."""

    __slots__ = ("committed",)

    def __init__(self) -> None:
        self.committed = False


def statement_error(exc: BaseException) -> Any:
    """The error a pipeline's statement got, where psycopg raised the pipeline's "pipeline aborted" over it.

    Leaving a pipeline, psycopg reads the results in two steps and raises the first error of each; the
    second replaces the first (raised in a ``finally``), so a statement's error read in the first step (a
    trigger's, a constraint's) came out as the ``PipelineAborted`` of the COMMIT queued behind it, which
    looks like a lost connection: nothing committed, the server said why, and that is the error to raise.
    """
    context = exc.__context__
    if isinstance(exc, psycopg.errors.PipelineAborted) and isinstance(context, psycopg.Error):
        if not isinstance(context, psycopg.errors.PipelineAborted):
            return context
    return exc


def _at_commit(exc: psycopg.Error | PgmemError, reads: bool) -> None:
    """A block that is its own transaction failed as it committed (its COMMIT, or its pipeline's Sync):
    what reached the server may have committed, all or nothing, unless the block only read."""
    if isinstance(exc, Timeout):
        exc.may_have_committed = not reads
    elif not reads and connection_lost(exc):
        raise CommitUnknown(f"the connection was lost while committing ({exc}); the write may have committed") from exc


def _unscoped_rows(
    conn: Connection[Any], query: Statement, params: Mapping[str, Any] | None, prepare: bool | None = None
) -> list[tuple[Any, ...]]:
    # In text, as psycopg sends by default: the catalog's types ("char", regtype) have no binary loader.
    cur = conn.execute(query, params, prepare=prepare)
    res = cur.pgresult
    return cur.fetchall() if res is not None and res.status == ExecStatus.TUPLES_OK else []


class Block:
    """Statements on one connection, each translated (:func:`pgmem.errors.translate`, and an unencodable
    parameter named as the caller's input). In a namespace (the executor's blocks) each runs scoped to it
    (:func:`pgmem._async.scope.rows`: nothing more inside a scoped transaction block); without one
    (``AsyncBlock(conn)``) as it is, for connections no client owns. A block sets no deadline and runs
    nothing again: the executor's call around it does, or its owner.

    Attributes:
        connection: the connection, to pass as ``connection=`` to repository calls that join the block.
        namespace: the namespace its statements run in, or None.
    """

    __slots__ = ("_ending", "connection", "namespace")

    def __init__(
        self, connection: Connection[Any], namespace: str | None = None, ending: _Ending | None = None
    ) -> None:
        self.connection = connection
        self.namespace = namespace
        self._ending = ending  # a commit_pipelined transaction's: whether its last statement committed it

    def _open(self) -> None:
        if self._ending is not None and self._ending.committed:
            raise PgmemError("the block committed with its last statement (send_with_commit): nothing runs after it")

    def rows(
        self,
        query: LiteralString | bytes,
        params: dict[str, Any] | None = None,
        *,
        settings: Mapping[str, str] | None = None,
    ) -> list[tuple[Any, ...]]:
        """The rows of ``query`` (none for a command; in a pipeline, fetching them syncs it)."""
        self._open()
        try:
            with translate():
                if self.namespace is None:
                    return _unscoped_rows(self.connection, query, params)
                return scope.rows(self.connection, self.namespace, query, params or {}, settings=settings)
        except UnicodeEncodeError:
            raise unencodable(params or {}) from None

    def one(self, query: LiteralString | bytes, params: dict[str, Any] | None = None) -> tuple[Any, ...] | None:
        """The first row of ``query``, None without one."""
        found = self.rows(query, params)
        return found[0] if found else None

    def scalar(self, query: LiteralString | bytes, params: dict[str, Any] | None = None) -> Any:
        """The first value of ``query``'s first row, None without one."""
        found = self.rows(query, params)
        return found[0][0] if found else None

    def send_with_commit(
        self,
        query: LiteralString | bytes,
        params: dict[str, Any] | None = None,
        *,
        settings: Mapping[str, str] | None = None,
    ) -> list[tuple[Any, ...]]:
        """The block's last statement and its rows. In a block of ``transaction(commit_pipelined=True)`` it
        goes to the server in one write with the block's COMMIT (:func:`pgmem._async.scope.rows`
        ``commit``), so its locks are held from the statement through the commit and never across a round
        trip to this process; the block then runs nothing more, and a connection lost on the way raises
        ``CommitUnknown``. In any other block it runs as :meth:`rows`. ``settings``: local to the
        transaction, sent before the statement in the same write (``synchronous_commit`` applies to the
        COMMIT that follows)."""
        if self._ending is None or self.namespace is None:
            return self.rows(query, params, settings=settings)
        self._open()
        try:
            with translate():
                found = scope.rows(
                    self.connection, self.namespace, query, params or {}, settings=settings, commit=True
                )
        except UnicodeEncodeError:
            raise unencodable(params or {}) from None
        except PgmemError as exc:
            _at_commit(exc, reads=False)  # lost after the COMMIT left: it may have committed
            raise
        self._ending.committed = True
        return found

    def command(self, query: Statement, params: dict[str, Any] | None = None) -> None:
        """Run a statement whose rows are not wanted (DDL, a savepoint, a write): in a pipeline its result
        comes with the pipeline's Sync, and an error with it."""
        self._open()
        try:
            with translate():
                if self.namespace is None:
                    self.connection.execute(query, params)
                else:
                    scope.execute(self.connection, self.namespace, query, params)
        except UnicodeEncodeError:
            raise unencodable(params or {}) from None

    @contextmanager
    def transaction(self) -> Iterator[Block]:
        """psycopg's transaction block on the connection (``BEGIN … COMMIT``, a savepoint inside a
        transaction), its errors translated."""
        self._open()
        with translate():
            with self.connection.transaction():
                yield self


@contextmanager
def admin_block(conn: Connection[Any]) -> Iterator[Block]:
    """A block on ``conn`` that sees every namespace (:func:`pgmem._async.scope.admin_transaction`, which
    refuses a role that does not own pgmem's tables), for the owner's maintenance across tenants."""
    with scope.admin_transaction(conn):
        yield Block(conn)
