# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The message repository's reads (:class:`pgmem.AsyncMessageRepository`): a memory's messages by position,
action, role, sender, recipient, content or keywords, its payloads and counts, messages by id, which of a
list are new, and the namespace's memories and stats."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import Connection

from pgmem._sync.message_base import MessageBase, _loads, _positive
from pgmem.checks import check_key, check_message_id, check_query_text, check_query_texts
from pgmem.errors import InvalidInput, NotFound
from pgmem.models import MESSAGE_ROUTE_TO_ALL, Message, any_to_str, storage_id
from pgmem.planning.forks import AsOf
from pgmem.planning.rows import MessageStatsRow, decode

__all__ = ["MessageReads"]


class MessageReads(MessageBase):
    """Reading memories' messages (a part of :class:`pgmem.AsyncMessageRepository`)."""

    def newest(
        self,
        memory: str,
        k: int,
        *,
        within: float | None = None,
        as_of: AsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[Message]:
        """The newest ``k`` messages of ``memory``, newest first; ``within``: only those added in the last
        that many seconds (ChatDev's blackboard reads its board so)."""
        check_key(memory)
        _positive(k, "k")
        if within is not None and (
            isinstance(within, bool) or not isinstance(within, int | float) or not 0 <= within < float("inf")
        ):
            raise InvalidInput(f"within must be a non-negative number of seconds, got {within!r}")
        params = {"memory": memory, "k": k, "seconds": within, "upto": self._upto(memory, as_of, connection)}
        return self._messages("newest", params, connection)

    def last(
        self, memory: str, k: int = 0, *, as_of: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> list[Message]:
        """The last ``k`` messages of ``memory``, oldest first; all of them when ``k`` is 0.

        ``as_of``: what the memory held at a point (every read takes it): a sequence number, a
        timezone-aware time or a mark's name (README, "Rewind and branch"). Entries removed since are not
        brought back.

        Example:
            >>> await client.messages.last("chat", 10, as_of="before-tools")
        """
        check_key(memory)
        _positive(k, "k")
        params = {"memory": memory, "k": k or None, "upto": self._upto(memory, as_of, connection)}
        return self._messages("last_k", params, connection)

    def payloads(
        self,
        memory: str,
        field: str,
        *,
        last: int | None = None,
        offset: int = 0,
        limit: int | None = None,
        merged_with: str | None = None,
        as_of: AsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[Any]:
        """The value of ``metadata[field]`` of each message of ``memory``, oldest first, read as one JSON
        array: no :class:`Message` is built. A framework adapter keeps its own object there and reads it
        back so. A message without the field (added through another API) gives ``{"role": ..., "content":
        ...}`` instead.

        ``last``: only the last that many (0: all). Otherwise a page: from position ``offset``, at most
        ``limit`` (None: all), of ``memory`` merged in order with the memory ``merged_with`` if given. Either
        as of ``as_of`` (a point of ``memory``; its sequence number bounds ``merged_with`` too: README,
        "Rewind and branch"); a fork is read through its lineage.
        """
        check_key(memory)
        if not isinstance(field, str) or not field or "\x00" in field:
            raise InvalidInput(f"field must be a non-empty string without NUL bytes, got {field!r}")
        check_query_text(field, "field")
        if last is not None:
            _positive(last, "last")
            if offset or limit is not None or merged_with is not None:
                raise InvalidInput("payloads takes either last or a page (offset, limit, merged_with)")
            upto = self._upto(memory, as_of, connection)
            params: dict[str, Any] = {"memory": memory, "field": field, "k": last or None, "upto": upto}
            text = self._scalar("payloads_last", params, connection)
        else:
            _positive(offset, "offset")
            if limit is not None:
                _positive(limit, "limit")
            if merged_with is not None:
                check_key(merged_with)
            upto = self._upto(memory, as_of, connection)
            params = {
                "memory": memory,
                "field": field,
                "offset": offset,
                "limit": limit,
                "merged": merged_with,
                "upto": upto,
            }
            text = self._scalar("payloads_page", params, connection)
        values: list[Any] = _loads(text)
        return values

    def count(
        self, memory: str, *, as_of: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> int:
        """How many messages ``memory`` holds: O(1) (``pgmem.memory_counts``); as of a point, counted."""
        check_key(memory)
        params = {"memory": memory, "upto": self._upto(memory, as_of, connection)}
        return int(self._scalar("count", params, connection))

    def at(
        self, memory: str, position: int, *, as_of: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> Message | None:
        """The message at ``position`` (0-based, negative from the end, as a list index); None when out of range."""
        check_key(memory)
        if not isinstance(position, int) or isinstance(position, bool):
            raise InvalidInput(f"position must be an integer, got {position!r}")
        upto = self._upto(memory, as_of, connection)
        if position >= 0:
            params = {"memory": memory, "offset": position, "upto": upto}
            found = self._messages("at_position", params, connection)
        else:
            params = {"memory": memory, "offset": -position - 1, "upto": upto}
            found = self._messages("at_position_from_end", params, connection)
        return found[0] if found else None

    def by_action(
        self, memory: str, action: Any, *, as_of: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> list[Message]:
        """Messages of ``memory`` caused by ``action`` (a class or its ``module.ClassName``), in order."""
        check_key(memory)
        name = check_query_text(any_to_str(action), "action")
        params = {"memory": memory, "action": name, "upto": self._upto(memory, as_of, connection)}
        return self._messages("by_action", params, connection)

    def by_actions(
        self,
        memory: str,
        actions: Iterable[Any],
        *,
        as_of: AsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[Message]:
        """Messages of ``memory`` caused by any of ``actions``, in memory order."""
        check_key(memory)
        names = sorted(set(check_query_texts([any_to_str(a) for a in actions], "actions")))
        if not names:
            return []
        params = {"memory": memory, "actions": names, "upto": self._upto(memory, as_of, connection)}
        return self._messages("by_actions", params, connection)

    def by_role(
        self, memory: str, role: str, *, as_of: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> list[Message]:
        """Messages of ``memory`` with this ``role``, in order. A ``role`` no stored text can equal (a NUL
        byte, a lone surrogate) raises :class:`pgmem.InvalidInput`, as a write of it would."""
        check_key(memory)
        check_query_text(role, "role")
        params = {"memory": memory, "role": role, "upto": self._upto(memory, as_of, connection)}
        return self._messages("by_role", params, connection)

    def by_sender(
        self, memory: str, sender: Any, *, as_of: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> list[Message]:
        check_key(memory)
        name = check_query_text(any_to_str(sender), "sender")
        params = {"memory": memory, "sender": name, "upto": self._upto(memory, as_of, connection)}
        return self._messages("by_sender", params, connection)

    def by_recipient(
        self,
        memory: str,
        recipient: Any,
        *,
        include_broadcast: bool = True,
        as_of: AsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[Message]:
        """Messages of ``memory`` addressed to ``recipient`` (and broadcasts unless ``include_broadcast=False``)."""
        check_key(memory)
        name = check_query_text(any_to_str(recipient), "recipient")
        names = [name] + ([MESSAGE_ROUTE_TO_ALL] if include_broadcast else [])
        params = {"memory": memory, "names": names, "upto": self._upto(memory, as_of, connection)}
        return self._messages("by_recipient", params, connection)

    def by_content(
        self, memory: str, needle: str, *, as_of: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> list[Message]:
        """Messages of ``memory`` whose content contains ``needle`` (exact substring), in order."""
        check_key(memory)
        if not isinstance(needle, str) or "\x00" in needle:
            raise InvalidInput("needle must be a string without NUL bytes")
        check_query_text(needle, "needle")
        params = {"memory": memory, "needle": needle, "upto": self._upto(memory, as_of, connection)}
        return self._messages("by_content", params, connection)

    def search_text(
        self,
        memory: str,
        query: str,
        *,
        limit: int = 10,
        as_of: AsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[Message]:
        """Keyword search, best match first (BM25; README, "Keyword search").

        A query in plain words, as agents ask ("what did Caroline research?"), finds the messages holding
        any of its words (stemmed, stop words out) and ranks those holding more and rarer ones first.
        Chinese, Japanese and Korean runs match by their characters' bigrams the same way. A query in
        search syntax (a double quote, a word starting with ``-``, ``AND`` or ``OR`` in capitals) follows
        ``websearch_to_tsquery``: every other word required, ``"a phrase"``, ``OR``, ``-not``.
        :meth:`pgmem.AsyncVectorRepository.keyword_search` is the same search with scores and filters.

        Example: ``client.messages.search_text("role:PM", "贪吃蛇")`` finds "请编写一个命令行贪吃蛇游戏".
        """
        check_key(memory)
        _positive(limit, "limit", allow_zero=False)
        if not isinstance(query, str) or "\x00" in query:
            raise InvalidInput("query must be a string without NUL bytes")
        check_query_text(query, "query")
        self._client.vectors.planner.fresh_statistics(connection)
        upto = self._upto(memory, as_of, connection)
        params = {"ns": self.namespace, "memory": memory, "query": query, "limit": limit, "upto": upto}
        # Never prepared: the plan needs the query's lexemes (pgmem.fts_query folded when planned). From the
        # sixth run Postgres chose the prepared statement's generic plan, blind to them: a rare word in a
        # memory of 100k messages took 2.4 s instead of 24-34 ms (benchmarks/README.md, messages).
        rows = self._client.executor.rows(self.queries["search_text"], params, connection, prepare=False)
        return [decode(row) for row in rows]

    def new_positions(
        self,
        memory: str,
        observed: Sequence[Message | str],
        k: int = 0,
        *,
        as_of: AsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[int]:
        """0-based positions in ``observed`` (messages or message ids) of those not among the last ``k``
        of ``memory`` (all of them when ``k`` is 0). One statement."""
        check_key(memory)
        _positive(k, "k")
        if not observed:
            return []
        ids = [m if isinstance(m, str) else storage_id(m) for m in observed]
        upto = self._upto(memory, as_of, connection)
        if k == 0:
            positions = self._column("find_news_all", {"memory": memory, "ids": ids, "upto": upto}, connection)
        else:
            params = {"memory": memory, "ids": ids, "k": k, "upto": upto}
            positions = self._column("find_news_recent", params, connection)
        return [int(p) - 1 for p in positions]

    def find_news(
        self,
        memory: str,
        observed: Sequence[Message],
        k: int = 0,
        *,
        as_of: AsOf | None = None,
        connection: Connection[Any] | None = None,
    ) -> list[Message]:
        """The messages of ``observed`` not among the last ``k`` of ``memory`` (all when 0), in one query."""
        positions = self.new_positions(memory, observed, k, as_of=as_of, connection=connection)
        return [observed[i] for i in positions]

    def get_messages(
        self, message_ids: Sequence[str], *, connection: Connection[Any] | None = None
    ) -> list[Message]:
        """The messages with these ids that exist in the namespace (in no particular order; one round trip)."""
        ids = [check_message_id(i) for i in message_ids]
        if not ids:
            return []
        return self._messages("get_messages", {"ids": ids}, connection)

    def get_message(self, message_id: str, *, connection: Connection[Any] | None = None) -> Message:
        """The message with ``message_id`` in this namespace; raises :class:`pgmem.NotFound`."""
        found = self._messages("get_message", {"id": check_message_id(message_id)}, connection)
        if not found:
            raise NotFound(f"no message {message_id!r} in namespace {self.namespace!r}")
        return found[0]

    def actions(
        self, memory: str, *, as_of: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> list[str]:
        """The distinct actions (``cause_by``) of ``memory``."""
        check_key(memory)
        params = {"memory": memory, "upto": self._upto(memory, as_of, connection)}
        return self._column("list_actions", params, connection)

    def count_actions(
        self, memory: str, *, as_of: AsOf | None = None, connection: Connection[Any] | None = None
    ) -> int:
        check_key(memory)
        params = {"memory": memory, "upto": self._upto(memory, as_of, connection)}
        return int(self._scalar("count_actions", params, connection))

    def memories(
        self, *, prefix: str = "", nonempty: bool = False, connection: Connection[Any] | None = None
    ) -> list[str]:
        """The keys of the memories of the namespace, sorted: those starting with ``prefix``, and only
        those holding at least one message when ``nonempty``."""
        if not prefix and not nonempty:
            return self._column("list_memories", {}, connection)
        if not isinstance(prefix, str) or "\x00" in prefix:
            raise InvalidInput("prefix must be a string without NUL bytes")
        check_query_text(prefix, "prefix")
        params = {"prefix": prefix, "nonempty": bool(nonempty)}
        return self._column("list_memories_matching", params, connection)

    def stats(self, *, connection: Connection[Any] | None = None) -> list[MessageStatsRow]:
        """Message counts of the namespace by (memory, role, action): ``(namespace, memory, role, cause_by,
        messages)`` tuples. Read from a replica when the client has replicas (after the client's writes, one
        that has them: see :mod:`pgmem._async.replicas`). Every namespace's counts are the owner's to read,
        in the ``pgmem.role_activity`` and ``pgmem.action_activity`` views."""
        params: dict[str, Any] = {}
        replicas = self._client.replicas
        if connection is None and replicas is not None:
            rows = replicas.run(lambda conn: self._rows("stats", params, conn))
        else:
            rows = self._rows("stats", params, connection)
        return [MessageStatsRow._make(r) for r in rows]
