"""The ``simple`` store: read/write, vector retrieval re-scored lexically, de-duplicated by summary hash."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

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

__all__ = [
    "EmbeddingConfig",
    "SimpleMemoryConfig",
    "SimpleMemoryStore",
    "devall_similarity",
    "extract_key_content",
    "jaccard",
    "lcs_ratio",
]

_WORD_RE = re.compile(r"\w+", re.UNICODE)
_SPACE_RE = re.compile(r"\s+")


#: Output sizes of the OpenAI models DevAll's configurations name (others: set ``dimension``).
_OPENAI_DIMENSIONS = {"text-embedding-3-large": 3072}


class EmbeddingConfig(StoreConfig):
    """Which embedding provider a store uses (DevAll's ``embedding:`` block).

    Attributes:
        provider: ``hashing`` (offline, the default), ``openai``, or ``local`` / ``sentence-transformers``
            (a local sentence-transformers model, ``pip install 'pgmem[local]'``).
        model: the model name (``local``: a model name or path, unless ``params.model_path`` is set).
        dimension: the model's output size (default: 384 hashing, 1536 OpenAI, 3072 text-embedding-3-large).
        api_key / base_url: for ``openai``; the key never appears in a repr, an error or the stored config.
        params: DevAll's provider parameters. ``model_path`` and ``device`` are used by ``local``; the
            others (DevAll's OpenAI ``max_length``, ``use_chunking``, ``chunk_strategy``) are accepted and
            not used: pgmem sends a text whole and the OpenAI client reports one that is too long.
    """

    provider: Literal["hashing", "openai", "local", "sentence-transformers"] = "hashing"
    model: str | None = None
    dimension: int | None = Field(default=None, ge=8, le=16000)
    api_key: str | None = Field(default=None, repr=False, exclude=True)
    base_url: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("api_key", "base_url", "model", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value  # DevAll's optional_str

    def build(self) -> Embedder:
        if self.provider == "hashing":
            return HashingEmbedder(self.dimension or 384)
        if self.provider == "openai":
            model = self.model or "text-embedding-3-small"
            return OpenAIEmbedder(
                model,
                self.dimension or _OPENAI_DIMENSIONS.get(model, 1536),
                api_key=self.api_key,
                base_url=self.base_url,
            )
        model_path = self.params.get("model_path") or self.model or "sentence-transformers/all-MiniLM-L6-v2"
        # A model_path beside a model: the files of that model, registered under its name (not the path's).
        name = self.model if self.params.get("model_path") and self.model else None
        return SentenceTransformerEmbedder(str(model_path), name=name, device=str(self.params.get("device", "cpu")))


class SimpleMemoryConfig(StoreConfig):
    """Config of the ``simple`` store.

    Attributes:
        embedding: the embedding provider (default: the client's).
        rescore: the lexical score mixed into the vector score: ``devall`` (DevAll's: word Jaccard,
            character LCS, keyword overlap and a length factor, weighted 0.4/0.3/0.2/0.1), ``jaccard``
            (word sets), ``lcs`` (longest common subsequence of words, over the longer length) or ``none``.
        rescore_weight: ``score = (1 - w) * cosine + w * lexical``.
        candidates: ``top_k * candidates`` nearest items are re-scored.
        max_content_length / min_content_length: an item's summary is cut to the first (DevAll's
            summary: see :func:`extract_key_content`), and a summary shorter than the second is not stored.
        max_items: the newest this many items are kept (DevAll keeps 1,000).
        memory_path: accepted for ChatDev configs and ignored (the store is in Postgres).
    """

    embedding: EmbeddingConfig | None = None
    rescore: Literal["devall", "jaccard", "lcs", "none"] = "devall"
    rescore_weight: float = Field(default=0.3, ge=0.0, le=1.0)
    candidates: int = Field(default=3, ge=1, le=20)
    max_content_length: int = Field(default=500, ge=20, le=100_000)
    min_content_length: int = Field(default=20, ge=0, le=100_000)
    max_items: int = Field(default=1000, ge=1, le=10_000_000)
    memory_path: str | None = None


#: Templated instructions DevAll drops from a summary (English and Chinese), each up to its first comma.
_TEMPLATED = [
    re.compile(r"(?:Agent|Model) Role:.*?\n\n"),
    re.compile("(?:You are|\u4f60\u662f\u4e00\u4f4d).*?(?:,|\uff0c)"),
    re.compile("(?:User will input|\u7528\u6237\u4f1a\u8f93\u5165).*?(?:,|\uff0c)"),
    re.compile("(?:You need to|\u4f60\u9700\u8981).*?(?:,|\uff0c)"),
]
_SENTENCE_END = re.compile("[\u3002\uff01\uff1f\uff1b\n]")


def extract_key_content(text: str, max_length: int = 500, min_sentence: int = 20) -> str:
    """DevAll's summary of a text (``SimpleMemory._extract_key_content``), so that the same output has
    the same summary, and so the same identity, in both.

    Whitespace runs become one space; a text of at most 100 characters is kept whole. A longer one loses
    DevAll's templated phrases ("You are ...,", "User will input ...,", "You need to ...," and their
    Chinese forms, each up to the first comma), keeps its first 3 sentences of at least ``min_sentence``
    characters joined by "。", cut at ``max_length`` characters plus "..." (no such sentence: the first
    ``max_length`` characters).
    """
    text = _SPACE_RE.sub(" ", text.strip())
    if len(text) <= 100:
        return text
    for pattern in _TEMPLATED:
        text = pattern.sub("", text)
    sentences = [part.strip() for part in _SENTENCE_END.split(text)]
    kept = [sentence for sentence in sentences if len(sentence) >= min_sentence]
    if not kept:
        return text[:max_length]
    joined = "\u3002".join(kept[:3])
    if len(joined) > max_length:
        joined = joined[:max_length] + "..."
    return joined.strip()


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


def _char_lcs(a: str, b: str) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, 1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def devall_similarity(query: str, content: str) -> float:
    """DevAll's lexical score of a candidate (``SimpleMemory._calculate_semantic_similarity``):
    0.4 Jaccard of whitespace-split lowercase words, 0.3 longest common subsequence of characters over
    the longer length, 0.2 the share of the query's words of 2+ characters found in the content, 0.1 a
    length factor (1 when the content is 0.5-2 times as long as the query), capped at 1."""
    q, c = query.lower(), content.lower()
    qw, cw = set(q.split()), set(c.split())
    jac = len(qw & cw) / len(qw | cw) if qw and cw else 0.0
    longest = max(len(q), len(c))
    lcs = _char_lcs(q, c) / longest if longest else 0.0
    keywords = {w for w in qw if len(w) >= 2}
    keyword = len(keywords & {w for w in cw if len(w) >= 2}) / len(keywords) if keywords else 0.0
    if not c:
        length = 0.0
    else:
        ratio = len(c) / len(q) if q else float("inf")
        length = 1.0 if 0.5 <= ratio <= 2.0 else ratio / 0.5 if ratio < 0.5 else max(0.1, 2.0 / ratio)
    return min(0.4 * jac + 0.3 * lcs + 0.2 * keyword + 0.1 * length, 1.0)


class SimpleMemoryStore(MemoryStore):
    """Read/write memory of what nodes produced, retrieved by vector similarity re-scored lexically.

    An item's id is a hash of its summary, so the same summary written twice (by any process) is stored
    once. Summaries, the query text and the re-scoring are DevAll's; the newest ``max_items`` are kept.

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
        return extract_key_content(text, self.config.max_content_length, self.config.min_content_length)

    def _lexical(self, query: str, content: str) -> float:
        if self.config.rescore == "devall":
            return devall_similarity(query, content)
        if self.config.rescore == "jaccard":
            return jaccard(query, content)
        if self.config.rescore == "lcs":
            return lcs_ratio(query, content)
        return 0.0

    def update(self, payload: MemoryWritePayload) -> bool:
        """Store the node's output (with its input) as one item, then keep the newest ``max_items``, in
        one transaction; False when there was nothing to store or the same summary is already stored."""
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
        client = self.client
        trimmed = 0
        with client.transaction() as conn:
            added = client.messages.add(self.memory_key, message, connection=conn)
            if added:
                trimmed = client.retention.trim(self.memory_key, self.config.max_items, connection=conn)
        if added:  # committed: embed it in the background, and tell caches what the cap removed
            client.vectors.written(None)
            if trimmed:
                client.vectors.changed(self.memory_key, None)
        return added

    def retrieve(
        self,
        agent_role: str,
        query: MemoryContentSnapshot | str,
        top_k: int = 3,
        similarity_threshold: float = -1.0,
    ) -> list[MemoryItem]:
        """The ``top_k`` items closest to ``query`` (cosine at least ``similarity_threshold``; -1: any),
        re-scored lexically; each item's ``score`` is the combined score. As in DevAll, the text searched
        for is the summary of ``"Query: <query>"``."""
        top_k = check_top_k(top_k)
        threshold = check_threshold(similarity_threshold)
        text = self._extract(f"Query: {query_text(query)}")
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
