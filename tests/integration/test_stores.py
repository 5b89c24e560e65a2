"""ChatDev-style stores (pgmem.integrations.chatdev): simple, file, blackboard, YAML config, MemoryManager."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem.integrations.chatdev import (
    BlackboardMemoryStore,
    ConfigError,
    FileMemoryStore,
    MemoryContentSnapshot,
    MemoryManager,
    MemoryWritePayload,
    SimpleMemoryStore,
    StoreConfig,
    build_stores,
    chunk_text,
    iter_memory_store_registrations,
    load_memory_config,
    parse_memory_config,
    register_memory_store,
)
from tests.conftest import table_counts

ROOT = Path(__file__).resolve().parents[2]

PNG = {"role": "assistant", "block": {"type": "image", "attachment": {
    "attachment_id": "att-1", "mime_type": "image/png", "name": "board.png", "size": 4, "data": "iVBORw==",
}}}  # fmt: skip


def _yaml(docs: Path) -> str:
    return textwrap.dedent(
        f"""
        memory:
          - name: convo
            type: simple
            config:
              rescore: jaccard
              embedding: {{provider: hashing, dimension: 256}}
          - name: docs
            type: file
            config:
              file_sources:
                - path: {docs}
                  file_types: [".md", "txt"]
                  recursive: true
              chunk_size: 200
              chunk_overlap: 20
              progress: false
          - name: board
            type: blackboard
            config:
              max_items: 3
        """
    )


def _docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "snake.md").write_text("The snake game draws its board with curses. " * 12)
    (docs / "notes.txt").write_text("Deployment happens on Fridays after the review.")
    (docs / "sub" / "scores.md").write_text("High scores are kept in a JSON file next to the game.")
    (docs / "ignored.py").write_text("print('not indexed')")
    return docs


def _payload(output: str, inputs: str = "what did we decide?", role: str = "coder", **kw: Any) -> MemoryWritePayload:
    return MemoryWritePayload(
        agent_role=role, inputs_text=inputs, output_snapshot=MemoryContentSnapshot(text=output, **kw)
    )


def test_yaml_configures_the_three_store_types(client: pgmem.Client, tmp_path: Path, dsn: str) -> None:
    config_file = tmp_path / "memory.yaml"
    config_file.write_text(_yaml(_docs(tmp_path)))
    configs = load_memory_config(config_file)
    assert [(c.name, c.type) for c in configs] == [("convo", "simple"), ("docs", "file"), ("board", "blackboard")]
    stores = build_stores(configs, client=client)
    assert isinstance(stores["convo"], SimpleMemoryStore)
    assert isinstance(stores["docs"], FileMemoryStore) and isinstance(stores["board"], BlackboardMemoryStore)
    assert {"simple", "file", "blackboard"} <= set(iter_memory_store_registrations())
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT name, type FROM pgmem.memory_stores ORDER BY name").fetchall()
        models = conn.execute("SELECT memory FROM pgmem.memory_models ORDER BY memory").fetchall()
    assert rows == [("board", "blackboard"), ("convo", "simple"), ("docs", "file")]
    assert models == [("store:convo",), ("store:docs",)]  # the blackboard has no vectors
    # the same YAML as text, in another client: the same (shared) stores
    with pgmem.connect(dsn, namespace="test", max_size=2) as other:
        again = build_stores(_yaml(tmp_path / "docs"), client=other)
        assert again["docs"].last_report is not None and again["docs"].last_report.unchanged == 3  # type: ignore[attr-defined]


def test_simple_store_retrieves_rescores_and_dedups(client: pgmem.Client, dsn: str) -> None:
    stores = build_stores(
        {"memory": [{"name": "convo", "type": "simple", "config": {"rescore": "lcs"}}]}, client=client
    )
    convo = stores["convo"]
    assert convo.update(_payload("Use curses to draw the snake board in the terminal", blocks=[PNG]))
    assert convo.update(_payload("Deploy the web version on Fridays after the code review"))
    assert not convo.update(_payload("Use curses to draw the snake board in the terminal"))  # same summary
    assert not convo.update(_payload("   "))  # nothing to store
    assert not convo.update(_payload("ok", inputs=""))  # shorter than min_content_length
    assert convo.count_memories() == 2

    (best, *rest) = convo.retrieve("coder", "how do we draw the snake board with curses?", top_k=2)
    assert "curses" in best.content_summary and best.score is not None
    assert rest and best.score > rest[0].score  # type: ignore[operator]
    assert best.attachments() == [
        {"role": "assistant", "attachment_id": "att-1", "mime_type": "image/png", "name": "board.png", "size": 4}
    ]
    assert best.output_snapshot is not None and best.output_snapshot.blocks == [PNG]  # data kept
    assert best.metadata["agent_role"] == "coder"
    assert convo.retrieve("coder", "snake board curses", top_k=5, similarity_threshold=0.99) == []
    # as in DevAll, the text searched for is "Query: <query>": an empty query still finds the items
    assert len(convo.retrieve("coder", "", top_k=5)) == 2

    # durable and shared: another client sees the items
    with pgmem.connect(dsn, namespace="test", max_size=2) as other:
        same = SimpleMemoryStore("convo", convo.config, client=other)  # type: ignore[arg-type]
        same.load()
        assert [i.content_summary for i in same.retrieve("qa", "deploy fridays review", top_k=1)] == [
            "Input: what did we decide? Output: Deploy the web version on Fridays after the code review"
        ]


def test_file_store_picks_up_an_edited_and_a_deleted_file(client: pgmem.Client, tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    (store,) = build_stores(
        [
            {
                "name": "docs",
                "type": "file",
                "config": {"file_sources": [{"path": str(docs), "file_types": [".md", ".txt"]}]},
            }
        ],
        client=client,
    ).values()
    assert isinstance(store, FileMemoryStore)
    report = store.last_report
    assert report is not None and sorted(Path(p).name for p in report.added) == ["notes.txt", "scores.md", "snake.md"]
    snake_chunks = len(chunk_text((docs / "snake.md").read_text(), 500, 50))
    assert snake_chunks == 2 and store.files()[str(docs / "snake.md")] == snake_chunks
    assert store.count_memories() == snake_chunks + 2
    (hit,) = store.retrieve("qa", "where are high scores kept?", top_k=1)
    assert hit.metadata["file_path"] == str(docs / "sub" / "scores.md") and hit.metadata["chunk_index"] == 0
    assert hit.metadata["file_name"] == "scores.md" and hit.metadata["total_chunks"] == 1

    assert store.refresh().unchanged == 3  # nothing changed: nothing re-indexed
    (docs / "notes.txt").write_text("Deployment now happens on Mondays, never on Fridays.")
    (docs / "sub" / "scores.md").unlink()
    report = store.refresh()
    assert report.updated == [str(docs / "notes.txt")] and report.removed == [str(docs / "sub" / "scores.md")]
    assert report.unchanged == 1 and report.added == []
    assert str(docs / "sub" / "scores.md") not in store.files()
    contents = [i.content_summary for i in store.items()]
    assert "Deployment now happens on Mondays, never on Fridays." in contents
    assert not any("High scores" in c or "after the review" in c for c in contents)
    assert store.count_memories() == snake_chunks + 1
    (hit,) = store.retrieve("qa", "when does deployment happen? Mondays", top_k=1)
    assert "Mondays" in hit.content_summary
    with pytest.raises(pgmem.InvalidInput, match="read-only"):
        store.update(_payload("cannot write here"))


def test_file_store_options(client: pgmem.Client, tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    (docs / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    (docs / "empty.md").write_text("")
    config = {"file_sources": [{"path": str(docs), "recursive": False, "file_types": ["md"]}], "progress_threshold": 1}
    store = build_stores([{"name": "flat", "type": "file", "config": config}], client=client)["flat"]
    assert isinstance(store, FileMemoryStore) and store.last_report is not None
    assert store.files() == {str(docs / "empty.md"): 0, str(docs / "snake.md"): 2}  # not recursive, .md only
    assert [Path(p).name for p, _ in store.last_report.skipped] == ["latin1.md"]  # not utf-8: reported, skipped
    latin = [{"path": str(docs / "latin1.md"), "encoding": "latin-1"}]
    other = build_stores([{"name": "latin", "type": "file", "config": {"file_sources": latin}}], client=client)["latin"]
    assert [i.content_summary for i in other.items()] == ["café"]
    assert chunk_text("x" * 1000, 500, 50) == ["x" * 500, "x" * 500, "x" * 100]
    assert chunk_text("One. " * 150, 500, 50)[0].endswith("One.")  # cut at a sentence end past the middle
    assert chunk_text("   ", 500, 50) == []


def test_blackboard_is_trimmed_by_count_and_time_read_oldest_first(client: pgmem.Client, dsn: str) -> None:
    board = build_stores([{"name": "board", "type": "blackboard", "config": {"max_items": 3}}], client=client)["board"]
    for i in range(5):
        assert board.update(_payload(f"status {i}", role=f"agent{i}"))
    assert not board.update(MemoryWritePayload(agent_role="x"))
    assert [i.content_summary for i in board.retrieve("any", "ignored", top_k=10)] == [
        "status 2",
        "status 3",
        "status 4",
    ]
    assert board.count_memories() == 3
    assert [i.content_summary for i in board.retrieve("any", "", top_k=2)] == ["status 3", "status 4"]

    aged = build_stores(
        [{"name": "aged", "type": "blackboard", "config": {"max_items": 100, "max_age_seconds": 60}}], client=client
    )["aged"]
    assert isinstance(aged, BlackboardMemoryStore)
    aged.update(_payload("old news"))
    aged.update(_payload("fresh news"))
    with psycopg.connect(dsn) as conn:  # age the first entry instead of waiting a minute
        conn.execute(
            "UPDATE pgmem.memory_entries SET added_at = now() - interval '2 minutes' WHERE memory = 'store:aged' "
            "AND seq = (SELECT min(seq) FROM pgmem.memory_entries WHERE memory = 'store:aged')"
        )
    assert [i.content_summary for i in aged.retrieve("any", "", top_k=10)] == ["fresh news"]  # honoured on read
    assert aged.trim() == 1 and aged.count_memories() == 1


def test_blackboard_is_shared_with_another_process(client: pgmem.Client, dsn: str) -> None:
    config = {"memory": [{"name": "board", "type": "blackboard", "config": {"max_items": 50}}]}
    script = textwrap.dedent(
        f"""
        import pgmem
        from pgmem.integrations.chatdev import build_stores, MemoryWritePayload, MemoryContentSnapshot
        with pgmem.connect({dsn!r}, namespace="test", max_size=1) as client:
            board = build_stores({config!r}, client=client)["board"]
            for i in range(3):
                snapshot = MemoryContentSnapshot(text=f"from child {{i}}")
                board.update(MemoryWritePayload(agent_role="child", output_snapshot=snapshot))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    board = build_stores(config, client=client)["board"]
    assert [i.content_summary for i in board.retrieve("parent", "", top_k=5)] == [f"from child {i}" for i in (0, 1, 2)]


