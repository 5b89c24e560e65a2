"""Configuration: the ``memory:`` list of stores (YAML or dicts) and the attachments of a node."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pgmem import Client
from pgmem.errors import ConfigError
from pgmem.integrations.chatdev.base import MemoryStore, StoreConfig, check_store_name, config_error
from pgmem.integrations.chatdev.registry import get_memory_store_registration

__all__ = [
    "MemoryAttachmentConfig",
    "MemoryStoreConfig",
    "build_stores",
    "load_memory_config",
    "parse_memory_config",
]


class MemoryStoreConfig(BaseModel):
    """One entry of ``memory:``: a store's ``name``, ``type`` (a registered store type) and ``config``."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    type: str
    config: StoreConfig

    def build(self, client: Client | None = None) -> MemoryStore:
        """The store (not loaded yet: call its ``load()``, or use :func:`build_stores`)."""
        return get_memory_store_registration(self.type).factory(self.name, self.config, client)


class MemoryAttachmentConfig(BaseModel):
    """How a node uses a store (ChatDev's ``MemoryAttachmentConfig``).

    Attributes:
        name: the store's name.
        retrieve_stage: the stages (e.g. ``gen``, ``plan``) at which it is read; None or empty: every stage.
        top_k: items retrieved.
        similarity_threshold: minimum cosine similarity (-1: no filter).
        read / write: whether the node reads it and writes its output to it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    retrieve_stage: list[str] | None = None
    top_k: int = Field(default=3, ge=1, le=1000)
    similarity_threshold: float = Field(default=-1.0, ge=-1.0, le=1.0)
    read: bool = True
    write: bool = True

    @field_validator("retrieve_stage", mode="before")
    @classmethod
    def _stages(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def applies_to(self, stage: str | None) -> bool:
        return not self.retrieve_stage or stage is None or stage in self.retrieve_stage

    @classmethod
    def parse(cls, value: Any, where: str = "memories") -> MemoryAttachmentConfig:
        if isinstance(value, MemoryAttachmentConfig):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        try:
            return cls.model_validate(dict(value), strict=False)
        except ValidationError as exc:
            raise config_error(exc, where) from None


def parse_memory_config(data: Any) -> list[MemoryStoreConfig]:
    """Validate a ``memory:`` configuration: a mapping with a ``memory`` list, or the list itself.

    Each entry is ``{name, type, config}``; ``config`` is validated by the type's config class.
    Raises :class:`ConfigError` naming the entry and field (duplicate names included).

    Example:
        >>> parse_memory_config({"memory": [{"name": "board", "type": "blackboard", "config": {"max_items": 50}}]})
    """
    if isinstance(data, Mapping):
        if set(data) - {"memory"}:
            extra = sorted(str(k) for k in set(data) - {"memory"})
            raise ConfigError(f"unknown top-level keys {extra}; expected 'memory'")
        data = data.get("memory")
    if data is None:
        return []
    if not isinstance(data, Sequence) or isinstance(data, str | bytes):
        raise ConfigError(f"memory: expected a list of stores, got {type(data).__name__}")
    seen: dict[str, int] = {}
    out: list[MemoryStoreConfig] = []
    for index, entry in enumerate(data):
        where = f"memory[{index}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: expected a mapping with name, type and config, got {type(entry).__name__}")
        unknown = set(entry) - {"name", "type", "config"}
        if unknown:
            raise ConfigError(f"{where}: unknown keys {sorted(str(k) for k in unknown)}")
        try:
            name = check_store_name(entry.get("name"))
        except ConfigError as exc:
            raise ConfigError(f"{where}.name: {exc}") from None
        except ValueError as exc:
            raise ConfigError(f"{where}.name: {exc}") from None
        if name in seen:
            raise ConfigError(f"{where}.name: duplicate memory store name {name!r} (also memory[{seen[name]}])")
        seen[name] = index
        store_type = entry.get("type")
        if not isinstance(store_type, str):
            raise ConfigError(f"{where}.type: expected a store type name, got {store_type!r}")
        try:
            registration = get_memory_store_registration(store_type)
        except ConfigError as exc:
            raise ConfigError(f"{where}.type: {exc}") from None
        raw = entry.get("config")
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}.config: expected a mapping, got {type(raw).__name__}")
        try:
            config = registration.config_cls.model_validate(dict(raw))
        except ValidationError as exc:
            raise config_error(exc, f"{where}.config") from None
        out.append(MemoryStoreConfig(name=name, type=store_type, config=config))
    return out


def load_memory_config(source: str | os.PathLike[str]) -> list[MemoryStoreConfig]:
    """Read a YAML ``memory:`` configuration from a file path or from YAML text (see
    :func:`parse_memory_config`). ``${VAR}`` in values is replaced by the environment variable."""
    import yaml

    if isinstance(source, os.PathLike) or (
        isinstance(source, str) and "\n" not in source and source.endswith((".yaml", ".yml"))
    ):
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {source}: {exc}") from None
    elif isinstance(source, str):
        text = source
    else:
        raise ConfigError(f"expected YAML text or a path, got {type(source).__name__}")
    try:
        data = yaml.safe_load(os.path.expandvars(text))
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}") from None
    return parse_memory_config(data)


def build_stores(
    configs: Sequence[MemoryStoreConfig] | Any, *, client: Client | None = None, load: bool = True
) -> dict[str, MemoryStore]:
    """Build (and by default load) the stores of a configuration: parsed configs, a dict or YAML text.

    Example:
        >>> stores = build_stores(load_memory_config("memory.yaml"), client=client)
        >>> stores["board"].retrieve("qa", "", top_k=5)
    """
    if isinstance(configs, str | os.PathLike):
        configs = load_memory_config(configs)
    elif not (isinstance(configs, Sequence) and all(isinstance(c, MemoryStoreConfig) for c in configs)):
        configs = parse_memory_config(configs)
    stores = {c.name: c.build(client) for c in configs}
    if load:
        for store in stores.values():
            store.load()
    return stores
