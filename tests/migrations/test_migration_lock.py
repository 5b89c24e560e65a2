"""The migrations' lock is polled, never waited for in the server, so a client's index build never waits
for a process that waits for the lock.

Seen when the demo's four processes started on a fresh server: one process checked the schema
(``migrate.verify``) and waited in ``pg_advisory_xact_lock`` inside a transaction, holding a snapshot;
another built a model's HNSW index with ``CREATE INDEX CONCURRENTLY``, which waits for every older
snapshot; the lock's holder, replaying a trigger, waited for that build's table lock. Postgres broke the
cycle by failing the schema check, and the demo's role with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg

from pgmem.ops import migrate


def _start(target: Callable[[], object], results: list[object], errors: list[BaseException]) -> threading.Thread:
    def body() -> None:
        try:
            results.append(target())
        except BaseException as exc:  # noqa: BLE001 - reported by the test's assertions
            errors.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_an_index_build_does_not_wait_for_a_schema_check_waiting_for_the_lock(dsn: str) -> None:
    errors: list[BaseException] = []
    verified: list[object] = []
    built: list[object] = []

    def build_index() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE INDEX CONCURRENTLY lock_probe_idx ON pgmem.embeddings (created_at)")

    with psycopg.connect(dsn, autocommit=True) as holder:
        # Held at session level, outside any transaction: the holder itself holds no snapshot.
        holder.execute("SELECT pg_advisory_lock(%s)", (migrate.MIGRATION_LOCK_KEY,))
        checker = _start(lambda: migrate.verify(dsn), verified, errors)
        checker.join(1.0)  # let it reach the lock (ordering only; nothing is timed)
        builder = _start(build_index, built, errors)
        # Liveness, with a deadline no busy machine reaches: the build ends while the lock is still held.
        # Waiting in the server, the check held a snapshot the build waited for until the lock was freed.
        builder.join(240)
        assert not builder.is_alive(), "the index build waited for the process waiting for the lock"
        assert checker.is_alive()  # still waiting: the lock is held
        holder.execute("SELECT pg_advisory_unlock(%s)", (migrate.MIGRATION_LOCK_KEY,))
    checker.join(240)
    assert not checker.is_alive()
    assert errors == []
    assert len(verified) == 1 and len(built) == 1
    with psycopg.connect(dsn) as conn:
        valid = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = 'pgmem.lock_probe_idx'::regclass")
        assert valid.fetchone() == (True,)
