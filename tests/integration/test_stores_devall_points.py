"""The points where pgmem's DevAll stores were compared with DevAll 0.1.0 (issue 35, item 8), pinned on
pgmem alone: what the differential tests in tests/seeds/chatdev check against DevAll's real code, and the
one documented difference (the order of equal-score file chunks)."""

from __future__ import annotations

from pathlib import Path

import pgmem
from pgmem.stores import MemoryContentSnapshot, MemoryManager, MemoryWritePayload, build_stores


def test_blackboard_reads_oldest_first_and_the_manager_newest_first(client: pgmem.Client) -> None:
    board = build_stores([{"name": "board", "type": "blackboard", "config": {}}], client=client)["board"]
    for text in ("first status of the build", "second status", "third status of the run"):
        board.update(MemoryWritePayload(agent_role="qa", output_snapshot=MemoryContentSnapshot(text=text)))
    store_order = [i.content_summary for i in board.retrieve("dev", "status", top_k=3)]
    assert store_order == ["first status of the build", "second status", "third status of the run"]
    # DevAll's manager ranks by recency (and length, and words): equal lengths and words, the newest first
    found = MemoryManager([{"name": "board", "top_k": 3}], {"board": board}).retrieve("dev", "status")
    assert found is not None
    assert [i.content_summary for i in found.items] == [
        "third status of the run",
        "first status of the build",  # 25 characters: length factor 1; "second status" (13) has 0.5
        "second status",
    ]


def test_blackboard_update_without_output_stores_the_input_snapshot(client: pgmem.Client) -> None:
    board = build_stores([{"name": "board", "type": "blackboard", "config": {}}], client=client)["board"]
    given = MemoryContentSnapshot(text="  the task as given  ")
    assert board.update(MemoryWritePayload(agent_role="pm", inputs_text="the task", input_snapshot=given))
    (item,) = board.items()
    assert item.content_summary == "the task as given"  # the input snapshot's text, stripped
    assert item.metadata == {"agent_role": "pm", "input_preview": "the task", "attachments": []}
    assert item.input_snapshot == given and item.output_snapshot is None


def test_file_chunks_carry_devalls_metadata_keys(client: pgmem.Client, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("how the board is drawn", encoding="utf-8")
    config = {"file_sources": [{"path": str(tmp_path), "file_types": [".md"]}]}
    docs = build_stores([{"name": "docs", "type": "file", "config": config}], client=client)["docs"]
    (hit,) = docs.retrieve("dev", "board", top_k=1)
    assert set(hit.metadata) == {  # DevAll 0.1.0's keys: "source_type", and no "source"
        "source_type", "file_path", "file_name", "file_hash", "file_size", "chunk_index", "total_chunks", "encoding",
    }  # fmt: skip
    assert hit.metadata["source_type"] == "file"


def test_equal_score_file_chunks_come_in_file_and_chunk_order(client: pgmem.Client, tmp_path: Path) -> None:
    # Identical chunks score alike; their order is the files' path order, then the chunks' order, and at
    # the top_k-th place the first of them in that order are kept.
    for name in ("d.md", "b.md", "e.md", "a.md", "c.md"):
        (tmp_path / name).write_text("release checklist for friday", encoding="utf-8")
    (tmp_path / "z.md").write_text("release checklist for friday deploy", encoding="utf-8")
    config = {"file_sources": [{"path": str(tmp_path), "file_types": [".md"]}]}
    docs = build_stores([{"name": "docs", "type": "file", "config": config}], client=client)["docs"]
    for top_k in (1, 2, 3, 5):
        got = docs.retrieve("dev", "release checklist for friday", top_k=top_k)
        assert [Path(i.metadata["file_path"]).name for i in got] == ["a.md", "b.md", "c.md", "d.md", "e.md"][:top_k]
    got = docs.retrieve("dev", "release checklist for friday", top_k=6)
    assert [Path(i.metadata["file_path"]).name for i in got][:5] == ["a.md", "b.md", "c.md", "d.md", "e.md"]
