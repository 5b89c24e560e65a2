"""A TCP proxy on 127.0.0.1 that injects network faults between pgmem and a PostgreSQL server.

Modes (``proxy.mode = ...``, for every connection at once, new and open):

- ``pass``: forward bytes both ways.
- ``latency``: forward each chunk ``proxy.latency`` seconds late.
- ``stall``: hold every byte (both ways) while the mode lasts; connections stay open.
- ``blackhole``: like ``stall``, and new connections are accepted but never forwarded (a server that
  vanished behind a firewall).
- ``hold_replies``: forward what the client sends, hold what the server answers (a reply lost after the
  server committed: then :meth:`Proxy.reset`).
- ``reset``: :meth:`Proxy.reset` closes every open connection with a TCP RST (SO_LINGER 0); new ones pass.

``proxy.sent = []`` records what the clients send from then on, one entry per chunk read (what one write
of the client's put on the socket arrives as one chunk on the loopback).

One thread per connection and direction; sockets poll every 20 ms, so a mode change takes effect within
about that. Closing one side closes the other once the proxy reads again (not while stalled).

``upstream`` is a TCP address, or a function that opens a connected socket for each new connection (the
embedded server listens on a unix socket only: :func:`unix_socket_of` finds it in ``postmaster.pid`` at
each connection, so a restarted server is found again; while it is down, new connections are closed).
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["Proxy", "unix_socket_of"]

_TICK = 0.02


def unix_socket_of(pgdata: Path) -> Callable[[], socket.socket]:
    """An ``upstream`` for :class:`Proxy`: a connection to the unix socket of the server running on ``pgdata``
    (its directory and port read from ``postmaster.pid`` each time). Raises OSError while there is none."""

    def connect() -> socket.socket:
        try:
            lines = (pgdata / "postmaster.pid").read_text().splitlines()
            path = f"{lines[4].strip()}/.s.PGSQL.{int(lines[3])}"
        except (IndexError, ValueError) as exc:
            raise OSError(f"no server runs on {pgdata}") from exc
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        except OSError:
            s.close()
            raise
        return s

    return connect


class Proxy:
    def __init__(self, upstream: tuple[str, int] | Callable[[], socket.socket]) -> None:
        self.upstream = upstream
        self.mode = "pass"
        self.latency = 0.0
        self.sent: list[bytes] | None = None  # a list: each chunk the clients send is recorded in it
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._accepter = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._accepter.start()

    def dsn(self, base: dict[str, str | int]) -> dict[str, str | int]:
        """``base`` (conninfo parameters) pointed at the proxy."""
        return {**base, "host": "127.0.0.1", "port": self.port}

    def _accept(self) -> None:
        while not self._closed:
            ready, _, _ = select.select([self._listener], [], [], _TICK)
            if not ready:
                continue
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        while self.mode == "blackhole" and not self._closed:
            time.sleep(_TICK)  # accepted, never answered
        try:
            server = self.upstream() if callable(self.upstream) else socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        for s in (client, server):
            if s.family != socket.AF_UNIX:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._pairs.append((client, server))
        for a, b, replies in ((client, server, False), (server, client, True)):
            threading.Thread(target=self._pump, args=(a, b, replies), daemon=True).start()

    def _holding(self, replies: bool) -> bool:
        return self.mode in ("stall", "blackhole") or (replies and self.mode == "hold_replies")

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while not self._closed:
                if self._holding(replies):
                    time.sleep(_TICK)
                    continue
                ready, _, _ = select.select([src], [], [], _TICK)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                if not replies and self.sent is not None:
                    self.sent.append(data)
                if self.mode == "latency" and self.latency:
                    time.sleep(self.latency)
                while self._holding(replies) and not self._closed:
                    time.sleep(_TICK)  # stalled with the bytes in hand
                dst.sendall(data)
        except (OSError, ValueError):  # ValueError: select on a socket reset() closed
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()

    def reset(self) -> int:
        """Close every open connection with a TCP RST, both sides; return how many."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.close()
        return len(pairs)

    def close(self) -> None:
        self._closed = True
        self.reset()
        self._listener.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
