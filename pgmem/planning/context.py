"""The context for the next model call, under a token budget (``client.context``): what to send, chosen
from what one statement read (no I/O here).

A context is made of four parts, sent in this order:

* ``pinned`` — the memory's pinned messages: role ``system`` (or the roles asked for) or metadata
  ``{"pinned": true}``, in conversation order;
* ``summary`` — the memory's summaries (:mod:`pgmem.summarizer`) of what falls before the window: the
  latest of the frontier that end before the window's first message, in order;
* ``related`` — messages older than the window that match the query (hybrid search, or keyword search
  when the memory has no embedding model), best first while they fit, then in conversation order;
* ``window`` — the most recent messages, in conversation order.

How the budget (``budget - reserve`` tokens) is spent, so that the same data gives the same context:

1. pinned messages, in order, each if it fits;
2. the newest unit of the window (the turn being answered);
3. related messages, best score first, within ``related_share`` of what is left;
4. the window, older unit by older unit, stopping at the first that does not fit (the window never has
   a hole);
5. summaries ending before the window's first message, newest first, stopping at the first that does not
   fit; when not even the newest fits, the window's oldest units give way to it (never its newest unit):
   a summary says more of the past per token than the messages it covers.

A unit is one message, or an assistant message that calls tools together with every result of those
calls: a context never holds a call without all its results, nor a result without its call (such
messages are dropped, and said so).

Tokens are counted with :class:`pgmem.summarizer.Tokenizer` (tiktoken's ``cl100k_base`` when installed,
else one token per 4 UTF-8 bytes), per message: its content, its tool calls as JSON, and
:data:`MESSAGE_OVERHEAD` for the role and the framing. The sum never exceeds the budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pgmem.errors import InvalidInput
from pgmem.models import Message

__all__ = [
    "MESSAGE_OVERHEAD",
    "PARTS",
    "Candidate",
    "Context",
    "ContextItem",
    "PartReport",
    "check_context_args",
    "choose",
    "message_tokens",
]

#: The parts of a context, in the order they are sent.
PARTS = ("pinned", "summary", "related", "window")
#: Tokens a chat message costs beyond its content (its role and the framing around it: OpenAI's chat
#: format spends 3 to 4).
MESSAGE_OVERHEAD = 4


def message_tokens(message: Message, count: Any) -> int:
    """The tokens ``message`` costs in a context, ``count`` a text's token count."""
    tokens = MESSAGE_OVERHEAD + count(message.content or "")
    if message.tool_calls:
        tokens += count(json.dumps(message.tool_calls, ensure_ascii=False, separators=(",", ":"), default=str))
    return int(tokens)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A message (or a summary, as a system message) the statement read, with what choosing needs."""

    part: str
    message: Message
    seq: int
    tokens: int
    score: float | None = None
    #: A summary's range of entries (first seq, last seq).
    covers: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One message of a context: its part, its tokens, and for a related message its search score, for a
    summary the entries it covers."""

    part: str
    message: Message
    tokens: int
    seq: int
    score: float | None = None
    covers: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class PartReport:
    """What a part holds (messages, tokens) and what it left out, counted per reason."""

    kept: int = 0
    tokens: int = 0
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Context:
    """What to send the model: :attr:`items` in order (pinned, summary, related, window), never more than
    :attr:`budget` minus :attr:`reserve` tokens, and per part what was kept and dropped."""

    items: list[ContextItem]
    budget: int
    reserve: int
    tokens: int
    parts: dict[str, PartReport]
    tokenizer: str

    @property
    def messages(self) -> list[Message]:
        """The messages, in order (a summary as a ``system`` message whose metadata says what it covers)."""
        return [item.message for item in self.items]

    def as_openai(self) -> list[dict[str, Any]]:
        """The messages as OpenAI chat messages (``role``, ``content``, and ``tool_calls`` /
        ``tool_call_id`` / ``name`` where set)."""
        out: list[dict[str, Any]] = []
        for m in self.messages:
            entry: dict[str, Any] = {"role": m.role or "user", "content": m.content}
            if m.tool_calls:
                entry["tool_calls"] = m.tool_calls
            if m.tool_call_id:
                entry["tool_call_id"] = m.tool_call_id
            if m.name:
                entry["name"] = m.name
            out.append(entry)
        return out


