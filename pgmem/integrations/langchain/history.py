"""``PgmemChatMessageHistory``: LangChain's ``BaseChatMessageHistory`` over ``client.messages``.

Each session is the memory ``langchain:<session_id>`` (see :mod:`pgmem.integrations._adapters` for ids
that are not valid memory keys). A message is one row of ``pgmem.messages``: its role (human → ``user``,
ai → ``assistant``, system, tool, function, chat → its own role), its text (the text blocks of list
content) in ``content``, its tool calls, ``tool_call_id`` and ``name`` in their columns, and the message
itself, as ``langchain_core.messages.message_to_dict`` makes it, in ``metadata["__object__"]``: reading
returns that, so messages compare equal after a round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    message_to_dict,
    messages_from_dict,
)

from pgmem.errors import InvalidInput
from pgmem.integrations._adapters import OBJECT_FIELD, Adapter, memory_key, stored

__all__ = ["PgmemChatMessageHistory"]

PREFIX = "langchain:"

_ROLES = {
    "human": "user",
    "HumanMessageChunk": "user",
    "ai": "assistant",
    "AIMessageChunk": "assistant",
    "system": "system",
    "SystemMessageChunk": "system",
    "tool": "tool",
    "ToolMessageChunk": "tool",
    "function": "function",
    "FunctionMessageChunk": "function",
}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "".join(parts)


def _role(message: BaseMessage) -> str:
    role = _ROLES.get(message.type)
    if role is None:
        role = getattr(message, "role", None) or message.type  # chat messages carry their own role
    return str(role)


def _from_stand_in(payload: dict[str, Any]) -> BaseMessage:
    """A message stored without LangChain's object (added through another API): rebuilt from its role
    and content."""
    role, content = str(payload.get("role", "user")), str(payload.get("content", ""))
    if role == "user":
        return HumanMessage(content=content)
    if role == "assistant":
        return AIMessage(content=content)
    if role == "system":
        return SystemMessage(content=content)
    return ChatMessage(role=role, content=content)


def _payload(message: Any) -> Any:
    """What :func:`_messages` reads of a message ``client.context`` returned: LangChain's own object where
    the history stored it, else its role and content."""
    stored_object = (message.metadata or {}).get(OBJECT_FIELD)
    return stored_object if stored_object is not None else {"role": message.role, "content": message.content}


def _messages(payloads: list[Any]) -> list[BaseMessage]:
    if all(isinstance(p, dict) and "type" in p and "data" in p for p in payloads):
        return messages_from_dict(payloads)
    return [
        messages_from_dict([p])[0] if isinstance(p, dict) and "type" in p and "data" in p else _from_stand_in(p)
        for p in payloads
    ]


class PgmemChatMessageHistory(BaseChatMessageHistory):
    """Chat message history of one session, kept in pgmem.

    Args:
        session_id: any non-empty string without NUL, at most 200 characters.
        client: the :class:`pgmem.Client` (default: the process-wide one).
        async_client: a :class:`pgmem.AsyncClient` for the async methods; without one they run the sync
            client in a worker thread.

    Every add appends (duplicates included), all the messages of one call in one statement, all or
    nothing; a message pgmem cannot store (NUL in text, NaN, values that are not JSON, more than 1 MiB)
    raises :class:`pgmem.InvalidInput` with nothing written.

    Example, with ``RunnableWithMessageHistory``::

        chain = RunnableWithMessageHistory(
            prompt | model, lambda sid: PgmemChatMessageHistory(sid, client=client),
            input_messages_key="question", history_messages_key="history",
        )
    """

    def __init__(self, session_id: str, *, client: Any = None, async_client: Any = None) -> None:
        super().__init__()
        self._memory = memory_key(PREFIX, session_id)
        self.session_id = session_id
        self._adapter = Adapter(client, async_client)

    @property
    def memory(self) -> str:
        """The pgmem memory key of this session."""
        return self._memory

    def _stored(self, messages: Sequence[BaseMessage]) -> list[Any]:
        out = []
        for message in messages:
            if not isinstance(message, BaseMessage):
                raise InvalidInput(f"expected LangChain messages, got {type(message).__name__}")
            tool_calls = getattr(message, "tool_calls", None)
            out.append(
                stored(
                    message_to_dict(message),
                    PREFIX,
                    self._memory,
                    self.session_id,
                    content=_text(message.content),
                    role=_role(message),
                    name=message.name,
                    tool_call_id=getattr(message, "tool_call_id", None),
                    tool_calls=[dict(t) for t in tool_calls] if tool_calls else None,
                )
            )
        return out

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages, oldest first."""
        client = self._adapter.sync_client()
        return _messages(client.messages.payloads(self._memory, OBJECT_FIELD))

    async def aget_messages(self) -> list[BaseMessage]:
        payloads = await self._adapter.acall(lambda c: c.messages.payloads(self._memory, OBJECT_FIELD))
        return _messages(payloads)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        batch = self._stored(messages)
        if batch:
            self._adapter.sync_client().messages.append(self._memory, batch)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        batch = self._stored(messages)
        if batch:
            await self._adapter.acall(lambda c: c.messages.append(self._memory, batch))

    def context(self, budget: int, *, query: str | None = None, reserve: int = 0, **options: Any) -> list[BaseMessage]:
        """The messages to send the model next, at most ``budget - reserve`` tokens: pinned system messages,
        the summary of older turns, messages related to ``query`` and the newest turns, tool calls with
        their results (``client.context``; ``options``: its other arguments). A summary comes as a
        ``SystemMessage``."""
        ctx = self._adapter.sync_client().context(self._memory, budget=budget, query=query, reserve=reserve, **options)
        return _messages([_payload(m) for m in ctx.messages])

    async def acontext(
        self, budget: int, *, query: str | None = None, reserve: int = 0, **options: Any
    ) -> list[BaseMessage]:
        """:meth:`context`, async."""
        ctx = await self._adapter.acall(
            lambda c: c.context(self._memory, budget=budget, query=query, reserve=reserve, **options)
        )
        return _messages([_payload(m) for m in ctx.messages])

    def clear(self) -> None:
        self._adapter.sync_client().messages.clear(self._memory)

    async def aclear(self) -> None:
        await self._adapter.acall(lambda c: c.messages.clear(self._memory))
