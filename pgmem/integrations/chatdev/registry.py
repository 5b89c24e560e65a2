"""The store registry: store types by name, with their config class and factory."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pgmem import Client
from pgmem.errors import ConfigError, Conflict, InvalidInput
from pgmem.integrations.chatdev.base import MemoryStore, StoreConfig

__all__ = [
    "MemoryStoreRegistration",
    "StoreFactory",
    "get_memory_store_registration",
    "iter_memory_store_registrations",
    "register_memory_store",
]

#: ``factory(name, config, client)`` builds a store (``client`` None: the process-wide default client).
StoreFactory = Callable[[str, Any, Client | None], MemoryStore]


@dataclass(frozen=True, slots=True)
class MemoryStoreRegistration:
    """A registered store type."""

    name: str
    config_cls: type[StoreConfig]
    factory: StoreFactory
    summary: str | None = None


_lock = threading.Lock()
_registry: dict[str, MemoryStoreRegistration] = {}


def register_memory_store(
    name: str, config_cls: type[StoreConfig], factory: StoreFactory, summary: str | None = None
) -> MemoryStoreRegistration:
    """Register a store type, usable as ``type: <name>`` in a ``memory:`` configuration.

    Args:
        name: the type's name.
        config_cls: a pydantic model (subclass :class:`pgmem.integrations.chatdev.StoreConfig`) validating ``config:``.
        factory: ``factory(store_name, config, client) -> MemoryStore``.
        summary: one line describing the type.

    Raises:
        Conflict: the name is already registered.

    Example:
        >>> register_memory_store("notes", NotesConfig, lambda name, cfg, client: NotesStore(name, cfg, client=client),
        ...                       "plain notes")
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise InvalidInput(f"a store type name must be an identifier, got {name!r}")
    if not isinstance(config_cls, type) or not issubclass(config_cls, StoreConfig):
        raise InvalidInput("config_cls must be a subclass of pgmem.integrations.chatdev.StoreConfig")
    if not callable(factory):
        raise InvalidInput("factory must be callable")
    registration = MemoryStoreRegistration(name, config_cls, factory, summary)
    with _lock:
        if name in _registry:
            raise Conflict(f"memory store type {name!r} is already registered")
        _registry[name] = registration
    return registration


def get_memory_store_registration(name: str) -> MemoryStoreRegistration:
    """The registration of a store type; :class:`ConfigError` naming the known types when unknown."""
    with _lock:
        found = _registry.get(name) if isinstance(name, str) else None
        known = sorted(_registry)
    if found is None:
        hint = _UNSUPPORTED.get(name, "") if isinstance(name, str) else ""
        raise ConfigError(f"unknown memory store type {name!r}{hint}; supported types: {', '.join(known)}")
    return found


#: Store types of ChatDev that pgmem does not provide, with what to use instead.
_UNSUPPORTED = {
    "mem0": (
        " (ChatDev's mem0 store keeps memories in the mem0 service; pgmem does not wrap it: use 'simple' "
        "for the same read/write semantic memory in Postgres)"
    ),
}


def iter_memory_store_registrations() -> dict[str, MemoryStoreRegistration]:
    """Every registered store type, by name."""
    with _lock:
        return dict(_registry)
