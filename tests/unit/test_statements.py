"""The named-query loader: ``-- name:`` blocks, ``-- fragment:`` blocks and their ``{{x}}`` expansion."""

from __future__ import annotations

import re

import pytest

from pgmem.planning import statements
from pgmem.planning.resources import resource_path
from pgmem.planning.rows import INSERT_COLUMNS, MessageRow, QueueItemRow

GROUPS = sorted(p.stem for p in resource_path("sql").glob("*.sql") if p.stem != statements.SHARED)


def test_a_fragment_is_included_where_it_is_named() -> None:
    text = """
-- fragment: cols
-- The columns (this comment documents the fragment and is not part of it).
a, b

-- name: one
-- Selects them.
SELECT {{cols}} FROM t;

-- name: two
SELECT {{ cols }}, c FROM t
"""
    assert statements.parse(text) == {
        "one": "-- Selects them.\nSELECT a, b FROM t",
        "two": "SELECT a, b, c FROM t",
    }


def test_fragments_nest_and_take_the_indentation_of_their_line() -> None:
    text = """
-- fragment: key
hashtext(%(ns)s)

-- fragment: cte
locked AS (
    SELECT pg_advisory_xact_lock(1, {{key}})
)

-- name: q
WITH {{cte}}
SELECT 1 FROM locked
"""
    assert statements.parse(text)["q"] == (
        "WITH locked AS (\n    SELECT pg_advisory_xact_lock(1, hashtext(%(ns)s))\n)\nSELECT 1 FROM locked"
    )
    indented = "-- fragment: two\nx,\ny\n\n-- name: q\nSELECT\n    {{two}}\nFROM t"
    assert statements.parse(indented)["q"] == "SELECT\n    x,\n    y\nFROM t"


def test_shared_fragments_are_visible_to_every_file() -> None:
    assert statements.parse("-- name: q\nSELECT {{x}}", {"x": "1"}) == {"q": "SELECT 1"}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("-- name: q\nSELECT {{nope}}", r"query 'q' includes an unknown fragment \{\{nope\}\}"),
        ("-- fragment: a\n{{b}}\n-- fragment: b\n{{a}}\n-- name: q\nSELECT {{a}}", "includes itself"),
        ("-- fragment: a\n1\n-- fragment: a\n2\n", "defined twice"),
        ("-- fragment: a\n1\n-- name: a\nSELECT 1", "defined twice"),
        ("-- name: q\nSELECT 1;\n-- name: q\nSELECT 2;", "defined twice"),
        ("-- fragment: a\n-- only a comment\n", "empty"),
        ("-- fragment: a\nx  -- trailing\n", "must not end with a comment"),
        ("-- fragment: a\nSELECT 1;\n", "must not end with a comment or a semicolon"),
    ],
)
def test_a_bad_file_fails_to_load(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        statements.parse(text)


def test_a_file_cannot_redefine_a_shared_fragment() -> None:
    with pytest.raises(ValueError, match="already a shared fragment"):
        statements.parse("-- fragment: x\n2\n-- name: q\nSELECT {{x}}", {"x": "1"})


def test_single_braces_stay_for_psycopg_sql_format() -> None:
    assert statements.parse("-- name: q\nSELECT 1 LIMIT {limit}") == {"q": "SELECT 1 LIMIT {limit}"}


@pytest.mark.parametrize("group", GROUPS)
def test_every_query_file_loads_with_its_fragments_expanded(group: str) -> None:
    queries = statements.load(group)
    assert queries
    for name, text in queries.items():
        code = re.sub(r"--[^\n]*", "", text)  # comments may name a fragment
        assert "{{" not in code and "}}" not in code, f"{group}.{name}"
        assert "-- fragment:" not in text


def test_every_shared_fragment_is_used() -> None:
    raw = "\n".join((resource_path("sql") / f"{g}.sql").read_text(encoding="utf-8") for g in GROUPS)
    shared = (resource_path("sql") / f"{statements.SHARED}.sql").read_text(encoding="utf-8")
    raw, shared = (re.sub(r"--[^\n]*", "", t) for t in (raw, shared))  # used in code, not only named
    from_python = {"message_columns", "message_column_names"}  # pgmem.planning composes SQL with these
    used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", raw + "\n" + shared)) | from_python
    assert set(statements.fragments()) <= used


def test_fragment_for_python_code() -> None:
    assert statements.fragment("settle_lock_key") == "28781, hashtext(%(ns)s || '/' || %(memory)s)"
    with pytest.raises(KeyError, match="no fragment 'nope'"):
        statements.fragment("nope")


def test_the_message_fragments_agree_with_the_row_codec() -> None:
    """What rows.encode writes and rows.decode reads is what the fragments name, in the same order (the
    columns of every statement are checked against the database in tests/integration/test_rows.py)."""
    assert tuple(re.split(r",\s*", statements.fragment("message_fields"))) == INSERT_COLUMNS
    arrays = re.findall(r"%\((\w+)\)b", statements.fragment("message_arrays"))
    assert tuple(arrays) == INSERT_COLUMNS
    selected = [re.sub(r"^m\.|::\w+$", "", c) for c in re.split(r",\s*", statements.fragment("message_columns"))]
    assert ("seq", *selected) == MessageRow._fields
    item = statements.load("queues")["peek"]
    assert QueueItemRow._fields == tuple(
        c.removeprefix("q.") for c in re.split(r",\s*", item.split("SELECT ", 1)[1])[: len(QueueItemRow._fields)]
    )


def test_search_statements_select_the_message_row() -> None:
    from pgmem.planning.search import MESSAGE_COLUMNS

    assert MESSAGE_COLUMNS == "m.seq, " + statements.fragment("message_columns")


def test_a_fragment_named_in_a_comment_is_not_included() -> None:
    """Included there, a fragment of several lines would leave the comment after its first line."""
    text = """
-- fragment: two_lines
a,
b

-- name: q
-- reads {{two_lines}} of t
SELECT {{two_lines}} FROM t -- then {{two_lines}} again
"""
    expected = "-- reads {{two_lines}} of t\nSELECT a,\nb FROM t -- then {{two_lines}} again"
    assert statements.parse(text) == {"q": expected}
