"""Tenants kept apart by PostgreSQL: row-level security, the application role, cross-tenant maintenance.

Every pgmem table keyed by namespace has row-level security, enabled and forced (migration 0004): a
connection sees and writes only the rows of the namespace its transaction set
(``set_config('pgmem.namespace', ns, true)``; pgmem's clients set it for every statement), and none when
it set none. Superusers and BYPASSRLS roles are not held by it, so pgmem works day to day as a
least-privilege role that does not own the tables:

- ``pgmem_app``: a NOLOGIN group role with exactly the grants the library needs (migration 0004 creates
  it when the migrating role may create roles). It cannot disable row-level security, nor see another
  namespace.
- A LOGIN role for your agents, member of ``pgmem_app``: :func:`create_app_role` or
  ``pgmem roles create --name NAME``. Connect with its DSN.
- A DSN of the owner (or a superuser) still works: the client then acts as ``pgmem_app`` on every pooled
  connection (``SET ROLE``, see ``PGMEM_APP_ROLE``) and keeps the owner's DSN for migrations and the
  DDL of a model's HNSW index. The embedded server works this way with its superuser for migrations and
  the LOGIN role ``pgmem_agent`` for everything else.

Maintenance across namespaces is an explicit operation of the owner: :func:`admin_transaction`.

Example:
    >>> with psycopg.connect(OWNER_DSN) as conn:
    ...     pgmem.security.create_app_role(conn, "agents", password=os.environ["AGENTS_PASSWORD"])
    >>> client = pgmem.connect("postgresql://agents@db/pgmem", namespace="tenant-a")
"""

from __future__ import annotations

import re
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, overload

import psycopg
from psycopg import sql

from pgmem.errors import InvalidInput, PermissionDenied, translate

__all__ = ["APP_GROUP", "admin_transaction", "create_app_role"]

#: The NOLOGIN group role that holds the library's grants (migration 0004).
APP_GROUP = "pgmem_app"

# A plain lower-case SQL identifier; "pg_" names are reserved by PostgreSQL.
_ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# The grants of migration 0004, for a pgmem_app created after the database was migrated (the migrating
# role could not create roles then). Only the tables' owner or a superuser can give them.
_GRANTS = """
DO $$
DECLARE
    t text;
BEGIN
    IF to_regnamespace('pgmem') IS NULL OR to_regclass('pgmem.messages') IS NULL THEN
        RETURN;  -- not migrated yet (or not this database): migration 0004 grants them
    END IF;
    GRANT USAGE ON SCHEMA pgmem TO pgmem_app;
    FOR t IN SELECT c.oid::regclass::text FROM pg_class AS c
             WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p', 'v')
    LOOP
        IF t = 'pgmem.alembic_version' OR (SELECT relkind FROM pg_class WHERE oid = t::regclass) = 'v' THEN
            EXECUTE format('GRANT SELECT ON %s TO pgmem_app', t);
        ELSIF t IN ('pgmem.embedding_models', 'pgmem.doorbell') THEN
            EXECUTE format('GRANT SELECT, INSERT ON %s TO pgmem_app', t);
        ELSE
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO pgmem_app', t);
        END IF;
    END LOOP;
    -- USAGE only: SELECT would let a tenant read last_value, the other tenants' volume (migration 0013)
    GRANT USAGE ON ALL SEQUENCES IN SCHEMA pgmem TO pgmem_app;
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgmem TO pgmem_app;
END $$"""

# (the group exists, the role exists, it bypasses row-level security, it is a member of the group, the
# group lacks its grants in this migrated database)
_ROLE_STATE = """
SELECT g.oid IS NOT NULL,
       r.oid IS NOT NULL,
       coalesce(r.rolsuper OR r.rolbypassrls, false),
       CASE WHEN g.oid IS NULL OR r.oid IS NULL THEN false ELSE pg_has_role(r.oid, g.oid, 'MEMBER') END,
       CASE WHEN g.oid IS NULL OR to_regclass('pgmem.messages') IS NULL THEN false
            ELSE NOT has_table_privilege(g.oid, 'pgmem.messages', 'SELECT') END
FROM (SELECT 1) AS one
LEFT JOIN pg_roles AS g ON g.rolname = %(group)s
LEFT JOIN pg_roles AS r ON r.rolname = %(name)s"""


def check_role_name(name: object) -> str:
    """``name`` if it is a valid name for an application role, else :class:`InvalidInput`."""
    if not isinstance(name, str) or not _ROLE_NAME.fullmatch(name) or name.startswith("pg_"):
        raise InvalidInput(
            f"invalid role name {name!r}: use 1-63 lower-case letters, digits and underscores, not starting with "
            "a digit or 'pg_'"
        )
    return name


