"""Tenants' isolation, the metadata filters and keyword search against their migrations (pgmem.ops.drift).

- Row-level security: every declared table keyed by namespace has it enabled and forced, with the two
  policies of migration 0004 exactly (``pgmem_namespace`` for every role, ``pgmem_admin`` for the owner,
  never one that applies to ``pgmem_app``), and no other permissive policy (permissive policies add up: one
  more widens what a role sees). A restrictive one of yours only narrows: a warning.
- Grants: what ``pgmem_app`` may do (migrations 0004, 0012, 0013): USAGE on the schema and not CREATE; on
  each table read and write, but only read and insert the model registry and the doorbell, only read
  alembic's bookkeeping, never TRUNCATE (which row-level security does not hold), REFERENCES or TRIGGER;
  USAGE on the sequences, not SELECT (their last value tells how much other tenants wrote); EXECUTE on the
  functions, SELECT on the views; and the owner's default privileges that give later tables the same.
- Views run with the caller's rights (``security_invoker``, PostgreSQL 15+).
- Metadata filters (migration 0016) and keyword search (0027): their operators ``pgmem.@>`` and
  ``pgmem.@@`` and functions must exist; their indexes need a superuser (the LEAKPROOF functions, the GIN
  operator classes, the indexes): without it, a warning (pgmem.ops.leakproof).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, LiteralString

import psycopg
from psycopg import sql

from pgmem.ops import leakproof
from pgmem.ops.drift import Difference, Fix, Owner, running
from pgmem.ops.schema import SCHEMA, metadata

__all__ = ["APP_PRIVILEGES", "NARROWED", "differences", "namespaced"]

#: What pgmem_app may do on a table of schema pgmem (migration 0004), and where it may do less (0004, 0012).
APP_PRIVILEGES: tuple[LiteralString, ...] = ("SELECT", "INSERT", "UPDATE", "DELETE")
NARROWED: dict[str, tuple[LiteralString, ...]] = {
    "embedding_models": ("SELECT", "INSERT"),
    "doorbell": ("SELECT", "INSERT"),
    "alembic_version": ("SELECT",),
}
#: The table privileges compared (MAINTAIN, PostgreSQL 17+, is left as migration 0004 granted it).
_TABLE_PRIVILEGES: tuple[LiteralString, ...] = (*APP_PRIVILEGES, "TRUNCATE", "REFERENCES", "TRIGGER")

# The policies of migration 0004 as it writes them, and as Postgres prints them back (pg_get_expr).
_SCOPED = "(namespace = current_setting('pgmem.namespace'::text, true))"
_ADMIN = "(current_setting('pgmem.admin'::text, true) = 'on'::text)"
_CREATE_POLICY: dict[str, LiteralString] = {
    "pgmem_namespace": "CREATE POLICY pgmem_namespace ON {table} USING "
    "(namespace = current_setting('pgmem.namespace', true)) WITH CHECK "
    "(namespace = current_setting('pgmem.namespace', true))",
    "pgmem_admin": "CREATE POLICY pgmem_admin ON {table} TO {owner} USING "
    "(current_setting('pgmem.admin', true) = 'on') WITH CHECK (current_setting('pgmem.admin', true) = 'on')",
}

# Migration 0004's group role, where the repairing role may create it.
_CREATE_APP_ROLE = """
DO $$
BEGIN
    IF to_regrole('pgmem_app') IS NULL
       AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)) THEN
        CREATE ROLE pgmem_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    END IF;
END $$"""

_TABLES = """
SELECT c.relname::text, pg_get_userbyid(c.relowner)::text, c.relrowsecurity, c.relforcerowsecurity,
       CASE WHEN to_regrole('pgmem_app') IS NULL THEN '{}'::text[]
            ELSE array(SELECT x FROM unnest(%(privileges)s::text[]) AS x
                       WHERE has_table_privilege('pgmem_app', c.oid, x) ORDER BY 1) END
FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')"""
_POLICIES = """
SELECT c.relname::text, p.polname::text, p.polpermissive, p.polcmd::text, p.polroles = '{0}'::oid[],
       EXISTS (SELECT 1 FROM unnest(p.polroles) AS r
               WHERE CASE WHEN r = 0 THEN true
                          WHEN to_regrole('pgmem_app') IS NULL THEN false
                          ELSE pg_has_role('pgmem_app', r, 'MEMBER') END),
       pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid)
FROM pg_policy AS p
JOIN pg_class AS c ON c.oid = p.polrelid
WHERE c.relnamespace = 'pgmem'::regnamespace"""
_OTHERS = """
SELECT c.relkind::text, c.relname::text,
       CASE c.relkind WHEN 'S' THEN has_sequence_privilege('pgmem_app', c.oid, 'USAGE')
                      ELSE has_table_privilege('pgmem_app', c.oid, 'SELECT') END,
       c.relkind = 'S' AND has_sequence_privilege('pgmem_app', c.oid, 'SELECT'),
       c.relkind = 'S' AND has_sequence_privilege('pgmem_app', c.oid, 'UPDATE')
FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('S', 'v')"""
# Views that run with their owner's rights (security_invoker exists from PostgreSQL 15).
_DEFINERS = """
SELECT c.relname::text FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'v'
  AND current_setting('server_version_num')::int >= 150000
  AND NOT coalesce('security_invoker=true' = ANY(c.reloptions), false)"""
_FUNCTIONS = """
SELECT p.proname::text, format('pgmem.%s(%s)', p.proname, pg_get_function_identity_arguments(p.oid)),
       has_function_privilege('pgmem_app', p.oid, 'EXECUTE')
FROM pg_proc AS p
WHERE p.pronamespace = 'pgmem'::regnamespace"""
_SCHEMA = """
SELECT has_schema_privilege('pgmem_app', 'pgmem', 'USAGE'), has_schema_privilege('pgmem_app', 'pgmem', 'CREATE')"""
_DEFAULTS = """
SELECT d.defaclobjtype::text,
       array(SELECT a.privilege_type FROM aclexplode(d.defaclacl) AS a
             WHERE a.grantee = 'pgmem_app'::regrole ORDER BY 1)
FROM pg_default_acl AS d
WHERE d.defaclnamespace = 'pgmem'::regnamespace
  AND d.defaclrole = (SELECT oid FROM pg_roles WHERE rolname = %(owner)s)"""
#: The owner's default privileges in schema pgmem for pgmem_app (migrations 0004, 0013): tables, sequences.
_DEFAULT_PRIVILEGES: dict[str, tuple[LiteralString, LiteralString, tuple[LiteralString, ...]]] = {
    "r": ("TABLES", "tables", ("DELETE", "INSERT", "SELECT", "UPDATE")),
    "S": ("SEQUENCES", "sequences", ("USAGE",)),
}


def namespaced() -> list[str]:
    """The declared tables keyed by namespace (all but the model registry): row-level security's."""
    return sorted(t.name for t in metadata.tables.values() if "namespace" in t.c)


def _listed(privileges: set[str] | list[str] | tuple[str, ...]) -> str:
    return ", ".join(sorted(privileges)) or "nothing"


def _privileges(privileges: set[str]) -> sql.Composable:
    known = {p: p for p in (*_TABLE_PRIVILEGES, "USAGE")}  # keywords, not input: LiteralString
    return sql.SQL(", ").join(sql.SQL(known[p]) for p in sorted(privileges))


def _exactly(on: sql.Composable, granted: set[str], wanted: set[str]) -> tuple[str, Fix] | None:
    """What differs of pgmem_app's privileges on ``on``, and the fix that makes them exactly ``wanted``."""
    missing, extra = wanted - granted, granted - wanted
    words = []
    statements = []
    if missing:
        words.append(f"pgmem_app lacks {_listed(missing)}")
        statements.append(sql.SQL("GRANT {} ON {} TO pgmem_app").format(_privileges(missing), on))
    if extra:
        words.append(f"pgmem_app may also {_listed(extra)} (declared: {_listed(wanted)})")
        statements.append(sql.SQL("REVOKE {} ON {} FROM pgmem_app").format(_privileges(extra), on))
    return ("; ".join(words), running(*statements)) if words else None


