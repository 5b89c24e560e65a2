"""JSON values pgmem stores in jsonb come back exactly: the same types and values (big ints, floats that
numeric would turn into ints, -0.0), the six characters ``\\u0000`` inside a string; too deep a value is
a typed error before any SQL."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgmem
from pgmem.checks import JSON_TAG, MAX_JSON_DEPTH, dump_json, load_json
from tests.conftest import table_counts


def same(a: Any, b: Any) -> bool:
    """Equal in type and value, -0.0 apart from 0.0 (``==`` says 1 == 1.0 and -0.0 == 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=12) | st.sampled_from(
    ["\\u0000", "a\\\\u0000", "-0.0", "1e+16", JSON_TAG, '{"__pgmem__":"-0.0"}', "dict"]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([-0.0, 0.0, 1e16, 1.5e300, -1.7976931348623157e308, 5e-324, 1e-7, 123456789012345678.0])
    | TEXT
)
KEYS = TEXT | st.just(JSON_TAG) | st.just("dict")
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSON)
def test_random_json_round_trips_through_jsonb_exactly(dsn: str, value: Any) -> None:
    text = dump_json(value, "value")
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT %s::jsonb::text", [text]).fetchone()
    assert row is not None
    assert same(load_json(row[0]), value), (value, text, row[0])


NUMBERS = {"big": 1e16, "huge": 1.5e300, "neg_zero": -0.0, "int": 2**70, "small": 1e-7, "tiny": 5e-324}


def test_message_json_fields_round_trip_exactly(client: pgmem.Client, dsn: str) -> None:
    """The issue's values through messages.add, read back by every decoder (pool and caller connection),
    while SQL still reads the numbers as numbers."""
    literal = "\\u0000"  # six characters: a backslash, u, four zeros
    call = {"id": "c1", "function": {"name": "f", "arguments": '{"text": "\\u0000"}'}, "note": literal}
    message = pgmem.Message(id="json-1", content="x", metadata=dict(NUMBERS, lit=literal), tool_calls=[call])
    message.instruct_content = {"n": -0.0, "lit": literal}
    assert client.messages.add("m", message)
    with psycopg.connect(dsn) as conn:
        for back in (client.messages.last("m")[0], client.messages.last("m", connection=conn)[0]):
            assert same(back.metadata, dict(NUMBERS, lit=literal))
            assert same(back.tool_calls, [call])
            assert same(back.instruct_content, {"n": -0.0, "lit": literal})
        row = conn.execute(
            "SELECT (metadata->>'big')::float8, (metadata->>'huge')::float8, metadata->>'int' FROM pgmem.messages"
        ).fetchone()
    assert row == (1e16, 1.5e300, str(2**70))
    store = client.stores
    store.register("s", "simple", {"n": 1e16, "z": -0.0})
    (config,) = [s.config for s in store.list() if s.name == "s"]
    assert same(config, {"n": 1e16, "z": -0.0})


def test_real_nul_character_in_json_is_refused(client: pgmem.Client, dsn: str) -> None:
    """A NUL character (not the six-character escape) is a typed error: jsonb cannot store \\u0000."""
    before = table_counts(dsn)
    for fields in ({"metadata": {"k": "a\x00"}}, {"tool_calls": [{"a\x00": 1}]}, {"metadata": {"k": "\\\x00"}}):
        with pytest.raises(pgmem.InvalidInput, match="NUL"):
            client.messages.add("m", pgmem.Message(content="x", **fields))
    assert table_counts(dsn) == before


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth - 1):
        value = [value] if i % 2 else {"k": value}
    return value


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 990, 5000])
def test_deep_json_is_a_typed_error_before_any_sql(client: pgmem.Client, dsn: str, depth: int) -> None:
    before = table_counts(dsn)
    deep = _nested(depth)
    deep_dict = {"d": deep}
    cases = [
        ("metadata", lambda: client.messages.add("m", pgmem.Message(content="x", metadata={"d": deep}))),
        ("tool_calls", lambda: client.messages.add("m", pgmem.Message(content="x", tool_calls=[{"d": deep}]))),
        ("instruct_content", lambda: client.messages.add("m", pgmem.Message(content="x", instruct_content=deep_dict))),
        ("metadata", lambda: client.messages.add_many("m", [pgmem.Message(content="x", metadata={"d": deep})])),
        ("metadata", lambda: client.queues.push("q", pgmem.Message(content="x", metadata={"d": deep}))),
        ("value", lambda: client.items.put(("docs",), "k", {"d": deep})),
        ("config", lambda: client.stores.register("s", "simple", {"d": deep})),
    ]
    for field, call in cases:
        with pytest.raises(pgmem.InvalidInput, match=f"{field} nests JSON deeper than {MAX_JSON_DEPTH}"):
            call()
    assert table_counts(dsn) == before


def test_json_at_the_depth_limit_round_trips(client: pgmem.Client) -> None:
    value = _nested(MAX_JSON_DEPTH - 1, -0.0)  # metadata={"d": value}: MAX_JSON_DEPTH levels
    assert client.messages.add("m", pgmem.Message(id="deep", content="x", metadata={"d": value}))
    assert same(client.messages.last("m")[0].metadata, {"d": value})


CONTENT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSON, content=CONTENT, name=TEXT)
def test_random_messages_round_trip_through_append_exactly(
    client: pgmem.Client, value: Any, content: str, name: str
) -> None:
    """messages.append sends its batch as one JSON document (json_to_recordset): the values, texts
    included, come back as add stores them."""
    message = pgmem.Message(content=content, name=name, metadata={"v": value}, tool_calls=[{"v": value}])
    assert client.messages.append("random", [message]) == 1
    back = client.messages.get_message(message.id)
    assert back.content == content and back.name == name
    assert same(back.metadata, {"v": value}) and same(back.tool_calls, [{"v": value}])
