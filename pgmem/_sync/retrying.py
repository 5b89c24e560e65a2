# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The lost-connection policy of the executor (:mod:`pgmem._async.executor`): a call whose connection is
lost runs once more on a fresh connection when running its statements again is harmless
(:mod:`pgmem.resilience`)."""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from pgmem.errors import CommitUnknown, ConnectionFailed
from pgmem.resilience import connection_lost

__all__ = ["IDEMPOTENCY_PARAM", "retry_or_raise"]

#: A write whose parameters carry this one (not None) may run twice: its statement records the key with a
#: unique constraint and does nothing the second time (queues.push).
IDEMPOTENCY_PARAM = "idempotency_key"


def retry_or_raise(
    exc: ConnectionFailed, connection: Connection[Any] | None, owns_transactions: bool, harmless: bool
) -> None:
    """Return when a call that failed with ``exc`` may run once more on a fresh connection (the pool's idle
    check drops the dead ones): its connection was lost (terminated, server restarted), running it again is
    ``harmless`` (a read, or a write with an idempotency key) and it was not in the caller's transaction
    (``connection``, or a client built on one connection: that transaction is gone, only the caller can
    run it again). Else raise: ``exc``, or :class:`CommitUnknown` for a write that may have committed (not
    one in the caller's transaction outside autocommit, which died with the connection uncommitted)."""
    if not connection_lost(exc):
        raise exc
    if not harmless:
        if connection is not None and not connection.autocommit:
            raise exc
        raise CommitUnknown(f"the connection was lost while writing ({exc}); the write may have committed") from exc
    if connection is not None or not owns_transactions:
        raise exc
