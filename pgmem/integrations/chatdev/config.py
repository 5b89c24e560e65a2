"""Configuration: the ``memory:`` list of stores (YAML or dicts) and the attachments of a node."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pgmem import Client
from pgmem.errors import ConfigError
from pgmem.integrations.chatdev.base import MemoryStore, StoreConfig, check_store_name, config_error
from pgmem.integrations.chatdev.registry import get_memory_store_registration

__all__ = [
    "STAGES",
    "MemoryAttachmentConfig",
    "MemoryDesign",
    "MemoryStoreConfig",
    "build_stores",
    "load_design",
    "load_memory_config",
    "parse_design",
    "parse_memory_config",
    "resolve_placeholders",
]

#: DevAll's ``AgentExecFlowStage`` values: the stages at which an agent node reads its memories.
STAGES = ("pre_gen_thinking", "gen", "post_gen_thinking", "finished")

#: The top-level keys of a DevAll design file (``version``, ``vars``, ``graph``); pgmem reads ``vars``
#: and the graph's ``memory`` list and node ``memories``.
_DESIGN_KEYS = frozenset({"version", "vars", "graph"})

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")
_ONLY_PLACEHOLDER = re.compile(r"\s*\$\{([A-Za-z0-9_]+)\}\s*")


def resolve_placeholders(
    data: Any, variables: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None, where: str = "memory"
) -> Any:
    """Replace ``${NAME}`` in every string of ``data`` (a copy is returned), as DevAll does: from the
    design's ``vars`` first (which may use placeholders themselves), then the environment. A string that
    is one placeholder takes the value itself (a number stays a number).

    Raises:
        ConfigError: a placeholder names nothing set (the error names the placeholder and where it is,
            never a value: a resolved API key does not reach a message).
    """
    variables = dict(variables or {})
    environ = os.environ if env is None else env
    resolved: dict[str, Any] = {}

    def lookup(name: str, at: str, stack: tuple[str, ...]) -> Any:
        if name in resolved:
            return resolved[name]
        if name in stack:
            raise ConfigError(f"{at}: placeholder cycle through vars.{name}")
        if name in variables:
            resolved[name] = walk(variables[name], f"vars.{name}", (*stack, name))
            return resolved[name]
        if name in environ:
            return environ[name]
        raise ConfigError(
            f"{at}: unresolved placeholder '${{{name}}}': set the environment variable {name} or declare it under vars"
        )

    def walk(value: Any, at: str, stack: tuple[str, ...]) -> Any:
        if isinstance(value, str):
            whole = _ONLY_PLACEHOLDER.fullmatch(value)
            if whole:
                return lookup(whole.group(1), at, stack)
            return _PLACEHOLDER.sub(lambda m: str(lookup(m.group(1), at, stack)), value)
        if isinstance(value, Mapping):
            return {k: walk(v, f"{at}.{k}", stack) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v, f"{at}[{i}]", stack) for i, v in enumerate(value)]
        return value

    return walk(data, where, ())


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

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(min_length=1)
    retrieve_stage: list[str] | None = None
    top_k: int = Field(default=3, ge=1, le=1000)
    similarity_threshold: float = Field(default=-1.0, ge=-1.0, le=1.0)
    read: bool = True
    write: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("expected a non-blank store name")
        return value

    @field_validator("retrieve_stage", mode="before")
    @classmethod
    def _stages(cls, value: Any) -> Any:
        if value is None:
            return None
        values = [value] if isinstance(value, str) or not isinstance(value, list | tuple) else value
        stages = [stage_name(v) for v in values]
        for index, stage in enumerate(stages):
            if stage not in STAGES:
                raise ValueError(f"retrieve_stage[{index}] is {stage!r}; DevAll's stages are {', '.join(STAGES)}")
        return stages

    def applies_to(self, stage: Any) -> bool:
        return not self.retrieve_stage or stage is None or stage_name(stage) in self.retrieve_stage

    @classmethod
    def parse(cls, value: Any, where: str = "memories") -> MemoryAttachmentConfig:
        """From pgmem's attachment, a mapping, or DevAll's ``MemoryAttachmentConfig`` object."""
        if isinstance(value, MemoryAttachmentConfig):
            return value
        if not isinstance(value, Mapping) and all(hasattr(value, f) for f in cls.model_fields):
            value = {f: getattr(value, f) for f in cls.model_fields}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        try:
            return cls.model_validate(dict(value))
        except ValidationError as exc:
            raise config_error(exc, where) from None


def stage_name(stage: Any) -> Any:
    """A stage's name: DevAll's ``AgentExecFlowStage`` members are read by their value."""
    value = getattr(stage, "value", stage)
    return value if isinstance(value, str) else stage


def _is_design(data: Any) -> bool:
    return isinstance(data, Mapping) and "graph" in data and not set(data) - _DESIGN_KEYS


def parse_memory_config(data: Any, *, env: Mapping[str, str] | None = None) -> list[MemoryStoreConfig]:
    """Validate a ``memory:`` configuration: a mapping with a ``memory`` list, the list itself, or a whole
    DevAll design file (``version``, ``vars``, ``graph``: its ``graph.memory`` list).

    Each entry is ``{name, type, config}``; ``config`` is validated by the type's config class (keys
    beside a missing or empty ``config:`` are read as the config). ``${VAR}`` placeholders are resolved
    from the design's ``vars`` and the environment (``env``, default ``os.environ``); an unset one is an
    error. Raises :class:`ConfigError` naming the entry and field (duplicate names included).

    Example:
        >>> parse_memory_config({"memory": [{"name": "board", "type": "blackboard", "config": {"max_items": 50}}]})
    """
    variables: Mapping[str, Any] = {}
    where = "memory"
    if _is_design(data):
        variables, graph = _design_parts(data)
        data = graph.get("memory")
        where = "graph.memory"
    elif isinstance(data, Mapping):
        if set(data) - {"memory"}:
            extra = sorted(str(k) for k in set(data) - {"memory"})
            raise ConfigError(f"unknown top-level keys {extra}; expected 'memory' (or a DevAll design: 'graph')")
        data = data.get("memory")
    if data is None:
        return []
    if not isinstance(data, Sequence) or isinstance(data, str | bytes):
        raise ConfigError(f"{where}: expected a list of stores, got {type(data).__name__}")
    data = resolve_placeholders(list(data), variables, env, where)
    seen: dict[str, int] = {}
    out: list[MemoryStoreConfig] = []
    for index, entry in enumerate(data):
        at = f"{where}[{index}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{at}: expected a mapping with name, type and config, got {type(entry).__name__}")
        raw = entry.get("config")
        beside = {k: v for k, v in entry.items() if k not in {"name", "type", "config"}}
        if beside and raw is None:
            # DevAll's own subgraphs/reflexion_loop.yaml puts `max_items` beside an empty `config:`
            raw = beside
        elif beside:
            raise ConfigError(f"{at}: unknown keys {sorted(str(k) for k in beside)}")
        try:
            name = check_store_name(entry.get("name"))
        except ValueError as exc:  # ConfigError included
            raise ConfigError(f"{at}.name: {exc}") from None
        if name in seen:
            raise ConfigError(f"{at}.name: duplicate memory store name {name!r} (also {where}[{seen[name]}])")
        seen[name] = index
        store_type = entry.get("type")
        if not isinstance(store_type, str):
            raise ConfigError(f"{at}.type: expected a store type name, got {store_type!r}")
        try:
            registration = get_memory_store_registration(store_type)
        except ConfigError as exc:
            raise ConfigError(f"{at}.type: {exc}") from None
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{at}.config: expected a mapping, got {type(raw).__name__}")
        try:
            config = registration.config_cls.model_validate(dict(raw))
        except ValidationError as exc:
            raise config_error(exc, f"{at}.config") from None
        out.append(MemoryStoreConfig(name=name, type=store_type, config=config))
    return out


def _design_parts(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    variables = data.get("vars") or {}
    graph = data.get("graph")
    if not isinstance(variables, Mapping):
        raise ConfigError(f"vars: expected a mapping, got {type(variables).__name__}")
    if not isinstance(graph, Mapping):
        raise ConfigError(f"graph: expected a mapping, got {type(graph).__name__}")
    return variables, graph


@dataclass(frozen=True, slots=True)
class MemoryDesign:
    """The memory part of a DevAll design: its stores and, per agent node id, its attachments."""

    stores: list[MemoryStoreConfig]
    attachments: dict[str, list[MemoryAttachmentConfig]] = field(default_factory=dict)


def parse_design(data: Any, *, env: Mapping[str, str] | None = None) -> MemoryDesign:
    """The stores (``graph.memory``) and every node's ``memories`` of a DevAll design mapping (see
    :func:`parse_memory_config`). An attachment naming a store the design does not declare is an error.

    Example:
        >>> design = load_design("yaml_instance/demo_simple_memory.yaml")
        >>> manager = MemoryManager(design.attachments["A"], build_stores(design.stores))
    """
    if not _is_design(data):
        raise ConfigError("expected a DevAll design: a mapping with 'graph' (and optionally 'version', 'vars')")
    stores = parse_memory_config(data, env=env)
    variables, graph = _design_parts(data)
    names = {store.name for store in stores}
    nodes = graph.get("nodes") or []
    if not isinstance(nodes, Sequence) or isinstance(nodes, str | bytes):
        raise ConfigError(f"graph.nodes: expected a list, got {type(nodes).__name__}")
    attachments: dict[str, list[MemoryAttachmentConfig]] = {}
    for index, node in enumerate(nodes):
        config = node.get("config") if isinstance(node, Mapping) else None
        raw = config.get("memories") if isinstance(config, Mapping) else None
        if not raw:
            continue
        where = f"graph.nodes[{index}].config.memories"
        if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
            raise ConfigError(f"{where}: expected a list, got {type(raw).__name__}")
        raw = resolve_placeholders(list(raw), variables, env, where)
        parsed = [MemoryAttachmentConfig.parse(a, f"{where}[{i}]") for i, a in enumerate(raw)]
        for i, attachment in enumerate(parsed):
            if attachment.name not in names:
                raise ConfigError(
                    f"{where}[{i}].name: no memory store named {attachment.name!r} in graph.memory "
                    f"(declared: {', '.join(sorted(names)) or 'none'})"
                )
        attachments[str(node.get("id"))] = parsed
    return MemoryDesign(stores, attachments)


def _read_yaml(source: str | os.PathLike[str]) -> Any:
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
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}") from None


def load_memory_config(
    source: str | os.PathLike[str], *, env: Mapping[str, str] | None = None
) -> list[MemoryStoreConfig]:
    """Read a YAML ``memory:`` configuration (or a DevAll design file) from a file path or from YAML text
    (see :func:`parse_memory_config`; ``${VAR}`` placeholders are resolved after parsing)."""
    return parse_memory_config(_read_yaml(source), env=env)


def load_design(source: str | os.PathLike[str], *, env: Mapping[str, str] | None = None) -> MemoryDesign:
    """Read the memory part of a DevAll design file (a path or YAML text): see :func:`parse_design`."""
    return parse_design(_read_yaml(source), env=env)


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
