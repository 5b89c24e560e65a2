"""What the chat-history adapters (LangChain, the OpenAI Agents SDK, LlamaIndex) share.

* **Clients.** An adapter takes ``client=`` (a :class:`pgmem.Client`; default: the process-wide one) and
  ``async_client=`` (a :class:`pgmem.AsyncClient`). Sync methods use the client. Async methods use the
  async client natively on its event loop when one was given; otherwise they run the sync call in a
  worker thread, so they work from any event loop (the SDKs' ``run_sync`` wrappers start a fresh loop per
  call, which an async client's pool, bound to one loop, would not survive).
* **Keys.** A session id (or chat key) is any non-empty string of at most 200 characters without NUL.
  It becomes the memory ``<prefix><id>`` verbatim when that is a valid memory key and the id does not
  start with ``#``; otherwise ``<prefix>#<32 hex digits of its SHA-256>:<the id with other characters
  replaced by _, at most 64>``, and each message of that memory keeps the id itself in its metadata
  (:data:`KEY_FIELD`), which is how :func:`session_of` gives it back. Distinct ids never share a memory.
* **Objects.** The framework's own object (a LangChain message as ``message_to_dict`` makes it, an
  Agents SDK item, a LlamaIndex ``ChatMessage`` dumped as JSON) is kept as JSON in the message's
  ``metadata`` under :data:`OBJECT_FIELD`, beside the columns (role, content, name, tool calls) that SQL
  and the views read. Reads return it from there directly (``client.messages.payloads``), without building
  :class:`pgmem.Message` objects.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import re
from collections.abc import Callable
from typing import Any

from pgmem.errors import InvalidInput
from pgmem.integrations._facade import Facade, is_async_client
from pgmem.models import Message

__all__ = [
    "KEY_FIELD",
    "MAX_SESSION_CHARS",
    "OBJECT_FIELD",
    "Adapter",
    "memory_key",
    "require",
    "session_of",
    "stored",
]

#: The metadata key under which the framework's object is kept, as JSON.
OBJECT_FIELD = "__object__"
#: The metadata key holding the session id (chat key) itself when the memory key had to be hashed.
KEY_FIELD = "__key__"
#: Longest session id or chat key accepted, in characters.
MAX_SESSION_CHARS = 200

_VERBATIM = re.compile(r"[A-Za-z0-9_.:@/+=\-][A-Za-z0-9_.:@/+=#\-]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@/+=\-]")


def require(module: str, extra: str, adapter: str) -> None:
    """Import ``module`` or raise ImportError naming the pip extra that installs it."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"pgmem.integrations.{adapter} needs the {module.split('.')[0]} package: pip install 'pgmem[{extra}]'"
        ) from exc


def check_session(name: Any, what: str = "session id") -> str:
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"a {what} must be a non-empty string, got {name!r}")
    if len(name) > MAX_SESSION_CHARS:
        raise InvalidInput(f"a {what} is at most {MAX_SESSION_CHARS} characters; this one has {len(name)}")
    if "\x00" in name:
        raise InvalidInput(f"a {what} cannot contain a NUL byte (\\x00)")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"the {what} has a lone surrogate at position {exc.start}") from None
    return name


def memory_key(prefix: str, name: str, what: str = "session id") -> str:
    """The memory key of the session ``name`` under ``prefix`` (see the module's docstring)."""
    check_session(name, what)
    if _VERBATIM.fullmatch(name):
        return prefix + name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
    return f"{prefix}#{digest}:{_UNSAFE.sub('_', name)[:64]}"


def is_hashed(prefix: str, key: str) -> bool:
    return key.startswith(prefix + "#")


def session_of(prefix: str, key: str, stored_key: Any) -> str | None:
    """The session id of the memory ``key``: the key without ``prefix``, or, for a hashed key, the id its
    messages keep (``stored_key``; None when it holds none)."""
    if not is_hashed(prefix, key):
        return key[len(prefix) :]
    return stored_key if isinstance(stored_key, str) else None


def stored(obj: Any, prefix: str, key: str, session: str, /, **columns: Any) -> Message:
    """A :class:`pgmem.Message` keeping the framework object ``obj`` (JSON) beside ``columns``, in the
    memory ``key`` of ``session``."""
    metadata: dict[str, Any] = {OBJECT_FIELD: obj}
    if is_hashed(prefix, key):
        metadata[KEY_FIELD] = session
    try:
        return Message(metadata=metadata, **columns)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise InvalidInput(f"cannot store this message: {exc}") from None


class Adapter(Facade):
    """A facade over a sync client (sync methods, and async ones run in a thread) and, optionally, an
    async client (async methods, natively)."""

    def __init__(self, client: Any = None, async_client: Any = None) -> None:
        if client is not None and is_async_client(client):
            raise InvalidInput("client= takes a pgmem.Client; pass a pgmem.AsyncClient as async_client=")
        if async_client is not None and not is_async_client(async_client):
            raise InvalidInput(f"async_client= takes a pgmem.AsyncClient, not {type(async_client).__name__}")
        super().__init__(client)
        self.async_client = async_client

    async def acall(self, op: Callable[[Any], Any]) -> Any:
        """``op(client)`` from an async method: awaited on the async client, else run in a worker thread on
        the sync one (``op`` then returns a value, not a coroutine)."""
        if self.async_client is not None:
            return await op(self.async_client)
        return await asyncio.to_thread(lambda: op(self.sync_client()))
