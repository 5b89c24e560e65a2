"""pgmem.integrations.metagpt.MessageQueue: MetaGPT's API, durable and shared between processes."""

from __future__ import annotations

import json
import multiprocessing as mp
import uuid
from typing import Any

import pytest
from pydantic import BaseModel, Field

import pgmem
from pgmem.integrations.metagpt import MessageQueue


class MGMessage(BaseModel):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    content: str
    role: str = "user"
    cause_by: str = ""
    sent_from: str = ""
    send_to: set[str] = Field(default_factory=lambda: {"<all>"})


def test_push_pop_in_order_and_priority(client: pgmem.Client) -> None:
    mq = MessageQueue(client=client)
    assert mq.empty() and mq.pop() is None and mq.pop_all() == []
    for i in range(3):
        mq.push(MGMessage(content=f"m{i}"))
    mq.push(MGMessage(content="urgent"), priority=-1)
    assert mq.count() == 4 and not mq.empty()
    first = mq.pop()
    assert isinstance(first, MGMessage) and first.content == "urgent"
    assert [m.content for m in mq.pop_all()] == ["m0", "m1", "m2"]
    assert mq.empty()


async def test_dump_and_load(client: pgmem.Client) -> None:
    mq = MessageQueue("dumped", client=client)
    for i in range(3):
        mq.push(pgmem.Message(content=f"m{i}", cause_by="Act"))
    data = await mq.dump()
    assert [d["content"] for d in json.loads(data)] == ["m0", "m1", "m2"]
    assert mq.count() == 3  # dump leaves the queue as it is
    copy = MessageQueue.load(data, name="loaded", client=client)
    assert copy.name == "loaded" and [m.content for m in copy.pop_all()] == ["m0", "m1", "m2"]
    assert await MessageQueue("empty", client=client).dump() == "[]"
    for bad in ("not json", "{}", '[{"content": 5}]'):
        with pytest.raises(pgmem.InvalidInput):
            MessageQueue.load(bad, client=client)


def test_same_name_same_queue(client: pgmem.Client) -> None:
    MessageQueue("shared", client=client).push(MGMessage(content="x"))
    assert MessageQueue("shared", client=client).pop().content == "x"
    with pytest.raises(pgmem.InvalidInput):
        MessageQueue("bad name", client=client)


def _popper(dsn: str, together: Any, out: mp.Queue) -> None:  # type: ignore[type-arg]
    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        mq = MessageQueue("work", client=client)
        first = mq.pop()
        got = [] if first is None else [first.content]
        # Every process has popped once before any pops on: they drain the queue at the same time, however
        # late a busy machine started one of them (the first ready used to take all 2,000 alone).
        together.wait(60)
        while (msg := mq.pop()) is not None:
            got.append(msg.content)
        out.put(got)


@pytest.mark.slow
def test_processes_popping_never_get_the_same_message(client: pgmem.Client, dsn: str) -> None:
    MessageQueue("work", client=client)
    client.queues.push_many("work", [pgmem.Message(content=f"m{i}") for i in range(2000)])
    ctx = mp.get_context("spawn")
    together, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_popper, args=(dsn, together, out)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    popped = [c for r in results for c in r]
    assert len(popped) == 2000 and set(popped) == {f"m{i}" for i in range(2000)}
    assert all(results)  # four consumers at once, each with its share


def test_push_ignores_a_message_already_queued(client: pgmem.Client) -> None:
    mq = MessageQueue(client=client)
    message = MGMessage(content="build it")
    assert mq.push(message) is True
    assert mq.push(message) is False  # already waiting: ignored, as the seed's queue
    assert mq.push(MGMessage(id=message.id, content="other content")) is True  # a reused id is another message
    assert [m.content for m in mq.pop_all()] == ["build it", "other content"]
    assert mq.push(message) is True  # popped, so it can be queued again
    assert mq.pop() == message
