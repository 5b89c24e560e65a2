"""The deadline's bookkeeping (pgmem.resilience), without a database."""

from __future__ import annotations

import time

import pytest

from pgmem.errors import InvalidInput
from pgmem.resilience import check_timeout, deadline, paused, remaining


def test_an_inner_deadline_never_extends_the_outer_one() -> None:
    assert remaining() is None
    with deadline(1.0):
        with deadline(60.0):
            left = remaining()
            assert left is not None and left <= 1.0
        with deadline(0.1):
            left = remaining()
            assert left is not None and left <= 0.1
    assert remaining() is None


def test_paused_stops_the_clock() -> None:
    with deadline(0.5):
        with paused():
            assert remaining() is None
            time.sleep(0.6)  # the provider's time: not counted
        left = remaining()
        assert left is not None and left > 0.3


def test_bad_timeouts() -> None:
    assert check_timeout(None) is None
    assert check_timeout(2) == 2.0
    for bad in (0, -1, float("inf"), float("nan"), True, "3"):
        with pytest.raises(InvalidInput):
            check_timeout(bad)  # type: ignore[arg-type]
