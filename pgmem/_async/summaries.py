"""The summary repository: hierarchical summaries of a memory's messages (``pgmem.summaries``)."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from pgmem._acompat import adrive
from pgmem._async.base import AsyncRepository
from pgmem._async.compression import compress
from pgmem.checks import check_key, check_text
from pgmem.errors import Conflict, InvalidInput, NotFound
from pgmem.models import Message
from pgmem.planning import statements as queries
from pgmem.planning.rows import SummaryRow, decode
from pgmem.summarizer import CompressionPolicy, Summary, ask, get_tokenizer, message_line, summary_prompt

__all__ = ["AsyncSummaryRepository"]

Q = queries.load("summaries")

#: ``list[Summary]`` (the repository's ``list`` method shadows the builtin in its class body).
Summaries = list[Summary]

_MAX_SEQ = (1 << 63) - 1
_MAX_INT = (1 << 31) - 1


def _int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


def _summary(row: tuple[Any, ...]) -> Summary:
    s = SummaryRow._make(row)
    return Summary(
        id=s.id,
        level=s.level,
        first_seq=s.first_seq,
        last_seq=s.last_seq,
        content=s.content,
        source_chars=s.source_chars,
        source_tokens=s.source_tokens,
        summary_tokens=s.summary_tokens,
        tokenizer=s.tokenizer,
        created_at=s.created_at,
    )


class AsyncSummaryRepository(AsyncRepository):
    """Summaries of a namespace's memories. The messages they summarise are never deleted.

    A level-1 summary names the range of ``memory_entries.seq`` it covers; a level-n summary the range
    of its level n-1 children. :meth:`compress` builds them incrementally with any LLM (see
    :mod:`pgmem.summarizer`).

    Example:
        >>> from pgmem.summarizer import OfflineSummarizer, CompressionPolicy
        >>> new = await client.summaries.compress("role:Alice", OfflineSummarizer(), CompressionPolicy(chunk=10))
        >>> [(s.level, s.first_seq, s.last_seq) for s in await client.summaries.list("role:Alice")]
    """

    queries = Q

    async def settled(self, memory: str, *, connection: AsyncConnection[Any] | None = None) -> int:
        """The highest entry sequence number of ``memory`` that is final: every entry numbered up to it has
        committed (or rolled back), so none can still appear below it.

        Writers number entries in the order they draw numbers, not the order they commit; a summariser
        that read past a number still in flight would skip that entry forever. This waits (briefly) for
        the memory's writers in flight; called inside your transaction it holds them off until you commit.
        """
        check_key(memory)
        return int(await self._scalar("settle", {"memory": memory}, connection) or 0)

    async def unsummarized(
        self,
        memory: str,
        *,
        limit: int | None = None,
        after_seq: int = 0,
        upto_seq: int | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[Message]:
        """The messages of ``memory`` after its last level-1 summary (and after ``after_seq``, up to
        ``upto_seq`` when given, e.g. :meth:`settled`), oldest first; each one's ``seq`` is its
        ``memory_entries.seq``."""
        check_key(memory)
        if limit is not None:
            _int(limit, "limit", 1, 1_000_000)
        _int(after_seq, "after_seq", 0, _MAX_SEQ)
        if upto_seq is not None:
            _int(upto_seq, "upto_seq", 0, _MAX_SEQ)
        params = {"memory": memory, "limit": limit, "after": after_seq, "upto": upto_seq}
        rows = await self._rows("unsummarized", params, connection)
        return [decode(row) for row in rows]

    async def add(
        self,
        memory: str,
        *,
        level: int,
        first_seq: int,
        last_seq: int,
        content: str,
        source_chars: int,
        source_tokens: int,
        summary_tokens: int | None = None,
        tokenizer: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> Summary:
        """Store a summary of ``memory`` covering ``first_seq..last_seq`` at ``level``.

        Raises:
            Conflict: a summary of that level already covers the start of the range (a concurrent
                summariser stored it first).
            NotFound: the memory does not exist.
        """
        check_key(memory)
        _int(level, "level", 1, 32)
        _int(first_seq, "first_seq", 1, _MAX_SEQ)
        _int(last_seq, "last_seq", first_seq, _MAX_SEQ)
        if not isinstance(content, str):
            raise InvalidInput(f"content must be a string, not {type(content).__name__}")
        check_text(content, "content", "summary ", max_chars=None)
        _int(source_chars, "source_chars", 0, _MAX_SEQ)
        _int(source_tokens, "source_tokens", 0, _MAX_INT)
        counter = get_tokenizer()
        if summary_tokens is None:
            summary_tokens = counter.count(content)
        _int(summary_tokens, "summary_tokens", 0, _MAX_INT)
        params = {
            "memory": memory,
            "level": level,
            "first_seq": first_seq,
            "last_seq": last_seq,
            "content": content,
            "source_chars": source_chars,
            "source_tokens": source_tokens,
            "summary_tokens": summary_tokens,
            "tokenizer": counter.name if tokenizer is None else tokenizer,
        }
        rows = await self._rows("insert", params, connection)
        if rows:
            return _summary(rows[0])
        if not await self._scalar("memory_exists", {"memory": memory}, connection):
            raise NotFound(f"no memory {memory!r} in namespace {self.namespace!r}")
        raise Conflict(f"memory {memory!r} already has a level-{level} summary covering seq {first_seq}")

    async def list(
        self, memory: str, *, level: int | None = None, connection: AsyncConnection[Any] | None = None
    ) -> Summaries:
        """Every summary of ``memory`` (of one ``level`` if given), by level, then range."""
        check_key(memory)
        if level is not None:
            _int(level, "level", 1, 32)
        return [_summary(r) for r in await self._rows("list", {"memory": memory, "level": level}, connection)]

    async def unrolled(self, memory: str, level: int, *, connection: AsyncConnection[Any] | None = None) -> Summaries:
        """Summaries of ``level`` that no summary of ``level + 1`` covers yet, oldest first."""
        check_key(memory)
        _int(level, "level", 1, 31)
        return [_summary(r) for r in await self._rows("unrolled", {"memory": memory, "level": level}, connection)]

    async def frontier(self, memory: str, *, connection: AsyncConnection[Any] | None = None) -> Summaries:
        """The summaries no higher-level summary covers, in order: together, everything summarised so far."""
        check_key(memory)
        return [_summary(r) for r in await self._rows("frontier", {"memory": memory}, connection)]

    async def stale(self, memory: str, *, connection: AsyncConnection[Any] | None = None) -> Summaries:
        """The summaries of ``memory`` marked stale (a message they covered was forgotten,
        :meth:`AsyncRetention.forget <pgmem._async.retention.AsyncRetention.forget>`): their ranges, with
        empty content. No other read serves them (:meth:`list`, :meth:`frontier` and :meth:`unrolled` skip
        them) until :meth:`recompute` rebuilds them."""
        check_key(memory)
        return [_summary(r[:-1]) for r in await self._rows("stale", {"memory": memory}, connection)]

    async def recompute(self, memory: str, llm: Any, policy: CompressionPolicy | None = None) -> Summaries:
        """Rebuild the stale summaries of ``memory`` from what is left of their ranges, lowest level first
        (a level-1 summary from its remaining messages, a higher one from its children); a summary with
        nothing left in its range is deleted. Returns the rebuilt summaries.

        Each summary is stored only if it was not marked stale again meanwhile (that one stays stale for
        the next call). When the LLM raises, the exception propagates; what was rebuilt before it stays.
        """
        check_key(memory)
        policy = policy or CompressionPolicy()
        rebuilt: Summaries = []
        for row in await self._rows("stale", {"memory": memory}, None):
            old, stale_at = _summary(row[:-1]), row[-1]
            span = {"memory": memory, "first": old.first_seq, "last": old.last_seq, "level": old.level, "upto": None}
            if old.level == 1:
                texts = [message_line(decode(r)) for r in await self._rows("range_messages", span, None)]
            else:
                texts = [_summary(r).content for r in await self._rows("range_children", span, None)]
            key = {"memory": memory, "id": old.id, "stale_at": stale_at}
            if not texts:
                await self._scalar("drop_stale", key, None)
                continue
            text = "\n".join(texts)
            content = await adrive(ask(llm, summary_prompt(text, policy.max_words, policy.keep_language)))
            counter = get_tokenizer()
            params = {
                **key,
                "content": content,
                "source_chars": len(text),
                "source_tokens": counter.count(text),
                "summary_tokens": counter.count(content),
                "tokenizer": counter.name,
            }
            rows = await self._rows("refresh", params, None)
            rebuilt += [_summary(r) for r in rows]
        return rebuilt

    async def delete_all(self, memory: str, *, connection: AsyncConnection[Any] | None = None) -> int:
        """Forget the summaries of ``memory`` (its messages stay); return how many there were."""
        check_key(memory)
        return int(await self._scalar("delete_all", {"memory": memory}, connection) or 0)

    async def compress(
        self,
        memory: str,
        llm: Any,
        policy: CompressionPolicy | None = None,
        *,
        force: bool = False,
    ) -> Summaries:
        """Summarise what is not summarised yet (:func:`pgmem._async.compression.compress`); return the new summaries.

        When the LLM raises, the exception propagates; summaries stored before it stay, and every
        message is still in the memory.

        Concurrent writers: only settled entries are summarised (:meth:`settled`), so an entry that
        commits after a later-numbered one is summarised by a later run, never skipped.
        """
        check_key(memory)
        return await compress(self, memory, llm, policy, force=force)