def test_memory_manager_reads_by_stage_and_writes_to_writable_stores(client: pgmem.Client, tmp_path: Path) -> None:
    stores = build_stores(_yaml(_docs(tmp_path)), client=client)
    stores["convo"].update(_payload("The board is drawn with curses and redrawn every tick"))
    manager = MemoryManager(
        [
            {"name": "convo", "retrieve_stage": ["gen"], "top_k": 2},
            {"name": "docs", "write": False, "top_k": 1},
            {"name": "board", "top_k": 2},
        ],
        stores,
    )
    written = manager.update(_payload("Decided: the board is 20x20 cells", role="architect", blocks=[PNG]))
    assert written == {"convo": True, "board": True}  # docs is read-only (and write=False)
    result = manager.retrieve("coder", "how is the snake board drawn with curses?", stage="gen")
    assert result is not None
    text = result.formatted_text
    assert text.startswith("===== Related Memories =====") and text.endswith("===== End of Memory =====")
    assert text.index("--- convo ---") < text.index("--- docs ---") < text.index("--- board ---")
    assert "curses" in text and "20x20" in text
    assert result.has_multimodal() and {a["attachment_id"] for a in result.attachment_overview()} == {"att-1"}
    planning = manager.retrieve("coder", "how is the snake board drawn with curses?", stage="plan")
    assert planning is not None and "--- convo ---" not in planning.formatted_text  # convo is read at gen only
    readonly = MemoryManager([{"name": "board", "read": False}], stores)
    assert readonly.retrieve("coder", "anything") is None


