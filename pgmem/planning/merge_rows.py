"""The rows of the near-duplicate merge's statements (sql/vectors.sql ``store_vectors``, sql/merging.sql),
as :mod:`pgmem.planning.rows` describes row types: a ``NamedTuple`` each, checked against the statements'
columns by ``tests/integration/test_rows.py``."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["BatchMergeRow", "PendingMergeRow", "UndecidedRow"]


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


class BatchMergeRow(NamedTuple):
    """``merge_near_batch`` (sql/merging.sql): a batch's entry waiting for its merge, its nearest decided
    neighbour within the bound (None: none), and the earlier entries of the batch within it (their
    1-based positions in the batch, and distances)."""

    id: str
    embedded: bool
    seq: int
    near_id: str | None
    near_distance: float | None
    near_seq: int | None
    earlier: list[int]
    earlier_distances: list[float]
