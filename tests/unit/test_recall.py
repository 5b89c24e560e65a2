"""What a sampled search records for its recall check (pgmem.planning.recall), without a database."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

from pgmem.planning.recall import as_of, filters_doc, filters_from, options_of, recall_at
from pgmem.planning.search.filters import SearchFilters

_T0 = datetime(2026, 1, 1, tzinfo=UTC)
_T1 = datetime(2026, 2, 1, tzinfo=UTC)


def test_filters_round_trip_through_json_metadata_and_dates_included() -> None:
    filters = SearchFilters("mem", "Act", "user", "bob", _T0, None, 7, {"topic": "x", "n": {"$gte": 3}})
    back = filters_from(json.loads(filters_doc(filters)))
    assert back == filters and back.params() == filters.params() and back.shape == filters.shape
    assert filters_from(json.loads(filters_doc(SearchFilters()))) == SearchFilters()


def test_the_check_is_bounded_to_the_messages_of_the_sample_time() -> None:
    assert as_of(SearchFilters("m"), _T1).until == _T1
    assert as_of(SearchFilters("m", until=_T0), _T1).until == _T0  # the search's own bound, when earlier
    later = as_of(SearchFilters("m", since=_T1, until=datetime(2026, 3, 1, tzinfo=UTC)), _T0)
    assert later.since == later.until == _T0  # nothing then: never an invalid range


def test_options_leave_out_the_filters_the_vector_and_an_infinite_bound() -> None:
    filters = SearchFilters("m")
    params = {"ns": "n", "q": [1.0], "k": 4, "max_distance": math.inf, "text": "t", **filters.params()}
    assert json.loads(options_of(params, filters)) == {"k": 4, "text": "t"}


def test_recall_at_k() -> None:
    assert recall_at(["a", "b", "c"], ["a", "c", "d", "e"]) == 0.5
    assert recall_at([], []) == 1.0
    assert recall_at(["a"], []) is None
