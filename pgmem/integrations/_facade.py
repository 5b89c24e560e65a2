"""What every facade stands on: a client, sync or async, and one way for async methods to use either.

A facade (MetaGPT's ``Memory``, OpenManus' ``Memory``, ChatDev's stores, and the framework adapters that
follow) keeps a :class:`pgmem.Client` or a :class:`pgmem.AsyncClient` — ``None`` means the process-wide
default client (:func:`pgmem.connecting.get_default_client`) — and uses only the client's public API.

* A sync facade method calls the sync client; given an async client it raises :class:`pgmem.InvalidInput`
  (:meth:`Facade.sync_client`): a sync call cannot wait on a coroutine of someone else's event loop.
* An async facade method goes through :meth:`Facade.call` (or :func:`call`): with an ``AsyncClient`` the
  operation runs natively on the caller's loop; with a ``Client`` it runs in a worker thread, so the loop
  is never blocked on the database.

Example, an async method of a new facade::

    class Notes(Facade):
        async def aadd(self, text: str) -> None:
            await self.call(lambda c: c.messages.add("notes", pgmem.Message(content=text)))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from pgmem.connecting import get_default_client
from pgmem.errors import InvalidInput

if TYPE_CHECKING:
    from pgmem import AsyncClient, Client

__all__ = ["AnyClient", "Facade", "call", "is_async_client"]

AnyClient: TypeAlias = "Client | AsyncClient"


def is_async_client(client: Any) -> bool:
    """Whether ``client`` is an :class:`pgmem.AsyncClient` (its repositories return coroutines)."""
    from pgmem import AsyncClient

    return isinstance(client, AsyncClient)


async def call(client: AnyClient, op: Callable[[Any], Any]) -> Any:
    """``op(client)``: awaited on this loop for an async client, run in a worker thread for a sync one."""
    if is_async_client(client):
        return await op(client)
    return await asyncio.to_thread(op, client)


class Facade:
    """Base of the facades: the client (given, or the process-wide default one, resolved on use)."""

    def __init__(self, client: AnyClient | None = None) -> None:
        self._client = client

    @property
    def client(self) -> AnyClient:
        """The client this facade works on (the process-wide default when none was given)."""
        return self._client if self._client is not None else get_default_client()

    def sync_client(self) -> Client:
        """The client, which a sync method needs to be a :class:`pgmem.Client`."""
        client = self.client
        if is_async_client(client):
            raise InvalidInput(
                f"{type(self).__name__}'s sync methods need a pgmem.Client, not a pgmem.AsyncClient; "
                "use its async methods or pass a sync client"
            )
        return client  # type: ignore[return-value]

    async def call(self, op: Callable[[Any], Any]) -> Any:
        """Run ``op(client)`` from an async method (see :func:`call`)."""
        return await call(self.client, op)
