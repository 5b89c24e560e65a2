"""DevAll's own ``AgentNodeExecutor`` runs a node of its shipped ``demo_simple_memory.yaml`` with pgmem's
``MemoryManager`` in place of DevAll's, against a scripted model: memory is read before generation and
at post-generation thinking (which calls ``to_message_blocks()`` on retrieved snapshots) and written
after, durably."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

import pgmem
from pgmem.stores import MemoryManager, build_stores, parse_design
from tests.seeds.chatdev import devall

ns = devall.load_executor()
messages = ns.messages
ENV = {"API_KEY": "sk-test-not-a-real-key", "BASE_URL": "http://127.0.0.1:9/v1"}


class Scripted(ns.providers.ModelProvider):  # type: ignore[misc,name-defined]
    """A DevAll model provider that answers from a script and records every conversation it is sent."""

    seen: list[list[str]] = []
    replies: list[str] = []

    def create_client(self) -> None:
        return None

    def call_model(self, client: Any, conversation: list[Any], timeline: Any, tool_specs: Any = None, **kw: Any) -> Any:
        Scripted.seen.append([m.text_content() for m in conversation])
        reply = Scripted.replies.pop(0)
        return ns.providers.ModelResponse(message=messages.Message(role=messages.MessageRole.ASSISTANT, content=reply))

    def extract_token_usage(self, response: Any) -> Any:
        return importlib.import_module("utils.token_tracker").TokenUsage()


if "scripted" not in ns.providers.ProviderRegistry.list_providers():
    ns.providers.ProviderRegistry.register("scripted", Scripted)


def _design() -> dict[str, Any]:
    data = yaml.safe_load((ns.site / "yaml_instance" / "demo_simple_memory.yaml").read_text(encoding="utf-8"))
    data = copy.deepcopy(data)
    for node in data["graph"]["nodes"]:
        node["config"]["provider"] = "scripted"
    # offline embeddings on both sides (DevAll only parses this block here; pgmem builds the store)
    data["graph"]["memory"][0]["config"]["embedding"] = {"provider": "hashing", "model": "pgmem-hash-384"}
    # read at post-generation thinking too, so that the reflection gets the memory and its blocks
    (node_a,) = [n for n in data["graph"]["nodes"] if n["id"] == "A"]
    node_a["config"]["memories"][0]["retrieve_stage"] = ["gen", "post_gen_thinking"]
    return data


def test_devall_agent_executor_reads_and_writes_pgmem_memory(
    client: pgmem.Client, dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # DevAll's workflow logger writes logs/<id>.log under the working directory
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    importlib.import_module("runtime.node.builtin_nodes")  # DevAll's node types (agent, ...)
    from entity.config_loader import prepare_design_mapping

    data = _design()
    resolved = prepare_design_mapping(copy.deepcopy(data))  # DevAll's placeholder resolution
    (index,) = [i for i, n in enumerate(resolved["graph"]["nodes"]) if n["id"] == "A"]
    node = ns.configs.Node.from_dict(resolved["graph"]["nodes"][index], path=f"root.graph.nodes[{index}]")
    agent_config = node.as_config(ns.configs.AgentConfig)
    # what DevAll's GraphExecutor does, with pgmem's stores and manager
    stores = build_stores(parse_design(data).stores, client=client)
    manager = MemoryManager(agent_config.memories, stores)  # DevAll's MemoryAttachmentConfig objects
    thinking = ns.thinking.ThinkingManagerFactory.get_thinking_manager(agent_config.thinking)
    logger = importlib.import_module("utils.logger").WorkflowLogger("pgmem-test", log_to_console=False)
    context = ns.executor_base.ExecutionContext(
        tool_manager=devall.NoTools(),
        function_manager=None,
        log_manager=ns.log_manager.LogManager(logger),
        memory_managers={"A": manager},
        thinking_managers={"A": thinking},
    )
    executor = ns.agent_executor.AgentNodeExecutor(context)

    def run(text: str, answer: str, reflection: str) -> str:
        Scripted.seen.clear()
        Scripted.replies[:] = [answer, reflection]
        user = messages.Message(role=messages.MessageRole.USER, content=text, metadata={"source": "USER"})
        (out,) = executor.execute(node, [user])
        assert not Scripted.replies, "the executor called the model twice: generation, then reflection"
        result: str = out.text_content()
        assert not result.startswith("Error calling model"), result
        return result

    first = run(
        "snake game",
        "The snake game keeps its board in a curses window. The score is drawn in the top row of the screen.",
        "The snake game keeps its board in a curses window.",
    )
    assert first == "The snake game keeps its board in a curses window."  # the reflection replaces the answer
    assert "Related Memories" not in "\n".join(Scripted.seen[0])  # nothing stored yet
    (stored,) = stores["Paper Gen Memory"].items()
    assert "curses window" in stored.content_summary and stored.metadata["agent_role"] == node.role

    run("snake game board in curses", "A second article about the snake board.", "Second reflection.")
    generation, reflection = Scripted.seen
    (block,) = [m for m in generation if m.startswith("===== Related Memories =====")]  # the executor's insert
    assert "--- Paper Gen Memory ---" in block and "curses window" in block
    assert reflection[-1].startswith("Here is a conversation between two roles: ===== Related Memories =====")
    # durable: another client, another manager, the same memory
    with pgmem.connect(dsn, namespace=client.namespace, max_size=2) as other:
        again = build_stores(parse_design(data).stores, client=other)
        assert len(again["Paper Gen Memory"].items()) == 2


def test_retrieved_snapshots_give_devall_message_blocks(client: pgmem.Client) -> None:
    stores = build_stores([{"name": "board", "type": "blackboard"}], client=client)
    block = messages.MessageBlock(type=messages.MessageBlockType.TEXT, text="a block of text")
    snapshot = ns.memory_base.MemoryContentSnapshot.from_blocks(text="hello board", blocks=[block], role="assistant")
    payload = ns.memory_base.MemoryWritePayload(
        agent_role="qa", inputs_text="in", input_snapshot=None, output_snapshot=snapshot
    )
    manager = MemoryManager([ns.memory_configs.MemoryAttachmentConfig.from_dict({"name": "board"}, path="m")], stores)
    manager.update(payload)  # DevAll's payload
    result = manager.retrieve(
        agent_role="qa",
        query=ns.memory_base.MemoryContentSnapshot(text="anything"),
        current_stage=ns.enums.AgentExecFlowStage.POST_GEN_THINKING_STAGE,
    )
    assert result is not None
    (item,) = result.items
    assert item.output_snapshot is not None
    (got,) = item.output_snapshot.to_message_blocks()
    assert isinstance(got, messages.MessageBlock) and got.text == "a block of text"
