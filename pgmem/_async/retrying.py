"""The repositories' choke point under a deadline, with one retry when the connection is lost and running
the statement again is harmless (:mod:`pgmem.resilience`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from psycopg import AsyncConnection

from pgmem.errors import CommitUnknown, ConnectionFailed, Timeout
from pgmem.resilience import connection_lost, deadline, reads_only, verified

if TYPE_CHECKING:
    from pgmem._async.base import AsyncRepository

__all__ = ["IDEMPOTENCY_PARAM", "resilient"]

F = TypeVar("F", bound=Callable[..., Any])

#: A write whose parameters carry this one (not None) may run twice: its statement records the key with a
#: unique constraint and does nothing the second time (queues.push).
IDEMPOTENCY_PARAM = "idempotency_key"


def resilient(rows: F) -> F:
    """Wrap ``AsyncRepository._rows``: the call runs under the client's deadline; when its connection is
    lost (terminated, server restarted) a read, or a write with an idempotency key, runs once more on a
    fresh connection (the pool's idle check drops the dead ones). Not inside the caller's transaction
    (``connection=``, or a client built on one connection): that transaction is gone, only the caller
    can run it again."""

    @functools.wraps(rows)
    async def run(
        self: AsyncRepository, name: str, params: dict[str, Any], connection: AsyncConnection[Any] | None
    ) -> Any:
        client = self._client
        reads = reads_only(self.queries[name])
        harmless = reads or params.get(IDEMPOTENCY_PARAM) is not None
        with deadline(client.timeout):
            try:
                return await rows(self, name, params, connection)
            except Timeout as exc:
                exc.may_have_committed = not reads
                raise
            except ConnectionFailed as exc:
                if not connection_lost(exc):
                    raise
                callers = connection is not None or not client.owns_transactions
                if not harmless:
                    if connection is not None and not connection.autocommit:
                        raise  # the caller's transaction died with the connection: nothing committed
                    raise CommitUnknown(
                        f"the connection was lost while writing ({exc}); the write may have committed"
                    ) from exc
                if callers:
                    raise
            with verified():  # on a connection checked with a round trip (the idle check may not see it yet)
                return await rows(self, name, params, connection)

    return cast(F, run)
