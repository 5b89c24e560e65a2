"""Forks and marks of memories (migration 0020; README, "Rewind and branch"): the value types both client
twins return, and the check of an ``as_of=`` argument."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pgmem.checks import check_key, check_query_text
from pgmem.errors import InvalidInput

__all__ = ["AsOf", "Fork", "Mark", "check_as_of", "check_fork", "check_mark_name"]

#: A point of a memory: a sequence number (entries with ``seq <= as_of``), a timezone-aware time (the
#: entries up to the newest one added at or before it) or the name of a mark (:meth:`AsyncClient.mark`).
AsOf = int | datetime | str


@dataclass(frozen=True, slots=True)
class Fork:
    """A fork made by ``client.fork``: ``memory`` starts as ``parent`` up to sequence number ``upto_seq``
    (its entries with seq at most that) and holds ``size`` messages."""

    memory: str
    parent: str
    upto_seq: int
    size: int


@dataclass(frozen=True, slots=True)
class Mark:
    """A named point of a memory (``client.mark``): reads with ``as_of=name`` see the memory as of ``seq``."""

    name: str
    seq: int
    marked_at: datetime


def check_mark_name(name: str) -> str:
    if not isinstance(name, str) or not name or len(name) > 200:
        raise InvalidInput(f"a mark's name must be a non-empty string of at most 200 characters, got {name!r}")
    return check_query_text(name, "name")


def check_as_of(as_of: AsOf | None) -> tuple[Literal["none", "seq", "time", "mark"], int | datetime | str | None]:
    """Which kind of point ``as_of`` is, checked: a negative number, a naive datetime or a bad mark name is
    :class:`pgmem.InvalidInput`. A point in the future is fine (it reads what the memory holds now)."""
    if as_of is None:
        return "none", None
    if isinstance(as_of, bool):
        raise InvalidInput(f"as_of must be a sequence number, a datetime or a mark's name, got {as_of!r}")
    if isinstance(as_of, int):
        if as_of < 0:
            raise InvalidInput(f"as_of must be a sequence number >= 0, got {as_of!r}")
        return "seq", as_of
    if isinstance(as_of, datetime):
        if as_of.tzinfo is None:
            raise InvalidInput(f"as_of must be a timezone-aware datetime, got {as_of!r}")
        return "time", as_of
    if isinstance(as_of, str):
        return "mark", check_mark_name(as_of)
    raise InvalidInput(f"as_of must be a sequence number, a datetime or a mark's name, got {as_of!r}")


def check_fork(memory: str, into: str) -> None:
    check_key(memory)
    check_key(into)
    if memory == into:
        raise InvalidInput("fork needs a new memory: into is the memory itself")
