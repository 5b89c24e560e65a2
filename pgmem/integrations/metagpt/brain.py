"""``pgmem.integrations.metagpt.BrainMemory``: MetaGPT's BrainMemory with Postgres in place of Redis."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from pgmem.checks import check_brain_key, check_message, check_text, check_ttl
from pgmem.connecting import get_default_client
from pgmem.errors import InvalidInput
from pgmem.integrations._facade import call
from pgmem.integrations.codec import MessageCodec
from pgmem.models import Message, storage_id
from pgmem.summarizer import (
    CompressionPolicy,
    Summary,
    ask,
    count_tokens,
    summarize_text,
)

__all__ = ["DEFAULT_TTL", "BrainMemory"]

#: MetaGPT's default ``dumps`` timeout (30 minutes).
DEFAULT_TTL = 30 * 60


class BrainMemory(BaseModel):
    """MetaGPT's ``BrainMemory`` (history, knowledge, historical summary), persisted in Postgres.

    Same fields and methods as MetaGPT's; ``loads``/``dumps`` read and write Postgres instead of Redis,
    with the same TTL semantics (an expired brain reads as empty; ``pgmem purge`` deletes it).
    Differences that fix the seed's defects:

    * ``dumps`` appends the talks added since ``loads`` instead of overwriting the stored copy, so two
      processes dumping the same key never lose a talk; scalar fields are written only when changed.
    * Summarising never deletes the history: the summary is a row of ``pgmem.summaries`` naming the
      range of messages it covers, and ``history`` is what comes after it. An LLM failure raises and
      leaves the history as it was.
    * :meth:`compress_history` compresses hierarchically (see :mod:`pgmem.summarizer`) when the history
      exceeds a token budget.

    ``knowledge`` is appended to like the history. After ``dumps`` the object keeps its own view; talks
    other processes dumped meanwhile appear on the next ``loads`` (or summary). With a sync
    :class:`pgmem.Client` the database calls run in a worker thread (the event loop is never blocked; a
    compression's LLM calls then run on a private loop in that thread); with a :class:`pgmem.AsyncClient`
    everything runs on the caller's loop.

    Args (keywords, as MetaGPT's): ``history``, ``knowledge``, ``historical_summary``,
    ``last_history_id``, ``is_dirty``, ``last_talk``, ``cacheable``, ``llm``; plus ``client`` (a
    :class:`pgmem.Client` or :class:`pgmem.AsyncClient`; ``None``: the process-wide default client) and
    ``message_class`` (the class messages are returned as; default: the class of those you add).

    Example:
        >>> brain = await BrainMemory().loads(BrainMemory.to_redis_key("chat", "u1", "c1"))
        >>> brain.add_talk(Message(content="Write a snake game"))
        >>> await brain.dumps(BrainMemory.to_redis_key("chat", "u1", "c1"), timeout_sec=3600)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=False)

    history: list[Any] = Field(default_factory=list)
    knowledge: list[Any] = Field(default_factory=list)
    historical_summary: str = ""
    last_history_id: str = ""
    is_dirty: bool = False
    last_talk: str | None = None
    cacheable: bool = True
    llm: Any = Field(default=None, exclude=True)
    client: Any = Field(default=None, exclude=True)
    message_class: Any = Field(default=None, exclude=True)

    _key: str | None = PrivateAttr(default=None)
    _stored: set[str] = PrivateAttr(default_factory=set)
    _stored_knowledge: set[str] = PrivateAttr(default_factory=set)
    _saved: dict[str, Any] = PrivateAttr(default_factory=dict)
    _ttl: float | None = PrivateAttr(default=DEFAULT_TTL)
    _codec: MessageCodec[Any] = PrivateAttr(default_factory=MessageCodec)

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self._codec = MessageCodec(self.message_class)
        for message in [*self.history, *self.knowledge]:
            self._to_core(message)  # typed errors (not pydantic's) for bad messages at construction
        self._saved = self._fields()

    # -- plumbing ---------------------------------------------------------------------------------------

    @property
    def db(self) -> Any:
        """The client (``client``, else the process-wide default one)."""
        return self.client if self.client is not None else get_default_client()

    @property
    def redis_key(self) -> str | None:
        """The key this brain was loaded from or last dumped to (MetaGPT's ``config.redis_key``)."""
        return self._key

    def _fields(self) -> dict[str, Any]:
        return {
            "historical_summary": self.historical_summary,
            "last_history_id": self.last_history_id,
            "last_talk": self.last_talk,
        }

    def _to_core(self, message: Any) -> Message:
        core = self._codec.to_core(message)
        check_message(core)
        return core

    def _from_core(self, messages: list[Message]) -> list[Any]:
        return self._codec.from_core_list(messages)

    def _bind(self, key: str) -> None:
        self._key = key

    # -- MetaGPT's API ----------------------------------------------------------------------------------

    def add_talk(self, msg: Any) -> None:
        """Add a message from the user (its role becomes ``user``)."""
        self._set_role(msg, "user")
        self.add_history(msg)
        self.is_dirty = True

    def add_answer(self, msg: Any) -> None:
        """Add a message from the LLM (its role becomes ``assistant``)."""
        self._set_role(msg, "assistant")
        self.add_history(msg)
        self.is_dirty = True

    @staticmethod
    def _set_role(msg: Any, role: str) -> None:
        if msg is None or isinstance(msg, str | bytes | int | float):
            raise InvalidInput(f"expected a message object, got {type(msg).__name__}")
        try:
            msg.role = role
        except (AttributeError, TypeError, ValueError) as exc:
            raise InvalidInput(f"cannot set the role of a {type(msg).__name__}: {exc}") from None

    def get_knowledge(self) -> str:
        return "\n".join(getattr(m, "content", "") for m in self.knowledge)

    def add_history(self, msg: Any) -> None:
        """Append ``msg`` unless its (numeric) id is not after ``last_history_id`` (MetaGPT's rule)."""
        self._to_core(msg)  # a bad message is refused here, before it can spoil a later dumps
        msg_id = getattr(msg, "id", None)
        if msg_id:
            if self.to_int(msg_id, 0) <= self.to_int(self.last_history_id, -1):
                return
        self.history.append(msg)
        self.last_history_id = str(msg_id)
        self.is_dirty = True

    def exists(self, text: str) -> bool:
        return any(getattr(m, "content", None) == text for m in reversed(self.history))

    @staticmethod
    def to_int(v: Any, default_value: int) -> int:
        try:
            return int(v)
        except (TypeError, ValueError):
            return default_value

    def pop_last_talk(self) -> str | None:
        v = self.last_talk
        self.last_talk = None
        return v

    @staticmethod
    def to_redis_key(prefix: str, user_id: str, chat_id: str) -> str:
        return f"{prefix}:{user_id}:{chat_id}"

    async def loads(self, redis_key: str) -> BrainMemory:
        """The brain stored under ``redis_key`` (an empty one when there is none or it expired), bound to
        the same client and key. An empty key returns an empty, unbound brain (as MetaGPT)."""
        fresh = BrainMemory(client=self.client, message_class=self.message_class, llm=self.llm)
        fresh._codec = self._codec
        if not redis_key:
            return fresh
        check_brain_key(redis_key)
        state = await call(self.db, lambda c: c.brains.load(redis_key))
        fresh._bind(redis_key)
        if state is None:
            return fresh
        fresh.history = fresh._from_core(state.history)
        fresh.knowledge = fresh._from_core(state.knowledge)
        fresh.historical_summary = state.historical_summary
        fresh.last_history_id = state.last_history_id
        fresh.last_talk = state.last_talk
        fresh._stored = {storage_id(m) for m in state.history}
        fresh._stored_knowledge = {storage_id(m) for m in state.knowledge}
        fresh._saved = fresh._fields()
        fresh.is_dirty = False
        return fresh

    async def dumps(self, redis_key: str, timeout_sec: int = DEFAULT_TTL) -> bool | None:
        """Persist the brain under ``redis_key`` for ``timeout_sec`` seconds (MetaGPT's semantics: nothing
        happens when it is not dirty; False for an empty key; nothing is written when not ``cacheable``).

        New talks are appended to what is stored (another process's talks stay); changed fields are
        written. All or nothing.
        """
        ttl = check_ttl(timeout_sec)
        if not self.is_dirty:
            return None
        if not redis_key:
            return False
        check_brain_key(redis_key)
        if self.cacheable:
            await self._write(redis_key, ttl)
        self.is_dirty = False
        return None

    async def _write(self, redis_key: str, ttl: float | None) -> None:
        if redis_key != self._key:
            self._stored.clear()
            self._stored_knowledge.clear()
            self._saved = {}
        history = [self._to_core(m) for m in self.history]
        knowledge = [self._to_core(m) for m in self.knowledge]
        new_history = [m for m in history if storage_id(m) not in self._stored]
        new_knowledge = [m for m in knowledge if storage_id(m) not in self._stored_knowledge]
        current = self._fields()
        changed = {k: v for k, v in current.items() if k not in self._saved or self._saved[k] != v}
        await call(
            self.db,
            lambda c: c.brains.dump(
                redis_key,
                history=new_history,
                knowledge=new_knowledge,
                historical_summary=changed.get("historical_summary"),
                last_history_id=changed.get("last_history_id"),
                ttl=ttl,
                **({"last_talk": current["last_talk"]} if "last_talk" in changed else {}),
            ),
        )
        self._bind(redis_key)
        self._ttl = ttl
        self._stored.update(storage_id(m) for m in new_history)
        self._stored_knowledge.update(storage_id(m) for m in new_knowledge)
        self._saved = current

    async def _flush(self) -> None:
        """Store pending talks of a bound brain (with its last TTL) before summarising."""
        if self._key is not None and self.cacheable:
            await self._write(self._key, self._ttl)
            self.is_dirty = False

    async def set_history_summary(self, history_summary: str, redis_key: str | None = None) -> None:
        """Make ``history_summary`` the summary of the current history (MetaGPT clears ``history``).

        Bound to a key, the summary is stored as a row covering the history's messages, which stay in
        Postgres; talks another process appended meanwhile stay in ``history``.
        """
        if not isinstance(history_summary, str):
            raise InvalidInput(f"the summary must be a string, not {type(history_summary).__name__}")
        check_text(history_summary, "history_summary", "", max_chars=None)
        key = redis_key or self._key
        if self.historical_summary == history_summary:
            if self.is_dirty and key:
                await self.dumps(key, int(self._ttl or DEFAULT_TTL))
            return
        if key and self.cacheable:
            if key != self._key:
                await self._write(key, self._ttl)
            else:
                await self._flush()
            covered = [self._to_core(m) for m in self.history]
            _, rest = await call(self.db, lambda c: c.brains.set_summary(key, history_summary, covered=covered))
            self.history = self._from_core(rest)
            self._stored = {storage_id(self._to_core(m)) for m in self.history}
            self.historical_summary = history_summary
            self._saved = self._fields()
            self.is_dirty = False
            return
        self.historical_summary = history_summary
        self.history = []
        self.is_dirty = True

    async def summarize(
        self, llm: Any, max_words: int = 200, keep_language: bool = False, limit: int = -1, **kwargs: Any
    ) -> str:
        """Summarise ``historical_summary`` plus the history with ``llm`` (any ``async aask(prompt)``).

        As MetaGPT: with ``limit > 0`` and a text shorter than it, the text is returned as is. Otherwise
        the summary replaces the history (stored as a summary row; the messages stay in Postgres). When
        the LLM raises, the exception propagates and nothing changes.
        """
        if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 1:
            raise InvalidInput(f"max_words must be a positive integer, got {max_words!r}")
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise InvalidInput(f"limit must be an integer, got {limit!r}")
        self.llm = llm
        if self._key is not None and self.cacheable:
            await self._flush()
            stored = await call(self.db, lambda c: c.brains.history_for_summary(self._key))
            self.history = self._from_core(stored)
            self._stored.update(storage_id(m) for m in stored)
        texts = [self.historical_summary] if self.historical_summary else []
        texts += [getattr(m, "content", "") for m in self.history]
        text = "\n".join(texts)
        if limit > 0 and len(text) < limit:
            return text
        summary = await summarize_text(llm, text, max_words=max_words, keep_language=keep_language)
        if not summary:
            raise InvalidInput(f"the LLM returned an empty summary of {len(text)} characters")
        await self.set_history_summary(summary, self._key)
        return summary

    async def compress_history(
        self,
        llm: Any = None,
        *,
        max_tokens: int = 4000,
        policy: CompressionPolicy | None = None,
        force: bool = False,
    ) -> list[Summary]:
        """Compress the history hierarchically when it holds more than ``max_tokens`` tokens (or ``force``).

        Level-1 summaries cover ``policy.chunk`` messages each, level-2 ones ``policy.fanout`` level-1
        summaries, and so on; ``historical_summary`` becomes the summaries no higher level covers, and
        ``history`` the messages after the last one. Returns the summaries created. The raw messages stay
        in Postgres; an LLM failure raises with everything stored before it kept.

        Needs a bound brain (after ``loads`` or ``dumps``); an unbound one falls back to :meth:`summarize`.

        The seed's form, ``compress_history(redis_key)``: with fewer than 10 history messages nothing
        happens; otherwise the history is summarised with ``self.llm`` and the summary stored under
        ``redis_key`` (:meth:`set_history_summary`). Returns ``[]``.
        """
        if isinstance(llm, str):
            return await self._compress_seed_form(llm)
        if llm is None:
            raise InvalidInput("compress_history needs an LLM (any async aask(prompt)), or the seed's redis_key")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInput(f"max_tokens must be a positive integer, got {max_tokens!r}")
        text = self.history_text_all
        if not force and count_tokens(text) <= max_tokens:
            return []
        self.llm = llm
        if self._key is None or not self.cacheable:
            await self.summarize(llm, max_words=(policy or CompressionPolicy()).max_words)
            return []
        await self._flush()
        db = self.db
        key, _ = db.brains.keys(self._key)
        # Appends to a brain's history are serialised by its row lock and commit in seq order, so the
        # unsummarised messages compression reads are a gapless prefix.
        created: list[Summary] = await call(db, lambda c: c.summaries.compress(key, llm, policy))
        level1 = [s.last_seq for s in await call(db, lambda c: c.summaries.list(key, level=1))]
        if not level1:
            return created
        frontier = await call(db, lambda c: c.summaries.frontier(key))
        summary = "\n".join(s.content for s in frontier)
        _, rest = await call(db, lambda c: c.brains.set_summary(self._key, summary, summarized_seq=max(level1)))
        self.historical_summary = summary
        self.history = self._from_core(rest)
        self._saved = self._fields()
        return created

    async def _compress_seed_form(self, redis_key: str) -> list[Summary]:
        if len(self.history) < 10:
            return []
        if self.llm is None:
            raise InvalidInput("compress_history(redis_key) summarises with self.llm, which is not set")
        check_brain_key(redis_key)
        text = "\n".join(getattr(m, "content", "") for m in self.history)
        summary = await summarize_text(self.llm, text, max_words=200)
        if not summary:
            raise InvalidInput(f"the LLM returned an empty summary of {len(text)} characters")
        await self.set_history_summary(summary, redis_key)
        return []

    @property
    def history_text_all(self) -> str:
        """``historical_summary`` and every history message (the compression trigger counts this)."""
        texts = [self.historical_summary] if self.historical_summary else []
        texts += [getattr(m, "content", "") for m in self.history]
        return "\n".join(texts)

    async def get_title(self, llm: Any, max_words: int = 5, language: str = "English", **kwargs: Any) -> str:
        """A title of fewer than ``max_words`` words for the conversation."""
        summary = await self.summarize(llm=llm, max_words=500)
        command = f"Translate the above summary into a {language} title of less than {max_words} words."
        return await ask(llm, f"{summary}\n{command}")

    async def is_related(self, text1: str, text2: str, llm: Any) -> bool:
        """Whether the LLM judges the two paragraphs semantically related."""
        prompt = (
            "You are a tool capable of determining whether two paragraphs are semantically related. "
            'Return "TRUE" if "Paragraph 1" is semantically relevant to "Paragraph 2", otherwise return '
            f'"FALSE".\n## Paragraph 1\n{text2}\n---\n## Paragraph 2\n{text1}\n'
        )
        return "TRUE" in await ask(llm, prompt)

    async def rewrite(self, sentence: str, context: str, llm: Any) -> str:
        """``sentence`` augmented with information from ``context`` by the LLM."""
        prompt = (
            'You are a tool augmenting the "Sentence" with information from the "Context". Do not supplement '
            "the context with information that is not present, especially regarding the subject and object. "
            f"Return the augmented sentence.\n## Context\n{context}\n---\n## Sentence\n{sentence}\n"
        )
        return await ask(llm, prompt)

    @staticmethod
    def extract_info(input_string: str, pattern: str = r"\[([A-Z]+)\]:\s*(.+)") -> tuple[str | None, str]:
        match = re.match(pattern, input_string)
        if match:
            return match.group(1), match.group(2)
        return None, input_string

    @property
    def is_history_available(self) -> bool:
        return bool(self.history or self.historical_summary)

    @property
    def history_text(self) -> str:
        """``historical_summary`` and the history except its last message (MetaGPT's ``history_text``)."""
        if len(self.history) == 0 and not self.historical_summary:
            return ""
        texts = [self.historical_summary] if self.historical_summary else []
        texts += [getattr(m, "content", "") for m in self.history[:-1]]
        return "\n".join(texts)

    @staticmethod
    def to_metagpt_history_format(history: list[Any]) -> str:
        return json.dumps(
            [{"role": getattr(m, "role", "user"), "content": getattr(m, "content", "")} for m in history],
            ensure_ascii=False,
        )

    @staticmethod
    def split_texts(text: str, window_size: int) -> list[str]:
        """Sliding windows of ``window_size`` characters overlapping by 20 (MetaGPT's helper)."""
        from pgmem.summarizer import split_windows

        if window_size <= 0:
            window_size = 2000
        return split_windows(text, window_size, 20 if window_size > 20 else 0)
