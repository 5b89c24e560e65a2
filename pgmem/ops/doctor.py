"""``pgmem doctor``: what a deployment needs, checked one line at a time, each OK or what to do.

Read-only: it connects with the DSN it is given (or the embedded server), reads settings and catalogs,
and embeds one short text with the configured embedder. Checks that need to see every namespace (the
embedding backlog, the doorbell's rows) run in an admin transaction, which only the tables' owner (or a
superuser) may open; with another role they say so and pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from pgmem import doorbell
from pgmem.errors import PermissionDenied, PgmemError, redact, translate
from pgmem.revision import SCHEMA_REVISION, is_known

__all__ = ["Check", "run_checks"]

#: The oldest server and pgvector pgmem supports (DESIGN.md).
MIN_SERVER = 140000
MIN_PGVECTOR = (0, 5)
#: Share of max_connections in use above which the check warns.
CONNECTIONS_WARN = 0.8
#: Rings waiting in pgmem.doorbell above which the check warns (nobody has listened for a long while).
DOORBELL_WARN = 100_000

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, what was found, and what to do when it is not OK."""

    name: str
    status: Status
    found: str
    advice: str = ""


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def _server(conn: psycopg.Connection[Any]) -> Iterator[Check]:
    row = conn.execute(
        "SELECT current_setting('server_version_num')::int, current_setting('server_version')"
    ).fetchone()
    assert row is not None
    number, text = row
    if number < MIN_SERVER:
        yield Check("server", "fail", f"PostgreSQL {text}", "pgmem needs PostgreSQL 14 or later")
    else:
        yield Check("server", "ok", f"PostgreSQL {text}")
    installed = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    available = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    if installed is not None:
        ok = _version(installed[0]) >= MIN_PGVECTOR
        yield Check(
            "pgvector",
            "ok" if ok else "fail",
            f"{installed[0]} installed",
            "" if ok else "pgmem needs pgvector 0.5 or later: ALTER EXTENSION vector UPDATE",
        )
    elif available is not None:
        yield Check("pgvector", "warn", f"{available[0]} available, not installed", "pgmem migrate installs it")
    else:
        yield Check(
            "pgvector",
            "fail",
            "not available on the server",
            "install pgvector on the server (https://github.com/pgvector/pgvector#installation), or run without "
            "PGMEM_DSN to use the embedded server, which has it",
        )


def _schema(conn: psycopg.Connection[Any]) -> Iterator[Check]:
    if conn.execute("SELECT to_regclass('pgmem.alembic_version')").fetchone() == (None,):
        yield Check("schema", "fail", "not migrated", "run `pgmem migrate` as the tables' owner")
        return
    row = conn.execute("SELECT version_num FROM pgmem.alembic_version").fetchone()
    revision = row[0] if row else None
    if revision == SCHEMA_REVISION:
        yield Check("schema", "ok", f"revision {revision}, as this pgmem needs")
    elif revision is not None and is_known(revision):
        yield Check("schema", "fail", f"revision {revision}, this pgmem needs {SCHEMA_REVISION}", "run `pgmem migrate`")
    else:
        yield Check(
            "schema",
            "fail",
            f"revision {revision}, newer than this pgmem knows ({SCHEMA_REVISION})",
            "upgrade pgmem in this environment",
        )


def _roles(conn: psycopg.Connection[Any]) -> Iterator[Check]:
    row = conn.execute(
        "SELECT current_user, r.rolsuper OR r.rolbypassrls, to_regrole('pgmem_app') IS NOT NULL,"
        " coalesce((SELECT relforcerowsecurity FROM pg_class WHERE oid = to_regclass('pgmem.messages')), false)"
        " FROM pg_roles AS r WHERE r.rolname = current_user"
    ).fetchone()
    assert row is not None
    user, bypasses, has_group, forced = row
    if not has_group:
        yield Check(
            "app role",
            "fail",
            "role pgmem_app is missing",
            "run `pgmem roles create --name <agents>` as a superuser or a role with CREATEROLE",
        )
    elif not forced:
        yield Check("app role", "fail", "row-level security is not forced on pgmem.messages", "run `pgmem migrate`")
    else:
        note = (
            f"{user} bypasses row-level security: clients act as pgmem_app (SET ROLE)"
            if bypasses
            else f"{user} is held by row-level security"
        )
        yield Check("app role", "ok", f"pgmem_app exists, row-level security forced; {note}")
        yield from _drift(conn)


