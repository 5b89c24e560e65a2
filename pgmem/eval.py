"""Judge-free retrieval evaluation: how well each of pgmem's searches finds the messages a query needs.

An evaluation set is a list of cases, each a memory, a query (as an agent would ask it) and the ids of
the messages that answer it. :func:`evaluate` runs every case through each retriever and reports, per
retriever, the mean recall@k (the share of a case's relevant messages among the first ``k``), NDCG@k
(binary relevance), hit@k (whether any relevant message is among them), MRR, and the p50/p99 latency of
the searches (queries are embedded once beforehand, so the provider's time is not in it). No model judges
anything: the relevant ids are the ground truth.

Retrievers: ``vector`` (:meth:`Client.search` in the memory), ``keyword``
(:meth:`MessageRepository.search_text`), ``hybrid`` (:meth:`VectorRepository.hybrid_search` with its
defaults) and ``cache`` (:class:`pgmem.cache.VectorCache`, the in-process copy). The vector retrievers
embed the query with the memory's model through the client's embedder.

A set is read from JSON lines (:func:`read_cases`), one case per line::

    {"memory": "conv-3", "query": "Where did Tom move?", "relevant": ["m-217"], "role": "user"}

``cause_by``, ``role``, ``sender``, ``since`` and ``until`` (ISO times) restrict a case's search like the
same arguments of :meth:`Client.search`; the ``keyword`` retriever then runs as hybrid search's text leg
alone (``w_vector=0``), and ``cache``, which has no filters, skips the case (counted as skipped).

``pgmem eval FILE.jsonl`` prints the same report as a table, and as JSON with ``--json``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgmem.checks import check_key, check_query_text
from pgmem.errors import InvalidInput

if TYPE_CHECKING:
    from pgmem import Client
    from pgmem.embeddings import Embedder, Vectors

__all__ = ["RETRIEVERS", "EvalCase", "EvalReport", "RetrieverScore", "evaluate", "read_cases"]

#: The retrievers :func:`evaluate` knows, in the order it reports them.
RETRIEVERS = ("vector", "keyword", "hybrid", "cache")

#: The search filters a case may carry.
FILTERS = ("cause_by", "role", "sender", "since", "until")

#: The most cases one evaluation takes (each is a search per retriever; a bigger set is a mistake or a job).
MAX_CASES = 1_000_000


@dataclass(frozen=True)
class EvalCase:
    """One query of an evaluation set and the ids of the messages that answer it."""

    memory: str
    query: str
    relevant: tuple[str, ...]
    filters: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_key(self.memory)
        if not isinstance(self.query, str) or not self.query.strip() or "\x00" in self.query:
            raise InvalidInput("query must be a non-empty string without NUL bytes")
        check_query_text(self.query, "query")
        if isinstance(self.relevant, str) or not all(isinstance(r, str) and r for r in self.relevant):
            raise InvalidInput("relevant must be a list of message ids (non-empty strings)")
        if not self.relevant:
            raise InvalidInput("relevant must name at least one message id (a case without one scores nothing)")
        unknown = set(self.filters) - set(FILTERS)
        if unknown:
            raise InvalidInput(f"unknown filter {sorted(unknown)[0]!r}; filters are {', '.join(FILTERS)}")


@dataclass(frozen=True)
class RetrieverScore:
    """The means of one retriever over the cases it ran, and its latency."""

    retriever: str
    queries: int
    skipped: int
    recall: float
    ndcg: float
    hit: float
    mrr: float
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class EvalReport:
    """What :func:`evaluate` measured: one :class:`RetrieverScore` per retriever."""

    k: int
    cases: int
    scores: tuple[RetrieverScore, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"k": self.k, "cases": self.cases, "retrievers": [asdict(s) for s in self.scores]}

    def table(self) -> str:
        """The report as a plain-text table (what ``pgmem eval`` prints)."""
        k = self.k
        head = ("retriever", "queries", f"recall@{k}", f"ndcg@{k}", f"hit@{k}", "mrr", "p50 ms", "p99 ms")
        rows = [head] + [
            (
                s.retriever,
                f"{s.queries}" + (f" ({s.skipped} skipped)" if s.skipped else ""),
                f"{s.recall:.3f}",
                f"{s.ndcg:.3f}",
                f"{s.hit:.3f}",
                f"{s.mrr:.3f}",
                f"{s.p50_ms:.2f}",
                f"{s.p99_ms:.2f}",
            )
            for s in self.scores
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)


def _case(obj: Any, where: str) -> EvalCase:
    if not isinstance(obj, dict):
        raise InvalidInput(f"{where}: a case is a JSON object with memory, query and relevant")
    missing = [key for key in ("memory", "query", "relevant") if key not in obj]
    if missing:
        raise InvalidInput(f"{where}: missing {', '.join(missing)}")
    unknown = sorted(set(obj) - {"memory", "query", "relevant", *FILTERS})
    if unknown:
        raise InvalidInput(
            f"{where}: unknown key {unknown[0]!r} (known: memory, query, relevant, {', '.join(FILTERS)})"
        )
    relevant = obj["relevant"]
    if not isinstance(relevant, list):
        raise InvalidInput(f"{where}: relevant must be a list of message ids")
    filters: dict[str, Any] = {}
    for key in FILTERS:
        value = obj.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidInput(f"{where}: {key} must be a string")
        if key not in ("since", "until"):
            filters[key] = value
            continue
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"{where}: {key} must be an ISO time, got {value[:40]!r}") from None
        if moment.tzinfo is None:
            raise InvalidInput(f"{where}: {key} needs a time zone (e.g. 2026-01-01T00:00:00+00:00)")
        filters[key] = moment
    try:
        return EvalCase(obj["memory"], obj["query"], tuple(relevant), filters)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def read_cases(path: str | Path) -> list[EvalCase]:
    """The cases of a JSON-lines file (blank lines skipped). A bad line raises :class:`InvalidInput`
    naming the file and line; nothing is evaluated then."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"{path} is not UTF-8 text") from None
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{where}: not JSON ({exc.msg})") from None
        cases.append(_case(obj, where))
        if len(cases) > MAX_CASES:
            raise InvalidInput(f"{path} holds more than {MAX_CASES:,} cases")
    if not cases:
        raise InvalidInput(f"{path} holds no case")
    return cases


