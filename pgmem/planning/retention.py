"""Retention's value types and input checks, shared by the sync and async retention repositories: the
policy, forget and sweep results, the policy targets and scopes, and the checked form of a cutoff."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from pgmem.checks import check_key, check_text
from pgmem.errors import InvalidInput
from pgmem.planning.queues import check_queue

__all__ = [
    "ALL",
    "COUNTED",
    "MAX_AGE",
    "MAX_COUNT",
    "TARGETS",
    "Cutoff",
    "Forgotten",
    "RetentionPolicy",
    "Swept",
    "age_seconds",
    "check_label",
    "check_name",
    "check_scope",
    "check_target",
    "cutoff_params",
]

#: Oldest cutoff accepted as an age (100 years, in seconds).
MAX_AGE = 100 * 366 * 24 * 3600.0
#: A purge's cutoff: an age (seconds, or a timedelta) or a timezone-aware moment.
Cutoff: TypeAlias = float | int | timedelta | datetime

#: What a retention policy bounds (``pgmem.retention_policies.target``).
TARGETS = ("messages", "queue_history", "summaries", "retrieval_log", "vector_log", "item_history")
#: Largest max_count of a policy.
MAX_COUNT = 2**62
#: The scope of a policy over the whole namespace.
ALL = "*"


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """A row of ``pgmem.retention_policies``: ``target`` rows of ``scope`` (``"*"``: the namespace; else a
    memory key, or a queue name for ``queue_history``) older than ``max_age`` go, and beyond the newest
    ``max_count``."""

    target: str
    scope: str
    max_age: timedelta | None
    max_count: int | None
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What ``client.retention.forget`` removed: rows per table (``summaries_stale``: summaries marked
    stale and emptied; ``brain_summaries``: BrainMemory summaries cleared; ``store_files``: files of a file
    store that had a forgotten chunk, re-indexed by the store's next refresh), the memories that lost
    entries, and the id of its audit row (``pgmem.forget_audit``)."""

    audit_id: int
    messages: int = 0
    memory_entries: int = 0
    embeddings: int = 0
    embedding_outbox: int = 0
    queue_items: int = 0
    queue_archive: int = 0
    retrieval_log: int = 0
    recall_samples: int = 0
    summaries_stale: int = 0
    brain_summaries: int = 0
    store_files: int = 0
    memories: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        """The per-table counts, as the audit row stores them."""
        return {name: getattr(self, name) for name in COUNTED}


COUNTED = (
    "messages",
    "memory_entries",
    "embeddings",
    "embedding_outbox",
    "queue_items",
    "queue_archive",
    "retrieval_log",
    "recall_samples",
    "summaries_stale",
    "brain_summaries",
    "store_files",
)


def check_target(target: Any) -> str:
    if target not in TARGETS:
        raise InvalidInput(f"target must be one of {', '.join(TARGETS)}; got {target!r}")
    return str(target)


def check_scope(scope: Any, target: str) -> str:
    if scope == ALL:
        return ALL
    if target == "item_history":
        raise InvalidInput("items belong to no memory: an item_history policy's scope is '*' (the namespace)")
    if target == "queue_history":
        return check_queue(scope)
    return check_key(scope, "memory key (or '*' for the whole namespace)")


def check_label(actor: Any) -> str | None:
    if actor is None:
        return None
    if not isinstance(actor, str) or not actor:
        raise InvalidInput(f"actor must be a non-empty string or None, got {actor!r}")
    check_text(actor, "actor", "forget ")
    return actor


def check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, got {value!r}")
    check_text(value, what, "forget ")
    return value


def age_seconds(max_age: Any) -> float | None:
    if max_age is None:
        return None
    params = cutoff_params(max_age, "max_age")
    if params["age"] is None:
        raise InvalidInput("max_age must be an age (seconds or a timedelta), not a moment")
    return float(params["age"])


def cutoff_params(older_than: Any, what: str = "older_than") -> dict[str, Any]:
    """The parameters of ``sql/retention.sql``'s ``cutoff`` fragment for ``older_than``, checked.

    Raises:
        InvalidInput: a negative, infinite or non-numeric age, or a naive datetime.
    """
    if isinstance(older_than, datetime):
        if older_than.utcoffset() is None:
            raise InvalidInput(f"{what} must be a timezone-aware datetime (a naive one is ambiguous): {older_than!r}")
        return {"before": older_than, "age": None}
    age = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
    if isinstance(age, bool) or not isinstance(age, int | float) or not math.isfinite(age):
        raise InvalidInput(
            f"{what} must be an age in seconds, a timedelta or a timezone-aware datetime, got {older_than!r}"
        )
    if not 0 <= age <= MAX_AGE:
        raise InvalidInput(f"{what} must be an age of 0 to {MAX_AGE:g} seconds, got {older_than!r}")
    return {"before": None, "age": float(age)}


@dataclass(frozen=True, slots=True)
class Swept:
    """What a sweep removed: rows of ``pgmem.vector_log``, and of ``pgmem.retrieval_log`` (None: not purged,
    ``PGMEM_RETRIEVAL_LOG_RETENTION`` is unset)."""

    vector_log: int
    retrieval_log: int | None
