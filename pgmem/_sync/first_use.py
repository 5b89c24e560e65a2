# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The client's repositories built on first use (:class:`pgmem.AsyncClient`): the descriptor that builds
one, and how each is built, its module imported only then."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar, overload

if TYPE_CHECKING:
    from pgmem._sync.brains import BrainRepository
    from pgmem._sync.client import Client
    from pgmem._sync.context import ContextBuilder
    from pgmem._sync.forks import ForkRepository
    from pgmem._sync.items import ItemRepository
    from pgmem._sync.queues import QueueRepository
    from pgmem._sync.retention import Retention
    from pgmem._sync.stores import StoreRepository
    from pgmem._sync.summaries import SummaryRepository
    from pgmem._sync.vectors import VectorRepository

T = TypeVar("T")


class _OnFirstUse(Generic[T]):
    """A repository of the client built on first use, its module imported only then: a process that only
    reads and writes messages loads neither the vector wing nor the queues (~10 ms of a cold start,
    benchmarks/startup.py). Built once, under the client's lock (a client is shared between threads);
    after that it is a plain attribute of the client (this descriptor defines no ``__set__``)."""

    def __init__(self, build: Callable[[Client], T]) -> None:
        self._build = build

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, client: None, owner: type) -> _OnFirstUse[T]: ...
    @overload
    def __get__(self, client: Client, owner: type) -> T: ...
    def __get__(self, client: Client | None, owner: type) -> _OnFirstUse[T] | T:
        if client is None:
            return self
        with client._build_lock:
            built: T | None = client.__dict__.get(self._name)
            if built is None:
                built = client.__dict__[self._name] = self._build(client)
        return built


def _queues(client: Client) -> QueueRepository:
    from pgmem._sync.queues import QueueRepository

    return QueueRepository(client)


def _vectors(client: Client) -> VectorRepository:
    from pgmem._sync.vectors import VectorRepository

    return VectorRepository(client, client.sessions)


def _summaries(client: Client) -> SummaryRepository:
    from pgmem._sync.summaries import SummaryRepository

    return SummaryRepository(client)


def _brains(client: Client) -> BrainRepository:
    from pgmem._sync.brains import BrainRepository

    return BrainRepository(client)


def _retention(client: Client) -> Retention:
    from pgmem._sync.retention import Retention

    return Retention(client)


def _stores(client: Client) -> StoreRepository:
    from pgmem._sync.stores import StoreRepository

    return StoreRepository(client)


def _items(client: Client) -> ItemRepository:
    from pgmem._sync.items import ItemRepository

    return ItemRepository(client)


def _forks(client: Client) -> ForkRepository:
    from pgmem._sync.forks import ForkRepository

    return ForkRepository(client)


def _contexts(client: Client) -> ContextBuilder:
    from pgmem._sync.context import ContextBuilder

    return ContextBuilder(client, client.vectors)
