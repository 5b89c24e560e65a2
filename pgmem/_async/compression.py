"""Hierarchical compression of a memory (see :mod:`pgmem.summarizer`), run by ``client.summaries.compress``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgmem._acompat import adrive
from pgmem.errors import Conflict
from pgmem.models import Message
from pgmem.summarizer import CompressionPolicy, Summary, ask, count_tokens, message_line, summary_prompt

if TYPE_CHECKING:
    from pgmem._async.summaries import AsyncSummaryRepository

__all__ = ["compress"]


async def compress(
    repo: AsyncSummaryRepository,
    memory: str,
    llm: Any,
    policy: CompressionPolicy | None = None,
    *,
    force: bool = False,
    after_seq: int = 0,
) -> list[Summary]:
    """Summarise what is not summarised yet in ``memory``; return the new summaries.

    Args:
        repo: the summary repository of the memory's client.
        memory: the memory key.
        llm: anything with ``async aask(prompt) -> str`` (awaited here in the async flavour; run on a
            private event loop in the sync one).
        policy: grouping and length (default :class:`CompressionPolicy`).
        force: also summarise a last partial chunk of messages (at level 1 only).
        after_seq: ignore messages at or before this sequence number.
    """
    policy = policy or CompressionPolicy()
    created: list[Summary] = []
    conflicted: set[tuple[int, int]] = set()
    # Entries numbered past this may still be in flight in other writers' transactions: leave them for later.
    settled = await repo.settled(memory)
    while True:
        pending = await repo.unsummarized(memory, limit=policy.chunk, after_seq=after_seq, upto_seq=settled)
        if not pending or (len(pending) < policy.chunk and not force):
            break
        first_seq, last_seq = _seq(pending[0]), _seq(pending[-1])
        text = "\n".join(message_line(m) for m in pending)
        summary = await adrive(ask(llm, _prompt(text, policy)))
        try:
            stored = await repo.add(
                memory,
                level=1,
                first_seq=first_seq,
                last_seq=last_seq,
                content=summary,
                source_chars=len(text),
                source_tokens=count_tokens(text),
            )
        except Conflict:
            _once(conflicted, 1, first_seq)  # another summariser stored this range: read what is left
            continue
        created.append(stored)
        if len(pending) < policy.chunk:
            break
    for level in range(1, policy.max_level):
        children = await repo.unrolled(memory, level)
        while len(children) >= policy.fanout:
            group, children = children[: policy.fanout], children[policy.fanout :]
            text = "\n".join(c.content for c in group)
            summary = await adrive(ask(llm, _prompt(text, policy)))
            try:
                stored = await repo.add(
                    memory,
                    level=level + 1,
                    first_seq=group[0].first_seq,
                    last_seq=group[-1].last_seq,
                    content=summary,
                    source_chars=len(text),
                    source_tokens=count_tokens(text),
                )
            except Conflict:
                _once(conflicted, level + 1, group[0].first_seq)
                children = await repo.unrolled(memory, level)
                continue
            created.append(stored)
    return created


def _seq(message: Message) -> int:
    """The entry sequence number of a message read from a memory (``unsummarized`` always sets it)."""
    seq = message.seq
    if seq is None:
        raise AssertionError("a message read from a memory carries its sequence number")
    return seq


def _once(seen: set[tuple[int, int]], level: int, first_seq: int) -> None:
    """A range may lose a race once (then the summaries are read again); twice means it cannot be stored."""
    if (level, first_seq) in seen:
        raise Conflict(f"the level-{level} summary starting at seq {first_seq} cannot be stored")
    seen.add((level, first_seq))


def _prompt(text: str, policy: CompressionPolicy) -> str:
    return summary_prompt(text, policy.max_words, policy.keep_language)
