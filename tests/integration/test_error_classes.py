"""Errors translated by SQLSTATE class (issue 34, item 3): a full disk, a canceled statement, a lock not
granted, a server fault, a limit of the server and a session the server ended each come out as the type
docs/reliability.md documents, and only a connection that is gone is a ``ConnectionFailed``.

The full disk is a real one: a tmpfs mounted for the test, a tablespace on it, a database whose default
tablespace it is, filled through pgmem's API until the server reports 53100.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import pgmem
from pgmem.errors import ResourceExhausted, ServerError, translate
from pgmem.resilience import connection_lost
from tests.conftest import TEMPLATE, _with_db

# -- each class, on a real server ---------------------------------------------------------------------


def test_statement_canceled_by_the_server_is_a_timeout_and_the_connection_stays(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '50ms'")
        with pytest.raises(pgmem.Timeout) as info, translate():
            conn.execute("SELECT pg_sleep(5)")
        error = info.value
        assert not isinstance(error, pgmem.ConnectionFailed)
        assert error.sqlstate == "57014" and not error.may_have_committed
        assert not connection_lost(error)
        conn.execute("SET statement_timeout = 0")
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection was kept


def test_a_lock_not_granted_is_a_conflict(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as holder, psycopg.connect(dsn, autocommit=True) as other:
        holder.execute("CREATE TABLE public.locked (x int)")
        with holder.transaction():
            holder.execute("LOCK TABLE public.locked IN ACCESS EXCLUSIVE MODE")
            other.execute("SET lock_timeout = '50ms'")
            with pytest.raises(pgmem.Conflict) as info, translate():
                other.execute("SELECT * FROM public.locked")
        assert info.value.sqlstate == "55P03" and not connection_lost(info.value)


def test_a_limit_of_the_server_is_invalid_input(dsn: str) -> None:
    too_many = "SELECT " + ", ".join(["1"] * 1700)  # a constant statement: at most 1664 target entries
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(pgmem.InvalidInput) as info, translate():
            conn.execute(too_many)
        assert info.value.sqlstate == "54011"


def test_a_server_fault_is_a_server_error(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        if not (row and row[0]):
            pytest.skip("pg_read_file needs a superuser")
        with pytest.raises(ServerError) as info, translate():
            conn.execute("SELECT pg_read_file('pgmem-no-such-file-' || gen_random_uuid())")
        error = info.value
        assert error.sqlstate == "58P01" and not isinstance(error, pgmem.ConnectionFailed | ResourceExhausted)
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_terminated_session_is_connection_failed_and_lost(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as victim, psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
        with pytest.raises(pgmem.ConnectionFailed) as info, translate():
            victim.execute("SELECT 1")
        assert connection_lost(info.value)  # reads are run again on another connection


def test_a_session_ended_by_idle_in_transaction_timeout_is_connection_failed(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET idle_in_transaction_session_timeout = '100ms'")
        conn.execute("SELECT 1")  # a transaction is open and idle now
        pid = conn.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as observer:
            give_up = time.monotonic() + 120  # until the server ended the session, however slow the machine
            while time.monotonic() < give_up:
                row = observer.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
                if row is not None and row[0] == 0:
                    break
                time.sleep(0.05)
        with pytest.raises(pgmem.ConnectionFailed), translate():
            conn.execute("SELECT 1")


# -- a full disk ----------------------------------------------------------------------------------------


def _local_data_directory(admin_dsn: str) -> Path:
    """The server's data directory when the server runs on this machine and the test may manage
    mounts; else skip the test, saying why."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem for the full-disk test needs root")
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        if not (row and row[0]):
            pytest.skip("CREATE TABLESPACE needs a superuser")
        data = Path(str(conn.execute("SHOW data_directory").fetchone()[0]))  # type: ignore[index]
        pid_file = data / "postmaster.pid"
        pid = int(pid_file.read_text().split()[0]) if pid_file.is_file() else None
    if pid is None or not Path(f"/proc/{pid}").exists():
        pytest.skip("the test server is not on this machine (PGMEM_TEST_DSN names a remote one)")
    return data


@contextlib.contextmanager
def _small_filesystem(owner: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` MiB owned by ``owner``'s user (the server's); unmounted afterwards."""
    where = Path(tempfile.mkdtemp(prefix="pgmem-full-"))
    stat = owner.stat()
    done = subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={size_mb}m,mode=0700,uid={stat.st_uid},gid={stat.st_gid}",
            "tmpfs",
            where,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        where.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", where], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            where.rmdir()


def _grow(where: Path, size_mb: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_mb}m", where], capture_output=True, check=True)


def _template_mb(admin_dsn: str) -> int:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(%s)", (TEMPLATE,)).fetchone()
    return int(row[0]) // (1 << 20) + 1 if row else 16  # type: ignore[index]


def test_a_full_disk_is_resource_exhausted_and_loses_nothing(
    admin_dsn: str, template_dsn: str, single_database: bool
) -> None:
    """53100 on a healthy connection was ConnectionFailed: callers that retry it until the server comes
    back spun on a full disk. It is ResourceExhausted (not retried by pgmem); once space is freed the next
    call succeeds, and every add that returned is there."""
    if single_database:
        pytest.skip("needs a database of its own (CREATE DATABASE); the suite runs in one database here")
    data = _local_data_directory(admin_dsn)
    name = f"pgmem_full_{uuid.uuid4().hex[:12]}"
    space = f"pgmem_small_{uuid.uuid4().hex[:12]}"
    room = 6  # MiB left for messages once the template's copy is in
    with _small_filesystem(data, _template_mb(admin_dsn) + room) as where:
        location = where / "ts"
        location.mkdir()
        os.chown(location, data.stat().st_uid, data.stat().st_gid)
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            try:
                admin.execute(
                    sql.SQL("CREATE TABLESPACE {} LOCATION {}").format(
                        sql.Identifier(space), sql.Literal(str(location))
                    )
                )
                admin.execute(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {} TABLESPACE {}").format(
                        sql.Identifier(name), sql.Identifier(TEMPLATE), sql.Identifier(space)
                    )
                )
                _fill_until_full(_with_db(admin_dsn, name), where, room)
            finally:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
                admin.execute(sql.SQL("DROP TABLESPACE IF EXISTS {}").format(sql.Identifier(space)))


def _fill_until_full(dsn: str, where: Path, room: int) -> None:
    acknowledged: list[pgmem.Message] = []
    with pgmem.connect(dsn, namespace="full", max_size=2) as client:
        error: pgmem.PgmemError | None = None
        for _ in range(room * 8 + 40):  # 256 KiB a batch: full long before this ends
            batch = [pgmem.Message(content=os.urandom(32 * 1024).hex(), role="filler") for _ in range(4)]
            try:
                client.messages.add_many("m", batch)
            except pgmem.PgmemError as exc:
                error = exc
                break
            acknowledged += batch
        assert error is not None, "the small filesystem never filled up"
        assert isinstance(error, ResourceExhausted), repr(error)
        assert not isinstance(error, pgmem.ConnectionFailed) and not connection_lost(error)
        assert error.sqlstate == "53100" and "No space left" in str(error)
        assert acknowledged, "not one batch fitted"

        _grow(where, room * 4 + 64)  # space freed: the next call succeeds, on the same client
        after = pgmem.Message(content="after the disk was full", role="filler")
        client.messages.add("m", after)
        stored = client.messages.last("m")
        assert [m.id for m in stored] == [m.id for m in [*acknowledged, after]]
        assert [m.content for m in stored] == [m.content for m in [*acknowledged, after]]