#: What pgmem_app may do on each table of schema pgmem (migrations 0004, 0012): read and write, but only
#: read and insert the shared model registry and the doorbell, only read alembic's bookkeeping.
_APP_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
_NARROWED = {
    "embedding_models": ("SELECT", "INSERT"),
    "doorbell": ("SELECT", "INSERT"),
    "alembic_version": ("SELECT",),
}
# Per table of schema pgmem: whether it has a namespace column, RLS enabled, forced, its policies, and
# pgmem_app's privileges; per view, whether it runs with the caller's rights.
_TABLES = """
SELECT c.relname,
       EXISTS (SELECT 1 FROM pg_attribute AS a WHERE a.attrelid = c.oid AND a.attname = 'namespace'
                                                  AND NOT a.attisdropped),
       c.relrowsecurity, c.relforcerowsecurity,
       array(SELECT p.polname::text FROM pg_policy AS p WHERE p.polrelid = c.oid ORDER BY 1),
       array(SELECT x FROM unnest(%(privileges)s::text[]) AS x
             WHERE has_table_privilege('pgmem_app', c.oid, x) ORDER BY 1)
FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')
ORDER BY 1"""
_VIEWS = """
SELECT c.relname FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'v'
  AND NOT coalesce('security_invoker=true' = ANY(c.reloptions), false)
ORDER BY 1"""


def _drift(conn: psycopg.Connection[Any]) -> Iterator[Check]:
    """The live catalog against what the schema's revision declares for tenants' isolation: a stamp can say
    a revision whose work never ran (a database stamped while a migration was a placeholder)."""
    wrong: list[str] = []
    for table, namespaced, enabled, forced, policies, granted in conn.execute(
        _TABLES, {"privileges": list(_APP_PRIVILEGES)}
    ):
        if namespaced:
            if not (enabled and forced):
                wrong.append(f"{table}: row-level security not {'forced' if enabled else 'enabled'}")
            for policy in sorted({"pgmem_namespace", "pgmem_admin"} - set(policies)):
                wrong.append(f"{table}: policy {policy} missing")
        expected = sorted(_NARROWED.get(table, _APP_PRIVILEGES))
        if sorted(granted) != expected:
            wrong.append(f"{table}: pgmem_app may {', '.join(sorted(granted)) or 'nothing'}, not {', '.join(expected)}")
    if conn.execute("SELECT current_setting('server_version_num')::int >= 150000").fetchone() == (True,):
        wrong += [f"view {view}: not security_invoker" for (view,) in conn.execute(_VIEWS)]
    if wrong:
        shown = "; ".join(wrong[:8]) + (f"; and {len(wrong) - 8} more" if len(wrong) > 8 else "")
        yield Check(
            "isolation",
            "fail",
            f"{len(wrong)} difference(s) from the revision's schema: {shown}",
            "the schema does not match its revision: run `pgmem migrate` as the owner; if it says the schema is "
            "current, the revision's stamp is wrong: migrate a new database and copy the data over",
        )
    else:
        yield Check(
            "isolation", "ok", "every namespaced table forces row-level security with both policies; grants as declared"
        )


def _filters(conn: psycopg.Connection[Any]) -> Iterator[Check]:
    """Whether metadata filters (and the item store's) get their index under row-level security: migration
    0016 declares containment leakproof and builds the indexes only as a superuser."""
    row = conn.execute(
        "SELECT coalesce((SELECT proleakproof FROM pg_proc"
        " WHERE oid = to_regprocedure('pgmem.jsonb_contains(jsonb,jsonb)')), false),"
        " to_regclass('pgmem.messages_metadata_idx') IS NOT NULL"
    ).fetchone()
    if row == (True, True):
        yield Check("metadata filters", "ok", "equalities use the GIN index under row-level security")
    else:
        yield Check(
            "metadata filters",
            "warn",
            "no index serves metadata filters (migrated by a role that is not a superuser): each candidate is tested",
            "run `pgmem migrate` once as a superuser: it declares the containment leakproof and builds the indexes",
        )


