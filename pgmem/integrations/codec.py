"""Convert between the caller's message objects and :class:`pgmem.Message`.

Facades accept any message object with MetaGPT- or OpenAI-style attributes (``content``, ``role``,
``cause_by``, ``send_to``…) — a real ``metagpt.schema.Message`` among them — and return objects of the
caller's class. Fields of the caller's class that pgmem has no column for travel in
``metadata["__extra__"]`` and are restored on the way back, as does a ``content`` of ``None`` (OpenAI's
assistant message that only calls tools), which the ``content`` column stores as ``""``.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from pgmem.errors import InvalidInput
from pgmem.models import Message, resolve_class

T = TypeVar("T")

CORE_FIELDS = (
    "id",
    "content",
    "instruct_content",
    "role",
    "cause_by",
    "sent_from",
    "send_to",
    "metadata",
    "tool_calls",
    "name",
    "tool_call_id",
    "created_at",
)
EXTRA_KEY = "__extra__"


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _fields_of(cls: type) -> set[str] | None:
    fields = Message.FIELDS if cls is Message else getattr(cls, "model_fields", None)
    return set(fields) if fields is not None else None


class MessageCodec(Generic[T]):
    """Two-way conversion for one caller message class (``None``: whatever class the caller passes).

    Example:
        >>> codec = MessageCodec(MyMessage)
        >>> core = codec.to_core(MyMessage(content="hi"))
        >>> codec.from_core(core)  # a MyMessage again

    Args:
        message_class: the class messages are returned as (``None``: the class of the first message
            converted, else the class recorded with each row when it is imported).
        validate: build the caller's pydantic messages with ``model_validate`` (nested models such as
            OpenManus's ``ToolCall`` come back as objects, not dicts) instead of ``model_construct``.
    """

    def __init__(self, message_class: type[T] | None = None, *, validate: bool = False) -> None:
        self.message_class = message_class
        self.validate = validate

    def to_core(self, obj: Any) -> Message:
        if isinstance(obj, Message):
            return obj
        if obj is None or isinstance(obj, str | bytes | int | float):
            raise InvalidInput(f"expected a message object, got {type(obj).__name__}")
        cls = type(obj)
        if self.message_class is None:
            self.message_class = cls  # remember the caller's class for reads
        data: dict[str, Any] = {}
        for field in CORE_FIELDS:
            if hasattr(obj, field):
                value = getattr(obj, field)
                if value is not None or field in ("content", "instruct_content", "name", "tool_call_id", "tool_calls"):
                    data[field] = value
        if "content" not in data:
            raise InvalidInput(f"{cls.__name__} has no 'content' attribute")
        content_is_none = data["content"] is None
        if content_is_none:
            data["content"] = ""
        tool_calls = data.get("tool_calls")
        if tool_calls is not None:
            data["tool_calls"] = [t.model_dump(mode="json") if isinstance(t, BaseModel) else t for t in tool_calls]
        metadata = dict(data.get("metadata") or {})
        extra = self._extra_fields(obj)
        if content_is_none:
            extra["content"] = None
        if extra:
            metadata[EXTRA_KEY] = extra
        data["metadata"] = metadata
        if not isinstance(data.get("created_at"), datetime):
            data.pop("created_at", None)
        role = data.get("role")
        if isinstance(role, Enum):
            data["role"] = role.value
        try:
            core = Message.model_validate(data)
        except ValueError as exc:
            raise InvalidInput(f"cannot store this {cls.__name__}: {exc}") from exc
        core._source_class = class_path(cls)
        return core

    @staticmethod
    def _extra_fields(obj: Any) -> dict[str, Any]:
        if not isinstance(obj, BaseModel):
            return {}
        extra = {}
        for name in type(obj).model_fields:
            if name in CORE_FIELDS:
                continue
            value = getattr(obj, name)
            if value is None:
                continue
            extra[name] = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        return extra

    def target_class(self, message: Message) -> type[Any]:
        if self.message_class is not None:
            return self.message_class
        if message._source_class:
            found = resolve_class(message._source_class)
            if found is not None:
                return found
        return Message

    def from_core(self, message: Message) -> T:
        cls = self.target_class(message)
        if cls is Message:
            return message  # type: ignore[return-value]
        fields = _fields_of(cls)
        metadata = dict(message.metadata)
        extra = metadata.pop(EXTRA_KEY, {})
        values: dict[str, Any] = {name: getattr(message, name) for name in CORE_FIELDS}
        values["metadata"] = metadata
        values.update(extra)
        if fields is not None:
            values = {k: v for k, v in values.items() if k in fields}
        if isinstance(cls, type) and issubclass(cls, BaseModel):
            if self.validate:
                try:
                    return cls.model_validate(values)  # type: ignore[return-value]
                except ValueError as exc:
                    raise InvalidInput(f"a stored message is not a valid {cls.__name__}: {exc}") from exc
            # The values come from rows pgmem validated on the way in and are already in the caller's
            # normal form (sets, module.ClassName strings), so skip re-validation: it is most of the cost
            # of reading a message back.
            return cls.model_construct(**values)  # type: ignore[return-value]
        return cls(**values)  # type: ignore[no-any-return]

    def from_core_list(self, messages: list[Message]) -> list[T]:
        return [self.from_core(m) for m in messages]
