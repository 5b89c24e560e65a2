"""Apply alembic migrations under an advisory lock, and check the schema revision at connect time."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from pgmem.errors import (
    SchemaDrift,
    SchemaOutOfDate,
    SchemaTooNew,
    ServerError,
    connection_failed,
    missing_pgvector,
    translate,
)
from pgmem.planning.resources import resource_path
from pgmem.resilience import with_connect_timeout
from pgmem.revision import is_known, too_new_message

if TYPE_CHECKING:
    from pgmem.ops.drift import Difference, Verification

#: pg_advisory_xact_lock key taken by every migration run ("pgmem" in ASCII).
MIGRATION_LOCK_KEY = 0x70676D656D


def engine_for(dsn: str | None) -> Engine:
    """A SQLAlchemy engine over psycopg 3 for ``dsn`` (any libpq DSN: URL or key=value). Connecting is
    bounded (:func:`pgmem.resilience.with_connect_timeout`: psycopg's own default is 130 s) and fails with
    :class:`~pgmem.errors.ConnectionFailed` naming the host and port and what to check."""
    from pgmem.ops.server import default_dsn

    resolved = with_connect_timeout(dsn or default_dsn())

    def connect() -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(resolved)
        except psycopg.OperationalError as exc:
            # from None: psycopg's error may quote the DSN; the message keeps its reason, redacted.
            raise connection_failed(resolved, exc) from None

    return create_engine("postgresql+psycopg://", creator=connect, poolclass=NullPool)


def alembic_config(dsn: str | None = None) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(resource_path("migrations")))
    cfg.set_main_option("version_table_schema", "pgmem")
    if dsn:
        cfg.set_main_option("sqlalchemy.url", dsn.replace("%", "%%"))
    return cfg


def _current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None: not migrated), read without alembic's script directory."""
    with engine.connect() as connection:
        found = connection.exec_driver_sql("SELECT to_regclass('pgmem.alembic_version') IS NOT NULL").scalar()
        if not found:
            return None
        return connection.exec_driver_sql("SELECT max(version_num) FROM pgmem.alembic_version").scalar()


@functools.cache
def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


@contextlib.contextmanager
def _driver_errors() -> Iterator[None]:
    """pgmem's errors for the driver's, which SQLAlchemy wraps (e.g. ConnectionFailed)."""
    with translate():
        try:
            yield
        except DBAPIError as exc:
            if isinstance(exc.orig, psycopg.Error):
                raise exc.orig from exc
            raise


def upgrade(dsn: str, *, check: bool = True) -> str:
    """Migrate the database at ``dsn`` to the newest revision, then check that its schema is what that
    revision declares; safe to call from many processes at once.

    Args:
        dsn: the database, with a role that owns pgmem's tables (or a superuser).
        check: verify the schema after migrating (:func:`verify`); False leaves it to the caller.

    Raises:
        SchemaTooNew: a newer pgmem migrated the database to a revision this one does not know (the
            message names both); nothing was changed.
        SchemaDrift: the schema differs from what its revision declares (a stamp that lies; the exception
            lists the differences): run ``pgmem migrate --repair``.
        ServerError: pgvector is not installed on the server (the message keeps the server's hint and names
            the package for its PostgreSQL version); nothing was changed.
        ConnectionFailed: the server cannot be reached (host and port, what to check; never the password).
    """
    from alembic import command
    from alembic.util.exc import CommandError

    from pgmem.ops import leakproof

    cfg = alembic_config()
    engine = engine_for(dsn)
    try:
        with _driver_errors():
            try:
                with engine.connect() as connection:
                    cfg.attributes["connection"] = connection
                    command.upgrade(cfg, "head")
                    leakproof.build(connection)  # a superuser's: the leakproof operators' indexes, where missing
                    connection.commit()
            except CommandError:
                # "Can't locate revision identified by '0099'": a newer pgmem's revision, most likely.
                current = _current_revision(engine)
                if current is not None and not is_known(current):
                    raise SchemaTooNew(too_new_message(current)) from None
                raise
    except ServerError as exc:
        # A server without pgvector: the advice names the package of its major version, which only the
        # connection knows (SQLAlchemy read it when it connected).
        version = engine.dialect.server_version_info  # (18, 4)
        major = version[0] if version and isinstance(version[0], int) else None
        cause = exc.__cause__
        if major and isinstance(cause, psycopg.Error) and (named := missing_pgvector(cause, major)):
            named.sqlstate = exc.sqlstate
            raise named from cause
        raise
    finally:
        engine.dispose()
    if check and (drift := verify(dsn).drift):
        raise SchemaDrift(_drift_message(drift), [str(d) for d in drift])
    return head_revision()


def _drift_message(drift: tuple[Difference, ...]) -> str:
    """What :class:`~pgmem.errors.SchemaDrift` says: the differences counted by category, the first few."""
    from pgmem.ops.drift import Verification

    shown = "; ".join(map(str, drift[:5])) + (f"; and {len(drift) - 5} more" if len(drift) > 5 else "")
    return (
        f"the schema differs from what its revision {head_revision()} declares: {Verification(drift).summary()}: "
        f"{shown}. Run `pgmem migrate --repair` as the tables' owner or a superuser: it brings the schema to its "
        "revision and keeps the data"
    )


def _at_head(connection: Connection) -> None:
    """Raise unless the database is at this pgmem's revision: only that revision's declaration is known."""
    revision = None
    if connection.exec_driver_sql("SELECT to_regclass('pgmem.alembic_version') IS NOT NULL").scalar():
        revision = connection.exec_driver_sql("SELECT max(version_num) FROM pgmem.alembic_version").scalar()
    if revision is None:
        raise SchemaOutOfDate("the database is not migrated: run `pgmem migrate`")
    if not is_known(revision):
        raise SchemaTooNew(too_new_message(revision))
    if revision != head_revision():
        raise SchemaOutOfDate(f"the database is at revision {revision}, this pgmem's is {head_revision()}: migrate it")


def take_migration_lock(connection: Connection) -> None:
    """Hold the migrations' lock for the rest of the transaction this begins on ``connection``: no
    migration or repair changes the schema while another migrates, compares or repairs it.

    Polled (``pg_try_advisory_xact_lock``, the transaction ended between tries), never waited for in the
    server: a transaction waiting there holds a snapshot, which a concurrent ``CREATE INDEX CONCURRENTLY``
    (a model's HNSW index, built by a client) waits for, while the lock's holder (a migration's DDL, the
    drift check replaying a trigger) waits for that build: a deadlock, seen when the demo's four processes
    started on a fresh server.
    """
    delay = 0.005
    while not connection.exec_driver_sql(
        "SELECT pg_try_advisory_xact_lock(%(key)s)", {"key": MIGRATION_LOCK_KEY}
    ).scalar():
        connection.rollback()
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def verify(dsn: str) -> Verification:
    """How the schema at ``dsn`` differs from what its revision declares (pgmem.ops.drift): changes nothing.

    Any role may verify; only the tables' owner (or a superuser) gets the definitions of functions,
    triggers and views compared (the others, their presence).

    Raises:
        SchemaOutOfDate: the database is not at this pgmem's revision (``pgmem migrate`` first).
    """
    from pgmem.ops import drift

    engine = engine_for(dsn)
    try:
        with _driver_errors(), engine.connect() as connection:
            take_migration_lock(connection)
            _at_head(connection)
            found = drift.verify(connection)
            connection.rollback()
    finally:
        engine.dispose()
    return found


@dataclass(frozen=True)
class Repaired:
    """What :func:`repair` found before and finds after."""

    before: Verification
    after: Verification

    @property
    def fixed(self) -> tuple[Difference, ...]:
        """The differences it found that are gone."""
        left = set(self.after.differences)
        return tuple(d for d in self.before.differences if d not in left)


def repair(dsn: str) -> Repaired:
    """Bring the schema at ``dsn`` to what its revision declares, in one transaction, keeping the data
    (pgmem.ops.drift.repair); then verify it again. Idempotent.

    Raises:
        SchemaOutOfDate: the database is not at this pgmem's revision (``pgmem migrate`` first).
        PermissionDenied: the role is neither the tables' owner nor a superuser.
    """
    from pgmem.ops import drift, leakproof

    engine = engine_for(dsn)
    try:
        with _driver_errors(), engine.connect() as connection:
            take_migration_lock(connection)
            _at_head(connection)
            before = drift.repair(connection)
            leakproof.build(connection)  # a superuser's: the leakproof operators' indexes, where missing
            connection.commit()
    finally:
        engine.dispose()
    return Repaired(before, verify(dsn))


#: The key of the session advisory lock a model's index build holds: the clients' own
#: (``pgmem._async.embedding_models.MODEL_LOCK_KEY``; operations may not import the core).
MODEL_LOCK_KEY = 0x70676D656D02


def build_model_indexes(dsn: str) -> list[str]:
    """Build the missing HNSW indexes of the registered embedding models, as the tables' owner; return
    their names.

    A client of the application role registers models but may not create their indexes (its searches stay
    exact meanwhile); this builds them. Concurrently (writes go on), one build at a time under the lock the
    clients take, an INVALID one (a failed build) dropped and built again. The item vectors' index of a
    model is built when some item vector uses it.
    """
    from psycopg import sql

    from pgmem.planning import items as item_plan
    from pgmem.planning import statements
    from pgmem.planning.rows import IndexedModelRow
    from pgmem.planning.search import model_of

    q = statements.load("vectors")

    def valid(conn: psycopg.Connection[Any], name: str) -> bool | None:
        row = conn.execute(q["index_valid"], {"index": f"pgmem.{name}"}).fetchone()
        return None if row is None else bool(row[0])

    built: list[str] = []
    with translate(), psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.admin', 'on', true)")  # item_vectors: row-level security
            rows = conn.execute(q["indexed_models"]).fetchall()
        for found in map(IndexedModelRow._make, rows):
            model = model_of(found)  # its distance picks the index's operator class
            wanted = [("embeddings", model.index_name)]
            if found.items:
                wanted.append(("item_vectors", item_plan.index_name(model)))
            for table, name in wanted:
                if valid(conn, name):
                    continue
                while not (conn.execute(q["build_lock"], {"key": MODEL_LOCK_KEY}).fetchone() or (False,))[0]:
                    time.sleep(0.1)
                try:
                    state = valid(conn, name)
                    if state:
                        continue  # a client built it meanwhile
                    if state is False:
                        drop = sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}")
                        conn.execute(drop.format(sql.Identifier("pgmem", name)))
                    conn.execute(model.index_ddl(table, name))
                    built.append(name)
                finally:
                    conn.execute(q["build_unlock"], {"key": MODEL_LOCK_KEY})
    return built


