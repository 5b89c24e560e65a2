"""``pgmem.integrations.openmanus.Memory``: OpenManus's sliding-window memory over durable rows."""

from __future__ import annotations

import sys
import threading
import uuid
import warnings
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SerializerFunctionWrapHandler, model_serializer

from pgmem import Client
from pgmem.checks import check_key
from pgmem.connecting import get_default_client
from pgmem.errors import InvalidInput
from pgmem.integrations.codec import MessageCodec
from pgmem.integrations.openmanus.schema import Message, Role
from pgmem.models import Message as CoreMessage

__all__ = ["Memory", "drop_orphan_tool_results", "openmanus_memory_class", "valid_conversation"]


def valid_conversation(messages: list[CoreMessage]) -> list[CoreMessage]:
    """The messages as a conversation the OpenAI chat API accepts.

    * A tool result whose assistant tool call is not earlier in the window is dropped (OpenManus issue
      744: a window that starts inside a tool exchange).
    * Tool results come right after the assistant message that called them, in the order of its calls
      (the first result of a call counts). With one agent they already do; agents sharing a memory can
      interleave their messages, and the API rejects a tool result that does not follow its call.
    * An assistant message keeps only the tool calls answered in the window: a call another process has
      not answered yet (or whose answer fell out of the window) would make the request invalid. It is
      left out when nothing of it remains (no content, no answered call).
    """
    calls: set[str] = set()
    results: dict[str, CoreMessage] = {}
    for message in messages:
        if message.role == Role.TOOL.value:
            if message.tool_call_id in calls and message.tool_call_id not in results:
                results[message.tool_call_id] = message  # the first answer of a call counts
        else:
            calls.update(str(call.get("id")) for call in message.tool_calls or ())
    out: list[CoreMessage] = []
    for message in messages:
        if message.role == Role.TOOL.value:
            continue
        if not message.tool_calls:
            out.append(message)
            continue
        answered = [call for call in message.tool_calls if str(call.get("id")) in results]
        if len(answered) < len(message.tool_calls):
            if not answered and not message.content:
                continue
            message = message.model_copy(update={"tool_calls": answered or None})
        out.append(message)
        out.extend(results[str(call.get("id"))] for call in answered)
    return out


def drop_orphan_tool_results(messages: list[CoreMessage]) -> list[CoreMessage]:
    """Former name of :func:`valid_conversation` (which also regroups tool results and pending calls)."""
    return valid_conversation(messages)


_BOUND: dict[type, type[Memory]] = {}
_BOUND_MESSAGE_CLASS: dict[type, type | None] = {}
_BOUND_LOCK = threading.Lock()


def _upstream_memory_class() -> type[BaseModel] | None:
    """OpenManus's ``app.schema.Memory`` when OpenManus is imported in this process (never imports it)."""
    module = sys.modules.get("app.schema")
    cls = getattr(module, "Memory", None)
    if (
        isinstance(cls, type)
        and issubclass(cls, BaseModel)
        and {"messages", "max_messages"} <= set(cls.model_fields)
        and callable(getattr(cls, "add_message", None))
        and callable(getattr(cls, "to_dict_list", None))
    ):
        return cls
    return None


def openmanus_memory_class(upstream: type[BaseModel]) -> type[Memory]:
    """pgmem's :class:`Memory` as a subclass of OpenManus's ``app.schema.Memory`` as well.

    OpenManus's agents declare ``memory: app.schema.Memory`` and replace a memory that is not an instance
    of it (``BaseAgent.initialize_agent``); pydantic does not honour ``ABC.register``. So when
    ``app.schema`` is imported, ``Memory(...)`` builds an instance of this class (made once per upstream
    class): pgmem's methods and window first, OpenManus's class as a base, its message class as the class
    messages come back as.
    """
    with _BOUND_LOCK:
        bound = _BOUND.get(upstream)
        if bound is None:
            field = upstream.model_fields["messages"]
            namespace: dict[str, Any] = {
                "__module__": __name__,
                "__qualname__": "Memory",
                "__doc__": Memory.__doc__,
                "__annotations__": {"messages": field.annotation},
                # Declared again so that pydantic does not take pgmem's `messages` property for the
                # default value; the property still answers every access (a data descriptor).
                "messages": Field(default_factory=list),
            }
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r".*shadows an attribute in parent.*", category=UserWarning)
                metaclass: Any = type(upstream)
                bound = metaclass("Memory", (Memory, upstream), namespace)
            _BOUND[upstream] = bound
            _BOUND_MESSAGE_CLASS[bound] = _message_class_of(upstream)
        return bound


