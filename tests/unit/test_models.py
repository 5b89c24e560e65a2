"""The message model, names of actions, the query loader and redaction (no database)."""

from __future__ import annotations

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
