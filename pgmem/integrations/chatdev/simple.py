"""The ``simple`` store: read/write, vector retrieval re-scored lexically, de-duplicated by summary hash."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from pgmem import Client
from pgmem.embeddings import Embedder, HashingEmbedder, OpenAIEmbedder, SentenceTransformerEmbedder
from pgmem.integrations.chatdev.base import (
    MemoryContentSnapshot,
    MemoryItem,
    MemoryStore,
    MemoryWritePayload,
    StoreConfig,
    check_threshold,
    check_top_k,
    digest,
    payload_of,
    query_text,
)

__all__ = ["EmbeddingConfig", "SimpleMemoryConfig", "SimpleMemoryStore", "jaccard", "lcs_ratio"]

_WORD_RE = re.compile(r"\w+", re.UNICODE)
_SPACE_RE = re.compile(r"\s+")


class EmbeddingConfig(StoreConfig):
    """Which embedding provider a store uses (default: the client's, i.e. ``PGMEM_EMBEDDER``)."""

    provider: Literal["hashing", "openai", "sentence-transformers"] = "hashing"
    model: str | None = None
    dimension: int | None = Field(default=None, ge=8, le=16000)
    api_key: str | None = None
    base_url: str | None = None

    def build(self) -> Embedder:
        if self.provider == "hashing":
            return HashingEmbedder(self.dimension or 384)
        if self.provider == "openai":
            return OpenAIEmbedder(
                self.model or "text-embedding-3-small",
                self.dimension or 1536,
                api_key=self.api_key,
                base_url=self.base_url,
            )
        return SentenceTransformerEmbedder(self.model or "sentence-transformers/all-MiniLM-L6-v2")


class SimpleMemoryConfig(StoreConfig):
    """Config of the ``simple`` store.

    Attributes:
        embedding: the embedding provider (default: the client's).
        rescore: the lexical score mixed into the vector score: ``jaccard`` (word sets), ``lcs`` (longest
            common subsequence of words, over the longer length) or ``none``.
        rescore_weight: ``score = (1 - w) * cosine + w * lexical``.
        candidates: ``top_k * candidates`` nearest items are re-scored.
        max_content_length / min_content_length: an item's summary is cut to the first, and an output
            shorter than the second is not stored.
        memory_path: accepted for ChatDev configs and ignored (the store is in Postgres).
    """

    embedding: EmbeddingConfig | None = None
    rescore: Literal["jaccard", "lcs", "none"] = "jaccard"
    rescore_weight: float = Field(default=0.3, ge=0.0, le=1.0)
    candidates: int = Field(default=3, ge=1, le=20)
    max_content_length: int = Field(default=500, ge=20, le=100_000)
    min_content_length: int = Field(default=20, ge=0, le=100_000)
    memory_path: str | None = None


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text.lower())


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' word sets."""
    sa, sb = set(_words(a)), set(_words(b))
    return len(sa & sb) / len(sa | sb) if sa and sb else 0.0


def lcs_ratio(a: str, b: str) -> float:
    """Length of the longest common subsequence of words over the longer text's word count.

    Words, not characters (as ChatDev does): the same ordering signal at a 25th of the cost for 500-char
    summaries.
    """
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return 0.0
    previous = [0] * (len(wb) + 1)
    for x in wa:
        current = [0]
        for j, y in enumerate(wb, 1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1] / max(len(wa), len(wb))


class SimpleMemoryStore(MemoryStore):
    """Read/write memory of what nodes produced, retrieved by vector similarity re-scored lexically.

    An item's id is a hash of its summary, so the same summary written twice (by any process) is stored
    once.

    Example:
        >>> store = SimpleMemoryStore("convo", SimpleMemoryConfig(), client=client)
        >>> store.load()
        >>> store.update(MemoryWritePayload(agent_role="coder", inputs_text="snake game",
        ...                                 output_snapshot=MemoryContentSnapshot(text="Use curses for the board")))
        >>> store.retrieve("coder", "how to draw the board", top_k=3)
    """

    type_name = "simple"
    config: SimpleMemoryConfig

    def __init__(self, name: str, config: SimpleMemoryConfig, *, client: Client | None = None) -> None:
        super().__init__(name, config, client=client)
        self._embedder = None if config.embedding is None else config.embedding.build()

    def load(self) -> None:
        super().load()
        self.client.vectors.enable(self.memory_key, self._embedder)

    def _extract(self, text: str) -> str:
        text = _SPACE_RE.sub(" ", text).strip()
        limit = self.config.max_content_length
        return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."

    def _lexical(self, query: str, content: str) -> float:
        if self.config.rescore == "jaccard":
            return jaccard(query, content)
        if self.config.rescore == "lcs":
            return lcs_ratio(query, content)
        return 0.0

    def update(self, payload: MemoryWritePayload) -> bool:
        """Store the node's output (with its input) as one item; False when there was nothing to store or
        the same summary is already stored."""
        payload = payload_of(payload)
        output = payload.output_snapshot
        if output is None or not output.text.strip():
            return False
        content = self._extract(f"Input: {payload.inputs_text}\nOutput: {output.text}")
        if len(content) < self.config.min_content_length:
            return False
        item = MemoryItem(
            id="item-" + digest(self.name, content)[:40],
            content_summary=content,
            metadata={
                "agent_role": payload.agent_role,
                "input_preview": payload.inputs_text[:200],
                "content_length": len(content),
                "attachments": output.attachment_overview(),
            },
            input_snapshot=payload.input_snapshot,
            output_snapshot=output,
        )
        message = item.to_message(role=payload.agent_role or "assistant", cause_by=self.cause_by)
        return self.client.messages.add(self.memory_key, message)

    def retrieve(
        self,
        agent_role: str,
        query: MemoryContentSnapshot | str,
        top_k: int = 3,
        similarity_threshold: float = -1.0,
    ) -> list[MemoryItem]:
        """The ``top_k`` items closest to ``query`` (cosine at least ``similarity_threshold``; -1: any),
        re-scored lexically; each item's ``score`` is the combined score."""
        top_k = check_top_k(top_k)
        threshold = check_threshold(similarity_threshold)
        text = self._extract(query_text(query))
        if not text:
            return []
        self.client.vectors.wait()  # this process's own writes are searchable
        hits = self.client.search(
            text,
            memory=self.memory_key,
            k=min(top_k * self.config.candidates, 1000),
            threshold=None if threshold <= -1.0 else threshold,
            embedder=self._embedder,
        )
        w = self.config.rescore_weight
        scored = [(hit.message, (1 - w) * hit.score + w * self._lexical(text, hit.message.content)) for hit in hits]
        scored.sort(key=lambda pair: pair[1], reverse=True)
        return [MemoryItem.from_message(message, score) for message, score in scored[:top_k]]