def _message_class_of(upstream: type[BaseModel]) -> type | None:
    """The item class of ``upstream``'s ``messages: List[Message]`` annotation."""
    annotation = upstream.model_fields["messages"].annotation
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


class Memory(BaseModel):
    """OpenManus's ``Memory`` on Postgres: the same fields and methods, the messages durable and shared.

    ``messages`` is the window: the last ``max_messages`` messages of the memory, as a valid OpenAI
    conversation (see :func:`valid_conversation`); older messages stay in the database unless ``purge``.
    Assigning ``messages`` writes to the database: a list that extends the window read last (what
    OpenManus's ``self.messages += [msg]`` does) appends the new messages, so agents sharing the memory
    lose none of each other's; any other list replaces the memory's contents, in one transaction.
    Messages come back as the class you add (``app.schema.Message`` in OpenManus), or ``message_class``.

    When OpenManus's ``app.schema`` is imported, ``Memory(...)`` is also an instance of
    ``app.schema.Memory`` (:func:`openmanus_memory_class`), so it can be an agent's ``memory`` field.
    ``model_dump()`` reads the window; an agent's ``model_dump()`` (which serialises it as OpenManus's
    ``Memory``) shows the window as this object last read or wrote it.

    Args:
        key: names the memory; processes opening the same key share it. ``None``: a new memory.
        client: a :class:`pgmem.Client`; ``None`` uses the process-wide default client.
        max_messages: size of the window ``messages`` shows (OpenManus's default, 100).
        purge: delete messages that leave the window instead of keeping them as history.
        messages: messages the memory holds from now on (they replace what the key held).
        message_class: the class messages are returned as.

    Example:
        >>> agent = ToolCallAgent(memory=Memory("agent:manus", max_messages=50))   # OpenManus's agent
        >>> memory = Memory("agent:manus")                # in another process: the same memory
        >>> memory.add_message(Message.user_message("Find the bug"))
        >>> memory.to_dict_list()[-1]
        {'role': 'user', 'content': 'Find the bug'}
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    # The window as this object last read or wrote it (what a model_dump through OpenManus's class shows);
    # attribute access goes through the `messages` property installed below.
    messages: list[Any] = Field(default_factory=list)
    max_messages: int = 100
    key: str = Field(default_factory=lambda: f"openmanus:{uuid.uuid4().hex}")
    purge_old: bool = False

    _client: Client | None = PrivateAttr(default=None)
    _codec: MessageCodec[Any] = PrivateAttr(default_factory=lambda: MessageCodec(validate=True))
    # The elements of the window the `messages` getter returned last (None: never read).
    _last_read: tuple[Any, ...] | None = PrivateAttr(default=None)

    def __new__(cls, *args: Any, **kwargs: Any) -> Memory:  # noqa: ARG004 - __init__ takes them
        if cls is Memory:
            upstream = _upstream_memory_class()
            if upstream is not None:
                cls = openmanus_memory_class(upstream)
        return super().__new__(cls)

    def __init__(
        self,
        key: str | None = None,
        *,
        client: Client | None = None,
        max_messages: int = 100,
        purge: bool = False,
        message_class: type[Any] | None = None,
        **data: Any,
    ) -> None:
        if not isinstance(max_messages, int) or isinstance(max_messages, bool) or max_messages < 1:
            raise InvalidInput(f"max_messages must be a positive integer, got {max_messages!r}")
        if key is not None:
            data["key"] = check_key(key)
        initial = data.pop("messages", None)
        super().__init__(max_messages=max_messages, purge_old=purge, **data)
        check_key(self.key)
        self._client = client
        if message_class is None:
            message_class = _BOUND_MESSAGE_CLASS.get(type(self))
        self._codec = MessageCodec(message_class, validate=True)
        if initial is not None:
            self._replace(list(initial))

    # -- plumbing ---------------------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        return self._client if self._client is not None else get_default_client()

    def _cores(self, messages: Iterable[Any]) -> list[CoreMessage]:
        cores = []
        for message in messages:
            if message is None or isinstance(message, str | bytes | dict):
                raise InvalidInput(f"expected a message object, got {type(message).__name__}")
            cores.append(self._codec.to_core(message).model_copy(update={"id": uuid.uuid4().hex}))
        return cores

    def _out(self, cores: list[CoreMessage]) -> list[Any]:
        out = []
        for core in cores:
            message = self._codec.from_core(core)
            if isinstance(message, CoreMessage):  # no caller class known in this process yet
                message = Message.model_validate(
                    {f: getattr(core, f) for f in ("role", "content", "tool_calls", "name", "tool_call_id")}
                    | core.metadata.get("__extra__", {})
                )
            out.append(message)
        return out

    def _replace(self, messages: list[Any]) -> None:
        cores = self._cores(messages)  # every message checked before anything is written
        client = self.client
        with client.transaction() as conn:
            client.messages.clear(self.key, connection=conn)
            if cores:
                client.messages.add_many(self.key, cores, connection=conn)
        self._after_write(messages)
        if self.purge_old:
            self.purge()

    def _after_write(self, messages: list[Any]) -> None:
        self.__dict__["messages"] = list(messages[-self.max_messages :])
        self._last_read = None

    # -- OpenManus's API --------------------------------------------------------------------------------

    def add_message(self, message: Any) -> None:
        """Append a message (each call stores a new message, as OpenManus appends to its list)."""
        self.client.messages.add(self.key, self._cores([message])[0])
        if self.purge_old:
            self.purge()

    def add_messages(self, messages: list[Any]) -> None:
        """Append messages in order, all or nothing, in one round trip."""
        cores = self._cores(messages)
        if cores:
            self.client.messages.add_many(self.key, cores)
        if self.purge_old:
            self.purge()

    def clear(self) -> None:
        """Remove every message of this memory from the database."""
        self.client.messages.clear(self.key)
        self.__dict__["messages"] = []
        self._last_read = None

    def purge(self) -> int:
        """Delete the messages older than the window; return how many (``client.retention.trim``)."""
        return self.client.retention.trim(self.key, self.max_messages)

    def _get_messages(self) -> list[Any]:
        window = self.get_recent_messages(self.max_messages)
        self.__dict__["messages"] = list(window)
        self._last_read = tuple(window)
        return window

    def _set_messages(self, value: Iterable[Any]) -> None:
        if isinstance(value, str | bytes | dict) or not isinstance(value, Iterable):
            raise InvalidInput(f"messages must be a list of messages, got {type(value).__name__}")
        new = list(value)
        base = self._last_read
        if base is None or not _starts_with(new, base):
            base = tuple(self.get_recent_messages(self.max_messages))
        if _starts_with(new, base):
            self.add_messages(new[len(base) :])
            self._after_write(new)
        else:
            self._replace(new)

    def get_recent_messages(self, n: int) -> list[Any]:
        """``messages[-n:]`` as OpenManus slices it (``n`` = 0: the whole window; negative: all but the
        first ``-n``), without a tool result whose call is not in the slice."""
        if not isinstance(n, int) or isinstance(n, bool):
            raise InvalidInput(f"n must be an integer, got {n!r}")
        if n > 0:
            recent = self.client.messages.last(self.key, min(n, self.max_messages))
        else:
            recent = self.client.messages.last(self.key, self.max_messages)[-n:]
        return self._out(valid_conversation(recent))

    def context(self, budget: int, *, query: str | None = None, reserve: int = 0, **options: Any) -> list[Any]:
        """What to send the model next, at most ``budget - reserve`` tokens, as messages of this memory's
        class: pinned system messages, the summary of older turns, messages related to ``query`` and the
        newest turns, tool calls with all their results (``client.context``; ``options``: its other
        arguments). Where OpenManus cuts its window at ``max_messages``, this cuts at a token budget."""
        ctx = self.client.context(self.key, budget=budget, query=query, reserve=reserve, **options)
        return self._out(ctx.messages)

    def to_dict_list(self) -> list[dict[str, Any]]:
        """The window in the OpenAI chat format."""
        return [m.to_dict() if hasattr(m, "to_dict") else Message.model_validate(m).to_dict() for m in self.messages]

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> Any:
        self._get_messages()  # model_dump shows the window as it is now
        return handler(self)

    def __len__(self) -> int:
        return len(self.messages)

    def __bool__(self) -> bool:
        return True  # OpenManus's Memory is always truthy; an empty window must not read as "no memory"

    def __repr__(self) -> str:
        return f"Memory(key={self.key!r}, max_messages={self.max_messages})"


# The window is a property over the database; installed after pydantic built the model so that `messages`
# stays a declared field (constructor argument, model_dump) while every access goes through the property.
Memory.messages = property(Memory._get_messages, Memory._set_messages)  # type: ignore[assignment]


def _starts_with(items: list[Any], prefix: tuple[Any, ...]) -> bool:
    return len(items) >= len(prefix) and all(a is b or a == b for a, b in zip(prefix, items, strict=False))