def current_revision(dsn: str) -> str | None:
    """The revision the database at ``dsn`` is at (None: not migrated); changes nothing."""
    engine = engine_for(dsn)
    try:
        with _driver_errors():
            return _current_revision(engine)
    finally:
        engine.dispose()


def sql_script(start: str | None) -> str:
    """The SQL the migrations from ``start`` (a revision; None: an empty database) to the newest would run, as
    a script for a DBA (alembic's offline mode): one transaction, the migrations' lock, the revision stamp.
    Runs nothing and needs no database.

    Raises:
        InvalidInput: ``start`` is not a revision of this pgmem.
        SchemaTooNew: ``start`` is newer than this pgmem's revision.
    """
    import io

    from alembic import command
    from alembic.util.exc import CommandError

    from pgmem.errors import InvalidInput

    if start is not None and start not in _revisions():
        if start.isdigit() and not is_known(start):
            raise SchemaTooNew(too_new_message(start))
        raise InvalidInput(f"--from {start!r}: not a revision of this pgmem (0001 … {head_revision()})")
    buffer = io.StringIO()
    cfg = alembic_config()
    cfg.output_buffer = buffer
    if start == head_revision():
        return f"-- the database is at revision {start}, this pgmem's newest: nothing to run\n"
    try:
        command.upgrade(cfg, f"{start}:head" if start else "head", sql=True)
    except CommandError as exc:
        raise InvalidInput(f"cannot write the migrations' SQL from {start or 'an empty database'}: {exc}") from None
    return buffer.getvalue()


def _revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    return {script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
