"""``pgmem.integrations.openmanus.Memory``: OpenManus's sliding-window memory over durable rows."""

from __future__ import annotations

import uuid
from typing import Any

from pgmem import Client
from pgmem.checks import check_key
from pgmem.connecting import get_default_client
from pgmem.errors import InvalidInput
from pgmem.integrations.openmanus.schema import Message, Role, ToolCall
from pgmem.models import Message as CoreMessage

_KEY = "openmanus"  # metadata key for what the core message has no column for


def to_core(message: Message) -> CoreMessage:
    if not isinstance(message, Message):
        raise InvalidInput(f"expected pgmem.integrations.openmanus.Message, got {type(message).__name__}")
    extra: dict[str, Any] = {}
    if message.content is None:
        extra["content_is_null"] = True
    if message.base64_image is not None:
        extra["base64_image"] = message.base64_image
    core = CoreMessage(
        content=message.content or "",
        role=message.role,
        tool_calls=None if message.tool_calls is None else [c.model_dump() for c in message.tool_calls],
        name=message.name,
        tool_call_id=message.tool_call_id,
        metadata={_KEY: extra} if extra else {},
    )
    core._source_class = "pgmem.integrations.openmanus.schema.Message"
    return core


def from_core(core: CoreMessage) -> Message:
    extra = core.metadata.get(_KEY, {})
    return Message(
        role=core.role,  # type: ignore[arg-type]
        content=None if extra.get("content_is_null") else core.content,
        tool_calls=None if core.tool_calls is None else [ToolCall.model_validate(c) for c in core.tool_calls],
        name=core.name,
        tool_call_id=core.tool_call_id,
        base64_image=extra.get("base64_image"),
    )


def drop_orphan_tool_results(messages: list[Message]) -> list[Message]:
    """Drop the tool results whose assistant tool call is not earlier in the window.

    Dropping only the tool results at the start is not enough: when agents share a memory, another
    agent's message can land between an assistant's tool results, and a window starting at that message
    still holds a result of the call before it.
    """
    called: set[str] = set()
    kept = []
    for message in messages:
        if message.role == Role.TOOL.value and message.tool_call_id not in called:
            continue
        called.update(call.id for call in message.tool_calls or ())
        kept.append(message)
    return kept


class Memory:
    """OpenManus's ``Memory`` on Postgres.

    Args:
        key: names the memory; processes opening the same key share it. ``None``: a new memory.
        client: a :class:`pgmem.Client`; ``None`` uses the process-wide default client.
        max_messages: size of the window ``messages`` shows (OpenManus's default, 100).
        purge: delete messages that leave the window instead of keeping them as history.

    Example:
        >>> memory = Memory("agent:manus", max_messages=50)
        >>> memory.add_message(Message.user_message("Find the bug"))
        >>> memory.to_dict_list()
        [{'role': 'user', 'content': 'Find the bug'}]
    """

    def __init__(
        self, key: str | None = None, *, client: Client | None = None, max_messages: int = 100, purge: bool = False
    ) -> None:
        if not isinstance(max_messages, int) or isinstance(max_messages, bool) or max_messages < 1:
            raise InvalidInput(f"max_messages must be a positive integer, got {max_messages!r}")
        self.key = check_key(key if key is not None else f"openmanus:{uuid.uuid4().hex}")
        self._client = client
        self.max_messages = max_messages
        self.purge_old = purge

    @property
    def client(self) -> Client:
        return self._client if self._client is not None else get_default_client()

    def add_message(self, message: Message) -> None:
        """Append a message (each call stores a new message, as OpenManus appends to its list)."""
        self.client.messages.add(self.key, to_core(message))
        if self.purge_old:
            self.purge()

    def add_messages(self, messages: list[Message]) -> None:
        """Append messages in order, all or nothing, in one round trip."""
        self.client.messages.add_many(self.key, [to_core(m) for m in messages])
        if self.purge_old:
            self.purge()

    def clear(self) -> None:
        """Remove every message of this memory from the database."""
        self.client.messages.clear(self.key)

    def purge(self) -> int:
        """Delete the messages older than the window; return how many (``client.retention.trim``)."""
        return self.client.retention.trim(self.key, self.max_messages)

    @property
    def messages(self) -> list[Message]:
        """The window: the last ``max_messages`` messages, never starting with an orphaned tool result."""
        return self.get_recent_messages(self.max_messages)

    def get_recent_messages(self, n: int) -> list[Message]:
        """The last ``n`` messages of the window (at most ``max_messages``), without the tool results
        whose assistant tool call is not included."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InvalidInput(f"n must be a non-negative integer, got {n!r}")
        if n == 0:
            # OpenManus slices messages[-0:], which is every message of the window.
            n = self.max_messages
        recent = self.client.messages.last(self.key, min(n, self.max_messages))
        return drop_orphan_tool_results([from_core(m) for m in recent])

    def to_dict_list(self) -> list[dict[str, Any]]:
        """The window in the OpenAI chat format."""
        return [m.to_dict() for m in self.messages]

    def __len__(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        return f"Memory(key={self.key!r}, max_messages={self.max_messages})"