def _policies(table: str, owner: str, found: dict[str, tuple[Any, ...]]) -> Iterator[Difference]:
    ident = sql.Identifier(SCHEMA, table)
    subject = f"pgmem.{table}"
    for name, expression in (("pgmem_namespace", _SCOPED), ("pgmem_admin", _ADMIN)):
        owner_ = {"owner": sql.Identifier(owner)} if name == "pgmem_admin" else {}
        create = sql.SQL(_CREATE_POLICY[name]).format(table=ident, **owner_)
        fix = running(sql.SQL("DROP POLICY IF EXISTS {} ON {}").format(sql.Identifier(name), ident), create)
        policy = found.pop(name, None)
        if policy is None:
            yield Difference("policies", subject, f"policy {name} missing", fix=fix)
            continue
        permissive, command, public, to_app, using, check = policy
        wrong = [] if permissive else ["restrictive"]
        wrong += [] if command == "*" else [f"for {command} only"]
        if name == "pgmem_namespace" and not public:
            wrong.append("not for every role")
        if name == "pgmem_admin" and to_app:
            wrong.append("applies to pgmem_app (any client may then read every namespace)")
        wrong += [] if using == expression else [f"USING {using}"]
        wrong += [] if check == expression else [f"WITH CHECK {check}"]
        if wrong:
            detail = f"policy {name} is not migration 0004's: {', '.join(wrong)}"
            yield Difference("policies", subject, detail, fix=fix)
    for name, (permissive, *_rest) in sorted(found.items()):
        if permissive:
            detail = (
                f"policy {name} is not pgmem's, and permissive: it widens what the roles it applies to see "
                "(not repaired: drop it, or make it AS RESTRICTIVE)"
            )
            yield Difference("policies", subject, detail)
        else:
            yield Difference("policies", subject, f"policy {name} is not pgmem's (restrictive: left)", "warning")


def _isolation(conn: psycopg.Connection[Any], tables: dict[str, tuple[Any, ...]]) -> Iterator[Difference]:
    policies: dict[str, dict[str, tuple[Any, ...]]] = {}
    for table, name, *policy in conn.execute(_POLICIES):
        policies.setdefault(table, {})[name] = tuple(policy)
    for table in namespaced():
        if table not in tables:
            continue  # missing: created, then secured, by the repair
        owner, enabled, forced, _granted = tables[table]
        ident = sql.Identifier(SCHEMA, table)
        if not (enabled and forced):
            fix = running(
                sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(ident),
                sql.SQL("ALTER TABLE {} FORCE ROW LEVEL SECURITY").format(ident),
            )
            detail = "row-level security not " + ("forced" if enabled else "enabled")
            yield Difference("row-level security", f"pgmem.{table}", detail, fix=fix)
        yield from _policies(table, owner, policies.get(table, {}))


