"""``PgmemSession``: the OpenAI Agents SDK's ``SessionABC`` over ``client.messages``.

Each session is the memory ``agents:<session_id>`` (see :mod:`pgmem.integrations._adapters` for ids that
are not valid memory keys). An item is one row of ``pgmem.messages``: its role (the item's, else ``tool``
for ``*_output`` items and ``assistant`` for the others), its text in ``content``, a function call's name
and call id in ``name`` and ``tool_call_id``, and the item itself, as JSON, in
``metadata["__object__"]``, which reads return as it was given.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

from pgmem.errors import InvalidInput
from pgmem.integrations._adapters import OBJECT_FIELD, Adapter, memory_key, stored
from pgmem.models import Message

__all__ = ["PgmemSession"]

PREFIX = "agents:"


def _text_of(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(
            part["text"] for part in value if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return None


def _role(item: Mapping[str, Any]) -> str:
    role = item.get("role")
    if isinstance(role, str) and role:
        return role
    kind = item.get("type")
    return "tool" if isinstance(kind, str) and kind.endswith("_output") else "assistant"


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _check_json(item: Mapping[str, Any], index: int) -> None:
    """Reject an item that is not plain JSON, as the SDK's own sessions do (``json.dumps``): pgmem's JSON
    writer would store a set as a list, a datetime or a pydantic model as what they dump to, and reads
    would return something else than was added."""
    try:
        json.dumps(item, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"item {index} is not JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput(f"item {index} nests JSON too deep") from None


class PgmemSession(SessionABC):
    """Conversation history of one Agents SDK session, kept in pgmem.

    Args:
        session_id: any non-empty string without NUL, at most 200 characters.
        client: the :class:`pgmem.Client` (default: the process-wide one). Without ``async_client`` the
            session's methods run it in a worker thread: they work from any event loop, ``Runner.run_sync``'s
            fresh ones included.
        async_client: a :class:`pgmem.AsyncClient`, used natively (on its own event loop).
        session_settings: :class:`agents.SessionSettings` or a dict of its fields (unknown keys: TypeError);
            its ``limit`` is ``get_items``' default. None: ``SessionSettings()``, as the SDK's sessions.

    ``add_items`` writes all its items in one statement, all or nothing (an item pgmem cannot store raises
    :class:`pgmem.InvalidInput` with nothing written); ``pop_item`` is one statement, and pops from several
    processes at once return each item once.
    """

    session_settings: SessionSettings

    def __init__(
        self,
        session_id: str,
        *,
        client: Any = None,
        async_client: Any = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self._memory = memory_key(PREFIX, session_id)
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self._adapter = Adapter(client, async_client)

    @property
    def memory(self) -> str:
        """The pgmem memory key of this session."""
        return self._memory

    async def _mutate(self, op: Callable[[Any], Any]) -> Any:
        """Run a write to its end even when the caller is cancelled meanwhile (then re-raise the
        cancellation): a popped item is never lost in between, as the SDK's own sessions ensure."""
        task = asyncio.ensure_future(self._adapter.acall(op))
        cancelled: asyncio.CancelledError | None = None
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError as exc:
                if task.cancelled():
                    raise
                cancelled = cancelled or exc
        result = task.result()
        if cancelled is not None:
            raise cancelled
        return result

    def _stored(self, items: list[Any]) -> list[Message]:
        if not isinstance(items, list):
            raise InvalidInput(f"items must be a list, got {type(items).__name__}")
        out = []
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidInput(f"item {index}: expected a dict (an input item), got {type(item).__name__}")
            _check_json(item, index)
            text = _text_of(item.get("content"))
            if text is None:
                text = _text_of(item.get("output")) or ""
            out.append(
                stored(
                    dict(item),
                    PREFIX,
                    self._memory,
                    self.session_id,
                    content=text,
                    role=_role(item),
                    name=_optional_str(item.get("name")),
                    tool_call_id=_optional_str(item.get("call_id")),
                )
            )
        return out

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The latest ``limit`` items (default: ``session_settings.limit``; None: all), oldest first."""
        session_limit = resolve_session_limit(limit, self.session_settings)
        if session_limit is not None:
            if isinstance(session_limit, bool) or not isinstance(session_limit, int) or session_limit < 0:
                raise InvalidInput(f"limit must be a non-negative integer or None, got {session_limit!r}")
            if session_limit == 0:
                return []
        last = session_limit or 0
        items: list[Any] = await self._adapter.acall(
            lambda c: c.messages.payloads(self._memory, OBJECT_FIELD, last=last)
        )
        return items

    async def add_items(self, items: list[Any]) -> None:
        batch = self._stored(items)
        if batch:
            await self._mutate(lambda c: c.messages.append(self._memory, batch))

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item (None when the session is empty)."""
        popped: Message | None = await self._mutate(lambda c: c.messages.delete_newest(self._memory))
        if popped is None:
            return None
        return popped.metadata.get(OBJECT_FIELD, {"role": popped.role, "content": popped.content})

    async def clear_session(self) -> None:
        await self._mutate(lambda c: c.messages.clear(self._memory))

    def close(self) -> None:
        """Nothing to release: the session never owns its clients (close them yourself)."""
