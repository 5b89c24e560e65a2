"""What the parts of the message repository (:mod:`pgmem._async.messages`) share: its named statements
(``sql/messages.sql``), messages decoded from their rows, and where a read as of a point stops and a
removal starts (a fork's inherited entries copied in, a fork of the memory being taken waited for)."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from pgmem._async.base import AsyncRepository
from pgmem._async.retrying import retry_or_raise
from pgmem.checks import load_json
from pgmem.errors import CommitUnknown, ConnectionFailed, InvalidInput
from pgmem.models import Message
from pgmem.planning import statements as queries
from pgmem.planning.forks import AsOf
from pgmem.planning.rows import decode

__all__ = ["AsyncMessageBase", "Q"]

Q = queries.load("messages")
_loads = load_json


def _positive(value: int, name: str, *, allow_zero: bool = True) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if allow_zero else 1):
        raise InvalidInput(f"{name} must be an integer >= {0 if allow_zero else 1}, got {value!r}")
    return value


class AsyncMessageBase(AsyncRepository):
    """The base of the message repository's parts (its writes, removals and reads)."""

    queries = Q

    async def _messages(
        self, name: str, params: dict[str, Any], connection: AsyncConnection[Any] | None
    ) -> list[Message]:
        return [decode(row) for row in await self._rows(name, params, connection)]

    async def _upto(self, memory: str, as_of: AsOf | None, connection: AsyncConnection[Any] | None) -> int | None:
        """The sequence number a read as of ``as_of`` stops at (None: now): README, "Rewind and branch"."""
        if as_of is None:
            return None
        return await self._client.forks.upto(memory, as_of, connection)

    async def _removal(
        self, name: str, params: dict[str, Any], connection: AsyncConnection[Any] | None, *, to: str | None = None
    ) -> list[tuple[Any, ...]]:
        """The rows of the removal statement ``name`` from ``params["memory"]``, after
        :meth:`AsyncForkRepository.removing <pgmem._async.forks.AsyncForkRepository.removing>` in the same
        transaction: a fork gets what it inherits copied in first (its removal statement then finds every
        entry among its own), and a fork of the memory being taken is seen by the removal statement (its
        messages kept and its entries copied into it), or waits for it. One pipeline: no round trip more
        than the two statements took apart. ``to``: a memory entries move to (``move_oldest``), locked too,
        copied in when it is a fork, its forks that would inherit the moved entries materialised
        (:meth:`AsyncForkRepository.moving <pgmem._async.forks.AsyncForkRepository.moving>`)."""
        forks = self._client.forks
        try:
            async with self._client.executor.transaction(connection, pipeline=True) as block:
                if to is None:
                    await forks.removing(block, params["memory"])
                else:
                    await forks.moving(block, params["memory"], to)
                return await block.rows(self.queries[name], {"ns": self.namespace, **params})
        except CommitUnknown:
            raise
        except ConnectionFailed as exc:  # lost as the rows came, with the Sync that commits: CommitUnknown
            retry_or_raise(exc, connection, self._client.owns_transactions, harmless=False)
            raise
