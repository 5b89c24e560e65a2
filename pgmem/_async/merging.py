"""Near-duplicate merge in a transaction block: the memory's merge lock and the decision for one entry
(``sql/merging.sql``). The message repository's merge adds and the embedder's merges at embed time both
run these, so one rule decides either way (README, "Near-duplicates")."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from pgmem._async.executor import AsyncBlock, AsyncExecutor
from pgmem.errors import InvalidInput
from pgmem.planning import statements
from pgmem.planning.merge_rows import BatchMergeRow, PendingMergeRow, UndecidedRow
from pgmem.planning.search import MAX_K, EmbeddingModel, SearchHit, model_of
from pgmem.planning.search.filters import check_k

__all__ = [
    "MergeBusy",
    "boost",
    "check_boost",
    "decide",
    "decide_batch",
    "lock",
    "merge_waiting",
    "settle",
    "settle_memory",
]

M = statements.load("merging")
#: At most this many undecided entries are decided by one look-up (the rest by the next one).
SETTLE_BATCH = 1000


async def lock(block: AsyncBlock, memory: str) -> bool:
    """Take ``memory``'s merge lock (held to commit) in a statement of its own: the statements after it see
    every merge committed before it, and a fork of the memory committed before it (its settle lock, shared,
    taken after the merge lock: a merge then keeps what the fork inherits; sql/merging.sql merge_lock).
    Raises :class:`InvalidInput` (before anything is written) in a transaction whose snapshot may predate
    the lock (REPEATABLE READ or SERIALIZABLE: the caller's).
    Returns whether an entry of the memory waits for a merge its vector could decide already (a leftover:
    :func:`settle_memory` decides them)."""
    row = await block.one(M["merge_lock"], {"ns": block.namespace, "memory": memory})
    isolation = row[1] if row is not None else None
    if isolation != "read committed":
        raise InvalidInput(
            f"merge='near' needs a READ COMMITTED transaction (its look-up must see merges committed while it "
            f"waited for the memory's merge lock); this one is {isolation}; nothing was written"
        )
    return bool(row is not None and row[2])


async def decide(
    block: AsyncBlock, memory: str, message_id: str, model: EmbeddingModel, within: float, *, pending: bool
) -> tuple[str | None, bool]:
    """Merge the entry of ``message_id`` in ``memory`` into its nearest neighbour within ``within`` (the
    operator's value of ``model``'s distance), under the merge lock. Returns (the survivor's id when it was
    merged, whether the message has a vector of ``model``: without one the entry waits for the embedder).
    ``pending``: only an entry still waiting for its merge."""
    params = {
        "ns": block.namespace,
        "memory": memory,
        "id": message_id,
        "model": model.id,
        "distance": model.distance,
        "within": within,
        "pending": pending,
    }
    row = await block.one(M["merge_near"], params)
    assert row is not None  # the statement always returns one row
    return (None if row[0] is None else str(row[0])), bool(row[1])


async def decide_batch(
    block: AsyncBlock, memory: str, message_ids: Sequence[str], model: EmbeddingModel, within: float | Sequence[float]
) -> dict[str, tuple[str | None, bool]]:
    """:func:`decide` (``pending=True``) for each of ``message_ids`` in order, each with its bound
    (``within``: one for all, or one each), in two statements: one look-up for the batch
    (``merge_near_batch``), the decisions made here as one by one each would see the ones before it (an
    entry merges into the nearest of its decided neighbour and the earlier entries that stayed; the oldest
    among equals), and one write (``merge_near_apply``). Under the merge lock. Returns ``{message id:
    (survivor, embedded)}`` for each id, as :func:`decide` returns them (an id whose entry is not waiting,
    or has no vector yet: ``(None, False)``)."""
    ids = list(message_ids)
    params: dict[str, Any] = {
        "ns": block.namespace,
        "memory": memory,
        "ids": ids,
        "withins": [within] * len(ids) if isinstance(within, int | float) else list(within),
        "model": model.id,
        "distance": model.distance,
    }
    rows = [BatchMergeRow._make(r) for r in await block.rows(M["merge_near_batch"], params)]
    position = {i: n for n, i in enumerate(ids, start=1)}
    staying: dict[int, tuple[int, str]] = {}  # batch position: (seq, id) of the entries decided to stay
    decided: dict[str, tuple[str | None, bool]] = dict.fromkeys(ids, (None, False))
    merged: list[str] = []
    survivors: list[str] = []
    for row in rows:
        if not row.embedded:  # it waits for the embedder
            continue
        # (distance, seq, id): merge_near's ORDER BY d, seq
        found: list[tuple[float, int, str]] = []
        if row.near_id is not None:
            found.append((float(row.near_distance or 0.0), int(row.near_seq or 0), row.near_id))
        earlier = zip(row.earlier, row.earlier_distances, strict=True)
        found += [(float(d), *staying[o]) for o, d in earlier if o in staying]
        if found:
            survivor = min(found)[2]
            merged.append(row.id)
            survivors.append(survivor)
            decided[row.id] = (survivor, True)
        else:
            staying[position[row.id]] = (row.seq, row.id)
            decided[row.id] = (None, True)
    if merged or staying:
        kept = [i for _, i in staying.values()]
        apply = {"ns": block.namespace, "memory": memory, "merged": merged, "survivors": survivors, "kept": kept}
        await block.one(M["merge_near_apply"], apply)
    return decided


class MergeBusy(Exception):  # noqa: N818 - a signal to the embedder, never raised to a caller
    """The embedder could not take these memories' merge locks without waiting: roll back and run the batch
    again with them taken first (:func:`merge_waiting`)."""

    def __init__(self, memories: Sequence[str]) -> None:
        super().__init__(f"merge locks held elsewhere: {len(memories)} memories")
        self.memories = tuple(memories)


async def merge_waiting(
    block: AsyncBlock, model: EmbeddingModel, waiting: Sequence[PendingMergeRow], *, wait: bool = True
) -> list[str]:
    """The embedder's merges: decide the entries whose merge waited for the vectors of ``model`` the block
    just stored (``waiting``: by memory, in memory order), each memory's under its merge lock, memories in
    key order (two embedders lock them in the same order). Returns the memories an entry left.

    ``wait=False``: the block holds rows a merging adder may wait for while it holds a merge lock (the
    memory's row its vector store took, the outbox rows it claimed), so a lock held elsewhere is not waited
    for (that would deadlock): :class:`MergeBusy` instead, before anything is decided. A lock the block
    took already (the batch's second run takes them first) is taken again at once."""
    waiting = sorted(waiting, key=lambda row: row.memory)  # one lock order for every process (settle's too)
    memories = list(dict.fromkeys(row.memory for row in waiting))
    if not wait:
        for memory in memories:
            if not await block.scalar(M["merge_try_lock"], {"ns": block.namespace, "memory": memory}):
                raise MergeBusy(memories)
    left: list[str] = []
    for memory, rows in itertools.groupby(waiting, key=lambda row: row.memory):
        entries = list(rows)
        await lock(block, memory)  # held already when not waiting: re-entrant, and checks isolation
        ids, withins = [r.message_id for r in entries], [r.merge_within for r in entries]
        decided = await decide_batch(block, memory, ids, model, withins)
        if any(survivor is not None for survivor, _ in decided.values()):
            left.append(memory)
    return left


async def settle(
    block: AsyncBlock, undecided: Sequence[UndecidedRow], *, wait: bool, held: str | None = None
) -> tuple[list[str], list[str]]:
    """Decide ``undecided`` entries (waiting for a merge although their vector is stored: rows of
    ``sql/merging.sql`` undecided_*) as the embedder decides them when it stores the vector, each memory's
    under its merge lock, memories in one key order (as :func:`merge_waiting` takes them). Idempotent: an
    entry decided meanwhile (by another process's recovery, or by the writer of its vector) is left as it
    is. ``held``: the memory whose lock the block holds already (a merging add's).

    ``wait=False`` (a caller's transaction, which may hold rows a merging adder waits for): a lock held
    elsewhere is not waited for; that memory's entries are left for a later recovery. Returns (the
    memories an entry left, the memories left busy)."""
    left: list[str] = []
    busy: list[str] = []
    for memory, rows in itertools.groupby(sorted(undecided, key=lambda r: r.memory), key=lambda r: r.memory):
        entries = list(rows)  # stable: memory order
        if memory != held:
            if wait:
                await lock(block, memory)
            elif not await _try_lock(block, memory):
                busy.append(memory)
                continue
        ids, withins = [r.message_id for r in entries], [r.merge_within for r in entries]
        decided = await decide_batch(block, memory, ids, model_of(entries[0]), withins)
        if any(survivor is not None for survivor, _ in decided.values()):
            left.append(memory)
    return left, busy


class _NotBoth(Exception):  # noqa: N818 - rolls _try_lock's savepoint back, never leaves it
    pass


async def _try_lock(block: AsyncBlock, memory: str) -> bool:
    """``merge_try_lock`` in a savepoint, rolled back unless it took both locks: a merge lock taken while
    the settle lock was busy is released at once (locks taken after a savepoint go with its rollback), not
    held by the caller's transaction until it ends, where it would stop every merging add of the memory."""
    try:
        async with block.transaction():
            if await block.scalar(M["merge_try_lock"], {"ns": block.namespace, "memory": memory}):
                return True
            raise _NotBoth
    except _NotBoth:
        return False


async def settle_memory(block: AsyncBlock, memory: str) -> list[str]:
    """Under ``memory``'s merge lock (a merging add's, before its look-up): decide the memory's entries
    that wait for a merge although their vector is stored (:func:`lock` said there are). Returns
    ``[memory]`` when an entry left it, else ``[]``."""
    params = {"ns": block.namespace, "memory": memory, "n": SETTLE_BATCH}
    rows = [UndecidedRow._make(r) for r in await block.rows(M["undecided_memory"], params)]
    left, _ = await settle(block, rows, wait=True, held=memory)
    return left


#: A search with ``boost_seen`` re-ranks this many times ``k`` nearest hits (at most MAX_K).
BOOST_CANDIDATES = 4


def check_boost(boost_seen: Any, memory: str | None, k: Any) -> int:
    """How many hits a search boosted by ``boost_seen`` asks for (``k`` itself without a boost)."""
    if boost_seen is None:
        return k  # type: ignore[no-any-return]  # checked by the search, as always
    if isinstance(boost_seen, bool) or not isinstance(boost_seen, int | float) or not math.isfinite(boost_seen):
        raise InvalidInput(f"boost_seen must be a finite number, got {boost_seen!r}")
    if memory is None:
        raise InvalidInput("boost_seen ranks by how often a memory saw each fact: pass memory=")
    check_k(k)
    return min(int(k) * BOOST_CANDIDATES, MAX_K)


async def boost(
    executor: AsyncExecutor,
    namespace: str,
    memory: str,
    hits: list[SearchHit],
    weight: float,
    k: int,
    connection: AsyncConnection[Any] | None,
) -> list[SearchHit]:
    """``hits`` with their ``seen_count`` and ``last_seen_at`` (one statement), ranked by ``score + weight *
    ln(seen_count)``, the best ``k`` (ties in their search order)."""
    if not hits:
        return hits
    params = {"ns": namespace, "memory": memory, "ids": [h.message.id for h in hits]}
    seen = {str(r[0]): (int(r[1]), r[2]) for r in await executor.rows(M["seen"], params, connection)}
    counted = []
    for hit in hits:
        count, last = seen.get(hit.message.id, (1, None))
        counted.append(hit._replace(seen_count=count, last_seen_at=last))
    ranked = sorted(enumerate(counted), key=lambda p: (-(p[1].score + weight * math.log(p[1].seen_count or 1)), p[0]))
    return [h for _, h in ranked[:k]]
