"""Errors that say what to do (issue 35, item 5): a server without pgvector, an embedding server that
cannot be reached, a port that never answers. Each is a typed error naming the cause and the fix, within a
bounded time, with no password or API key in it.

Everything is real: pgvector missing is the server's own refusal (``extension_control_path`` pointed at an
empty folder for the migrating session, PostgreSQL 18's setting: ``CREATE EXTENSION vector`` then fails
exactly as on a server where pgvector is not installed); the unreachable embedding server and the silent
PostgreSQL port are sockets on localhost, one that refuses and one that accepts and never says a word.
"""

from __future__ import annotations

import socket
import threading
import time
import traceback
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgmem
from pgmem.embeddings import OpenAIEmbedder
from pgmem.errors import ConnectionFailed, EmbeddingError, PermissionDenied, ServerError
from pgmem.ops import migrate
from tests.integration.test_cli import run_cli

#: Generous for a busy 2-core machine; what they bound took 23 s (an unreachable embedding server), 30 s
#: (a silent port, the client's whole timeout) and 130 s (psycopg's default, `pgmem migrate`).
QUICK = 15.0
CONNECT_BOUND = 25.0


def _shown(exc: BaseException) -> str:
    """Everything a user may see of ``exc``: str, repr and its formatted traceback with every chained one."""
    return f"{exc}\n{exc!r}\n{''.join(traceback.format_exception(exc))}"


# -- a server without pgvector ------------------------------------------------------------------------


@pytest.fixture
def no_pgvector_dsn(empty_dsn: str) -> str:
    """``empty_dsn`` for a session that finds no extension on the server (``extension_control_path``)."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),"
            " EXISTS (SELECT FROM pg_settings WHERE name = 'extension_control_path')"
        ).fetchone()
    if row != (True, True):
        pytest.skip("needs PostgreSQL 18's extension_control_path and a superuser (the embedded server has both)")
    params = conninfo_to_dict(empty_dsn)
    params["options"] = "-c extension_control_path=/nonexistent/pgmem-test"
    return make_conninfo(**params)


def _server_major(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.info.server_version // 10000


def _check_no_pgvector(exc: BaseException, major: int) -> None:
    assert isinstance(exc, ServerError) and exc.sqlstate == "0A000", repr(exc)
    message = str(exc)
    assert 'extension "vector" is not available' in message
    assert "The extension must first be installed on the system where PostgreSQL is running" in message  # HINT
    assert f"postgresql-{major}-pgvector" in message and f"PostgreSQL {major}" in message
    assert "CREATE EXTENSION vector" in message and "PGMEM_DSN unset" in message


def test_migrating_a_server_without_pgvector_says_what_to_install(no_pgvector_dsn: str) -> None:
    major = _server_major(no_pgvector_dsn)
    with pytest.raises(ServerError) as raised:
        migrate.upgrade(no_pgvector_dsn)
    _check_no_pgvector(raised.value, major)
    assert isinstance(raised.value.__cause__, psycopg.errors.FeatureNotSupported)
    with pytest.raises(ServerError) as raised:
        pgmem.connect(no_pgvector_dsn, migrate=True)
    _check_no_pgvector(raised.value, major)
    with psycopg.connect(no_pgvector_dsn) as conn:  # the migration's transaction rolled back: nothing left
        assert conn.execute("SELECT to_regnamespace('pgmem')").fetchone() == (None,)


def test_pgmem_migrate_prints_the_advice_in_one_line(no_pgvector_dsn: str) -> None:
    result = run_cli("migrate", "--dsn", no_pgvector_dsn, env={"PGMEM_DSN": ""}, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stderr.startswith("error: ServerError: pgvector is not")
    text = " ".join(result.stderr.split())  # the console wraps long lines
    assert f"postgresql-{_server_major(no_pgvector_dsn)}-pgvector" in text and "CREATE EXTENSION vector" in text


def test_a_role_that_may_not_create_pgvector_is_told_to_ask_the_dba(admin_dsn: str, empty_dsn: str) -> None:
    """pgvector is not a trusted extension: a role with CREATE on the database but not a superuser gets the
    server's refusal (42501) and what to ask for."""
    role = f"pgmem_noext_{uuid.uuid4().hex[:8]}"
    dbname = conninfo_to_dict(empty_dsn)["dbname"]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        if not conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (True,):
            pytest.skip("needs a superuser to create the role")
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(dbname), sql.Identifier(role)))
    try:
        params = conninfo_to_dict(empty_dsn)
        params["user"] = role
        params.pop("password", None)
        try:
            psycopg.connect(make_conninfo(**params)).close()
        except psycopg.OperationalError:
            pytest.skip("the server asks this new role for a password (no trust authentication)")
        with pytest.raises(PermissionDenied) as raised:
            migrate.upgrade(make_conninfo(**params))
        message = str(raised.value)
        assert raised.value.sqlstate == "42501" and 'extension "vector"' in message
        assert "Must be superuser" in message  # the server's HINT, kept
        assert "ask your DBA to run CREATE EXTENSION vector" in message
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("REVOKE ALL ON DATABASE {} FROM {}").format(sql.Identifier(dbname), sql.Identifier(role))
            )
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


# -- sockets that refuse, and sockets that never answer -------------------------------------------------


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A localhost port where nothing listens: bound (so nobody else takes it) but not listening."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A localhost port that accepts connections and never sends a byte (a hung server, a firewall that
    completes the handshake, another service waiting for its client to speak first)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:  # the accept's timeout: look at stop again
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


# -- an embedding server that cannot be reached -----------------------------------------------------------

API_KEY = "sk-test-S3cretApiKey0123456789"


