"""The item store (``client.items``): checks of what is written (paths, keys, TTLs, batches).

An item is a JSON object at ``(path, key)`` inside the client's namespace, with an optional TTL and, per
embedding model, vectors of some of its texts. Its search (filters, statements, the HNSW index of its
vectors) is :mod:`pgmem.planning.search.items`, whose names this module re-exports.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypedDict

from pgmem.checks import MAX_BATCH, check_key, check_text
from pgmem.errors import InvalidInput
from pgmem.planning.forks import Mark, check_mark_name
from pgmem.planning.search.items import (
    FILTER_OPERATORS,
    MAX_ITEM_LIMIT,
    as_of_statement,
    check_filter,
    check_page,
    count_statement,
    index_ddl,
    index_name,
    path_params,
    search_statement,
)

__all__ = [
    "FILTER_OPERATORS",
    "MAX_ITEM_LIMIT",
    "MAX_TTL_MINUTES",
    "ItemWrite",
    "ItemsAsOf",
    "ItemsForgotten",
    "as_of_statement",
    "check_batch",
    "check_items_as_of",
    "check_filter",
    "check_item_key",
    "check_page",
    "check_path",
    "check_ttl_minutes",
    "count_statement",
    "index_ddl",
    "index_name",
    "path_params",
    "paths_json",
    "search_statement",
]

#: The longest TTL, in minutes (ten years).
MAX_TTL_MINUTES = 10 * 365 * 24 * 60.0

#: A point in time of an items read (``as_of=``, migration 0022): a timezone-aware datetime, a
#: :class:`~pgmem.planning.forks.Mark` (its ``marked_at``), or ``(memory, mark name)`` (that mark's time).
#: Items belong to no memory, so a mark's name alone does not say which mark; and they have no sequence
#: numbers, so a number is refused.
ItemsAsOf = datetime | Mark | tuple[str, str]


class ItemsForgotten(NamedTuple):
    """What :meth:`AsyncItemRepository.forget` removed: items, and versions of pgmem.item_history."""

    items: int
    versions: int


class ItemWrite(TypedDict, total=False):
    """One write of :meth:`AsyncItemRepository.put_many`.

    ``path`` and ``key`` name the item; ``value`` is its JSON object (``None``: delete the item). ``ttl``:
    minutes until it expires (None: never). ``texts``: ``(field, text)`` pairs to embed, one vector each
    (None or empty: the item gets no vectors); a write replaces every vector the item had.
    """

    path: Sequence[str]
    key: str
    value: Mapping[str, Any] | None
    ttl: float | None
    texts: Sequence[tuple[str, str]] | None


def check_path(path: Any, what: str = "path", *, empty: bool = False) -> tuple[str, ...]:
    """A path as a tuple of labels: each a non-empty string without NUL bytes or lone surrogates, at most
    1,000 characters; at least one label unless ``empty``."""
    if isinstance(path, str) or not isinstance(path, Sequence):
        raise InvalidInput(f"a {what} must be a tuple of strings, got {type(path).__name__}")
    labels = tuple(path)
    if not labels and not empty:
        raise InvalidInput(f"a {what} needs at least one label")
    if len(labels) > 100:
        raise InvalidInput(f"a {what} has at most 100 labels, got {len(labels)}")
    for label in labels:
        if not isinstance(label, str) or not label:
            raise InvalidInput(f"{what} labels must be non-empty strings, got {label!r} in {labels!r}")
        check_text(label, f"{what} label", "")
    return labels


def check_item_key(key: Any) -> str:
    if not isinstance(key, str):
        raise InvalidInput(f"an item key must be a string, got {type(key).__name__}")
    check_text(key, "item key", "")
    return key


def check_ttl_minutes(ttl: Any) -> float | None:
    """A TTL in (fractional) minutes: a positive finite number up to ten years, or None."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise InvalidInput(f"a TTL must be a number of minutes, got {ttl!r}")
    if not 0 < ttl <= MAX_TTL_MINUTES:
        raise InvalidInput(f"a TTL must be in (0, {MAX_TTL_MINUTES:.0f}] minutes, got {ttl!r}")
    return float(ttl)


def check_batch(count: int) -> None:
    if count > MAX_BATCH:
        raise InvalidInput(f"a batch holds at most {MAX_BATCH} writes, got {count}")


def paths_json(paths: Sequence[tuple[str, ...]]) -> list[str]:
    """Paths as the JSON arrays the batch statements take (one ``text[]`` of them: arrays of different
    lengths cannot share one two-dimensional array)."""
    return [json.dumps(list(p), ensure_ascii=False, separators=(",", ":")) for p in paths]


def check_items_as_of(as_of: Any) -> datetime | tuple[str, str]:
    """The time of an items read's ``as_of`` (a datetime, a Mark's time), or ``(memory, name)`` of a mark to
    look up. A naive datetime, a number, a bare name or anything else: :class:`pgmem.InvalidInput`."""
    if isinstance(as_of, Mark):
        return as_of.marked_at
    if isinstance(as_of, datetime):
        if as_of.utcoffset() is None:
            raise InvalidInput(f"as_of must be a timezone-aware datetime (a naive one is ambiguous), got {as_of!r}")
        return as_of
    if isinstance(as_of, tuple) and len(as_of) == 2:
        memory, name = as_of
        return check_key(memory), check_mark_name(name)
    if isinstance(as_of, str):
        raise InvalidInput(f"items belong to no memory: a mark is as_of=(memory, {as_of!r}) or the Mark itself")
    if isinstance(as_of, int) and not isinstance(as_of, bool):
        raise InvalidInput("items have no sequence numbers: as_of is a datetime, a Mark or (memory, mark name)")
    raise InvalidInput(f"as_of must be a timezone-aware datetime, a Mark or (memory, mark name), got {as_of!r}")