def _settings(conn: psycopg.Connection[Any]) -> Iterator[Check]:
    row = conn.execute(
        "SELECT current_setting('max_connections')::int, (SELECT count(*) FROM pg_stat_activity),"
        " current_setting('autovacuum')"
    ).fetchone()
    assert row is not None
    limit, used, autovacuum = row
    share = used / limit if limit else 1.0
    yield Check(
        "connections",
        "warn" if share > CONNECTIONS_WARN else "ok",
        f"{used} of max_connections {limit} in use",
        "each agent process takes one or two (pgmem.connect(max_size=2)): raise max_connections"
        if share > CONNECTIONS_WARN
        else "",
    )
    yield Check(
        "autovacuum",
        "ok" if autovacuum == "on" else "warn",
        f"autovacuum {autovacuum}",
        "" if autovacuum == "on" else "queues and the doorbell delete rows all day: turn autovacuum on",
    )


def _backlogs(conn: psycopg.Connection[Any]) -> Iterator[Check]:
    from pgmem.security import admin_transaction

    try:
        with admin_transaction(conn):
            row = conn.execute(
                "SELECT (SELECT count(*) FROM pgmem.embedding_outbox), (SELECT count(*) FROM pgmem.doorbell),"
                " EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
                "         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                "         AND (classid::bigint << 32 | objid::bigint) = %s)",
                (doorbell.LOCK_KEY,),
            ).fetchone()
    except PermissionDenied:
        note = "not counted: that takes the tables' owner's DSN"
        yield Check("embeddings", "ok", note)
        yield Check("doorbell", "ok", note)
        return
    assert row is not None
    pending, rings, ringing = row
    yield Check("embeddings", "ok", f"{pending} queued for embedding" + ("" if pending else " (none)"))
    if ringing:
        yield Check("doorbell", "ok", f"a process rings it; {rings} rings waiting")
    else:
        warn = rings > DOORBELL_WARN
        yield Check(
            "doorbell",
            "warn" if warn else "ok",
            f"nobody rings it (no process listens); {rings} rings waiting for the first listener",
            "they are announced and deleted when a consumer waits or a cache starts" if warn else "",
        )


def _embedder() -> Check:
    from pgmem.embeddings import default_embedder

    try:
        embedder = default_embedder()
        started = time.perf_counter()
        embedder.embed(["pgmem doctor"])
        took = (time.perf_counter() - started) * 1000
    except Exception as exc:  # noqa: BLE001 - whatever the provider raised is the finding
        return Check(
            "embedder",
            "fail",
            f"{type(exc).__name__}: {redact(str(exc))}",
            "check PGMEM_EMBEDDER and the provider's key and address (OPENAI_API_KEY, OPENAI_BASE_URL)",
        )
    return Check("embedder", "ok", f"{embedder.model} ({embedder.dimension} dimensions) answered in {took:.0f} ms")


def run_checks(dsn: str, *, embedder: bool = True) -> list[Check]:
    """Every check against the server of ``dsn`` (and the configured embedder unless ``embedder`` is False)."""
    checks: list[Check] = []
    try:
        with translate():
            conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    except PgmemError as exc:
        checks.append(
            Check("connection", "fail", f"{type(exc).__name__}: {redact(str(exc))}", "check the DSN and the server")
        )
    else:
        with conn:
            checks.append(Check("connection", "ok", redact(dsn)))
            steps: list[Callable[[psycopg.Connection[Any]], Iterator[Check]]] = [_server, _schema]
            for step in steps:
                checks.extend(step(conn))
            if all(c.status != "fail" for c in checks):  # the rest reads pgmem's tables
                for step in (_roles, _filters, _settings, _backlogs):
                    checks.extend(step(conn))
    if embedder:
        checks.append(_embedder())
    return checks
