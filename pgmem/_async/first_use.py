"""The client's repositories built on first use (:class:`pgmem.AsyncClient`): the descriptor that builds
one, and how each is built, its module imported only then."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar, overload

if TYPE_CHECKING:
    from pgmem._async.brains import AsyncBrainRepository
    from pgmem._async.client import AsyncClient
    from pgmem._async.context import AsyncContextBuilder
    from pgmem._async.forks import AsyncForkRepository
    from pgmem._async.items import AsyncItemRepository
    from pgmem._async.queues import AsyncQueueRepository
    from pgmem._async.retention import AsyncRetention
    from pgmem._async.stores import AsyncStoreRepository
    from pgmem._async.summaries import AsyncSummaryRepository
    from pgmem._async.vectors import AsyncVectorRepository

T = TypeVar("T")


class _OnFirstUse(Generic[T]):
    """A repository of the client built on first use, its module imported only then: a process that only
    reads and writes messages loads neither the vector wing nor the queues (~10 ms of a cold start,
    benchmarks/startup.py). Built once, under the client's lock (a client is shared between threads);
    after that it is a plain attribute of the client (this descriptor defines no ``__set__``)."""

    def __init__(self, build: Callable[[AsyncClient], T]) -> None:
        self._build = build

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, client: None, owner: type) -> _OnFirstUse[T]: ...
    @overload
    def __get__(self, client: AsyncClient, owner: type) -> T: ...
    def __get__(self, client: AsyncClient | None, owner: type) -> _OnFirstUse[T] | T:
        if client is None:
            return self
        with client._build_lock:
            built: T | None = client.__dict__.get(self._name)
            if built is None:
                built = client.__dict__[self._name] = self._build(client)
        return built


def _queues(client: AsyncClient) -> AsyncQueueRepository:
    from pgmem._async.queues import AsyncQueueRepository

    return AsyncQueueRepository(client)


def _vectors(client: AsyncClient) -> AsyncVectorRepository:
    from pgmem._async.vectors import AsyncVectorRepository

    return AsyncVectorRepository(client, client.sessions)


def _summaries(client: AsyncClient) -> AsyncSummaryRepository:
    from pgmem._async.summaries import AsyncSummaryRepository

    return AsyncSummaryRepository(client)


def _brains(client: AsyncClient) -> AsyncBrainRepository:
    from pgmem._async.brains import AsyncBrainRepository

    return AsyncBrainRepository(client)


def _retention(client: AsyncClient) -> AsyncRetention:
    from pgmem._async.retention import AsyncRetention

    return AsyncRetention(client)


def _stores(client: AsyncClient) -> AsyncStoreRepository:
    from pgmem._async.stores import AsyncStoreRepository

    return AsyncStoreRepository(client)


def _items(client: AsyncClient) -> AsyncItemRepository:
    from pgmem._async.items import AsyncItemRepository

    return AsyncItemRepository(client)


def _forks(client: AsyncClient) -> AsyncForkRepository:
    from pgmem._async.forks import AsyncForkRepository

    return AsyncForkRepository(client)


def _contexts(client: AsyncClient) -> AsyncContextBuilder:
    from pgmem._async.context import AsyncContextBuilder

    return AsyncContextBuilder(client, client.vectors)
