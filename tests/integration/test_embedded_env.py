"""The embedded server whatever libpq variables the user's shell has set.

libpq fills every parameter a DSN leaves out from the environment: a user whose shell points PGPORT,
PGHOST, PGSSLMODE or PGOPTIONS at their own servers must still get the embedded server when no DSN is
configured. Each case runs ``pgmem.connect()`` in a fresh process with one variable set, against one
embedded server started by the first under ``PGPORT`` set to a free port, so that it listens there and
not on the default port a DSN without one would name.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CODE = """
import pgmem
with pgmem.connect(namespace="env", max_size=1) as c:
    c.messages.add("m", pgmem.Message(content="hello"))
    print(c.messages.count("m"))
"""

#: A variable each, set to what would send a DSN that leaves it out elsewhere, or fail on a local socket.
CASES = {
    "PGPORT": "5499",
    "PGHOST": "127.0.0.9",
    "PGHOSTADDR": "127.0.0.9",
    "PGUSER": "nobody",
    "PGDATABASE": "nope",
    "PGPASSWORD": "not-needed",
    "PGSSLMODE": "require",
    "PGGSSENCMODE": "require",
    "PGOPTIONS": "-c statement_timeout=1",
    "PGTARGETSESSIONATTRS": "standby",
    "PGCHANNELBINDING": "require",
    "PGREQUIREAUTH": "password",
    "PGSSLCERTMODE": "require",
    "PGSSLNEGOTIATION": "direct",
}


def _run(home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PG") or k == "PGMEM_HOME"}
    clean.pop("PGMEM_DSN", None)
    return subprocess.run(
        [sys.executable, "-c", CODE],
        capture_output=True,
        text=True,
        env={**clean, "PGMEM_HOME": str(home), **env},
        timeout=300,
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.environ.get("PGMEM_TEST_DSN"):
        pytest.skip("runs the embedded server; PGMEM_TEST_DSN names another")
    home = tmp_path_factory.mktemp("embedded-env")
    with socket.socket() as probe:  # the server also listens on 127.0.0.1: a port nobody holds
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    started = _run(home, PGPORT=port)  # the server starts listening where the shell said
    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == ["1"]
    from pgmem.ops import server

    assert (server.pgdata_dir(home) / "postmaster.pid").read_text().splitlines()[3] == port
    try:
        yield home
    finally:
        from pgmem.ops import server

        server.stop(home)


@pytest.mark.parametrize("variable", sorted(CASES))
def test_the_embedded_server_ignores_libpq_variables(home: Path, variable: str) -> None:
    result = _run(home, **{variable: CASES[variable]})
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) >= 2


def test_a_service_the_user_defined_does_not_redirect_it(home: Path, tmp_path: Path) -> None:
    services = tmp_path / "pg_service.conf"
    services.write_text("[theirs]\nhost=127.0.0.9\nport=1\nuser=nobody\ndbname=nope\nsslmode=require\n")
    result = _run(home, PGSERVICE="theirs", PGSERVICEFILE=str(services))
    assert result.returncode == 0, result.stderr


def test_a_service_libpq_cannot_find_is_named_in_a_typed_error(home: Path) -> None:
    # No DSN parameter turns PGSERVICE off: every libpq connection of the process fails with it.
    result = _run(home, PGSERVICE="no-such-service")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("pgmem.errors.ConnectionFailed: PGSERVICE='no-such-service'"), last
    assert "unset PGSERVICE" in last


def test_a_home_that_cannot_hold_the_server_is_a_config_error(tmp_path: Path) -> None:
    """A file as PGMEM_HOME (or under it) was a FileExistsError traceback (issue 35, item 5): now a typed
    error naming the file and what to do, from the library and from the command line, before any start."""
    from pgmem.errors import ConfigError
    from pgmem.ops import server
    from tests.integration.test_cli import run_cli

    blocker = tmp_path / "home"
    blocker.write_text("not a folder")
    for home in (blocker, blocker / "below"):
        with pytest.raises(ConfigError, match="is a file, not a folder: point PGMEM_HOME at a writable folder"):
            server.ensure_server(home)
    result = run_cli("stats", env={"PGMEM_HOME": str(blocker), "COLUMNS": "1000"}, check=False)
    assert result.returncode == 1 and "ConfigError" in result.stderr and "Traceback" not in result.stderr
    assert blocker.read_text() == "not a folder"
