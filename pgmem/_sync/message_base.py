# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""What the parts of the message repository (:mod:`pgmem._async.messages`) share: its named statements
(``sql/messages.sql``), messages decoded from their rows, and where a read as of a point stops and a
removal from a fork starts."""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from pgmem._sync.base import Repository
from pgmem.checks import load_json
from pgmem.errors import InvalidInput
from pgmem.models import Message
from pgmem.planning import statements as queries
from pgmem.planning.forks import AsOf
from pgmem.planning.rows import decode

__all__ = ["MessageBase", "Q"]

Q = queries.load("messages")
_loads = load_json


def _positive(value: int, name: str, *, allow_zero: bool = True) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if allow_zero else 1):
        raise InvalidInput(f"{name} must be an integer >= {0 if allow_zero else 1}, got {value!r}")
    return value


class MessageBase(Repository):
    """The base of the message repository's parts (its writes, removals and reads)."""

    queries = Q

    def _messages(
        self, name: str, params: dict[str, Any], connection: Connection[Any] | None
    ) -> list[Message]:
        return [decode(row) for row in self._rows(name, params, connection)]

    def _upto(self, memory: str, as_of: AsOf | None, connection: Connection[Any] | None) -> int | None:
        """The sequence number a read as of ``as_of`` stops at (None: now): README, "Rewind and branch"."""
        if as_of is None:
            return None
        return self._client.forks.upto(memory, as_of, connection)

    def _unfork(self, memory: str, connection: Connection[Any] | None) -> None:
        """Before a removal: a fork that still reads its parent's entries gets them copied in (once), so the
        removal's statement finds every entry the fork holds among its own (pgmem.materialize_fork)."""
        self._client.forks.materialize(memory, connection)
