"""LlamaIndex's chat stores over ``client.messages``.

A chat key's ACTIVE messages are the memory ``llamaindex:<key>``, its ARCHIVED ones
``llamaindex-archived:<key>`` (see :mod:`pgmem.integrations._adapters` for keys that are not valid memory
keys). A message is one row of ``pgmem.messages``: its role, its text (the text blocks) in ``content``,
``additional_kwargs``' ``name`` and ``tool_call_id`` in their columns, and the ``ChatMessage`` itself,
dumped as JSON (blocks, additional_kwargs), in ``metadata["__object__"]``: reads validate that back.
Archiving moves entries from one memory to the other in one statement, keeping their order; no message
row is copied.

A store's ``model_dump()`` (``to_dict()``) holds its client's ``namespace`` and ``dsn`` (the password
replaced by ``***``: never a secret). A store rebuilt from it needs a client again:
``PgmemChatStore(client=pgmem.connect(dsn, namespace=ns), **dump)`` (a client of another namespace is used
for the dumped one, sharing its pool); without one it raises :class:`pgmem.InvalidInput` rather than
reading and writing the default client's namespace. A store on the default client dumps neither.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.base import BaseChatStore
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus
from pydantic import Field, PrivateAttr, TypeAdapter

from pgmem.errors import InvalidInput
from pgmem.integrations._adapters import (
    KEY_FIELD,
    OBJECT_FIELD,
    Adapter,
    memory_key,
    session_of,
    stored,
)
from pgmem.models import Message

__all__ = ["PgmemChatStore", "PgmemDBChatStore"]

ACTIVE = "llamaindex:"
ARCHIVED = "llamaindex-archived:"
#: More than any memory holds: "all of them" for delete_oldest.
_ALL = 1 << 62


def _keys(key: str) -> tuple[str, str]:
    return memory_key(ACTIVE, key, "chat key"), memory_key(ARCHIVED, key, "chat key")


def _check_finite(value: Any, where: str) -> None:
    """Reject NaN and infinities, which pydantic's JSON dump would turn into null without a word."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{where}: {value!r} is not JSON (NaN and infinities are not stored)")
    if isinstance(value, dict):
        for item in value.values():
            _check_finite(item, where)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_finite(item, where)


def _to_stored(key: str, memory: str, prefix: str, messages: Any) -> list[Message]:
    if not isinstance(messages, list | tuple):
        raise InvalidInput(f"messages must be a list of ChatMessage, got {type(messages).__name__}")
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, ChatMessage):
            raise InvalidInput(f"message {index}: expected a ChatMessage, got {type(message).__name__}")
        _check_finite(message.additional_kwargs, f"message {index}")
        try:
            obj = message.model_dump(mode="json")
        except ValueError as exc:  # pydantic cannot serialise a value of additional_kwargs
            raise InvalidInput(f"message {index}: not JSON: {exc}") from None
        kwargs = message.additional_kwargs
        name, call_id = kwargs.get("name"), kwargs.get("tool_call_id")
        out.append(
            stored(
                obj,
                prefix,
                memory,
                key,
                content=message.content or "",
                role=str(message.role.value),
                name=name if isinstance(name, str) else None,
                tool_call_id=call_id if isinstance(call_id, str) else None,
            )
        )
    return out


def _chat(payload: Any) -> ChatMessage:
    if "blocks" not in payload:  # stored without the ChatMessage (added through another API)
        return ChatMessage(role=payload.get("role", "user"), content=payload.get("content", ""))
    return ChatMessage.model_validate(payload)


#: The messages of a read validated as one list: the per-message model_validate calls of 1,000 messages
#: took 0.7 ms more (of ~4.5 ms), the same validators run either way.
_CHAT_LIST = TypeAdapter(list[ChatMessage])


def _chats(payloads: list[Any]) -> list[ChatMessage]:
    if all(isinstance(p, dict) and "blocks" in p for p in payloads):
        return _CHAT_LIST.validate_python(payloads)
    return [_chat(p) for p in payloads]


def _from_core(message: Message) -> ChatMessage:
    return _chat(message.metadata.get(OBJECT_FIELD) or {"role": message.role, "content": message.content})