def create_app_role(conn: psycopg.Connection[Any], name: str, *, password: str | None = None) -> bool:
    """Create the LOGIN role ``name``, a member of ``pgmem_app`` (created with its grants when missing).

    Idempotent: an existing role is made a member (and given ``password`` when one is passed). Run it as
    a superuser or a role with CREATEROLE on the pgmem database; ``pgmem_app``'s grants, when they are
    missing, need the tables' owner or a superuser. The password is sent as a bound parameter of
    ``ALTER ROLE ... PASSWORD`` (never logged by pgmem; the server logs statements only if configured to).
    Commits on a connection outside a transaction; inside the caller's transaction the caller commits.

    Args:
        conn: a connection of a role that may create roles (a superuser or CREATEROLE).
        name: the new role's name (lower-case letters, digits and underscores, not ``pg_*``).
        password: its password (None: none set; trust or peer authentication, or set it yourself).

    Returns:
        True when the role was created, False when it existed.

    Raises:
        InvalidInput: a bad name or password, or an existing role of that name that bypasses row-level
            security (a superuser or BYPASSRLS role cannot be an application role). Nothing was changed.
        PermissionDenied: the connection's role may not create roles or grant membership.
    """
    check_role_name(name)
    if name == APP_GROUP:
        raise InvalidInput(f"{APP_GROUP} is the group role; choose another name for a login role")
    if password is not None and (not isinstance(password, str) or not password or "\x00" in password):
        raise InvalidInput("password must be a non-empty string without NUL characters")
    with translate(), conn.transaction():
        row = conn.execute(_ROLE_STATE, {"group": APP_GROUP, "name": name}).fetchone()
        assert row is not None
        group_exists, exists, bypasses, member, needs_grants = row
        if bypasses:
            raise InvalidInput(f"role {name!r} bypasses row-level security: it cannot be an application role")
        if not group_exists:
            try:
                with conn.transaction():
                    conn.execute("CREATE ROLE pgmem_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE")
            except psycopg.errors.DuplicateObject:
                pass  # another session created it meanwhile
            needs_grants = True
        if needs_grants:
            conn.execute(_GRANTS)
        role = sql.Identifier(name)
        if not exists:
            try:
                with conn.transaction():
                    conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(role))
            except psycopg.errors.DuplicateObject:
                exists = True
        if not member:
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(APP_GROUP), role))
        if password is not None:
            # ALTER ROLE takes no bound parameters: the password goes as a quoted literal, built by psycopg
            # on this connection, and is neither logged nor raised by pgmem (errors below are rewritten).
            try:
                with conn.transaction():
                    conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, sql.Literal(password)))
            except psycopg.Error as exc:
                raise PermissionDenied(f"could not set the password of role {name!r} ({exc.sqlstate})") from None
    return not exists


@overload
def admin_transaction(conn: psycopg.Connection[Any]) -> AbstractContextManager[psycopg.Connection[Any]]: ...
@overload
def admin_transaction(
    conn: psycopg.AsyncConnection[Any],
) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]: ...
def admin_transaction(conn: Any) -> Any:
    """A transaction block on ``conn`` that sees and writes every namespace: maintenance across tenants.

    ``with admin_transaction(conn):`` on a sync connection, ``async with admin_transaction(conn):`` on an
    async one. It sets ``pgmem.admin`` to ``on`` for the transaction, which only the tables' owner's
    ``pgmem_admin`` policy reads; superusers and BYPASSRLS roles see everything anyway. On a connection
    already in a transaction it is a savepoint, and the setting is turned off when the block ends.

    Raises:
        PermissionDenied: the connection's current role is neither a superuser, a BYPASSRLS role, nor the
            tables' owner (pgmem's application role never is): nothing was run.

    Example:
        >>> with psycopg.connect(OWNER_DSN, autocommit=True) as conn, admin_transaction(conn):
        ...     conn.execute("DELETE FROM pgmem.brain_memories WHERE expires_at < now()")
    """
    if isinstance(conn, psycopg.AsyncConnection):
        from pgmem._async.scope import admin_transaction as async_admin

        return async_admin(conn)
    if isinstance(conn, psycopg.Connection):
        from pgmem._sync.scope import admin_transaction as sync_admin

        return sync_admin(conn)
    raise InvalidInput(f"admin_transaction takes a psycopg connection, not {type(conn).__name__}")
