"""The row decoders read each field where its row type puts it (no database; the row types are checked
against the statements in tests/integration/test_rows.py)."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime, timedelta

from pgmem.planning.queues import QueueItem, decode_item, fences
from pgmem.planning.rows import QUEUE_ITEM_ROW, MessageRow, QueueItemRow, decode

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _message_row(seq: int | None = 7, metadata: str = '{"k": [1, 2]}') -> MessageRow:
    return MessageRow(
        seq=seq,
        id="m-1",
        content="hello",
        instruct_content='{"kind": "dict", "value": {"a": 1}}',
        role="engineer",
        cause_by="actions.WriteCode",
        sent_from="alice",
        send_to=["bob", "<all>"],
        metadata=metadata,
        tool_calls='[{"id": "t1"}]',
        name="tool-name",
        tool_call_id="t1",
        message_class="pkg.Message",
        created_at=T0,
    )


def test_decode_reads_every_field_of_the_message_row() -> None:
    row = _message_row()
    message = decode(row)
    assert (message.id, message.content, message.role, message.cause_by, message.sent_from) == (
        row.id,
        row.content,
        row.role,
        row.cause_by,
        row.sent_from,
    )
    assert message.send_to == {"bob", "<all>"}
    assert message.instruct_content == {"a": 1}
    assert message.metadata == {"k": [1, 2]} and message.tool_calls == [{"id": "t1"}]
    assert (message.name, message.tool_call_id, message.created_at) == ("tool-name", "t1", T0)
    assert message.seq == 7 and message._source_class == "pkg.Message"
    assert decode(tuple(row)) == message  # psycopg's plain tuple decodes the same


def test_decode_gives_each_message_its_own_empty_metadata() -> None:
    a, b = decode(_message_row(metadata="{}")), decode(_message_row(metadata="{}"))
    a.metadata["x"] = 1
    assert b.metadata == {}
    nulls = _message_row()._replace(instruct_content=None, tool_calls=None, seq=None)
    message = decode(nulls)
    assert message.instruct_content is None and message.tool_calls is None and message.seq is None


def test_a_queue_item_reads_its_fields_and_message_from_its_row() -> None:
    item_part = QueueItemRow(
        id=41,
        queue="jobs",
        priority=-3,
        attempts=2,
        max_attempts=5,
        enqueued_at=T0,
        available_at=T0 + timedelta(seconds=30),
        lease_until=T0 + timedelta(seconds=30),
        dedup_key="k",
    )
    row = (*item_part, *_message_row(seq=None))
    assert len(row) == len(QUEUE_ITEM_ROW)
    item = decode_item(row)
    for name, value in item_part._asdict().items():
        assert getattr(item, name) == value
    assert item.message.content == "hello" and item.message.metadata == {"k": [1, 2]}
    assert fences([item]) == {41: 2}
    copy = pickle.loads(pickle.dumps(item))
    assert type(copy) is QueueItem and copy == item
    moved = dataclasses.replace(item, lease_until=T0)
    assert moved.lease_until == T0 and moved.id == 41 and fences([moved]) == {41: 2}