def _keys_of(client: Any, prefixes: tuple[str, ...]) -> list[str]:
    found: set[str] = set()
    for prefix in prefixes:
        for memory in client.messages.memories(prefix=prefix, nonempty=True):
            stored_key = None
            if memory.startswith(prefix + "#"):
                stored_key = (client.messages.payloads(memory, KEY_FIELD, last=1) or [None])[0]
            name = session_of(prefix, memory, stored_key)
            if name is not None:
                found.add(name)
    return sorted(found)


async def _akeys_of(client: Any, prefixes: tuple[str, ...]) -> list[str]:
    found: set[str] = set()
    for prefix in prefixes:
        for memory in await client.messages.memories(prefix=prefix, nonempty=True):
            stored_key = None
            if memory.startswith(prefix + "#"):
                stored_key = ((await client.messages.payloads(memory, KEY_FIELD, last=1)) or [None])[0]
            name = session_of(prefix, memory, stored_key)
            if name is not None:
                found.add(name)
    return sorted(found)


def _unbound_message(store: Any) -> str:
    name = type(store).__name__
    return (
        f"this {name} was dumped from a store on namespace {store.namespace!r} (dsn {store.dsn!r}); rebuild "
        f"it with a client: {name}(client=pgmem.connect(dsn, namespace={store.namespace!r}), **dump) "
        "(or async_client=), so that it does not use the default client's namespace"
    )


def _with_namespace(client: Any, namespace: str) -> Any:
    if client is None or client.namespace == namespace:
        return client
    return client.with_namespace(namespace)


def _bind(store: Any, client: Any, async_client: Any) -> Adapter:
    """The store's adapter, its ``namespace`` and ``dsn`` fields set from the client (or, when the store
    was given a namespace, as a dump holds it, the clients moved to that namespace)."""
    adapter = Adapter(client, async_client)  # checks the clients' types
    given = client if client is not None else async_client
    if store.namespace is None:
        if given is not None:
            store.namespace = given.namespace
            store.dsn = given.conninfo
        return adapter
    if given is None:
        raise InvalidInput(_unbound_message(store))
    if store.dsn is None:
        store.dsn = given.conninfo
    return Adapter(_with_namespace(client, store.namespace), _with_namespace(async_client, store.namespace))


_NAMESPACE_DOC = "The pgmem namespace of the store's client (None: the default client's)."
_DSN_DOC = "The client's DSN, its password replaced by ***: what to connect to when rebuilding the store."


def _count(memory: str) -> Callable[[Any], Any]:
    return lambda c: c.messages.count(memory)


def _clear(memory: str) -> Callable[[Any], Any]:
    return lambda c: c.messages.clear(memory)


