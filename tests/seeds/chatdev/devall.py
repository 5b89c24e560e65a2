"""DevAll's real memory code (``chatdev==0.1.0``), loaded without its runtime.

``runtime/node/agent/__init__.py`` imports every agent subsystem (providers for OpenAI and Gemini, MCP
tools through ``fastmcp``, skills, thinking), so ``import runtime.node.agent.memory`` pulls in the whole
runtime. Here ``runtime.node.agent`` is registered as a bare package over the installed folder (its
``__init__`` is not run), and only the subpackages the memory path needs are imported from their own
files: ``memory``, ``providers`` (the executor resolves the model through ``ProviderRegistry``) and
``thinking`` (the executor's pre/post-generation thinking reads memory). ``ToolManager`` (``tool/``,
MCP over fastmcp) is the one name left out: the executor only asks it for the tool specs of the node's
``tooling``, which the tests leave empty, and :class:`NoTools` answers that.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest


def _site() -> Path:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("chatdev")
    except PackageNotFoundError:
        pytest.skip(
            "chatdev (DevAll) is not installed: run `PGMEM_SEED_LEGS=chatdev bash .ci/seeds`", allow_module_level=True
        )
    spec = importlib.util.find_spec("entity")
    if spec is None or spec.origin is None:
        pytest.skip("chatdev is installed but its `entity` package is not importable", allow_module_level=True)
    return Path(spec.origin).parent.parent


class Hashing:
    """DevAll's embedding interface (``get_embedding(text) -> list[float]``) over pgmem's offline
    ``HashingEmbedder``: both sides of a comparison embed every text the same way, so their rankings are
    comparable without a network."""

    def __init__(self, dimension: int = 384) -> None:
        from pgmem.embeddings import HashingEmbedder

        self._embedder = HashingEmbedder(dimension)

    def get_embedding(self, text: str) -> list[float]:
        return [float(x) for x in self._embedder.embed([text])[0]]


class NoTools:
    """The executor's tool manager for nodes without ``tooling`` (the real one needs fastmcp)."""

    def get_tool_specs(self, tooling: Any) -> list[Any]:
        assert not tooling, "these tests run nodes without tools"
        return []


def load() -> types.SimpleNamespace:
    """Import DevAll's memory, provider, thinking and executor modules; skip when DevAll is absent."""
    site = _site()
    name = "runtime.node.agent"
    package = sys.modules.get(name)
    if package is None or getattr(package, "__file__", None) is not None:
        importlib.import_module("runtime.node")
        package = types.ModuleType(name)
        package.__path__ = [str(site / "runtime" / "node" / "agent")]
        package.__package__ = name
        sys.modules[name] = package
        for sub in ("memory", "providers", "thinking"):
            module = importlib.import_module(f"{name}.{sub}")
            for attr in getattr(module, "__all__", ()):
                setattr(package, attr, getattr(module, attr))
        package.ToolManager = NoTools  # type: ignore[attr-defined]
    from entity.config_loader import prepare_design_mapping  # noqa: F401 (checks the loader imports)

    modules = {
        "memory_base": "runtime.node.agent.memory.memory_base",
        "simple": "runtime.node.agent.memory.simple_memory",
        "blackboard": "runtime.node.agent.memory.blackboard_memory",
        "file": "runtime.node.agent.memory.file_memory",
        "configs": "entity.configs",
        "memory_configs": "entity.configs.node.memory",
        "enums": "entity.enums",
        "messages": "entity.messages",
        "vars": "utils.vars_resolver",
    }
    return types.SimpleNamespace(site=site, **{k: importlib.import_module(v) for k, v in modules.items()})


def store(ns: types.SimpleNamespace, name: str, store_type: str, config: dict[str, Any]) -> Any:
    """A DevAll store built from its own config parsing, embedding with :class:`Hashing`."""
    parsed = ns.memory_configs.MemoryStoreConfig.from_dict(
        {"name": name, "type": store_type, "config": config}, path="memory[0]"
    )
    cls = {"simple": ns.simple.SimpleMemory, "blackboard": ns.blackboard.BlackboardMemory, "file": ns.file.FileMemory}
    made = cls[store_type](parsed)
    if store_type != "blackboard":
        made.embedding = Hashing()
    return made


def workflows(ns: types.SimpleNamespace) -> list[Path]:
    """DevAll's shipped workflow files (``yaml_instance/``, subgraphs included)."""
    return sorted((ns.site / "yaml_instance").rglob("*.yaml"))


def load_executor() -> types.SimpleNamespace:
    """:func:`load` plus DevAll's ``AgentNodeExecutor`` and what it needs."""
    ns = load()
    for key, module in {
        "agent_executor": "runtime.node.executor.agent_executor",
        "executor_base": "runtime.node.executor.base",
        "providers": "runtime.node.agent.providers",
        "thinking": "runtime.node.agent.thinking",
        "log_manager": "utils.log_manager",
        "node_registry": "runtime.node.registry",
    }.items():
        setattr(ns, key, importlib.import_module(module))
    return ns
