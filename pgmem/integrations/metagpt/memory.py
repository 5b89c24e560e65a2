"""``pgmem.integrations.metagpt.Memory``: MetaGPT's ``Memory`` on Postgres."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from pgmem import Client
from pgmem.checks import check_json_depth
from pgmem.connecting import get_default_client
from pgmem.errors import InvalidInput
from pgmem.integrations.codec import EXTRA_KEY, MessageCodec, class_path
from pgmem.models import IGNORED_MESSAGE_ID, Message, any_to_str, storage_id, storage_id_of

#: Longest caller id kept readable in a stored id (``<id>#<fingerprint>``; ids are at most 128 characters).
_READABLE_ID = 100


def fingerprint(message: BaseModel) -> str:
    """A digest of every field of a pydantic message and its class: equal exactly when pydantic's ``==``
    says two messages of one class are equal (what MetaGPT's ``message in storage`` compares)."""
    data = message.model_dump(mode="json", warnings=False)
    check_json_depth(data, "message")  # before json.dumps recurses through it
    text = json.dumps([class_path(type(message)), data], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def stored_id(message: Any) -> str | None:
    """The id the MetaGPT facade stores a caller's pydantic message under: its id and a fingerprint of all
    its fields, so that a reused id with other content is another message (as in MetaGPT) while the same
    message added twice, or published to several memories, is still one row. ``None`` for pgmem's own
    :class:`pgmem.Message` and other classes, which keep the core's rule (the id, or the content for
    MetaGPT's ignored id)."""
    if not isinstance(message, BaseModel):
        return None
    own = getattr(message, "id", None)
    own = own if isinstance(own, str) and own else IGNORED_MESSAGE_ID
    readable = own if len(own) <= _READABLE_ID else hashlib.sha256(own.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{readable}#{fingerprint(message)}"


def to_stored(codec: MessageCodec[Any], message: Any) -> Message:
    """``message`` as the core message the MetaGPT facades store: a pydantic message under
    :func:`stored_id` (its own id kept in ``metadata["__extra__"]`` and given back on reads)."""
    core = codec.to_core(message)
    derived = stored_id(message)
    if derived is not None:
        core.metadata = {**core.metadata, EXTRA_KEY: {**core.metadata.get(EXTRA_KEY, {}), "id": core.id}}
        core.id = derived
    return core


class Memory:
    """MetaGPT's most basic memory, stored in Postgres and shared by every process that opens the same key.

    Args:
        key: names the memory (e.g. ``"role:Alice"``); two processes opening the same key share it.
            ``None`` creates a new, empty memory with a unique key.
        client: a :class:`pgmem.Client`; ``None`` uses the process-wide default client (``PGMEM_DSN`` or
            the embedded server).
        ignore_id: as in MetaGPT: messages are compared by content, not id.
        message_class: the class messages are returned as; by default the class of the messages you
            add (a real ``metagpt.schema.Message`` included), else the class recorded with each row
            when it is imported in this process, else :class:`pgmem.Message`.

    Example:
        >>> memory = Memory("role:Engineer")
        >>> memory.add(Message(content="Write the game", cause_by=WriteDesign))
        >>> memory.get_by_action(WriteDesign)
    """

    def __init__(
        self,
        key: str | None = None,
        *,
        client: Client | None = None,
        ignore_id: bool = False,
        message_class: type[Any] | None = None,
    ) -> None:
        self.key = key if key is not None else f"memory:{uuid.uuid4().hex}"
        self._client = client
        self.ignore_id = ignore_id
        self._codec: MessageCodec[Any] = MessageCodec(message_class)
        self.index = MemoryIndex(self)
        from pgmem.checks import check_key

        check_key(self.key)

    @property
    def client(self) -> Client:
        return self._client if self._client is not None else get_default_client()

    def _core(self, message: Any) -> Any:
        if self.ignore_id:
            try:
                message.id = IGNORED_MESSAGE_ID  # MetaGPT does the same to the caller's object
            except (AttributeError, TypeError, ValueError):
                pass
        core = to_stored(self._codec, message)
        if self.ignore_id and stored_id(message) is None:
            core.id = IGNORED_MESSAGE_ID
        return core

    def _storage_id(self, message: Any, *, as_added: bool = True) -> str:
        """The stored id of a caller's message, without converting it (find_news reads only ids).

        ``as_added``: with ``ignore_id``, the id the message gets when added (MetaGPT's ``add`` and
        ``delete`` set it to ``"0"``; its ``find_news`` compares the observed message as it is)."""
        if self.ignore_id and as_added:
            try:
                message.id = IGNORED_MESSAGE_ID
            except (AttributeError, TypeError, ValueError):
                pass
        derived = stored_id(message)
        if derived is not None:
            return derived
        message_id = getattr(message, "id", None)
        content = getattr(message, "content", None) or ""
        if self.ignore_id or not isinstance(message_id, str):
            message_id = IGNORED_MESSAGE_ID
        return storage_id_of(message_id, content)

    def _out(self, messages: list[Any]) -> list[Any]:
        return self._codec.from_core_list(messages)

    def add(self, message: Any) -> None:
        """Add a message; a message already present (by id, or by content with ``ignore_id``) is ignored."""
        self.client.messages.add(self.key, self._core(message))

    def add_batch(self, messages: Iterable[Any]) -> None:
        """Add messages in order, all or nothing, in one round trip."""
        self.client.messages.add_many(self.key, [self._core(m) for m in messages])

    def get_by_role(self, role: str) -> list[Any]:
        return self._out(self.client.messages.by_role(self.key, role))

    def get_by_content(self, content: str) -> list[Any]:
        """Messages whose content contains ``content``."""
        return self._out(self.client.messages.by_content(self.key, content))

    def delete_newest(self) -> Any:
        """Remove and return the newest message (None when empty)."""
        found = self.client.messages.delete_newest(self.key)
        return None if found is None else self._codec.from_core(found)

    def delete(self, message: Any) -> None:
        """Remove a message; :class:`pgmem.InvalidInput` (a ``ValueError``, as MetaGPT's ``list.remove``)
        when the memory does not hold it."""
        if not self.client.messages.delete(self.key, self._storage_id(message)):
            raise InvalidInput(f"Memory.delete: memory {self.key!r} does not hold this message")

    def clear(self) -> None:
        self.client.messages.clear(self.key)

    def count(self) -> int:
        return self.client.messages.count(self.key)

    def try_remember(self, keyword: str) -> list[Any]:
        """Messages whose content contains ``keyword``."""
        return self.get_by_content(keyword)

    def get(self, k: int = 0) -> list[Any]:
        """The most recent ``k`` messages, oldest first; all of them when ``k`` is 0. MetaGPT slices
        ``storage[-k:]``, so a negative ``k`` is every message but the first ``-k``."""
        if isinstance(k, bool) or not isinstance(k, int):
            raise InvalidInput(f"k must be an integer, got {k!r}")
        if k < 0:
            return self._out(self.client.messages.last(self.key)[-k:])
        return self._out(self.client.messages.last(self.key, k))

    def context(self, budget: int, *, query: str | None = None, reserve: int = 0, **options: Any) -> list[Any]:
        """:meth:`get` under a token budget: what to send the model next, at most ``budget - reserve``
        tokens: pinned system messages, the summary of older messages, messages related to ``query`` and
        the newest ones (``client.context``; ``options``: its other arguments), as MetaGPT messages."""
        ctx = self.client.context(self.key, budget=budget, query=query, reserve=reserve, **options)
        return self._out(ctx.messages)

    @property
    def storage(self) -> list[Any]:
        """Every message, oldest first (a snapshot; MetaGPT's ``storage`` list)."""
        return self.get()

    def find_news(self, observed: list[Any], k: int = 0) -> list[Any]:
        """The observed messages not among the most recent ``k`` (all when 0; see :meth:`get` for a
        negative ``k``): one query."""
        ids = [self._storage_id(m, as_added=False) for m in observed]
        if isinstance(k, int) and not isinstance(k, bool) and k < 0:
            seen = {storage_id(m) for m in self.client.messages.last(self.key)[-k:]}
            return [m for m, i in zip(observed, ids, strict=True) if i not in seen]
        positions = self.client.messages.new_positions(self.key, ids, k)
        return [observed[i] for i in positions]

    def get_by_action(self, action: Any) -> list[Any]:
        """Messages caused by ``action`` (a class or ``module.ClassName``)."""
        return self._out(self.client.messages.by_action(self.key, any_to_str(action)))

    def get_by_actions(self, actions: Iterable[Any]) -> list[Any]:
        return self._out(self.client.messages.by_actions(self.key, actions))

    def get_by_position(self, position: int) -> Any:
        """The message at ``position`` (negative counts from the end); None when out of range."""
        found = self.client.messages.at(self.key, position)
        return None if found is None else self._codec.from_core(found)

    def __repr__(self) -> str:
        return f"Memory(key={self.key!r})"


class MemoryIndex(Mapping[str, list[Any]]):
    """Read-only view of MetaGPT's ``Memory.index``: action (``module.ClassName``) → its messages.

    ``index[action]`` on an action with no messages returns ``[]`` (MetaGPT's index is a defaultdict);
    ``index.get(action)`` returns None for it; ``len(index)`` counts the actions with messages.
    """

    def __init__(self, memory: Memory) -> None:
        self._memory = memory

    def __getitem__(self, action: Any) -> list[Any]:
        return self._memory.get_by_action(action)

    def get(self, action: Any, default: Any = None) -> Any:
        found = self._memory.get_by_action(action)
        return found if found else default

    def __contains__(self, action: object) -> bool:
        return bool(self._memory.get_by_action(action))

    def __iter__(self) -> Iterator[str]:
        return iter(self._memory.client.messages.actions(self._memory.key))

    def __len__(self) -> int:
        return self._memory.client.messages.count_actions(self._memory.key)
