"""Input checks and limits shared by every layer: namespaces, memory keys, message ids, text and JSON.

Everything here runs before any SQL is sent, so a bad value in a batch rejects the whole batch with
nothing written. The limits are part of the public contract (README, "Limits").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
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
    _storable(name, "name", "")  # a lone surrogate: the digest below could not encode it
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


def _storable(value: str, field: str, where: str) -> bytes:
    """``value`` in UTF-8; raises :class:`InvalidInput` naming ``field`` for a NUL byte or a lone surrogate
    (which UTF-8 cannot encode: the encoder's error is the check, at memory speed)."""
    if "\x00" in value:
        raise InvalidInput(f"{where}{field} contains a NUL byte (\\x00), which PostgreSQL text cannot store")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{where}{field} contains a lone surrogate at position {exc.start}") from None


def check_text(value: str, field: str, where: str, *, max_chars: int | None = MAX_NAME_CHARS) -> None:
    encoded = _storable(value, field, where)
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInput(f"{where}{field} is {len(value)} characters long; the limit is {max_chars}")
    if max_chars is None and len(encoded) > MAX_CONTENT_BYTES:
        raise InvalidInput(f"{where}{field} is {len(encoded)} bytes; the limit is {MAX_CONTENT_BYTES}")


def check_query_text(value: Any, name: str) -> str:
    """A string a read compares with stored text (a role, an action, a needle, a query, a label...):
    raises :class:`InvalidInput` naming the parameter ``name`` unless it is a string Postgres text could
    hold, before anything is sent.

    A NUL byte is refused like a lone surrogate, as writes refuse both: no stored text can contain one, so
    the read could only ever find nothing, and refusing it says so instead of hiding a caller's bug. Other
    Unicode (RTL marks, BOM, zero-width joiners, U+2028) is ordinary text. No length limit: a long
    needle finds nothing, which is its answer.
    """
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, got {type(value).__name__}")
    _storable(value, name, "")
    return value


def check_query_texts(values: Any, name: str) -> list[str]:
    """:func:`check_query_text` for each string of ``values`` (one encoding of them all: a list of
    thousands costs one pass); the error names the parameter and the string's index."""
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise InvalidInput(f"{name} must be a list of strings, got {type(values).__name__}")
    texts = list(values)
    for i, value in enumerate(texts):
        if not isinstance(value, str):
            raise InvalidInput(f"{name}[{i}] must be a string, got {type(value).__name__}")
    joined = "".join(texts)
    if "\x00" in joined or not _encodes(joined):
        for i, value in enumerate(texts):
            _storable(value, f"{name}[{i}]", "")
    return texts


def unencodable(params: Mapping[str, Any]) -> InvalidInput:
    """The error for a statement's parameters the driver could not encode (a lone surrogate that reached
    it past the checks): names the first parameter holding one. Only called once encoding failed, so
    the statements that pass pay nothing for it."""
    for name, value in params.items():
        values = [value] if isinstance(value, str) else value if isinstance(value, list | tuple) else ()
        for text in values:
            if isinstance(text, str) and not _encodes(text):
                try:
                    _storable(text, name, "")
                except InvalidInput as exc:
                    return exc
    return InvalidInput("a parameter contains text that UTF-8 cannot encode (a lone surrogate)")


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_default(value: Any) -> Any:
    if is_pydantic_model(value):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


# -- JSON as jsonb stores it exactly ----------------------------------------------------------------------
# jsonb keeps numbers as ``numeric``, which drops what tells a Python float from an int and has no
# negative zero: ``1e16`` came back as the int 10000000000000000, ``1.5e300`` as an int unequal to the
# float, ``-0.0`` as ``0.0``. Two rewrites of the JSON text make the round trip exact and keep the values
# plain jsonb numbers for SQL (``(metadata->>'x')::float8`` still works):
# * a float written with a positive exponent (Python's repr from 1e16 up) is written out in full with a
#   ``.0`` (its exact value: numeric keeps the scale, so it reads back as the same float);
# * ``-0.0`` is stored as the object ``{"__pgmem__": "-0.0"}``; a caller's own object whose only key is
#   ``__pgmem__`` is stored as ``{"__pgmem__": {"dict": <its value>}}``, so the tag is never ambiguous.
# :func:`load_json` undoes both (the object hook runs only when the text holds the tag).

#: Deepest nesting of arrays and objects accepted in a JSON value (well below Python's recursion limit,
#: which ``json`` hits near 1,000, and PostgreSQL's stack-depth limit on jsonb).
MAX_JSON_DEPTH = 100

JSON_TAG = "__pgmem__"
_TAG_TEXT = f'"{JSON_TAG}"'
_TAG_BYTES = _TAG_TEXT.encode()
# A JSON string (skipped), or a number token that needs rewriting: an exponent form of a float or -0.0.
_NUMBER_RE = re.compile(r'"(?:[^"\\]|\\.)*"|(-?[0-9]+(?:\.[0-9]+)?[eE]\+[0-9]+|-0\.0(?![0-9.eE]))')
# A \u0000 escape that is not itself an escaped backslash followed by "u0000" (an even number of
# backslashes before it): what json.dumps writes for a real NUL character.
_NUL_ESCAPE_RE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _number(match: re.Match[str]) -> str:
    token = match.group(1)
    if token is None:
        return match.group(0)
    if token == "-0.0":
        return f'{{{_TAG_TEXT}:"-0.0"}}'
    return f"{int(float(token))}.0"


def _check_depth(value: Any, field: str, where: str) -> bool:
    """Raise unless ``value`` nests at most :data:`MAX_JSON_DEPTH` deep (no recursion: a walk with a
    stack); return whether it holds an object whose only key is the tag (it is then escaped)."""
    tagged = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
            tagged = tagged or (len(node) == 1 and JSON_TAG in node)
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise InvalidInput(f"{where}{field} nests JSON deeper than {MAX_JSON_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))
    return tagged


def check_json_depth(value: Any, field: str, where: str = "") -> None:
    """Raise :class:`InvalidInput` when ``value`` nests deeper than :data:`MAX_JSON_DEPTH` (before any
    code that would recurse through it)."""
    _check_depth(value, field, where)


def _escape_tag(value: Any) -> Any:
    # Bounded by MAX_JSON_DEPTH (checked first), so recursing is safe.
    if isinstance(value, dict):
        out = {k: _escape_tag(v) for k, v in value.items()}
        return {JSON_TAG: {"dict": out[JSON_TAG]}} if len(out) == 1 and JSON_TAG in out else out
    if isinstance(value, list | tuple):
        return [_escape_tag(v) for v in value]
    return value


def _untag(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and JSON_TAG in obj:
        tagged = obj[JSON_TAG]
        if tagged == "-0.0":
            return -0.0
        if isinstance(tagged, dict) and len(tagged) == 1 and "dict" in tagged:
            return {JSON_TAG: tagged["dict"]}
    return obj


def load_json(text: str | bytes) -> Any:
    """Parse JSON written by :func:`dump_json` (jsonb's text of it), undoing its tags: the exact value."""
    tagged = _TAG_TEXT in text if isinstance(text, str) else _TAG_BYTES in text
    if tagged:
        return json.loads(text, object_hook=_untag)
    return json.loads(text)


def dump_json(value: Any, field: str, where: str = "") -> str:
    """Serialise ``value`` as strict JSON for a ``jsonb`` column, so that :func:`load_json` gives it back
    exactly (types and values: big ints, floats, ``-0.0``; tuples come back as lists).

    Raises :class:`InvalidInput` naming ``field`` for what is not JSON or not storable: NaN or infinity,
    nesting deeper than :data:`MAX_JSON_DEPTH`, a NUL character (jsonb cannot store ``\\u0000``; the six
    characters backslash-u-0-0-0-0 inside a string are fine), a lone surrogate, or more than
    :data:`MAX_JSON_BYTES` bytes as stored.
    """
    if _check_depth(value, field, where):
        value = _escape_tag(value)
    try:
        text = json.dumps(value, default=_json_default, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{where}{field} is not JSON: {exc}") from None
    except RecursionError:  # a pydantic model or a set nesting deeper inside (converted by _json_default)
        raise InvalidInput(f"{where}{field} nests JSON deeper than {MAX_JSON_DEPTH} levels") from None
    if "\\u0000" in text and _NUL_ESCAPE_RE.search(text):
        raise InvalidInput(f"{where}{field} contains a NUL character (\\x00), which PostgreSQL jsonb cannot store")
    if "e+" in text or "-0.0" in text:
        text = _NUMBER_RE.sub(_number, text)
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
    if not isinstance(message.created_at, datetime):
        raise InvalidInput(f"{where}created_at must be a datetime, not {type(message.created_at).__name__}")
    return where


def messages_pass(messages: list[Any]) -> bool:
    """Whether every message of a batch passes :func:`check_message`, told in one pass per field at memory
    speed: each field's strings joined and encoded once (a lone surrogate fails the encoding, a NUL shows in
    the joined text) instead of a check per field per message. True only when every one passes; False
    says one may not, and :func:`check_message` on each then names the first bad one exactly."""
    try:
        if not all(isinstance(m, Message) for m in messages):
            return False
        match = _ID_RE.fullmatch
        if not all(m.id == IGNORED_MESSAGE_ID or match(m.id) for m in messages):
            return False
        if not all(isinstance(m.created_at, datetime) for m in messages):
            return False
        contents = [m.content for m in messages]
        text = "".join(contents)
        if "\x00" in text or not _encodes(text):
            return False
        # Only a text longer than a quarter of the limit can hold more bytes than the limit (4 bytes at
        # most per character): only those are measured.
        quarter = MAX_CONTENT_BYTES // 4
        if any(len(c.encode("utf-8")) > MAX_CONTENT_BYTES for c in contents if len(c) > quarter):
            return False
        names = [m.role for m in messages]
        names += [m.cause_by for m in messages]
        names += [m.sent_from for m in messages]
        names += [m.name for m in messages if m.name is not None]
        names += [m.tool_call_id for m in messages if m.tool_call_id is not None]
        names += [name for m in messages for name in m.send_to]
        text = "".join(names)
        return "\x00" not in text and _encodes(text) and max(map(len, names), default=0) <= MAX_NAME_CHARS
    except (TypeError, AttributeError):  # a field of the wrong type: check_message says which
        return False


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
