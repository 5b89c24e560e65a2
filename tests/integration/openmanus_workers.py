"""An OpenManus-style agent process for test_openmanus: appends with ``messages += [...]``, as OpenManus's
``ToolCallAgent.think`` does, to a memory other processes append to at the same time."""

from __future__ import annotations

from typing import Any

import pgmem
from pgmem.openmanus import Memory, Message


def append_by_assignment(dsn: str, key: str, name: str, count: int, start: Any) -> None:
    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        memory = Memory(key, client=client, max_messages=5)
        start.wait(30)
        for i in range(count):
            memory.messages += [Message.user_message(f"{name} {i}")]
