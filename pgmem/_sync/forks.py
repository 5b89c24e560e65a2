# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""Forks and marks of memories (migration 0020; README, "Rewind and branch").

A fork starts as another memory at a point and then diverges; it copies no entry: ``pgmem.memory_forks``
names its parent and the point, and reads of a memory read its lineage (``pgmem.lineage``). A mark names
a point of a memory, which reads take as ``as_of=``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg import Connection

from pgmem._sync.base import Repository
from pgmem._sync.executor import Block
from pgmem.checks import check_key
from pgmem.errors import Conflict, InvalidInput, NotFound
from pgmem.planning import statements as queries
from pgmem.planning.forks import AsOf, Fork, Mark, check_as_of, check_fork, check_mark_name
from pgmem.planning.search.filters import SearchFilters

if TYPE_CHECKING:
    from pgmem._sync.client import Client

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

    #: At most this many memories are remembered as forks (then the set starts over: a fork forgotten costs
    #: one more statement on its next search, nothing else).
    KNOWN_MAX = 10_000

    def __init__(self, client: Client) -> None:
        super().__init__(client)
        # Memories this client saw to be forks that inherit: their searches read their lineage at once. Only
        # "is a fork" is remembered, never "is not": a search of any other memory checks in its own
        # statement (the guard column, pgmem.planning.search.vector.fork_guard_sql) and runs again through the
        # lineage when it is one. So a key deleted and re-created as a fork by another process is found by
        # its next search; a remembered fork that was materialised or re-created as a plain memory is read
        # through a lineage of one memory, which is the same set of entries.
        self.known: set[str] = set()

    def _knows(self, memory: str) -> None:
        """Remember that ``memory`` is a fork that inherits (its searches then read its lineage first)."""
        if len(self.known) >= self.KNOWN_MAX:
            self.known.clear()
        self.known.add(memory)

    def inherits(self, memory: str, connection: Connection[Any] | None) -> bool:
        """Whether ``memory`` is a fork that still reads its parent's entries (one statement)."""
        lazy = bool(self._scalar("inherits", {"memory": memory}, connection))
        if lazy:
            self._knows(memory)
        return lazy

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
        params = {"ns": self.namespace, "memory": memory, "into": into, "upto": upto}
        try:
            # The parent's settle lock first, then the fork in a snapshot taken after it (sql/forks.sql):
            # one transaction, one pipeline (one round trip on an idle connection).
            with self._client.executor.transaction(connection, pipeline=True) as block:
                block.command(Q["settle_parent"], params)
                row = block.rows(Q["fork"], params)
        except Conflict as exc:
            raise Conflict(f"memory {into!r} already exists in namespace {self.namespace!r}") from exc
        if not row:
            raise NotFound(f"no memory {memory!r} in namespace {self.namespace!r}")
        point, size = row[0]
        self._knows(into)
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
        """A search's filters as of a point (one more statement for a time or a mark), and read through the
        memory's lineage when this client knows it is a fork (:attr:`known`). Any other memory is searched
        by its own entries, and its statement says when it is a fork after all: the searcher then runs it
        again with :meth:`_through_lineage` (so a fork costs one more statement on its first search only)."""
        if filters.memory is None:
            if as_of is not None:
                raise InvalidInput("as_of needs a memory")
            return filters
        upto = self.upto(filters.memory, as_of, connection)
        if upto is not None and filters.max_seq is not None:
            upto = min(upto, filters.max_seq)
        lazy = filters.memory in self.known
        if upto is None and not lazy:
            return filters
        return replace(filters, max_seq=filters.max_seq if upto is None else upto, lineage=lazy)

    def _through_lineage(self, filters: SearchFilters) -> SearchFilters:
        """``filters`` of a memory found to be a fork: read through its lineage (and remembered)."""
        assert filters.memory is not None
        self._knows(filters.memory)
        return replace(filters, lineage=True)

    def materialize(self, memory: str, connection: Connection[Any] | None) -> None:
        """Before a removal in a fork: copy what it inherits into it (once; nothing for other memories)."""
        self._scalar("materialize", {"memory": memory}, connection)

    def removing(self, block: Block, memory: str) -> None:
        """The statement before a removal from ``memory``, in the removal's transaction ``block``: its
        settle lock, shared, held to the end of that transaction, and what it inherits as a fork copied in
        (sql/forks.sql ``removing``: a fork of it being taken is then seen by the removal)."""
        block.command(Q["removing"], {"ns": self.namespace, "memory": memory})

    def moving(self, block: Block, memory: str, to: str) -> None:
        """The statements before entries of ``memory`` move into ``to`` keeping their sequence numbers
        (``move_oldest``), in its transaction ``block``: :meth:`removing` of both, in key order, then the
        forks of ``to`` that would inherit the moved entries materialised (sql/forks.sql ``arriving``): a
        fork of ``to`` holds the moved entries when it was taken after the move, never before."""
        for one in sorted((memory, to)):
            self.removing(block, one)
        block.command(Q["arriving"], {"ns": self.namespace, "memory": memory, "to": to})
