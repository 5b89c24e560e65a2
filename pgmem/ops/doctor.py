"""``pgmem doctor``: what a deployment needs, checked one line at a time, each OK or what to do.

Read-only: it connects with the DSN it is given (or the embedded server), reads settings and catalogs,
and embeds one short text with the configured embedder. Checks that need to see every namespace (the
embedding backlog, the doorbell's rows) run in an admin transaction, which only the tables' owner (or a
superuser) may open; with another role they say so and pass.

The schema is checked against what its revision declares, one line per category (pgmem.ops.drift). With
the owner's DSN that compares the definitions of functions, triggers and views by replaying sql/'s
declarations in a transaction it rolls back: for that fraction of a second writes to the three tables
with triggers wait, and reads of the views. With another role, their presence is checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import psycopg

from pgmem import doorbell
from pgmem.errors import PermissionDenied, PgmemError, SchemaOutOfDate, redact, translate
from pgmem.revision import SCHEMA_REVISION, is_known

if TYPE_CHECKING:
    from pgmem.ops.drift import Difference

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
    else:
        note = (
            f"{user} bypasses row-level security: clients act as pgmem_app (SET ROLE)"
            if bypasses
            else f"{user} is held by row-level security"
        )
        forced_note = "row-level security forced" if forced else "row-level security NOT forced (see below)"
        yield Check("app role", "ok", f"pgmem_app exists, {forced_note}; {note}")


#: What each category's line says when nothing differs (pgmem.ops.drift.CATEGORIES).
_MATCHES = {
    "tables": "every declared table, as declared",
    "columns": "as declared (types, nullability, defaults)",
    "indexes": "as declared (per-model HNSW indexes aside)",
    "constraints": "as declared",
    "functions": "as sql/ declares them",
    "triggers": "as sql/ declares them",
    "views": "as sql/ declares them, with the caller's rights",
    "row-level security": "enabled and forced on every table keyed by namespace",
    "policies": "pgmem_namespace and pgmem_admin on every table keyed by namespace, and no other permissive one",
    "grants": "pgmem_app may do what the migrations grant, no more",
    "metadata filters": "equalities use the GIN index under row-level security",
    "keyword search": "matches use the GIN index under row-level security",
}
_SHOWN = 10
REPAIR_ADVICE = (
    "run `pgmem migrate --repair` as the tables' owner or a superuser: it brings the schema to its revision and "
    "keeps the data"
)


def _listed(found: list[Difference]) -> str:
    shown = "; ".join(f"{d.subject}: {d.detail}" for d in found[:_SHOWN])
    return shown + (f"; and {len(found) - _SHOWN} more (`pgmem migrate` lists them all)" if len(found) > _SHOWN else "")


def _schema_objects(dsn: str) -> Iterator[Check]:
    """One line per category of pgmem.ops.drift: the live catalog against what the revision declares (a
    stamp can say a revision whose work never ran: a database stamped while a migration was a placeholder)."""
    from pgmem.ops.drift import CATEGORIES
    from pgmem.ops.migrate import verify

    try:
        found = verify(dsn)
    except PgmemError as exc:
        yield Check("schema objects", "fail", f"not compared: {type(exc).__name__}: {redact(str(exc))}")
        return
    drift, warnings = found.grouped("drift"), found.grouped("warning")
    partly = "; ".join(found.notes)
    for category in CATEGORIES:
        if category in drift:
            differences = drift[category] + warnings.get(category, [])
            by_hand = [d for d in drift[category] if d.fix is None]
            advice = REPAIR_ADVICE if len(by_hand) < len(drift[category]) else ""
            if by_hand:
                advice += ("; " if advice else "") + f"{len(by_hand)} it does not repair: change by hand as each says"
            found_ = f"{len(drift[category])} difference(s) from the revision's schema: {_listed(differences)}"
            yield Check(category, "fail", found_, advice)
        elif category in warnings:
            yield Check(category, "warn", _listed(warnings[category]))
        else:
            note = f" ({partly})" if partly and category in ("functions", "triggers", "views") else ""
            yield Check(category, "ok", _MATCHES[category] + note)


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
    except SchemaOutOfDate as exc:  # a table missing: the tables' line says which
        for name in ("embeddings", "doorbell"):
            yield Check(name, "fail", f"not counted: {redact(str(exc))}", "run `pgmem migrate --repair`")
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
                checks.extend(_roles(conn))
                checks.extend(_schema_objects(dsn))
                for step in (_settings, _backlogs):
                    checks.extend(step(conn))
    if embedder:
        checks.append(_embedder())
    return checks
