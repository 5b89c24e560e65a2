# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""Forks and marks of memories (migration 0020; README, "Rewind and branch").

A fork starts as another memory at a point and then diverges; it copies no entry: ``pgmem.memory_forks``
names its parent and the point, and reads of a memory read its lineage (``pgmem.lineage``). A mark names
a point of a memory, which reads take as ``as_of=``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from psycopg import Connection

from pgmem._sync.base import Repository
from pgmem.checks import check_key
from pgmem.errors import Conflict, InvalidInput, NotFound
from pgmem.planning import statements as queries
from pgmem.planning.forks import AsOf, Fork, Mark, check_as_of, check_fork, check_mark_name
from pgmem.planning.search.filters import SearchFilters

__all__ = ["ForkRepository"]

Q = queries.load("forks")


class ForkRepository(Repository):
    """Forks and marks of the namespace's memories (``client.fork``, ``client.mark``, ``client.marks``).

    Example:
        >>> await client.mark("chat", "before-tools")
        >>> fork = await client.fork("chat", "chat:try-2", at="before-tools")
        >>> await client.messages.last("chat", 5, as_of="before-tools")
    """

    queries = Q

    def fork(
        self, memory: str, into: str, *, at: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> Fork:
        """Make ``into``, a new memory that holds what ``memory`` held at ``at`` (default: now), and that
        then diverges: writes to either are invisible to the other. One statement; no entry, message or
        vector is copied. ``into`` searches with ``memory``'s embedding models.

        ``memory`` missing: :class:`pgmem.NotFound`; ``into`` existing: :class:`pgmem.Conflict`.

        Example:
            >>> fork = await client.forks.fork("chat", "chat:what-if")
            >>> fork.size == await client.messages.count("chat")
            True
        """
        check_fork(memory, into)
        upto = self.upto(memory, at, connection)
        params = {"memory": memory, "into": into, "upto": upto}
        try:
            row = self._rows("fork", params, connection)
        except Conflict as exc:
            raise Conflict(f"memory {into!r} already exists in namespace {self.namespace!r}") from exc
        if not row:
            raise NotFound(f"no memory {memory!r} in namespace {self.namespace!r}")
        point, size = row[0]
        return Fork(memory=into, parent=memory, upto_seq=int(point), size=int(size))

    def mark(self, memory: str, name: str, *, connection: Connection[Any] | None = None) -> Mark:
        """Name the current point of ``memory`` (its newest entry's sequence number, inherited ones
        included); reads then take ``as_of=name``. A name is unique per memory (:class:`pgmem.Conflict`);
        ``memory`` missing: :class:`pgmem.NotFound`.

        A mark is a sequence number, not a commit: an entry a concurrent writer numbered below it that
        commits after it is seen by reads as of the mark.
        """
        check_key(memory)
        check_mark_name(name)
        try:
            rows = self._rows("mark", {"memory": memory, "name": name, "upto": None}, connection)
        except Conflict as exc:
            raise Conflict(f"memory {memory!r} already has a mark named {name!r}") from exc
        if not rows:
            raise NotFound(f"no memory {memory!r} in namespace {self.namespace!r}")
        seq, marked_at = rows[0]
        return Mark(name=name, seq=int(seq), marked_at=marked_at)

    def marks(self, memory: str, *, connection: Connection[Any] | None = None) -> list[Mark]:
        """The marks of ``memory``, oldest point first."""
        check_key(memory)
        rows = self._rows("marks", {"memory": memory}, connection)
        return [Mark(name=str(n), seq=int(s), marked_at=t) for n, s, t in rows]

    def parent(self, memory: str, *, connection: Connection[Any] | None = None) -> tuple[str, int] | None:
        """``(parent, upto_seq)`` when ``memory`` is a fork (materialised or not), else None."""
        check_key(memory)
        rows = self._rows("fork_info", {"memory": memory}, connection)
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    def upto(self, memory: str, as_of: AsOf | None, connection: Connection[Any] | None) -> int | None:
        """The sequence number a read of ``memory`` as of ``as_of`` stops at (None: now). A time or a mark
        costs one statement; an unknown mark is :class:`pgmem.NotFound`."""
        kind, value = check_as_of(as_of)
        if kind == "none" or kind == "seq":
            return value  # type: ignore[return-value]
        if kind == "time":
            assert isinstance(value, datetime)
            params: dict[str, Any] = {"memory": memory, "at": value, "upto": None}
            return int(self._scalar("time_seq", params, connection))
        found = self._rows("mark_seq", {"memory": memory, "name": value, "upto": None}, connection)
        if not found:
            raise NotFound(f"memory {memory!r} has no mark named {value!r}")
        return int(found[0][0])

    def searched(
        self, filters: SearchFilters, as_of: AsOf | None, connection: Connection[Any] | None
    ) -> SearchFilters:
        """A search's filters on a fork or as of a point: the memory read through its lineage (one more
        statement for a search in a memory: whether it is a fork; one more for a time or a mark)."""
        if filters.memory is None:
            if as_of is not None:
                raise InvalidInput("as_of needs a memory")
            return filters
        upto = self.upto(filters.memory, as_of, connection)
        if upto is not None and filters.max_seq is not None:
            upto = min(upto, filters.max_seq)
        lazy = bool(self._scalar("inherits", {"memory": filters.memory}, connection))
        if upto is None and not lazy:
            return filters
        return replace(filters, max_seq=filters.max_seq if upto is None else upto, lineage=lazy)

    def materialize(self, memory: str, connection: Connection[Any] | None) -> None:
        """Before a removal in a fork: copy what it inherits into it (once; nothing for other memories)."""
        self._scalar("materialize", {"memory": memory}, connection)
