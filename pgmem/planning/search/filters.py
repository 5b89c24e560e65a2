"""What a message search is restricted to (its filters) and the checks of its arguments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pgmem.checks import check_key, check_query_text
from pgmem.errors import InvalidInput
from pgmem.planning.search.metadata import MetadataFilter

__all__ = ["MAX_K", "Mode", "SearchFilters", "check_exact_limit", "check_k", "check_mode"]

#: The largest ``k`` a search accepts.
MAX_K = 1_000

Mode = Literal["auto", "exact", "ann"]


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """What a search is restricted to, besides the client's namespace. ``None`` means no restriction."""

    memory: str | None = None
    cause_by: str | None = None
    role: str | None = None
    sender: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    #: Only the memory's entries up to this sequence number (RoleZero's long-term part); needs ``memory``.
    max_seq: int | None = None
    #: Conditions on the message's metadata (:mod:`pgmem.planning.search.metadata`): a dict as the caller
    #: passes it, compiled here (hashable: filters key the planner's remembered counts).
    metadata: MetadataFilter | Mapping[str, Any] | None = field(default=None)
    #: The memory is a fork (migration 0020): it holds its parent's entries up to the fork's point besides
    #: its own, read through ``pgmem.lineage`` (``max_seq`` then bounds every range of the lineage).
    lineage: bool = False

    def __post_init__(self) -> None:
        if self.metadata is not None and not isinstance(self.metadata, MetadataFilter):
            compiled = MetadataFilter.of(self.metadata)
            object.__setattr__(self, "metadata", compiled if compiled.conditions else None)
        if self.memory is not None:
            check_key(self.memory)
        if self.lineage and self.memory is None:
            raise InvalidInput("lineage needs a memory")
        if self.max_seq is not None:
            if self.memory is None:
                raise InvalidInput("max_seq needs a memory")
            if isinstance(self.max_seq, bool) or not isinstance(self.max_seq, int):
                raise InvalidInput(f"max_seq must be an integer, got {self.max_seq!r}")
        for name in ("cause_by", "role", "sender"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or "\x00" in value or len(value) > 1000):
                raise InvalidInput(f"{name} must be a string of at most 1,000 characters without NUL bytes")
            if value is not None:
                check_query_text(value, name)
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise InvalidInput(f"{name} must be a timezone-aware datetime, got {value!r}")
        if self.since is not None and self.until is not None and self.since > self.until:
            raise InvalidInput("since is after until")

    @property
    def on_message(self) -> bool:
        """Whether any filter needs the messages table (role, sender, time)."""
        return any(v is not None for v in (self.role, self.sender, self.since, self.until, self.metadata))

    @property
    def filtered(self) -> bool:
        return self.memory is not None or self.cause_by is not None or self.on_message

    @property
    def cacheable(self) -> bool:
        """Only the memory restricts the search: a vector cache of the memory can answer it."""
        return self.memory is not None and self.cause_by is None and self.max_seq is None and not self.on_message

    @property
    def metadata_filter(self) -> MetadataFilter | None:
        """:attr:`metadata`, compiled (it always is, once the filters are made)."""
        return self.metadata if isinstance(self.metadata, MetadataFilter) else None

    @property
    def shape(self) -> tuple[Any, ...]:
        """Which filters are in use (and the metadata conditions' operators): what a statement's text
        depends on."""
        used = tuple(
            v is not None
            for v in (self.memory, self.cause_by, self.role, self.sender, self.since, self.until, self.max_seq)
        )
        return (*used, None if self.metadata_filter is None else self.metadata_filter.shape, self.lineage)

    def params(self) -> dict[str, Any]:
        params = {
            "memory": self.memory,
            "cause_by": self.cause_by,
            "role": self.role,
            "sender": self.sender,
            "since": self.since,
            "until": self.until,
            "max_seq": self.max_seq,
        }
        if self.metadata_filter is not None:
            params.update(self.metadata_filter.params())
        return params


def check_k(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise InvalidInput(f"k must be an integer in [1, {MAX_K}], got {k!r}")
    return k


def check_exact_limit(exact_limit: int | None) -> int | None:
    if exact_limit is not None and (
        isinstance(exact_limit, bool) or not isinstance(exact_limit, int) or not 0 <= exact_limit <= 1_000_000
    ):
        raise InvalidInput(f"exact_limit must be an integer in [0, 1000000], got {exact_limit!r}")
    return exact_limit


def check_mode(mode: str) -> Mode:
    if mode not in ("auto", "exact", "ann"):
        raise InvalidInput(f"mode must be 'auto', 'exact' or 'ann', got {mode!r}")
    return mode  # type: ignore[return-value]
