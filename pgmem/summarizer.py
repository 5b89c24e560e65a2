"""Summaries: token counting, the LLMs that write them, and hierarchical compression.

Compression works on a memory's messages in Postgres (``client.summaries``) and never deletes them:

* **level 1** — every ``chunk`` messages not yet summarised become one summary row that names the
  range of ``memory_entries.seq`` it covers;
* **level n + 1** — every ``fanout`` level-n summaries not yet rolled up become one summary of them
  (its range: from its first child's start to its last child's end);
* **incremental** — a new summary covers only what no summary of its level covers yet; a partial chunk
  waits for more messages (unless ``force``).

The LLM is anything with an async ``aask(prompt) -> str`` (MetaGPT's LLMs qualify); the compression
itself runs in the core (``client.summaries.compress``, :mod:`pgmem._async.compression`). The LLM is
called before anything is written: when it raises, the exception propagates, the summaries stored so far stay (each is
complete) and no message is lost or hidden. :class:`OfflineSummarizer` is deterministic and needs no
network (tests, demos); :class:`OpenAISummarizer` calls a chat-completions API.

Token counts use `tiktoken <https://github.com/openai/tiktoken>`_ when it is installed (``pip install
'pgmem[tokens]'``) and its encoding loads (``PGMEM_TOKENIZER``, default ``cl100k_base``; tiktoken
downloads encodings once, so an offline machine needs ``TIKTOKEN_CACHE_DIR`` pre-filled). Otherwise —
or with ``PGMEM_TOKENIZER=approx`` — a token is counted per 4 bytes of UTF-8 (rounded up), which is
close to cl100k for English prose and overestimates for code and non-Latin scripts, so a compression
trigger fires early rather than late.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

from pgmem.errors import InvalidInput, SummaryError
from pgmem.models import Message

__all__ = [
    "LLM",
    "CompressionPolicy",
    "OfflineSummarizer",
    "OpenAISummarizer",
    "Summary",
    "SummaryError",
    "Tokenizer",
    "count_tokens",
    "get_tokenizer",
    "summary_prompt",
]

T = TypeVar("T")


@runtime_checkable
class LLM(Protocol):
    """What pgmem needs of a language model: ``await llm.aask(prompt)`` returns the answer text."""

    async def aask(self, prompt: str) -> str: ...


@dataclass(frozen=True, slots=True)
class Summary:
    """A row of ``pgmem.summaries``."""

    id: int
    level: int
    first_seq: int
    last_seq: int
    content: str
    source_chars: int
    source_tokens: int
    summary_tokens: int
    tokenizer: str
    created_at: datetime


# -- tokens -------------------------------------------------------------------------------------------


class Tokenizer:
    """Counts tokens with tiktoken when available, else one token per 4 UTF-8 bytes (see module doc)."""

    def __init__(self, encoding: str | None = None) -> None:
        choice = encoding or os.environ.get("PGMEM_TOKENIZER", "cl100k_base")
        self._encoding: Any = None
        self.name = "approx:utf8/4"
        if choice != "approx":
            try:
                import tiktoken

                self._encoding = tiktoken.get_encoding(choice)
                self.name = f"tiktoken:{choice}"
            except Exception:  # noqa: BLE001 - not installed, unknown name, or no network for the download
                self._encoding = None

    def count(self, text: str) -> int:
        """The number of tokens of ``text``."""
        if self._encoding is not None:
            return len(self._encoding.encode(text, disallowed_special=()))
        return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 4)


@functools.cache
def get_tokenizer() -> Tokenizer:
    """The process's tokenizer (created once)."""
    return Tokenizer()


def count_tokens(text: str) -> int:
    """Tokens of ``text`` with the process's tokenizer."""
    return get_tokenizer().count(text)


# -- LLMs ---------------------------------------------------------------------------------------------

_BODY_MARK = "\n---\n"


def summary_prompt(text: str, max_words: int = 200, keep_language: bool = False) -> str:
    """The prompt pgmem sends to summarise ``text`` (the text follows the last ``---`` line)."""
    language = " Write it in the same language as the text." if keep_language else ""
    return (
        "You are a tool for summarizing and abstracting text. Summarize the text below in at most "
        f"{max_words} words, keeping names, decisions, numbers and open questions.{language}{_BODY_MARK}{text}"
    )


