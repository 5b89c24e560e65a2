"""DevAll's YAML on pgmem: its shipped workflows load, and what DevAll rejects pgmem rejects."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

import pgmem
from pgmem.stores import (
    FileMemoryConfig,
    MemoryManager,
    build_stores,
    load_design,
    load_memory_config,
    parse_design,
    parse_memory_config,
)
from tests.seeds.chatdev import devall

ns = devall.load()
ENV = {"API_KEY": "sk-test-not-a-real-key", "BASE_URL": "http://127.0.0.1:9/v1"}


def _memory_parts(data: Any) -> tuple[list[Any], dict[str, list[Any]]]:
    graph = data.get("graph") or {}
    nodes = {str(n.get("id")): (n.get("config") or {}).get("memories") or [] for n in graph.get("nodes") or []}
    return list(graph.get("memory") or []), {k: v for k, v in nodes.items() if v}


def _devall_store(entry: Any, variables: Any = None, env: dict[str, str] | None = None) -> Any:
    """DevAll's own parsing of one ``memory:`` entry: its placeholder resolution, then its config class."""
    entry = copy.deepcopy(entry)  # DevAll resolves in place
    resolved = ns.vars.resolve_mapping_with_vars({"entry": entry}, env_lookup=env or ENV, vars_map=variables or {})
    return ns.memory_configs.MemoryStoreConfig.from_dict(resolved["entry"], path="memory[0]")


def _devall_attachment(entry: Any) -> Any:
    return ns.memory_configs.MemoryAttachmentConfig.from_dict(entry, path="memories[0]")


def _shipped() -> list[Path]:
    out = []
    for path in devall.workflows(ns):
        stores, nodes = _memory_parts(yaml.safe_load(path.read_text(encoding="utf-8")))
        if stores or nodes:
            out.append(path)
    return out


def test_every_shipped_workflow_that_configures_memory_loads(client: pgmem.Client) -> None:
    shipped = _shipped()
    names = {p.name for p in shipped}
    assert {"demo_simple_memory.yaml", "demo_improved_memory.yaml", "demo_file_memory.yaml"} <= names
    for path in shipped:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        design = load_design(path, env=ENV)
        raw_stores, raw_nodes = _memory_parts(data)
        assert [s.name for s in design.stores] == [e["name"] for e in raw_stores], path.name
        for entry, ours in zip(raw_stores, design.stores, strict=True):
            try:
                theirs = _devall_store(entry, data.get("vars"))
            except ns.configs.ConfigError as exc:
                # DevAll rejects its own subgraphs/reflexion_loop.yaml: `max_items: 500` sits beside an
                # empty `config:`. pgmem reads keys beside an empty config as the config (README).
                assert path.name == "reflexion_loop.yaml" and "requires config block" in str(exc)
                assert ours.config.max_items == 500  # type: ignore[attr-defined]
                continue
            assert (ours.name, ours.type) == (theirs.name, theirs.type)
            if ours.type == "file":
                assert isinstance(ours.config, FileMemoryConfig)
                assert (ours.config.index_path or ours.config.memory_path) == theirs.config.index_path
                assert [s.path for s in ours.config.file_sources] == [s.source_path for s in theirs.config.file_sources]
            embedding = getattr(ours.config, "embedding", None)
            if theirs.config.embedding is not None:
                assert embedding is not None
                assert (embedding.provider, embedding.model) == (
                    theirs.config.embedding.provider,
                    theirs.config.embedding.model,
                )
                assert embedding.params == theirs.config.embedding.params
                assert embedding.api_key == theirs.config.embedding.api_key == ENV["API_KEY"]
        assert set(design.attachments) == set(raw_nodes), path.name
        for node_id, entries in raw_nodes.items():
            for entry, ours_a in zip(entries, design.attachments[node_id], strict=True):
                theirs_a = _devall_attachment(entry)
                assert ours_a.name == theirs_a.name
                assert ours_a.retrieve_stage == (
                    None if theirs_a.retrieve_stage is None else [s.value for s in theirs_a.retrieve_stage]
                )
                assert (ours_a.top_k, ours_a.similarity_threshold, ours_a.read, ours_a.write) == (
                    theirs_a.top_k,
                    theirs_a.similarity_threshold,
                    theirs_a.read,
                    theirs_a.write,
                )
        # the stores build (not loaded: the OpenAI ones would embed over the network) and every node's
        # attachments, DevAll's own objects included, make a manager
        stores = build_stores(design.stores, client=client, load=False)
        for node_id, entries in raw_nodes.items():
            MemoryManager(design.attachments[node_id], stores)
            MemoryManager([_devall_attachment(e) for e in entries], stores)


