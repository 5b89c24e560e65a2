"""Near-duplicate merge (``messages.add(..., merge="near", threshold=...)``, ``messages.remember``): the
rules of its arguments and what a merge add returns. README, "Near-duplicates".

A message whose vector is within ``threshold`` of one the memory holds is not stored again: that entry's
``seen_count`` grows by one and its ``last_seen_at`` becomes now. ``threshold`` is a minimum score, as a
search's (:mod:`pgmem.planning.distances`): a cosine similarity in [-1, 1], a negated Euclidean distance
(<= 0) for ``l2``, an inner product for ``inner_product``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pgmem.errors import InvalidInput
from pgmem.planning.distances import check_threshold

__all__ = ["MERGES", "Remembered", "RememberedBatch", "check_merge"]

#: What ``merge=`` takes: None or ``"exact"`` (the default: a message stored once, by id, or by content
#: for MetaGPT's ignored id) and ``"near"``.
MERGES: Final[tuple[str | None, ...]] = (None, "exact", "near")


def check_merge(merge: Any, threshold: Any) -> bool:
    """Whether ``merge`` asks for a near-duplicate merge (``"near"``), its ``threshold`` checked as far as
    it can be before the memory's distance is known (a finite number). Raises :class:`InvalidInput` for
    another ``merge``, for ``"near"`` without a threshold and for a threshold without ``"near"``."""
    if merge not in MERGES or isinstance(merge, bool):
        raise InvalidInput(f"merge must be None, 'exact' or 'near', got {merge!r}")
    if merge != "near":
        if threshold is not None:
            raise InvalidInput("threshold is the near-duplicate distance of merge='near'; pass merge='near' too")
        return False
    if threshold is None:
        raise InvalidInput("merge='near' needs threshold= (a minimum score, e.g. a cosine similarity of 0.95)")
    check_threshold(threshold, None)
    return True


@dataclass(frozen=True, slots=True)
class Remembered:
    """What :meth:`pgmem.MessageRepository.remember` did with a message.

    Attributes:
        id: the id of the message the memory holds for this fact: the message's own when it was stored
            (or held already), the near-duplicate's it was merged into otherwise.
        added: whether the memory got a new entry (what ``add`` returns).
        merged: whether it was merged into ``id``'s entry (whose ``seen_count`` grew by one).
        pending: the message had no vector yet (no ``embedding=``, no embedder of the memory's model in
            this client, or the embedder failed): it is stored, and the background embedder merges it, in
            the transaction that stores its vector, if a near-duplicate is in the memory by then.
    """

    id: str
    added: bool
    merged: bool = False
    pending: bool = False


class RememberedBatch(int):
    """What :meth:`pgmem.MessageRepository.add_many` with ``merge="near"`` did: the number of new entries
    (this ``int``, as ``add_many`` returns without a merge) and what became of each message.

    Attributes:
        remembered: one :class:`Remembered` per message of the batch, in batch order (a message the batch
            repeats: ``added`` False, the first occurrence's ``id``).
    """

    remembered: tuple[Remembered, ...]

    def __new__(cls, added: int, remembered: tuple[Remembered, ...]) -> RememberedBatch:
        self = super().__new__(cls, added)
        self.remembered = remembered
        return self

    def __repr__(self) -> str:
        return f"RememberedBatch({int(self)}, remembered={self.remembered!r})"

    def __str__(self) -> str:
        return str(int(self))
