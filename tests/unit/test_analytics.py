"""Parsing of `--since` and the report's bucket widths (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgmem.errors import InvalidInput
from pgmem.ops.analytics import bucket_for, parse_since

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "back"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("2h", timedelta(hours=2)),
        ("7d", timedelta(days=7)),
        ("1w", timedelta(weeks=1)),
        (" 1.5 H ", timedelta(minutes=90)),
    ],
)
def test_since_as_a_span_back_from_now(text: str, back: timedelta) -> None:
    assert parse_since(text, now=NOW) == NOW - back


def test_since_as_a_time() -> None:
    assert parse_since("2026-11-01T08:30:00+02:00") == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)
    assert parse_since("2026-11-01 08:30") == datetime(2026, 11, 1, 8, 30, tzinfo=UTC)  # no offset: UTC
    assert parse_since(None) is None and parse_since("") is None


@pytest.mark.parametrize("text", ["yesterday", "5 parsecs", "-3h", "12"])
def test_since_rejects_anything_else(text: str) -> None:
    with pytest.raises(InvalidInput, match="--since"):
        parse_since(text)


def test_bucket_width_gives_at_most_60_buckets() -> None:
    assert bucket_for(None, None) == "100 milliseconds"
    assert bucket_for(NOW, NOW + timedelta(seconds=2)) == "100 milliseconds"
    assert bucket_for(NOW, NOW + timedelta(seconds=50)) == "1 second"
    assert bucket_for(NOW, NOW + timedelta(hours=3)) == "5 minutes"
    assert bucket_for(NOW, NOW + timedelta(days=3000)) == "30 days"