def test_registry_accepts_a_custom_store_type(client: pgmem.Client) -> None:
    class EchoConfig(StoreConfig):
        reply: str = "echo"

    class EchoStore(BlackboardMemoryStore):
        type_name = "echo"

    register_memory_store("echo_for_test", EchoConfig, lambda n, c, cl: EchoStore(n, c, client=cl), "echoes")  # type: ignore[arg-type]
    (config,) = parse_memory_config([{"name": "e", "type": "echo_for_test", "config": {"reply": "hi"}}])
    assert config.config.reply == "hi"  # type: ignore[attr-defined]
    with pytest.raises(pgmem.Conflict):
        register_memory_store("echo_for_test", EchoConfig, lambda n, c, cl: EchoStore(n, c, client=cl))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (
            {"memory": [{"name": "a", "type": "blackboard"}, {"name": "a", "type": "simple"}]},
            r"memory\[1\].name: duplicate",
        ),
        ({"memory": [{"name": "a", "type": "redis"}]}, r"memory\[0\].type: unknown memory store type 'redis'"),
        (
            {"memory": [{"name": "a", "type": "blackboard", "config": {"max_items": 0}}]},
            r"memory\[0\].config.max_items",
        ),
        (
            {"memory": [{"name": "a", "type": "blackboard", "config": {"max_itemz": 5}}]},
            r"memory\[0\].config.max_itemz",
        ),
        ({"memory": [{"name": "a", "type": "file", "config": {"file_sources": []}}]}, r"config.file_sources"),
        (
            {
                "memory": [
                    {
                        "name": "a",
                        "type": "file",
                        "config": {"file_sources": [{"path": "x"}], "chunk_size": 100, "chunk_overlap": 100},
                    }
                ]
            },
            "chunk_overlap",
        ),
        (
            {
                "memory": [
                    {"name": "a", "type": "file", "config": {"file_sources": [{"path": "x", "encoding": "nope"}]}}
                ]
            },
            "encoding",
        ),
        ({"memory": [{"name": "a", "type": "simple", "config": {"rescore": "bm25"}}]}, r"memory\[0\].config.rescore"),
        ({"memory": [{"name": "bad\x00name", "type": "simple"}]}, r"memory\[0\].name"),
        ({"memory": [{"name": "", "type": "simple"}]}, r"memory\[0\].name"),
        ({"memory": [["not", "a", "mapping"]]}, r"memory\[0\]"),
        ({"memory": {"name": "a"}}, "expected a list"),
        ({"memroy": []}, "unknown top-level keys"),
    ],
)
def test_bad_configuration_is_a_clear_error(config: Any, match: str, client: pgmem.Client, dsn: str) -> None:
    before = table_counts(dsn)
    with pytest.raises(ConfigError, match=match):
        build_stores(config, client=client)
    assert table_counts(dsn) == before


