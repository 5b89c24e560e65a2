"""Every method of the message repository, sync and async, on the real Postgres."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from pydantic import BaseModel

import pgmem


class Design(BaseModel):
    modules: list[str]
    notes: str = ""


class WriteCode:
    pass


def msgs(*contents: str, **fields: object) -> list[pgmem.Message]:
    return [pgmem.Message(content=c, **fields) for c in contents]  # type: ignore[arg-type]


def test_round_trip_of_every_field(client: pgmem.Client) -> None:
    created = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    sent = pgmem.Message(
        id="msg-1",
        content="héllo 🌍",
        instruct_content=Design(modules=["a", "b"], notes="n"),
        role="assistant",
        cause_by=WriteCode,
        sent_from="Alice",
        send_to={"Bob", "Carol"},
        metadata={"nested": {"list": [1, 2.5, None, True], "s": "x"}},
        tool_calls=[{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        name="tool-name",
        tool_call_id="call_0",
        created_at=created,
    )
    client.messages.add("m", sent)
    got = client.messages.get_message("msg-1")
    assert got.model_dump(exclude={"instruct_content"}) == sent.model_dump(exclude={"instruct_content"})
    assert isinstance(got.instruct_content, Design) and got.instruct_content == sent.instruct_content
    assert got.cause_by == f"{__name__}.WriteCode"
    client.messages.add("m", pgmem.Message(id="msg-2", content="d", instruct_content={"plain": [1, 2]}))
    assert client.messages.get_message("msg-2").instruct_content == {"plain": [1, 2]}
    with pytest.raises(pgmem.NotFound):
        client.messages.get_message("missing")


def test_add_and_add_many_return_values_and_order(client: pgmem.Client) -> None:
    repo = client.messages
    a, b, c = msgs("a", "b", "c")
    assert repo.add("m", a) is True and a.seq is not None
    assert repo.add("m", a) is False
    assert repo.add_many("m", [b, a, c, b]) == 2  # a already there, b repeated in the batch
    assert [m.content for m in repo.last("m")] == ["a", "b", "c"]
    assert repo.add_many("m", []) == 0
    # The same message in another memory is a new entry but the same row.
    assert repo.add_many("other", [c, a]) == 2
    assert [m.content for m in repo.last("other")] == ["c", "a"]
    assert sorted(repo.memories()) == ["m", "other"]


def test_append_stores_new_messages_in_order(client: pgmem.Client, dsn: str) -> None:
    """append: every field round-trips as through add; the messages are ordinary rows (searchable, in
    the memory's order after what add_many put there); a stored or repeated id writes nothing."""
    repo = client.messages
    created = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    full = pgmem.Message(
        content='héllo 🌍 "quoted" \\ back\nslash\ttab',
        instruct_content=Design(modules=["a"], notes="n"),
        role="assistant",
        cause_by=WriteCode,
        sent_from="Alice",
        send_to={"Bob", "Carol"},
        metadata={"nested": {"list": [1, 2.5, None, True], "big": 1e300, "z": -0.0}, "__pgmem__": 1},
        tool_calls=[{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        name="tool-name",
        tool_call_id="call_0",
        created_at=created,
    )
    first = pgmem.Message(content="first")
    assert repo.add_many("m", [first]) == 1
    assert repo.append("m", [full, *msgs("second runs", "third")]) == 3
    assert repo.append("m", []) == 0
    got = repo.last("m")
    assert [m.content for m in got] == ["first", full.content, "second runs", "third"]
    back = repo.get_message(full.id)
    assert back.model_dump(exclude={"instruct_content"}) == full.model_dump(exclude={"instruct_content"})
    assert back.instruct_content == full.instruct_content
    assert back.metadata["nested"]["big"] == 1e300 and str(back.metadata["nested"]["z"]) == "-0.0"
    assert [m.content for m in repo.search_text("m", "run")] == ["second runs"]
    assert [m.content for m in repo.by_action("m", WriteCode)] == [full.content]
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT content_hash = sha256(convert_to(content, 'UTF8')) FROM pgmem.messages WHERE id = %s",
            [full.id],
        ).fetchone()
    assert row == (True,)

    before = repo.count("m"), len(repo.memories())
    for batch in ([pgmem.Message(content="new"), full], [first], [*msgs("x")] * 2):
        with pytest.raises(pgmem.Conflict, match="nothing was written"):
            repo.append("m", batch)
        with pytest.raises(pgmem.Conflict):
            repo.append("elsewhere", batch)  # stored in another memory of the namespace: still not new
    assert (repo.count("m"), len(repo.memories())) == before


def test_reads(client: pgmem.Client) -> None:
    repo = client.messages
    repo.add_many(
        "m",
        [
            pgmem.Message(
                content="users running the game", role="pm", cause_by="WritePRD", sent_from="PM", send_to={"Architect"}
            ),
            pgmem.Message(content="design of the board", role="arch", cause_by="WriteDesign", sent_from="Architect"),
            pgmem.Message(
                content="code for the board",
                role="eng",
                cause_by=WriteCode,
                sent_from="Engineer",
                send_to={"Reviewer", "Architect"},
            ),
            pgmem.Message(
                content="more code", role="eng", cause_by=WriteCode, sent_from="Engineer", send_to={"Reviewer"}
            ),
        ],
    )
    content = lambda found: [m.content for m in found]  # noqa: E731
    assert content(repo.last("m", 2)) == ["code for the board", "more code"]
    assert content(repo.last("m", 10)) == content(repo.last("m"))
    assert content(repo.by_action("m", WriteCode)) == ["code for the board", "more code"]
    assert content(repo.by_action("m", f"{__name__}.WriteCode")) == ["code for the board", "more code"]
    assert content(repo.by_actions("m", ["WritePRD", "WriteDesign"])) == [
        "users running the game",
        "design of the board",
    ]
    assert repo.by_actions("m", []) == []
    assert content(repo.by_role("m", "arch")) == ["design of the board"]
    assert content(repo.by_sender("m", "Engineer")) == ["code for the board", "more code"]
    assert content(repo.by_recipient("m", "Architect")) == [
        "users running the game",
        "design of the board",
        "code for the board",
    ]
    assert content(repo.by_recipient("m", "Architect", include_broadcast=False)) == [
        "users running the game",
        "code for the board",
    ]
    assert content(repo.by_content("m", "board")) == ["design of the board", "code for the board"]
    assert content(repo.search_text("m", "run")) == ["users running the game"]  # English stemming
    assert content(repo.search_text("m", "board -design")) == ["code for the board"]  # websearch syntax
    assert repo.count("m") == 4 and repo.count("nothing") == 0
    assert repo.at("m", 0).content == "users running the game"
    assert repo.at("m", -1).content == "more code"
    assert repo.at("m", 4) is None and repo.at("m", -5) is None
    assert repo.actions("m") == sorted(["WritePRD", "WriteDesign", f"{__name__}.WriteCode"])
    assert repo.count_actions("m") == 3
    assert ("test", "m", "eng", f"{__name__}.WriteCode", 2) in repo.stats()


def test_find_news(client: pgmem.Client) -> None:
    repo = client.messages
    stored = msgs("s0", "s1", "s2", "s3")
    repo.add_many("m", stored)
    fresh = pgmem.Message(content="fresh")
    observed = [stored[0], fresh, stored[3], stored[0]]
    assert repo.find_news("m", observed) == [fresh]
    assert repo.new_positions("m", observed) == [1]
    assert repo.find_news("m", observed, k=2) == [stored[0], fresh, stored[0]]
    assert repo.find_news("m", []) == []
    assert repo.find_news("empty", observed) == observed


def test_deletes(client: pgmem.Client, dsn: str) -> None:
    repo = client.messages
    a, b, c, d = msgs("a", "b", "c", "d")
    repo.add_many("m", [a, b, c, d])
    repo.add("keep", b)
    assert repo.delete("m", b) is True and repo.delete("m", b) is False
    assert repo.delete("m", c.id) is True
    assert repo.get_message(b.id).content == "b"  # still held by "keep"
    with pytest.raises(pgmem.NotFound):
        repo.get_message(c.id)  # held by nothing: gone
    newest = repo.delete_newest("m")
    assert newest is not None and newest.content == "d"
    assert repo.trim("m", 0) == 1 and repo.count("m") == 0
    repo.add_many("m", msgs("1", "2", "3", "4", "5"))
    assert repo.trim("m", 2) == 3 and [m.content for m in repo.last("m")] == ["4", "5"]
    assert repo.trim("m", 10) == 0
    assert repo.clear("m") == 2 and repo.clear("m") == 0
    assert repo.delete_newest("m") is None
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT content FROM pgmem.messages ORDER BY 1").fetchall() == [("b",)]


def test_namespaces_isolate(client: pgmem.Client) -> None:
    client.messages.add("m", pgmem.Message(id="same", content="in test"))
    other = client.with_namespace("other")
    assert other.messages.count("m") == 0 and other.messages.memories() == []
    other.messages.add("m", pgmem.Message(id="same", content="in other"))
    assert client.messages.get_message("same").content == "in test"
    assert other.messages.get_message("same").content == "in other"
    assert other.namespace == "other"


async def test_async_twin(aclient: pgmem.AsyncClient) -> None:
    repo = aclient.messages
    a, b, c = msgs("alpha runs", "beta", "gamma", cause_by="Act")
    assert await repo.add("m", a) is True
    assert await repo.add_many("m", [b, c]) == 2
    assert await repo.append("m", msgs("delta")) == 1
    assert (await repo.delete_newest("m")).content == "delta"  # type: ignore[union-attr]
    assert [m.content for m in await repo.last("m", 2)] == ["beta", "gamma"]
    assert len(await repo.by_action("m", "Act")) == 3
    assert [m.content for m in await repo.search_text("m", "run")] == ["alpha runs"]
    assert await repo.find_news("m", [a, pgmem.Message(content="x")], k=0) != []
    assert (await repo.at("m", -1)).content == "gamma"  # type: ignore[union-attr]
    assert (await repo.delete_newest("m")).content == "gamma"  # type: ignore[union-attr]
    assert await repo.count("m") == 2
    assert await repo.clear("m") == 2


def test_sync_code_is_generated_from_async() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "tools/gen_sync.py", "--check"], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
