"""Pieces of the command line: the tables it prints (rich; cells formatted alike, numbers right-aligned) and
the ages and times its options take."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from rich.console import Console
from rich.table import Table

from pgmem.errors import InvalidInput

__all__ = ["cell", "cutoff", "print_table"]


def cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int):
        return f"{value:,}"
    if hasattr(value, "isoformat"):
        return str(value.isoformat(sep=" ", timespec="seconds"))
    return str(value)


def print_table(console: Console, title: str, rows: list[dict[str, object]], columns: dict[str, str]) -> None:
    """A rich table of ``rows`` (``columns``: key -> header); numbers right-aligned."""
    table = Table(title=title, title_justify="left")
    numeric = {k for k in columns if any(isinstance(r.get(k), int | float) for r in rows)}
    for key, header in columns.items():
        table.add_column(header, justify="right" if key in numeric else "left")
    for row in rows:
        table.add_row(*(cell(row.get(k)) for k in columns))
    console.print(table)


_AGE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$", re.IGNORECASE)
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def cutoff(text: str | None, option: str) -> timedelta | datetime | None:
    """A purge's cutoff: an age (``90s``, ``15m``, ``2h``, ``7d``, ``1w``; measured on the server's clock) or
    an ISO 8601 time (UTC when it has no offset)."""
    if text is None:
        return None
    match = _AGE_RE.match(text)
    if match:
        return timedelta(seconds=float(match.group(1)) * _AGE_UNITS[match.group(2).lower()])
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(f"{option} takes an age (90s, 15m, 2h, 7d, 1w) or an ISO 8601 time, got {text!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