def _metrics(found: Sequence[str], relevant: tuple[str, ...], k: int) -> tuple[float, float, float, float]:
    """recall@k, NDCG@k, hit@k and reciprocal rank of one ranked list (first ``k`` of ``found``)."""
    wanted = set(relevant)
    top = list(dict.fromkeys(found))[:k]  # a retriever returning an id twice gets credit once
    ranks = [i for i, mid in enumerate(top) if mid in wanted]
    recall = len(ranks) / len(wanted)
    dcg = sum(1 / math.log2(i + 2) for i in ranks)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(wanted), k)))
    return recall, dcg / ideal, 1.0 if ranks else 0.0, 1 / (ranks[0] + 1) if ranks else 0.0


def _quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (p99 of 100 calls is the 99th smallest)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class _Embedded:
    """The client's embedder with the set's queries embedded once, beforehand, in batches: the latencies
    reported are the searches' own, not the embedding provider's."""

    def __init__(self, inner: Embedder, texts: Iterable[str]) -> None:
        import numpy as np

        self._inner = inner
        self.model = inner.model
        self.dimension = inner.dimension
        unique = list(dict.fromkeys(texts))
        batches = [inner.embed(unique[i : i + 256]) for i in range(0, len(unique), 256)]
        self._vectors = dict(zip(unique, np.concatenate(batches) if batches else [], strict=True))

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        missing = [t for t in texts if t not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, self._inner.embed(missing), strict=True))
        return np.stack([self._vectors[t] for t in texts]) if texts else self._inner.embed([])

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)


