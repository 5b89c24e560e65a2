"""The process-wide default client that facades use when given ``client=None``.

It is created on first use from the environment (``PGMEM_DSN``, else the embedded server under
``PGMEM_HOME``; namespace ``PGMEM_NAMESPACE``) and recreated in a child process after ``fork``.
"""

from __future__ import annotations

import atexit
import os
import threading

from pgmem._sync.client import Client, connect
from pgmem.settings import get_settings

_lock = threading.Lock()
_client: Client | None = None
_pid: int | None = None


def get_default_client() -> Client:
    """Return the process-wide client, connecting (and migrating) on first use."""
    global _client, _pid
    with _lock:
        if _client is None or _pid != os.getpid() or _client.closed:
            settings = get_settings()
            _client = connect(settings.dsn, namespace=settings.namespace)
            _pid = os.getpid()
        return _client


def set_default_client(client: Client | None) -> None:
    """Use ``client`` as the process-wide default (``None``: connect from the environment next time)."""
    global _client, _pid
    with _lock:
        _client, _pid = client, (os.getpid() if client is not None else None)


def reset_default_client() -> None:
    """Close the default client if this process opened it; the next use connects again."""
    global _client, _pid
    with _lock:
        if _client is not None and _pid == os.getpid():
            _client.close()
        _client, _pid = None, None


atexit.register(reset_default_client)
