"""Input checks and limits shared by every layer: namespaces, memory keys, message ids, text and JSON.

Everything here runs before any SQL is sent, so a bad value in a batch rejects the whole batch with
nothing written. The limits are part of the public contract (README, "Limits").
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from typing import Any

from pgmem.errors import InvalidInput
from pgmem.models import IGNORED_MESSAGE_ID, Message, is_pydantic_model

#: Largest message content accepted, in UTF-8 bytes.
MAX_CONTENT_BYTES = 1 << 20
#: Largest ``metadata``, ``instruct_content`` or ``tool_calls`` accepted, in bytes of JSON.
MAX_JSON_BYTES = 1 << 20
#: Longest role, action, sender, recipient, name or tool-call id accepted, in characters.
MAX_NAME_CHARS = 1000
#: Largest batch ``add_many`` accepts in one call.
MAX_BATCH = 1_000_000
#: Longest TTL a brain accepts, in seconds (ten years).
MAX_TTL = 10 * 365 * 24 * 3600

_NAMESPACE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}")
_KEY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@/+=#\-]{0,254}")
_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@/+=#\-]{0,127}")


def check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE_RE.fullmatch(namespace):
        raise InvalidInput(
            f"invalid namespace {namespace!r}: use 1-63 characters from A-Z a-z 0-9 _ . - "
            "starting with a letter or digit"
        )
    return namespace


def key_for(prefix: str, name: str) -> str:
    """A memory key for a free-form name (e.g. MetaGPT's role id ``"Alice(Product Manager)"``).

    ``prefix + name`` when that is a valid key; otherwise the name with every other character replaced
    by ``_``, plus ``#`` and 8 hex digits of its SHA-256, so distinct names never share a key.
    """
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InvalidInput("a name must be a non-empty string without NUL bytes")
    key = prefix + name
    if _KEY_RE.fullmatch(key):
        return key
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    cleaned = re.sub(r"[^A-Za-z0-9_.:@/+=\-]", "_", name)[: 255 - len(prefix) - 9]
    return check_key(f"{prefix}{cleaned}#{digest}")


def check_key(key: str, what: str = "memory key") -> str:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise InvalidInput(
            f"invalid {what} {key!r}: use 1-255 characters from A-Z a-z 0-9 _ . : @ / + = # - "
            "starting with a letter, digit or _"
        )
    return key


def check_text(value: str, field: str, where: str, *, max_chars: int | None = MAX_NAME_CHARS) -> None:
    if "\x00" in value:
        raise InvalidInput(f"{where}{field} contains a NUL byte (\\x00), which PostgreSQL text cannot store")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{where}{field} contains a lone surrogate at position {exc.start}") from None
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInput(f"{where}{field} is {len(value)} characters long; the limit is {max_chars}")
    if max_chars is None and len(encoded) > MAX_CONTENT_BYTES:
        raise InvalidInput(f"{where}{field} is {len(encoded)} bytes; the limit is {MAX_CONTENT_BYTES}")


def _json_default(value: Any) -> Any:
    if is_pydantic_model(value):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dump_json(value: Any, field: str, where: str = "") -> str:
    """Serialise ``value`` as strict JSON (no NaN, no NUL, no lone surrogates) within the size limit."""
    try:
        text = json.dumps(value, default=_json_default, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{where}{field} is not JSON: {exc}") from None
    if "\x00" in text or "\\u0000" in text:
        raise InvalidInput(f"{where}{field} contains a NUL character, which PostgreSQL jsonb cannot store")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{where}{field} contains a lone surrogate at position {exc.start}") from None
    if size > MAX_JSON_BYTES:
        raise InvalidInput(f"{where}{field} is {size} bytes of JSON; the limit is {MAX_JSON_BYTES}")
    return text


def check_message_id(message_id: str, where: str = "") -> str:
    if message_id == IGNORED_MESSAGE_ID:
        return message_id
    if not isinstance(message_id, str) or not _ID_RE.fullmatch(message_id):
        raise InvalidInput(
            f"{where}invalid message id {message_id!r}: use 1-128 characters from A-Z a-z 0-9 _ . : @ / + = # - "
        )
    return message_id


def check_message(message: Message, index: int | None = None) -> str:
    """Validate ``message`` for storage (``index``: its place in a batch, named in the error); return the
    prefix errors about it carry."""
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
    return where


def check_ttl(ttl: Any) -> float | None:
    """A TTL in seconds: a positive number up to :data:`MAX_TTL`, or None (never expires)."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_TTL or ttl != ttl:
        raise InvalidInput(f"timeout must be a number of seconds in (0, {MAX_TTL}], got {ttl!r}")
    return float(ttl)


def check_brain_key(redis_key: Any) -> str:
    """A brain's key (MetaGPT's Redis key): a non-empty string Postgres text can store."""
    if not isinstance(redis_key, str) or not redis_key:
        raise InvalidInput(f"a brain key must be a non-empty string, got {redis_key!r}")
    check_text(redis_key, "key", "brain ")
    return redis_key
