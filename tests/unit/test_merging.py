"""The rules of merge= and threshold= (pgmem.merging), and the distance bound a threshold gives per metric."""

from __future__ import annotations

import math

import pytest

from pgmem.errors import InvalidInput
from pgmem.merging import check_merge
from pgmem.planning.distances import max_distance


@pytest.mark.parametrize(("merge", "threshold"), [(None, None), ("exact", None)])
def test_exact_merges_take_no_threshold(merge: str | None, threshold: None) -> None:
    assert check_merge(merge, threshold) is False


@pytest.mark.parametrize(
    ("merge", "threshold"),
    [("near", None), ("fuzzy", 0.9), (True, 0.9), (None, 0.9), ("exact", 0.9), ("near", math.nan), ("near", "0.9")],
)
def test_bad_merges(merge: object, threshold: object) -> None:
    with pytest.raises(InvalidInput):
        check_merge(merge, threshold)


def test_near_takes_any_finite_threshold_until_the_metric_is_known() -> None:
    assert check_merge("near", 0.9) is True
    assert check_merge("near", -3.0) is True  # an l2 or inner-product score


@pytest.mark.parametrize(
    ("distance", "threshold", "bound"),
    [("cosine", 0.9, 0.1), ("cosine", -1.0, 2.0), ("l2", -0.25, 0.25), ("l2", 0.0, 0.0), ("inner_product", 5.0, -5.0)],
)
def test_the_bound_per_metric(distance: str, threshold: float, bound: float) -> None:
    assert max_distance(distance, threshold) == pytest.approx(bound)


@pytest.mark.parametrize(("distance", "threshold"), [("cosine", 1.01), ("cosine", -1.5), ("l2", 0.1)])
def test_thresholds_outside_the_metrics_range(distance: str, threshold: float) -> None:
    with pytest.raises(InvalidInput):
        max_distance(distance, threshold)
