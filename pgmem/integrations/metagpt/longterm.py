"""MetaGPT's long-term memories on Postgres: ``MemoryStorage``, ``LongTermMemory``, ``RoleZeroLongTermMemory``.

MetaGPT keeps these in a FAISS index under ``DATA_PATH/role_mem/<role_id>`` (``MemoryStorage``) or in a
Chroma collection (``RoleZeroLongTermMemory``): local files, one writer, no queries. Here they are
memories in Postgres with pgvector embeddings: durable from the moment ``add`` returns, shared by every
process, searchable in SQL, and embedded by the configured provider (the offline hashing embedder by
default) without ever blocking a write on it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pgmem import Client
from pgmem._acompat import drive
from pgmem.checks import key_for
from pgmem.connecting import get_default_client
from pgmem.embeddings import Embedder
from pgmem.errors import InvalidInput
from pgmem.integrations._facade import call
from pgmem.integrations.codec import MessageCodec
from pgmem.integrations.metagpt.memory import Memory
from pgmem.merging import check_merge
from pgmem.models import any_to_str
from pgmem.summarizer import ask

__all__ = [
    "DEFAULT_L2_THRESHOLD",
    "TEAMLEADER_NAME",
    "USER_REQUIREMENT",
    "LongTermMemory",
    "MemoryStorage",
    "RoleZeroLongTermMemory",
]

log = logging.getLogger("pgmem.integrations.metagpt")

#: MetaGPT's ``MemoryStorage.threshold``: FAISS ``IndexFlatL2`` distance (squared L2) below which two
#: messages are "similar". On unit vectors ``|a - b|^2 = 2 - 2 cos``, so 0.1 is a cosine similarity of 0.95.
DEFAULT_L2_THRESHOLD = 0.1
#: ``any_to_str(metagpt.actions.UserRequirement)``.
USER_REQUIREMENT = "metagpt.actions.add_requirement.UserRequirement"
#: MetaGPT's ``TEAMLEADER_NAME``: messages from the team leader count as user requirements in RoleZero.
TEAMLEADER_NAME = "Mike"


def _min_similarity(l2_threshold: float) -> float:
    if isinstance(l2_threshold, bool) or not isinstance(l2_threshold, int | float) or not 0 < l2_threshold <= 4:
        raise InvalidInput(f"threshold is a squared L2 distance in (0, 4], got {l2_threshold!r}")
    return 1.0 - float(l2_threshold) / 2.0


class MemoryStorage:
    """A role's long-term memory (MetaGPT's ``MemoryStorage``), in the Postgres memory ``ltm:<role_id>``
    (role ids with other characters than a key allows, e.g. ``"Alice(Product Manager)"``, map to
    ``ltm:Alice_Product_Manager_#<8 hex digits>``: see :func:`pgmem.checks.key_for`).

    Args:
        client: a :class:`pgmem.Client`; ``None``: the process-wide default client.
        embedder: the embedding provider; ``None``: the client's (the configured default).
        threshold: MetaGPT's similarity threshold, a squared L2 distance between unit vectors (default
            0.1, i.e. cosine similarity ≥ 0.95): :meth:`search_similar` returns messages closer than it.
        message_class: the class messages are returned as (default: the class of the messages added).
        merge: ``"near"``: :meth:`add` does not store a message similar to one stored (closer than
            ``threshold``, MetaGPT's own measure); that one's ``seen_count`` grows instead (pgmem's
            :meth:`~pgmem.MessageRepository.remember`). None (default): only exact duplicates are skipped.
    """

    def __init__(
        self,
        *,
        client: Client | None = None,
        embedder: Embedder | None = None,
        threshold: float = DEFAULT_L2_THRESHOLD,
        message_class: type[Any] | None = None,
        merge: str | None = None,
    ) -> None:
        self._client = client
        self.embedder = embedder
        self.threshold = threshold
        self._min_similarity = _min_similarity(threshold)
        check_merge(merge, None if merge != "near" else self._min_similarity)
        self.merge = merge
        self._codec: MessageCodec[Any] = MessageCodec(message_class)
        self.role_id: str | None = None
        self._initialized = False

    @property
    def client(self) -> Client:
        return self._client if self._client is not None else get_default_client()

    @property
    def key(self) -> str:
        if self.role_id is None:
            raise InvalidInput("call recover_memory(role_id) first: the storage belongs to a role")
        return key_for("ltm:", self.role_id)

    @property
    def is_initialized(self) -> bool:
        """True once :meth:`recover_memory` ran (until :meth:`clean`), as MetaGPT's, whose recovery
        always opens (or creates) the role's FAISS index."""
        return self._initialized

    def recover_memory(self, role_id: str) -> list[Any]:
        """Bind the storage to ``role_id`` and return the messages it holds, oldest first."""
        if not isinstance(role_id, str) or not role_id:
            raise InvalidInput("role_id must be a non-empty string")
        key_for("ltm:", role_id)
        self.role_id = role_id
        self.client.vectors.enable(self.key, self.embedder)
        messages = self.client.messages.last(self.key)
        self._initialized = True
        return self._codec.from_core_list(messages)

    def add(self, message: Any) -> bool:
        """Store ``message`` (durable on return; its embedding follows in the background); False when the
        storage already held it."""
        core = self._codec.to_core(message)
        if self.merge == "near":
            added = self.client.messages.add(self.key, core, merge="near", threshold=self._min_similarity)
        else:
            added = self.client.messages.add(self.key, core)
        self._initialized = True
        log.info("Agent %s's memory_storage add a message", self.role_id)
        return added

    def add_batch(self, messages: Iterable[Any]) -> int:
        """Store ``messages`` in one call, all or nothing, each as :meth:`add` would (``merge="near"``: merged
        against the storage and the batch's earlier messages); return how many were stored."""
        batch = [self._codec.to_core(m) for m in messages]
        if self.merge == "near":
            added = int(self.client.messages.add_many(self.key, batch, merge="near", threshold=self._min_similarity))
        else:
            added = self.client.messages.add_many(self.key, batch)
        self._initialized = True
        log.info("Agent %s's memory_storage add %d messages", self.role_id, len(batch))
        return added

    def _wait_for_own_writes(self) -> None:
        self.client.vectors.wait()

    def _similar_many(self, messages: Sequence[Any], k: int) -> list[list[Any]]:
        if not self._initialized or not messages:
            return [[] for _ in messages]
        self._wait_for_own_writes()
        texts = [str(getattr(m, "content", "") or "") for m in messages]
        found = self.client.vectors.search_many(
            texts, memory=self.key, k=k, threshold=self._min_similarity, embedder=self.embedder
        )
        return [self._codec.from_core_list([h.message for h in hits]) for hits in found]

    async def search_similar(self, message: Any, k: int = 4) -> list[Any]:
        """Stored messages similar to ``message`` (above the threshold), most similar first, at most ``k``."""
        found: list[list[Any]] = await call(self.client, lambda _: self._similar_many([message], k))
        return found[0]

    async def search_similar_many(self, messages: Sequence[Any], k: int = 4) -> list[list[Any]]:
        """:meth:`search_similar` for many messages in one embedding call and one statement."""
        found: list[list[Any]] = await call(self.client, lambda _: self._similar_many(list(messages), k))
        return found

    def persist(self) -> None:
        """Messages are durable already; this embeds what is still queued so every one is searchable."""
        if self.role_id is not None:
            self.client.vectors.flush(self.embedder)

    def delete(self, message: Any) -> bool:
        """Remove ``message`` from the storage (MetaGPT has no such call; LongTermMemory.delete uses it)."""
        return self.client.messages.delete(self.key, self._codec.to_core(message))

    def clean(self) -> None:
        """Empty the storage."""
        if self.role_id is not None:
            self.client.messages.clear(self.key)
        self._initialized = False


class LongTermMemory(Memory):
    """MetaGPT's ``LongTermMemory``: a role's short-term :class:`Memory` plus its :class:`MemoryStorage`.

    The short-term memory has its own key (``key``; default: a new one per instance, as MetaGPT's
    in-process list); the long-term storage is the role's, shared and durable. Only messages caused by
    an action the role watches (``rc.watch``) reach long-term storage, and never while recovering.
    ``merge="near"``: long-term storage keeps one message per fact told again in other words (closer than
    ``threshold``), counting how often it was seen (see :class:`MemoryStorage`).
    """

    def __init__(
        self,
        key: str | None = None,
        *,
        client: Client | None = None,
        embedder: Embedder | None = None,
        threshold: float = DEFAULT_L2_THRESHOLD,
        message_class: type[Any] | None = None,
        merge: str | None = None,
    ) -> None:
        super().__init__(key, client=client, message_class=message_class)
        self.memory_storage = MemoryStorage(
            client=client, embedder=embedder, threshold=threshold, message_class=message_class, merge=merge
        )
        self.rc: Any = None
        self.msg_from_recover = False

    def recover_memory(self, role_id: str, rc: Any, *, load: bool = False) -> None:
        """Open the role's long-term storage and remember ``rc`` (its ``watch``).

        As MetaGPT's (``# self.add_batch(messages) # TODO no need``), the long-term messages are not
        copied into the short-term memory: they only make :meth:`find_news` drop similar news. ``load=True``
        also adds them to the short-term memory (without storing them long-term again)."""
        if not hasattr(rc, "watch"):
            raise InvalidInput("rc must have a `watch` collection of actions (a MetaGPT RoleContext)")
        messages = self.memory_storage.recover_memory(role_id)
        self.rc = rc
        if not messages:
            log.warning("It may the first time to run Role %s, the long-term memory is empty", role_id)
        else:
            log.warning("Role %s has existing memory storage and has recovered them.", role_id)
        if load:
            self.msg_from_recover = True
            try:
                self.add_batch(messages)
            finally:
                self.msg_from_recover = False

    def _watched(self) -> set[str]:
        return {any_to_str(action) for action in (getattr(self.rc, "watch", None) or ())}

    def add(self, message: Any) -> None:
        super().add(message)
        if self.rc is None or self.msg_from_recover:
            return
        if any_to_str(getattr(message, "cause_by", "")) in self._watched():
            self.memory_storage.add(message)

    def add_batch(self, messages: Iterable[Any]) -> None:
        batch = list(messages)
        super().add_batch(batch)
        if self.rc is None or self.msg_from_recover:
            return
        watched = self._watched()
        kept = [m for m in batch if any_to_str(getattr(m, "cause_by", "")) in watched]
        if kept:  # one call: merged against each other too under merge="near"
            self.memory_storage.add_batch(kept)

    async def find_news(self, observed: list[Any], k: int = 0) -> list[Any]:  # type: ignore[override]
        """Short-term news (see :meth:`Memory.find_news`) minus those similar to a long-term message,
        found with one batched search; the last ``k`` of them (all when 0)."""
        stm_news = super().find_news(observed, k=k)
        if not self.memory_storage.is_initialized:
            return stm_news
        similar = await self.memory_storage.search_similar_many(stm_news)
        ltm_news = [message for message, found in zip(stm_news, similar, strict=True) if not found]
        return ltm_news[-k:]

    def persist(self) -> None:
        self.memory_storage.persist()

    def delete(self, message: Any) -> None:
        """Remove ``message`` from the short-term memory and from long-term storage (MetaGPT's TODO)."""
        super().delete(message)
        if self.memory_storage.role_id is not None:
            self.memory_storage.delete(message)

    def clear(self) -> None:
        super().clear()
        self.memory_storage.clean()


Reranker = Callable[[str, list[Any]], list[Any]]

_RANK_PROMPT = (
    "A list of documents is shown below. Each document has a number next to it. A question is also "
    "provided. Respond with the numbers of the documents you should consult to answer the question, in "
    "order of relevance, as a comma-separated list (e.g. 2, 1). Answer NONE if none is relevant.\n\n"
    "{documents}\n\nQuestion: {query}\nAnswer:"
)


def parse_ranking(answer: str, count: int) -> list[int]:
    """The 0-based candidate positions an LLM's ranking answer names, in its order (1-based numbers in the
    answer; unknown or repeated numbers ignored)."""
    seen: list[int] = []
    for token in re.findall(r"\d+", answer):
        position = int(token) - 1
        if 0 <= position < count and position not in seen:
            seen.append(position)
    return seen


class RoleZeroLongTermMemory(Memory):
    """MetaGPT's ``RoleZeroLongTermMemory``: messages older than the last ``memory_k`` are long-term.

    MetaGPT copies each message that falls out of the short-term window into a Chroma collection. Here
    the memory is one list in Postgres and "long-term" is a boundary: the entries before the last
    ``memory_k``. :meth:`get` with ``k != 0`` adds the ``similarity_top_k`` long-term messages most related
    to the last message (when it is a user requirement and the memory holds more than ``memory_k``),
    ordered by creation time, before the short-term ones.

    Boundary: the long-term part is always "all but the last ``memory_k``" of the list, so whatever
    shortens the list moves the boundary: :meth:`delete_newest` brings the newest long-term message back
    into the short-term window, :meth:`clear` empties both. (MetaGPT's copies in Chroma stay where they
    are.)

    Args:
        key: the memory's key (default: a new one; MetaGPT's ``collection_name`` names it too).
        persist_path: MetaGPT's Chroma folder. Accepted and unused: the memory lives in Postgres.
        collection_name: MetaGPT's Chroma collection; used as the key (``rolezero:<name>``) when ``key``
            is not given, so the same name in another process is the same memory.
        use_llm_ranker: rerank the recalled long-term candidates with ``llm`` (as MetaGPT's
            ``LLMRankerConfig``): the LLM is asked which candidates are relevant to the query, most relevant
            first, and the ``similarity_top_k`` it names are kept.
        llm: what ``use_llm_ranker`` asks (any async ``aask(prompt) -> str``).
        rerank: optional ``(query, messages) -> messages`` applied to the related long-term messages.
    """

    def __init__(
        self,
        key: str | None = None,
        *,
        client: Client | None = None,
        embedder: Embedder | None = None,
        memory_k: int = 200,
        similarity_top_k: int = 5,
        rerank: Reranker | None = None,
        message_class: type[Any] | None = None,
        persist_path: str | None = None,
        collection_name: str | None = None,
        use_llm_ranker: bool = False,
        llm: Any = None,
    ) -> None:
        for name, value in (("memory_k", memory_k), ("similarity_top_k", similarity_top_k)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
                raise InvalidInput(f"{name} must be an integer in [1, 1000000], got {value!r}")
        if persist_path is not None and not isinstance(persist_path, str | os.PathLike):
            raise InvalidInput(f"persist_path must be a path, got {type(persist_path).__name__}")
        if collection_name is not None and (not isinstance(collection_name, str) or not collection_name):
            raise InvalidInput("collection_name must be a non-empty string")
        if use_llm_ranker and (llm is None or not callable(getattr(llm, "aask", None))):
            raise InvalidInput("use_llm_ranker needs llm=, an object with an async aask(prompt) method")
        if key is None and collection_name is not None:
            key = key_for("rolezero:", collection_name)
        super().__init__(key, client=client, message_class=message_class)
        self.persist_path = persist_path
        self.collection_name = collection_name
        self.use_llm_ranker = use_llm_ranker
        self.llm = llm
        self.embedder = embedder
        self.memory_k = memory_k
        self.similarity_top_k = similarity_top_k
        self.rerank = rerank
        self._enabled = False

    def _enable(self) -> None:
        if not self._enabled:
            self.client.vectors.enable(self.key, self.embedder)
            self._enabled = True

    def add(self, message: Any) -> None:
        """Add a message; what falls out of the last ``memory_k`` is long-term by position, nothing moves."""
        self._enable()
        super().add(message)

    def add_batch(self, messages: Iterable[Any]) -> None:
        self._enable()
        super().add_batch(messages)

    def _is_user_requirement(self, message: Any) -> bool:
        role = getattr(message, "role", None)
        cause_by = any_to_str(getattr(message, "cause_by", ""))
        sent_from = getattr(message, "sent_from", "")
        return role == "user" and (cause_by.endswith("UserRequirement") or sent_from == TEAMLEADER_NAME)

    def _llm_rank(self, query: str, candidates: list[Any]) -> list[Any]:
        """Keep the candidates the LLM names as relevant, most relevant first (MetaGPT's LLM ranker)."""
        if not candidates:
            return candidates
        documents = "\n".join(f"Document {i}:\n{m.content}" for i, m in enumerate(candidates, 1))
        answer = drive(ask(self.llm, _RANK_PROMPT.format(documents=documents, query=query)))
        return [candidates[i] for i in parse_ranking(str(answer), len(candidates))][: self.similarity_top_k]

    def get(self, k: int = 0) -> list[Any]:
        """The last ``k`` messages (all when 0), preceded by related long-term ones (see the class doc)."""
        memories = super().get(k)
        if k == 0 or not memories:
            return memories
        count = self.count()
        last = memories[-1]
        if count <= self.memory_k or not self._is_user_requirement(last):
            return memories
        boundary = self.client.messages.at(self.key, -(self.memory_k + 1))
        query = str(getattr(last, "content", "") or "")
        if boundary is None or boundary.seq is None or not query:
            return memories
        try:
            self._enable()
            self.client.vectors.wait()
            hits = self.client.vectors.search(
                query, memory=self.key, max_seq=boundary.seq, k=self.similarity_top_k, embedder=self.embedder
            )
        except Exception as exc:  # noqa: BLE001 - as MetaGPT: a failed long-term fetch returns the short-term part
            log.warning("fetching long-term memories failed: %s: %s", type(exc).__name__, exc)
            return memories
        candidates = [h.message for h in hits]
        if self.use_llm_ranker:
            candidates = self._llm_rank(query, candidates)
        related = sorted(candidates, key=lambda m: m.created_at)
        out = self._codec.from_core_list(related)
        if self.rerank is not None:
            out = list(self.rerank(query, out))
        log.info("Fetched %d long-term memories.", len(out))
        return out + memories
