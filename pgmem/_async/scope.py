"""The namespace of a transaction, which row-level security reads (migration 0004).

Every table keyed by namespace shows and takes only the rows of the transaction's ``pgmem.namespace``
setting; with none set, no row. So every statement pgmem runs for a client runs in a transaction that set
it first, locally (``set_config('pgmem.namespace', ns, true)``: it ends with the transaction):

- :func:`execute`: one statement outside a transaction block pgmem opened. The setting goes in the same
  round trip as the statement (a psycopg pipeline: one Sync, so one implicit transaction holds both). On
  a caller's connection inside the caller's transaction, the setting lasts until that transaction ends.
- :func:`transaction`: ``BEGIN`` (or a savepoint) with the setting, in one round trip; statements inside
  run as they are (:func:`execute` sees the connection is scoped and adds nothing). :func:`block` is the
  all-or-nothing block of ``client.transaction()`` and the executor's, built on it.
- :func:`admin_transaction`: a transaction that sees every namespace (the owner's ``pgmem_admin``
  policy), for maintenance across tenants; refused to a role that is not the tables' owner.

Which connection is inside which of pgmem's transaction blocks, and for which namespace, is known per
connection for the length of the block only: after it nothing is assumed, and the next statement sets the
namespace again.

The caller's own SQL on ``client.connection()`` sees the client's namespace too, for the block only:
:func:`set_session` and :func:`reset_session` on a pgmem-owned (pooled) connection, :func:`borrowed` on
the caller's connection (set as it would be for pgmem's statements there, then put back as it was).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, LiteralString

import psycopg
from psycopg import AsyncConnection, AsyncCursor, AsyncTransaction
from psycopg.pq import ExecStatus, PipelineStatus, TransactionStatus

from pgmem import wire
from pgmem.errors import PermissionDenied, PgmemError, translate

__all__ = [
    "SET_NAMESPACE",
    "admin_transaction",
    "begin",
    "block",
    "borrowed",
    "end",
    "execute",
    "idle",
    "reset_session",
    "rows",
    "scoped",
    "set_session",
    "transaction",
]

#: The statement that scopes a transaction to a namespace (``%(ns)s``).
SET_NAMESPACE: LiteralString = "SELECT set_config('pgmem.namespace', %(ns)s, true)"

#: The namespace for the rest of the session (``local`` false) or of the transaction (true), and the one it
#: replaces (NULL: never set on this connection).
_SWAP_NAMESPACE: LiteralString = (
    "SELECT current_setting('pgmem.namespace', true), set_config('pgmem.namespace', %(ns)s, %(local)s)"
)
_PUT_NAMESPACE: LiteralString = "SELECT set_config('pgmem.namespace', %(ns)s, %(local)s)"

#: Whether the connection's current role may see every namespace (superuser or BYPASSRLS, to which
#: row-level security does not apply, or a member of the tables' owner, whose pgmem_admin policy it is),
#: and the admin setting turned on for the transaction.
_ADMIN = """
SELECT r.rolsuper OR r.rolbypassrls OR pg_has_role(current_user, c.relowner, 'MEMBER'),
       set_config('pgmem.admin', 'on', true), current_user::text
