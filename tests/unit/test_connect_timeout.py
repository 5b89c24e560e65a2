"""Which connect_timeout a connection gets: the DSN's, else libpq's PGCONNECT_TIMEOUT, else the client's.

An explicit ``connect_timeout`` keyword overrides libpq's environment variable, so the pool's connections
once waited the client's whole timeout (30 s) on a port that never answers whatever PGCONNECT_TIMEOUT said,
while the error said "within 2 s".
"""

from __future__ import annotations

import pytest

from pgmem._async.pooling import _connect_timeout
from pgmem.resilience import with_connect_timeout


def test_the_client_timeout_applies_where_nothing_else_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    assert _connect_timeout("host=db dbname=x", 30.0) == {"connect_timeout": 30}
    assert _connect_timeout("host=db dbname=x", 0.5) == {"connect_timeout": 2}  # libpq counts less as 2
    assert _connect_timeout("host=db dbname=x", None) == {}
    assert "connect_timeout=10" in with_connect_timeout("host=db dbname=x", 30.0)


def test_the_dsn_and_pgconnect_timeout_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    assert _connect_timeout("host=db dbname=x connect_timeout=3", 30.0) == {}
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "2")
    assert _connect_timeout("host=db dbname=x", 30.0) == {}
    assert with_connect_timeout("host=db dbname=x", 30.0) == "host=db dbname=x"
