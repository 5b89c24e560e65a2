"""Search recall you can watch, without I/O: what a sampled search records (``pgmem.recall_samples``,
migration 0019) so that its exact top-k can be run later, and recall@k.

A sample stores the query vector, the model, the search's filters (:func:`filters_doc`) and the rest of
its parameters (:func:`options_of`: a threshold's ``max_distance``; a hybrid search's text, fusion,
weights, depth), the strategy that served it and the ids it served. The checker
(``pgmem._async.recall``) rebuilds the filters (:func:`filters_from`), bounds them to the messages created
by the time of the sample (:func:`as_of`), and runs the same statement with the exact strategy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import fields, replace
from datetime import datetime
from typing import Any

from pgmem.planning.rows import MessageRow
from pgmem.planning.search.filters import SearchFilters
from pgmem.planning.search.metadata import MetadataFilter

__all__ = [
    "SAMPLED_KINDS",
    "as_of",
    "filters_doc",
    "filters_from",
    "options_of",
    "recall_at",
    "served_ids",
]

#: The searches that are sampled: those with a vector leg (keyword search has no index to lose recall).
SAMPLED_KINDS = ("vector", "batch", "hybrid")

#: Parameters of a search statement that are not options: the namespace, the query vectors, the retrieval
#: log's, and hybrid search's BM25 N (counted again when the sample is checked).
_NOT_OPTIONS = frozenset({"ns", "q", "qs", "log_label", "log_query", "log_queries", "scope_n"})

_ID = MessageRow._fields.index("id")
_DATES = ("since", "until")


def filters_doc(filters: SearchFilters) -> str:
    """The filters as JSON text (the sample's ``filters``): every field of :class:`SearchFilters` (so a
    field added to it is kept too), dates in ISO 8601, the metadata filter as its compiled conditions."""
    doc: dict[str, Any] = {}
    for spec in fields(filters):
        value = getattr(filters, spec.name)
        if spec.name == "metadata":
            value = None if filters.metadata_filter is None else [list(c) for c in filters.metadata_filter.conditions]
        elif isinstance(value, datetime):
            value = value.isoformat()
        doc[spec.name] = value
    return json.dumps(doc, ensure_ascii=False)


def filters_from(doc: Mapping[str, Any]) -> SearchFilters:
    """The filters :func:`filters_doc` wrote (a field it names that this pgmem's filters lack is ignored)."""
    known = {spec.name for spec in fields(SearchFilters)}
    values = {name: value for name, value in doc.items() if name in known}
    for name in _DATES:
        if values.get(name) is not None:
            values[name] = datetime.fromisoformat(values[name])
    conditions = values.get("metadata")
    values["metadata"] = (
        None if not conditions else MetadataFilter(tuple((str(f), str(o), str(v)) for f, o, v in conditions))
    )
    return SearchFilters(**values)


def as_of(filters: SearchFilters, sampled_at: datetime) -> SearchFilters:
    """``filters`` narrowed to the messages created by ``sampled_at``: the exact answer a check runs later
    leaves out what was written since the search (not what was deleted, nor vectors of older messages
    that were embedded since; see docs/analytics.md)."""
    until = sampled_at if filters.until is None else min(filters.until, sampled_at)
    since = filters.since if filters.since is None or filters.since <= until else until
    return replace(filters, since=since, until=until)


def options_of(params: Mapping[str, Any], filters: SearchFilters) -> str:
    """The parameters of a search statement that make its answer besides the filters and the query
    vector, as JSON text (the sample's ``options``). An infinite bound (a batch's ``max_distance`` without
    a threshold) is left out: JSON has no infinity, and no bound is what it means."""
    skip = _NOT_OPTIONS | set(filters.params())
    kept = {k: v for k, v in params.items() if k not in skip and not (isinstance(v, float) and math.isinf(v))}
    return json.dumps(kept, ensure_ascii=False, allow_nan=False)


def served_ids(kind: str, rows: Sequence[tuple[Any, ...]], count: int) -> list[list[str]]:
    """The message ids each query of a search served, in order: ``count`` lists (one but for a batch,
    whose rows start with the query's 1-based place)."""
    if kind != "batch":
        return [[str(row[_ID]) for row in rows]]
    out: list[list[str]] = [[] for _ in range(count)]
    for row in rows:
        out[int(row[0]) - 1].append(str(row[1 + _ID]))
    return out


def recall_at(served: Collection[str], exact: Collection[str]) -> float | None:
    """recall@k: the share of the exact top-k the served answer holds; 1 when both are empty, None when
    only the exact one is (the served messages are gone: nothing to measure)."""
    if not exact:
        return 1.0 if not served else None
    return len(set(served) & set(exact)) / len(set(exact))
