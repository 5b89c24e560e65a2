"""The rows of the near-duplicate merge's statements (sql/vectors.sql ``store_vectors``, sql/merging.sql),
as :mod:`pgmem.planning.rows` describes row types: a ``NamedTuple`` each, checked against the statements'
columns by ``tests/integration/test_rows.py``."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PendingMergeRow", "UndecidedRow"]


class PendingMergeRow(NamedTuple):
    """``store_vectors``: an entry whose near-duplicate merge waited for the vector just stored."""

    memory: str
    message_id: str
    merge_within: float


class UndecidedRow(NamedTuple):
    """``undecided_memory``, ``undecided_namespace``, ``undecided_of`` (sql/merging.sql): an entry waiting
    for a merge its vector could decide already, and the memory's active model to decide it with."""

    memory: str
    message_id: str
    merge_within: float
    id: int
    name: str
    dimension: int
    kind: str
    distance: str