def _retriever(client: Client, name: str, k: int, cache: Any, embedder: Any) -> Callable[[EvalCase], list[str] | None]:
    """A function of a case returning the ids the retriever ranks first (None: it cannot run the case)."""
    if name == "vector":
        return lambda c: [
            h.message.id for h in client.vectors.search(c.query, k=k, memory=c.memory, embedder=embedder, **c.filters)
        ]
    if name == "hybrid":
        return lambda c: [
            h.message.id
            for h in client.vectors.hybrid_search(c.query, k=k, memory=c.memory, embedder=embedder, **c.filters)
        ]
    if name == "keyword":

        def keyword(c: EvalCase) -> list[str]:
            if not c.filters:
                return [m.id for m in client.messages.search_text(c.memory, c.query, limit=k)]
            hits = client.vectors.hybrid_search(c.query, k=k, memory=c.memory, w_vector=0, **c.filters)
            return [h.message.id for h in hits if h.score > 0]  # text hits only; the rest fill k unscored

        return keyword
    if name == "cache":
        return lambda c: (
            None if c.filters else [h.message.id for h in cache.search(c.memory, embedder.embed([c.query])[0], k)]
        )
    raise InvalidInput(f"unknown retriever {name!r}; retrievers are {', '.join(RETRIEVERS)}")


def evaluate(
    client: Client,
    cases: Iterable[EvalCase] | str | Path,
    *,
    k: int = 10,
    retrievers: Sequence[str] = RETRIEVERS,
    progress: Callable[[int], None] | None = None,
) -> EvalReport:
    """Run every case through each retriever and score it (see the module docstring).

    ``cases``: :class:`EvalCase` objects or the path of a JSON-lines file. ``k``: how many results each
    search returns and the cut-off of every metric (1-1000). ``progress`` is called with the number of
    searches done after each. A memory a case names but the namespace lacks is searched like any other
    (nothing found). Raises :class:`InvalidInput` for a bad set, k or retriever, before any search.
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1000:
        raise InvalidInput("k must be an integer from 1 to 1000")
    if isinstance(retrievers, str) or not retrievers:
        raise InvalidInput(f"retrievers must be a non-empty list of names from {', '.join(RETRIEVERS)}")
    for name in retrievers:
        if name not in RETRIEVERS:
            raise InvalidInput(f"unknown retriever {name!r}; retrievers are {', '.join(RETRIEVERS)}")
    todo = read_cases(cases) if isinstance(cases, str | Path) else list(cases)
    if not todo or not all(isinstance(c, EvalCase) for c in todo):
        raise InvalidInput("cases must be a non-empty list of EvalCase (or a JSON-lines file)")
    embedder = None
    if set(retrievers) & {"vector", "hybrid", "cache"}:
        embedder = _Embedded(client.embedder, (c.query for c in todo))
    cache = None
    if "cache" in retrievers:
        from pgmem.cache import VectorCache

        cache = VectorCache(client)
    try:
        scores = []
        for name in dict.fromkeys(retrievers):
            run = _retriever(client, name, k, cache, embedder)
            # One untimed search per memory first: the cache loads a memory on its first search, and
            # the first statements of a kind are planned and prepared.
            for case in {c.memory: c for c in todo if not c.filters}.values():
                run(case)
            sums = [0.0, 0.0, 0.0, 0.0]
            latencies: list[float] = []
            skipped = 0
            for case in todo:
                started = time.perf_counter()
                found = run(case)
                elapsed = time.perf_counter() - started
                if progress is not None:
                    progress(1)
                if found is None:
                    skipped += 1
                    continue
                latencies.append(elapsed * 1000)
                for i, value in enumerate(_metrics(found, case.relevant, k)):
                    sums[i] += value
            ran = len(latencies)
            means = [s / ran if ran else math.nan for s in sums]
            scores.append(
                RetrieverScore(
                    name,
                    ran,
                    skipped,
                    recall=means[0],
                    ndcg=means[1],
                    hit=means[2],
                    mrr=means[3],
                    p50_ms=_quantile(latencies, 0.5),
                    p99_ms=_quantile(latencies, 0.99),
                )
            )
    finally:
        if cache is not None:
            cache.close()
    return EvalReport(k, len(todo), tuple(scores))
