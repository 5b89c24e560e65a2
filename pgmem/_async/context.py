"""``client.context``: what to send the model next, under a token budget, read in one statement (the
rules: :mod:`pgmem.planning.context`; the statement: :mod:`pgmem.planning.context_sql`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection

from pgmem._async.base import AsyncRepository
from pgmem.checks import check_key, check_query_text
from pgmem.embeddings import Embedder
from pgmem.errors import InvalidInput
from pgmem.models import Message
from pgmem.planning.context import PARTS, Candidate, Context, check_context_args, choose, message_tokens
from pgmem.planning.context_sql import CONTEXT_COLUMNS, context_statement, window_margin
from pgmem.planning.forks import AsOf, check_as_of
from pgmem.planning.rows import decode
from pgmem.planning.search import MODEL_SWITCH_ATTEMPTS, EmbeddingModel, SearchFilters, still_switching
from pgmem.summarizer import get_tokenizer

if TYPE_CHECKING:
    from pgmem._async.vectors import AsyncVectorRepository

__all__ = ["AsyncContextBuilder"]

#: The most window messages one context reads, and the most pinned ones.
WINDOW_MAX = 2_000
PINNED_MAX = 200
_WIDTH = len(CONTEXT_COLUMNS)
#: Memories whose last context's window density (estimated tokens per message) a builder remembers.
_DENSITIES = 1_024
#: No query: the statement runs with a generic plan. Planning it for each call (Postgres kept choosing
#: custom plans) cost about 1 ms, as much as running it; with a query the search decides the cost, and the
#: statement is planned for its values each time.
_GENERIC = {"plan_cache_mode": "force_generic_plan"}


class AsyncContextBuilder(AsyncRepository):
    """Builds :class:`pgmem.planning.context.Context` for ``client.context``."""

    queries: dict[str, Any] = {}

    def __init__(self, client: Any, vectors: AsyncVectorRepository) -> None:
        super().__init__(client)
        self._vectors = vectors
        # (namespace, memory) -> estimated tokens per window message in the memory's last context: the
        # next window is read up to what that predicts its budget holds (plus a margin), not up to a message
        # of 4 tokens each (a 4,000-token budget read 1,001 messages to keep 279).
        self._density: OrderedDict[tuple[str, str], float] = OrderedDict()

    async def build(
        self,
        memory: str,
        *,
        budget: int,
        query: str | None = None,
        reserve: int = 0,
        parts: Sequence[str] = PARTS,
        related_k: int = 5,
        related_share: float = 0.25,
        pinned_roles: Sequence[str] = ("system",),
        embedder: Embedder | None = None,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> Context:
        """See :meth:`pgmem.AsyncClient.context`."""
        check_key(memory)
        check_as_of(as_of)
        chosen = check_context_args(budget, reserve, related_k, related_share, parts)
        if query is not None:
            check_query_text(query, "query")
            if not query.strip():
                raise InvalidInput("query must not be blank (None: no related messages)")
        elif "related" in chosen:
            chosen = tuple(p for p in chosen if p != "related")
        if related_k == 0:
            chosen = tuple(p for p in chosen if p != "related")
        if isinstance(pinned_roles, str) or not all(isinstance(r, str) and "\x00" not in r for r in pinned_roles):
            raise InvalidInput(f"pinned_roles must be a list of role names, got {pinned_roles!r}")
        available = budget - reserve
        full = min(WINDOW_MAX, available // (1 + 3) + 1)  # a message costs at least 4 tokens
        tokenizer = get_tokenizer()
        approx = tokenizer.name.startswith("approx")
        window_tokens = int(window_margin(approx) * available) + 1
        key = (self.namespace, memory)
        density = self._density.get(key)
        params: dict[str, Any] = {
            "ns": self.namespace,
            "memory": memory,
            "window_max": full if density is None else min(full, int(1.25 * window_tokens / density) + 16),
            "window_tokens": window_tokens,
            "pinned_max": PINNED_MAX,
        }
        forks = self._client.forks
        params["upto"] = await forks.upto(memory, as_of, connection)
        await self._vectors.planner.fresh_statistics(connection)  # the pinned part is planned from them
        # A fork this client knows is read through its lineage; any other memory by its own entries, and the
        # statement says when it is a fork after all (an ok column false; no row: one statement asks): then
        # once more through the lineage (context_statement).
        lineage = memory in forks.known
        attempt = 0
        while True:
            model, settings = None, None
            strategy = "exact"
            if "related" in chosen:
                model, strategy, settings = await self._related(
                    memory, query or "", related_k, embedder, params, attempt
                )
            text = context_statement(chosen, model, strategy, lineage, tuple(pinned_roles), approx)
            rows = await self._client.executor.rows(
                text,
                params,
                connection,
                # not on a caller's connection: the setting would last to the end of the caller's transaction
                settings=_GENERIC if "related" not in chosen and connection is None else settings,
                # With a search, never prepared: from its sixth run Postgres chose the prepared statement's
                # generic plan, 0.5-0.9 s against 20 ms at 20k messages (planning is 1 ms of that search).
                prepare=False if "related" in chosen else None,
                reads=True,
                vectors=model is not None,
            )
            if any(row[-1] is None for row in rows):
                self._vectors.forget_model(memory)  # the memory's model switched under the search: again
                attempt += 1
                if attempt >= MODEL_SWITCH_ATTEMPTS:
                    raise still_switching(memory)
            elif not lineage and (
                any(row[-1] is False for row in rows) or (not rows and await forks.inherits(memory, connection))
            ):
                forks._knows(memory)
                lineage = True
            elif (read := sum(1 for row in rows if row[0] == "window")) >= params["window_max"] and read < full:
                # The window may hold more than the predicted cap let it read: read it as the budget allows
                # (the result is what one read without the cap gives, so it never depends on the last call).
                params["window_max"] = full
            else:
                break
        estimates = [row[2] for row in rows if row[0] == "window"]
        if estimates:
            self._density[key] = sum(estimates) / len(estimates)
            self._density.move_to_end(key)
            if len(self._density) > _DENSITIES:
                self._density.popitem(last=False)
        candidates = [self._candidate(row, tokenizer.count) for row in rows]
        order = {p: i for i, p in enumerate(PARTS)}
        # pinned and window in conversation order, summaries in range order, related best first
        candidates.sort(
            key=lambda c: (order[c.part], -(c.score or 0.0) if c.part == "related" else 0, c.seq, c.message.id)
        )
        return choose(
            candidates,
            budget=budget,
            reserve=reserve,
            related_k=related_k,
            related_share=related_share,
            parts=chosen,
            tokenizer=tokenizer.name,
        )

    async def _related(
        self,
        memory: str,
        query: str,
        related_k: int,
        embedder: Embedder | None,
        params: dict[str, Any],
        attempt: int,
    ) -> tuple[EmbeddingModel | None, str, dict[str, str] | None]:
        """The related part's search: hybrid with the memory's model, keyword search without one. Adds its
        parameters to ``params``; returns the model, the strategy and the index scan's settings."""
        vectors = self._vectors
        filters = SearchFilters(memory)
        params["text"] = query
        params["scope_n"] = await vectors.planner.scope_size(memory, None)
        model = await vectors.active_model(memory, refresh=attempt > 0)
        if model is None:
            params["k"] = related_k
            return None, "exact", None
        depth = max(4 * related_k, 40)
        (q,) = await vectors.embed_query(model, [query], embedder)
        strategy = await vectors.planner.strategy(model, filters, "auto", None, None)
        params.update(
            q=q,
            k=depth,
            limit=related_k,
            max_distance=2.0,
            fusion="convex",
            w_vector=1.0,
            w_text=1.0,
            rrf_k=60,
            half_life=None,
        )
        return model, strategy, vectors.planner.scan_settings(strategy, model.depth(depth))

    @staticmethod
    def _candidate(row: tuple[Any, ...], count: Any) -> Candidate:
        part, seq, score, first_seq, last_seq = row[:_WIDTH]
        columns = row[_WIDTH:-1]
        if part == "summary":
            message = Message(
                id=f"summary:{columns[0]}",
                content=columns[1],
                role="system",
                metadata={"pgmem_summary": {"first_seq": first_seq, "last_seq": last_seq, "level": int(score)}},
            )
            return Candidate(part, message, int(seq), message_tokens(message, count), None, (first_seq, last_seq))
        message = decode((seq, *columns))
        # a window row's score is the server's estimate of its tokens (the cap of the next read), no score
        return Candidate(part, message, int(seq), message_tokens(message, count), None if part == "window" else score)