def _store(config: dict[str, Any], store_type: str = "simple", name: str = "m") -> dict[str, Any]:
    return {"name": name, "type": store_type, "config": config}


ACCEPTED_STORES = [
    _store({"memory_path": "x.json", "embedding": {"provider": "openai", "model": "m", "params": {"max_length": 9}}}),
    _store({"embedding": {"provider": "local", "model": "all-MiniLM-L6-v2", "params": {"model_path": "/m"}}}),
    _store({"memory_path": "idx.json", "file_sources": [{"path": "docs", "file_types": [".md"]}]}, "file"),
    _store({"index_path": "idx.json", "file_sources": [{"path": "docs", "file_types": ".md"}]}, "file"),
    _store({"max_items": 5, "memory_path": "board.json"}, "blackboard"),
    _store({"embedding": {"provider": "openai", "model": "m", "api_key": "", "base_url": ""}}),
]

REJECTED_STORES = [
    (_store({}, name=""), r"\.name"),
    (_store({}, name="   "), r"\.name"),
    (_store({"max_items": "5"}, "blackboard"), r"config\.max_items"),
    (_store({"max_items": 0}, "blackboard"), r"config\.max_items"),
    (_store({"file_sources": []}, "file"), r"config\.file_sources"),
    (_store({"file_sources": [{"path": "d", "recursive": "yes"}]}, "file"), r"recursive"),
    (_store({"embedding": {"provider": "openai", "model": "m", "params": "fast"}}), r"embedding\.params"),
    (_store({"embedding": {"provider": "openai", "model": "m", "api_key": 5}}), r"embedding\.api_key"),
]


@pytest.mark.parametrize("entry", ACCEPTED_STORES)
def test_store_configs_devall_accepts_are_accepted(entry: dict[str, Any]) -> None:
    theirs = _devall_store(entry)
    (ours,) = parse_memory_config([entry], env=ENV)
    assert (ours.name, ours.type) == (theirs.name, theirs.type)
    if entry["type"] == "file":
        assert isinstance(ours.config, FileMemoryConfig)
        assert (ours.config.index_path or ours.config.memory_path) == theirs.config.index_path
        assert [s.file_types for s in ours.config.file_sources] == [s.file_types for s in theirs.config.file_sources]


@pytest.mark.parametrize(("entry", "match"), REJECTED_STORES)
def test_store_configs_devall_rejects_are_rejected(entry: dict[str, Any], match: str) -> None:
    with pytest.raises(ns.configs.ConfigError):
        _devall_store(entry)
    with pytest.raises(pgmem.ConfigError, match=match):
        parse_memory_config([entry], env=ENV)


@pytest.mark.parametrize(
    ("attachment", "accepted"),
    [
        ({"name": "m"}, True),
        ({"name": "m", "retrieve_stage": ["pre_gen_thinking", "gen", "post_gen_thinking", "finished"]}, True),
        ({"name": "m", "retrieve_stage": "gen"}, True),
        ({"name": "m", "top_k": 7, "similarity_threshold": 0, "read": False, "write": True}, True),
        ({"name": "m", "retrieve_stage": ["generate"]}, False),
        ({"name": "m", "retrieve_stage": ["gen", "plan"]}, False),
        ({"name": ""}, False),
        ({"name": "  "}, False),
        ({"name": "m", "top_k": 2.0}, False),
        ({"name": "m", "top_k": "3"}, False),
        ({"name": "m", "top_k": 0}, False),
        ({"name": "m", "read": "yes"}, False),
        ({"name": "m", "write": 1}, False),
        ({"name": "m", "similarity_threshold": "0.5"}, False),
    ],
)
def test_attachments_are_validated_as_devall_does(attachment: dict[str, Any], accepted: bool) -> None:
    stores = {"m": object()}
    if accepted:
        theirs = _devall_attachment(attachment)
        ours = MemoryManager([attachment], stores).attachments[0]  # type: ignore[arg-type]
        assert (ours.top_k, ours.read, ours.write) == (theirs.top_k, theirs.read, theirs.write)
        assert ours.retrieve_stage == (
            None if theirs.retrieve_stage is None else [s.value for s in theirs.retrieve_stage]
        )
        ours_from_theirs = MemoryManager([theirs], stores).attachments[0]  # type: ignore[arg-type]
        assert ours_from_theirs == ours
    else:
        with pytest.raises(ns.configs.ConfigError):
            _devall_attachment(attachment)
        with pytest.raises(pgmem.ConfigError, match=r"memories\[0\]"):
            MemoryManager([attachment], stores)  # type: ignore[arg-type]


