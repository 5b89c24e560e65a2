"""Conversion between :class:`pgmem.Message` and table rows (I/O-free; validation runs first, in
:mod:`pgmem.checks`, so a bad message in a batch rejects the whole batch with nothing written)."""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from pydantic import BaseModel, create_model

from pgmem.checks import check_message_id, check_text, dump_json
from pgmem.errors import InvalidInput
from pgmem.models import IGNORED_MESSAGE_ID, Message

# Messages that carry MetaGPT's ignored id are stored under an id derived from their content, so that
# "the same message" (by content) is stored once. '~' is not allowed in caller ids, so these never clash.
_CONTENT_ID_PREFIX = IGNORED_MESSAGE_ID + "~"


def _encode_instruct(value: BaseModel | dict[str, Any] | None, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, BaseModel):
        cls = type(value)
        doc = {"kind": "model", "class": f"{cls.__module__}.{cls.__qualname__}", "value": value.model_dump(mode="json")}
    elif isinstance(value, dict):
        doc = {"kind": "dict", "value": value}
    else:
        raise InvalidInput(f"{where}instruct_content must be a pydantic model or a dict, not {type(value).__name__}")
    return dump_json(doc, "instruct_content", where)


def _resolve_class(path: str) -> type | None:
    """Find an already imported class by ``module.QualName``; never imports (the path comes from the DB)."""
    module_name, _, qualname = path.rpartition(".")
    while module_name:
        module = sys.modules.get(module_name)
        if module is not None:
            obj: Any = module
            for part in qualname.split("."):
                obj = getattr(obj, part, None)
                if obj is None:
                    return None
            return obj if isinstance(obj, type) else None
        module_name, _, head = module_name.rpartition(".")
        qualname = f"{head}.{qualname}"
    return None


def decode_instruct(doc: dict[str, Any] | None) -> BaseModel | dict[str, Any] | None:
    if doc is None:
        return None
    if doc.get("kind") != "model":
        value: dict[str, Any] = doc.get("value", {})
        return value
    value = doc["value"]
    cls = _resolve_class(doc["class"])
    if cls is not None and issubclass(cls, BaseModel):
        try:
            return cls.model_validate(value)
        except ValueError:
            pass  # the class changed since the row was written; fall back to a plain model
    name = doc["class"].rpartition(".")[2] or "InstructContent"
    fields: dict[str, Any] = {k: (Any, None) for k in value}
    model: type[BaseModel] = create_model(name, **fields)
    return model(**value)


def storage_id(message: Message) -> str:
    return storage_id_of(message.id, message.content)


def storage_id_of(message_id: str, content: str) -> str:
    """The id a message is stored under: its own, or one derived from its content for MetaGPT's ignored id."""
    if message_id == IGNORED_MESSAGE_ID:
        return _CONTENT_ID_PREFIX + hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return message_id


def public_id(stored: str) -> str:
    return IGNORED_MESSAGE_ID if stored.startswith(_CONTENT_ID_PREFIX) else stored


def encode(message: Message, index: int | None = None) -> tuple[Any, ...]:
    """Validate ``message`` and return its row for ``messages`` (column order of ``INSERT_COLUMNS``)."""
    if not isinstance(message, Message):
        raise InvalidInput(f"expected a pgmem.Message, got {type(message).__name__}")
    where = "" if index is None else f"message {index}: "
    check_message_id(message.id, where)
    check_text(message.content, "content", where, max_chars=None)
    for field in ("role", "cause_by", "sent_from"):
        check_text(getattr(message, field), field, where)
    for field in ("name", "tool_call_id"):
        value = getattr(message, field)
        if value is not None:
            check_text(value, field, where)
    for name in message.send_to:
        check_text(name, "send_to", where)
    content_bytes = message.content.encode("utf-8")
    return (
        storage_id(message),
        message.content,
        hashlib.sha256(content_bytes).digest(),
        _encode_instruct(message.instruct_content, where),
        message.role,
        message.cause_by,
        message.sent_from,
        sorted(message.send_to),
        dump_json(message.metadata, "metadata", where),
        None if message.tool_calls is None else dump_json(message.tool_calls, "tool_calls", where),
        message.name,
        message.tool_call_id,
        message._source_class,
        message.created_at,
    )


INSERT_COLUMNS = (
    "id",
    "content",
    "content_hash",
    "instruct_content",
    "role",
    "cause_by",
    "sent_from",
    "send_to",
    "metadata",
    "tool_calls",
    "name",
    "tool_call_id",
    "message_class",
    "created_at",
)


def batch_columns(messages: list[Message]) -> dict[str, list[Any]]:
    """Validate a batch and turn it into one list per column (``INSERT_COLUMNS``), for ``unnest``.

    ``send_to`` travels as one JSON array per message: Postgres arrays of arrays must be rectangular."""
    columns: dict[str, list[Any]] = {name: [] for name in INSERT_COLUMNS}
    lists = list(columns.values())
    for index, message in enumerate(messages):
        for target, value in zip(lists, encode(message, index), strict=True):
            target.append(value)
    columns["send_to"] = [json.dumps(v) for v in columns["send_to"]]
    return columns


_new_message = object.__new__
_set = object.__setattr__
_ALL_FIELDS = frozenset(Message.model_fields)


def decode(row: tuple[Any, ...]) -> Message:
    """Build a :class:`Message` from a row of ``SELECT_COLUMNS`` (see ``sql/messages.sql``)."""
    (seq, id_, content, instruct, role, cause_by, sent_from, send_to, metadata, tool_calls, name,
     tool_call_id, message_class, created_at) = row  # fmt: skip
    values = {
        "id": public_id(id_),
        "content": content,
        "instruct_content": decode_instruct(instruct),
        "role": role,
        "cause_by": cause_by,
        "sent_from": sent_from,
        "send_to": set(send_to),
        "metadata": metadata,
        "tool_calls": tool_calls,
        "name": name,
        "tool_call_id": tool_call_id,
        "created_at": created_at,
    }
    # What Message.model_construct does, without its per-call introspection (a third of the cost of
    # reading 10 messages back): rows come from columns pgmem validated on the way in.
    message = _new_message(Message)
    _set(message, "__dict__", values)
    _set(message, "__pydantic_fields_set__", set(_ALL_FIELDS))
    _set(message, "__pydantic_extra__", None)
    _set(message, "__pydantic_private__", {"_source_class": message_class, "_seq": seq})
    return message
