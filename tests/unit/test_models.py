"""The message model, names of actions, the query loader and redaction (no database)."""

from __future__ import annotations

import copy
import json
import pickle
import re

import pytest

import pgmem
from pgmem.errors import redact
from pgmem.planning.statements import load, parse


class WritePRD:
    pass


def test_defaults() -> None:
    m = pgmem.Message(content="x")
    assert re.fullmatch(r"[0-9a-f]{32}", m.id)
    assert m.send_to == {"<all>"} and m.role == "user" and m.cause_by == "" and m.metadata == {}
    assert m.created_at.tzinfo is not None
    assert pgmem.Message(content="x").id != m.id


def test_names_of_classes_and_sets() -> None:
    m = pgmem.Message(content="x", cause_by=WritePRD, sent_from=WritePRD, send_to=[WritePRD, "Bob"])
    assert m.cause_by == f"{__name__}.WritePRD" == pgmem.any_to_str(WritePRD) == pgmem.any_to_str(WritePRD())
    assert m.send_to == {f"{__name__}.WritePRD", "Bob"}
    assert pgmem.Message(content="x", send_to="Bob").send_to == {"Bob"}
    assert pgmem.Message(content="x", send_to=set()).send_to == {"<all>"}


def test_equality_by_id_or_by_content_for_the_ignored_id() -> None:
    a = pgmem.Message(content="same")
    assert a == pgmem.Message(id=a.id, content="other content")
    assert a != pgmem.Message(content="same")
    i1 = pgmem.Message(id=pgmem.IGNORED_MESSAGE_ID, content="same")
    i2 = pgmem.Message(id=pgmem.IGNORED_MESSAGE_ID, content="same", role="other")
    assert i1 == i2 and hash(i1) == hash(i2)
    assert i1 != pgmem.Message(id=pgmem.IGNORED_MESSAGE_ID, content="different")
    assert a in [pgmem.Message(id=a.id, content="")]
    assert len({a, pgmem.Message(id=a.id, content="z")}) == 1


def test_query_files_parse() -> None:
    queries = parse("-- name: one\nSELECT 1;\n\n-- name: two\n-- a comment\nSELECT 2;\n")
    assert queries == {"one": "SELECT 1", "two": "-- a comment\nSELECT 2"}
    with pytest.raises(ValueError, match="twice"):
        parse("-- name: one\nSELECT 1;\n-- name: one\nSELECT 2;\n")
    for group in ("messages", "queues", "demo"):
        assert load(group)


def test_redact() -> None:
    assert redact("postgresql://bob:secret@host/db") == "postgresql://bob:***@host/db"
    assert redact("host=h password=secret user=u") == "host=h password=*** user=u"
    assert redact("postgresql://postgres:@/db?host=/tmp") == "postgresql://postgres:@/db?host=/tmp"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("content", None),
        ("content", 5),
        ("role", b"user"),
        ("id", 12),
        ("metadata", [("a", 1)]),
        ("tool_calls", "call"),
        ("tool_calls", [1]),
        ("name", 3),
        ("created_at", "yesterday"),
        ("instruct_content", "text"),
    ],
)
def test_a_field_of_the_wrong_type_is_invalid_input_naming_it(field: str, value: object) -> None:
    with pytest.raises(pgmem.InvalidInput, match=field):
        pgmem.Message(**{field: value})  # type: ignore[arg-type]


def test_dump_and_validate_round_trip_in_both_modes() -> None:
    m = pgmem.Message(content="x", send_to=["b", "a"], metadata={"k": [1]}, tool_calls=[{"id": "c1"}], name="n")
    assert m.model_dump(exclude={"id", "created_at"}) == {
        "content": "x",
        "instruct_content": None,
        "role": "user",
        "cause_by": "",
        "sent_from": "",
        "send_to": {"a", "b"},
        "metadata": {"k": [1]},
        "tool_calls": [{"id": "c1"}],
        "name": "n",
        "tool_call_id": None,
    }
    doc = json.loads(json.dumps(m.model_dump(mode="json")))
    assert doc["send_to"] == ["a", "b"] and doc["created_at"] == m.created_at.isoformat()
    back = pgmem.Message.model_validate(doc)
    assert back.model_dump() == m.model_dump()
    assert pgmem.Message.model_validate(m) is m
    assert pgmem.Message.model_validate({**doc, "unknown": 1}).id == m.id
    assert m.model_dump(include={"content"}) == {"content": "x"}


def test_copies_do_not_share_mutable_fields() -> None:
    m = pgmem.Message(content="x", send_to={"a"}, metadata={"k": 1})
    c = m.model_copy(update={"content": "y"})
    c.send_to.add("b")
    c.metadata["k"] = 2
    assert (m.content, m.send_to, m.metadata) == ("x", {"a"}, {"k": 1})
    assert c.id == m.id and c.content == "y"
    assert copy.deepcopy(m).model_dump() == m.model_dump() == pickle.loads(pickle.dumps(m)).model_dump()
    with pytest.raises(pgmem.InvalidInput, match="no field"):
        m.model_copy(update={"nope": 1})


def test_a_message_is_a_field_type_of_pydantic_models() -> None:
    from pydantic import BaseModel, ValidationError

    class History(BaseModel):
        messages: list[pgmem.Message]

    m = pgmem.Message(content="x", send_to={"PM"})
    h = History(messages=[m, {"content": "y", "role": "assistant"}])
    assert h.messages[0] is m and h.messages[1].role == "assistant"
    again = History.model_validate_json(h.model_dump_json())
    assert [x.model_dump() for x in again.messages] == [x.model_dump() for x in h.messages]
    assert h.model_dump()["messages"][0]["send_to"] == {"PM"}
    with pytest.raises(ValidationError, match="content"):
        History(messages=[{"content": 1}])
