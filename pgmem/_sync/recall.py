# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""Search recall you can watch: sampled searches (``pgmem.recall_samples``) and the checker that runs
their exact top-k (``client.vectors.recall``; the view ``pgmem.search_recall``, docs/analytics.md).

A client samples a share of its vector, batch and hybrid searches (``recall_sample=``,
``PGMEM_RECALL_SAMPLE``; default 0, off): an unsampled search pays one ``random()``, a sampled one one
insert after its answer, whose failure is logged and never reaches the caller. The checker takes the
namespace's unchecked samples, runs each one's search again with the exact strategy over the messages
created by the time of the sample (:func:`pgmem.planning.recall.as_of`) and stores recall@k; the client's
background worker runs it after a sampled search, at most every ``PGMEM_RECALL_CHECK_INTERVAL`` seconds,
and drops samples older than ``PGMEM_RECALL_RETENTION``. Row-level security keeps each namespace's samples
its own: a client's checker sees and checks its namespace's only.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from psycopg import Connection

from pgmem._sync.background import Background
from pgmem._sync.base import Repository
from pgmem._sync.executor import Block
from pgmem._sync.search_planner import SearchPlanner
from pgmem.errors import InvalidInput, PgmemError, redact
from pgmem.planning import statements
from pgmem.planning.recall import as_of, filters_doc, filters_from, options_of, recall_at, served_ids
from pgmem.planning.retention import cutoff_params
from pgmem.planning.search import EmbeddingModel, SearchFilters, hybrid_legs, statement
from pgmem.settings import get_settings

if TYPE_CHECKING:
    from pgmem._sync.client import Client

__all__ = ["SearchRecall", "RecallFigure"]

Q = statements.load("recall")
log = logging.getLogger("pgmem.recall")

#: Samples checked per transaction (each an exact search: ~0.2 s at 35k candidates).
CHECK_BATCH = 20


class _Sample(NamedTuple):
    """``claim_unchecked``: a sample and its model."""

    id: int
    sampled_at: datetime
    kind: str
    k: int
    query: Any
    filters: dict[str, Any]
    options: dict[str, Any]
    served_ids: list[str]
    model_id: int
    name: str
    dimension: int
    model_kind: str
    distance: str


class RecallFigure(NamedTuple):
    """:meth:`AsyncSearchRecall.summary`: recall of the namespace's samples per model, kind and strategy."""

    model: str | None
    kind: str
    strategy: str
    #: Checked samples (those with a recall).
    samples: int
    mean_recall: float | None
    min_recall: float | None
    last_checked: datetime | None
    unchecked: int


