# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The message repository's removals (:class:`pgmem.AsyncMessageRepository`): delete, delete_many,
delete_newest, delete_at, delete_oldest, move_oldest, clear and trim."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection

from pgmem._sync.message_base import MessageBase, _positive
from pgmem.checks import check_key, check_message_id
from pgmem.errors import InvalidInput
from pgmem.models import Message, storage_id
from pgmem.planning.rows import decode

__all__ = ["MessageRemovals"]


class MessageRemovals(MessageBase):
    """Removing messages from memories (a part of :class:`pgmem.AsyncMessageRepository`)."""

    def delete(
        self, memory: str, message: Message | str, *, connection: Connection[Any] | None = None
    ) -> bool:
        """Remove a message (or message id) from ``memory``; return False when it was not there.

        The message row itself is deleted when no other memory refers to it."""
        check_key(memory)
        message_id = storage_id(message) if isinstance(message, Message) else check_message_id(message)
        removed = bool((self._removal("delete", {"memory": memory, "id": message_id}, connection))[0][0])
        if removed:
            self._client.vectors.changed(memory, connection)
        return removed

    def delete_many(
        self, memory: str, messages: Sequence[Message | str], *, connection: Connection[Any] | None = None
    ) -> int:
        """Remove messages (or message ids) from ``memory`` in one statement; return how many were there.
        Their rows are deleted when nothing else refers to them."""
        check_key(memory)
        ids = [storage_id(m) if isinstance(m, Message) else check_message_id(m) for m in messages]
        if not ids:
            return 0
        removed = int((self._removal("delete_many", {"memory": memory, "ids": ids}, connection))[0][0])
        if removed:
            self._client.vectors.changed(memory, connection)
        return removed

    def delete_newest(self, memory: str, *, connection: Connection[Any] | None = None) -> Message | None:
        """Remove and return the newest message of ``memory`` (None when it is empty)."""
        check_key(memory)
        found = [decode(row) for row in self._removal("delete_newest", {"memory": memory}, connection)]
        if found:
            self._client.vectors.changed(memory, connection)
        return found[0] if found else None

    def delete_at(
        self, memory: str, position: int, *, connection: Connection[Any] | None = None
    ) -> Message | None:
        """Remove and return the message at ``position`` (0-based, negative from the end, as a list's
        ``pop(i)``) in one statement; None when out of range. Its row goes when nothing else refers to it."""
        check_key(memory)
        if not isinstance(position, int) or isinstance(position, bool):
            raise InvalidInput(f"position must be an integer, got {position!r}")
        if position >= 0:
            rows = self._removal("delete_at_position", {"memory": memory, "offset": position}, connection)
        else:
            rows = self._removal(
                "delete_at_position_from_end", {"memory": memory, "offset": -position - 1}, connection
            )
        found = [decode(row) for row in rows]
        if found:
            self._client.vectors.changed(memory, connection)
        return found[0] if found else None

    def delete_oldest(
        self, memory: str, n: int, *, connection: Connection[Any] | None = None
    ) -> list[Message]:
        """Remove and return the oldest ``n`` messages of ``memory``, oldest first, in one statement.
        Concurrent callers take different messages (``SKIP LOCKED``)."""
        check_key(memory)
        _positive(n, "n")
        if n == 0:
            return []
        found = [decode(row) for row in self._removal("delete_oldest", {"memory": memory, "n": n}, connection)]
        if found:
            self._client.vectors.changed(memory, connection)
        return found

    def move_oldest(
        self, memory: str, to: str, n: int, *, connection: Connection[Any] | None = None
    ) -> list[Message]:
        """Move the oldest ``n`` messages of ``memory`` to the memory ``to`` in one statement and return
        them, oldest first. No message row is copied; the entries keep their sequence numbers, so reading
        both memories merged (:meth:`payloads` with ``merged_with``) keeps the original order. Concurrent
        movers move different messages. Raises :class:`pgmem.Conflict` when ``to`` already holds one of
        them. ``to``'s embedding models do not embed what moves in (the FAISS cache of both is refreshed)."""
        check_key(memory)
        check_key(to)
        _positive(n, "n")
        if n == 0:
            return []
        if to == memory:
            raise InvalidInput("move_oldest needs two different memories")
        rows = self._removal("move_oldest", {"memory": memory, "to": to, "n": n}, connection, to=to)
        found = [decode(row) for row in rows]
        if found:
            self._client.vectors.changed(memory, connection)
            self._client.vectors.changed(to, connection)
        return found

    def clear(self, memory: str, *, connection: Connection[Any] | None = None) -> int:
        """Empty ``memory``; return how many messages it held."""
        check_key(memory)
        removed = int((self._removal("clear", {"memory": memory}, connection))[0][0])
        if removed:
            self._client.vectors.changed(memory, connection)
        return removed

    def trim(self, memory: str, keep_last: int, *, connection: Connection[Any] | None = None) -> int:
        """Keep only the newest ``keep_last`` messages of ``memory``; return how many were removed
        (:meth:`AsyncRetention.trim`, which also trims by age)."""
        _positive(keep_last, "keep_last")
        return self._client.retention.trim(memory, keep_last, connection=connection)
