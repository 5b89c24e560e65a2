"""The same operations on DevAll's stores and on pgmem's, results compared (blackboard, simple, file),
random operation sequences included, and the simple store's ranking agreement measured."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import pgmem
from pgmem.stores import MemoryContentSnapshot, MemoryManager, MemoryWritePayload, build_stores, extract_key_content
from tests.seeds.chatdev import devall

ns = devall.load()
HASHING = {"embedding": {"provider": "hashing", "dimension": 384}}

WORDS = (
    "snake board curses terminal score deploy friday review design api database queue retry cache index "
    "player level render frame test coverage bug fix release docs"
).split()
TEMPLATED = [
    "You are a careful engineer, ",
    "User will input a task, ",
    "You need to answer briefly, ",
    "你是一位程序员，",
    "用户会输入需求，",
]
PNG = {"role": "assistant", "block": {"type": "image", "attachment": {
    "attachment_id": "att-1", "mime_type": "image/png", "name": "b.png", "size": 4, "data": "iVBORw==",
}}}  # fmt: skip


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _text(rng: random.Random) -> str:
    """Short outputs, long multi-sentence ones with DevAll's templated phrases, Chinese punctuation,
    stray whitespace and blanks: the cases where summaries are computed differently."""
    kind = rng.random()
    if kind < 0.1:
        return rng.choice(["", "   ", "\n"])
    if kind < 0.35:
        return "  " + _sentence(rng, rng.randint(1, 12)) + " \n"
    parts = []
    for _ in range(rng.randint(2, 7)):
        lead = rng.choice(TEMPLATED) if rng.random() < 0.3 else ""
        end = rng.choice([". ", "\n", "。", "！", "? ", "；"])
        parts.append(lead + _sentence(rng, rng.randint(2, 30)) + end)
    return "".join(parts) * rng.choice([1, 1, 1, 4])


def _payloads(theirs_module: Any, text: str, inputs: str, role: str, blocks: list[Any], mode: str) -> tuple[Any, Any]:
    """The same write as DevAll's payload and as pgmem's."""
    snap = theirs_module.MemoryContentSnapshot
    out_t = None if mode == "no-output" else snap(text=text, blocks=list(blocks))
    in_t = snap(text=inputs, blocks=[]) if mode != "no-input" else None
    theirs = theirs_module.MemoryWritePayload(
        agent_role=role, inputs_text=inputs, input_snapshot=in_t, output_snapshot=out_t
    )
    ours = MemoryWritePayload(
        agent_role=role,
        inputs_text=inputs,
        input_snapshot=None if in_t is None else MemoryContentSnapshot(text=inputs),
        output_snapshot=None if out_t is None else MemoryContentSnapshot(text=text, blocks=list(blocks)),
    )
    return theirs, ours


def _found(store: Any, query: str, top_k: int) -> list[Any]:
    """DevAll's ``retrieve`` as its manager calls it (a snapshot query, no threshold)."""
    return list(store.retrieve("r", ns.memory_base.MemoryContentSnapshot(text=query), top_k, -1.0))


def _view(item: Any) -> tuple[str, dict[str, Any]]:
    return item.content_summary, {k: v for k, v in item.metadata.items()}


# -- blackboard ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_blackboard_random_sequences_agree(client: pgmem.Client, seed: int) -> None:
    rng = random.Random(seed)
    max_items = rng.choice([1, 3, 7])
    theirs = devall.store(ns, "board", "blackboard", {"max_items": max_items})
    theirs.load()
    ours = build_stores([{"name": f"board{seed}", "type": "blackboard", "config": {"max_items": max_items}}],
                        client=client)[f"board{seed}"]  # fmt: skip
    for _ in range(40):
        if rng.random() < 0.6:
            mode = rng.choice(["both", "both", "no-output", "no-input"])
            their_p, our_p = _payloads(
                ns.memory_base, _text(rng), _sentence(rng, rng.randint(0, 5)), rng.choice(["qa", "dev"]),
                [PNG] if rng.random() < 0.2 else [], mode,
            )  # fmt: skip
            before = [i.id for i in theirs.contents]
            theirs.update(their_p)
            assert ours.update(our_p) == ([i.id for i in theirs.contents] != before)  # stored where DevAll did
        else:
            top_k = rng.randint(1, 10)
            got_t = [_view(i) for i in _found(theirs, "q", top_k)]
            got_o = [_view(i) for i in ours.retrieve("r", "q", top_k)]
            assert got_o == got_t
    assert [_view(i) for i in ours.items()] == [_view(i) for i in theirs.contents]


def _record(item: Any) -> dict[str, Any]:
    """A stored item as DevAll writes it (``to_dict``), without its id, time and vector."""

    def snap(s: Any) -> Any:
        return None if s is None else {"text": s.text, "blocks": list(s.blocks)}

    return {"content_summary": item.content_summary, "metadata": dict(item.metadata),
            "input_snapshot": snap(item.input_snapshot), "output_snapshot": snap(item.output_snapshot)}  # fmt: skip


