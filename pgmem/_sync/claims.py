# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The queue's claim statements: the worker's name, each claiming query rendered with its LIMIT, ids as
a Postgres array's text, and running ``ack_claim`` (acknowledge and claim in one statement) through a lost
lease or a deadlock."""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Iterable
from typing import Any

from psycopg import Connection, sql
from psycopg.pq import TransactionStatus

from pgmem._sync.executor import Block, Executor
from pgmem.errors import LeaseLost, PgmemError
from pgmem.planning import statements as queries

__all__ = ["WORKER", "ack_claim_rows", "claiming", "int_array", "raise_lost"]

Q = queries.load("queues")

WORKER = f"{socket.gethostname()}:{os.getpid()}"
#: SQLSTATE of pgmem.queue_lease_lost (pre-baseline migration 0012): a claim(ack=) statement rolled back.
_LEASE_LOST = "PGM01"
#: deadlock_detected, and how many times claim(ack=) runs its statement again after one.
_DEADLOCK, _DEADLOCK_RETRIES = "40P01", 3


@functools.lru_cache(maxsize=256)
def claiming(name: str, limit: int) -> bytes:
    """The claiming query ``name`` with its LIMIT as a literal (see sql/queues.sql: one plan per
    prepared statement instead of one per claim); ``limit`` is a checked int, rendered by psycopg."""
    return sql.SQL(Q[name]).format(limit=sql.Literal(limit)).as_bytes(None)


def int_array(values: Iterable[int]) -> str:
    """``{1,2,3}``, the text of a Postgres integer array (the SQL casts it). psycopg dumps a str as it is and
    a list element by element, with a dumper looked up for each new cursor: about 40 us per claim, a third
    of the client's time at 10 items per claim."""
    return "{" + ",".join(map(str, values)) + "}"


def raise_lost(held: dict[int, int], acked: Iterable[int]) -> None:
    done = set(acked)
    lost = [i for i in held if i not in done]
    raise LeaseLost(f"lease lost on item(s) {lost}: claimed again after the lease ended, or already acknowledged")


def ack_claim_rows(
    executor: Executor, args: dict[str, Any], connection: Connection[Any] | None, *, pooled: bool
) -> list[tuple[Any, ...]] | None:
    """The rows of ``ack_claim`` (``args``: its parameters, the namespace's included), or None when an
    acknowledgement did not hold: the statement then rolled back. ``pooled``: on a pool's connection, where
    it is a transaction of its own (one statement through the executor, as a claim); elsewhere it runs
    under a savepoint when the connection is in a transaction (the caller's), which that rollback undoes
    while the caller's transaction goes on.

    A deadlock is retried: claiming before acknowledging, the statement holds its new claims while it
    waits for a row it acknowledges, which a consumer that re-claimed it after its lease ran out may
    hold while it waits for one of them. The victim's statement rolled back whole, so it is run again.
    """
    stmt = claiming("ack_claim", args["n"])
    if not pooled:
        return executor.run(lambda block: _ack_claim(block, stmt, args), connection, reads=False)
    for attempt in range(_DEADLOCK_RETRIES + 1):
        try:
            return executor.rows(stmt, args, reads=False)
        except PgmemError as exc:
            if not _again(exc, attempt):
                return None
    raise AssertionError("unreachable")  # pragma: no cover


def _again(exc: PgmemError, attempt: int) -> bool:
    """Whether ``ack_claim`` failing with ``exc`` runs again (a deadlock, a few times), or returns None (a
    lease lost); any other error is raised."""
    if exc.sqlstate == _DEADLOCK and attempt < _DEADLOCK_RETRIES:
        return True
    if exc.sqlstate != _LEASE_LOST:
        raise exc
    return False


def _ack_claim(block: Block, stmt: bytes, args: dict[str, Any]) -> list[tuple[Any, ...]] | None:
    """``ack_claim`` on the block's connection, under a savepoint unless it is a transaction of its own."""
    conn = block.connection
    own = conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
    savepoints = Block(conn)  # no table: no namespace to set
    if not own:
        savepoints.command("SAVEPOINT pgmem_ack_claim")
    for attempt in range(_DEADLOCK_RETRIES + 1):
        try:
            rows = block.rows(stmt, args)
        except PgmemError as exc:
            retry = _again(exc, attempt)
            if not own:
                savepoints.command("ROLLBACK TO SAVEPOINT pgmem_ack_claim")
            if retry:
                continue
            rows = None
        if not own:
            savepoints.command("RELEASE SAVEPOINT pgmem_ack_claim")
        return rows
    raise AssertionError("unreachable")  # pragma: no cover
