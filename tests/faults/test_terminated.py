"""Every application connection terminated (``pg_terminate_backend``) every 2 s while calls run.

Target (issue 20): 0 failed idempotent calls (reads, pushes with an idempotency key) after one retry; the
pool back to its size afterwards; keyed pushes made exactly one item each. 20 s in the default run, a
minute under the ``fullsize`` marker (``.ci/run`` runs it).
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgmem
from tests.faults.conftest import PrivateServer

INTERVAL = 2.0
CALLERS = 3


def _terminate_every(dsn: str, app: str, stop: threading.Event, terminated: list[int]) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        while not stop.wait(INTERVAL):
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,)
            ).fetchall()
            terminated.append(sum(1 for (ok,) in rows if ok))


def _run(server: PrivateServer, namespace: str, seconds: float) -> None:
    app = f"pgmem-{namespace}"
    dsn = make_conninfo(server.dsn, application_name=app)
    with pgmem.connect(dsn, namespace=namespace, migrate=False, timeout=5, min_size=2, max_size=4) as client:
        client.messages.add("m", pgmem.Message(content="seed"))
        stop, terminated = threading.Event(), []
        calls, failures, pushed = [0] * CALLERS, [], [set() for _ in range(CALLERS)]

        def caller(i: int) -> None:
            while not stop.is_set():
                try:
                    assert client.messages.count("m") == 1
                    assert len(client.messages.last("m", 1)) == 1
                    key = str(uuid.uuid4())
                    client.queues.push("q", pgmem.Message(content=key), idempotency_key=key)
                    pushed[i].add(key)
                    client.queues.depth("q")
                    calls[i] += 4
                except Exception as exc:  # noqa: BLE001 - counted: the target is none
                    failures.append(repr(exc))

        killer = threading.Thread(target=_terminate_every, args=(server.dsn, app, stop, terminated))
        callers = [threading.Thread(target=caller, args=(i,)) for i in range(CALLERS)]
        for t in [killer, *callers]:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in [killer, *callers]:
            t.join(30)
        print(
            f"\n{seconds:.0f} s: {len(terminated)} rounds terminated {sum(terminated)} connections; "
            f"{sum(calls)} idempotent calls, {len(failures)} failed"
        )
        assert sum(terminated) >= len(terminated) > 0
        assert failures == []
        # Keyed pushes: one item each, none lost, none doubled.
        with psycopg.connect(server.dsn) as conn:
            row = conn.execute(
                "SELECT count(*), count(DISTINCT m.content) FROM pgmem.queue_items AS q "
                "JOIN pgmem.messages AS m ON m.namespace = q.namespace AND m.id = q.message_id "
                "WHERE q.namespace = %s",
                (namespace,),
            ).fetchone()
        assert row == (sum(map(len, pushed)), sum(map(len, pushed)))
        # The pool is back to its size, with working connections.
        pool = client._pool
        assert pool is not None
        give_up = time.monotonic() + 5
        while pool.get_stats()["pool_size"] < 2 and time.monotonic() < give_up:
            time.sleep(0.05)
        assert pool.get_stats()["pool_size"] >= 2
        assert client.messages.count("m") == 1


@pytest.mark.slow
def test_terminated_connections(private_server: PrivateServer, namespace: str) -> None:
    _run(private_server, namespace, 20)


@pytest.mark.fullsize
def test_terminated_connections_for_a_minute(private_server: PrivateServer, namespace: str) -> None:
    _run(private_server, namespace, 60)