@pytest.mark.parametrize("mode", ["no-output", "no-input", "both"])
def test_blackboard_stores_devalls_record(client: pgmem.Client, mode: str) -> None:
    """An update without an output (or an input) stores the record DevAll stores, snapshots included."""
    theirs = devall.store(ns, "board", "blackboard", {})
    ours = build_stores([{"name": "rec", "type": "blackboard", "config": {}}], client=client)["rec"]
    their_p, our_p = _payloads(ns.memory_base, " the answer ", "  the task as given ", "pm", [PNG], mode)
    theirs.update(their_p)
    assert ours.update(our_p)
    assert [_record(i) for i in ours.items()] == [_record(i) for i in theirs.contents]


def test_blackboard_through_the_managers_agrees(client: pgmem.Client) -> None:
    """DevAll's MemoryManager re-ranks the board's items (recency, length, the query's words): the same
    items come back in the same order, and the same context block."""
    theirs = devall.store(ns, "board", "blackboard", {})
    ours = build_stores([{"name": "board", "type": "blackboard", "config": {}}], client=client)
    rng = random.Random(11)
    for _ in range(8):
        their_p, our_p = _payloads(ns.memory_base, _text(rng), "in", "qa", [], "both")
        theirs.update(their_p)
        ours["board"].update(our_p)
    attachment = {"name": "board", "top_k": 5}
    their_m = ns.memory_base.MemoryManager(
        [ns.memory_configs.MemoryAttachmentConfig.from_dict(attachment, path="memories[0]")], {"board": theirs}
    )
    our_m = MemoryManager([attachment], ours)
    for query in ("snake board", "release", ""):
        got_t = their_m.retrieve(
            "r", ns.memory_base.MemoryContentSnapshot(text=query), ns.enums.AgentExecFlowStage.GEN_STAGE
        )
        got_o = our_m.retrieve("r", query, "gen")
        assert got_o is not None and got_t is not None
        assert [i.content_summary for i in got_o.items] == [i.content_summary for i in got_t.items]
        assert got_o.formatted_text == got_t.formatted_text


# -- simple ----------------------------------------------------------------------------------------------


def test_summaries_are_devalls() -> None:
    rng = random.Random(7)
    theirs = devall.store(ns, "s", "simple", {})
    for _ in range(400):
        text = f"Input: {_sentence(rng, 3)}\nOutput: {_text(rng)}"
        assert extract_key_content(text) == theirs._extract_key_content(text)


@pytest.mark.parametrize("seed", range(4))
def test_simple_random_sequences_agree(client: pgmem.Client, seed: int) -> None:
    rng = random.Random(100 + seed)
    theirs = devall.store(ns, "convo", "simple", {})
    name = f"convo{seed}"
    ours = build_stores([{"name": name, "type": "simple", "config": HASHING}], client=client)[name]
    pool: list[str] = []
    for _ in range(60):
        if rng.random() < 0.7:
            text = rng.choice(pool) if pool and rng.random() < 0.25 else _text(rng)  # repeats: de-duplicated
            pool.append(text)
            their_p, our_p = _payloads(ns.memory_base, text, _sentence(rng, 3), "dev", [], "both")
            theirs.update(their_p)
            ours.update(our_p)
        else:
            query = _sentence(rng, rng.randint(1, 6))
            top_k = rng.randint(1, 4)
            got_t = [i.content_summary for i in _found(theirs, query, top_k)]
            got_o = [i.content_summary for i in ours.retrieve("r", query, top_k)]
            assert set(got_o) == set(got_t) or _near_tie(got_o, got_t), (query, got_o, got_t)
    assert [i.content_summary for i in ours.items()] == [i.content_summary for i in theirs.contents]
    assert [_view(i)[1] for i in ours.items()] == [_view(i)[1] for i in theirs.contents]


def _near_tie(ours: list[str], theirs: list[str]) -> bool:
    """Rankings may differ only at the last place (float32 sums in FAISS vs float64 in Postgres)."""
    return len(ours) == len(theirs) and ours[:-1] == theirs[:-1]


def test_simple_store_keeps_the_newest_1000(client: pgmem.Client) -> None:
    theirs = devall.store(ns, "cap", "simple", {})
    ours = build_stores([{"name": "cap", "type": "simple", "config": HASHING}], client=client)["cap"]
    for i in range(1003):
        output = f"result number {i} of the nightly build"
        their_p, our_p = _payloads(ns.memory_base, output, f"build {i}", "ci", [], "both")
        theirs.update(their_p)
        ours.update(our_p)
    assert len(theirs.contents) == ours.count_memories() == 1000
    assert [i.content_summary for i in ours.items()] == [i.content_summary for i in theirs.contents]