class OfflineSummarizer:
    """A deterministic summariser that needs no model: the leading words of each line of the text.

    Good enough to exercise compression in tests and demos; not a real summary.

    Example:
        >>> await OfflineSummarizer(words_per_line=3).aask(summary_prompt("user: write a snake game now"))
        'user: write a'
    """

    def __init__(self, *, words_per_line: int = 12, max_words: int = 120) -> None:
        self.words_per_line = words_per_line
        self.max_words = max_words

    def ask(self, prompt: str) -> str:
        body = prompt.rsplit(_BODY_MARK, 1)[-1]
        lines = [" ".join(line.split()[: self.words_per_line]) for line in body.splitlines() if line.strip()]
        words = " | ".join(lines).split()
        return " ".join(words[: self.max_words])

    async def aask(self, prompt: str) -> str:
        return self.ask(prompt)


class OpenAISummarizer:
    """An LLM backed by the OpenAI chat-completions API (``base_url`` for any compatible server).

    Args:
        model: the chat model.
        api_key / base_url: default to ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``.
        max_retries / timeout: passed to the ``openai`` client (it retries rate limits with backoff).
    """

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 4,
        timeout: float = 120.0,
    ) -> None:
        import openai

        self.model = model
        self._options: dict[str, Any] = {
            "api_key": api_key,
            "base_url": base_url,
            "max_retries": max_retries,
            "timeout": timeout,
        }
        self._client = openai.OpenAI(**self._options)
        self._aclient: Any = None
        self._loop: Any = None

    def ask(self, prompt: str) -> str:
        answer = self._client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": prompt}])
        return answer.choices[0].message.content or ""

    async def aask(self, prompt: str) -> str:
        import openai

        loop = asyncio.get_running_loop()
        if self._aclient is None or self._loop is not loop:
            # An async HTTP client's pooled connections belong to one event loop; the sync flavour of pgmem
            # drives each compression on a new one.
            self._aclient, self._loop = openai.AsyncOpenAI(**self._options), loop
        answer = await self._aclient.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": prompt}]
        )
        return answer.choices[0].message.content or ""


async def ask(llm: Any, prompt: str) -> str:
    """``await llm.aask(prompt)``, checked: the answer must be a string Postgres can store."""
    aask = getattr(llm, "aask", None)
    if aask is None or not callable(aask):
        raise InvalidInput(f"llm must have an async aask(prompt) method, got {type(llm).__name__}")
    answer = await aask(prompt)
    if not isinstance(answer, str):
        raise SummaryError(f"the LLM answered with a {type(answer).__name__}, not a string")
    return answer.replace("\x00", "")


# -- compression --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompressionPolicy:
    """How :func:`compress` groups messages and summaries.

    Attributes:
        chunk: messages per level-1 summary.
        fanout: level-n summaries per level-(n+1) summary.
        max_level: the highest level built.
        max_words: the length asked of each summary.
        keep_language: ask for summaries in the text's own language.
    """

    chunk: int = 20
    fanout: int = 5
    max_level: int = 3
    max_words: int = 200
    keep_language: bool = False

    def __post_init__(self) -> None:
        for name, low, high in (("chunk", 1, 10_000), ("fanout", 2, 1_000), ("max_level", 1, 32)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidInput(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        if isinstance(self.max_words, bool) or not isinstance(self.max_words, int) or self.max_words < 1:
            raise InvalidInput(f"max_words must be a positive integer, got {self.max_words!r}")


def message_line(message: Message) -> str:
    """How a message appears in the text given to the summariser."""
    return f"{message.role}: {message.content}"


def split_windows(text: str, window: int, overlap: int = 20) -> list[str]:
    """Cut ``text`` into windows of ``window`` characters, each overlapping the previous by ``overlap``."""
    if window <= overlap:
        raise InvalidInput(f"window ({window}) must be larger than overlap ({overlap})")
    if len(text) <= window:
        return [text]
    step = window - overlap
    return [text[i : i + window] for i in range(0, len(text) - overlap, step)]


async def summarize_text(
    llm: Any, text: str, *, max_words: int = 200, keep_language: bool = False, window: int = 12_000
) -> str:
    """Summarise a text of any length: windows of ``window`` characters summarised and merged until one
    summary remains (MetaGPT's ``BrainMemory._summarize``)."""
    for _ in range(32):
        windows = split_windows(text, window)
        if len(windows) == 1:
            return await ask(llm, summary_prompt(text, max_words, keep_language))
        part_words = min(max_words // len(windows) + 1, 100)
        parts = await asyncio.gather(*(ask(llm, summary_prompt(w, part_words, keep_language)) for w in windows))
        text = "\n".join(parts)
    raise SummaryError("the text does not get shorter when summarised")
