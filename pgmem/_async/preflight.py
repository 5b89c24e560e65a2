"""What a connection is checked for before a client uses it (one query each, on the connection as it is
handed over, before any namespace): the schema revision and pgvector's types, whether its role escapes
row-level security, and its conninfo to open more like it."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.types import TypeInfo

from pgmem._async.executor import AsyncBlock
from pgmem.errors import PermissionDenied, PgmemError, SchemaOutOfDate, SchemaTooNew
from pgmem.planning.adapters import vector_types
from pgmem.revision import SCHEMA_REVISION, is_known, too_new_message

__all__ = ["bypasses_security", "check_schema", "conninfo_of"]


#: The revision the database is at (``pgmem.alembic_version`` is alembic's table), and pgvector's types as
#: ``TypeInfo.fetch`` reads them (pgmem.planning.adapters): one row per type, one of NULLs without any.
#: One query, no alembic.
_SCHEMA_REVISION_SQL = """
SELECT v.version_num, t.typname, t.oid, t.typarray, t.oid::regtype::text, t.typdelim
FROM pgmem.alembic_version AS v
LEFT JOIN pg_type AS t
  ON t.oid IN (to_regtype('vector'), to_regtype('bit'), to_regtype('halfvec'), to_regtype('sparsevec'))
"""


async def check_schema(conn: AsyncConnection[Any]) -> dict[str, TypeInfo]:
    """Raise :class:`SchemaOutOfDate` unless the database at ``conn`` is at :data:`SCHEMA_REVISION`;
    return pgvector's types in it (for :class:`~pgmem._async.sessions.AsyncSessions`: the pool registers
    them with no query).

    One query. On a connection outside autocommit, or inside a transaction (the caller's), it runs in a
    transaction block of its own (a savepoint inside the caller's transaction), so that a database without
    pgmem's tables never aborts the caller's work.
    """
    block = AsyncBlock(conn)  # no client yet, and no namespace: the revision table is the database's
    try:
        if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
            rows = await block.rows(_SCHEMA_REVISION_SQL)
        else:
            async with block.transaction():
                rows = await block.rows(_SCHEMA_REVISION_SQL)
    except PgmemError as exc:
        if not isinstance(exc.__cause__, pg_errors.UndefinedTable | pg_errors.InvalidSchemaName):
            raise
        rows = []  # an empty database: nothing migrated yet
    current = str(rows[0][0]) if rows else None
    if current is not None and not is_known(current):
        raise SchemaTooNew(too_new_message(current))
    if current != SCHEMA_REVISION:
        raise SchemaOutOfDate(
            f"database schema is at {current or 'nothing'}, this pgmem needs {SCHEMA_REVISION}; "
            "run `pgmem migrate` or connect with migrate=True"
        )
    return vector_types(row[1:] for row in rows)


#: Whether the login role is one row-level security does not hold, and whether it may act as the
#: application role (which exists).
_BYPASS_SQL = """
SELECT r.rolsuper OR r.rolbypassrls OR pg_has_role(current_user, c.relowner, 'MEMBER'),
       CASE WHEN to_regrole(%(role)s) IS NULL THEN false ELSE pg_has_role(current_user, %(role)s, 'MEMBER') END
FROM pg_roles AS r, pg_class AS c
WHERE r.rolname = current_user AND c.oid = 'pgmem.messages'::regclass"""


async def bypasses_security(conn: AsyncConnection[Any], role: str) -> bool:
    """Whether ``conn``'s role escapes row-level security, so the client must act as ``role`` (one query).

    Raises :class:`PermissionDenied` when it does and ``role`` does not exist: a client acting as the
    owner would see every namespace, which pgmem refuses rather than allow.
    """
    row = await AsyncBlock(conn).one(_BYPASS_SQL, {"role": role})
    if row is None or not row[0]:
        return False
    if not row[1]:
        raise PermissionDenied(
            "this DSN logs in as a role that row-level security does not hold (a superuser, BYPASSRLS or the "
            f"owner of pgmem's tables), and the application role {role!r} does not exist or it is not a member: "
            "run `pgmem migrate` as a role that may create roles (or `GRANT pgmem_app TO` this role), or "
            "`pgmem roles create --name NAME` and connect as NAME"
        )
    return True


def conninfo_of(conn: AsyncConnection[Any]) -> str:
    """The conninfo of an open connection, its password included (to open more connections like it)."""
    info = conn.info
    return psycopg.conninfo.make_conninfo(info.dsn, password=info.password or None)
