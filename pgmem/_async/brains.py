"""The BrainMemory repository: MetaGPT's ``BrainMemory`` state in Postgres instead of Redis.

A brain is a row of ``pgmem.brain_memories`` plus two memories of messages: its history and its
knowledge. ``dump`` appends the talks a process added (it never rewrites the stored list), so two
processes dumping the same key at once both keep their talks; scalar fields are written only when the
writer changed them. Every dump and summary takes the brain row lock, so history entries are appended
in lock order and a summary read under the lock covers a gapless prefix of the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from pgmem._async.base import AsyncRepository
from pgmem._async.executor import AsyncBlock
from pgmem.checks import MAX_TTL, check_brain_key, check_text, check_ttl, key_for
from pgmem.errors import Conflict, InvalidInput
from pgmem.models import Message, storage_id
from pgmem.planning import statements as queries
from pgmem.planning.rows import BrainLockRow, BrainRow, decode, encode
from pgmem.summarizer import Summary, get_tokenizer

__all__ = ["MAX_TTL", "AsyncBrainRepository", "BrainState"]

Q = queries.load("brains")
MQ = queries.load("messages")
SQ = queries.load("summaries")
FQ = queries.load("forks")

#: Longest TTL accepted (ten years, in seconds).
_UNSET: Any = object()


@dataclass(slots=True)
class BrainState:
    """What :meth:`AsyncBrainRepository.load` read."""

    redis_key: str
    historical_summary: str = ""
    summarized_seq: int = 0
    last_history_id: str = ""
    last_talk: str | None = None
    version: int = 0
    expires_at: datetime | None = None
    history: list[Message] = field(default_factory=list)
    knowledge: list[Message] = field(default_factory=list)


class AsyncBrainRepository(AsyncRepository):
    """BrainMemory rows of one namespace (see :class:`pgmem.integrations.metagpt.BrainMemory` for the facade).

    Example:
        >>> await client.brains.dump("chat:u1:c1", history=[Message(content="hi")], ttl=1800)
        >>> state = await client.brains.load("chat:u1:c1")
        >>> [m.content for m in state.history]
        ['hi']
    """

    queries = Q

    @staticmethod
    def keys(redis_key: str) -> tuple[str, str]:
        """The memory keys of a brain's history and knowledge."""
        check_brain_key(redis_key)
        return key_for("brain:", redis_key), key_for("brain-knowledge:", redis_key)

    async def load(self, redis_key: str, *, connection: AsyncConnection[Any] | None = None) -> BrainState | None:
        """The brain stored under ``redis_key``; None when there is none or it has expired."""
        key, knowledge_key = self.keys(redis_key)

        async def read(block: AsyncBlock) -> BrainState | None:
            # Three reads, each setting the namespace in its own round trip: no transaction block (under
            # read committed it would give them no common snapshot either), and all three again on a fresh
            # connection when this one is lost.
            row = await block.one(Q["load"], {"ns": self.namespace, "key": key})
            if row is None:
                return None
            brain = BrainRow._make(row)
            state = BrainState(
                redis_key=brain.redis_key,
                historical_summary=brain.historical_summary,
                summarized_seq=brain.summarized_seq,
                last_history_id=brain.last_history_id,
                last_talk=brain.last_talk,
                version=brain.version,
                expires_at=brain.expires_at,
            )
            state.history = await self._history(block, key, state.summarized_seq)
            state.knowledge = await self._history(block, knowledge_key, 0)
            return state

        return await self._client.executor.run(read, connection, reads=True)

    async def _history(self, block: AsyncBlock, memory: str, after: int) -> list[Message]:
        rows = await block.rows(Q["history"], {"ns": self.namespace, "memory": memory, "after": after, "upto": None})
        return [decode(r) for r in rows]

    async def dump(
        self,
        redis_key: str,
        *,
        history: Sequence[Message] = (),
        knowledge: Sequence[Message] = (),
        historical_summary: str | None = None,
        last_history_id: str | None = None,
        last_talk: Any = _UNSET,
        ttl: float | None = 1800,
        connection: AsyncConnection[Any] | None = None,
    ) -> int:
        """Append ``history`` and ``knowledge`` (messages already there are skipped), write the given
        fields, and set the TTL (seconds; None: never expires). All or nothing; returns the new version.

        An expired brain is emptied first (its history, knowledge and summaries), as Redis would have
        dropped it.
        """
        key, knowledge_key = self.keys(redis_key)
        seconds = check_ttl(ttl)
        for index, message in enumerate([*history, *knowledge]):
            encode(message, index)  # validate everything before the first statement
        for name, value in (("historical_summary", historical_summary), ("last_history_id", last_history_id)):
            if value is not None:
                if not isinstance(value, str):
                    raise InvalidInput(f"{name} must be a string, not {type(value).__name__}")
                check_text(value, name, "brain ", max_chars=None)
        if last_talk is not _UNSET and last_talk is not None:
            if not isinstance(last_talk, str):
                raise InvalidInput(f"last_talk must be a string or None, not {type(last_talk).__name__}")
            check_text(last_talk, "last_talk", "brain ", max_chars=None)
        params = {"ns": self.namespace, "key": key, "knowledge_key": knowledge_key, "redis_key": redis_key}
        async with self._client.executor.transaction(connection) as block:
            await self._lock(block, params)
            if history:
                await self._client.messages.add_many(key, history, connection=block.connection)
            if knowledge:
                await self._client.messages.add_many(knowledge_key, knowledge, connection=block.connection)
            version = await block.scalar(
                Q["save"],
                {
                    **params,
                    "historical_summary": historical_summary,
                    "summarized_seq": None,
                    "last_history_id": last_history_id,
                    "set_last_talk": last_talk is not _UNSET,
                    "last_talk": None if last_talk is _UNSET else last_talk,
                    "ttl": seconds,
                },
            )
            return int(version)

    async def _lock(self, block: AsyncBlock, params: dict[str, Any]) -> int:
        """Create the brain if needed, lock its row, empty it if it expired; return its summarised seq."""
        row = None
        for _attempt in range(3):
            await block.command(Q["create"], params)
            row = await block.one(Q["lock"], params)
            if row is not None:
                break
            # The retention job deleted the (expired) brain between our insert and our lock: create it again.
        if row is None:
            raise Conflict(f"brain {params['redis_key']!r} keeps being deleted concurrently; retry")
        brain = BrainLockRow._make(row)
        if brain.expired:
            for memory in (params["key"], params["knowledge_key"]):
                # A memory that is a fork gets what it inherits copied in first (as messages.clear does): the
                # clear then removes it from the fork alone, never from its parent's view.
                await block.command(FQ["materialize"], {"ns": self.namespace, "memory": memory})
                await block.command(MQ["clear"], {"ns": self.namespace, "memory": memory})
            await block.command(SQ["delete_all"], {"ns": self.namespace, "memory": params["key"]})
            await block.command(Q["reset"], params)
            return 0
        return int(brain.summarized_seq)

    async def history_for_summary(
        self, redis_key: str, *, connection: AsyncConnection[Any] | None = None
    ) -> list[Message]:
        """The unsummarised history, read under the brain row lock (so it is a gapless prefix); creates
        an empty brain when there is none."""
        key, knowledge_key = self.keys(redis_key)
        params = {"ns": self.namespace, "key": key, "knowledge_key": knowledge_key, "redis_key": redis_key}
        async with self._client.executor.transaction(connection) as block:
            return await self._history(block, key, await self._lock(block, params))

    async def set_summary(
        self,
        redis_key: str,
        historical_summary: str,
        *,
        covered: Sequence[Message] | None = None,
        summarized_seq: int | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> tuple[Summary | None, list[Message]]:
        """Make ``historical_summary`` the brain's summary; return the level-1 summary row stored (None when
        it covers no message) and the history left after it.

        With ``covered`` (the messages the summary was made from), the summary covers the longest prefix
        of the stored history made only of those messages: a talk another process appended meanwhile
        stays in the history. With ``summarized_seq`` (compression already stored the summary rows), the
        history before it is marked summarised. The TTL is kept.
        """
        key, knowledge_key = self.keys(redis_key)
        if not isinstance(historical_summary, str):
            raise InvalidInput(f"the summary must be a string, not {type(historical_summary).__name__}")
        check_text(historical_summary, "historical_summary", "brain ", max_chars=None)
        ids = None if covered is None else {storage_id(m) for m in covered}
        params = {"ns": self.namespace, "key": key, "knowledge_key": knowledge_key, "redis_key": redis_key}
        stored: Summary | None = None
        async with self._client.executor.transaction(connection) as block:
            after = await self._lock(block, params)
            history = await self._history(block, key, after)
            upto = after
            if ids is not None:
                prefix: list[Message] = []
                for message in history:
                    if storage_id(message) not in ids:
                        break
                    prefix.append(message)
                # Messages compression already covered (its run failed before the brain moved on) keep
                # their summary; the new row covers the rest of the prefix.
                end = await block.scalar(SQ["level_end"], {"ns": self.namespace, "memory": key, "level": 1})
                covered_end = int(end or 0)
                if prefix and covered_end >= (prefix[-1].seq or 0):
                    upto = int(prefix[-1].seq or 0)
                    prefix = []
                prefix = [m for m in prefix if (m.seq or 0) > covered_end]
                if prefix:
                    text = "\n".join(f"{m.role}: {m.content}" for m in prefix)
                    counter = get_tokenizer()
                    stored = await self._client.summaries.add(
                        key,
                        level=1,
                        first_seq=int(prefix[0].seq or 0),
                        last_seq=int(prefix[-1].seq or 0),
                        content=historical_summary,
                        source_chars=len(text),
                        source_tokens=counter.count(text),
                        connection=block.connection,
                    )
                    upto = stored.last_seq
            elif summarized_seq is not None:
                upto = max(after, summarized_seq)
            await block.command(
                Q["save_keeping_ttl"],
                {
                    **params,
                    "historical_summary": historical_summary,
                    "summarized_seq": upto,
                    "last_history_id": None,
                    "set_last_talk": False,
                    "last_talk": None,
                },
            )
        return stored, [m for m in history if (m.seq or 0) > upto]

    async def delete(self, redis_key: str, *, connection: AsyncConnection[Any] | None = None) -> bool:
        """Forget a brain: its row, history, knowledge and summaries. False when there was none."""
        key, knowledge_key = self.keys(redis_key)
        keys = [key, knowledge_key]
        async with self._client.executor.transaction(connection) as block:
            # Forks of them being taken first, or after (sql/brains.sql settle_memories).
            await block.command(Q["settle_memories"], {"ns": self.namespace, "keys": keys})
            for memory in keys:
                # No materialisation for a fork: the memory itself goes (what it inherits stays its parent's).
                await block.command(MQ["clear"], {"ns": self.namespace, "memory": memory})
            return bool(await block.scalar(Q["delete_memories"], {"ns": self.namespace, "keys": keys}))

    async def purge_expired(self, *, batch_size: int = 500, connection: AsyncConnection[Any] | None = None) -> int:
        """The retention job of this namespace: delete its expired brains (their history and knowledge
        messages no other memory refers to, and their summaries). Returns how many brains were purged. The
        same as :meth:`AsyncRetention.purge_expired_brains <pgmem._async.retention.AsyncRetention>`.

        Only this client's namespace: another tenant's expired brains are out of its reach. Purging every
        namespace is an administrator's operation, :func:`pgmem.admin.purge_expired`, on the tables'
        owner's connection."""
        return await self._client.retention.purge_expired_brains(batch_size=batch_size, connection=connection)
