"""A network that stalls, vanishes, lags or resets, between pgmem and its server (tests/faults/proxy.py).

Targets (issue 20, docs/reliability.md): no call outlives its timeout by more than 1 s, sync or async;
``asyncio.wait_for(..., 3)`` returns after about 3 s whatever the client's timeout; a DSN's
``connect_timeout`` is honoured; a timed-out write leaves nothing half written; a push whose reply is lost
after the server committed makes one item when it carries an idempotency key, and raises
``CommitUnknown`` when it does not.

The bounds below are the targets themselves (a second of slack on a timeout of 2), not performance
figures; the measured times are printed (``-s``) and recorded in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgmem
from pgmem.errors import CommitUnknown, ConnectionFailed, Timeout
from tests.faults.conftest import PrivateServer
from tests.faults.proxy import Proxy

SLACK = 1.0

# Stalls, black holes and resets through a proxy, each waiting out a timeout: the slow leg (.ci/run).
pytestmark = pytest.mark.slow


def _dsn(proxy: Proxy, server: PrivateServer, **extra: object) -> str:
    return make_conninfo(**{k: str(v) for k, v in {**proxy.dsn(server.params), **extra}.items()})


@pytest.fixture
def client(proxy: Proxy, private_server: PrivateServer, namespace: str) -> Iterator[pgmem.Client]:
    with pgmem.connect(_dsn(proxy, private_server), namespace=namespace, migrate=False, timeout=2, max_size=2) as c:
        yield c


def _timed(call: object) -> tuple[float, BaseException | None]:
    t0 = time.monotonic()
    try:
        call()  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001 - returned to the test
        return time.monotonic() - t0, exc
    return time.monotonic() - t0, None


@pytest.mark.parametrize("mode", ["stall", "blackhole"])
def test_sync_call_ends_at_its_timeout(client: pgmem.Client, proxy: Proxy, mode: str) -> None:
    assert client.messages.count("m") == 0
    proxy.mode = mode
    elapsed, exc = _timed(lambda: client.messages.count("m"))
    print(f"\nsync {mode}: Timeout after {elapsed:.2f} s (timeout 2 s)")
    assert isinstance(exc, Timeout) and isinstance(exc, TimeoutError) and not exc.may_have_committed
    assert elapsed < 2 + SLACK
    proxy.mode = "pass"
    assert client.messages.count("m") == 0  # the pool replaced the connection it closed


def test_per_call_timeout(client: pgmem.Client, proxy: Proxy) -> None:
    client.messages.count("m")
    proxy.mode = "stall"
    elapsed, exc = _timed(lambda: client.with_timeout(0.5).messages.count("m"))
    print(f"\nwith_timeout(0.5): Timeout after {elapsed:.2f} s")
    assert isinstance(exc, Timeout)
    assert elapsed < 0.5 + SLACK


@pytest.mark.parametrize("mode", ["stall", "blackhole"])
async def test_async_call_ends_at_its_timeout(
    proxy: Proxy, private_server: PrivateServer, namespace: str, mode: str
) -> None:
    async with await pgmem.aconnect(
        _dsn(proxy, private_server), namespace=namespace, migrate=False, timeout=2, max_size=2
    ) as client:
        await client.messages.count("m")
        proxy.mode = mode
        t0 = time.monotonic()
        with pytest.raises(Timeout):
            await client.messages.count("m")
        elapsed = time.monotonic() - t0
        print(f"\nasync {mode}: Timeout after {elapsed:.2f} s (timeout 2 s)")
        assert elapsed < 2 + SLACK
        proxy.mode = "pass"
        assert await client.messages.count("m") == 0


async def test_wait_for_returns_at_its_own_limit(proxy: Proxy, private_server: PrivateServer, namespace: str) -> None:
    """The client's timeout is 30 s; the caller's ``asyncio.wait_for(..., 3)`` wins (psycopg's cancel
    would wait on the stalled network for up to 10 s more: the pool connection is closed instead)."""
    async with await pgmem.aconnect(
        _dsn(proxy, private_server), namespace=namespace, migrate=False, max_size=2
    ) as client:
        await client.messages.count("m")
        proxy.mode = "stall"
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.messages.count("m"), 3)
        elapsed = time.monotonic() - t0
        print(f"\nasyncio.wait_for(..., 3): returned after {elapsed:.2f} s")
        assert elapsed < 3 + SLACK
        proxy.mode = "pass"
        assert await client.messages.count("m") == 0


def test_connecting_into_a_black_hole(proxy: Proxy, private_server: PrivateServer, namespace: str) -> None:
    proxy.mode = "blackhole"
    # The client's timeout bounds connecting (libpq counts whole seconds, at least 2)...
    elapsed, exc = _timed(lambda: pgmem.connect(_dsn(proxy, private_server), namespace=namespace, timeout=2))
    print(f"\nconnect(timeout=2) into a black hole: {type(exc).__name__} after {elapsed:.2f} s")
    assert isinstance(exc, ConnectionFailed)
    assert elapsed < 2 + SLACK
    # ...and a DSN's own connect_timeout wins over it (it was overridden by a hard-coded 10 s).
    dsn = _dsn(proxy, private_server, connect_timeout=2)
    elapsed, exc = _timed(lambda: pgmem.connect(dsn, namespace=namespace, timeout=30))
    print(f"connect_timeout=2 in the DSN, timeout=30: {type(exc).__name__} after {elapsed:.2f} s")
    assert isinstance(exc, ConnectionFailed)
    assert elapsed < 2 + SLACK


def test_latency_within_the_timeout_is_no_error(client: pgmem.Client, proxy: Proxy) -> None:
    proxy.mode, proxy.latency = "latency", 0.3
    elapsed, exc = _timed(lambda: client.messages.add("m", pgmem.Message(content="slow")))
    print(f"\n0.3 s per chunk: an add took {elapsed:.2f} s")
    assert exc is None
    assert client.messages.count("m") == 1


def test_reset_connections_are_replaced(client: pgmem.Client, proxy: Proxy) -> None:
    client.messages.count("m")
    assert proxy.reset() >= 1
    assert client.messages.count("m") == 0  # the dead idle connection is dropped, not handed out


def _in_flight(proxy: Proxy, mode: str, call: object) -> BaseException | None:
    """Run ``call`` while the proxy holds bytes (``mode``), reset the connection under it, let it finish."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()  # type: ignore[operator]
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            outcome.append(exc)

    proxy.mode = mode
    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.5)  # the statement is sent (hold_replies: and committed), its reply held
    proxy.reset()
    proxy.mode = "pass"
    worker.join(10)
    assert outcome, "the call did not return"
    return outcome[0]


