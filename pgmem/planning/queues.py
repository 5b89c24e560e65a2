"""Queue value types and input checks shared by the sync and async queue repositories."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from pgmem.checks import check_key
from pgmem.errors import InvalidInput
from pgmem.models import Message
from pgmem.planning.rows import MessageRow, QueueItemRow, decode

#: Longest lease a claim may take (a worker that needs longer extends its lease).
MAX_LEASE_SECONDS = 24 * 3600.0
#: Longest delay or retry backoff.
MAX_DELAY_SECONDS = 366 * 24 * 3600.0
#: Most items one claim may take.
MAX_CLAIM = 1000
#: Priorities are 32-bit integers; lower is served first.
MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1
#: Most attempts an item may be given before it is dead-lettered.
MAX_ATTEMPTS = 1000
#: Channel every push notifies (payload: the queue's tag, pgmem.planning.notify.tag).
CHANNEL = "pgmem_queue"


@dataclass(frozen=True, slots=True)
class QueueItem:
    """A claimed (or peeked) queue item.

    ``attempts`` is the number of claims so far, including this one; with ``id`` it identifies this
    lease, so a worker whose lease expired cannot acknowledge an item another worker now holds.
    """

    id: int
    queue: str
    priority: int
    attempts: int
    max_attempts: int
    enqueued_at: datetime
    available_at: datetime
    lease_until: datetime | None
    dedup_key: str | None
    message: Message

    def __eq__(self, other: object) -> bool:
        # By value, whichever of QueueItem and its row-backed subclass each side is.
        if not isinstance(other, QueueItem):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _ALL_FIELDS)


class PushResult(NamedTuple):
    """``id`` of the new item; ``created`` is False (and ``id`` None) when a ready item of the queue
    already had the same dedup key."""

    id: int | None
    created: bool


class Delivery(NamedTuple):
    """What :meth:`publish` did: the message's position in the memory (None when the memory already
    held it, in which case nothing was delivered) and the inbox queues it was delivered to."""

    seq: int | None
    inboxes: list[str]


_MESSAGE_SLOT: Any = QueueItem.__dict__["message"]  # the slot that holds a QueueItem's message
_new_item = object.__new__
_set = object.__setattr__
_ALL_FIELDS = tuple(f.name for f in dataclasses.fields(QueueItem))
_FIELDS = _ALL_FIELDS[:-1]  # all but message: the item's columns, by name
# A queue item row is a QueueItemRow, then a MessageRow (rows.QUEUE_ITEM_ROW); read in place, by indexes
# taken from those types.
_COLUMN = {name: QueueItemRow._fields.index(name) for name in _FIELDS}
_ID, _ATTEMPTS = _COLUMN["id"], _COLUMN["attempts"]
_MESSAGE_COLUMNS = slice(len(QueueItemRow._fields), len(QueueItemRow._fields) + len(MessageRow._fields))


class _RowItem(QueueItem):
    """A QueueItem backed by its row: its fields are read from the row, its message is built when first
    read.

    Building one is two C calls, where setting ten slots cost about 1 us per item (a sixth of the
    consumer's CPU per job at batch 50), and a consumer that only acknowledges, or reads a few items of a
    batch, skips the JSON parsing and the Message too. Everything else behaves as a QueueItem (frozen,
    compared by value, pickled and copied as the public type).
    """

    __slots__ = ("_row",)
    __qualname__ = "QueueItem"  # reprs read as the public type
    _row: Any  # the row; a list of the fields when built by the dataclass __init__ (dataclasses.replace)

    @property
    def message(self) -> Message:
        try:
            message: Message = _MESSAGE_SLOT.__get__(self)
        except AttributeError:
            message = decode(self._row[_MESSAGE_COLUMNS])  # parses the message's JSON text now
            _MESSAGE_SLOT.__set__(self, message)
        return message

    @message.setter
    def message(self, value: Message) -> None:  # the dataclass __init__ (dataclasses.replace) sets it
        _MESSAGE_SLOT.__set__(self, value)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled and copied as the public type
        return (QueueItem, tuple(getattr(self, name) for name in _ALL_FIELDS))


def _column(index: int, name: str) -> property:
    def get(self: _RowItem) -> Any:
        return self._row[index]

    def put(self: _RowItem, value: Any) -> None:
        # Only the dataclass __init__ gets here (QueueItem is frozen), on a new item: its own list.
        try:
            row = self._row
        except AttributeError:
            row = [None] * len(QueueItemRow._fields)
            _set(self, "_row", row)
        row[index] = value

    return property(get, put, doc=f"the item's {name}")


for _name, _index in _COLUMN.items():
    setattr(_RowItem, _name, _column(_index, _name))


def decode_item(row: tuple[Any, ...]) -> QueueItem:
    """The item of a queue item row of sql/queues.sql (``rows.QUEUE_ITEM_ROW``)."""
    item = _new_item(_RowItem)
    _set(item, "_row", row)
    return item


def fences(items: Iterable[QueueItem]) -> dict[int, int]:
    """``{id: attempts}`` of the items to acknowledge (an item listed twice is acknowledged once)."""
    held: dict[int, int] = {}
    for item in items:
        if type(item) is _RowItem and type(row := item._row) is tuple:  # as read from the database
            held[row[_ID]] = row[_ATTEMPTS]
            continue
        if not isinstance(item, QueueItem):
            raise InvalidInput(f"ack takes QueueItem objects, got {type(item).__name__}")
        if type(item.id) is not int or type(item.attempts) is not int:
            raise InvalidInput(f"not a claimed item (id and attempts must be integers): {item.id!r}, {item.attempts!r}")
        held[item.id] = item.attempts
    return held


def check_queue(name: str) -> str:
    """Queue names follow the memory-key rule; a queue exists as soon as something is pushed to it."""
    return check_key(name, "queue name")


def seconds(value: float | int | timedelta | None, what: str, *, maximum: float, allow_zero: bool = True) -> float:
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{what} must be a number of seconds or a timedelta, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or value > maximum:
        low = "0 <=" if allow_zero else "0 <"
        raise InvalidInput(f"{what} must be {low} seconds <= {maximum:g}, got {value!r}")
    return float(value)


def integer(value: int, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{what} must be an integer in [{low}, {high}], got {value!r}")
    return value


def backoff(attempts: int, base: float = 1.0, cap: float = 300.0) -> float:
    """Seconds before retry number ``attempts`` (exponential: 1 s, 2 s, 4 s … capped at 5 min)."""
    return float(min(cap, base * (2 ** max(0, attempts - 1))))