def _embedder(port: int, **options: float) -> OpenAIEmbedder:
    pytest.importorskip("openai")
    return OpenAIEmbedder("test-embedding", 8, api_key=API_KEY, base_url=f"http://127.0.0.1:{port}/v1", **options)


def _check_unreachable(exc: BaseException, port: int, took: float) -> None:
    assert isinstance(exc, EmbeddingError), repr(exc)
    assert took < QUICK, took
    assert f"http://127.0.0.1:{port}/v1" in str(exc) and "PGMEM_EMBEDDER=hashing" in str(exc)
    assert "S3cretApiKey" not in _shown(exc)


def test_a_search_through_a_refused_embedding_server_fails_at_once(client: pgmem.Client, refused_port: int) -> None:
    embedder = _embedder(refused_port)  # the defaults: 6 retries of rate limits, 60 s timeout
    client.vectors.enable("docs", embedder)
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as raised:
        client.vectors.search("where is the snake game", memory="docs", k=3, embedder=embedder)
    _check_unreachable(raised.value, refused_port, time.monotonic() - started)
    assert "cannot reach the embedding server" in str(raised.value) and "OPENAI_BASE_URL" in str(raised.value)


async def test_an_async_search_through_a_refused_embedding_server_fails_at_once(
    aclient: pgmem.AsyncClient, refused_port: int
) -> None:
    embedder = _embedder(refused_port)
    await aclient.vectors.enable("docs", embedder)
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as raised:
        await aclient.vectors.search("where is the snake game", memory="docs", k=3, embedder=embedder)
    _check_unreachable(raised.value, refused_port, time.monotonic() - started)


def test_a_search_through_a_silent_embedding_server_ends_at_its_timeout(client: pgmem.Client, silent_port: int) -> None:
    embedder = _embedder(silent_port, timeout=2.0)
    client.vectors.enable("docs", embedder)
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as raised:
        client.vectors.search("where is the snake game", memory="docs", k=3, embedder=embedder)
    _check_unreachable(raised.value, silent_port, time.monotonic() - started)
    assert "did not answer within 2 s" in str(raised.value)


# -- a PostgreSQL port that never answers ---------------------------------------------------------------

SECRET = "S3cretPassw0rd-" + uuid.uuid4().hex[:8]


def _check_silent(exc: BaseException, port: int, took: float, seconds: int) -> None:
    assert isinstance(exc, ConnectionFailed), repr(exc)
    assert took < CONNECT_BOUND, took
    message = str(exc)
    assert f"127.0.0.1:{port}" in message and f"nothing answered within {seconds} s" in message
    assert "is a PostgreSQL server listening there?" in message and "connect_timeout" in message
    assert SECRET not in _shown(exc)


# Waits out connect timeouts by design (10 s, and three CLI starts): the slow leg (.ci/run).
@pytest.mark.slow
def test_connecting_to_a_port_that_never_answers_fails_in_ten_seconds(silent_port: int) -> None:
    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as raised:
        pgmem.connect(f"postgresql://agent:{SECRET}@127.0.0.1:{silent_port}/db")  # the default timeout, 30 s
    _check_silent(raised.value, silent_port, time.monotonic() - started, 10)


@pytest.mark.slow  # waits out a connect timeout by design (3 s)
async def test_aconnect_to_a_port_that_never_answers_fails_within_its_timeout(silent_port: int) -> None:
    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as raised:
        await pgmem.aconnect(f"host=127.0.0.1 port={silent_port} user=agent password={SECRET} dbname=db", timeout=3)
    _check_silent(raised.value, silent_port, time.monotonic() - started, 3)


def test_migrating_through_a_port_that_never_answers_is_bounded(silent_port: int) -> None:
    """``pgmem.ops.migrate`` connects on its own (psycopg's default wait: 130 s)."""
    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as raised:
        migrate.upgrade(f"postgresql://agent:{SECRET}@127.0.0.1:{silent_port}/db?connect_timeout=2")
    _check_silent(raised.value, silent_port, time.monotonic() - started, 2)


def test_connecting_to_a_refused_port_says_nothing_listens(refused_port: int) -> None:
    with pytest.raises(ConnectionFailed) as raised:
        pgmem.connect(f"postgresql://agent:{SECRET}@127.0.0.1:{refused_port}/db")
    assert f"127.0.0.1:{refused_port}" in str(raised.value) and "nothing listens there" in str(raised.value)
    assert SECRET not in _shown(raised.value)


# Waits out connect timeouts by design (10 s, and three CLI starts): the slow leg (.ci/run).
@pytest.mark.slow
@pytest.mark.parametrize("command", [("stats",), ("migrate",), ("doctor", "--no-embedder")])
def test_the_cli_says_so_in_one_line(silent_port: int, command: tuple[str, ...]) -> None:
    dsn = f"postgresql://agent:{SECRET}@127.0.0.1:{silent_port}/db"
    started = time.monotonic()
    # PGCONNECT_TIMEOUT is libpq's own setting: pgmem's default (10 s) gives way to it.
    result = run_cli(*command, "--dsn", dsn, env={"PGMEM_DSN": "", "PGCONNECT_TIMEOUT": "2"}, check=False)
    took = time.monotonic() - started
    shown = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in shown and SECRET not in shown, shown
    assert took < CONNECT_BOUND + 10, took  # and the interpreter's start
    text = " ".join(shown.split())  # the console wraps long lines
    assert "ConnectionFailed: " in text and "nothing answered" in text, text
    if command[0] != "doctor":  # doctor's connection line has the driver's reason only (pgmem.ops.doctor)
        assert f"127.0.0.1:{silent_port}" in text and "within 2 s" in text, text