def _items(server: PrivateServer, namespace: str) -> int:
    with psycopg.connect(server.dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgmem.queue_items WHERE namespace = %s", (namespace,)).fetchone()
        assert row is not None
        return int(row[0])


def test_ambiguous_commit_without_a_key_is_commit_unknown(
    client: pgmem.Client, proxy: Proxy, private_server: PrivateServer, namespace: str
) -> None:
    client.queues.depth("q")
    exc = _in_flight(proxy, "hold_replies", lambda: client.queues.push("q", pgmem.Message(content="once")))
    assert isinstance(exc, CommitUnknown), exc
    assert _items(private_server, namespace) == 1  # it had committed: pushing again would make two


def test_ambiguous_commit_with_a_key_makes_one_item(
    client: pgmem.Client, proxy: Proxy, private_server: PrivateServer, namespace: str
) -> None:
    client.queues.depth("q")
    key = str(uuid.uuid4())
    message = pgmem.Message(content="once")
    pushed: list[pgmem.PushResult] = []
    exc = _in_flight(
        proxy, "hold_replies", lambda: pushed.append(client.queues.push("q", message, idempotency_key=key))
    )
    assert exc is None, exc  # pgmem sent it again on a fresh connection
    assert _items(private_server, namespace) == 1
    # The caller's own retry is as harmless, and answers with the first push's item.
    again = client.queues.push("q", message, idempotency_key=key)
    assert again.id == pushed[0].id
    assert _items(private_server, namespace) == 1


def test_lost_before_sending_a_keyed_push_is_retried(
    client: pgmem.Client, proxy: Proxy, private_server: PrivateServer, namespace: str
) -> None:
    client.queues.depth("q")
    exc = _in_flight(
        proxy, "stall", lambda: client.queues.push("q", pgmem.Message(content="x"), idempotency_key="k-stall")
    )
    assert exc is None, exc
    assert _items(private_server, namespace) == 1


def test_timed_out_transaction_leaves_nothing(
    client: pgmem.Client, proxy: Proxy, private_server: PrivateServer, namespace: str
) -> None:
    """Two writes in one transaction; the network stalls before the second: Timeout, and no row at all once
    the server sees the connection go (the transaction is rolled back, not half committed)."""
    client.messages.count("m")
    with pytest.raises(Timeout) as raised:
        with client.transaction() as conn:
            client.messages.add("m", pgmem.Message(content="first"), connection=conn)
            proxy.mode = "stall"
            client.messages.add("m", pgmem.Message(content="second"), connection=conn)
    print(f"\n{raised.value!r}")
    proxy.mode = "pass"
    with psycopg.connect(private_server.dsn, autocommit=True) as admin:
        for _ in range(200):  # the proxy closes the server's side once it reads again
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = 'pgmem' AND state LIKE 'idle in transaction%'"
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.05)
    with psycopg.connect(private_server.dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgmem.messages WHERE namespace = %s", (namespace,)).fetchone()
        assert row is not None and row[0] == 0