def test_bad_yaml_and_bad_attachments(client: pgmem.Client, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_memory_config("memory:\n  - name: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_memory_config(tmp_path / "missing.yaml")
    stores = build_stores([{"name": "board", "type": "blackboard"}], client=client)
    for attachments, match in (
        ([{"name": "nope"}], "no memory store named 'nope'"),
        ([{"name": "board"}, {"name": "board"}], "attached twice"),
        ([{"name": "board", "top_k": 0}], r"memories\[0\].top_k"),
        ([{"name": "board", "similarity_threshold": 2}], "similarity_threshold"),
        ([{"name": "board", "read": "yes please"}], r"memories\[0\].read"),
        ({"name": "board"}, "expected a list"),
    ):
        with pytest.raises(ConfigError, match=match):
            MemoryManager(attachments, stores)  # type: ignore[arg-type]


def test_bad_input_writes_nothing(client: pgmem.Client, dsn: str) -> None:
    stores = build_stores([{"name": "convo", "type": "simple"}, {"name": "board", "type": "blackboard"}], client=client)
    before = table_counts(dsn)
    for store in stores.values():
        with pytest.raises(pgmem.InvalidInput):
            store.update(_payload("a NUL \x00 in the output of the node"))
        with pytest.raises(pgmem.InvalidInput):
            store.update(_payload("an attachment that is not JSON", blocks=[{"block": {"data": float("nan")}}]))
        with pytest.raises(pgmem.InvalidInput):
            store.update(_payload("a role with a NUL byte in it", role="co\x00der"))
        with pytest.raises(pgmem.InvalidInput):
            store.update("not a payload")  # type: ignore[arg-type]
        for top_k in (0, -1, "3", True):
            with pytest.raises(pgmem.InvalidInput):
                store.retrieve("qa", "query", top_k=top_k)  # type: ignore[arg-type]
        with pytest.raises(pgmem.InvalidInput):
            store.retrieve("qa", "query", similarity_threshold=5)
        with pytest.raises(pgmem.InvalidInput):
            store.retrieve("qa", 42)  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        stores["convo"].retrieve("qa", "nul \x00 query")
    with pytest.raises(pgmem.InvalidInput):
        stores["board"].update({"agent_role": 3})  # type: ignore[arg-type]
    assert table_counts(dsn) == before
    # a name taken by a store of another type is a conflict, not a silent change of type
    with pytest.raises(pgmem.Conflict, match="is a 'simple' store"):
        build_stores([{"name": "convo", "type": "blackboard"}], client=client)