def check_context_args(budget: Any, reserve: Any, related_k: Any, related_share: Any, parts: Any) -> tuple[str, ...]:
    """Check :meth:`client.context`'s numbers and parts (``InvalidInput`` naming the bad one); return the
    parts asked for."""
    for name, value, low in (("budget", budget, 1), ("reserve", reserve, 0), ("related_k", related_k, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 10_000_000:
            raise InvalidInput(f"{name} must be an integer in [{low}, 10000000], got {value!r}")
    if reserve >= budget:
        raise InvalidInput(f"reserve ({reserve}) must be less than budget ({budget})")
    if isinstance(related_share, bool) or not isinstance(related_share, int | float) or not 0 <= related_share <= 1:
        raise InvalidInput(f"related_share must be a number in [0, 1], got {related_share!r}")
    chosen = tuple(parts) if not isinstance(parts, str) else (parts,)
    unknown = [p for p in chosen if p not in PARTS]
    if unknown or not chosen:
        raise InvalidInput(f"parts must be some of {', '.join(PARTS)}, got {parts!r}")
    return tuple(p for p in PARTS if p in chosen)


# -- choosing -------------------------------------------------------------------------------------------


def _call_ids(message: Message) -> list[str]:
    ids = []
    for call in message.tool_calls or ():
        value = call.get("id") if isinstance(call, dict) else getattr(call, "id", None)
        if isinstance(value, str) and value:
            ids.append(value)
    return ids


def _units(window: Sequence[Candidate], dropped: dict[str, int]) -> list[list[Candidate]]:
    """The window's candidates (oldest first) grouped into units: a tool call with all its results, or one
    message. Incomplete calls and orphaned results are dropped (counted in ``dropped``)."""
    owner: dict[str, int] = {}
    calls: dict[int, list[str]] = {}
    for i, c in enumerate(window):
        if c.message.tool_calls:
            ids = calls[i] = _call_ids(c.message)
            for call_id in ids:
                owner[call_id] = i
    members: dict[int, list[int]] = {}
    answered: dict[int, set[str]] = {}
    skip: set[int] = set()  # results: in their call's unit, or orphaned
    orphans = 0
    for i, c in enumerate(window):
        result_of = c.message.tool_call_id
        if c.message.role == "tool" or result_of:
            skip.add(i)
            j = owner.get(result_of) if result_of is not None else None
            if result_of is not None and j is not None and j < i:
                members.setdefault(j, []).append(i)
                answered.setdefault(j, set()).add(result_of)
            else:
                orphans += 1
    units: list[list[Candidate]] = []
    for i, c in enumerate(window):
        if i in skip:
            continue
        made = calls.get(i)
        if made and set(made) - answered.get(i, set()):
            _count(dropped, "tool call without all its results", 1 + len(members.get(i, [])))
            continue
        units.append([c, *(window[j] for j in members.get(i, []))] if i in members else [c])
    if orphans:
        _count(dropped, "tool result without its call", orphans)
    return units


def _before(summaries: list[Candidate], window: list[list[Candidate]]) -> list[Candidate]:
    """The summaries that end before the window's first message (all of them without a window)."""
    start = window[0][0].seq if window else None
    return [c for c in summaries if c.covers is not None and (start is None or c.covers[1] < start)]


def _count(dropped: dict[str, int], reason: str, n: int = 1) -> None:
    dropped[reason] = dropped.get(reason, 0) + n


def choose(
    candidates: Iterable[Candidate],
    *,
    budget: int,
    reserve: int = 0,
    related_k: int = 5,
    related_share: float = 0.25,
    parts: Sequence[str] = PARTS,
    tokenizer: str = "",
) -> Context:
    """The context the parts' ``candidates`` make under ``budget - reserve`` tokens (see the module's rules).

    ``candidates``: pinned and window messages in conversation order, summaries in range order, related
    messages best first; their ``part`` says which."""
    by_part: dict[str, list[Candidate]] = {p: [] for p in PARTS}
    for c in candidates:
        by_part[c.part].append(c)
    dropped: dict[str, dict[str, int]] = {p: {} for p in PARTS}
    left = budget - reserve

    pinned: list[Candidate] = []
    pinned_ids: set[str] = set()
    for c in by_part["pinned"] if "pinned" in parts else ():
        if c.tokens <= left:
            pinned.append(c)
            left -= c.tokens
        else:
            _count(dropped["pinned"], "budget")
        pinned_ids.add(c.message.id)

    window_candidates = [c for c in by_part["window"] if c.message.id not in pinned_ids]
    if len(window_candidates) < len(by_part["window"]):
        _count(dropped["window"], "pinned", len(by_part["window"]) - len(window_candidates))
    units = _units(window_candidates, dropped["window"]) if "window" in parts else []
    window: list[list[Candidate]] = []
    if units and sum(c.tokens for c in units[-1]) <= left:
        window.append(units[-1])
        left -= sum(c.tokens for c in units[-1])
    window_ids = {c.message.id for c in window_candidates}

    related: list[Candidate] = []
    if "related" in parts:
        allowance = int(left * related_share)
        for c in by_part["related"]:
            if c.message.id in pinned_ids or c.message.id in window_ids:
                continue  # never the same message twice
            if len(related) < related_k and c.tokens <= allowance:
                related.append(c)
                allowance -= c.tokens
                left -= c.tokens
            else:
                _count(dropped["related"], "budget" if len(related) < related_k else "related_k")

    older: list[list[Candidate]] = []
    for unit in reversed(units[:-1]) if window else ():  # no window: not even the newest unit fitted
        cost = sum(c.tokens for c in unit)
        if cost > left:
            break
        older.append(unit)
        left -= cost
    window[:0] = reversed(older)

    summaries: list[Candidate] = []
    if "summary" in parts:
        usable = _before(by_part["summary"], window)
        while usable and usable[-1].tokens > left and len(window) > 1:
            # The newest summary before the window does not fit: the window's oldest unit gives way (never
            # its newest), and the window starting later, a newer summary may now end before it.
            left += sum(c.tokens for c in window.pop(0))
            usable = _before(by_part["summary"], window)
        for c in reversed(usable):
            if c.tokens > left:
                break
            summaries.insert(0, c)
            left -= c.tokens
        if len(usable) > len(summaries):
            _count(dropped["summary"], "budget", len(usable) - len(summaries))

    kept_window = [c for unit in window for c in unit]
    in_window = sum(len(u) for u in units)
    if in_window > len(kept_window):
        _count(dropped["window"], "budget", in_window - len(kept_window))
    related.sort(key=lambda c: (c.seq, c.message.id))

    chosen = {"pinned": pinned, "summary": summaries, "related": related, "window": kept_window}
    items = [ContextItem(p, c.message, c.tokens, c.seq, c.score, c.covers) for p in PARTS for c in chosen[p]]
    reports = {p: PartReport(len(chosen[p]), sum(c.tokens for c in chosen[p]), dropped[p]) for p in PARTS if p in parts}
    total = sum(item.tokens for item in items)
    assert total <= budget - reserve  # the rules above never overspend; a bug here must not reach a model
    return Context(items, budget, reserve, total, reports, tokenizer)