def test_ranking_agreement(client: pgmem.Client) -> None:
    """Top-1 and top-3 agreement of the simple store with DevAll's over 200 queries (README)."""
    rng = random.Random(2026)
    theirs = devall.store(ns, "rank", "simple", {})
    ours = build_stores([{"name": "rank", "type": "simple", "config": HASHING}], client=client)["rank"]
    for _ in range(150):
        their_p, our_p = _payloads(ns.memory_base, _text(rng) or "x" * 30, _sentence(rng, 4), "dev", [], "both")
        theirs.update(their_p)
        ours.update(our_p)
    top1 = top3 = 0
    queries = 200
    for _ in range(queries):
        query = _sentence(rng, rng.randint(2, 8))
        got_t = [i.content_summary for i in _found(theirs, query, 3)]
        got_o = [i.content_summary for i in ours.retrieve("r", query, 3)]
        top1 += got_o[:1] == got_t[:1]
        top3 += set(got_o) == set(got_t)
    shares = f"top-1 {top1 / queries:.0%}, top-3 set {top3 / queries:.0%}"
    print(f"\nranking agreement with DevAll over {queries} queries: {shares}")
    assert top1 / queries >= 0.97 and top3 / queries >= 0.95


# -- file ------------------------------------------------------------------------------------------------


def _tree(root: Path, rng: random.Random) -> None:
    (root / "sub").mkdir(parents=True, exist_ok=True)
    (root / "guide.md").write_text("".join(_sentence(rng, 12) + ". " for _ in range(40)), encoding="utf-8")
    (root / "NOTES.MD").write_text("upper case suffix " * 10, encoding="utf-8")
    (root / "crlf.md").write_bytes(("line with windows ending\r\n" * 50).encode())
    (root / "zh.md").write_text("".join(_sentence(rng, 8) + "。" for _ in range(60)), encoding="utf-8")
    (root / "short.txt").write_text("a short note", encoding="utf-8")
    (root / "empty.md").write_text("", encoding="utf-8")
    (root / "sub" / "deep.md").write_text("\n".join(_sentence(rng, 15) for _ in range(50)), encoding="utf-8")


def _chunks(items: list[Any]) -> dict[tuple[str, int], tuple[str, dict[str, Any]]]:
    return {(i.metadata["file_path"], i.metadata["chunk_index"]): (i.content_summary, dict(i.metadata)) for i in items}


@pytest.mark.parametrize("recursive", [True, False])
def test_file_store_chunks_metadata_refresh_and_retrieval_agree(
    client: pgmem.Client, tmp_path: Path, recursive: bool
) -> None:
    rng = random.Random(5)
    docs = tmp_path / "docs"
    _tree(docs, rng)
    source = {"path": str(docs), "file_types": [".md", ".txt"], "recursive": recursive}
    theirs = devall.store(ns, "docs", "file", {"index_path": str(tmp_path / "idx.json"), "file_sources": [source]})
    theirs.load()
    ours = build_stores(
        [{"name": "docs", "type": "file", "config": {"file_sources": [source], "progress": False, **HASHING}}],
        client=client,
    )["docs"]
    assert _chunks(ours.items()) == _chunks(theirs.contents)
    assert not any(p.endswith("NOTES.MD") for p, _ in _chunks(ours.items()))  # suffixes match case

    # edit, delete, add; both re-index incrementally
    (docs / "guide.md").write_text("rewritten guide. " * 60, encoding="utf-8")
    (docs / "short.txt").unlink()
    (docs / "new.md").write_text("a new file about the release process", encoding="utf-8")
    theirs = devall.store(ns, "docs", "file", {"index_path": str(tmp_path / "idx.json"), "file_sources": [source]})
    theirs.load()
    ours.refresh()  # type: ignore[attr-defined]
    assert _chunks(ours.items()) == _chunks(theirs.contents)

    for _ in range(30):
        query = _sentence(rng, rng.randint(1, 6))
        top_k = rng.randint(1, 5)
        got_t = [i.content_summary for i in _found(theirs, query, top_k)]
        got_o = [i.content_summary for i in ours.retrieve("r", query, top_k)]
        assert got_o == got_t or _near_tie(got_o, got_t), query


def test_equal_score_file_chunks(client: pgmem.Client, tmp_path: Path) -> None:
    """Identical chunks in several files: both return the same chunks' text; pgmem orders the tied ones by
    file path (a documented difference: DevAll's order among them is FAISS's heap order over its
    directory listing, e.g. the first k indexed, last first)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("d.md", "b.md", "e.md", "a.md", "c.md"):
        (docs / name).write_text("release checklist for friday", encoding="utf-8")
    source = {"path": str(docs), "file_types": [".md"]}
    theirs = devall.store(ns, "ties", "file", {"index_path": str(tmp_path / "idx.json"), "file_sources": [source]})
    theirs.load()
    ours = build_stores(
        [{"name": "ties", "type": "file", "config": {"file_sources": [source], "progress": False, **HASHING}}],
        client=client,
    )["ties"]
    for top_k in (1, 2, 3, 5):
        got_t = _found(theirs, "release checklist for friday", top_k)
        got_o = ours.retrieve("r", "release checklist for friday", top_k)
        assert [i.content_summary for i in got_o] == [i.content_summary for i in got_t]
        paths = [i.metadata["file_path"] for i in got_o]
        assert paths == sorted(str(docs / n) for n in ("a.md", "b.md", "c.md", "d.md", "e.md"))[:top_k]