def test_top_k_true_is_rejected_where_devall_takes_it_as_1() -> None:
    # DevAll checks isinstance(top_k, int), which a bool passes: `top_k: true` retrieves one item there.
    # pgmem rejects it (README, "ChatDev DevAll": differences).
    assert _devall_attachment({"name": "m", "top_k": True}).top_k is True
    with pytest.raises(pgmem.ConfigError, match=r"top_k"):
        MemoryManager([{"name": "m", "top_k": True}], {"m": object()})  # type: ignore[dict-item]


def test_placeholders_resolve_as_in_devall_and_an_unset_one_raises(tmp_path: Path) -> None:
    text = """
version: 0.4.0
vars: {MODEL: text-embedding-3-small, KEYS: "${API_KEY}"}
graph:
  id: g
  memory:
    - name: convo
      type: simple
      config:
        embedding: {provider: openai, model: "${MODEL}", api_key: "${KEYS}", base_url: "${BASE_URL}/x"}
  nodes: []
"""
    (ours,) = load_memory_config(text, env=ENV)
    assert ours.config.embedding.model == "text-embedding-3-small"  # type: ignore[attr-defined]
    assert ours.config.embedding.api_key == ENV["API_KEY"]  # type: ignore[attr-defined]
    assert ours.config.embedding.base_url == ENV["BASE_URL"] + "/x"  # type: ignore[attr-defined]
    data = yaml.safe_load(text)
    theirs = _devall_store(data["graph"]["memory"][0], data["vars"])
    assert theirs.config.embedding.api_key == ENV["API_KEY"]
    assert theirs.config.embedding.model == "text-embedding-3-small"

    unset = {"BASE_URL": ENV["BASE_URL"]}  # API_KEY is not set
    with pytest.raises(ns.configs.ConfigError, match="Unresolved placeholder"):
        _devall_store(data["graph"]["memory"][0], data["vars"], env=unset)
    with pytest.raises(pgmem.ConfigError, match=r"unresolved placeholder '\$\{API_KEY\}'"):
        load_memory_config(text, env=unset)

    # a key that did resolve never reaches an error message, a repr, or the stored config
    bad = text.replace("embedding:", "rescore: bm25\n        embedding:")
    with pytest.raises(pgmem.ConfigError) as caught:
        load_memory_config(bad, env=ENV)
    assert ENV["API_KEY"] not in str(caught.value)
    assert ENV["API_KEY"] not in repr(ours) and ENV["API_KEY"] not in str(ours.config.model_dump())


def test_mem0_is_a_clear_error_naming_the_supported_types() -> None:
    with pytest.raises(pgmem.ConfigError, match=r"'mem0'.*supported types: blackboard, file, simple"):
        parse_design({"graph": {"memory": [_store({"api_key": "${API_KEY}"}, "mem0")], "nodes": []}}, env=ENV)


def test_an_attachment_to_an_undeclared_store_is_an_error() -> None:
    design = {"graph": {"memory": [], "nodes": [{"id": "A", "type": "agent", "config": {"memories": [{"name": "x"}]}}]}}
    with pytest.raises(pgmem.ConfigError, match=r"nodes\[0\].config.memories\[0\].name: no memory store named 'x'"):
        parse_design(design, env=ENV)