class PgmemChatStore(BaseChatStore):
    """LlamaIndex's ``BaseChatStore`` on pgmem: one memory per chat key.

    Args:
        client: the :class:`pgmem.Client` (default: the process-wide one).
        async_client: a :class:`pgmem.AsyncClient` for the async methods; without one they run the sync
            client in a worker thread (from any event loop, LlamaIndex's sync wrappers' fresh ones included).

    Adds append (duplicates included); ``set_messages`` replaces a key's messages in one transaction; a
    message pgmem cannot store raises :class:`pgmem.InvalidInput` with nothing written.
    """

    namespace: str | None = Field(default=None, description=_NAMESPACE_DOC)
    dsn: str | None = Field(default=None, description=_DSN_DOC)
    _adapter: Any = PrivateAttr()
    _owned: Any = PrivateAttr(default=None)

    def __init__(self, client: Any = None, *, async_client: Any = None, **data: Any) -> None:
        super().__init__(**data)
        self._adapter = _bind(self, client, async_client)

    @classmethod
    def from_uri(cls, uri: str | None = None, *, namespace: str = "default") -> PgmemChatStore:
        """A store on its own client for ``uri`` (default: ``PGMEM_DSN``, else the embedded server);
        :meth:`close` closes it."""
        import pgmem

        client = pgmem.connect(uri, namespace=namespace)
        store = cls(client=client)
        store._owned = client
        return store

    def close(self) -> None:
        """Close the client :meth:`from_uri` opened (nothing else)."""
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    @classmethod
    def class_name(cls) -> str:
        return "PgmemChatStore"

    # -- sync ---------------------------------------------------------------------------------------------

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        memory = memory_key(ACTIVE, key, "chat key")
        batch = _to_stored(key, memory, ACTIVE, messages)
        client = self._adapter.sync_client()
        with client.transaction() as conn:
            client.messages.clear(memory, connection=conn)
            client.messages.append(memory, batch, connection=conn)

    def get_messages(self, key: str) -> list[ChatMessage]:
        memory = memory_key(ACTIVE, key, "chat key")
        return _chats(self._adapter.sync_client().messages.payloads(memory, OBJECT_FIELD))

    def add_message(self, key: str, message: ChatMessage) -> None:
        memory = memory_key(ACTIVE, key, "chat key")
        self._adapter.sync_client().messages.append(memory, _to_stored(key, memory, ACTIVE, [message]))

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Delete every message of ``key`` and return them (None when it had none)."""
        memory = memory_key(ACTIVE, key, "chat key")
        gone = self._adapter.sync_client().messages.delete_oldest(memory, _ALL)
        return [_from_core(m) for m in gone] or None

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Delete and return the message at position ``idx`` (negative: from the end); None when out of range."""
        memory = memory_key(ACTIVE, key, "chat key")
        gone = self._adapter.sync_client().messages.delete_at(memory, idx)
        return None if gone is None else _from_core(gone)

    def delete_last_message(self, key: str) -> ChatMessage | None:
        memory = memory_key(ACTIVE, key, "chat key")
        gone = self._adapter.sync_client().messages.delete_newest(memory)
        return None if gone is None else _from_core(gone)

    def get_keys(self) -> list[str]:
        """The chat keys holding messages, sorted."""
        return _keys_of(self._adapter.sync_client(), (ACTIVE,))

    # -- async --------------------------------------------------------------------------------------------

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        if self._adapter.async_client is None:
            await self._adapter.acall(lambda _: self.set_messages(key, messages))
            return
        memory = memory_key(ACTIVE, key, "chat key")
        batch = _to_stored(key, memory, ACTIVE, messages)
        client = self._adapter.async_client
        async with client.transaction() as conn:
            await client.messages.clear(memory, connection=conn)
            await client.messages.append(memory, batch, connection=conn)

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        memory = memory_key(ACTIVE, key, "chat key")
        return _chats(await self._adapter.acall(lambda c: c.messages.payloads(memory, OBJECT_FIELD)))

    async def async_add_message(self, key: str, message: ChatMessage) -> None:
        memory = memory_key(ACTIVE, key, "chat key")
        batch = _to_stored(key, memory, ACTIVE, [message])
        await self._adapter.acall(lambda c: c.messages.append(memory, batch))

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        memory = memory_key(ACTIVE, key, "chat key")
        gone = await self._adapter.acall(lambda c: c.messages.delete_oldest(memory, _ALL))
        return [_from_core(m) for m in gone] or None

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        memory = memory_key(ACTIVE, key, "chat key")
        gone = await self._adapter.acall(lambda c: c.messages.delete_at(memory, idx))
        return None if gone is None else _from_core(gone)

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        memory = memory_key(ACTIVE, key, "chat key")
        gone = await self._adapter.acall(lambda c: c.messages.delete_newest(memory))
        return None if gone is None else _from_core(gone)

    async def aget_keys(self) -> list[str]:
        if self._adapter.async_client is None:
            keys: list[str] = await self._adapter.acall(lambda c: _keys_of(c, (ACTIVE,)))
            return keys
        return await _akeys_of(self._adapter.async_client, (ACTIVE,))


