"""Pieces of the command line: the tables it prints (rich; cells formatted alike, numbers right-aligned),
the ages and times its options take, and what ``pgmem migrate`` says of the schema."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from pgmem.errors import InvalidInput

if TYPE_CHECKING:
    from pgmem.ops.drift import Difference

__all__ = ["cell", "cutoff", "print_table", "report_schema"]


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


def _differences(console: Console, groups: dict[str, list[Difference]]) -> None:
    for category, found in groups.items():
        console.print(f"  {category} ({len(found)})", highlight=False)
        for difference in found:
            line = f"    {difference.subject}: {difference.detail}"
            console.print(line, highlight=False, markup=False, soft_wrap=True)


def report_schema(console: Console, dsn: str, revision: str, *, repair: bool) -> bool:
    """Verify (``repair``: repair, then verify) the schema at ``dsn`` against its revision and print what
    differs, grouped by category; whether it matches (warnings aside)."""
    from pgmem.ops import migrate
    from pgmem.ops.drift import Verification

    notes: tuple[str, ...] = ()
    if repair:
        repaired = migrate.repair(dsn)
        fixed = Verification(repaired.fixed)
        if fixed.differences:
            console.print(f"repaired {fixed.summary(None)}:", highlight=False, soft_wrap=True)
            _differences(console, fixed.grouped())
        else:
            console.print("nothing to repair", highlight=False)
        found = repaired.after
        notes = repaired.before.notes
    else:
        found = migrate.verify(dsn)
    if found.drift:
        console.print(
            f"[red]FAIL[/red] the schema differs from what revision {revision} declares: {found.summary()}",
            highlight=False,
            soft_wrap=True,
        )
        _differences(console, found.grouped("drift"))
        if any(d.fix for d in found.drift):
            console.print(f"  -> {_REPAIR}", highlight=False, soft_wrap=True)
        if any(d.fix is None for d in found.drift):
            console.print("  -> pgmem does not repair some: change them by hand as each says", highlight=False)
    else:
        console.print(f"schema matches revision {revision}", highlight=False)
    if found.warnings:
        console.print(f"[yellow]warn[/yellow] {found.summary('warning')}:", highlight=False, soft_wrap=True)
        _differences(console, found.grouped("warning"))
    for note in dict.fromkeys((*notes, *found.notes)):
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    return not found.drift


_REPAIR = (
    "run `pgmem migrate --repair` as the tables' owner or a superuser: it brings the schema to its revision and "
    "keeps the data"
)