class SearchRecall(Repository):
    """Samples searches and checks them (see the module's docstring).

    Example:
        >>> client.recall_sample = 0.05  # or PGMEM_RECALL_SAMPLE=0.05
        >>> await client.vectors.search("a snake game", memory="role:Alice")
        >>> await client.vectors.recall.check()  # the background worker does it too
        1
        >>> (await client.vectors.recall.summary())[0].mean_recall
        0.97
    """

    queries = Q

    def __init__(self, client: Client, planner: SearchPlanner) -> None:
        super().__init__(client)
        self._planner = planner
        self._background = Background(self._run_due, name="pgmem-recall")
        # Guards the checker's schedule; never held across an await (both flavours).
        self._schedule = threading.Lock()
        # time.monotonic() from which the background check is due: one interval after the client's start,
        # then one after each run (a short-lived process leaves its samples to a longer-lived one).
        self._next_check = time.monotonic() + get_settings().recall_check_interval

    # -- sampling -------------------------------------------------------------------------------------

    def sampled(self) -> bool:
        """Whether to sample the search under way: ``random() < client.recall_sample``."""
        rate = self._client.recall_sample
        return rate > 0 and random.random() < rate

    def record(
        self,
        kind: str,
        k: int,
        model: EmbeddingModel,
        filters: SearchFilters,
        strategy: str,
        params: Mapping[str, Any],
        settings: Mapping[str, str] | None,
        rows: Sequence[tuple[Any, ...]],
        connection: Connection[Any] | None,
    ) -> None:
        """Store a search that was sampled: ``params`` its statement's (the query vector ``q``, or ``qs``
        for a batch), ``settings`` the index scan's, ``rows`` what it returned. One statement after the
        answer (a savepoint in the caller's transaction); a failure is logged, not raised."""
        vectors = list(params["qs"]) if kind == "batch" else [params["q"]]
        values = {
            "ns": self.namespace,
            "kind": kind,
            "memory": filters.memory,
            "model": model.id,
            "strategy": strategy,
            "ef_search": None if not settings else int(settings["hnsw.ef_search"]),
            "k": k,
            "qs": vectors,
            "filters": filters_doc(filters),
            "options": options_of(params, filters),
            "served": json.dumps(served_ids(kind, rows, len(vectors))),
        }
        try:
            with self._client.executor.transaction(connection, vectors=True) as block:
                block.command(Q["record_samples"], values)
        except PgmemError as exc:  # a sample is not worth the caller's search
            log.warning("recall sample not recorded: %s: %s", type(exc).__name__, redact(str(exc)))
            return
        if connection is None and time.monotonic() >= self._next_check:
            self.kick()

    # -- checking -------------------------------------------------------------------------------------

    def check(self, *, limit: int | None = None) -> int:
        """Check the namespace's unchecked samples (at most ``limit``; None: all there are now, oldest
        first): run each one's search exactly over the messages created by the time of the sample, and
        store the exact ids and recall@k. Returns how many were checked. Samples another process is
        checking are skipped.

        Example:
            >>> await client.vectors.recall.check()
            12
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidInput(f"limit must be a non-negative integer or None, got {limit!r}")
        checked = 0
        while limit is None or checked < limit:
            n = CHECK_BATCH if limit is None else min(CHECK_BATCH, limit - checked)
            with self._client.executor.transaction(vectors=True) as block:
                claimed = [_Sample._make(row) for row in block.rows(Q["claim_unchecked"], self._with(limit=n))]
                for sample in claimed:
                    exact = self._exact(block, sample)
                    recall = recall_at(sample.served_ids, exact)
                    block.command(Q["store_check"], self._with(id=sample.id, exact=exact, recall=recall))
            checked += len(claimed)
            if len(claimed) < n:
                break
        return checked

    def _exact(self, block: Block, sample: _Sample) -> list[str]:
        """The ids of the exact answer to ``sample``'s search, best first."""
        model = EmbeddingModel(sample.model_id, sample.name, sample.dimension, sample.model_kind, sample.distance)
        filters = as_of(filters_from(sample.filters), sample.sampled_at)
        params: dict[str, Any] = {"ns": self.namespace, **sample.options, **filters.params(), "q": sample.query}
        if sample.kind == "hybrid":
            params["scope_n"] = self._planner.scope_size(filters.memory, block.connection)
            # the legs the served search ran (a leg weighted 0 runs not at all)
            legs = hybrid_legs(sample.options.get("w_vector", 1.0), sample.options.get("w_text", 1.0))
            text = statement("hybrid", model, filters, "exact", legs=legs)
        else:  # a batch's query is a vector search of its own
            text = statement("vector", model, filters, "exact", sample.k, "max_distance" in sample.options)
        rows = block.rows(text, params)
        return served_ids(sample.kind if sample.kind == "hybrid" else "vector", rows, 1)[0]

    def purge(self, older_than: Any, *, connection: Connection[Any] | None = None) -> int:
        """Delete the namespace's samples taken before ``older_than`` (an age in seconds, a timedelta, or
        a timezone-aware datetime). Returns how many."""
        return int(self._scalar("purge_recall_samples", cutoff_params(older_than), connection) or 0)

    def summary(
        self, *, since: datetime | None = None, connection: Connection[Any] | None = None
    ) -> list[RecallFigure]:
        """Recall of the namespace's samples taken since ``since`` (None: all kept), per model, kind and
        strategy (``pgmem.search_recall`` has it per five minutes)."""
        if since is not None and (not isinstance(since, datetime) or since.utcoffset() is None):
            raise InvalidInput(f"since must be a timezone-aware datetime, got {since!r}")
        rows = self._rows("recall_summary", {"since": since}, connection)
        return [RecallFigure(r[0], r[1], r[2], int(r[3]), _float(r[4]), _float(r[5]), r[6], int(r[7])) for r in rows]

    def _with(self, **params: Any) -> dict[str, Any]:
        return {"ns": self.namespace, **params}

    # -- the background checker -----------------------------------------------------------------------

    def kick(self) -> None:
        """Have the background checker run soon (it checks only when due); returns at once. Only on a
        client with its own pool, as the background embedder."""
        if self._client.closed or not self._client.owns_transactions:
            return
        self._background.kick()

    def check_if_due(self) -> int | None:
        """Check the unchecked samples and drop those past ``PGMEM_RECALL_RETENTION``, when
        ``PGMEM_RECALL_CHECK_INTERVAL`` seconds have passed since this client last did (None: not due)."""
        settings = get_settings()
        now = time.monotonic()
        with self._schedule:
            if now < self._next_check:
                return None
            self._next_check = now + settings.recall_check_interval
        checked = self.check()
        self.purge(settings.recall_retention)
        return checked

    def _run_due(self) -> None:
        if self._client.closed:
            return
        try:
            self.check_if_due()
        except Exception as exc:  # noqa: BLE001 - a background job logs; the samples wait for the next run
            log.warning("recall check failed: %s: %s", type(exc).__name__, redact(str(exc)))

    def wait(self) -> None:
        """Wait for the background checker's run under way (no round trip when idle)."""
        self._background.wait()

    def close(self) -> None:
        self._background.close()


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