def _grants(conn: psycopg.Connection[Any], tables: dict[str, tuple[Any, ...]], who: Owner) -> Iterator[Difference]:
    if conn.execute("SELECT to_regrole('pgmem_app') IS NULL").fetchone() == (True,):
        detail = (
            "role pgmem_app is missing: grants not compared (`pgmem roles create --name <agents>` as a superuser "
            "or a role with CREATEROLE)"
        )
        yield Difference("grants", "pgmem_app", detail, "warning", running(sql.SQL(_CREATE_APP_ROLE)))
        return
    usage, create = conn.execute(_SCHEMA).fetchone() or (True, False)
    schema = sql.Identifier(SCHEMA)
    if not usage:
        yield Difference(
            "grants",
            "schema pgmem",
            "pgmem_app lacks USAGE",
            fix=running(sql.SQL("GRANT USAGE ON SCHEMA {} TO pgmem_app").format(schema)),
        )
    if create:
        yield Difference(
            "grants",
            "schema pgmem",
            "pgmem_app may CREATE",
            fix=running(sql.SQL("REVOKE CREATE ON SCHEMA {} FROM pgmem_app").format(schema)),
        )
    for table, (_owner, _enabled, _forced, granted) in sorted(tables.items()):
        if f"{SCHEMA}.{table}" not in metadata.tables and table != "alembic_version":
            continue  # not pgmem's (a warning of its own)
        on = sql.SQL("TABLE {}").format(sql.Identifier(SCHEMA, table))
        if differs := _exactly(on, set(granted), set(NARROWED.get(table, APP_PRIVILEGES))):
            yield Difference("grants", f"pgmem.{table}", differs[0], fix=differs[1])
    from pgmem.ops.drift_code import blocks

    views = {v for b in blocks() for v in b.views}
    for kind, name, usable, readable, updatable in conn.execute(_OTHERS):
        ident = sql.Identifier(SCHEMA, name)
        if kind == "S":
            granted = {p for p, has in (("USAGE", usable), ("SELECT", readable), ("UPDATE", updatable)) if has}
            if differs := _exactly(sql.SQL("SEQUENCE {}").format(ident), granted, {"USAGE"}):
                yield Difference("grants", f"pgmem.{name}", differs[0], fix=differs[1])
        elif name in views and not usable:
            fix = running(sql.SQL("GRANT SELECT ON {} TO pgmem_app").format(ident))
            yield Difference("grants", f"pgmem.{name}", "pgmem_app lacks SELECT", fix=fix)
    functions = {f for b in blocks() for f in b.functions} | {"jsonb_contains"}
    execute = running(sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {} TO pgmem_app").format(schema))
    for name, signature, executable in conn.execute(_FUNCTIONS):
        if name in functions and not executable:
            yield Difference("grants", signature, "pgmem_app lacks EXECUTE", fix=execute)
    defaults = {kind: set(privileges) for kind, privileges in conn.execute(_DEFAULTS, {"owner": who.owner})}
    for kind, (keyword, noun, wanted) in _DEFAULT_PRIVILEGES.items():
        granted = defaults.get(kind, set())
        objects = sql.SQL(keyword)
        missing, extra = set(wanted) - granted, granted - set(wanted)
        if not (missing or extra):
            continue
        alter = sql.SQL("ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA {} ").format(sql.Identifier(who.owner), schema)
        statements = []
        if missing:
            statements.append(alter + sql.SQL("GRANT {} ON {} TO pgmem_app").format(_privileges(missing), objects))
        if extra:
            statements.append(alter + sql.SQL("REVOKE {} ON {} FROM pgmem_app").format(_privileges(extra), objects))
        detail = f"pgmem_app gets {_listed(granted)} on new {noun}, declared {_listed(set(wanted))}"
        yield Difference("grants", f"default privileges of {who.owner}", detail, fix=running(*statements))


def _views(conn: psycopg.Connection[Any]) -> Iterator[Difference]:
    from pgmem.ops.drift_code import blocks

    views = {v for b in blocks() for v in b.views}
    for (name,) in conn.execute(_DEFINERS):
        if name in views:
            fix = running(sql.SQL("ALTER VIEW {} SET (security_invoker = true)").format(sql.Identifier(SCHEMA, name)))
            detail = "not security_invoker: it reads the tables with its owner's rights, not the caller's"
            yield Difference("views", f"pgmem.{name}", detail, fix=fix)


def differences(conn: psycopg.Connection[Any], who: Owner) -> list[Difference]:
    """The differences of row-level security, the policies, the grants, views' rights and the metadata
    filters, each with its fix where it has one."""
    tables = {row[0]: tuple(row[1:]) for row in conn.execute(_TABLES, {"privileges": list(_TABLE_PRIVILEGES)})}
    return [*_isolation(conn, tables), *_grants(conn, tables, who), *_views(conn), *leakproof.differences(conn, who)]
