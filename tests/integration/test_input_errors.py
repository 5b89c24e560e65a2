"""Bad input gets a typed error and leaves every table unchanged."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem.integrations.metagpt import Memory
from tests.conftest import table_counts

NUL = "a\x00b"
SURROGATE = "a\ud800b"


def _seed(client: pgmem.Client) -> None:
    client.messages.add_many("seed", [pgmem.Message(content=f"seed {i}") for i in range(3)])


BAD_MESSAGES: list[tuple[str, dict[str, Any]]] = [
    ("nul in content", {"content": NUL}),
    ("surrogate in content", {"content": SURROGATE}),
    ("nul in role", {"content": "x", "role": NUL}),
    ("surrogate in cause_by", {"content": "x", "cause_by": SURROGATE}),
    ("nul in sent_from", {"content": "x", "sent_from": NUL}),
    ("nul in send_to", {"content": "x", "send_to": {"ok", NUL}}),
    ("nul in name", {"content": "x", "name": NUL}),
    ("surrogate in tool_call_id", {"content": "x", "tool_call_id": SURROGATE}),
    ("nul in metadata value", {"content": "x", "metadata": {"k": NUL}}),
    ("nul in metadata key", {"content": "x", "metadata": {NUL: 1}}),
    ("surrogate in metadata", {"content": "x", "metadata": {"k": [SURROGATE]}}),
    ("NaN in metadata", {"content": "x", "metadata": {"k": math.nan}}),
    ("inf in metadata", {"content": "x", "metadata": {"k": math.inf}}),
    ("object in metadata", {"content": "x", "metadata": {"k": object()}}),
    ("bytes in metadata", {"content": "x", "metadata": {"k": b"raw"}}),
    ("nul in instruct_content", {"content": "x", "instruct_content": {"k": NUL}}),
    ("nul in tool_calls", {"content": "x", "tool_calls": [{"id": NUL}]}),
    ("content too large", {"content": "x" * (pgmem.MAX_CONTENT_BYTES + 1)}),
    ("multibyte content too large", {"content": "é" * (pgmem.MAX_CONTENT_BYTES // 2 + 1)}),
    ("metadata too large", {"content": "x", "metadata": {"k": "y" * pgmem.MAX_JSON_BYTES}}),
    ("role too long", {"content": "x", "role": "r" * (pgmem.MAX_NAME_CHARS + 1)}),
    ("bad id characters", {"content": "x", "id": "has space"}),
    ("id with reserved ~", {"content": "x", "id": "0~abc"}),
    ("id too long", {"content": "x", "id": "i" * 129}),
]


@pytest.mark.parametrize(("case", "fields"), BAD_MESSAGES, ids=[c for c, _ in BAD_MESSAGES])
def test_bad_message_is_rejected_and_nothing_written(
    client: pgmem.Client, dsn: str, case: str, fields: dict[str, Any]
) -> None:
    _seed(client)
    before = table_counts(dsn)
    message = pgmem.Message(**fields)
    with pytest.raises(pgmem.InvalidInput):
        client.messages.add("m", message)
    # The same message in the middle and at the end of a batch rejects the whole batch.
    good = [pgmem.Message(content=f"good {i}") for i in range(10)]
    with pytest.raises(pgmem.InvalidInput, match="message 5"):
        client.messages.add_many("m", good[:5] + [message] + good[5:])
    with pytest.raises(pgmem.InvalidInput):
        client.queues.push("q", message)
    with pytest.raises(pgmem.InvalidInput):
        client.queues.publish("team", message)
    assert table_counts(dsn) == before


def test_limits_are_inclusive(client: pgmem.Client) -> None:
    at_limit = [
        pgmem.Message(content="x" * pgmem.MAX_CONTENT_BYTES),
        pgmem.Message(content="x", role="r" * pgmem.MAX_NAME_CHARS),
        # {"k":"..."} is 8 bytes of JSON around the value.
        pgmem.Message(content="x", metadata={"k": "y" * (pgmem.MAX_JSON_BYTES - 8)}),
    ]
    assert client.messages.add_many("limits", at_limit) == 3
    stored = client.messages.last("limits")
    assert len(stored[0].content) == pgmem.MAX_CONTENT_BYTES
    assert len(stored[2].metadata["k"]) == pgmem.MAX_JSON_BYTES - 8


def test_invalid_message_last_in_a_large_batch(client: pgmem.Client, dsn: str) -> None:
    before = table_counts(dsn)
    batch = [pgmem.Message(content=f"m{i}") for i in range(10_000)] + [pgmem.Message(content=NUL)]
    with pytest.raises(pgmem.InvalidInput, match="message 10000"):
        client.messages.add_many("big", batch)
    assert table_counts(dsn) == before


@pytest.mark.parametrize("namespace", ["", "has space", "-lead", "ns;drop", "n" * 64, "ns\x00", "é"])
def test_bad_namespace(dsn: str, namespace: str) -> None:
    with pytest.raises(pgmem.InvalidInput):
        pgmem.connect(dsn, namespace=namespace)
    with pgmem.connect(dsn, namespace="ok") as client, pytest.raises(pgmem.InvalidInput):
        client.with_namespace(namespace)


@pytest.mark.parametrize("key", ["", " ", "a b", "k" * 256, "x'; DROP TABLE pgmem.messages; --", "\x00", "é"])
def test_bad_memory_key(client: pgmem.Client, dsn: str, key: str) -> None:
    before = table_counts(dsn)
    for call in (
        lambda: client.messages.add(key, pgmem.Message(content="x")),
        lambda: client.messages.add_many(key, [pgmem.Message(content="x")]),
        lambda: client.messages.last(key),
        lambda: client.messages.clear(key),
        lambda: client.queues.push(key, pgmem.Message(content="x")),
    ):
        with pytest.raises(pgmem.InvalidInput):
            call()
    assert table_counts(dsn) == before


def test_wrong_types_and_ranges(client: pgmem.Client, dsn: str) -> None:
    before = table_counts(dsn)
    with pytest.raises(pgmem.InvalidInput):
        client.messages.add("m", "just a string")  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        client.messages.add_many("m", [pgmem.Message(content="ok"), {"content": "dict"}])  # type: ignore[list-item]
    for bad_k in (-1, 1.5, True, "3"):
        with pytest.raises(pgmem.InvalidInput):
            client.messages.last("m", bad_k)  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        client.messages.at("m", "0")  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        client.messages.search_text("m", "q", limit=0)
    with pytest.raises(pgmem.InvalidInput):
        client.messages.by_content("m", NUL)
    with pytest.raises(pgmem.InvalidInput):
        client.messages.trim("m", -1)
    with pytest.raises(pgmem.InvalidInput):
        Memory(client=client).add(42)
    assert table_counts(dsn) == before


def test_malformed_message_fields_are_pydantic_errors() -> None:
    with pytest.raises(ValueError):
        pgmem.Message(content=123)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        pgmem.Message(content="x", metadata="not a dict")  # type: ignore[arg-type]


def test_closed_client(dsn: str) -> None:
    client = pgmem.connect(dsn, namespace="test")
    memory = Memory("m", client=client)
    client.close()
    client.close()  # idempotent
    assert client.closed
    with pytest.raises(pgmem.ClientClosed):
        client.messages.add("m", pgmem.Message(content="x"))
    with pytest.raises(pgmem.ClientClosed):
        client.messages.count("m")
    with pytest.raises(pgmem.ClientClosed):
        memory.get()
    with pytest.raises(pgmem.ClientClosed):
        client.queues.push("q", pgmem.Message(content="x"))


async def test_closed_async_client(dsn: str) -> None:
    client = await pgmem.aconnect(dsn, namespace="test")
    await client.close()
    with pytest.raises(pgmem.ClientClosed):
        await client.messages.add("m", pgmem.Message(content="x"))


def test_closed_caller_connection(client: pgmem.Client, dsn: str) -> None:
    conn = psycopg.connect(dsn)
    conn.close()
    with pytest.raises(pgmem.ClientClosed):
        client.messages.add("m", pgmem.Message(content="x"), connection=conn)


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://alice:s3cretpw@127.0.0.1:1/db",
        "host=127.0.0.1 port=1 dbname=db user=alice password=s3cretpw",
    ],
)
def test_unreachable_dsn_names_host_and_cause_not_password(dsn: str) -> None:
    with pytest.raises(pgmem.ConnectionFailed) as info:
        pgmem.connect(dsn)
    message = str(info.value)
    assert "127.0.0.1" in message and "s3cretpw" not in message
    assert "refused" in message.lower() or "connect" in message.lower()


async def test_unreachable_dsn_async() -> None:
    with pytest.raises(pgmem.ConnectionFailed) as info:
        await pgmem.aconnect("postgresql://alice:s3cretpw@127.0.0.1:1/db")
    assert "s3cretpw" not in str(info.value)


def test_error_tree() -> None:
    for cls in (
        pgmem.InvalidInput,
        pgmem.NotFound,
        pgmem.Conflict,
        pgmem.SchemaOutOfDate,
        pgmem.ConnectionFailed,
        pgmem.ClientClosed,
    ):
        assert issubclass(cls, pgmem.PgmemError)
    assert issubclass(pgmem.InvalidInput, ValueError)