class PgmemDBChatStore(AsyncDBChatStore):
    """LlamaIndex's ``AsyncDBChatStore`` on pgmem (what ``Memory`` keeps its chat history in).

    Args:
        client: the :class:`pgmem.Client` (default: the process-wide one); without ``async_client`` the
            methods run it in a worker thread, so ``Memory``'s sync methods (a fresh event loop per call)
            work.
        async_client: a :class:`pgmem.AsyncClient`, used natively on its own event loop.

    ``delete_message(key, idx)`` deletes by position among the ACTIVE messages; ``archive_oldest_messages``
    moves entries to the ARCHIVED memory in one statement; ``status=None`` reads both in their order.
    """

    namespace: str | None = Field(default=None, description=_NAMESPACE_DOC)
    dsn: str | None = Field(default=None, description=_DSN_DOC)
    _adapter: Any = PrivateAttr()

    def __init__(self, client: Any = None, *, async_client: Any = None, **data: Any) -> None:
        super().__init__(**data)
        self._adapter = _bind(self, client, async_client)

    @classmethod
    def class_name(cls) -> str:
        return "PgmemDBChatStore"

    @staticmethod
    def _memory(key: str, status: MessageStatus) -> tuple[str, str]:
        if status == MessageStatus.ARCHIVED:
            return memory_key(ARCHIVED, key, "chat key"), ARCHIVED
        if status == MessageStatus.ACTIVE:
            return memory_key(ACTIVE, key, "chat key"), ACTIVE
        raise InvalidInput(f"status must be a MessageStatus, got {status!r}")

    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[ChatMessage]:
        """Messages of ``key`` with ``status`` (None: both, in the order they were added), oldest first."""
        page: dict[str, Any] = {"offset": offset or 0, "limit": limit}
        if status is None:
            active, archived = _keys(key)
            page["merged_with"] = archived
        else:
            active, _ = self._memory(key, status)
        payloads = await self._adapter.acall(lambda c: c.messages.payloads(active, OBJECT_FIELD, **page))
        return _chats(payloads)

    async def count_messages(self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE) -> int:
        memories = list(_keys(key)) if status is None else [self._memory(key, status)[0]]
        total = 0
        for memory in memories:
            total += await self._adapter.acall(_count(memory))
        return total

    async def add_message(self, key: str, message: ChatMessage, status: MessageStatus = MessageStatus.ACTIVE) -> None:
        await self.add_messages(key, [message], status)

    async def add_messages(
        self, key: str, messages: list[ChatMessage], status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        memory, prefix = self._memory(key, status)
        batch = _to_stored(key, memory, prefix, messages)
        if batch:
            await self._adapter.acall(lambda c: c.messages.append(memory, batch))

    async def set_messages(
        self, key: str, messages: list[ChatMessage], status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        """Replace every message of ``key`` (both statuses) with ``messages``, in one transaction."""
        memory, prefix = self._memory(key, status)
        batch = _to_stored(key, memory, prefix, messages)
        active, archived = _keys(key)
        client = self._adapter.async_client
        if client is None:

            def replace(c: Any) -> None:
                with c.transaction() as conn:
                    c.messages.clear(active, connection=conn)
                    c.messages.clear(archived, connection=conn)
                    c.messages.append(memory, batch, connection=conn)

            await self._adapter.acall(replace)
            return
        async with client.transaction() as conn:
            await client.messages.clear(active, connection=conn)
            await client.messages.clear(archived, connection=conn)
            await client.messages.append(memory, batch, connection=conn)

    async def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Delete and return the ACTIVE message at position ``idx`` (negative: from the end)."""
        memory = memory_key(ACTIVE, key, "chat key")
        gone = await self._adapter.acall(lambda c: c.messages.delete_at(memory, idx))
        return None if gone is None else _from_core(gone)

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        """Delete the messages of ``key`` with ``status`` (None: all)."""
        memories = list(_keys(key)) if status is None else [self._memory(key, status)[0]]
        for memory in memories:
            await self._adapter.acall(_clear(memory))

    async def delete_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        memory = memory_key(ACTIVE, key, "chat key")
        gone = await self._adapter.acall(lambda c: c.messages.delete_oldest(memory, n))
        return [_from_core(m) for m in gone]

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        """Move the oldest ``n`` ACTIVE messages to ARCHIVED (one statement) and return them."""
        active, archived = _keys(key)
        moved = await self._adapter.acall(lambda c: c.messages.move_oldest(active, archived, n))
        return [_from_core(m) for m in moved]

    async def get_keys(self) -> list[str]:
        """The chat keys holding messages of either status, sorted."""
        if self._adapter.async_client is None:
            keys: list[str] = await self._adapter.acall(lambda c: _keys_of(c, (ACTIVE, ARCHIVED)))
            return keys
        return await _akeys_of(self._adapter.async_client, (ACTIVE, ARCHIVED))