FROM pg_roles AS r, pg_class AS c
WHERE r.rolname = current_user AND c.oid = 'pgmem.messages'::regclass"""

# The namespace each connection's current transaction block (opened by `transaction`) is scoped to.
_scopes: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def scoped(conn: AsyncConnection[Any]) -> str | None:
    """The namespace of the transaction block pgmem has open on ``conn`` (None: none, or unknown)."""
    return _scopes.get(conn)


async def execute(
    conn: AsyncConnection[Any],
    namespace: str,
    query: LiteralString | Any,
    params: Any = None,
    *,
    binary: bool = False,
    prepare: bool | None = None,
    settings: Mapping[str, str] | None = None,
) -> AsyncCursor[Any]:
    """Run ``query`` in a transaction whose ``pgmem.namespace`` is ``namespace``; return its cursor.
    ``settings``: more settings local to that transaction (``set_config(name, value, true)``), sent with
    the namespace's.

    Inside a :func:`transaction` of the same namespace the statement runs alone (with its settings, when
    it has some); anywhere else the setting goes with it in one round trip (the namespace is set for the
    caller's transaction when the connection is in one).
    """
    set_namespace = _scopes.get(conn) != namespace
    if not set_namespace and not settings:
        return await conn.execute(query, params, binary=binary, prepare=prepare)
    setup, values = _setup(namespace if set_namespace else None, settings)
    if _pipelined(conn):  # the caller's pipeline sends both in its round trip (a nested one would sync)
        await conn.execute(setup, values)
        return await conn.execute(query, params, binary=binary, prepare=prepare)
    async with conn.pipeline():
        await conn.execute(setup, values)
        return await conn.execute(query, params, binary=binary, prepare=prepare)


def _setup(namespace: str | None, settings: Mapping[str, str] | None) -> tuple[Any, list[str]]:
    """The setup statement of :func:`execute` in psycopg's placeholders, and its values."""
    values = [] if namespace is None else [namespace]
    for name, value in (settings or {}).items():
        values += [name, value]
    text = wire.setup_statement(namespace is not None, len(settings or ())).decode()
    return re.sub(r"\$\d+", "%s", text), values


async def rows(
    conn: AsyncConnection[Any],
    namespace: str,
    query: LiteralString | bytes,
    params: dict[str, Any],
    *,
    prepare: bool | None = None,
    settings: Mapping[str, str] | None = None,
    commit: bool = False,
) -> list[tuple[Any, ...]]:
    """Run ``query`` (named placeholders) as :func:`execute` does and return its rows, in binary (none for a
    statement that returns none). ``commit``: a block of :func:`begin`'s, committed with the statement (sent
    in the same write: its locks are never held across a round trip to this process).

    Where it can (:func:`pgmem.wire.applies`) the setting and the statement are sent through libpq
    directly: the same messages as psycopg's pipeline, for half its client CPU. A statement prepared on a
    connection whose server forgot it (``DISCARD ALL``) runs once more unprepared, outside a transaction
    block; in one, the error is the caller's, as psycopg's would be.
    """
    converted = wire.convert(query)
    if converted is not None:
        for attempt in (1, 2):
            async with conn.lock:  # the connection's state is read under its lock: another thread may use it
                if not wire.applies(conn):
                    break
                in_block = conn.pgconn.transaction_status == TransactionStatus.INTRANS
                pgconn = conn.pgconn
                scope_to = None if _scopes.get(conn) == namespace else namespace
                plan = wire.send(conn, converted, params, scope_to, prepare, settings, commit=commit)
                try:
                    results = await conn.wait(wire.exchange(pgconn, plan.syncs))
                finally:
                    wire.leave(pgconn)
            try:
                return wire.rows(conn, plan, results)
            except psycopg.errors.InvalidSqlStatementName:
                if attempt == 2 or in_block or not plan.prepared:
                    raise
    cur = await execute(conn, namespace, query, params, binary=True, prepare=prepare, settings=settings)
    res = cur.pgresult
    if commit:  # not this module's placeholders: the statement, then its COMMIT
        found = await cur.fetchall() if res is not None and res.status == ExecStatus.TUPLES_OK else []
        await conn.execute(b"COMMIT")
        return found
    if res is None and _pipelined(conn):  # the caller's pipeline: fetching the rows syncs it
        try:
            return await cur.fetchall()
        except psycopg.ProgrammingError:  # a command: no rows
            return []
    # Not `cur.description`: it builds a Column object per column, 25 us for 23 columns.
    return await cur.fetchall() if res is not None and res.status == ExecStatus.TUPLES_OK else []


def _pipelined(conn: AsyncConnection[Any]) -> bool:
    return conn.pgconn.pipeline_status != PipelineStatus.OFF


def idle(conn: AsyncConnection[Any]) -> bool:
    """Whether a statement on ``conn`` would run in an implicit transaction of its own: autocommit, no
    transaction open, no pipeline of the caller's (which may hold statements of its own)."""
    pgconn = conn.pgconn
    return (
        conn.autocommit
        and pgconn.transaction_status == TransactionStatus.IDLE
        and pgconn.pipeline_status == PipelineStatus.OFF
    )


@asynccontextmanager
async def transaction(conn: AsyncConnection[Any], namespace: str) -> AsyncIterator[AsyncConnection[Any]]:
    """A transaction block (``BEGIN`` on an idle autocommit connection, else a savepoint) scoped to
    ``namespace``: the setting is sent with the ``BEGIN``, in one round trip.

    Inside another one of the same namespace this is only the savepoint. Inside one of another namespace
    (two clients on one connection), that namespace is set again when this block ends.
    """
    outer = _scopes.get(conn)
    if outer == namespace:
        async with conn.transaction():
            yield conn
        return
    try:
        async with AsyncExitStack() as stack:
            # A Transaction object, not conn.transaction(): entered inside a pipeline, the latter keeps the
            # connection in pipeline mode until the transaction ends (results fetched lazily, cursors'
            # pgresult unset), where this one leaves it with the pipeline block.
            if _pipelined(conn):
                await stack.enter_async_context(AsyncTransaction(conn))
                await conn.execute(SET_NAMESPACE, {"ns": namespace})
            else:
                async with conn.pipeline():
                    await stack.enter_async_context(AsyncTransaction(conn))
                    await conn.execute(SET_NAMESPACE, {"ns": namespace})
            _scopes[conn] = namespace
            yield conn
    finally:
        if outer is not None and conn.info.transaction_status == TransactionStatus.INTRANS:
            await conn.execute(SET_NAMESPACE, {"ns": outer})
            _scopes[conn] = outer
        else:
            _scopes.pop(conn, None)


async def begin(conn: AsyncConnection[Any], namespace: str) -> None:
    """``BEGIN`` on an idle autocommit connection, scoped to ``namespace``, in one round trip: a block of
    pgmem's own, whose last statement may carry its ``COMMIT`` (:func:`rows` ``commit``). psycopg's
    ``Transaction`` would send a COMMIT of its own after it. The caller ends it with :func:`end`."""
    async with conn.pipeline():
        await conn.execute(b"BEGIN")
        await conn.execute(SET_NAMESPACE, {"ns": namespace})
    _scopes[conn] = namespace


async def end(conn: AsyncConnection[Any], commit: bool) -> None:
    """End a block of :func:`begin`'s: ``COMMIT`` (or ``ROLLBACK``) unless a statement committed it already
    (or the connection is gone: the server rolled it back)."""
    _scopes.pop(conn, None)
    if not conn.closed and conn.pgconn.transaction_status != TransactionStatus.IDLE:
        await conn.execute(b"COMMIT" if commit else b"ROLLBACK")


@asynccontextmanager
async def block(
    conn: AsyncConnection[Any], namespace: str, *, pipeline: bool = False
) -> AsyncIterator[AsyncConnection[Any]]:
    """A block of statements scoped to ``namespace`` that is all or nothing: a :func:`transaction` on an
    autocommit connection or inside a transaction (``BEGIN``, or a savepoint: pgmem never commits what it
    did not open); on a connection outside autocommit and outside a transaction, the setting made in the
    caller's implicit transaction, which the caller commits.

    ``pipeline``: the block's statements go in one pipeline. On an idle autocommit connection (:func:`idle`)
    that is the whole block: the setting and the statements in one pipeline, whose Sync ends the implicit
    transaction holding them all (committed together, or not at all): one round trip where ``BEGIN …
    COMMIT`` took three (an item store's put of one item).
    """
    async with AsyncExitStack() as stack:
        if pipeline and idle(conn):
            await stack.enter_async_context(conn.pipeline())
            await conn.execute(SET_NAMESPACE, {"ns": namespace})
            _scopes[conn] = namespace  # until the Sync: the statements inside add nothing
            stack.callback(_scopes.pop, conn, None)
        else:
            if conn.autocommit or conn.info.transaction_status == TransactionStatus.INTRANS:
                await stack.enter_async_context(transaction(conn, namespace))
            else:
                # Not marked scoped: the caller may commit inside the block, which ends the setting.
                await conn.execute(SET_NAMESPACE, {"ns": namespace})
            if pipeline:
                await stack.enter_async_context(conn.pipeline())
        yield conn


@asynccontextmanager
async def admin_transaction(conn: AsyncConnection[Any]) -> AsyncIterator[AsyncConnection[Any]]:
    """A transaction block that sees and writes every namespace (``pgmem.admin`` on, locally).

    For maintenance across tenants, as the tables' owner (the role that ran ``pgmem migrate``), a
    superuser or a BYPASSRLS role; pgmem's application role is none of these, so a client acting as it can
    never reach another namespace this way. On a connection already in a transaction this is a savepoint,
    and the setting is turned off again when the block ends.

    Raises:
        PermissionDenied: the connection's current role may not see every namespace (nothing was run).
    """
    with translate():
        async with conn.transaction():
            cur = await conn.execute(_ADMIN)
            row = await cur.fetchone()
            if row is None or not row[0]:
                raise PermissionDenied(
                    f"role {row[2] if row else 'of this connection'} is not the owner of pgmem's tables: "
                    "cross-namespace maintenance needs the owner "
                    "(the role that runs `pgmem migrate`), a superuser or a BYPASSRLS role"
                )
            _scopes.pop(conn, None)  # every namespace: no namespace-scoped shortcut applies
            try:
                yield conn
            finally:
                if conn.info.transaction_status == TransactionStatus.INTRANS:
                    await conn.execute("SELECT set_config('pgmem.admin', '', true)")


async def set_session(conn: AsyncConnection[Any], namespace: str) -> None:
    """Scope ``conn``'s session to ``namespace`` until :func:`reset_session`: for the caller's SQL on a
    pgmem-owned connection. Outside autocommit (a caller's pool) the setting is committed at once, so that
    a rollback in the block does not take it away."""
    await conn.execute(_PUT_NAMESPACE, {"ns": namespace, "local": False})
    if not conn.autocommit:
        await conn.commit()


async def reset_session(conn: AsyncConnection[Any]) -> None:
    """Undo :func:`set_session` before ``conn`` goes back to its pool, which other namespaces' clients share
    (``with_namespace``). A transaction the block left open is rolled back first (a setting undone inside
    it would come back with a later rollback). A connection that cannot be reset (a lost server, the call's
    deadline spent) is closed, which makes the pool discard it: it never serves another client still
    scoped. The block's own error, if any, is what the caller sees."""
    if conn.closed:
        return
    try:
        if conn.info.transaction_status != TransactionStatus.IDLE:
            await conn.rollback()
        await conn.execute(_PUT_NAMESPACE, {"ns": "", "local": False})
        if not conn.autocommit:
            await conn.commit()
    except (psycopg.Error, PgmemError):
        await conn.close()


@asynccontextmanager
async def borrowed(conn: AsyncConnection[Any], namespace: str) -> AsyncIterator[AsyncConnection[Any]]:
    """``conn``, the caller's connection, scoped to ``namespace`` for the block and then put back as it was.

    In a transaction (the caller's, or the implicit one a statement opens outside autocommit) the setting
    is local to it, as pgmem's own statements set it there: a commit or rollback of the caller's never
    carries it further. On an idle autocommit connection it is the session's until the block ends. One
    round trip at each end. (Left in an aborted transaction, a session setting cannot be put back: it stays
    on the caller's connection, which is the caller's to roll back or close.)
    """
    local = not conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE
    outer = _scopes.pop(conn, None)  # pgmem's statements in the block set their namespace again
    try:
        with translate():
            cur = await conn.execute(_SWAP_NAMESPACE, {"ns": namespace, "local": local})
            row = await cur.fetchone()
        previous = (row[0] if row else None) or ""
        try:
            yield conn
        finally:
            status = conn.info.transaction_status
            # Local: only while the transaction lasts (ended, it took the setting with it).
            in_block = status == TransactionStatus.INTRANS
            if not conn.closed and (in_block or (not local and status == TransactionStatus.IDLE)):
                with translate():
                    await conn.execute(_PUT_NAMESPACE, {"ns": previous, "local": local})
    finally:
        if outer is not None and conn.info.transaction_status == TransactionStatus.INTRANS:
            _scopes[conn] = outer
